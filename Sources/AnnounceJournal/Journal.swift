import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's durable memory, one SQLite file (libsqlite3 through SQLite.swift): every accepted job with its
/// outcome, the order ids of the de-duplication window, and a few settings.
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
///
/// One connection, for reads and writes alike, used by one thread at a time (the daemon calls from a few): every
/// call takes the lock, so writes are serialised and a read sees every write that returned. Its prepared
/// statements are cached. Another process holding SQLite's own lock (a `sqlite3` shell, a backup) is waited for
/// up to `busyTimeoutMs`.
public final class Journal: Sendable {
    public let path: String
    /// Where the journal found damaged at open was moved (nil: it was sound); this one started empty.
    public let recoveredFromCorruption: String?
    /// The connection and what it is a connection to: the file, or — while the state folder cannot be used —
    /// a journal in memory (Journal+Degraded.swift).
    let store: Mutex<Store>
    /// The reserve file's path, and whether the reserve is in place (false: spent on a full disk).
    private let reservePath: String
    private let reserveHeld = Mutex(false)
    /// Bytes kept in reserve: room for the outcomes of a few hundred jobs.
    public static let reserveBytes = 256 * 1024
    /// How long a statement waits for a lock another connection holds before it fails (SQLITE_BUSY).
    static let busyTimeoutMs: Int32 = 5_000

    struct Store {
        var db: SQLiteConnection
        /// The open `<path>.lock` holding the daemon's exclusive lock; -1 while in memory.
        var lockDescriptor: Int32
        /// Why the journal is in memory; nil on disk.
        var problem: AnnounceError?
        /// In memory: the highest job id copied from the file at start (0: the file could not be read); the jobs
        /// above it were accepted in memory.
        var seededUpTo: Int64 = 0
        var seeded = false
    }

    /// Opens (creating if needed) the journal at `path` and brings its schema up to date. Throws if it cannot;
    /// ``openOrKeepInMemory(path:)`` is what the daemon calls.
    public convenience init(path: String) throws(AnnounceError) {
        switch Self.openOnDisk(path: path) {
        case .success(let opened):
            self.init(
                path: path, store: Store(db: opened.db, lockDescriptor: opened.lock),
                recoveredFromCorruption: opened.evidence)
        case .failure(.inUse(let error)), .failure(.unusable(let error)):
            throw error
        }
    }

    init(path: String, store: sending Store, recoveredFromCorruption: String?) {
        self.path = path
        self.reservePath = path + ".reserve"
        self.store = Mutex(store)
        self.recoveredFromCorruption = recoveredFromCorruption
        _ = ensureReserve()
    }

    /// Why opening the file failed.
    enum OpenFailure: Error {
        /// Another daemon holds it: this one must not run.
        case inUse(AnnounceError)
        /// The state folder or the file cannot be used (read-only, another owner, not a file, full …).
        case unusable(AnnounceError)
    }

