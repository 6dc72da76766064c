import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A state folder that cannot be used — a flash card worn out and remounted read-only, a folder of another owner
/// after an image was cloned, `journal.sqlite` made a directory by hand, a full disk — must not silence the
/// speaker: the daemon then keeps its journal in memory, says so (at error level, in `status`, in every accept),
/// speaks payments as ever, and goes back to the file as soon as it can be used (docs/deployment.md, "A state
/// folder that cannot be used").
///
/// In memory the journal starts as a copy of the file when the file can still be read (a read-only file system:
/// every job, order id and setting it held, job ids continuing), else empty. Going back, once the file can be
/// opened for writing and no job accepted in memory is unfinished: in one transaction, the jobs the file had get
/// their progress from memory, the jobs accepted in memory are added (under their own ids where the file has not
/// used them: a file that held other jobs meanwhile gives them new ids, which only `history` shows), with their
/// order ids and the settings changed, and the file's job ids continue above every id given in memory.
extension Journal {
    /// Opens the journal at `path`, or — when the state folder or the file cannot be used — a journal in memory,
    /// with ``problem`` saying why. Throws only when another daemon holds the journal, or memory cannot be had.
    public static func openOrKeepInMemory(path: String) throws(AnnounceError) -> Journal {
        switch openOnDisk(path: path) {
        case .success(let opened):
            return Journal(
                path: path, store: Store(db: opened.db, lockDescriptor: opened.lock),
                recoveredFromCorruption: opened.evidence)
        case .failure(.inUse(let error)):
            throw error
        case .failure(.unusable(let problem)):
            do {
                let memory = try SQLiteConnection(path: ":memory:")
                let seeded = copyReadable(path, into: memory)
                try JournalSchema.migrate(memory)
                let highest = try memory.firstRow("SELECT COALESCE(MAX(id), 0) FROM job") { $0.int64(0) }
                var store = Store(db: memory, lockDescriptor: -1, problem: problem)
                store.seeded = seeded
                store.seededUpTo = seeded ? highest.flatMap { $0 } ?? 0 : 0
                return Journal(path: path, store: store, recoveredFromCorruption: nil)
            } catch {
                throw AnnounceError(.journal, "\(problem.message), and no journal can be kept in memory", cause: "\(error)")
            }
        }
    }

    /// Why the journal is in memory (the state folder or the file cannot be used); nil when it is on disk.
    public var problem: AnnounceError? { store.withLock { $0.problem } }

    /// Whether what is recorded reaches the disk (false: in memory; lost with the process).
    public var isDurable: Bool { problem == nil }

    /// Where ``returnToDisk()`` left the journal.
    public enum DiskReturn: Sendable, Equatable {
        /// On disk (it already was, or is again now).
        case onDisk
        /// The file can be used again, but jobs accepted in memory are still unfinished: tried again later.
        case waitingFor(jobs: Int)
        /// The state folder or the file still cannot be used.
        case unusable(AnnounceError)
    }

    /// While in memory: tries the file again, and moves there (see the type's documentation) if it can.
    public func returnToDisk() -> DiskReturn {
        store.withLock { store -> DiskReturn in
            guard store.problem != nil else { return .onDisk }
            let unfinished: Int
            do {
                let count = try store.db.firstRow(
                    "SELECT COUNT(*) FROM job WHERE id > ? AND state IN ('queued', 'playing')",
                    arguments: [store.seededUpTo]
                ) { $0.int(0) }
                unfinished = count.flatMap { $0 } ?? 0
            } catch {
                return .unusable(AnnounceError(.journal, "the journal in memory cannot be read", cause: "\(error)"))
            }
            // A lock still held from before the fall back would refuse this very daemon.
            if store.lockDescriptor >= 0 {
                close(store.lockDescriptor)
                store.lockDescriptor = -1
            }
            switch Self.openOnDisk(path: path) {
            case .failure(.inUse(let error)), .failure(.unusable(let error)):
                store.problem = error
                return .unusable(error)
            case .success(let opened):
                guard unfinished == 0 else {
                    opened.db.close()
                    close(opened.lock)
                    return .waitingFor(jobs: unfinished)
                }
                do {
                    try Self.merge(store, into: opened.db)
                } catch {
                    opened.db.close()
                    close(opened.lock)
                    let problem = AnnounceError(
                        .journal, "what was kept in memory cannot be written to \(path)", cause: "\(error)")
                    store.problem = problem
                    return .unusable(problem)
                }
                store.db.close()
                store = Store(db: opened.db, lockDescriptor: opened.lock)
                return .onDisk
            }
        }
    }

    /// The file stopped taking writes (`error`: read-only, an I/O error): the journal moves to memory, a copy of
    /// what the file held (read through the connection still open), and the file is let go. True if it did (false:
    /// already in memory, or no copy could be made: the write fails as it came).
    func fallBackToMemory(because error: SQLiteError) -> Bool {
        store.withLock { store -> Bool in
            guard store.problem == nil else { return false }
            do {
                let memory = try SQLiteConnection(path: ":memory:")
                try store.db.copy(into: memory)
                let highest = try memory.firstRow("SELECT COALESCE(MAX(id), 0) FROM job") { $0.int64(0) }
                store.db.close()
                // The lock stays held: no other daemon takes the folder over meanwhile.
                var degraded = Store(
                    db: memory, lockDescriptor: store.lockDescriptor,
                    problem: StateFolder.diagnose(journal: path, failure: "\(error)"))
                degraded.seeded = true
                degraded.seededUpTo = highest.flatMap { $0 } ?? 0
                store = degraded
                return true
            } catch {
                return false
            }
        }
    }

