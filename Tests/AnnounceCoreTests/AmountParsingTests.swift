import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceCore

/// The property checks' generator: the shared reproducible one (Tests/Support).
typealias AmountTestRandom = SeededGenerator

/// Amounts (in fen) for property checks: edge values plus pseudo-random ones of every length and zero pattern.
enum AmountSamples {
    /// Powers of ten, 10^k ± 1, 2·10^k, all-nines, digit-repeats, 2^31, 2^32 and the extremes, as yuan
    /// amounts with several fen endings.
    static let edgeFen: [Int64] = {
        var yuan: Set<Int64> = [0, 1, 2, 10, 11, 12, 20, 22, 99, 100, 101, 110, 200, 222, 2222, 1091, 1_000_054]
        yuan.formUnion([2_147_483_647, 2_147_483_648, 4_294_967_295, 4_294_967_296, 4_294_967_297])
        var power: Int64 = 1
        var nines: Int64 = 0
        for _ in 0..<12 {
            yuan.formUnion([power, power + 1, power - 1, 2 * power, power + power / 10, power + 10])
            nines = nines * 10 + 9
            yuan.insert(nines)
            for digit in Int64(1)...9 { yuan.insert(digit * nines / 9) }
            power *= 10
        }
        yuan.formUnion([Amount.maximumYuan, Amount.maximumYuan - 1, 100_000_000_000, 10_000_000_010])
        var fen: [Int64] = []
        for value in yuan.sorted() where value >= 0 && value <= Amount.maximumYuan {
            for part: Int64 in [0, 1, 2, 5, 10, 20, 22, 50, 55, 99] {
                let total = value * 100 + part
                if total >= 1 && total <= Amount.maximumFen { fen.append(total) }
            }
        }
        return fen
    }()

    /// `count` pseudo-random fen values: a third uniform over the whole range, a third of random length
    /// with many zeros (the hard cases for 零 and "and"), a third small.
    static func random(count: Int, seed: UInt64) -> [Int64] {
        var generator = AmountTestRandom(seed: seed)
        var values: [Int64] = []
        values.reserveCapacity(count)
        while values.count < count {
            let value: Int64
            switch values.count % 3 {
            case 0:
                value = Int64.random(in: 1...Amount.maximumFen, using: &generator)
            case 1:
                let length = Int.random(in: 1...14, using: &generator)
                var digits: Int64 = 0
                for _ in 0..<length {
                    let zero = Int.random(in: 0..<3, using: &generator) > 0
                    digits = digits * 10 + (zero ? 0 : Int64.random(in: 1...9, using: &generator))
                }
                value = digits
            default:
                value = Int64.random(in: 1...1_000_000, using: &generator)
            }
            if value >= 1 && value <= Amount.maximumFen { values.append(value) }
        }
        return values
    }
}

/// Records the first few failures of a property check as issues (and how many there were in all), so that a
/// broken property gives a readable report rather than thousands of lines.
func reportPropertyFailures(_ failures: [String], sourceLocation: SourceLocation = #_sourceLocation) {
    guard !failures.isEmpty else { return }
    for failure in failures.prefix(10) {
        Issue.record(Comment(rawValue: failure), sourceLocation: sourceLocation)
    }
    Issue.record(Comment(rawValue: "\(failures.count) failures in all"), sourceLocation: sourceLocation)
}

/// An independent formatter for the round trip: yuan with optional thousands commas, "." and the fen digits.
private func format(fen: Int64, commas: Bool, decimals: Int) -> String {
    let yuanDigits = Array(String(fen / 100))
    var integer = ""
    for (offset, digit) in yuanDigits.enumerated() {
        if commas && offset > 0 && (yuanDigits.count - offset) % 3 == 0 { integer += "," }
        integer.append(digit)
    }
    let part = Int(fen % 100)
    switch decimals {
    case 0: return integer
    case 1: return integer + "." + String(part / 10)
    default: return integer + "." + String(part / 10) + String(part % 10)
    }
}

@Suite("Amount parsing")
struct AmountParsingTests {
    // MARK: Accepted

