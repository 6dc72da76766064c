import AnnounceCore

#if canImport(Glibc)
import Glibc
#endif

/// A journal file that SQLite finds damaged (a disk that lost sectors, a power cut on cheap flash, a file
/// overwritten by hand) must not keep the speaker silent with no way back. Such a file is moved aside with its
/// `-wal` and `-shm` as evidence (`journal.sqlite.corrupt-<UTC time>…`), and the daemon starts with an empty
/// journal; it says so loudly and in `status` (docs/deployment.md, "A damaged journal").
///
/// Only damage is moved aside: SQLite's SQLITE_CORRUPT and SQLITE_NOTADB (also from `PRAGMA quick_check`). A
/// journal that cannot be opened for another reason (permissions, a full disk, another daemon holding it) is an
/// error as before, and nothing is touched.
extension Journal {
    /// Opens the journal with `open`, unless the file is damaged: then it is moved aside first and `open` starts a
    /// new one. Returns the connection and where the damaged file went (nil: it was sound).
    ///
    /// The file is checked before `open` touches it, on a read-only connection (`PRAGMA quick_check`, which reads
    /// every page): damage that opening alone does not see (a file cut short, a page overwritten) is found at start,
    /// not at the first write of an accepted payment, and nothing is written to the evidence (a read-write
    /// connection would checkpoint the `-wal` into the damaged file when it closes). Damage that only the read-write
    /// open finds is handled the same way.
    static func openingAsideIfCorrupt(
        path: String, _ open: () throws(SQLiteError) -> SQLiteConnection
    ) throws -> (connection: SQLiteConnection, movedAside: String?) {
        if let damage = damage(at: path) {
            let evidence = try moveAside(path, reason: damage)
            return (try open(), evidence)
        }
        // (One catch-all, not `catch let error where error.isCorruption` with the rest thrown on implicitly: for a
        // typed error that Debian's Swift 6.2.3, built with assertions, fails SIL verification — "stack dealloc
        // with empty stack" — and crashes.)
        do {
            return (try open(), nil)
        } catch {
            guard error.isCorruption else { throw error }
            let evidence = try moveAside(path, reason: error)
            return (try open(), evidence)
        }
    }

    /// The damage a read-only look at the journal at `path` finds; nil if it is sound, absent, or cannot be read
    /// for another reason (the read-write open then says what is wrong).
    static func damage(at path: String) -> SQLiteError? {
        guard access(path, F_OK) == 0 else { return nil }
        do {
            let check = try SQLiteConnection(path: path, readOnly: true, busyTimeoutMs: Journal.busyTimeoutMs)
            defer { check.close() }
            let findings = try check.rows("PRAGMA quick_check") { $0.text(0) ?? "" }
            guard findings == ["ok"] else {
                return .corruption(function: "PRAGMA quick_check", message: findings.prefix(5).joined(separator: "; "))
            }
            return nil
        } catch {
            return error.isCorruption ? error : nil
        }
    }

    /// Renames the journal and its `-wal` and `-shm` to `<path>.corrupt-<UTC time>` (and `…-wal`, `…-shm`) in the
    /// same folder. Returns the new name of the journal itself.
    static func moveAside(_ path: String, reason: any Error, now: time_t = time(nil)) throws -> String {
        var base = "\(path).corrupt-\(utcStamp(now))"
        var attempt = 1
        while access(base, F_OK) == 0 {
            attempt += 1
            base = "\(path).corrupt-\(utcStamp(now))-\(attempt)"
        }
        for suffix in ["", "-wal", "-shm"] where access(path + suffix, F_OK) == 0 {
            guard rename(path + suffix, base + suffix) == 0 else {
                throw AnnounceError(
                    .journal, "the journal \(path) is damaged (\(reason)) and cannot be moved aside",
                    cause: "rename \(path + suffix): \(String(cString: strerror(errno)))")
            }
        }
        return base
    }

    /// `20261125T030303Z`.
    static func utcStamp(_ time: time_t) -> String {
        var seconds = time
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }
}
