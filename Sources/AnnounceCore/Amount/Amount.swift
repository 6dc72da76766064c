/// A positive amount of money in yuan and fen (1 yuan = 100 fen), from 0.01 to 999,999,999,999.99.
///
/// An amount is held as an exact count of fen and is never converted to or from a binary floating-point
/// number: text is parsed digit by digit with integer arithmetic.
///
/// ## Accepted text (``init(parsing:)``)
/// - Digits `0`-`9` (ASCII only), optionally a decimal point followed by one or two digits:
///   `"100"`, `"100.5"`, `"100.00"`, `"0.05"`.
/// - Thousands commas between groups of exactly three digits, the first group having one to three digits:
///   `"1,000.00"`, `"1,234,567.89"`. Grouping is optional (`"1234567.89"` is fine) but, if used, must be right.
/// - One leading currency sign, `¥` (U+00A5) or `￥` (U+FFE5), which may be followed by ASCII whitespace:
///   `"¥100"`, `"¥ 100"`.
/// - ASCII whitespace (space, tab, CR, LF, VT, FF) around the whole text is ignored.
///
/// ## Refused text (each with its own ``AmountError``)
/// - Empty or whitespace-only text, or a currency sign alone: ``AmountError/empty``.
/// - A minus sign anywhere before the digits (`"-5"`, `"¥-5"`, `"-¥5"`): ``AmountError/negative(_:)``.
/// - Zero (`"0"`, `"0.00"`): ``AmountError/zero``.
/// - More than two decimals, even zeros (`"1.005"`, `"1.000"`): ``AmountError/tooManyDecimals(_:)``.
/// - Exponents (`"1e3"`, `"1E3"`): ``AmountError/exponent(_:)``.
/// - Any other character: letters, `"+5"`, inner spaces (`"1 000"`), non-breaking or other non-ASCII spaces,
///   full-width (`"１２"`), Arabic-Indic or any other non-ASCII digits: ``AmountError/invalidCharacter(_:)``.
/// - A European decimal comma (`"12,34"`, `"1,00"`, `"1.000,50"`): ``AmountError/decimalComma(_:)``.
///   A single comma followed by only one or two digits is read as a decimal comma, so `"1,00"` is refused as
///   such rather than as a misplaced thousands comma; it is refused either way.
/// - Commas that do not separate groups of three (`"1,0000"`, `",100"`, `"1,,000"`, `"1234,567"`):
///   ``AmountError/misplacedComma(_:)``.
/// - Two decimal points (`"1.2.3"`): ``AmountError/multipleDecimalPoints(_:)``.
/// - No digit before the point (`".5"`): ``AmountError/missingIntegerPart(_:)``; amounts are written in full.
/// - No digit after the point (`"5."`): ``AmountError/missingFractionDigits(_:)``.
/// - Leading zeros (`"007"`, `"00.50"`, `"0,100"`): ``AmountError/leadingZero(_:)``. Only a lone `0` may start
///   an amount (`"0.05"`). Payment platforms never send padded amounts, so a padded one more likely comes from
///   a wrong field (an order number, a code) than from a price, and is refused rather than guessed at.
/// - Punctuation without digits (`"."`): ``AmountError/noDigits(_:)``.
/// - More than 999,999,999,999.99, including digit strings of any length (no arithmetic overflow is possible:
///   the digits are counted before they are added up): ``AmountError/tooLarge(_:)``.
///
/// ## Coding
/// `Codable` as the canonical string (`"1234.50"`); decoding accepts any text ``init(parsing:)`` accepts.
public struct Amount: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    /// The exact amount in fen (hundredths of a yuan), `1...maximumFen`.
    public let fen: Int64

    /// The largest amount, 999,999,999,999.99, in fen.
    public static let maximumFen: Int64 = 99_999_999_999_999
    /// The largest integer number of yuan.
    public static let maximumYuan: Int64 = maximumFen / 100

    /// An amount of `fen` hundredths of a yuan.
    /// - Throws: ``AmountError/zero``, ``AmountError/negative(_:)`` or ``AmountError/tooLarge(_:)`` (payloads
    ///   like `"-5 fen"`) unless `1 <= fen <= maximumFen`.
    public init(fen: Int64) throws(AmountError) {
        if fen == 0 { throw .zero }
        if fen < 0 { throw .negative("\(fen) fen") }
        if fen > Self.maximumFen { throw .tooLarge("\(fen) fen") }
        self.fen = fen
    }

    /// An amount of `yuan` yuan and `fen` fen (`fen` in `0...99`).
    /// - Throws: as ``init(fen:)``; a `fen` outside `0...99` is refused as ``AmountError/tooManyDecimals(_:)``
    ///   (or ``AmountError/negative(_:)`` when negative).
    public init(yuan: Int64, fen: Int = 0) throws(AmountError) {
        if yuan < 0 { throw .negative("\(yuan) yuan") }
        if fen < 0 { throw .negative("\(fen) fen") }
        if fen > 99 { throw .tooManyDecimals(String(fen)) }
        if yuan > Self.maximumYuan { throw .tooLarge("\(yuan) yuan") }
        try self.init(fen: yuan * 100 + Int64(fen))
    }

    /// Parses an amount written as text. See the type's documentation for exactly what is accepted.
    public init(parsing text: String) throws(AmountError) {
        self = try AmountTextParser.parse(text)
    }

    /// The integer part, in yuan.
    public var yuan: Int64 { fen / 100 }

    /// The fractional part, in fen: `0...99`.
    public var fenPart: Int { Int(fen % 100) }

    /// The canonical text: integer yuan, a point and exactly two digits, no grouping (`"1234.50"`, `"0.05"`).
    public var description: String {
        let part = fenPart
        return "\(yuan)." + (part < 10 ? "0\(part)" : "\(part)")
    }

    /// The canonical text with thousands commas (`"1,234.50"`), as people like to read it.
    public var groupedDescription: String {
        let digits = Array(String(yuan))
        var grouped = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { grouped.append(",") }
            grouped.append(digit)
        }
        let part = fenPart
        return grouped + "." + (part < 10 ? "0\(part)" : "\(part)")
    }

    public static func < (lhs: Amount, rhs: Amount) -> Bool { lhs.fen < rhs.fen }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            self = try Amount(parsing: text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "\(error)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// The text grammar of ``Amount/init(parsing:)``, on characters and integers only.
enum AmountTextParser {
    static func parse(_ text: String) throws(AmountError) -> Amount {
        let characters = Array(text)
        var start = characters.startIndex
        var end = characters.endIndex
        while start < end, characters[start].isASCIIWhitespace { start += 1 }
        while end > start, characters[end - 1].isASCIIWhitespace { end -= 1 }
        guard start < end else { throw .empty }
        let trimmed = String(characters[start..<end])

        // A minus sign and one currency sign, in either order, before the digits.
        var index = start
        var sawCurrencySign = false
        while index < end {
            let character = characters[index]
            if character == "-" || character == "\u{2212}" { throw .negative(trimmed) }
            guard !sawCurrencySign, character == "¥" || character == "￥" else { break }
            sawCurrencySign = true
            index += 1
            while index < end, characters[index].isASCIIWhitespace { index += 1 }
        }
        guard index < end else { throw .empty }
        let body = characters[index..<end]

        // Only digits, commas and points from here; an "e" after a digit is an exponent.
        var sawDigit = false
        for character in body {
            if character.asciiDigitValue != nil {
                sawDigit = true
            } else if character == "e" || character == "E", sawDigit {
                throw .exponent(trimmed)
            } else if character != "." && character != "," {
                throw .invalidCharacter(character)
            }
        }
        guard sawDigit else { throw .noDigits(trimmed) }

        let point = body.firstIndex(of: ".")
        if let point {
            if body[point...].contains(",") { throw .decimalComma(trimmed) }
            if body[(point + 1)...].contains(".") { throw .multipleDecimalPoints(trimmed) }
        }
        let integerPart = body[..<(point ?? body.endIndex)]
        let fractionPart = point.map { body[($0 + 1)...] } ?? body[body.endIndex...]

        let commas = integerPart.indices.filter { integerPart[$0] == "," }
        // "12,34", "1,5": a single comma followed by one or two digits is a European decimal comma.
        if point == nil, commas.count == 1, let comma = commas.first {
            if (1...2).contains(integerPart.endIndex - comma - 1) { throw .decimalComma(trimmed) }
        }
        if integerPart.isEmpty { throw .missingIntegerPart(trimmed) }
        if point != nil && fractionPart.isEmpty { throw .missingFractionDigits(trimmed) }
        if !commas.isEmpty {
            let groups = integerPart.split(separator: ",", omittingEmptySubsequences: false)
            let firstOK = groups.first.map { (1...3).contains($0.count) } ?? false
            guard firstOK, groups.dropFirst().allSatisfy({ $0.count == 3 }) else { throw .misplacedComma(trimmed) }
        }

        let integerDigits = integerPart.filter { $0 != "," }
        if integerDigits.count > 1, integerDigits.first == "0" { throw .leadingZero(trimmed) }
        if fractionPart.count > 2 { throw .tooManyDecimals(String(fractionPart)) }
        // Counting digits first makes overflow impossible: at most 12 digits are ever added up.
        if integerDigits.count > String(Amount.maximumYuan).count { throw .tooLarge(trimmed) }

        var yuan: Int64 = 0
        for character in integerDigits {
            guard let digit = character.asciiDigitValue else { throw .invalidCharacter(character) }
            yuan = yuan * 10 + digit
        }
        var fen: Int64 = 0
        for (position, character) in fractionPart.enumerated() {
            guard let digit = character.asciiDigitValue else { throw .invalidCharacter(character) }
            fen += digit * (position == 0 ? 10 : 1)
        }
        if yuan > Amount.maximumYuan { throw .tooLarge(trimmed) }
        if yuan == 0 && fen == 0 { throw .zero }
        return try Amount(fen: yuan * 100 + fen)
    }
}

extension Character {
    /// The value of an ASCII digit `0`-`9`; `nil` for anything else, including full-width and other
    /// Unicode digits that `isWholeNumber` would accept.
    fileprivate var asciiDigitValue: Int64? {
        guard utf8.count == 1, let byte = utf8.first, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else {
            return nil
        }
        return Int64(byte - UInt8(ascii: "0"))
    }

    /// Space, tab, LF, VT, FF or CR (and the CR LF pair, which Swift treats as one character).
    fileprivate var isASCIIWhitespace: Bool {
        unicodeScalars.allSatisfy { scalar in
            scalar == " " || scalar == "\t" || scalar == "\n" || scalar == "\r" || scalar == "\u{0B}"
                || scalar == "\u{0C}"
        }
    }
}
