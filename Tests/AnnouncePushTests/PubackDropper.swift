import AnnounceTestSupport
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on loopback between the listener and the broker that loses PUBACKs.
///
/// By default it loses the client's first PUBACK(s): when it sees one on the way to the broker, it cuts both
/// connections instead of passing it on. The broker therefore never learns that the message was handled and
/// redelivers it on the next connection (which the proxy passes through untouched once its drops are used up),
/// exactly as when a link dies just after the daemon accepted a payment.
///
/// With `target: .brokerAcks(topic)` it loses the broker's PUBACK(s) for what the client published to a topic
/// containing `topic` (a receipt): the broker has the message, the client never hears so. `action: .cut` then cuts
/// both connections (a link dying, a broker restarting just then); `.hold` keeps the connection and simply never
/// passes the PUBACK on (the client waits, and can be killed meanwhile).
final class PubackDropper: Sendable {
    enum Target: Sendable {
        case clientAcks
        case brokerAcks(topicContaining: String)
    }

    enum Action: Sendable {
        case cut, hold
    }

    let port: Int
    private let brokerPort: Int
    private let target: Target
    private let action: Action
    private let listenFD: Int32
    private let remaining: Mutex<Int>
    private let droppedCount = Mutex(0)
    private let sockets = Mutex<[Int32]>([])

    init(brokerPort: Int, drop: Int = 1, target: Target = .clientAcks, action: Action = .cut) throws {
        self.brokerPort = brokerPort
        self.target = target
        self.action = action
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
            // Packet ids of the client's publishes whose PUBACK from the broker is to be lost (this connection's).
            let watched = PacketIDs()
            Thread.detachNewThread {
                proxy.clientToBroker(client, upstream, watched: watched)
                finished()
            }
            Thread.detachNewThread {
                if case .brokerAcks = proxy.target {
                    proxy.brokerToClient(upstream, client, watched: watched)
                } else {
                    proxy.copy(from: upstream, to: client)
                }
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

    /// Client → broker, one MQTT packet at a time; a PUBACK (type 4) while drops remain cuts both connections
    /// (`.clientAcks`); the packet ids of QoS 1 publishes to the watched topic are noted (`.brokerAcks`).
    private func clientToBroker(_ client: Int32, _ upstream: Int32, watched: PacketIDs) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            pending += buffer[..<count]
            while let length = Self.packetLength(pending) {
                let packet = Array(pending[..<length])
                pending.removeFirst(length)
                switch target {
                case .clientAcks:
                    if packet[0] >> 4 == 4, takeDrop() {
                        droppedCount.withLock { $0 += 1 }
                        break loop
                    }
                case .brokerAcks(let topic):
                    if packet[0] >> 4 == 3, let (name, id) = Self.publishTopicAndID(packet), let id,
                        name.contains(topic)
                    {
                        _ = watched.ids.withLock { $0.insert(id) }
                    }
                }
                guard writeAll(upstream, packet) else { break loop }
            }
        }
        _ = shutdown(client, Int32(SHUT_RDWR))
        _ = shutdown(upstream, Int32(SHUT_RDWR))
    }

    /// Broker → client, one packet at a time; the PUBACK of a watched publish, while drops remain, is lost: the
    /// connections are cut (`.cut`) or it is left out (`.hold`).
    private func brokerToClient(_ upstream: Int32, _ client: Int32, watched: PacketIDs) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { read(upstream, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            pending += buffer[..<count]
            while let length = Self.packetLength(pending) {
                let packet = Array(pending[..<length])
                pending.removeFirst(length)
                if packet[0] >> 4 == 4, packet.count >= 4 {
                    let id = UInt16(packet[2]) << 8 | UInt16(packet[3])
                    if watched.ids.withLock({ $0.remove(id) != nil }), takeDrop() {
                        droppedCount.withLock { $0 += 1 }
                        if action == .cut { break loop }
                        continue
                    }
                }
                guard writeAll(client, packet) else { break loop }
            }
        }
        _ = shutdown(client, Int32(SHUT_RDWR))
        _ = shutdown(upstream, Int32(SHUT_RDWR))
    }

    /// The topic and (QoS > 0) packet id of a PUBLISH packet.
    static func publishTopicAndID(_ packet: [UInt8]) -> (String, UInt16?)? {
        var index = 1
        while index < packet.count, packet[index] & 0x80 != 0 { index += 1 }
        index += 1
        guard index + 2 <= packet.count else { return nil }
        let length = Int(packet[index]) << 8 | Int(packet[index + 1])
        index += 2
        guard index + length <= packet.count else { return nil }
        let topic = String(decoding: packet[index..<index + length], as: UTF8.self)
        index += length
        let qos = (packet[0] >> 1) & 3
        guard qos > 0 else { return (topic, nil) }
        guard index + 2 <= packet.count else { return nil }
        return (topic, UInt16(packet[index]) << 8 | UInt16(packet[index + 1]))
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

/// Packet ids, shared by a connection's two pumps.
private final class PacketIDs: Sendable {
    let ids = Mutex<Set<UInt16>>([])
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
