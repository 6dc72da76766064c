import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A plain HTTP/1.1 client over a TCP socket, for scraping the metrics endpoints as Prometheus would (no
/// URLSession: FoundationNetworking is not part of this toolchain's static build).
public enum HTTP {
    public struct Reply: Sendable, CustomStringConvertible {
        public var status: Int
        public var headers: [String: String]
        public var body: String
        public var description: String { "HTTP \(status) \(headers)\n\(body)" }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// `GET path` (or another method) from `127.0.0.1:port`; the reply, read until the server closes.
    public static func request(
        port: Int, path: String, method: String = "GET", host: String = "127.0.0.1", timeout: Duration = .seconds(10)
    ) async throws -> Reply {
        try await blocking {
            let socket = try connect(host: host, port: port)
            defer { close(socket) }
            try send(socket, "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nAccept: text/plain\r\n\r\n")
            let raw = try readToEnd(socket, timeout: timeout)
            return try parse(raw)
        }
    }

    /// A connected TCP socket.
    public static func connect(host: String = "127.0.0.1", port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "connect to \(host):\(port): \(reason)")
        }
        return fd
    }

    public static func send(_ fd: Int32, _ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            offset += written
        }
    }

    /// Everything the peer sends until it closes; throws if it has not closed within `timeout`.
    public static func readToEnd(_ fd: Int32, timeout: Duration) throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw Failure(description: "the server did not close within \(timeout)") }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let (seconds, attoseconds) = left.components
            let milliseconds = Int32(seconds * 1000 + attoseconds / 1_000_000_000_000_000)
            guard poll(&poller, 1, max(1, milliseconds)) >= 0 else {
                if errno == EINTR { continue }
                throw Failure(description: "poll: \(String(cString: strerror(errno)))")
            }
            guard poller.revents != 0 else { continue }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { return data }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == ECONNRESET { return data }
                throw Failure(description: "recv: \(String(cString: strerror(errno)))")
            }
            data += chunk[..<count]
        }
    }

    static func parse(_ raw: [UInt8]) throws -> Reply {
        let text = String(decoding: raw, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw Failure(description: "no HTTP reply: \(text)") }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else {
            throw Failure(description: "bad status line: \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[line[..<colon].lowercased()] = value
        }
        return Reply(status: status, headers: headers, body: String(text[split.upperBound...]))
    }

    /// The value of the sample `name` (with its labels, as exposed: `announce_payments_total{state="spoken"}`) in a
    /// Prometheus text exposition, or nil.
    public static func sample(_ name: String, in exposition: String) -> Double? {
        for line in exposition.split(separator: "\n") where !line.hasPrefix("#") {
            guard line.hasPrefix(name + " ") else { continue }
            return Double(line.dropFirst(name.count + 1).split(separator: " ").first ?? "")
        }
        return nil
    }
}
