/// Why a piece of text or a fen count is not an amount we will announce.
///
/// Every refusal has its own case, a short stable machine-readable ``code`` (returned on the socket protocol
/// inside ``AnnounceError/Code/invalidAmount``'s cause) and a human ``description`` that names the problem and
/// quotes the offending part of the input. Payloads hold the input as it was given (after trimming the
/// surrounding whitespace), or the offending part where a smaller one exists.
public enum AmountError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Nothing but whitespace, or only a currency sign ("", "  ", "¥").
    case empty
    /// A minus sign ("-5", "¥-5", "-¥5", "−5" with U+2212). Refunds are a separate flag, never a negative amount.
    case negative(String)
    /// The amount is zero ("0", "0.00", "0,000" is refused earlier as a leading zero).
    case zero
    /// More than two digits after the decimal point ("1.005", also "1.000"); the payload is the fraction digits.
    case tooManyDecimals(String)
    /// Scientific notation ("1e3", "1E3", "1.5e-3"), which only binary floats print.
    case exponent(String)
    /// A character that has no place in an amount: a letter, "+", inner whitespace, a full-width or other
    /// non-ASCII digit ("１２", "٣"), a second currency sign. The payload is the first such character.
    case invalidCharacter(Character)
    /// A European decimal comma ("12,34", "1,5", "1.000,50"): a comma after the decimal point, or a single comma
    /// followed by only one or two digits.
    case decimalComma(String)
    /// Commas that are not thousands separators between groups of exactly three digits ("1,0000", ",100",
    /// "1,,000", "1234,567", "100,"). The first group has one to three digits, every other group three.
    case misplacedComma(String)
    /// More than one decimal point ("1.2.3", "1.000.000").
    case multipleDecimalPoints(String)
    /// A decimal point with no digit before it (".5"). Write "0.5".
    case missingIntegerPart(String)
    /// A decimal point with no digit after it ("5."). Write "5" or "5.0".
    case missingFractionDigits(String)
    /// An integer part that starts with a zero but is not just "0" ("007", "00.5", "0,100").
    case leadingZero(String)
    /// Only punctuation, no digit at all (".", ",", "¥.").
    case noDigits(String)
    /// Above ``Amount/maximumFen`` (999,999,999,999.99), however many digits the text has.
    case tooLarge(String)

    /// A short stable machine-readable reason, e.g. `negative`, `too_many_decimals`.
    public var code: String {
        switch self {
        case .empty: "empty"
        case .negative: "negative"
        case .zero: "zero"
        case .tooManyDecimals: "too_many_decimals"
        case .exponent: "exponent"
        case .invalidCharacter: "invalid_character"
        case .decimalComma: "decimal_comma"
        case .misplacedComma: "misplaced_comma"
        case .multipleDecimalPoints: "multiple_decimal_points"
        case .missingIntegerPart: "missing_integer_part"
        case .missingFractionDigits: "missing_fraction_digits"
        case .leadingZero: "leading_zero"
        case .noDigits: "no_digits"
        case .tooLarge: "too_large"
        }
    }

    /// A message for people: what is wrong, with the offending part of the input quoted.
    public var description: String {
        switch self {
        case .empty:
            return "the amount is empty"
        case .negative(let input):
            return "the amount \(input.quoted) is negative; only positive amounts are announced"
        case .zero:
            return "the amount is zero; only amounts of at least 0.01 are announced"
        case .tooManyDecimals(let fraction):
            return "the amount has \(fraction.count) decimals (\(("." + fraction).quoted)); at most 2 are allowed"
        case .exponent(let input):
            return "the amount \(input.quoted) uses an exponent; write the digits out"
        case .invalidCharacter(let character):
            let scalars = character.unicodeScalars
                .map { "U+" + String($0.value, radix: 16, uppercase: true).leftPadded(to: 4) }
                .joined(separator: " ")
            if character.isNumber {
                return "the amount contains the non-ASCII digit \"\(character)\" (\(scalars)); "
                    + "only the digits 0-9 are accepted"
            }
            return "the amount contains the invalid character \"\(character)\" (\(scalars)); "
                + "only the digits 0-9, thousands commas, one decimal point and one leading ¥ are accepted"
        case .decimalComma(let input):
            return "the amount \(input.quoted) uses a comma as the decimal separator; "
                + "use \".\" for decimals and \",\" only between groups of three digits"
        case .misplacedComma(let input):
            return "the amount \(input.quoted) has a misplaced comma; "
                + "commas may only separate groups of three digits, as in \"1,234,567.89\""
        case .multipleDecimalPoints(let input):
            return "the amount \(input.quoted) has more than one decimal point"
        case .missingIntegerPart(let input):
            return "the amount \(input.quoted) has no digit before the decimal point; write a 0 before it"
        case .missingFractionDigits(let input):
            return "the amount \(input.quoted) ends with a decimal point and no digits after it"
        case .leadingZero(let input):
            return "the amount \(input.quoted) starts with a superfluous zero"
        case .noDigits(let input):
            return "the amount \(input.quoted) contains no digits"
        case .tooLarge(let input):
            return "the amount \(input.quoted) is too large; the maximum is 999,999,999,999.99"
        }
    }

    /// The domain error for this refusal: code `invalid_amount`, this message, and this error's ``code`` as cause.
    public var announceError: AnnounceError {
        AnnounceError(.invalidAmount, description, cause: code)
    }
}

extension String {
    /// The input as quoted in messages: at most 40 characters, so a megabyte of digits does not flood a log.
    fileprivate var quoted: String {
        if count <= 40 { return "\"\(self)\"" }
        return "\"\(prefix(20))…\(suffix(10))\" (\(count) characters)"
    }

    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