    static let accepted: [(String, Int64)] = [
        ("100", 10_000),
        ("100.5", 10_050),
        ("100.50", 10_050),
        ("100.00", 10_000),
        ("100.0", 10_000),
        ("1,000.00", 100_000),
        ("1,000", 100_000),
        ("1,234,567.89", 123_456_789),
        ("1234567.89", 123_456_789),
        ("12,345.6", 1_234_560),
        ("123,456", 12_345_600),
        ("¥100", 10_000),
        ("￥100", 10_000),
        ("¥ 100", 10_000),
        ("¥1,000.00", 100_000),
        ("  100.00  ", 10_000),
        ("\t\n100\r\n", 10_000),
        (" ¥0.01 ", 1),
        ("0.05", 5),
        ("0.5", 50),
        ("0.50", 50),
        ("0.01", 1),
        ("1", 100),
        ("10", 1_000),
        ("1091", 109_100),
        ("4294967296", 429_496_729_600),
        ("2147483648.01", 214_748_364_801),
        ("999999999999.99", 99_999_999_999_999),
        ("999,999,999,999.99", 99_999_999_999_999),
        ("999999999999", 99_999_999_999_900),
    ]

    @Test("accepted text", arguments: accepted)
    func acceptsText(_ text: String, _ fen: Int64) throws {
        let amount = try Amount(parsing: text)
        #expect(amount.fen == fen)
    }

    // MARK: Refused

    static let refused: [(String, AmountError)] = [
        ("", .empty),
        ("   ", .empty),
        ("\t\r\n", .empty),
        ("¥", .empty),
        (" ￥ ", .empty),
        ("-5", .negative("-5")),
        ("-0.01", .negative("-0.01")),
        ("¥-5", .negative("¥-5")),
        ("-¥5", .negative("-¥5")),
        ("\u{2212}5", .negative("\u{2212}5")),
        ("0", .zero),
        ("0.00", .zero),
        ("0.0", .zero),
        ("¥0", .zero),
        ("1.005", .tooManyDecimals("005")),
        ("1.000", .tooManyDecimals("000")),
        ("0.001", .tooManyDecimals("001")),
        ("1e3", .exponent("1e3")),
        ("1E3", .exponent("1E3")),
        ("1.5e-3", .exponent("1.5e-3")),
        ("2E+5", .exponent("2E+5")),
        ("12a", .invalidCharacter("a")),
        ("abc", .invalidCharacter("a")),
        ("e5", .invalidCharacter("e")),
        ("+5", .invalidCharacter("+")),
        ("5-", .invalidCharacter("-")),
        ("1 000", .invalidCharacter(" ")),
        ("1\u{00A0}000", .invalidCharacter("\u{00A0}")),
        ("\u{00A0}100", .invalidCharacter("\u{00A0}")),
        ("１２", .invalidCharacter("１")),
        ("1２", .invalidCharacter("２")),
        ("٣", .invalidCharacter("٣")),
        ("१२", .invalidCharacter("१")),
        ("一百", .invalidCharacter("一")),
        ("1\u{0301}", .invalidCharacter("1\u{0301}")),
        ("¥¥100", .invalidCharacter("¥")),
        ("100¥", .invalidCharacter("¥")),
        ("$100", .invalidCharacter("$")),
        ("100元", .invalidCharacter("元")),
        ("0x10", .invalidCharacter("x")),
        ("NaN", .invalidCharacter("N")),
        ("inf", .invalidCharacter("i")),
        ("1_000", .invalidCharacter("_")),
        ("1'000", .invalidCharacter("'")),
        ("12,34", .decimalComma("12,34")),
        ("1,5", .decimalComma("1,5")),
        ("1,00", .decimalComma("1,00")),
        ("1.000,50", .decimalComma("1.000,50")),
        ("1.000.000,50", .decimalComma("1.000.000,50")),
        ("1,0000", .misplacedComma("1,0000")),
        (",100", .misplacedComma(",100")),
        ("1,,000", .misplacedComma("1,,000")),
        ("1234,567", .misplacedComma("1234,567")),
        ("100,", .misplacedComma("100,")),
        ("1,000,00", .misplacedComma("1,000,00")),
        ("1,00,000", .misplacedComma("1,00,000")),
        ("1,000,0000.00", .misplacedComma("1,000,0000.00")),
        ("1.2.3", .multipleDecimalPoints("1.2.3")),
        ("1.000.000", .multipleDecimalPoints("1.000.000")),
        ("1..5", .multipleDecimalPoints("1..5")),
        (".5", .missingIntegerPart(".5")),
        (".05", .missingIntegerPart(".05")),
        ("¥.5", .missingIntegerPart("¥.5")),
        ("5.", .missingFractionDigits("5.")),
        ("1,000.", .missingFractionDigits("1,000.")),
        ("007", .leadingZero("007")),
        ("00.50", .leadingZero("00.50")),
        ("0,100", .leadingZero("0,100")),
        ("00", .leadingZero("00")),
        (".", .noDigits(".")),
        ("..", .noDigits("..")),
        (",", .noDigits(",")),
        ("¥.", .noDigits("¥.")),
        ("1000000000000", .tooLarge("1000000000000")),
        ("1,000,000,000,000.00", .tooLarge("1,000,000,000,000.00")),
        ("9223372036854775807", .tooLarge("9223372036854775807")),
        ("9223372036854775808", .tooLarge("9223372036854775808")),
        ("18446744073709551616.00", .tooLarge("18446744073709551616.00")),
    ]

