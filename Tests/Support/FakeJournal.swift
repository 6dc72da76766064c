import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Stands in for journald for one daemon: a datagram socket at `DIR/journal/socket` that receives what
/// `sd_journal_sendv` sends (journald's native protocol, systemd's `JOURNAL_NATIVE_PROTOCOL`), and a launcher that
/// runs the daemon in a mount namespace of its own where `DIR` is `/run/systemd` — so the daemon's libsystemd finds
/// this socket where it looks for the journal's, and nothing else on the machine is touched. Needs root
/// (unshare, mount). The real journald is the VM's test (Tests/SystemTests).
public final class FakeJournal: Sendable {
    public let directory: String
    private let descriptor: Int32
    /// Entries received, shared with the reading task.
    private let received = Received()

    /// `listening` false: the folder has no socket (a journal that is not there: writes to it fail).
    public init(listening: Bool = true) throws {
        directory = try Paths.temporaryDirectory("jrn")
        try FileManager.default.createDirectory(atPath: "\(directory)/journal", withIntermediateDirectories: true)
        guard listening else {
            descriptor = -1
            return
        }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = "\(directory)/journal/socket"
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard fd >= 0, bound == 0 else { throw HarnessError("fake journal: \(String(cString: strerror(errno)))") }
        var size: Int32 = 8 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        descriptor = fd
        let received = self.received
        // A thread of its own: blocking reads must not hold one of Swift concurrency's few threads.
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            defer { close(fd) }
            while !received.stopped.load(ordering: .relaxed) {
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) > 0 else { continue }
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { continue }
                let entry = Self.parse(buffer[..<count])
                received.entries.withLock { $0.append(entry) }
            }
        }
    }

    deinit {
        received.stopped.store(true, ordering: .relaxed)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs the program in a mount namespace where this folder is `/run/systemd` (``DaemonProcess/start``'s
    /// `launcher`).
    public var launcher: [String] {
        [
            "/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            "mkdir -p /run/systemd && mount --bind \"$0\" /run/systemd && exec \"$@\"", directory,
        ]
    }

    /// The entries received so far, each as its fields.
    public var entries: [[String: String]] { received.entries.withLock { $0 } }

    private final class Received: Sendable {
        let entries = Mutex<[[String: String]]>([])
        /// Tells the reading thread to close the socket and end.
        let stopped = Atomic<Bool>(false)
    }

    /// Waits until an entry satisfies `matching`; returns it.
    public func waitForEntry(
        timeout: Duration = .seconds(30), _ matching: ([String: String]) -> Bool
    ) async throws -> [String: String] {
        let entry = try await eventuallyValue(timeout: timeout, every: .milliseconds(50)) {
            entries.first(where: matching)
        }
        if let entry { return entry }
        throw HarnessError("no such journal entry within \(timeout); received:\n\(entries)")
    }

    /// One datagram of the native protocol: `NAME=value\n`, or `NAME\n` + a 64-bit little-endian length + the
    /// value + `\n` for a value holding a newline.
    static func parse(_ bytes: ArraySlice<UInt8>) -> [String: String] {
        var fields: [String: String] = [:]
        var index = bytes.startIndex
        while index < bytes.endIndex {
            guard let end = bytes[index...].firstIndex(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "\n") })
            else { break }
            let name = String(decoding: bytes[index..<end], as: UTF8.self)
            if bytes[end] == UInt8(ascii: "=") {
                let valueEnd = bytes[(end + 1)...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
                fields[name] = String(decoding: bytes[(end + 1)..<valueEnd], as: UTF8.self)
                index = valueEnd + 1
            } else {
                let lengthStart = end + 1
                guard lengthStart + 8 <= bytes.endIndex else { break }
                var length = 0
                for (shift, byte) in bytes[lengthStart..<(lengthStart + 8)].enumerated() {
                    length |= Int(byte) << (8 * shift)
                }
                let valueStart = lengthStart + 8
                guard valueStart + length <= bytes.endIndex else { break }
                fields[name] = String(decoding: bytes[valueStart..<(valueStart + length)], as: UTF8.self)
                index = valueStart + length + 1
            }
        }
        return fields
    }
}
