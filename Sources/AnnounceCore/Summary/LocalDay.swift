#if canImport(Glibc)
import Glibc
#endif

/// A calendar day in the terminal's local time zone — what a shop owner means by "today" — and its bounds.
///
/// The time zone is the C library's: `TZ` if set, else `/etc/localtime` (timedatectl set-timezone), read through
/// `localtime_r` and `mktime`, which know daylight saving time: a day on which the clocks change is 23 or 25 hours
/// long. (Not Foundation's `TimeZone`/`Calendar`: they bring ICU, megabytes the terminal does not need.)
public struct LocalDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// The local day that contains the instant `ms` (milliseconds since 1970).
    public init(containing ms: Int64) {
        var seconds = time_t(ms >= 0 ? ms / 1000 : (ms - 999) / 1000)
        var fields = tm()
        localtime_r(&seconds, &fields)
        self.init(year: Int(fields.tm_year) + 1900, month: Int(fields.tm_mon) + 1, day: Int(fields.tm_mday))
    }

    /// Today, here.
    public static var today: LocalDay { LocalDay(containing: WallClock.nowMs) }

    /// `2026-11-23`: four-digit year, month 1…12, a day that month has.
    public init(parsing text: String) throws(AnnounceError) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
            parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
            (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day)
        else { throw AnnounceError(.badRequest, "date \"\(text)\" is not YYYY-MM-DD (e.g. 2026-11-23)") }
        self.init(year: year, month: month, day: day)
        // mktime would move 2026-02-30 to March: refuse a day the month does not have.
        guard LocalDay(containing: bounds.startMs + 12 * 3_600_000) == self else {
            throw AnnounceError(.badRequest, "date \"\(text)\" does not exist")
        }
    }

    public var description: String {
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(year)-\(two(month))-\(two(day))"
    }

    public struct Bounds: Sendable, Equatable {
        /// Local midnight, and the next local midnight, in milliseconds since 1970.
        public var startMs: Int64
        public var endMs: Int64
        /// The zone's abbreviation and its offset from UTC at the start of the day.
        public var zone: String
        public var utcOffsetSeconds: Int
    }

    /// Local midnight to the next local midnight. Where a clock change skips midnight itself, the day starts at
    /// the first minute that exists.
    public var bounds: Bounds {
        let (start, zone, offset) = Self.instant(year: year, month: month, day: day, hour: 0, minute: 0)
        let (end, _, _) = Self.instant(year: year, month: month, day: day + 1, hour: 0, minute: 0)
        return Bounds(startMs: start, endMs: end, zone: zone, utcOffsetSeconds: offset)
    }

    /// The next time the local clock reads `hour:minute` after `ms` (today's, or tomorrow's if it has passed).
    public static func next(hour: Int, minute: Int, after ms: Int64) -> Int64 {
        var day = LocalDay(containing: ms)
        for _ in 0..<3 {
            let (at, _, _) = instant(year: day.year, month: day.month, day: day.day, hour: hour, minute: minute)
            if at > ms { return at }
            day = LocalDay(containing: day.bounds.endMs + 12 * 3_600_000)
        }
        return ms + 86_400_000
    }

    /// `+08:00`, `-03:30`, `+00:00`.
    public static func offsetText(seconds: Int) -> String {
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let minutes = abs(seconds) / 60
        return (seconds < 0 ? "-" : "+") + two(minutes / 60) + ":" + two(minutes % 60)
    }

    /// The instant of a local time (normalised: day 32 is the next month's first), its zone and UTC offset.
    private static func instant(
        year: Int, month: Int, day: Int, hour: Int, minute: Int
    ) -> (ms: Int64, zone: String, offset: Int) {
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(month - 1)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_isdst = -1  // let the zone's rules say whether summer time is in force
        let seconds = mktime(&fields)
        let zone = fields.tm_zone.map { String(cString: $0) } ?? ""
        return (Int64(seconds) * 1000, zone, Int(fields.tm_gmtoff))
    }

    public static func < (lhs: LocalDay, rhs: LocalDay) -> Bool {
        (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day)
    }
}