    @Test("refused text", arguments: refused)
    func refusesText(_ text: String, _ error: AmountError) {
        #expect(throws: error) { try Amount(parsing: text) }
    }

    static let codes: [(String, String)] = [
        ("", "empty"), ("-5", "negative"), ("0", "zero"), ("1.005", "too_many_decimals"), ("1e3", "exponent"),
        ("12a", "invalid_character"), ("１２", "invalid_character"), ("12,34", "decimal_comma"),
        ("1,0000", "misplaced_comma"), ("1.2.3", "multiple_decimal_points"), (".5", "missing_integer_part"),
        ("5.", "missing_fraction_digits"), ("007", "leading_zero"), (".", "no_digits"),
        ("1000000000000", "too_large"),
    ]

    @Test("each refusal has its stable code", arguments: codes)
    func refusalCode(_ text: String, _ code: String) {
        #expect(throws: AmountError.self) { try Amount(parsing: text) }
        do {
            _ = try Amount(parsing: text)
        } catch {
            #expect(error.code == code)
            #expect(error.announceError.code == .invalidAmount)
            #expect(error.announceError.cause == code)
            #expect(error.announceError.message == error.description)
        }
    }

    @Test("codes are distinct snake_case words")
    func codesAreDistinct() {
        let errors: [AmountError] = [
            .empty, .negative(""), .zero, .tooManyDecimals(""), .exponent(""), .invalidCharacter("x"),
            .decimalComma(""), .misplacedComma(""), .multipleDecimalPoints(""), .missingIntegerPart(""),
            .missingFractionDigits(""), .leadingZero(""), .noDigits(""), .tooLarge(""),
        ]
        let codes = errors.map(\.code)
        #expect(Set(codes).count == errors.count)
        for code in codes {
            #expect(code.allSatisfy { $0 == "_" || ("a"..."z").contains($0) }, "\(code)")
        }
    }

    static let messages: [(String, [String])] = [
        ("", ["empty"]),
        ("-5", ["\"-5\"", "negative"]),
        ("0.00", ["zero"]),
        ("1.005", ["\".005\"", "3 decimals", "at most 2"]),
        ("1e3", ["\"1e3\"", "exponent"]),
        ("12a", ["\"a\"", "U+0061", "invalid character"]),
        ("１２", ["\"１\"", "U+FF11", "non-ASCII digit", "0-9"]),
        ("12,34", ["\"12,34\"", "comma", "decimal"]),
        ("1,0000", ["\"1,0000\"", "misplaced comma", "three digits"]),
        ("1.2.3", ["\"1.2.3\"", "more than one decimal point"]),
        (".5", ["\".5\"", "before the decimal point"]),
        ("5.", ["\"5.\"", "no digits after"]),
        ("007", ["\"007\"", "zero"]),
        (".", ["\".\"", "no digits"]),
        ("1000000000000", ["\"1000000000000\"", "too large", "999,999,999,999.99"]),
    ]

    @Test("messages name the problem and quote the offending part", arguments: messages)
    func refusalMessage(_ text: String, _ fragments: [String]) {
        do {
            let amount = try Amount(parsing: text)
            Issue.record("\"\(text)\" was accepted as \(amount)")
        } catch {
            for fragment in fragments {
                #expect(error.description.contains(fragment), "\(error.description) lacks \(fragment)")
            }
        }
    }

