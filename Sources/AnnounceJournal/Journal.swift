import AnnounceCore
import Foundation
import GRDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's durable memory, one SQLite file through GRDB: every accepted job with its outcome, the
/// order ids of the de-duplication window, and a few settings.
///
/// Durability: WAL journal mode with `synchronous = FULL`, so a transaction that returned is on disk (the WAL
/// is fsynced at every commit) and survives a crash or a power loss. Acceptances (`insert`) are synchronous:
/// the daemon replies "accepted" only after the commit. Progress (`markStarted`, `finish`) is written in the
/// background, in order, on GRDB's serial writer; `flush()` waits for it.
///
/// One daemon per journal: `open` takes an exclusive `flock` on `<path>.lock` and refuses if another process
/// holds it (the kernel releases it when the holder dies, even by SIGKILL).
public final class Journal: Sendable {
    public let path: String
    private let pool: DatabasePool
    private let lockDescriptor: Int32
    /// Progress writes waiting for the writer (see `record`).
    private let progress = Mutex<[Progress]>([])

    /// Opens (creating if needed) the journal at `path` and brings its schema up to date.
    public init(path: String) throws(AnnounceError) {
        self.path = path
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw AnnounceError(.journal, "cannot create the state folder \(directory)", cause: "\(error)")
        }
        lockDescriptor = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockDescriptor >= 0 else {
            throw AnnounceError(.journal, "cannot open \(path).lock", cause: String(cString: strerror(errno)))
        }
        guard flock(lockDescriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = String(cString: strerror(errno))
            close(lockDescriptor)
            throw AnnounceError(
                .journal, "the journal \(path) is in use by another announced (one daemon per state folder)",
                cause: reason)
        }
        var configuration = Configuration()
        configuration.label = "announce.journal"
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            // Every commit reaches the disk before it returns: an accepted job survives a power loss. Set on the
            // writer connection after GRDB's WAL setup, which chooses NORMAL (durable against a crash of the
            // process, not of the machine).
            try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            try Self.migrator.migrate(pool)
        } catch {
            close(lockDescriptor)
            throw AnnounceError(.journal, "cannot open the journal \(path)", cause: "\(error)")
        }
    }

    deinit {
        try? pool.close()
        close(lockDescriptor)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "job") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("priority", .text).notNull()
                t.column("utterance", .text).notNull()
                t.column("lang", .text)
                t.column("style", .text)
                t.column("liang", .boolean)
                t.column("order_id", .text)
                t.column("text", .text).notNull()
                t.column("tokens", .text).notNull()
                t.column("amount", .text)
                t.column("channel", .text)
                t.column("refund", .boolean)
                t.column("prompt", .text)
                t.column("replay_of", .integer)
                t.column("accepted_at", .integer).notNull()
                t.column("ttl_ms", .integer)
                t.column("state", .text).notNull()
                t.column("started_at", .integer)
                t.column("finished_at", .integer)
                t.column("first_sample_ms", .double)
                t.column("finished_ms", .double)
                t.column("error_code", .text)
                t.column("error_message", .text)
            }
            try db.create(
                index: "job_unfinished", on: "job", columns: ["state"],
                condition: Column("state") == "queued" || Column("state") == "playing")
            try db.create(table: "dedup") { t in
                t.primaryKey("order_id", .text)
                t.column("job_id", .integer).notNull()
                t.column("accepted_at", .integer).notNull()
            }
            try db.create(index: "dedup_accepted_at", on: "dedup", columns: ["accepted_at"])
            try db.create(table: "setting") { t in
                t.primaryKey("name", .text)
                t.column("value", .text).notNull()
            }
        }
        return migrator
    }

    private func failure(_ what: String, _ error: any Error) -> AnnounceError {
        AnnounceError(.journal, "the journal could not \(what)", cause: "\(error)")
    }

    // MARK: Accepting

    /// Records an accepted job — and, if it has an order id, remembers the order for de-duplication — in one
    /// transaction that is on disk when this returns. Returns the record with its new id.
    public func insert(_ record: JobRecord) throws(AnnounceError) -> JobRecord {
        do {
            return try pool.write { db in
                var record = record
                try record.insert(db)
                if let order = record.orderId, let id = record.id {
                    try DedupRecord(orderId: order, jobId: id, acceptedAt: record.acceptedAt).upsert(db)
                }
                return record
            }
        } catch {
            throw failure("record the job", error)
        }
    }

    // MARK: Progress (background, in order)

    /// Records that a job started playing. In the background: a crash before this commit only means the job is
    /// spoken again from its start after the restart (at most a few milliseconds of it were heard).
    public func markStarted(_ id: UInt64, atMs: Int64) {
        record(.started(id: id, atMs: atMs))
    }

    /// The outcome of a job, for ``finish(_:completion:)``.
    public struct Outcome: Sendable {
        public var id: UInt64
        public var state: JobState
        public var atMs: Int64
        public var firstSampleMs: Double?
        public var finishedMs: Double?
        public var error: AnnounceError?

        public init(
            id: UInt64, state: JobState, atMs: Int64, firstSampleMs: Double? = nil, finishedMs: Double? = nil,
            error: AnnounceError? = nil
        ) {
            self.id = id
            self.state = state
            self.atMs = atMs
            self.firstSampleMs = firstSampleMs
            self.finishedMs = finishedMs
            self.error = error
        }
    }

    /// Records how a job ended, in the background and in order; `completion` runs once it is committed (or
    /// failed to commit, with the error).
    public func finish(_ outcome: Outcome, completion: @escaping @Sendable ((any Error)?) -> Void = { _ in }) {
        record(.finished(outcome, completion: completion))
    }

    private enum Progress: Sendable {
        case started(id: UInt64, atMs: Int64)
        case finished(Outcome, completion: @Sendable ((any Error)?) -> Void)
    }

    /// Queues a progress write. Writes queued while an earlier batch waits for GRDB's writer go in one
    /// transaction (one fsync for a burst, not one per write), still in order and after every acceptance
    /// committed before them.
    private func record(_ item: Progress) {
        let first = progress.withLock { items in
            items.append(item)
            return items.count == 1
        }
        guard first else { return }
        pool.asyncWriteWithoutTransaction { db in
            let batch = self.progress.withLock { items in
                defer { items.removeAll() }
                return items
            }
            var failure: (any Error)?
            do {
                try db.inTransaction {
                    for item in batch { try Self.apply(item, db) }
                    return .commit
                }
            } catch {
                failure = error
            }
            for case .finished(_, let completion) in batch { completion(failure) }
        }
    }

    private static func apply(_ item: Progress, _ db: Database) throws {
        switch item {
        case let .started(id, atMs):
            try db.execute(
                sql: "UPDATE job SET state = 'playing', started_at = ? WHERE id = ? AND state = 'queued'",
                arguments: [atMs, Int64(id)])
        case let .finished(outcome, _):
            try db.execute(
                sql: """
                    UPDATE job SET state = ?, finished_at = ?, first_sample_ms = ?, finished_ms = ?,
                        error_code = ?, error_message = ?, started_at = COALESCE(started_at, ?)
                    WHERE id = ?
                    """,
                arguments: [
                    outcome.state.rawValue, outcome.atMs, outcome.firstSampleMs, outcome.finishedMs,
                    outcome.error?.code.rawValue, outcome.error?.message,
                    outcome.firstSampleMs == nil ? nil : outcome.atMs, Int64(outcome.id),
                ])
        }
    }

    /// Records several outcomes in one synchronous transaction (cancel, shutdown, recovery).
    public func finishNow(_ outcomes: [Outcome]) throws(AnnounceError) {
        guard !outcomes.isEmpty else { return }
        do {
            try pool.write { db in
                for outcome in outcomes {
                    try db.execute(
                        sql: """
                            UPDATE job SET state = ?, finished_at = ?, error_code = ?, error_message = ?
                            WHERE id = ? AND state IN ('queued', 'playing')
                            """,
                        arguments: [
                            outcome.state.rawValue, outcome.atMs, outcome.error?.code.rawValue,
                            outcome.error?.message, Int64(outcome.id),
                        ])
                }
            }
        } catch {
            throw failure("record the outcome", error)
        }
    }

    /// Waits until every background write issued so far is committed.
    public func flush() {
        _ = try? pool.write { _ in }
    }

    // MARK: Recovery

    /// What a start finds in the journal.
    public struct Recovery: Sendable {
        /// Accepted, never started: to be spoken now (subject to their ttl), oldest first.
        public var pending: [JobRecord]
        /// Were playing when the previous daemon died: now recorded `failed` with code `interrupted`.
        public var interrupted: [JobRecord]
    }

    /// Finds the jobs the previous daemon left unfinished. Those that were playing are recorded `failed`/
    /// `interrupted` and not spoken again: a job is spoken at most once (see docs/protocol.md, "Durability").
    public func recover(nowMs: Int64) throws(AnnounceError) -> Recovery {
        do {
            return try pool.write { db in
                let interrupted = try JobRecord.filter(Column("state") == JobState.playing.rawValue)
                    .order(Column("id")).fetchAll(db)
                let error = AnnounceError(
                    .interrupted, "the daemon stopped while this announcement was playing; not spoken again")
                for record in interrupted {
                    try db.execute(
                        sql: """
                            UPDATE job SET state = 'failed', finished_at = ?, error_code = ?, error_message = ?
                            WHERE id = ?
                            """,
                        arguments: [nowMs, error.code.rawValue, error.message, record.id])
                }
                let pending = try JobRecord.filter(Column("state") == JobState.queued.rawValue)
                    .order(Column("id")).fetchAll(db)
                return Recovery(pending: pending, interrupted: interrupted)
            }
        } catch {
            throw failure("be read at start", error)
        }
    }

    /// The order ids accepted at or after `sinceMs`, for the de-duplication window.
    public func dedupEntries(sinceMs: Int64) throws(AnnounceError) -> [DedupWindow.Entry] {
        do {
            return try pool.read { db in
                try DedupRecord.filter(Column("accepted_at") >= sinceMs).order(Column("accepted_at")).fetchAll(db)
                    .map { DedupWindow.Entry(order: $0.orderId, jobID: UInt64($0.jobId), acceptedAtMs: $0.acceptedAt) }
            }
        } catch {
            throw failure("read the de-duplication window", error)
        }
    }

    // MARK: Queries

    public func job(_ id: UInt64) throws(AnnounceError) -> JobRecord? {
        do {
            return try pool.read { db in try JobRecord.fetchOne(db, key: Int64(id)) }
        } catch {
            throw failure("be read", error)
        }
    }

    /// The most recent jobs, newest first.
    public func history(limit: Int) throws(AnnounceError) -> [JobRecord] {
        do {
            return try pool.read { db in
                try JobRecord.order(Column("id").desc).limit(limit).fetchAll(db)
            }
        } catch {
            throw failure("be read", error)
        }
    }

    /// The most recently spoken payment (what `replay` repeats by default).
    public func lastSpokenPayment() throws(AnnounceError) -> JobRecord? {
        do {
            return try pool.read { db in
                try JobRecord.filter(Column("state") == JobState.spoken.rawValue && Column("amount") != nil)
                    .order(Column("finished_at").desc, Column("id").desc).fetchOne(db)
            }
        } catch {
            throw failure("be read", error)
        }
    }

    /// Counts of jobs per state (for tests and status).
    public func countByState() throws(AnnounceError) -> [String: Int] {
        do {
            return try pool.read { db in
                var counts: [String: Int] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n FROM job GROUP BY state") {
                    counts[row["state"]] = row["n"]
                }
                return counts
            }
        } catch {
            throw failure("be read", error)
        }
    }

    // MARK: The day's takings

    /// The payments accepted in `[fromMs, toMs)` (a local day, see `LocalDay`): those heard (`spoken`) counted and
    /// summed in integer fen, refunds apart; those not heard (failed, expired, cancelled, or still waiting)
    /// counted. Replays are repeats, not payments, and are left out, as are prompts, text and summaries.
    public func dayTotals(fromMs: Int64, toMs: Int64) throws(AnnounceError) -> DayTotals {
        let rows: [(amount: String, refund: Bool, state: String)]
        do {
            rows = try pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT amount, refund, state FROM job
                        WHERE accepted_at >= ? AND accepted_at < ? AND amount IS NOT NULL AND replay_of IS NULL
                        """,
                    arguments: [fromMs, toMs]
                ).map { ($0["amount"], ($0["refund"] as Bool?) ?? false, $0["state"]) }
            }
        } catch {
            throw failure("be read", error)
        }
        var totals = DayTotals()
        for row in rows {
            guard row.state == JobState.spoken.rawValue else {
                if !row.refund { totals.unheard += 1 }
                continue
            }
            // The column holds the canonical text the job was accepted with ("1234.50"): parsed, never a float.
            guard let amount = try? Amount(parsing: row.amount) else {
                throw AnnounceError(.journal, "the journal holds an amount that cannot be read: \"\(row.amount)\"")
            }
            try totals.add(fen: amount.fen, refund: row.refund)
        }
        return totals
    }

    // MARK: Housekeeping

    /// Forgets finished jobs that ended before `jobsBeforeMs` and order ids accepted before `ordersBeforeMs`.
    /// Returns how many jobs and orders were removed.
    @discardableResult
    public func purge(jobsBeforeMs: Int64, ordersBeforeMs: Int64) throws(AnnounceError) -> (jobs: Int, orders: Int) {
        do {
            return try pool.write { db in
                try db.execute(sql: "DELETE FROM dedup WHERE accepted_at < ?", arguments: [ordersBeforeMs])
                let orders = db.changesCount
                try db.execute(
                    sql: """
                        DELETE FROM job WHERE state NOT IN ('queued', 'playing') AND finished_at < ?
                            AND id NOT IN (SELECT job_id FROM dedup)
                        """,
                    arguments: [jobsBeforeMs])
                return (db.changesCount, orders)
            }
        } catch {
            throw failure("be purged", error)
        }
    }

    // MARK: Settings

    public func setting(_ name: String) throws(AnnounceError) -> String? {
        do {
            return try pool.read { db in
                try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = ?", arguments: [name])
            }
        } catch {
            throw failure("be read", error)
        }
    }

    /// Sets (or with nil removes) a setting, durably.
    public func setSetting(_ name: String, _ value: String?) throws(AnnounceError) {
        do {
            try pool.write { db in
                if let value {
                    try db.execute(
                        sql: """
                            INSERT INTO setting (name, value) VALUES (?, ?)
                            ON CONFLICT(name) DO UPDATE SET value = excluded.value
                            """,
                        arguments: [name, value])
                } else {
                    try db.execute(sql: "DELETE FROM setting WHERE name = ?", arguments: [name])
                }
            }
        } catch {
            throw failure("record the setting", error)
        }
    }

    /// The SQLite pragmas that make the journal durable, as the database reports them (for tests and status).
    public func durabilitySettings() throws(AnnounceError) -> (journalMode: String, synchronous: Int) {
        do {
            return try pool.write { db in
                let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? ""
                let synchronous = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
                return (mode, synchronous)
            }
        } catch {
            throw failure("be read", error)
        }
    }
}
