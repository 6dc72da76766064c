import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Why a request could not be exchanged with the daemon (as opposed to the daemon refusing it).
public struct ClientError: Error, CustomStringConvertible, Sendable {
    public var message: String
    /// The errno of a failed connect (no socket, nobody listening, not allowed), else 0.
    public var connectErrno: Int32 = 0
    public var description: String { message }
}

/// A blocking client of the daemon's socket: connect, send one JSON line, read reply lines.
/// Small on purpose: `announce-ctl` starts, sends one request and exits, so it should cost microseconds.
public final class Client {
    public let path: String
    private var fd: Int32 = -1
    private var buffer: [UInt8] = []

    /// The socket path from, in order: the explicit value, `ANNOUNCE_SOCKET`, then for root the system socket;
    /// for other users `$XDG_RUNTIME_DIR/announce.sock` if it exists, else the system socket if that exists.
    /// `environment`: the process's own when nil (read with getenv: ProcessInfo's copy of the whole environment
    /// cost `announce-ctl say` more than the rest of its request).
    public static func socketPath(
        explicit: String?, environment: [String: String]? = nil,
        isRoot: Bool = getuid() == 0, systemSocket: String = systemSocketPath
    ) -> String {
        func variable(_ name: String) -> String? {
            if let environment { return environment[name] }
            return getenv(name).map { String(cString: $0) }
        }
        if let explicit, !explicit.isEmpty { return explicit }
        if let path = variable("ANNOUNCE_SOCKET"), !path.isEmpty { return path }
        if isRoot { return systemSocket }
        // A user's own daemon if one runs, else the system daemon (staff in its socket group use it as is).
        let own = "\(variable("XDG_RUNTIME_DIR") ?? "/tmp")/announce.sock"
        if !exists(own) && exists(systemSocket) { return systemSocket }
        return own
    }

    /// Where the system daemon (systemd's announced.socket, or announced run as root) listens.
    public static let systemSocketPath = "/run/announce/announce.sock"

    private static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// Connects to the daemon. With a `timeout` (seconds), a send or a reply that takes longer fails instead of
    /// blocking for ever (the push listener must not hang on a stuck daemon).
    public init(path: String, timeout: Double? = nil) throws(ClientError) {
        self.path = path
        fd = try Self.connectedSocket(path: path, timeout: timeout)
    }

    /// A blocking Unix stream socket connected to `path` (close-on-exec); the caller owns the descriptor.
    /// With a `timeout` (seconds) on both directions. Shared with the tests' raw connections.
    public static func connectedSocket(path: String, timeout: Double? = nil) throws(ClientError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            throw ClientError(message: "socket path \(path) is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ClientError(message: "socket(): \(String(cString: strerror(errno)))") }
        if let timeout {
            var value = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
            for option in [SO_RCVTIMEO, SO_SNDTIMEO] {
                _ = setsockopt(fd, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size))
            }
        }
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw ClientError(
                message: "cannot connect to the daemon at \(path): \(String(cString: strerror(code)))", connectErrno: code)
        }
        return fd
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// Sends a request and returns its replies: one, or for `wait` the acceptance and the final reply.
    /// `onReply` sees each as it arrives.
    public func send(_ request: Request, onReply: (Response) -> Void = { _ in }) throws(ClientError) -> [Response] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let line = try? encoder.encode(request) else { throw ClientError(message: "cannot encode the request") }
        return try send(encoded: Array(line), onReply: onReply)
    }

    /// Sends a request already encoded as one JSON object (without the newline) and returns its replies, as
    /// ``send(_:onReply:)``.
    public func send(encoded line: [UInt8], onReply: (Response) -> Void = { _ in }) throws(ClientError) -> [Response] {
        try writeAll(line + [UInt8(ascii: "\n")])
        var replies: [Response] = []
        while true {
            let reply = try readLine()
            guard let response = try? JSONDecoder().decode(Response.self, from: Data(reply)) else {
                throw ClientError(message: "the daemon sent an unreadable reply: \(String(decoding: reply, as: UTF8.self))")
            }
            onReply(response)
            replies.append(response)
            if response.done || !response.ok { return replies }
        }
    }

    private func writeAll(_ bytes: [UInt8]) throws(ClientError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { throw ClientError(message: "timed out sending to the daemon") }
                throw ClientError(message: "cannot send to the daemon: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    private func readLine() throws(ClientError) -> [UInt8] {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { throw ClientError(message: "the daemon did not reply in time") }
                throw ClientError(message: "cannot read from the daemon: \(String(cString: strerror(errno)))")
            }
            if count == 0 { throw ClientError(message: "the daemon closed the connection without replying") }
            buffer += chunk[..<count]
        }
    }
}