    /// Copies the file at `path` into `memory` if it can be read: read-only (a read-only file system keeps its
    /// `-wal`, which a read-only connection reads), else as an immutable file (no `-shm` could be made). False if it
    /// cannot be read at all, or is no journal.
    static func copyReadable(_ path: String, into memory: SQLiteConnection) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(path, R_OK) == 0 else { return false }
        // A URI's path: the three characters that would end or escape it, escaped.
        let escaped = path.unicodeScalars.map { character -> String in
            switch character {
            case "%": "%25"
            case "?": "%3f"
            case "#": "%23"
            default: String(character)
            }
        }.joined()
        for (name, uri) in [(path, false), ("file:\(escaped)?immutable=1", true)] {
            do {
                let file = try SQLiteConnection(path: name, readOnly: true, uri: uri, busyTimeoutMs: busyTimeoutMs)
                defer { file.close() }
                _ = try file.rows("SELECT identifier FROM grdb_migrations") { $0.text(0) }
                try file.copy(into: memory)
                return true
            } catch {
                continue
            }
        }
        return false
    }

    /// Writes what the journal in memory holds into the file's connection, in one transaction.
    static func merge(_ memory: Store, into disk: SQLiteConnection) throws(SQLiteError) {
        let rows = try JobRecord.fetchAll(memory.db, where: "1 ORDER BY id")
        let orders = try DedupRecord.fetchAll(memory.db)
        let settings = try memory.db.rows("SELECT name, value FROM setting") { ($0.text(0) ?? "", $0.text(1) ?? "") }
        try disk.transaction { () throws(SQLiteError) in
            let usedUpTo = try disk.firstRow(
                """
                SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'job'), 0),
                           COALESCE((SELECT MAX(id) FROM job), 0))
                """
            ) { $0.int64(0) }
            let used = usedUpTo.flatMap { $0 } ?? 0
            var renumbered: [Int64: Int64] = [:]
            for row in rows {
                guard let id = row.id else { continue }
                if memory.seeded && id <= memory.seededUpTo || id > used {
                    try row.insertOrReplace(disk)
                } else {
                    var copy = row
                    try copy.insert(disk)
                    renumbered[id] = copy.id
                }
            }
            for var order in orders {
                order.jobId = renumbered[order.jobId] ?? order.jobId
                try order.upsert(disk)
            }
            // The day totals of purged jobs only if the file's were copied in at start (else they would replace the
            // file's with this run's alone).
            for (name, value) in settings where memory.seeded || !name.hasPrefix(purgedPrefix) {
                try disk.execute(
                    "INSERT INTO setting (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    name, value)
            }
            let highest = rows.compactMap(\.id).max() ?? 0
            try disk.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'job'", highest)
        }
    }
}

/// What is wrong with a state folder, named for what it is (issue 27, finding 5): a read-only file system,
/// another owner, a directory where the journal should be, a full disk — not SQLite's SQLITE_CANTOPEN.
enum StateFolder {
    /// The problem with the journal at `journal` (its folder, then the file), or `failure` as it came.
    static func diagnose(journal: String, failure: String) -> AnnounceError {
        let folder = Path.directory(of: journal)
        func problem(_ message: String) -> AnnounceError { AnnounceError(.journal, message, cause: failure) }
        var info = stat()
        guard stat(folder, &info) == 0 else {
            return problem("the state folder \(folder) does not exist and cannot be made")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { return problem("the state folder \(folder) is not a folder") }
        // What the kernel answers a write: a file system turned read-only (the mount flags may still say rw: ext4's
        // emergency read-only after an error), no permission, full, failing.
        let probe = Path.join(folder, ".announce-write-check")
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        if descriptor >= 0 {
            close(descriptor)
            unlink(probe)
        } else {
            switch errno {
            case EROFS: return problem("the state folder \(folder) is on a read-only file system")
            case EACCES, EPERM:
                return problem(
                    "the state folder \(folder) (owner uid \(info.st_uid), mode \(octal(info.st_mode))) cannot be "
                        + "written by this user (uid \(geteuid()))")
            case ENOSPC, EDQUOT: return problem("the file system holding \(folder) is full")
            case EIO: return problem("the disk holding \(folder) fails (I/O error)")
            default: break
            }
        }
        var file = stat()
        if stat(journal, &file) == 0 {
            if (file.st_mode & S_IFMT) == S_IFDIR { return problem("\(journal) is a directory, not a journal file") }
            if (file.st_mode & S_IFMT) != S_IFREG { return problem("\(journal) is not a regular file") }
            if faccessat(AT_FDCWD, journal, R_OK | W_OK, AT_EACCESS) != 0 {
                return problem(
                    "the journal \(journal) (owner uid \(file.st_uid), mode \(octal(file.st_mode))) cannot be "
                        + "written by this user (uid \(geteuid()))")
            }
        }
        return problem("the journal \(journal) cannot be opened")
    }

    static func octal(_ mode: mode_t) -> String { "0" + String(mode & 0o7777, radix: 8) }
}
