/// Reads amounts in Mandarin, one Chinese character per token:
/// 零 一 二 两 三 四 五 六 七 八 九 十 百 千 万 亿 点 元 角 分.
///
/// ## Integer yuan
/// - Read in groups of four digits, from the highest: the 亿 group, the 万 group, then the units group.
///   Inside a group each non-zero digit is followed by its unit (千, 百, 十); trailing zeros are not spoken
///   (1000000 一百万, 10000000000 一百亿, 20000 二万).
/// - Any run of zeros between two non-zero digits is spoken as a single 零, also across group boundaries:
///   1005 一千零五, 10010 一万零一十, 100000001 一亿零一, 1000054 一百万零五十四, 100010000 一亿零一万.
/// - A 1 in the tens place is silent only at the very start of the number: 10 十, 15 十五, 100000 十万,
///   110000 十一万, 1000000000 十亿; elsewhere it is spoken: 110 一百一十, 1010 一千零一十, 1000000010 十亿零一十.
///
/// ## Decimal style (``ReadingStyle/decimal``, the default)
/// The integer (零 when it is 0), then 点 and each decimal digit with trailing zeros dropped, then 元.
/// Nothing is said for .00: 0.05 零点零五元, 0.5 零点五元, 10.50 十点五元, 100.00 一百元.
///
/// ## Units style (``ReadingStyle/units``)
/// Yuan with 元 (omitted when 0), then the first decimal with 角 and the second with 分, each omitted when 0;
/// a 零 stands between 元 and 分 when 角 is skipped: 12.34 十二元三角四分, 1.05 一元零五分, 100.04 一百元零四分,
/// 12.30 十二元三角, 0.50 五角, 0.05 五分. Whole amounts are just 十元: 整 ("exactly") belongs to written
/// cheques, not to the announcement, and voice packs need not record it.
///
/// ## 两 (``ReadingOptions/liang``)
/// Off by default (二 everywhere, which is always correct). When on, 2 is read 两 where speakers say it,
/// namely where it counts a unit directly:
/// - before 千 and 百 in any group: 200 两百, 2000 两千, 2222 两千两百二十二, 1200 一千两百, 22000000 两千两百万;
/// - when a whole 万 or 亿 group is just 2: 20000 两万, 200000000 两亿, 220000000 两亿两千万;
/// - when the whole yuan amount is 2 and 元 follows directly: 2.00 两元, and in units style 两元五角;
///   but 2.5 in decimal style is 二点五元 (a number followed by 点 keeps 二);
/// - in units style for 角 and 分: 0.20 两角, 0.02 两分, 1.22 一元两角两分.
/// 二 stays in the tens place (20 二十, 22 二十二, never 两十), as the last digit of a longer number
/// (12 十二, 102 一百零二, 120000 十二万, 10020000 一千零二万), and in decimals (0.2 零点二元).
public struct MandarinReader: AmountReader {
    public let language = "zh"
    public let defaultStyle = ReadingStyle.decimal

    public init() {}

    private static let digitWords = ["零", "一", "二", "三", "四", "五", "六", "七", "八", "九"]

    public func words(for amount: Amount, options: ReadingOptions) -> [String] {
        let yuan = amount.yuan
        let jiao = amount.fenPart / 10
        let fen = amount.fenPart % 10
        var words: [String] = []
        switch options.style {
        case .decimal:
            if options.liang && yuan == 2 && amount.fenPart == 0 {
                words.append("两")
            } else {
                words += yuan == 0 ? ["零"] : Self.integerWords(yuan, liang: options.liang)
            }
            if amount.fenPart > 0 {
                words.append("点")
                words.append(Self.digitWords[jiao])
                if fen > 0 { words.append(Self.digitWords[fen]) }
            }
            words.append("元")
        case .units:
            if yuan > 0 {
                words += options.liang && yuan == 2 ? ["两"] : Self.integerWords(yuan, liang: options.liang)
                words.append("元")
            }
            if jiao > 0 {
                words += [Self.unitDigit(jiao, liang: options.liang), "角"]
            }
            if fen > 0 {
                if jiao == 0 && yuan > 0 { words.append("零") }
                words += [Self.unitDigit(fen, liang: options.liang), "分"]
            }
        }
        return words
    }

    /// A count read before a measure word: 两 where it counts directly (2 两, 200 两百, 2000 两千, 20000 两万, as
    /// with ``ReadingOptions/liang``), 二 elsewhere (12 十二, 22 二十二); 0 is 零.
    public func words(forCount count: Int64) -> [String] {
        if count <= 0 { return ["零"] }
        if count == 2 { return ["两"] }
        return Self.integerWords(min(count, Amount.maximumYuan), liang: true)
    }

    public func word(forDigit digit: Int) -> String { Self.digitWords[max(0, min(9, digit))] }

    /// A digit counting 角 or 分.
    private static func unitDigit(_ digit: Int, liang: Bool) -> String {
        liang && digit == 2 ? "两" : digitWords[digit]
    }

    /// The words of a positive integer up to 9999_9999_9999.
    static func integerWords(_ value: Int64, liang: Bool) -> [String] {
        let groups: [(value: Int, unit: String?)] = [
            (Int(value / 1_0000_0000), "亿"),
            (Int(value / 1_0000 % 1_0000), "万"),
            (Int(value % 1_0000), nil),
        ]
        var words: [String] = []
        var zeroPending = false
        for group in groups {
            if group.value == 0 {
                if !words.isEmpty { zeroPending = true }
                continue
            }
            // Zeros between this group and the previous one: a skipped group, or this group's leading zeros.
            if !words.isEmpty && (zeroPending || group.value < 1000) { words.append("零") }
            zeroPending = false
            words += groupWords(group.value, first: words.isEmpty, liang: liang, beforeUnit: group.unit != nil)
            if let unit = group.unit { words.append(unit) }
        }
        return words
    }

    /// The words of one group of four digits (1...9999) without its 万/亿 unit and without leading zeros.
    /// `first` says that nothing has been spoken before the group, so a leading 一十 is read 十.
    private static func groupWords(_ group: Int, first: Bool, liang: Bool, beforeUnit: Bool) -> [String] {
        let places: [(digit: Int, unit: String?)] = [
            (group / 1000, "千"), (group / 100 % 10, "百"), (group / 10 % 10, "十"), (group % 10, nil),
        ]
        var words: [String] = []
        var zeroPending = false
        for (index, place) in places.enumerated() {
            if place.digit == 0 {
                if !words.isEmpty { zeroPending = true }
                continue
            }
            if zeroPending {
                words.append("零")
                zeroPending = false
            }
            let isTens = index == 2
            if isTens && place.digit == 1 && first && words.isEmpty {
                words.append("十")
                continue
            }
            let countsUnit = index < 2 || (index == 3 && group == 2 && beforeUnit)
            words.append(liang && place.digit == 2 && countsUnit ? "两" : digitWords[place.digit])
            if let unit = place.unit { words.append(unit) }
        }
        return words
    }
}
