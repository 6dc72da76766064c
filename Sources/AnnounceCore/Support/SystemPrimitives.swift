#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

// The few things the project used from full Foundation (swift-corelibs-foundation), over the C library instead.
// Full Foundation links ICU (≈ 40 MB, most of a static binary) and costs every process its start-up; everything
// else the project needs is in FoundationEssentials, the standard library, Synchronization or Dispatch
// (docs/benchmarks.md, "Size").

/// Threads of our own (pthread): the audio thread and blocking work that must not hold Swift concurrency's few
/// threads.
public enum SystemThread {
    private final class Work {
        let name: String?
        let body: @Sendable () -> Void
        init(name: String?, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Runs `body` on a new detached thread, named `name` (at most 15 bytes reach the kernel) if given.
    public static func detach(name: String? = nil, _ body: @escaping @Sendable () -> Void) {
        let work = Unmanaged.passRetained(Work(name: name, body: body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let result = pthread_create(
            &thread, &attributes,
            { raw in
                let work = Unmanaged<Work>.fromOpaque(raw!).takeRetainedValue()
                if let name = work.name { SystemThread.nameCurrent(name) }
                work.body()
                return nil
            }, work)
        if result != 0 {
            // Out of threads or memory: nothing sensible can run without it.
            fatalError("pthread_create: \(String(cString: strerror(result)))")
        }
    }

    /// Names the calling thread for `top -H` and `ps -L`, as `pthread_setname_np` does (it is not visible to
    /// Swift): by writing `/proc/thread-self/comm`. Best effort.
    public static func nameCurrent(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// Sleeps the calling thread.
    public static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

/// Paths as strings, as `NSString`'s path methods treat them.
public enum Path {
    /// `directory` and `name` joined by one slash (`name` alone if `directory` is empty).
    public static func join(_ directory: String, _ name: String) -> String {
        if directory.isEmpty { return name }
        if name.isEmpty { return directory }
        return directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    /// The folder of `path`: "/a/b" → "/a", "/a" → "/", "a" → "", trailing slashes ignored.
    public static func directory(of path: String) -> String {
        var text = Substring(path)
        while text.count > 1 && text.hasSuffix("/") { text = text.dropLast() }
        guard let slash = text.lastIndex(of: "/") else { return "" }
        if slash == text.startIndex { return "/" }
        var folder = text[..<slash]
        while folder.count > 1 && folder.hasSuffix("/") { folder = folder.dropLast() }
        return String(folder)
    }
}

/// What went wrong, readably: for an error of FoundationEssentials' file APIs the system's reason ("No such
/// file or directory"), which it does not put in its own description (`CocoaError(code: …, userInfo: …)`);
/// any other error as it describes itself.
public func errorReason(_ error: any Error) -> String {
    if let cocoa = error as? CocoaError, let posix = cocoa.underlying as? POSIXError {
        return String(cString: strerror(posix.code.rawValue))
    }
    if let posix = error as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
    return "\(error)"
}

/// Writes to standard error, unbuffered (log lines, command-line errors).
public enum StandardError {
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            offset += written
        }
        bytes.removeAll()
    }
}

/// Reads standard input to its end.
public enum StandardInput {
    public static func readAll() -> [UInt8] { WholeFile.drain(0).bytes }
}

/// Reads a whole file by its path, the way `cat` does: a regular file, or a device such as /dev/null (an empty
/// configuration); never a FIFO, whose writer could hold a start or a reload forever. For configuration files,
/// whose errors must say why they cannot be read.
public enum WholeFile {
    /// The file's bytes, or why it cannot be read (the C library's words: "No such file or directory",
    /// "Permission denied", "Is a directory").
    public static func read(atPath path: String) -> Result<[UInt8], ReadFailure> {
        let descriptor = Glibc.open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard descriptor >= 0 else { return .failure(ReadFailure(errno: errno)) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return .failure(ReadFailure(errno: errno)) }
        let kind = info.st_mode & S_IFMT
        guard kind != S_IFIFO && kind != S_IFSOCK else {
            return .failure(ReadFailure(reason: kind == S_IFIFO ? "a FIFO, not a file" : "a socket, not a file"))
        }
        let (bytes, failure) = drain(descriptor)
        if let failure { return .failure(ReadFailure(errno: failure)) }
        return .success(bytes)
    }

    public struct ReadFailure: Error, CustomStringConvertible {
        public let description: String
        init(reason: String) { description = reason }
        init(errno: Int32) { description = String(cString: strerror(errno)) }
    }

    /// What `descriptor` gives until its end, and the errno of a read that failed before it. Stops once it holds
    /// more than `limit` bytes (the caller sees `bytes.count > limit`).
    public static func drain(_ descriptor: Int32, limit: Int = .max) -> (bytes: [UInt8], errno: Int32?) {
        var bytes: [UInt8] = []
        let failure = chunks(descriptor) { chunk in
            bytes += chunk
            return bytes.count <= limit
        }
        return (bytes, failure)
    }

    /// Reads `descriptor` to its end, 64 KiB at a time, handing each chunk to `body` (which returns false to stop
    /// early); the errno of a read that failed, else nil.
    public static func chunks(_ descriptor: Int32, _ body: (UnsafeRawBufferPointer) -> Bool) -> Int32? {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return errno
            }
            if count == 0 { return nil }
            guard chunk.withUnsafeBytes({ body(UnsafeRawBufferPointer(rebasing: $0[..<count])) }) else { return nil }
        }
    }
}

/// A configuration file's text (announced.toml, push.toml), or an error that says why there is none.
public enum ConfigText {
    public static func read(_ path: String) throws(AnnounceError) -> String {
        let bytes: [UInt8]
        switch WholeFile.read(atPath: path) {
        case .success(let read): bytes = read
        case .failure(let failure): throw AnnounceError(.badRequest, "config file \(path) cannot be read (\(failure))")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw AnnounceError(.badRequest, "config file \(path) is not UTF-8 text")
        }
        return text
    }
}

/// printf-style formatting of numbers with the C library (`vsnprintf`, the "C" locale: a decimal point
/// whatever the environment says), for what `String(format:)` did: `cFormat("%.1f ms", 12.25)`.
/// Numbers and C strings only (no `%@`).
public func cFormat(_ format: String, _ arguments: any CVarArg...) -> String {
    withVaList(arguments) { list in
        var buffer = [CChar](repeating: 0, count: 128)
        let needed = Int(vsnprintf(&buffer, buffer.count, format, list))
        if needed >= buffer.count {
            buffer = [CChar](repeating: 0, count: needed + 1)
            return withVaList(arguments) { again in
                _ = vsnprintf(&buffer, buffer.count, format, again)
                return String(decoding: buffer.prefix(needed).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
        return String(decoding: buffer.prefix(max(0, needed)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension String {
    /// The C string in `buffer`, up to its NUL (or all of it).
    public init(cBuffer buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (Foundation's `.whitespaces`; newlines are kept).
    public func trimmingSpaces() -> String {
        trimming { $0.isWhitespace && !$0.isNewline }
    }

    /// Without leading and trailing white space, newlines included (Foundation's `.whitespacesAndNewlines`).
    public func trimmingWhitespace() -> String {
        trimming { $0.isWhitespace }
    }

    /// Without leading and trailing newlines (Foundation's `.newlines`).
    public func trimmingNewlines() -> String {
        trimming { $0.isNewline }
    }

    private func trimming(_ drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
