import Testing

@testable import AnnounceCore

/// An independent reader of the Mandarin words back to fen, written from the numeral grammar (no code shared
/// with `MandarinReader`). Strict: returns nil for forms the reader must never produce (a bare 十 that is not
/// first, a unit without a digit, a 零 not followed by a digit, more than two decimals, a missing 元 …).
private enum ChineseNumerals {
    static let digits: [String: Int64] = [
        "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
    ]
    static let smallUnits: [String: Int64] = ["十": 10, "百": 100, "千": 1_000]

    /// The integer written by `tokens` (零 alone is 0).
    static func integer(_ tokens: ArraySlice<String>) -> Int64? {
        guard !tokens.isEmpty else { return nil }
        if tokens.count == 1 && tokens.first == "零" { return 0 }
        var total: Int64 = 0
        var section: Int64 = 0
        var pending: Int64? = nil
        var previous: String? = nil
        for (offset, token) in tokens.enumerated() {
            defer { previous = token }
            if let digit = digits[token] {
                if pending != nil { return nil }  // two digits in a row
                if digit == 0 {
                    guard offset + 1 < tokens.count, previous != "零" else { return nil }
                    continue
                }
                pending = digit
            } else if let unit = smallUnits[token] {
                if let digit = pending {
                    section += digit * unit
                } else if unit == 10 && offset == 0 {
                    section += 10
                } else {
                    return nil
                }
                pending = nil
            } else if token == "万" {
                let group = section + (pending ?? 0)
                guard group > 0, group < 10_000 else { return nil }
                total += group * 10_000
                section = 0
                pending = nil
            } else if token == "亿" {
                let group = total + section + (pending ?? 0)
                guard group > 0, group < 10_000 else { return nil }
                total = group * 100_000_000
                section = 0
                pending = nil
            } else {
                return nil
            }
        }
        return total + section + (pending ?? 0)
    }

    /// Fen of a decimal-style reading: integer, optionally 点 and one or two digits (no trailing 零), then 元.
    static func decimalReading(_ tokens: [String]) -> Int64? {
        guard tokens.last == "元" else { return nil }
        let body = tokens.dropLast()
        let point = body.firstIndex(of: "点")
        guard let yuan = integer(body[..<(point ?? body.endIndex)]) else { return nil }
        var fen: Int64 = 0
        if let point {
            let decimals = body[(point + 1)...]
            guard (1...2).contains(decimals.count), decimals.last != "零", !decimals.contains("两") else { return nil }
            for (position, token) in decimals.enumerated() {
                guard let digit = digits[token] else { return nil }
                fen += digit * (position == 0 ? 10 : 1)
            }
        } else if yuan == 0 {
            return nil
        }
        return yuan * 100 + fen
    }

    /// Fen of a units-style reading: [integer 元] [digit 角] [[零] digit 分].
    static func unitsReading(_ tokens: [String]) -> Int64? {
        var rest = tokens[...]
        var total: Int64 = 0
        if let yuanIndex = rest.firstIndex(of: "元") {
            guard let yuan = integer(rest[..<yuanIndex]), yuan > 0 else { return nil }
            total = yuan * 100
            rest = rest[(yuanIndex + 1)...]
        }
        if rest.count >= 2, let jiao = digits[rest[rest.startIndex]], jiao > 0, rest[rest.startIndex + 1] == "角" {
            total += jiao * 10
            rest = rest.dropFirst(2)
        }
        if rest.first == "零" {
            guard total >= 100, total % 100 == 0 else { return nil }  // 零 only between 元 and 分
            rest = rest.dropFirst()
        }
        if rest.count == 2, let fen = digits[rest[rest.startIndex]], fen > 0, rest.last == "分" {
            total += fen
            rest = rest.dropFirst(2)
        }
        return rest.isEmpty && total > 0 ? total : nil
    }

    /// How many 零 the integer must contain: one for each run of zeros between non-zero digits, except a run
    /// that only ends a four-digit group (the next digit being a 千) is silent: 级末尾的0不读.
    static func expectedZeroCount(_ value: Int64) -> Int {
        let digits = Array(String(value))
        var count = 0
        var index = 0
        while index < digits.count {
            guard digits[index] == "0" else {
                index += 1
                continue
            }
            let start = index
            while index < digits.count && digits[index] == "0" { index += 1 }
            guard index < digits.count else { break }  // trailing zeros
            let placeOfNext = digits.count - 1 - index
            let length = index - start
            if !(placeOfNext % 4 == 3 && length < 4) { count += 1 }
        }
        return count
    }
}

