/// Durations as configuration files and flags write them: a number of seconds (`90`, `0.5`) or text with a unit
/// (`"500ms"`, `"90s"`, `"10m"`, `"24h"`, `"7d"`). The one parser of every duration setting of `announced` and
/// `announce-push`. Each setting has a range (docs/configuration.md, docs/push.md): a value outside it is a
/// configuration error naming the key, never a number too large for the integer it ends up in.
extension Duration {
    /// A duration setting's value as written: a number of seconds, or text.
    public enum Written: Sendable, Equatable {
        case seconds(Double)
        case text(String)
    }

    /// Why a written duration cannot be used, in words that follow the setting's name.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    static let units: [(suffix: String, seconds: Double)] = [
        ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400),
    ]

    /// Parses text: a number of seconds, or a number with a unit. Returns seconds, or nil if the text is not a
    /// finite, non-negative duration.
    public static func parseSeconds(_ text: String) -> Double? {
        let trimmed = Substring(text).drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }
        let written = String(trimmed.reversed())
        var number = Substring(written)
        var factor = 1.0
        // "ms" is tried before "s" and "m".
        if let unit = units.first(where: { written.hasSuffix($0.suffix) }) {
            number = written.dropLast(unit.suffix.count)
            while number.last == " " { number = number.dropLast() }
            factor = unit.seconds
        }
        guard let value = Double(number), value.isFinite, value >= 0 else { return nil }
        let seconds = value * factor
        return seconds.isFinite ? seconds : nil
    }

    /// A setting's seconds, if `written` is a duration within `range`.
    public static func seconds(
        _ written: Written, within range: ClosedRange<Double>
    ) throws(Problem) -> Double {
        let seconds: Double?
        switch written {
        case .seconds(let value): seconds = value.isFinite && value >= 0 ? value : nil
        case .text(let text): seconds = parseSeconds(text)
        }
        guard let seconds else {
            throw Problem(description: "must be a duration: seconds, or a string such as \"500ms\", \"90s\", \"24h\"")
        }
        if let problem = problem(seconds, within: range) { throw problem }
        return seconds
    }

    /// The problem with `seconds` for a setting whose range is `range`, if any.
    public static func problem(_ seconds: Double, within range: ClosedRange<Double>) -> Problem? {
        guard !range.contains(seconds) else { return nil }
        return Problem(description: "must be \(describe(range: range)), not \(plain(seconds))")
    }

    /// A range in words: `0 … 7d`, `1ms … 1d`.
    public static func describe(range: ClosedRange<Double>) -> String {
        "\(plain(range.lowerBound)) … \(plain(range.upperBound))"
    }

    /// Seconds written back the short way, quoted as the config file takes them: `0`, `"90s"`, `"10m"`, `"24h"`,
    /// `"7d"`, `"500ms"`.
    public static func describe(_ seconds: Double) -> String {
        seconds == 0 ? "0" : "\"\(plain(seconds))\""
    }

    /// `0`, `90s`, `10m`, `24h`, `7d`, `500ms`; a value too large for that, in seconds as Swift prints it.
    static func plain(_ seconds: Double) -> String {
        if seconds == 0 { return "0" }
        guard seconds.isFinite, seconds < 1e15 else { return "\(seconds)s" }
        for (suffix, factor) in [("d", 86_400.0), ("h", 3600.0), ("m", 60.0)]
        where seconds >= factor && seconds.truncatingRemainder(dividingBy: factor) == 0 {
            return "\(Int(seconds / factor))\(suffix)"
        }
        if seconds.rounded() == seconds { return "\(Int(seconds))s" }
        let milliseconds = (seconds * 1000).rounded()
        return milliseconds >= 1 ? "\(Int(milliseconds))ms" : "\(seconds)s"
    }
}
