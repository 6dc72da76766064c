import Foundation
import Glibc
import Synchronization

/// A stand-in for systemd's notification socket (`$NOTIFY_SOCKET`): a real `AF_UNIX` datagram socket that
/// collects what a process sends with `sd_notify`, one message (`KEY=VALUE` lines) per datagram.
public final class NotifySocket: Sendable {
    public let path: String
    private let descriptor: Int32
    private let messages = Mutex<[String]>([])
    private let done = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    public init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            Glibc.close(descriptor)
            throw HarnessError("socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            Glibc.close(descriptor)
            throw HarnessError("bind \(path): \(String(cString: strerror(errno)))")
        }
        // Wake up now and then to notice `close()`.
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !done.load(ordering: .acquiring) {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count > 0 {
                    let message = String(decoding: buffer[0..<count], as: UTF8.self)
                    messages.withLock { $0.append(message) }
                }
            }
            finished.signal()
        }
        thread.start()
    }

    /// Every message received so far, oldest first.
    public var received: [String] { messages.withLock { $0 } }

    /// Waits until some message satisfies `predicate` (checking every 20 ms, at most `limit`), and returns it.
    public func wait(
        for limit: Duration = .seconds(20), until predicate: (String) -> Bool
    ) async throws -> String? {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if let message = received.first(where: predicate) { return message }
            try await Task.sleep(for: .milliseconds(20))
        }
        return received.first(where: predicate)
    }

    /// Stops listening and removes the socket file.
    public func close() {
        done.store(true, ordering: .releasing)
        finished.wait()
        Glibc.close(descriptor)
        unlink(path)
    }
}