@Suite("Mandarin reader")
struct MandarinReaderTests {
    let reader = MandarinReader()

    private func read(_ text: String, style: ReadingStyle = .decimal, liang: Bool = false) throws -> String {
        let amount = try Amount(parsing: text)
        return reader.words(for: amount, options: ReadingOptions(style: style, liang: liang)).joined()
    }

    static let allowedTokens: Set<String> = [
        "零", "一", "二", "两", "三", "四", "五", "六", "七", "八", "九", "十", "百", "千", "万", "亿", "点", "元", "角", "分",
    ]

    @Test func identity() throws {
        #expect(reader.language == "zh")
        #expect(reader.defaultStyle == .decimal)
        let generic: any AmountReader = reader
        #expect(generic.words(for: try Amount(fen: 1_050)) == ["十", "点", "五", "元"])
    }

    // MARK: Integers (decimal style, the default)

    static let integers: [(String, String)] = [
        ("1", "一元"), ("2", "二元"), ("10", "十元"), ("11", "十一元"), ("15", "十五元"), ("20", "二十元"),
        ("22", "二十二元"), ("99", "九十九元"), ("100", "一百元"), ("101", "一百零一元"), ("110", "一百一十元"),
        ("111", "一百一十一元"), ("1001", "一千零一元"), ("1005", "一千零五元"), ("1010", "一千零一十元"),
        ("1091", "一千零九十一元"), ("1100", "一千一百元"), ("10010", "一万零一十元"), ("10100", "一万零一百元"),
        ("20000", "二万元"), ("100000", "十万元"), ("110000", "十一万元"), ("107000", "十万七千元"),
        ("100200", "十万零二百元"), ("1000000", "一百万元"), ("1000054", "一百万零五十四元"),
        ("1001000", "一百万一千元"), ("1020304", "一百零二万零三百零四元"), ("10001000", "一千万一千元"),
        ("100000001", "一亿零一元"), ("100010000", "一亿零一万元"), ("100001000", "一亿零一千元"),
        ("1000000000", "十亿元"), ("1000000010", "十亿零一十元"), ("10000000000", "一百亿元"),
        ("100000000000", "一千亿元"), ("100000000010", "一千亿零一十元"), ("1,000.00", "一千元"),
        ("2147483647", "二十一亿四千七百四十八万三千六百四十七元"),
        ("2147483648", "二十一亿四千七百四十八万三千六百四十八元"),
        ("4294967295", "四十二亿九千四百九十六万七千二百九十五元"),
        ("4294967296", "四十二亿九千四百九十六万七千二百九十六元"),
        ("999999999999", "九千九百九十九亿九千九百九十九万九千九百九十九元"),
    ]

    @Test("integer yuan", arguments: integers)
    func integerYuan(_ text: String, _ expected: String) throws {
        #expect(try read(text) == expected)
    }

    // MARK: Decimal style

    static let decimals: [(String, String)] = [
        ("0.05", "零点零五元"), ("0.5", "零点五元"), ("0.50", "零点五元"), ("0.01", "零点零一元"),
        ("0.10", "零点一元"), ("0.99", "零点九九元"), ("10.50", "十点五元"), ("10.05", "十点零五元"),
        ("100.00", "一百元"), ("100.5", "一百点五元"), ("12.34", "十二点三四元"), ("1.05", "一点零五元"),
        ("1091.10", "一千零九十一点一元"), ("¥1,000.00", "一千元"), ("0.2", "零点二元"),
        ("999999999999.99", "九千九百九十九亿九千九百九十九万九千九百九十九点九九元"),
    ]

    @Test("decimal style", arguments: decimals)
    func decimalStyle(_ text: String, _ expected: String) throws {
        #expect(try read(text) == expected)
    }

