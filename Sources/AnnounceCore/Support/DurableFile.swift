#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Replaces a file so that, even after a power cut, it holds either its old content or the whole new one: the
/// bytes go to a temporary file beside it, which is synced, renamed over the file, and the folder synced.
/// Used for every file the daemon and the push listener keep across restarts outside SQLite.
public enum DurableFile {
    /// Which call failed, on which path, and the C library's reason.
    public struct Failure: Error, CustomStringConvertible {
        public let call: String
        public let path: String
        public let reason: String
        /// The C library's error number (ENOSPC: the disk is full).
        public let code: Int32
        public var description: String { "\(call) \(path): \(reason)" }

        init(_ call: String, _ path: String, errno code: Int32 = errno) {
            self.call = call
            self.path = path
            self.code = code
            self.reason = String(cString: strerror(code))
        }

        /// The failure of a call made elsewhere (its `errno` still the call's).
        public init(call: String, path: String, errno code: Int32 = errno) {
            self.init(call, path, errno: code)
        }
    }

    /// Writes `bytes` to `path` (mode `mode`, less the umask). The temporary file is `path` + ".tmp"; it is removed
    /// when anything fails. A missing folder is made.
    public static func replace(_ path: String, with bytes: [UInt8], mode: mode_t = 0o600) throws(Failure) {
        let directory = Path.directory(of: path)
        let temporary = path + ".tmp"
        var fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        if fd < 0 && errno == ENOENT {
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        }
        guard fd >= 0 else { throw Failure("create", temporary) }
        func abandon(_ failure: Failure) -> Failure {
            close(fd)
            unlink(temporary)
            return failure
        }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw abandon(Failure("write", temporary, errno: written == 0 ? ENOSPC : errno)) }
            offset += written
        }
        guard fsync(fd) == 0 else { throw abandon(Failure("fsync", temporary)) }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let failure = Failure("rename", temporary)
            unlink(temporary)
            throw failure
        }
        try syncDirectory(directory)
    }

    /// Removes `path` durably; a file that is already gone is not an error.
    public static func remove(_ path: String) throws(Failure) {
        guard unlink(path) == 0 || errno == ENOENT else { throw Failure("remove", path) }
        try syncDirectory(Path.directory(of: path))
    }

    /// Syncs a folder, so that the names made, renamed or removed in it survive a power cut.
    public static func syncDirectory(_ directory: String) throws(Failure) {
        let path = directory.isEmpty ? "." : directory
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure("open", path) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw Failure("fsync", path) }
    }
}
