/// The names of a currency's units in a voice pack: one token (one clip) each, singular and plural.
///
/// Decoding fills in what a manifest leaves out: `major` defaults to "yuan", `majorPlural` to `major`,
/// `minor` to "fen" and `minorPlural` to `minor`; so `{"major": "euro", "minor": "cent", "minorPlural": "cents"}`
/// is enough for euros.
public struct CurrencyWords: Sendable, Hashable, Codable {
    /// The main unit for exactly one: "yuan", "dollar".
    public var major: String
    /// The main unit for any other count: "yuan", "dollars".
    public var majorPlural: String
    /// The hundredth unit for exactly one: "fen", "cent".
    public var minor: String
    /// The hundredth unit for any other count: "fen", "cents".
    public var minorPlural: String

    public init(
        major: String = "yuan", majorPlural: String = "yuan", minor: String = "fen", minorPlural: String = "fen"
    ) {
        self.major = major
        self.majorPlural = majorPlural
        self.minor = minor
        self.minorPlural = minorPlural
    }

    private enum CodingKeys: String, CodingKey {
        case major, majorPlural, minor, minorPlural
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        major = try container.decodeIfPresent(String.self, forKey: .major) ?? "yuan"
        majorPlural = try container.decodeIfPresent(String.self, forKey: .majorPlural) ?? major
        minor = try container.decodeIfPresent(String.self, forKey: .minor) ?? "fen"
        minorPlural = try container.decodeIfPresent(String.self, forKey: .minorPlural) ?? minor
    }
}

/// Reads amounts in British English, one lowercase word per token: zero … nineteen, twenty … ninety, hundred,
/// thousand, million, billion, and, point, and the four ``CurrencyWords``.
///
/// ## Numbers
/// - Groups of three digits with billion, million, thousand; compound tens are two tokens ("thirty", "four").
/// - British "and": after "hundred" when tens or units follow (one hundred and five), and before a final
///   part below one hundred that follows a larger part (one thousand and five, two million and one).
///   1234567 is "one million two hundred and thirty four thousand five hundred and sixty seven".
///
/// ## Units style (``ReadingStyle/units``, the default)
/// Yuan with the major word (omitted when 0), then "and" and the fen with the minor word (omitted when 0):
/// 105.30 "one hundred and five yuan and thirty fen", 0.30 "thirty fen", 1.00 "one yuan".
/// The singular word is used for exactly one, the plural otherwise.
///
/// ## Decimal style (``ReadingStyle/decimal``)
/// The number (zero when below one), "point" and each decimal digit with trailing zeros dropped, then the
/// major word, singular only for exactly 1.00: 10.50 "ten point five yuan", 0.05 "zero point zero five yuan".
public struct EnglishReader: AmountReader {
    public let language = "en"
    public let defaultStyle = ReadingStyle.units
    public let currency: CurrencyWords

    public init(currency: CurrencyWords = CurrencyWords()) {
        self.currency = currency
    }

    private static let small = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    ]
    private static let tens = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

    public func words(for amount: Amount, options: ReadingOptions) -> [String] {
        let yuan = amount.yuan
        let fen = amount.fenPart
        var words: [String] = []
        switch options.style {
        case .units:
            if yuan > 0 {
                words += Self.cardinal(yuan)
                words.append(yuan == 1 ? currency.major : currency.majorPlural)
            }
            if fen > 0 {
                if yuan > 0 { words.append("and") }
                words += Self.cardinal(Int64(fen))
                words.append(fen == 1 ? currency.minor : currency.minorPlural)
            }
        case .decimal:
            words += Self.cardinal(yuan)
            if fen > 0 {
                words.append("point")
                words.append(Self.small[fen / 10])
                if fen % 10 > 0 { words.append(Self.small[fen % 10]) }
            }
            words.append(yuan == 1 && fen == 0 ? currency.major : currency.majorPlural)
        }
        return words
    }

    /// A count as a cardinal number: "three", "two hundred and five".
    public func words(forCount count: Int64) -> [String] {
        Self.cardinal(max(0, min(count, Amount.maximumYuan)))
    }

    public func word(forDigit digit: Int) -> String { Self.small[max(0, min(9, digit))] }

    /// The words of a whole number from 0 to 999,999,999,999.
    static func cardinal(_ value: Int64) -> [String] {
        if value == 0 { return ["zero"] }
        let scales: [(divisor: Int64, word: String)] = [
            (1_000_000_000, "billion"), (1_000_000, "million"), (1_000, "thousand"),
        ]
        var words: [String] = []
        for scale in scales {
            let group = Int(value / scale.divisor % 1_000)
            if group > 0 { words += belowThousand(group) + [scale.word] }
        }
        let last = Int(value % 1_000)
        if last > 0 {
            if !words.isEmpty && last < 100 { words.append("and") }
            words += belowThousand(last)
        }
        return words
    }

    /// The words of 1...999.
    private static func belowThousand(_ value: Int) -> [String] {
        var words: [String] = []
        if value >= 100 {
            words += [small[value / 100], "hundred"]
            if value % 100 > 0 { words.append("and") }
        }
        let rest = value % 100
        if rest >= 20 {
            words.append(tens[rest / 10])
            if rest % 10 > 0 { words.append(small[rest % 10]) }
        } else if rest > 0 {
            words.append(small[rest])
        }
        return words
    }
}
