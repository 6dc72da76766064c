import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's durable memory, one SQLite file through GRDB: every accepted job with its outcome, the
/// order ids of the de-duplication window, and a few settings.
///
/// Durability: WAL journal mode with `synchronous = FULL`, so a transaction that returned is on disk (the WAL
/// is fsynced at every commit) and survives a crash or a power loss. Every write here is synchronous; the
/// daemon's `JobLifecycle` decides what is written when, in order, retrying what failed.
///
/// A full disk: the journal keeps a small reserve file (`<path>.reserve`) it gives up when a write fails for
/// lack of space, so that the outcomes of jobs already accepted can still be recorded; while the reserve is
/// spent, new jobs are refused (`insert` throws) until space is back and the reserve could be made again.
///
/// One daemon per journal: `open` takes an exclusive `flock` on `<path>.lock` and refuses if another process
/// holds it (the kernel releases it when the holder dies, even by SIGKILL).
public final class Journal: Sendable {
    public let path: String
    /// Where the journal found damaged at open was moved (nil: it was sound); this one started empty.
    public let recoveredFromCorruption: String?
    let pool: DatabasePool
    private let lockDescriptor: Int32
    /// The reserve file's path, and whether the reserve is in place (false: spent on a full disk).
    private let reservePath: String
    private let reserveHeld = Mutex(false)
    /// Bytes kept in reserve: room for the outcomes of a few hundred jobs.
    public static let reserveBytes = 256 * 1024

