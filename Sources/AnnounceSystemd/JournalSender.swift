import CSystemd
import Glibc

/// Writes entries to the systemd journal through its native protocol (`sd_journal_sendv`): each entry a set of
/// fields — `MESSAGE`, `PRIORITY`, `MESSAGE_ID`, `ORDER_ID` … — that `journalctl` can match on
/// (`journalctl ORDER_ID=A1`), rather than one line of text on standard error.
public enum JournalSender {
    /// A field name journald accepts: `A`–`Z`, `0`–`9` and `_`, not starting with a digit or `_` (those starting
    /// with `_` are the journal's own, trusted fields), at most 64 characters.
    public static func isValidFieldName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first),
            first != UInt8(ascii: "_"), name.utf8.count <= 64
        else { return false }
        return name.utf8.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }

    /// Where journald receives native entries (sd_journal_sendv sends there).
    public static let socketPath = "/run/systemd/journal/socket"

    /// Sends one entry. `fields` are `(NAME, value)` pairs with valid names (``isValidFieldName(_:)``); values may
    /// hold any bytes, newlines included. Returns 0, or a negative errno (no journal: `-ENOENT`, nobody reading:
    /// `-ECONNREFUSED`), in which case nothing was recorded. libsystemd itself reports success when there is no
    /// journal socket at all ("fail silently"); here that is `-ENOENT`, so that the caller can write elsewhere.
    public static func send(_ fields: [(name: String, value: String)]) -> Int32 {
        guard !fields.isEmpty else { return 0 }
        guard access(socketPath, F_OK) == 0 else { return -ENOENT }
        // One buffer holding every "NAME=value", and an iovec per field pointing into it.
        var bytes: [UInt8] = []
        var ranges: [Range<Int>] = []
        bytes.reserveCapacity(fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 1 })
        for field in fields {
            let start = bytes.count
            bytes.append(contentsOf: field.name.utf8)
            bytes.append(UInt8(ascii: "="))
            bytes.append(contentsOf: field.value.utf8)
            ranges.append(start..<bytes.count)
        }
        return bytes.withUnsafeMutableBytes { buffer in
            var vectors = ranges.map { range in
                iovec(iov_base: buffer.baseAddress! + range.lowerBound, iov_len: range.count)
            }
            return sd_journal_sendv(&vectors, Int32(vectors.count))
        }
    }

    /// Whether standard error is connected to the journal, as systemd documents it (systemd.exec(5),
    /// `$JOURNAL_STREAM`): the variable holds the device and inode of that stream ("device:inode"), and they are
    /// standard error's. A program started from such a service (a shell, a child) with its standard error
    /// redirected elsewhere inherits the variable but fails this check.
    public static func isStandardErrorTheJournal(journalStream value: String?, descriptor: Int32 = 2) -> Bool {
        guard let value else { return false }
        let parts = value.split(separator: ":")
        var info = stat()
        guard parts.count == 2, fstat(descriptor, &info) == 0 else { return false }
        return UInt64(parts[0]) == UInt64(info.st_dev) && UInt64(parts[1]) == UInt64(info.st_ino)
    }
}
