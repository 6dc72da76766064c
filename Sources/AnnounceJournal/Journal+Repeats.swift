import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A repeating notice as the journal keeps it: its plan, how far it got, how it ended. Its times are ordinary jobs
/// (order ids `<order>#<time>`), so what is heard is journaled as any job is; this row says what comes next.
public struct RepeatRecord: Sendable, Equatable {
    public var plan: RepeatPlan
    public var text: String?
    public var state: RepeatState
    /// Times that have ended, and of those the ones heard to their end.
    public var played: Int
    public var heard: Int
    /// Wall-clock milliseconds.
    public var startedAt: Int64
    public var endedAt: Int64?
    public var error: AnnounceError?

    public init(plan: RepeatPlan, text: String?, startedAt: Int64) {
        self.plan = plan
        self.text = text
        state = .repeating
        played = 0
        heard = 0
        self.startedAt = startedAt
    }

    public var info: RepeatInfo {
        RepeatInfo(
            order: plan.order, state: state, text: text, every: Double(plan.everyMs) / 1000, times: plan.times,
            played: played, heard: heard, startedAt: WallClock.iso8601(ms: startedAt),
            endedAt: endedAt.map(WallClock.iso8601(ms:)), error: error.map(ErrorInfo.init))
    }
}

extension Journal {
    /// Records a new repeat, on disk when this returns; or, if one with its order id is known (a start sent again),
    /// returns that one and records nothing.
    public func beginRepeat(_ record: RepeatRecord) throws(AnnounceError) -> RepeatRecord? {
        guard ensureReserve() else {
            throw AnnounceError(.journal, "the disk holding the journal \(path) is full: nothing new is accepted")
        }
        let spec = String(decoding: (try? JSONEncoder().encode(record.plan)) ?? Data(), as: UTF8.self)
        return try write("record the repeat") { (db) throws(SQLiteError) -> RepeatRecord? in
            if let known = try Self.repeatRow(db, where: "order_id = ?", [record.plan.order]).first { return known }
            try db.execute(
                """
                INSERT INTO "repeat" (order_id, spec, text, state, played, heard, started_at)
                VALUES (?, ?, ?, ?, 0, 0, ?)
                """,
                record.plan.order, spec, record.text, record.state.rawValue, record.startedAt)
            return nil
        }
    }

    /// Records how far a repeat got, or how it ended.
    public func updateRepeat(_ record: RepeatRecord) throws(AnnounceError) {
        try write("record the repeat") { (db) throws(SQLiteError) in
            try db.execute(
                """
                UPDATE "repeat" SET state = ?, played = ?, heard = ?, ended_at = ?, error_code = ?, error_message = ?
                WHERE order_id = ?
                """,
                record.state.rawValue, record.played, record.heard, record.endedAt, record.error?.code.rawValue,
                record.error?.message, record.plan.order)
        }
    }

    /// The repeats still running (at start: they go on where they were).
    public func runningRepeats() throws(AnnounceError) -> [RepeatRecord] {
        try read("be read") { (db) throws(SQLiteError) in
            try Self.repeatRow(db, where: "state = ?", [RepeatState.repeating.rawValue])
        }
    }

    /// Forgets the repeats that ended more than `keepMs` before `nowMs` (wall clock; housekeeping).
    public func purgeRepeats(nowMs: Int64, keepMs: Int64) throws(AnnounceError) {
        try write("be purged") { (db) throws(SQLiteError) in
            try db.execute(
                #"DELETE FROM "repeat" WHERE state != 'repeating' AND ended_at IS NOT NULL AND ? - ended_at >= ?"#,
                nowMs, keepMs)
        }
    }

    private static func repeatRow(
        _ db: SQLiteConnection, where condition: String, _ arguments: [any SQLiteBindable]
    ) throws(SQLiteError) -> [RepeatRecord] {
        try db.rows(
            """
            SELECT spec, text, state, played, heard, started_at, ended_at, error_code, error_message FROM "repeat"
            WHERE \(condition) ORDER BY started_at
            """, arguments: arguments
        ) { row -> RepeatRecord? in
            guard let spec = row.text(0),
                let plan = try? JSONDecoder().decode(RepeatPlan.self, from: Data(spec.utf8))
            else { return nil }
            var record = RepeatRecord(plan: plan, text: row.text(1), startedAt: row.int64(5) ?? 0)
            record.state = RepeatState(rawValue: row.text(2) ?? "") ?? .failed
            record.played = row.int(3) ?? 0
            record.heard = row.int(4) ?? 0
            record.endedAt = row.int64(6)
            if let code = row.text(7) {
                record.error = AnnounceError(AnnounceError.Code(rawValue: code), row.text(8) ?? "")
            }
            return record
        }.compactMap { $0 }
    }
}

extension Journal {
    /// The repeat of this order id, running or ended.
    public func repeatRecord(_ order: String) throws(AnnounceError) -> RepeatRecord? {
        try read("be read") { (db) throws(SQLiteError) in
            try Self.repeatRow(db, where: "order_id = ?", [order]).first
        }
    }
}
