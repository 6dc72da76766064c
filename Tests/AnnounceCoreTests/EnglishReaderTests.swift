import Foundation
import Testing

@testable import AnnounceCore

/// An independent reader of English number words back to fen (no code shared with `EnglishReader`).
private enum EnglishNumerals {
    static let ones: [String: Int64] = [
        "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
        "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
        "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    ]
    static let tens: [String: Int64] = [
        "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    ]
    static let scales: [String: Int64] = ["thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000]

    /// The whole number the words say, or nil if they are not a number.
    static func number(_ words: ArraySlice<String>) -> Int64? {
        guard !words.isEmpty else { return nil }
        var total: Int64 = 0
        var current: Int64 = 0
        for word in words {
            if let value = ones[word] {
                current += value
            } else if let value = tens[word] {
                current += value
            } else if word == "hundred" {
                guard current > 0, current < 10 else { return nil }
                current *= 100
            } else if let scale = scales[word] {
                guard current > 0, current < 1_000 else { return nil }
                total += current * scale
                current = 0
            } else if word != "and" {
                return nil
            }
        }
        return total + current
    }

    /// Fen of a units-style reading: [number major] [and] [number minor].
    static func unitsReading(_ words: [String], _ currency: CurrencyWords) -> Int64? {
        var rest = words[...]
        var total: Int64 = 0
        if let majorIndex = rest.firstIndex(where: { $0 == currency.major || $0 == currency.majorPlural }) {
            guard let yuan = number(rest[..<majorIndex]), yuan > 0 else { return nil }
            guard rest[majorIndex] == (yuan == 1 ? currency.major : currency.majorPlural) else { return nil }
            total = yuan * 100
            rest = rest[(majorIndex + 1)...]
            if !rest.isEmpty {
                guard rest.first == "and" else { return nil }
                rest = rest.dropFirst()
            }
        }
        if !rest.isEmpty {
            guard let unit = rest.last, let fen = number(rest.dropLast()), (1...99).contains(fen) else { return nil }
            guard unit == (fen == 1 ? currency.minor : currency.minorPlural) else { return nil }
            total += fen
        }
        return total > 0 ? total : nil
    }

    /// Fen of a decimal-style reading: number [point digit [digit]] major.
    static func decimalReading(_ words: [String], _ currency: CurrencyWords) -> Int64? {
        guard let unit = words.last else { return nil }
        let body = words.dropLast()
        let point = body.firstIndex(of: "point")
        guard let yuan = number(body[..<(point ?? body.endIndex)]) else { return nil }
        var fen: Int64 = 0
        if let point {
            let decimals = body[(point + 1)...]
            guard (1...2).contains(decimals.count), decimals.last != "zero" else { return nil }
            for (position, word) in decimals.enumerated() {
                guard let digit = ones[word], digit < 10 else { return nil }
                fen += digit * (position == 0 ? 10 : 1)
            }
        }
        guard unit == (yuan == 1 && fen == 0 ? currency.major : currency.majorPlural) else { return nil }
        return yuan * 100 + fen
    }
}

@Suite("English reader")
struct EnglishReaderTests {
    let reader = EnglishReader()
    static let dollars = CurrencyWords(major: "dollar", majorPlural: "dollars", minor: "cent", minorPlural: "cents")

    private func read(_ text: String, style: ReadingStyle = .units, currency: CurrencyWords = CurrencyWords()) throws
        -> String
    {
        let amount = try Amount(parsing: text)
        return EnglishReader(currency: currency).words(for: amount, options: ReadingOptions(style: style))
            .joined(separator: " ")
    }

    @Test func identity() throws {
        #expect(reader.language == "en")
        #expect(reader.defaultStyle == .units)
        #expect(reader.currency == CurrencyWords())
        let generic: any AmountReader = reader
        #expect(generic.words(for: try Amount(fen: 10_530)) == ["one", "hundred", "and", "five", "yuan", "and", "thirty", "fen"])
    }

    // MARK: Units style (the default)

    static let units: [(String, String)] = [
        ("105.30", "one hundred and five yuan and thirty fen"),
        ("0.30", "thirty fen"),
        ("0.01", "one fen"),
        ("0.34", "thirty four fen"),
        ("1.00", "one yuan"),
        ("1.01", "one yuan and one fen"),
        ("2", "two yuan"),
        ("10", "ten yuan"),
        ("11", "eleven yuan"),
        ("19", "nineteen yuan"),
        ("40", "forty yuan"),
        ("99", "ninety nine yuan"),
        ("100", "one hundred yuan"),
        ("105", "one hundred and five yuan"),
        ("115", "one hundred and fifteen yuan"),
        ("999", "nine hundred and ninety nine yuan"),
        ("1000", "one thousand yuan"),
        ("1005", "one thousand and five yuan"),
        ("1091", "one thousand and ninety one yuan"),
        ("1100", "one thousand one hundred yuan"),
        ("1,000.00", "one thousand yuan"),
        ("2000001", "two million and one yuan"),
        ("1000100", "one million one hundred yuan"),
        ("1005000", "one million five thousand yuan"),
        ("1234567", "one million two hundred and thirty four thousand five hundred and sixty seven yuan"),
        ("1000000000", "one billion yuan"),
        ("1000000005", "one billion and five yuan"),
        ("12.34", "twelve yuan and thirty four fen"),
        ("2147483648", "two billion one hundred and forty seven million four hundred and eighty three thousand "
            + "six hundred and forty eight yuan"),
        ("4294967296", "four billion two hundred and ninety four million nine hundred and sixty seven thousand "
            + "two hundred and ninety six yuan"),
        ("999,999,999,999.99", "nine hundred and ninety nine billion nine hundred and ninety nine million "
            + "nine hundred and ninety nine thousand nine hundred and ninety nine yuan and ninety nine fen"),
    ]

    @Test("units style", arguments: units)
    func unitsStyle(_ text: String, _ expected: String) throws {
        #expect(try read(text) == expected)
    }

    // MARK: Decimal style

    static let decimals: [(String, String)] = [
        ("10.50", "ten point five yuan"),
        ("0.05", "zero point zero five yuan"),
        ("0.10", "zero point one yuan"),
        ("100.00", "one hundred yuan"),
        ("1.00", "one yuan"),
        ("1.5", "one point five yuan"),
        ("12.34", "twelve point three four yuan"),
        ("1005.01", "one thousand and five point zero one yuan"),
        ("999999999999.99", "nine hundred and ninety nine billion nine hundred and ninety nine million "
            + "nine hundred and ninety nine thousand nine hundred and ninety nine point nine nine yuan"),
    ]

    @Test("decimal style", arguments: decimals)
    func decimalStyle(_ text: String, _ expected: String) throws {
        #expect(try read(text, style: .decimal) == expected)
    }

    // MARK: Currency words

    static let currencies: [(String, ReadingStyle, String)] = [
        ("1", .units, "one dollar"), ("2", .units, "two dollars"), ("1.01", .units, "one dollar and one cent"),
        ("0.02", .units, "two cents"), ("21.21", .units, "twenty one dollars and twenty one cents"),
        ("1", .decimal, "one dollar"), ("1.5", .decimal, "one point five dollars"),
        ("0.01", .decimal, "zero point zero one dollars"), ("2", .decimal, "two dollars"),
    ]

    @Test("singular for exactly one, plural otherwise", arguments: currencies)
    func currencyWords(_ text: String, _ style: ReadingStyle, _ expected: String) throws {
        #expect(try read(text, style: style, currency: Self.dollars) == expected)
    }

    @Test func currencyWordsDecodeWithDefaults() throws {
        func decode(_ json: String) throws -> CurrencyWords {
            try JSONDecoder().decode(CurrencyWords.self, from: Data(json.utf8))
        }
        #expect(try decode("{}") == CurrencyWords())
        #expect(try decode(#"{"major": "euro", "minor": "cent", "minorPlural": "cents"}"#)
            == CurrencyWords(major: "euro", majorPlural: "euro", minor: "cent", minorPlural: "cents"))
        let encoded = try JSONEncoder().encode(Self.dollars)
        #expect(try JSONDecoder().decode(CurrencyWords.self, from: encoded) == Self.dollars)
    }

    @Test("the 两 option does not change English")
    func liangIgnored() throws {
        for fen in AmountSamples.edgeFen.prefix(200) {
            let amount = try Amount(fen: fen)
            for style in ReadingStyle.allCases {
                #expect(reader.words(for: amount, options: ReadingOptions(style: style, liang: true))
                    == reader.words(for: amount, options: ReadingOptions(style: style, liang: false)))
            }
        }
    }

    // MARK: Properties

    static let samples: [Int64] = AmountSamples.edgeFen + AmountSamples.random(count: 4_000, seed: 0xE9_2024)

    @Test("every reading round-trips through an independent word parser", arguments: [false, true])
    func roundTrip(_ customCurrency: Bool) throws {
        let currency = customCurrency ? Self.dollars : CurrencyWords()
        let reader = EnglishReader(currency: currency)
        var failures: [String] = []
        for fen in Self.samples {
            let amount = try Amount(fen: fen)
            let units = reader.words(for: amount, options: ReadingOptions(style: .units))
            if EnglishNumerals.unitsReading(units, currency) != fen {
                failures.append("\(amount) → \(units.joined(separator: " "))")
            }
            let decimal = reader.words(for: amount, options: ReadingOptions(style: .decimal))
            if EnglishNumerals.decimalReading(decimal, currency) != fen {
                failures.append("\(amount) → \(decimal.joined(separator: " "))")
            }
        }
        reportPropertyFailures(failures)
    }

    @Test("readings are well formed: known words only, British and, no stray zero")
    func wellFormed() throws {
        let currency = Self.dollars
        let reader = EnglishReader(currency: currency)
        let numberWords = Set(EnglishNumerals.ones.keys).union(EnglishNumerals.tens.keys)
        let vocabulary = numberWords.union(["hundred", "thousand", "million", "billion", "and", "point"])
            .union([currency.major, currency.majorPlural, currency.minor, currency.minorPlural])
        let belowHundred = numberWords.subtracting(["zero"])
        var failures: [String] = []
        for fen in Self.samples {
            let amount = try Amount(fen: fen)
            for style in ReadingStyle.allCases {
                let words = reader.words(for: amount, options: ReadingOptions(style: style))
                let text = words.joined(separator: " ")
                func fail(_ why: String) { failures.append("\(amount) \(style) \"\(text)\": \(why)") }
                if !words.allSatisfy(vocabulary.contains) { fail("unknown word") }
                for (index, word) in words.enumerated() {
                    let next = index + 1 < words.count ? words[index + 1] : ""
                    let previous = index > 0 ? words[index - 1] : ""
                    // "hundred" is followed by "and" whenever tens or units follow in the same group.
                    if word == "hundred" && belowHundred.contains(next) { fail("hundred \(next) without and") }
                    if word == "and" {
                        let afterCurrency = previous == currency.major || previous == currency.majorPlural
                        let afterNumberPart = ["hundred", "thousand", "million", "billion"].contains(previous)
                        if !(afterCurrency || afterNumberPart) { fail("and after \(previous)") }
                        if afterNumberPart && !belowHundred.contains(next) { fail("and before \(next)") }
                    }
                    // A compound like "thirty four" is two words, tens first; never "four thirty".
                    if EnglishNumerals.tens[word] != nil, let value = EnglishNumerals.ones[next], value >= 10 {
                        fail("\(word) \(next)")
                    }
                    if word == "zero" && style == .units { fail("zero in units style") }
                }
                // The British "and" before a last part below one hundred that follows a larger part.
                let last = amount.yuan % 1_000
                if amount.yuan >= 1_000 && last > 0 && last < 100 {
                    let majorIndex = words.firstIndex { $0 == currency.major || $0 == currency.majorPlural }
                    let numberEnd = style == .units ? (majorIndex ?? words.endIndex) : (words.firstIndex(of: "point")
                        ?? words.endIndex - 1)
                    let lastWordCount = last < 20 || last % 10 == 0 ? 1 : 2
                    let andIndex = numberEnd - lastWordCount - 1
                    if andIndex < 0 || words[andIndex] != "and" { fail("no and before the last part") }
                }
            }
        }
        reportPropertyFailures(failures)
    }

    @Test("the independent parser itself reads English numbers")
    func oracleSanity() {
        func words(_ text: String) -> ArraySlice<String> { ArraySlice(text.split(separator: " ").map(String.init)) }
        #expect(EnglishNumerals.number(words("one hundred and five")) == 105)
        #expect(EnglishNumerals.number(words("two million and one")) == 2_000_001)
        #expect(EnglishNumerals.number(words("nine hundred and ninety nine billion")) == 999_000_000_000)
        #expect(EnglishNumerals.number(words("hundred")) == nil)
        #expect(EnglishNumerals.unitsReading(["one", "yuan", "and", "one", "fen"], CurrencyWords()) == 101)
        #expect(EnglishNumerals.unitsReading(["two", "dollar"], Self.dollars) == nil)
        #expect(EnglishNumerals.decimalReading(["ten", "point", "five", "zero", "yuan"], CurrencyWords()) == nil)
    }
}
