/// A day's takings as the journal has them: payments heard, refunds heard (kept apart), and payments accepted that
/// day that were not heard. Sums are integer fen, never binary floating point.
public struct DayTotals: Sendable, Equatable, Codable {
    public struct Tally: Sendable, Equatable, Codable {
        public var count: Int
        public var fen: Int64

        public init(count: Int = 0, fen: Int64 = 0) {
            self.count = count
            self.fen = fen
        }

        /// The sum as yuan text with two decimals, `1234.50` (`0.00` for none).
        public var amount: String { DayTotals.yuan(fen) }

        private enum CodingKeys: String, CodingKey { case count, fen, amount }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            count = try container.decode(Int.self, forKey: .count)
            fen = try container.decode(Int64.self, forKey: .fen)
        }

        /// `{"count":3,"fen":123450,"amount":"1234.50"}`: the amount as text too, for people and shell scripts.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(count, forKey: .count)
            try container.encode(fen, forKey: .fen)
            try container.encode(amount, forKey: .amount)
        }
    }

    public var payments: Tally
    public var refunds: Tally
    /// Payments (not refunds) accepted that day and not heard: failed (muted, device gone…), expired, cancelled,
    /// interrupted — or still waiting.
    public var unheard: Int

    public init(payments: Tally = Tally(), refunds: Tally = Tally(), unheard: Int = 0) {
        self.payments = payments
        self.refunds = refunds
        self.unheard = unheard
    }

    /// Counts one payment (or refund) heard. Throws if the sum would no longer fit (more than 92 quadrillion fen).
    public mutating func add(fen: Int64, refund: Bool) throws(AnnounceError) {
        var tally = refund ? refunds : payments
        let (sum, overflow) = tally.fen.addingReportingOverflow(fen)
        guard !overflow, fen >= 0 else {
            throw AnnounceError(.internalError, "the day's total does not fit in 64-bit fen")
        }
        tally.fen = sum
        tally.count += 1
        if refund { refunds = tally } else { payments = tally }
    }

    /// `fen` as yuan with two decimals: 123450 → "1234.50", 5 → "0.05", 0 → "0.00".
    public static func yuan(_ fen: Int64) -> String {
        let part = fen % 100
        return "\(fen / 100)." + (part < 10 ? "0\(part)" : "\(part)")
    }
}

/// The reply of `today` (docs/protocol.md): which day, in which time zone, and its totals.
public struct DaySummary: Sendable, Equatable, Codable {
    /// The local date, `2026-11-23`.
    public var date: String
    /// The day's bounds, ISO 8601 UTC: local midnight to the next local midnight (23 or 25 hours on a day the
    /// clocks change).
    public var from: String
    public var to: String
    /// The terminal's time zone at the start of the day, as the C library names it (`CST`) and its offset
    /// (`+08:00`).
    public var zone: String
    public var utcOffset: String
    public var payments: DayTotals.Tally
    public var refunds: DayTotals.Tally
    public var unheard: Int

    public init(day: LocalDay, totals: DayTotals) {
        let bounds = day.bounds
        date = day.description
        from = WallClock.iso8601(ms: bounds.startMs)
        to = WallClock.iso8601(ms: bounds.endMs)
        zone = bounds.zone
        utcOffset = LocalDay.offsetText(seconds: bounds.utcOffsetSeconds)
        payments = totals.payments
        refunds = totals.refunds
        unheard = totals.unheard
    }

    public var totals: DayTotals { DayTotals(payments: payments, refunds: refunds, unheard: unheard) }
}
