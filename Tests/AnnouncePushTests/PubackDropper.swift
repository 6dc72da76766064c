import AnnounceTestSupport
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on loopback between the listener and the broker that loses the client's first PUBACK(s): when it
/// sees one on the way to the broker, it cuts both connections instead of passing it on. The broker therefore never
/// learns that the message was handled and redelivers it on the next connection (which the proxy passes through
/// untouched once its drops are used up), exactly as when a link dies just after the daemon accepted a payment.
final class PubackDropper: Sendable {
    let port: Int
    private let brokerPort: Int
    private let listenFD: Int32
    private let remaining: Mutex<Int>
    private let droppedCount = Mutex(0)
    private let sockets = Mutex<[Int32]>([])

    init(brokerPort: Int, drop: Int = 1) throws {
        self.brokerPort = brokerPort
        remaining = Mutex(drop)
        port = try Broker.freePort()
        listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listenFD, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: port)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard bound, listen(listenFD, 8) == 0 else { throw HarnessError("proxy cannot listen: errno \(errno)") }
        let proxy = self
        Thread.detachNewThread { proxy.acceptLoop() }
    }

    /// PUBACKs lost so far.
    var dropped: Int { droppedCount.withLock { $0 } }

    var url: String { "mqtt://127.0.0.1:\(port)" }

    func close() {
        _ = shutdown(listenFD, Int32(SHUT_RDWR))
        Glibc.close(listenFD)
        for fd in sockets.withLock({ $0 }) { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listenFD, nil, nil)
            guard client >= 0 else { return }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: brokerPort)
            let connected = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            guard connected else {
                Glibc.close(client)
                Glibc.close(upstream)
                continue
            }
            sockets.withLock { $0 += [client, upstream] }
            let proxy = self
            let pumps = Countdown(2)
            let finished: @Sendable () -> Void = {
                // The second pump to finish closes both sockets (nobody reads or writes them any more).
                guard pumps.reachedZero() else { return }
                proxy.sockets.withLock { $0.removeAll { $0 == client || $0 == upstream } }
                Glibc.close(client)
                Glibc.close(upstream)
            }
            Thread.detachNewThread {
                proxy.clientToBroker(client, upstream)
                finished()
            }
            Thread.detachNewThread {
                proxy.copy(from: upstream, to: client)
                finished()
            }
        }
    }

    /// Broker → client: bytes as they come.
    private func copy(from source: Int32, to target: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard count > 0, writeAll(target, Array(buffer[..<count])) else { break }
        }
        _ = shutdown(source, Int32(SHUT_RDWR))
        _ = shutdown(target, Int32(SHUT_RDWR))
    }

    /// Client → broker, one MQTT packet at a time; a PUBACK (type 4) while drops remain cuts both connections.
    private func clientToBroker(_ client: Int32, _ upstream: Int32) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            pending += buffer[..<count]
            while let length = Self.packetLength(pending) {
                let packet = Array(pending[..<length])
                pending.removeFirst(length)
                if packet[0] >> 4 == 4, takeDrop() {
                    droppedCount.withLock { $0 += 1 }
                    break loop
                }
                guard writeAll(upstream, packet) else { break loop }
            }
        }
        _ = shutdown(client, Int32(SHUT_RDWR))
        _ = shutdown(upstream, Int32(SHUT_RDWR))
    }

    private func takeDrop() -> Bool {
        remaining.withLock { left in
            guard left > 0 else { return false }
            left -= 1
            return true
        }
    }

    /// The length of the first complete packet in `bytes` (fixed header + remaining length), or nil.
    static func packetLength(_ bytes: [UInt8]) -> Int? {
        var multiplier = 1
        var remaining = 0
        var index = 1
        while true {
            guard index < bytes.count, index <= 4 else { return nil }
            let byte = Int(bytes[index])
            remaining += (byte & 0x7f) * multiplier
            multiplier *= 128
            index += 1
            if byte & 0x80 == 0 { break }
        }
        let total = index + remaining
        return bytes.count >= total ? total : nil
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }
}

/// Counts down from a number, from any thread.
private final class Countdown: Sendable {
    private let left: Mutex<Int>

    init(_ count: Int) { left = Mutex(count) }

    /// Counts one down; true for the call that reaches zero.
    func reachedZero() -> Bool {
        left.withLock { value in
            value -= 1
            return value == 0
        }
    }
}
