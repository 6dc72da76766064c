/// How the fractional part of an amount is spoken.
public enum ReadingStyle: String, Sendable, CaseIterable, Codable {
    /// As a decimal number followed by the currency: 十点五元, "ten point five yuan".
    /// Trailing zero decimals are not spoken: 10.50 is 十点五元, 100.00 is 一百元.
    case decimal
    /// In currency units: 十二元三角四分, "twelve yuan and thirty four fen".
    case units
}

/// Choices a listener may make about how amounts are read.
public struct ReadingOptions: Sendable, Hashable {
    /// Decimal (点) or unit (元角分) reading of the fractional part.
    public var style: ReadingStyle
    /// Mandarin only: say 两 instead of 二 where speakers do (两百, 两千, 两万, 两亿, 两元, 两角, 两分);
    /// see ``MandarinReader`` for the exact rule. Other readers ignore it.
    public var liang: Bool

    public init(style: ReadingStyle = .decimal, liang: Bool = false) {
        self.style = style
        self.liang = liang
    }
}

/// Turns an amount into the words a voice pack has clips for.
///
/// A reader is pure: the same amount and options always give the same words, and every word it can return
/// is a token the voice pack of its ``language`` must have a clip for.
public protocol AmountReader: Sendable {
    /// The language code of the words: `"zh"`, `"en"`.
    var language: String { get }
    /// The style used when the caller does not choose one.
    var defaultStyle: ReadingStyle { get }
    /// The words of the amount INCLUDING its currency unit(s), one clip token per element.
    func words(for amount: Amount, options: ReadingOptions) -> [String]
    /// The words of a count of things, 0…999,999,999,999 (三 in 今日收款三笔; Mandarin counts 两笔, 两百笔).
    func words(forCount count: Int64) -> [String]
    /// The word of one digit, 0…9, read on its own as in a pickup or phone number (Mandarin 二, never 两).
    func word(forDigit digit: Int) -> String
}

extension AmountReader {
    /// The words of the amount in the reader's ``defaultStyle``.
    public func words(for amount: Amount) -> [String] {
        words(for: amount, options: ReadingOptions(style: defaultStyle))
    }
}