    /// Opens (creating if needed) the journal at `path` and brings its schema up to date.
    public init(path: String) throws(AnnounceError) {
        self.path = path
        self.reservePath = path + ".reserve"
        let directory = Path.directory(of: path)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw AnnounceError(.journal, "cannot create the state folder \(directory)", cause: errorReason(error))
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
            // A damaged file is moved aside and an empty journal started (JournalCorruption.swift).
            (pool, recoveredFromCorruption) = try Self.openingAsideIfCorrupt(path: path) {
                let pool = try DatabasePool(path: path, configuration: configuration)
                // Every commit reaches the disk before it returns: an accepted job survives a power loss. Set on the
                // writer connection after GRDB's WAL setup, which chooses NORMAL (durable against a crash of the
                // process, not of the machine).
                try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
                try Self.migrator.migrate(pool)
                return pool
            }
        } catch let error as AnnounceError {
            close(lockDescriptor)
            throw error
        } catch {
            close(lockDescriptor)
            throw AnnounceError(.journal, "cannot open the journal \(path)", cause: "\(error)")
        }
        _ = ensureReserve()
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
        migrator.registerMigration("v2: order ids per kind of job") { db in try DedupRecord.separateKinds(db) }
        migrator.registerMigration("v2-attempts") { db in
            // How many times playback of the job began: more than one means it was played again from its start
            // (after a device failure, or because the daemon stopped before its end was heard).
            try db.alter(table: "job") { t in t.add(column: "attempts", .integer).notNull().defaults(to: 0) }
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
        guard ensureReserve() else {
            throw AnnounceError(
                .journal,
                "the disk holding the journal \(path) is full: nothing new is accepted until space is freed "
                    + "(the jobs already accepted are still recorded)")
        }
        do {
            return try pool.write { db in
                var record = record
                try record.insert(db)
                try DedupRecord(record)?.upsert(db)
                return record
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw AnnounceError(
                .journal,
                "the disk holding the journal \(path) is full: the job was not taken; free space and send it again",
                cause: "\(error)")
        } catch {
            throw failure("record the job", error)
        }
    }

    // MARK: Progress

    /// The outcome of a job.
    public struct Outcome: Sendable, Equatable {
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

    /// One step of a job's life after its acceptance.
    public enum Change: Sendable, Equatable {
        /// Playback began (`attempt` 1, or again from its start).
        case started(id: UInt64, atMs: Int64, attempt: Int)
        /// Its final state. Never overwrites a final state already recorded.
        case finished(Outcome)

        public var id: UInt64 {
            switch self {
            case let .started(id, _, _): id
            case let .finished(outcome): outcome.id
            }
        }
    }

    /// Records changes in one transaction, on disk when this returns. On a full disk the reserve is given up and
    /// the write tried once more, so that what was accepted can still be recorded.
    public func record(_ changes: [Change]) throws(AnnounceError) {
        guard !changes.isEmpty else { return }
        try writeUsingReserve("record the jobs' progress") { db in
            for change in changes { try Self.apply(change, db) }
        }
    }

    /// Records several outcomes in one transaction (cancel, recovery).
    public func finishNow(_ outcomes: [Outcome]) throws(AnnounceError) {
        try record(outcomes.map(Change.finished))
    }

    private static func apply(_ change: Change, _ db: Database) throws {
        switch change {
        case let .started(id, atMs, attempt):
            try db.execute(
                sql: """
                    UPDATE job SET state = 'playing', started_at = COALESCE(started_at, ?), attempts = ?
                    WHERE id = ? AND state IN ('queued', 'playing')
                    """,
                arguments: [atMs, attempt, Int64(id)])
        case let .finished(outcome):
            try db.execute(
                sql: """
                    UPDATE job SET state = ?, finished_at = ?, first_sample_ms = ?, finished_ms = ?,
                        error_code = ?, error_message = ?, started_at = COALESCE(started_at, ?)
                    WHERE id = ? AND state IN ('queued', 'playing')
                    """,
                arguments: [
                    outcome.state.rawValue, outcome.atMs, outcome.firstSampleMs, outcome.finishedMs,
                    outcome.error?.code.rawValue, outcome.error?.message,
                    outcome.firstSampleMs == nil ? nil : outcome.atMs, Int64(outcome.id),
                ])
        }
    }

    // MARK: Full disk

    /// Whether the reserve is in place (false: it was spent on a full disk and could not be made again yet).
    public var hasReserve: Bool { reserveHeld.withLock { $0 } }

    /// Makes the reserve file if it is not there; false if the disk has no room for it.
    @discardableResult
    public func ensureReserve() -> Bool {
        reserveHeld.withLock { held in
            if held { return true }
            let fd = open(reservePath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            var stats = stat()
            if fstat(fd, &stats) == 0, Int(stats.st_size) >= Self.reserveBytes {
                held = true
                return true
            }
            // Real blocks, not a sparse file: posix_fallocate fails with ENOSPC when there is no room.
            guard posix_fallocate(fd, 0, off_t(Self.reserveBytes)) == 0, fsync(fd) == 0 else {
                _ = ftruncate(fd, 0)
                unlink(reservePath)
                return false
            }
            held = true
            return true
        }
    }

    /// Gives the reserve's space back to the file system; false if there was none to give.
    private func releaseReserve() -> Bool {
        reserveHeld.withLock { held in
            guard held else { return false }
            held = false
            return unlink(reservePath) == 0
        }
    }

    /// A write; if it fails for lack of space, the reserve is released and it is tried once more.
    private func writeUsingReserve(
        _ what: String, _ body: @escaping @Sendable (Database) throws -> Void
    ) throws(AnnounceError) {
        do {
            try pool.write { db in try body(db) }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL && releaseReserve() {
            do {
                try pool.write { db in try body(db) }
            } catch {
                throw failure(what, error)
            }
        } catch {
            throw failure(what, error)
        }
    }

    // MARK: Recovery

    /// What a start finds in the journal.
    public struct Recovery: Sendable {
        /// Accepted and not heard in full: to be spoken now (subject to their ttl), oldest first. Those that
        /// had begun playing (`attempts` > 0) are spoken again from their start.
        public var pending: [JobRecord]
        /// How many of them had begun playing when the previous daemon stopped.
        public var interrupted: Int
    }

    /// Finds the jobs the previous daemon left unfinished: a job counts as heard only once its end is recorded,
    /// so every one not recorded as finished — waiting, or cut off while playing — is spoken again, in full
    /// (see docs/protocol.md, "Durability").
    public func recover(nowMs: Int64) throws(AnnounceError) -> Recovery {
        do {
            return try pool.read { db in
                let pending = try JobRecord.filter(["queued", "playing"].contains(Column("state")))
                    .order(Column("id")).fetchAll(db)
                return Recovery(pending: pending, interrupted: pending.filter { $0.state == "playing" }.count)
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
                    .map(\.entry)
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

    /// The most recently spoken payment (what `replay` repeats by default): a payment itself, never a replay of
    /// one — `replay` twice repeats the same payment, not the replay.
    public func lastSpokenPayment() throws(AnnounceError) -> JobRecord? {
        do {
            return try pool.read { db in
                try JobRecord.filter(
                    Column("state") == JobState.spoken.rawValue && Column("amount") != nil
                        && Column("replay_of") == nil)
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
                let condition = """
                    state NOT IN ('queued', 'playing') AND finished_at < ? AND id NOT IN (SELECT job_id FROM dedup)
                    """
                // The payment totals keep what is forgotten (Journal+Totals.swift).
                try Self.carryPaymentTotals(db, condition: condition, arguments: [jobsBeforeMs])
                try db.execute(sql: "DELETE FROM job WHERE " + condition, arguments: [jobsBeforeMs])
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