    @Test("very long digit strings are refused as too large, without overflow", arguments: [13, 19, 20, 40, 100_000])
    func longDigitStrings(_ length: Int) {
        let nines = String(repeating: "9", count: length)
        #expect(throws: AmountError.tooLarge(nines)) { try Amount(parsing: nines) }
        let withFen = "1" + String(repeating: "0", count: length - 1) + ".01"
        #expect(throws: AmountError.tooLarge(withFen)) { try Amount(parsing: withFen) }
        do {
            _ = try Amount(parsing: nines)
        } catch {
            #expect(error.description.count < 200, "the message quotes a bounded part of the input")
        }
    }

    @Test("a long run of decimals is refused as too many decimals")
    func longDecimals() {
        let text = "1." + String(repeating: "0", count: 5_000)
        #expect(throws: AmountError.tooManyDecimals(String(repeating: "0", count: 5_000))) {
            try Amount(parsing: text)
        }
    }

    // MARK: Fen and yuan

    static let validFen: [Int64] = [1, 5, 99, 100, 101, 12_345, 429_496_729_600, 99_999_999_999_999]

    @Test("init(fen:) accepts 1...maximumFen", arguments: validFen)
    func fenInRange(_ fen: Int64) throws {
        #expect(try Amount(fen: fen).fen == fen)
    }

    static let invalidFen: [(Int64, AmountError)] = [
        (0, .zero),
        (-1, .negative("-1 fen")),
        (Int64.min, .negative("\(Int64.min) fen")),
        (100_000_000_000_000, .tooLarge("100000000000000 fen")),
        (Int64.max, .tooLarge("\(Int64.max) fen")),
    ]

    @Test("init(fen:) refuses zero, negative and too large", arguments: invalidFen)
    func fenOutOfRange(_ fen: Int64, _ error: AmountError) {
        #expect(throws: error) { try Amount(fen: fen) }
    }

    @Test func yuanAndFenInit() throws {
        #expect(try Amount(yuan: 12, fen: 34).fen == 1_234)
        #expect(try Amount(yuan: 0, fen: 1).fen == 1)
        #expect(try Amount(yuan: Amount.maximumYuan, fen: 99).fen == Amount.maximumFen)
        #expect(throws: AmountError.zero) { try Amount(yuan: 0) }
        #expect(throws: AmountError.negative("-1 yuan")) { try Amount(yuan: -1) }
        #expect(throws: AmountError.negative("-1 fen")) { try Amount(yuan: 1, fen: -1) }
        #expect(throws: AmountError.tooManyDecimals("100")) { try Amount(yuan: 1, fen: 100) }
        #expect(throws: AmountError.tooLarge("\(Int64.max) yuan")) { try Amount(yuan: Int64.max) }
    }

    static let parts: [(Int64, Int64, Int, String, String)] = [
        (1, 0, 1, "0.01", "0.01"),
        (50, 0, 50, "0.50", "0.50"),
        (100, 1, 0, "1.00", "1.00"),
        (123_450, 1_234, 50, "1234.50", "1,234.50"),
        (100_000, 1_000, 0, "1000.00", "1,000.00"),
        (12_345_678, 123_456, 78, "123456.78", "123,456.78"),
        (123_456_789, 1_234_567, 89, "1234567.89", "1,234,567.89"),
        (99_999_999_999_999, 999_999_999_999, 99, "999999999999.99", "999,999,999,999.99"),
    ]

    @Test("yuan, fenPart and the canonical text", arguments: parts)
    func partsAndDescription(_ fen: Int64, _ yuan: Int64, _ fenPart: Int, _ canonical: String, _ grouped: String)
        throws
    {
        let amount = try Amount(fen: fen)
        #expect(amount.yuan == yuan)
        #expect(amount.fenPart == fenPart)
        #expect(amount.description == canonical)
        #expect("\(amount)" == canonical)
        #expect(amount.groupedDescription == grouped)
        #expect(try Amount(parsing: canonical) == amount)
        #expect(try Amount(parsing: grouped) == amount)
    }

    @Test func comparableAndHashable() throws {
        let small = try Amount(fen: 5)
        let large = try Amount(parsing: "1,000.00")
        #expect(small < large)
        #expect(try Amount(parsing: "1000") == large)
        #expect(Set([large, try Amount(fen: 100_000), small]).count == 2)
        #expect([large, small].max() == large)
    }

    // MARK: Codable

    @Test func encodesAsCanonicalString() throws {
        let data = try JSONEncoder().encode([try Amount(parsing: "¥1,234.5")])
        #expect(String(decoding: data, as: UTF8.self) == #"["1234.50"]"#)
    }

    @Test func decodesFromAnyAcceptedText() throws {
        let json = #"["1234.50", "¥1,000", " 0.05 ", "100.5"]"#
        let amounts = try JSONDecoder().decode([Amount].self, from: Data(json.utf8))
        #expect(amounts.map(\.fen) == [123_450, 100_000, 5, 10_050])
    }

    @Test("decoding refuses what parsing refuses, and numbers", arguments: [#"["-5"]"#, #"["1.5e2"]"#, #"[100]"#])
    func decodingRefuses(_ json: String) {
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([Amount].self, from: Data(json.utf8)) }
    }

    @Test func decodingErrorCarriesTheReason() {
        do {
            _ = try JSONDecoder().decode([Amount].self, from: Data(#"["1e3"]"#.utf8))
            Issue.record("decoded an exponent")
        } catch let DecodingError.dataCorrupted(context) {
            #expect(context.debugDescription.contains("exponent"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    // MARK: Properties

    @Test("random amounts formatted every way parse back exactly")
    func roundTrip() throws {
        var failures: [String] = []
        let samples = AmountSamples.edgeFen + AmountSamples.random(count: 5_000, seed: 0xA11)
        for fen in samples {
            let amount = try Amount(fen: fen)
            var texts = [amount.description, amount.groupedDescription]
            for commas in [false, true] {
                let full = format(fen: fen, commas: commas, decimals: 2)
                texts += [full, "¥" + full, "￥" + full, " ¥ " + full + "\n"]
                if fen % 10 == 0 { texts.append(format(fen: fen, commas: commas, decimals: 1)) }
                if fen % 100 == 0 { texts.append("¥" + format(fen: fen, commas: commas, decimals: 0)) }
            }
            for text in texts {
                do {
                    let parsed = try Amount(parsing: text)
                    if parsed.fen != fen { failures.append("\(text) → \(parsed.fen), expected \(fen)") }
                } catch {
                    failures.append("\(text) refused: \(error)")
                }
            }
        }
        reportPropertyFailures(failures)
    }

    @Test("random text over the amount alphabet: accepted exactly when an independent grammar matches")
    func randomTextAgreesWithGrammar() throws {
        // The grammar, written as a regular expression over ASCII only.
        let grammar = try Regex(#"^[ \t]*[¥]?[ \t]*(0|[1-9][0-9]{0,2}(,[0-9]{3})+|[1-9][0-9]*)(\.[0-9]{1,2})?[ \t]*$"#)
        let alphabet: [Character] = Array("0000111229999,,..¥ e-a")
        var generator = AmountTestRandom(seed: 0xBEEF)
        var failures: [String] = []
        var acceptedCount = 0
        for _ in 0..<20_000 {
            let length = Int.random(in: 1...12, using: &generator)
            let text = String((0..<length).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
            let expected = Self.grammarValue(text, grammar: grammar)
            let actual = try? Amount(parsing: text).fen
            if expected != actual {
                let want = expected.map(String.init) ?? "refusal"
                failures.append("\"\(text)\": expected \(want), got \(actual.map(String.init) ?? "refusal")")
            }
            if actual != nil { acceptedCount += 1 }
        }
        reportPropertyFailures(failures)
        #expect(acceptedCount > 500, "the generator exercises accepted text too (\(acceptedCount))")
    }

    /// The value of text the regular expression accepts, by independent integer arithmetic; nil when the
    /// grammar, the zero rule or the range refuses it.
    private static func grammarValue(_ text: String, grammar: Regex<AnyRegexOutput>) -> Int64? {
        guard text.wholeMatch(of: grammar) != nil else { return nil }
        let kept = text.filter { $0 != " " && $0 != "\t" && $0 != "¥" && $0 != "," }
        let halves = kept.split(separator: ".", omittingEmptySubsequences: false)
        guard let integer = halves.first, integer.count <= 12 else { return nil }
        let fraction = halves.count > 1 ? String(halves[1]) : ""
        let padded = fraction + String(repeating: "0", count: 2 - fraction.count)
        guard let yuan = Int64(integer), let fen = Int64(padded) else { return nil }
        let total = yuan * 100 + fen
        return total > 0 ? total : nil
    }
}