    /// Opens the file: the folder made if missing, the daemon's lock taken, a damaged file moved aside.
    static func openOnDisk(
        path: String
    ) -> Result<(db: SQLiteConnection, lock: Int32, evidence: String?), OpenFailure> {
        let directory = Path.directory(of: path)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            return .failure(.unusable(StateFolder.diagnose(journal: path, failure: errorReason(error))))
        }
        let lockDescriptor = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockDescriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            return .failure(.unusable(StateFolder.diagnose(journal: path, failure: "\(path).lock: \(reason)")))
        }
        if let error = Self.lock(lockDescriptor) {
            let reason = String(cString: strerror(error))
            close(lockDescriptor)
            return .failure(
                .inUse(
                    AnnounceError(
                        .journal, "the journal \(path) is in use by another announced (one daemon per state folder)",
                        cause: reason)))
        }
        do {
            // A damaged file is moved aside and an empty journal started (JournalCorruption.swift).
            let (opened, evidence) = try Self.openingAsideIfCorrupt(path: path) { () throws(SQLiteError) in
                try Self.openForWriting(path: path)
            }
            return .success((opened, lockDescriptor, evidence))
        } catch {
            close(lockDescriptor)
            return .failure(.unusable(StateFolder.diagnose(journal: path, failure: "\(error)")))
        }
    }

    /// How long opening waits for another holder of the journal's lock to let go, milliseconds.
    static let lockWaitMs = 1_000

    /// Takes the exclusive lock on `descriptor`; nil, or the errno of the last attempt. A holder that lets go within
    /// `waitMs` is waited for: a daemon still on its way out, or a child this process forked, which shares the
    /// open file (and so the lock) until its exec closes it. A daemon that keeps the lock is refused.
    static func lock(_ descriptor: Int32, waitMs: Int = lockWaitMs) -> Int32? {
        let deadline = ContinuousClock.now + .milliseconds(waitMs)
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            guard error == EWOULDBLOCK || error == EINTR, ContinuousClock.now < deadline else { return error }
            usleep(10_000)
        }
        return nil
    }

    deinit {
        // Closed (and checkpointed) before the lock is released: the next daemon finds it complete.
        store.withLock { store in
            store.db.close()
            if store.lockDescriptor >= 0 { close(store.lockDescriptor) }
        }
    }

    /// The connection the journal writes and reads with: WAL, every commit fsynced, the schema brought up to date.
    static func openForWriting(path: String) throws(SQLiteError) -> SQLiteConnection {
        let connection = try SQLiteConnection(path: path, busyTimeoutMs: busyTimeoutMs)
        // Readers never block the writer nor the writer them, and a commit is one append to the -wal.
        let mode = try connection.firstRow("PRAGMA journal_mode = WAL") { $0.text(0) } ?? nil
        guard mode == "wal" else {
            throw SQLiteError(
                function: "PRAGMA journal_mode", message: "WAL refused, the mode is \(mode ?? "unknown")",
                sql: "PRAGMA journal_mode = WAL")
        }
        // Every commit reaches the disk before it returns: an accepted job survives a power loss (NORMAL, the
        // usual choice with WAL, is durable against a crash of the process only, not of the machine).
        try connection.execute("PRAGMA synchronous = FULL")
        try JournalSchema.migrate(connection)
        return connection
    }

    private func failure(_ what: String, _ error: SQLiteError) -> AnnounceError {
        AnnounceError(.journal, "the journal could not \(what)", cause: "\(error)")
    }

    /// Runs `body` with the connection, the lock held.
    private func withConnection<T: Sendable>(
        _ body: (SQLiteConnection) throws(SQLiteError) -> T
    ) throws(SQLiteError) -> T {
        try store.withLock { (store) throws(SQLiteError) -> T in try body(store.db) }
    }

    /// A read, the lock held.
    func read<T: Sendable>(
        _ what: String, _ body: (SQLiteConnection) throws(SQLiteError) -> T
    ) throws(AnnounceError) -> T {
        do {
            return try withConnection(body)
        } catch {
            throw failure(what, error)
        }
    }

    /// Runs `body` in one transaction, the lock held: all of it is on disk when this returns, or none of it.
    func write<T: Sendable>(
        _ what: String, _ body: (SQLiteConnection) throws(SQLiteError) -> T
    ) throws(AnnounceError) -> T {
        do {
            return try withConnection { (db) throws(SQLiteError) -> T in
                try db.transaction { () throws(SQLiteError) -> T in try body(db) }
            }
        } catch {
            throw failure(what, error)
        }
    }

    // MARK: Accepting

    /// Records an accepted job — and, if it has an order id, remembers the order for de-duplication — in one
    /// transaction that is on disk when this returns. Returns the record with its new id.
    /// `clockTrusted`: whether the wall clock was synchronised at its acceptance (an order id stamped by an untrusted
    /// clock is kept a whole window from the next boot that sees it: ``reanchorUntrustedOrders(now:)``).
    public func insert(_ record: JobRecord, clockTrusted: Bool = true) throws(AnnounceError) -> JobRecord {
        guard ensureReserve() else {
            throw AnnounceError(
                .journal,
                "the disk holding the journal \(path) is full: nothing new is accepted until space is freed "
                    + "(the jobs already accepted are still recorded)")
        }
        let insert = { (db: SQLiteConnection) throws(SQLiteError) -> JobRecord in
            try db.transaction { () throws(SQLiteError) -> JobRecord in
                var record = record
                try record.insert(db)
                try DedupRecord(record, trusted: clockTrusted)?.upsert(db)
                return record
            }
        }
        do {
            return try withConnection(insert)
        } catch let error where error.isUnwritable && fallBackToMemory(because: error) {
            do {
                return try withConnection(insert)
            } catch {
                throw failure("record the job", error)
            }
        } catch let error where error.isDiskFull {
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
        public var at: ClockStamp
        public var firstSampleMs: Double?
        public var finishedMs: Double?
        public var error: AnnounceError?

        public init(
            id: UInt64, state: JobState, at: ClockStamp, firstSampleMs: Double? = nil, finishedMs: Double? = nil,
            error: AnnounceError? = nil
        ) {
            self.id = id
            self.state = state
            self.at = at
            self.firstSampleMs = firstSampleMs
            self.finishedMs = finishedMs
            self.error = error
        }
    }

    /// One step of a job's life after its acceptance.
    public enum Change: Sendable, Equatable {
        /// Playback began (`attempt` 1, or again from its start).
        case started(id: UInt64, at: ClockStamp, attempt: Int)
        /// Its final state. Never overwrites a final state already recorded.
        case finished(Outcome)
        /// The wall clock is trusted at `now`: the times stamped in `now`'s boot at another offset from the boot
        /// clock (before the clock was set) are corrected to this one.
        case clockSet(ClockStamp)

        /// The job the change is about (nil: none).
        public var id: UInt64? {
            switch self {
            case let .started(id, _, _): id
            case let .finished(outcome): outcome.id
            case .clockSet: nil
            }
        }
    }

    /// Records changes in one transaction, on disk when this returns. On a full disk the reserve is given up and
    /// the write tried once more, so that what was accepted can still be recorded.
    public func record(_ changes: [Change]) throws(AnnounceError) {
        guard !changes.isEmpty else { return }
        try writeUsingReserve("record the jobs' progress") { (db) throws(SQLiteError) in
            for change in changes { try Self.apply(change, db) }
        }
    }

    /// Records several outcomes in one transaction (cancel, recovery).
    public func finishNow(_ outcomes: [Outcome]) throws(AnnounceError) {
        try record(outcomes.map(Change.finished))
    }

    private static func apply(_ change: Change, _ db: SQLiteConnection) throws(SQLiteError) {
        switch change {
        case let .started(id, at, attempt):
            // The first start's time is kept (SET reads the row as it was before the update).
            try db.execute(
                """
                UPDATE job SET state = 'playing', attempts = ?,
                    started_boot = CASE WHEN started_at IS NULL THEN ? ELSE started_boot END,
                    started_boot_ms = CASE WHEN started_at IS NULL THEN ? ELSE started_boot_ms END,
                    started_at = COALESCE(started_at, ?)
                WHERE id = ? AND state IN ('queued', 'playing')
                """,
                attempt, at.bootColumn, at.bootMsColumn, at.wallMs, Int64(id))
        case let .finished(outcome):
            let at = outcome.at
            let played = outcome.firstSampleMs != nil
            try db.execute(
                """
                UPDATE job SET state = ?, finished_at = ?, finished_boot = ?, finished_boot_ms = ?,
                    first_sample_ms = ?, finished_ms = ?, error_code = ?, error_message = ?,
                    started_boot = CASE WHEN started_at IS NULL AND ? THEN ? ELSE started_boot END,
                    started_boot_ms = CASE WHEN started_at IS NULL AND ? THEN ? ELSE started_boot_ms END,
                    started_at = COALESCE(started_at, ?)
                WHERE id = ? AND state IN ('queued', 'playing')
                """,
                outcome.state.rawValue, at.wallMs, at.bootColumn, at.bootMsColumn, outcome.firstSampleMs,
                outcome.finishedMs, outcome.error?.code.rawValue, outcome.error?.message, played, at.bootColumn,
                played, at.bootMsColumn, played ? at.wallMs : nil, Int64(outcome.id))
        case let .clockSet(now):
            try Self.correctTimes(db, to: now)
        }
    }

    /// Moves every time stamped in `now`'s boot at another offset between the wall and boot clocks than `now`'s
    /// (more than a second apart: NTP's gradual slewing is not a jump) to `now`'s offset: stamped before the clock
    /// was set, they are corrected by how far it moved. Order ids re-anchored from an earlier boot become
    /// trusted, counted from when this boot took them over.
    static func correctTimes(_ db: SQLiteConnection, to now: ClockStamp) throws(SQLiteError) {
        guard !now.boot.isEmpty else { return }
        let offset = now.offsetMs
        for (time, boot, bootMs) in [
            ("accepted_at", "accepted_boot", "accepted_boot_ms"), ("started_at", "started_boot", "started_boot_ms"),
            ("finished_at", "finished_boot", "finished_boot_ms"),
        ] {
            try db.execute(
                """
                UPDATE job SET \(time) = \(bootMs) + ?1
                WHERE \(boot) = ?2 AND \(bootMs) IS NOT NULL AND abs(\(time) - \(bootMs) - ?1) > 1000
                """,
                offset, now.boot)
        }
        try db.execute(
            """
            UPDATE dedup SET accepted_at = boot_ms + ?1, trusted = 1
            WHERE boot = ?2 AND boot_ms IS NOT NULL AND (trusted = 0 OR abs(accepted_at - boot_ms - ?1) > 1000)
            """,
            offset, now.boot)
    }

    /// Order ids stamped by an untrusted wall clock in an earlier boot: their age cannot be known (a terminal
    /// without a battery-backed clock may have stamped them in 1970), so each is kept a whole window from now —
    /// never forgotten early, which could speak a redelivered payment twice. Returns how many.
    @discardableResult
    public func reanchorUntrustedOrders(now: ClockStamp) throws(AnnounceError) -> Int {
        guard !now.boot.isEmpty else { return 0 }
        return try write("take over the order ids of an earlier boot") { (db) throws(SQLiteError) -> Int in
            try db.execute(
                "UPDATE dedup SET boot = ?, boot_ms = ? WHERE trusted = 0 AND (boot IS NULL OR boot != ?)",
                now.boot, now.bootMs, now.boot)
            return db.changes
        }
    }

    // MARK: Full disk

    /// Whether the reserve is in place (false: it was spent on a full disk and could not be made again yet).
    public var hasReserve: Bool { !isDurable || reserveHeld.withLock { $0 } }

    /// Makes the reserve file if it is not there; false if the disk has no room for it.
    @discardableResult
    public func ensureReserve() -> Bool {
        // In memory, there is no disk to fill.
        guard isDurable else { return true }
        return reserveHeld.withLock { held in
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
        _ what: String, _ body: (SQLiteConnection) throws(SQLiteError) -> Void
    ) throws(AnnounceError) {
        do {
            try withConnection { (db) throws(SQLiteError) in
                try db.transaction { () throws(SQLiteError) in try body(db) }
            }
        } catch let error where error.isDiskFull && releaseReserve() {
            try write(what, body)
        } catch let error where error.isUnwritable && fallBackToMemory(because: error) {
            try write(what, body)
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
    /// so every one not recorded as finished — waiting, or cut off while playing, even in its last buffer (no
    /// device plays a dead writer's samples out for sure: docs/protocol.md, "Durability") — is spoken again, in full.
    public func recover() throws(AnnounceError) -> Recovery {
        try read("be read at start") { (db) throws(SQLiteError) in
            let pending = try JobRecord.fetchAll(db, where: "state IN ('queued', 'playing') ORDER BY id")
            return Recovery(pending: pending, interrupted: pending.filter { $0.state == "playing" }.count)
        }
    }

    /// The order ids accepted less than `windowMs` before `now`, for the de-duplication window: their acceptance
    /// on `now`'s boot clock (``ClockStamp/age(at:)``).
    public func dedupEntries(now: ClockStamp, windowMs: Int64) throws(AnnounceError) -> [DedupWindow.Entry] {
        try read("read the de-duplication window") { (db) throws(SQLiteError) in
            try DedupRecord.fetchAll(db).filter { $0.accepted.age(at: now) < windowMs }.map { $0.entry(now: now) }
        }
    }

    // MARK: Queries

    public func job(_ id: UInt64) throws(AnnounceError) -> JobRecord? {
        try read("be read") { (db) throws(SQLiteError) in try JobRecord.fetchAll(db, where: "id = ?", Int64(id)).first }
    }

    /// The most recent jobs, newest first.
    public func history(limit: Int) throws(AnnounceError) -> [JobRecord] {
        try read("be read") { (db) throws(SQLiteError) in
            try JobRecord.fetchAll(db, where: "1 ORDER BY id DESC LIMIT ?", limit)
        }
    }

    /// The jobs with an id above `afterID` whose final state is recorded, lowest id first, at most `limit`: what a
    /// `subscribe` with `since` replays.
    public func finishedJobs(afterID: UInt64, limit: Int) throws(AnnounceError) -> [JobRecord] {
        try read("be read") { (db) throws(SQLiteError) in
            try JobRecord.fetchAll(
                db, where: "id > ? AND state NOT IN ('queued', 'playing') ORDER BY id LIMIT ?",
                Int64(clamping: afterID), limit)
        }
    }

    /// The most recently spoken payment (what `replay` repeats by default): a payment itself, never a replay of
    /// one — `replay` twice repeats the same payment, not the replay.
    public func lastSpokenPayment() throws(AnnounceError) -> JobRecord? {
        try read("be read") { (db) throws(SQLiteError) in
            try JobRecord.fetchAll(
                db,
                where: "state = ? AND amount IS NOT NULL AND replay_of IS NULL ORDER BY finished_at DESC, id DESC LIMIT 1",
                JobState.spoken.rawValue
            ).first
        }
    }

    /// The most recently spoken combination broadcast (what `replay` with `kind` `combination` repeats): a
    /// combination itself, never a replay of one.
    public func lastSpokenCombination() throws(AnnounceError) -> JobRecord? {
        try read("be read") { (db) throws(SQLiteError) in
            // Recent spoken jobs that are no payment, prompt or replay, newest first; the first combination.
            try JobRecord.fetchAll(
                db,
                where: """
                    state = ? AND amount IS NULL AND prompt IS NULL AND replay_of IS NULL \
                    ORDER BY finished_at DESC, id DESC LIMIT 64
                    """,
                JobState.spoken.rawValue
            ).first { record in
                if case .combination = record.decodedUtterance { return true }
                return false
            }
        }
    }

    /// Counts of jobs per state (for tests and status).
    public func countByState() throws(AnnounceError) -> [String: Int] {
        try read("be read") { (db) throws(SQLiteError) in
            var counts: [String: Int] = [:]
            for (state, count) in try db.rows(
                "SELECT state, COUNT(*) FROM job GROUP BY state", read: { ($0.text(0) ?? "", $0.int(1) ?? 0) })
            {
                counts[state] = count
            }
            return counts
        }
    }

    // MARK: The day's takings

    /// The payments accepted in `[fromMs, toMs)` (a local day, see `LocalDay`): those heard (`spoken`) counted and
    /// summed in integer fen, refunds apart; those not heard (failed, expired, cancelled, or still waiting)
    /// counted. Replays are repeats, not payments, and are left out, as are prompts, text and summaries.
    public func dayTotals(fromMs: Int64, toMs: Int64) throws(AnnounceError) -> DayTotals {
        let rows = try read("be read") { (db) throws(SQLiteError) in
            try db.rows(
                """
                SELECT amount, refund, state FROM job
                WHERE accepted_at >= ? AND accepted_at < ? AND amount IS NOT NULL AND replay_of IS NULL
                """,
                arguments: [fromMs, toMs]
            ) { row in (amount: row.text(0) ?? "", refund: row.bool(1) ?? false, state: row.text(2) ?? "") }
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

    /// Forgets finished jobs that ended `keepMs` or more before `now` and order ids accepted `windowMs` or more
    /// before it, ages taken as ``ClockStamp/age(at:)`` does: on the boot clock within `now`'s boot, else on the
    /// wall clock (never negative). Returns how many jobs and orders were removed.
    @discardableResult
    public func purge(now: ClockStamp, keepMs: Int64, windowMs: Int64) throws(AnnounceError) -> (jobs: Int, orders: Int) {
        try write("be purged") { (db) throws(SQLiteError) in
            try db.execute(
                """
                DELETE FROM dedup
                WHERE (CASE WHEN boot = ?1 THEN ?2 - boot_ms ELSE ?3 - accepted_at END) >= ?4
                """,
                now.boot, now.bootMs, now.wallMs, windowMs)
            let orders = db.changes
            let condition = """
                state NOT IN ('queued', 'playing') AND id NOT IN (SELECT job_id FROM dedup)
                AND (CASE WHEN finished_boot = ?1 THEN ?2 - finished_boot_ms ELSE ?3 - finished_at END) >= ?4
                """
            let arguments: [any SQLiteBindable] = [now.boot, now.bootMs, now.wallMs, keepMs]
            // The payment totals keep what is forgotten (Journal+Totals.swift).
            try Self.carryPaymentTotals(db, condition: condition, arguments: arguments)
            try db.execute("DELETE FROM job WHERE " + condition, arguments: arguments)
            return (db.changes, orders)
        }
    }

    // MARK: Settings

    public func setting(_ name: String) throws(AnnounceError) -> String? {
        try read("be read") { (db) throws(SQLiteError) in
            try db.firstRow("SELECT value FROM setting WHERE name = ?", arguments: [name]) { $0.text(0) } ?? nil
        }
    }

    /// Sets (or with nil removes) a setting, durably.
    public func setSetting(_ name: String, _ value: String?) throws(AnnounceError) {
        try write("record the setting") { (db) throws(SQLiteError) in
            if let value {
                try db.execute(
                    """
                    INSERT INTO setting (name, value) VALUES (?, ?)
                    ON CONFLICT(name) DO UPDATE SET value = excluded.value
                    """,
                    name, value)
            } else {
                try db.execute("DELETE FROM setting WHERE name = ?", name)
            }
        }
    }

    /// The SQLite pragmas that make the journal durable, as the database reports them (for tests and status).
    public func durabilitySettings() throws(AnnounceError) -> (journalMode: String, synchronous: Int) {
        try read("be read") { (db) throws(SQLiteError) in
            let mode = try db.firstRow("PRAGMA journal_mode") { $0.text(0) } ?? nil
            let synchronous = try db.firstRow("PRAGMA synchronous") { $0.int(0) } ?? nil
            return (mode ?? "", synchronous ?? -1)
        }
    }
}