    @Test("tokens are single characters, one clip each")
    func tokens() throws {
        let words = reader.words(for: try Amount(parsing: "4294967296.05"), options: ReadingOptions())
        #expect(words == ["四", "十", "二", "亿", "九", "千", "四", "百", "九", "十", "六", "万", "七", "千", "二", "百",
            "九", "十", "六", "点", "零", "五", "元"])
    }

    // MARK: Units style

    static let units: [(String, String)] = [
        ("12.34", "十二元三角四分"), ("1.05", "一元零五分"), ("10.00", "十元"), ("0.05", "五分"), ("0.50", "五角"),
        ("12.30", "十二元三角"), ("100.04", "一百元零四分"), ("0.01", "一分"), ("0.11", "一角一分"),
        ("10.10", "十元一角"), ("1000", "一千元"), ("100000.05", "十万元零五分"), ("1091.91", "一千零九十一元九角一分"),
        ("0.2", "二角"), ("2", "二元"),
        ("999999999999.99", "九千九百九十九亿九千九百九十九万九千九百九十九元九角九分"),
    ]

    @Test("units style (元角分), no 整", arguments: units)
    func unitsStyle(_ text: String, _ expected: String) throws {
        #expect(try read(text, style: .units) == expected)
    }

    // MARK: 两

    static let liang: [(String, ReadingStyle, String)] = [
        ("200", .decimal, "两百元"), ("2000", .decimal, "两千元"), ("20000", .decimal, "两万元"),
        ("200000000", .decimal, "两亿元"), ("2222", .decimal, "两千两百二十二元"), ("22", .decimal, "二十二元"),
        ("20", .decimal, "二十元"), ("12", .decimal, "十二元"), ("102", .decimal, "一百零二元"),
        ("1200", .decimal, "一千两百元"), ("120000", .decimal, "十二万元"), ("10020000", .decimal, "一千零二万元"),
        ("22000000", .decimal, "两千两百万元"), ("220000000", .decimal, "两亿两千万元"),
        ("2000000000", .decimal, "二十亿元"), ("200020002", .decimal, "两亿零两万零二元"),
        ("2", .decimal, "两元"), ("2.00", .decimal, "两元"), ("2.5", .decimal, "二点五元"), ("0.2", .decimal, "零点二元"),
        ("0.22", .decimal, "零点二二元"), ("222.22", .decimal, "两百二十二点二二元"),
        ("2", .units, "两元"), ("2.50", .units, "两元五角"), ("0.20", .units, "两角"), ("0.02", .units, "两分"),
        ("1.22", .units, "一元两角两分"), ("2.02", .units, "两元零两分"), ("22.22", .units, "二十二元两角两分"),
        ("202", .units, "两百零二元"),
    ]

    @Test("两 where speakers say it", arguments: liang)
    func liangOption(_ text: String, _ style: ReadingStyle, _ expected: String) throws {
        #expect(try read(text, style: style, liang: true) == expected)
    }

    @Test("without the option there is never a 两")
    func noLiangByDefault() throws {
        for fen in AmountSamples.edgeFen {
            for style in ReadingStyle.allCases {
                let words = reader.words(for: try Amount(fen: fen), options: ReadingOptions(style: style))
                #expect(!words.contains("两"), "\(fen)")
            }
        }
    }

    // MARK: The bugs of other readers

    static let knownBugs: [(String, String)] = [
        ("10", "十元"), ("1091", "一千零九十一元"), ("100.00", "一百元"), ("1,000.00", "一千元"),
        ("2147483648", "二十一亿四千七百四十八万三千六百四十八元"),
        ("4294967296", "四十二亿九千四百九十六万七千二百九十六元"),
        ("999999999999.99", "九千九百九十九亿九千九百九十九万九千九百九十九点九九元"),
    ]

    @Test("what open-source readers get wrong", arguments: knownBugs)
    func knownBugsOfOthers(_ text: String, _ expected: String) throws {
        #expect(try read(text) == expected)
    }

    // MARK: Properties

    static let samples: [Int64] = AmountSamples.edgeFen + AmountSamples.random(count: 4_000, seed: 0x5EED_2024)

    @Test("every reading round-trips through an independent numeral parser", arguments: [false, true])
    func roundTrip(_ liang: Bool) throws {
        var failures: [String] = []
        for fen in Self.samples {
            let amount = try Amount(fen: fen)
            let decimal = reader.words(for: amount, options: ReadingOptions(style: .decimal, liang: liang))
            if ChineseNumerals.decimalReading(decimal) != fen { failures.append("\(amount) → \(decimal.joined())") }
            let units = reader.words(for: amount, options: ReadingOptions(style: .units, liang: liang))
            if ChineseNumerals.unitsReading(units) != fen { failures.append("\(amount) → \(units.joined())") }
        }
        reportPropertyFailures(failures)
    }

    @Test("readings are canonical: tokens, one 零 per zero run, no leading 一十, 两 only before a unit")
    func canonicalForm() throws {
        var failures: [String] = []
        for fen in Self.samples {
            let amount = try Amount(fen: fen)
            for style in ReadingStyle.allCases {
                for liang in [false, true] {
                    let words = reader.words(for: amount, options: ReadingOptions(style: style, liang: liang))
                    let text = words.joined()
                    func fail(_ why: String) { failures.append("\(amount) \(style) liang=\(liang) \(text): \(why)") }
                    if !words.allSatisfy(Self.allowedTokens.contains) { fail("unknown token") }
                    if text.contains("零零") { fail("零零") }
                    if text.hasPrefix("一十") { fail("leading 一十") }
                    for (index, word) in words.enumerated() where word == "零" {
                        let next = index + 1 < words.count ? words[index + 1] : ""
                        if amount.yuan > 0 || style == .units || index > 0 {
                            if ChineseNumerals.digits[next] == nil || next == "零" { fail("零 before \(next)") }
                        }
                    }
                    for (index, word) in words.enumerated() where word == "两" {
                        let next = index + 1 < words.count ? words[index + 1] : ""
                        if !["百", "千", "万", "亿", "元", "角", "分"].contains(next) { fail("两 before \(next)") }
                    }
                    for (index, word) in words.enumerated() where word == "二" && liang {
                        let next = index + 1 < words.count ? words[index + 1] : ""
                        if next == "百" || next == "千" { fail("二 before \(next)") }
                    }
                    if amount.yuan > 0 {
                        let integerEnd = words.firstIndex { $0 == "点" || $0 == "元" } ?? words.endIndex
                        let zeros = words[..<integerEnd].filter { $0 == "零" }.count
                        let expected = ChineseNumerals.expectedZeroCount(amount.yuan)
                        if zeros != expected { fail("\(zeros) 零, expected \(expected)") }
                    }
                    if style == .decimal && words.last != "元" { fail("no 元 at the end") }
                    if style == .units && !words.contains("元") && amount.yuan > 0 { fail("no 元") }
                }
            }
        }
        reportPropertyFailures(failures)
    }

    @Test("powers of ten, 10^k + 1 and all-nines")
    func powersOfTen() throws {
        let powers = ["一元", "十元", "一百元", "一千元", "一万元", "十万元", "一百万元", "一千万元", "一亿元", "十亿元", "一百亿元",
            "一千亿元"]
        let plusOne = ["二元", "十一元", "一百零一元", "一千零一元", "一万零一元", "十万零一元", "一百万零一元", "一千万零一元",
            "一亿零一元", "十亿零一元", "一百亿零一元", "一千亿零一元"]
        let nines = ["九元", "九十九元", "九百九十九元", "九千九百九十九元", "九万九千九百九十九元"]
        var power: Int64 = 1
        for index in 0..<12 {
            #expect(reader.words(for: try Amount(yuan: power), options: ReadingOptions()).joined() == powers[index])
            #expect(reader.words(for: try Amount(yuan: power + 1), options: ReadingOptions()).joined() == plusOne[index])
            if index < nines.count {
                let value = power * 10 - 1
                #expect(reader.words(for: try Amount(yuan: value), options: ReadingOptions()).joined() == nines[index])
            }
            power *= 10
        }
    }

    @Test("the independent parser itself reads textbook numerals")
    func oracleSanity() {
        func tokens(_ text: String) -> ArraySlice<String> { ArraySlice(text.map { String($0) }) }
        #expect(ChineseNumerals.integer(tokens("十")) == 10)
        #expect(ChineseNumerals.integer(tokens("一万零一十")) == 10_010)
        #expect(ChineseNumerals.integer(tokens("两亿零两万零二")) == 200_020_002)
        #expect(ChineseNumerals.integer(tokens("九千九百九十九亿九千九百九十九万九千九百九十九")) == 999_999_999_999)
        #expect(ChineseNumerals.integer(tokens("一百十")) == nil)
        #expect(ChineseNumerals.integer(tokens("一零零")) == nil)
        #expect(ChineseNumerals.expectedZeroCount(10_001_000) == 0)
        #expect(ChineseNumerals.expectedZeroCount(100_001_000) == 1)
        #expect(ChineseNumerals.expectedZeroCount(1_000_054) == 1)
        #expect(ChineseNumerals.expectedZeroCount(1_020_304) == 3)
        #expect(ChineseNumerals.decimalReading(["一", "百", "点", "零", "元"]) == nil)
        #expect(ChineseNumerals.unitsReading(["十", "二", "元", "三", "角", "四", "分"]) == 1_234)
    }
}
