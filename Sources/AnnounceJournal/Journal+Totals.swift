import AnnounceCore

/// Payment totals over the journal's whole life, for the metrics (`announce_payments_total`,
/// `announce_payments_spoken_fen_total`): counted from the jobs it holds, plus what housekeeping purged, which
/// `purge` adds to the `setting` table in the same transaction as it deletes — so the totals never go down.
/// Payments are `say` jobs (an amount), not replays, in a final state. Plain SQL, kept apart from the rest of the
/// journal's queries.
extension Journal {
    public struct PaymentTotals: Sendable, Equatable {
        /// Payments by final state (`spoken`, `failed`, `expired`, `cancelled`).
        public var byState: [String: Int] = [:]
        /// The amounts heard, in fen: payments, and refunds.
        public var spokenFen: Int64 = 0
        public var refundedFen: Int64 = 0
        public init() {}
    }

    /// The aggregate over a set of finished payment rows (`WHERE` appended); amounts are canonical ("100.00"),
    /// so dropping the point gives fen.
    static let paymentTotalsSQL = """
        SELECT state, COALESCE(refund, 0) AS refund, COUNT(*) AS n,
            COALESCE(SUM(CAST(REPLACE(amount, '.', '') AS INTEGER)), 0) AS fen
        FROM job WHERE amount IS NOT NULL AND replay_of IS NULL AND state NOT IN ('queued', 'playing')
        """
    static let purgedPrefix = "purged."

    /// The totals now: the rows held plus those purged before.
    public func paymentTotals() throws(AnnounceError) -> PaymentTotals {
        try read("read its payment totals") { (db) throws(SQLiteError) -> PaymentTotals in
            var totals = PaymentTotals()
            try Self.add(db, Self.paymentTotalsSQL + " GROUP BY state, refund", arguments: [], to: &totals)
            let purged = try db.rows(
                "SELECT name, value FROM setting WHERE name LIKE ?", arguments: [Self.purgedPrefix + "%"]
            ) { row in (row.text(0) ?? "", Int64(row.text(1) ?? "") ?? 0) }
            for (name, value) in purged {
                switch name.dropFirst(Self.purgedPrefix.count) {
                case "fen.payment": totals.spokenFen += value
                case "fen.refund": totals.refundedFen += value
                case let key where key.hasPrefix("payments."):
                    totals.byState[String(key.dropFirst("payments.".count)), default: 0] += Int(value)
                default: break
                }
            }
            return totals
        }
    }

    /// Within `purge`'s transaction, before it deletes: adds the payments among the rows about to go to the
    /// `purged.*` settings. `condition` is the purge's own `WHERE` on `job`, with its arguments.
    static func carryPaymentTotals(
        _ db: SQLiteConnection, condition: String, arguments: [any SQLiteBindable]
    ) throws(SQLiteError) {
        var totals = PaymentTotals()
        try add(db, paymentTotalsSQL + " AND (\(condition)) GROUP BY state, refund", arguments: arguments, to: &totals)
        var increments: [(String, Int64)] = totals.byState.map { ("payments.\($0.key)", Int64($0.value)) }
        increments += [("fen.payment", totals.spokenFen), ("fen.refund", totals.refundedFen)]
        for (name, amount) in increments where amount != 0 {
            try db.execute(
                """
                INSERT INTO setting (name, value) VALUES (?, ?)
                ON CONFLICT(name) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT)
                """,
                purgedPrefix + name, String(amount), amount)
        }
    }

    /// Adds the aggregate rows of `sql` (state, refund, n, fen) to `totals`.
    private static func add(
        _ db: SQLiteConnection, _ sql: String, arguments: [any SQLiteBindable], to totals: inout PaymentTotals
    ) throws(SQLiteError) {
        let rows = try db.rows(sql, arguments: arguments) { row in
            (state: row.text(0) ?? "", refund: row.bool(1) ?? false, count: row.int(2) ?? 0, fen: row.int64(3) ?? 0)
        }
        for row in rows {
            totals.byState[row.state, default: 0] += row.count
            if row.state == JobState.spoken.rawValue {
                if row.refund { totals.refundedFen += row.fen } else { totals.spokenFen += row.fen }
            }
        }
    }
}
