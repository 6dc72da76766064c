import AnnounceCore
import Logging
import Synchronization

/// What the terminal publishes to the broker, in one lane with at most one message in flight: the latest status
/// (retained) and the receipts in order, each QoS 1 and done when the broker's PUBACK comes.
///
/// Filled from any thread (the status reporter, the receipts); emptied by the MQTT thread, which alone touches the
/// client (``next()`` → publish → ``sent(_:mid:)``, ``acknowledged(mid:)``). One message in flight at a time keeps
/// the accounting exact: when the broker closes the connection right after a publish, the message that was in
/// flight is the one it objects to. A broker that refuses a message by closing the connection (an ACL that
/// disconnects, a packet size limit: MQTT 3.1.1 has no other way to say no) would otherwise make the listener
/// reconnect and send it again for ever, and payments would come between drops only. So a message in flight at
/// ``strikeLimit`` such closures in a row, each within ``strikeWindow`` of sending it, is set aside for this run and
/// logged once; payments and the other messages go on. A full status refused so falls back to a minimal one
/// (online, version: what the last will says too) before the status is given up.
public final class Outbox: Sendable {
    public enum Item: Sendable, Hashable, CustomStringConvertible {
        case status
        case receipt(UInt64)

        public var description: String {
            switch self {
            case .status: "status"
            case .receipt(let seq): "receipt \(seq)"
            }
        }
    }

    /// A message to publish now.
    public struct Message: Sendable, Equatable {
        public var item: Item
        public var topic: String
        public var payload: [UInt8]
        public var retain: Bool
    }

    private struct InFlight {
        var item: Item
        var mid: Int32
        var sentAt: ContinuousClock.Instant
    }

    private struct State {
        var status: [UInt8]?
        /// The minimal form of `status`, published instead once the broker refused the full one.
        var minimalStatus: [UInt8]?
        var statusMinimal = false
        var receipts: [UInt64: (payload: [UInt8], topic: String?)] = [:]
        var inFlight: InFlight?
        var strikes: [Item: Int] = [:]
        var setAside: Set<Item> = []
        var published = 0
    }

    public static let strikeLimit = 3
    public static let strikeWindow = Duration.seconds(2)

    let statusTopic: String
    let receiptTopic: String
    private let logger: Logger
    private let state = Mutex(State())

    public init(statusTopic: String, receiptTopic: String, logger: Logger) {
        self.statusTopic = statusTopic
        self.receiptTopic = receiptTopic
        self.logger = logger
    }

    /// The status to publish next (replacing one not published yet), and its minimal form.
    public func setStatus(_ payload: [UInt8], minimal: [UInt8]) {
        state.withLock { state in
            guard !state.setAside.contains(.status) else { return }
            state.status = payload
            state.minimalStatus = minimal
        }
    }

    /// Whether only the minimal status is published (the broker refused the full one).
    public var statusIsMinimal: Bool { state.withLock { $0.statusMinimal } }

    /// A receipt on disk, to publish in `seq` order: on the receipts topic, or on `topic` (a reply to a request).
    public func enqueueReceipt(_ seq: UInt64, payload: [UInt8], topic: String? = nil) {
        state.withLock { $0.receipts[seq] = (payload, topic) }
    }

    /// Whether the broker refuses the status (it is no longer published).
    public var statusSetAside: Bool { state.withLock { $0.setAside.contains(.status) } }

    /// Receipts waiting or in flight.
    public var pendingReceipts: Int { state.withLock { $0.receipts.count } }

    /// Messages acknowledged by the broker so far.
    public var published: Int { state.withLock { $0.published } }

    /// The message to publish now, if none is in flight: the status first, then the oldest receipt.
    func next() -> Message? {
        state.withLock { state in
            guard state.inFlight == nil else { return nil }
            if let status = state.status, let minimal = state.minimalStatus {
                return Message(
                    item: .status, topic: statusTopic, payload: state.statusMinimal ? minimal : status, retain: true)
            }
            guard let seq = state.receipts.keys.filter({ !state.setAside.contains(.receipt($0)) }).min(),
                let receipt = state.receipts[seq]
            else { return nil }
            return Message(
                item: .receipt(seq), topic: receipt.topic ?? receiptTopic, payload: receipt.payload, retain: false)
        }
    }

    /// The MQTT thread published `item` as `mid`.
    func sent(_ item: Item, mid: Int32) {
        state.withLock { state in
            state.inFlight = InFlight(item: item, mid: mid, sentAt: .now)
            if item == .status { state.status = nil }
        }
    }

    /// libmosquitto would not take `item` at all (e.g. a payload over its size limit): set aside at once.
    func refused(_ item: Item, reason: String) {
        setAside(item, reason: reason)
    }

    /// The broker acknowledged `mid`; returns what it was (a receipt's entry can go).
    @discardableResult
    func acknowledged(mid: Int32) -> Item? {
        state.withLock { state -> Item? in
            guard let inFlight = state.inFlight, inFlight.mid == mid else { return nil }
            state.inFlight = nil
            state.strikes[inFlight.item] = nil
            state.published += 1
            if case .receipt(let seq) = inFlight.item { state.receipts[seq] = nil }
            return inFlight.item
        }
    }

    /// The connection ended. `byBroker`: the broker (or the network) closed it, not this listener. The message in
    /// flight, if any, is sent again on the next connection (a new client: libmosquitto keeps nothing across);
    /// if the broker closed the connection just after it was sent, that counts against it, and it is returned: the
    /// closure is explained (``TakeoverWatch`` does not count it as a takeover).
    @discardableResult
    func connectionEnded(byBroker: Bool) -> Item? {
        let struck = state.withLock { state -> (Item, Int)? in
            guard let inFlight = state.inFlight else { return nil }
            // A status in flight is not put back: the reporter publishes a fresh one at the next connection.
            state.inFlight = nil
            guard byBroker, ContinuousClock.now - inFlight.sentAt <= Self.strikeWindow else {
                state.strikes[inFlight.item] = nil
                return nil
            }
            let count = (state.strikes[inFlight.item] ?? 0) + 1
            state.strikes[inFlight.item] = count
            return (inFlight.item, count)
        }
        guard let (item, count) = struck else { return nil }
        if count >= Self.strikeLimit {
            setAside(
                item,
                reason: "the broker closed the connection each of the \(count) times it was published: it refuses it "
                    + "(an ACL that disconnects, or a packet size limit such as mosquitto's max_packet_size)")
        } else {
            logger.debug(
                "the broker closed the connection just after a publish",
                metadata: ["item": "\(item)", "times": "\(count)"])
        }
        return item
    }

    private func setAside(_ item: Item, reason: String) {
        let (first, minimal) = state.withLock { state -> (Bool, Bool) in
            if state.inFlight?.item == item { state.inFlight = nil }
            if item == .status {
                state.strikes[.status] = nil
                if !state.statusMinimal {
                    // Try the minimal form next (the reporter publishes again at the next connection).
                    state.statusMinimal = true
                    return (true, true)
                }
                state.status = nil
            }
            return (state.setAside.insert(item).inserted, false)
        }
        guard first else { return }
        switch item {
        case .status where minimal:
            logger.error(
                """
                the broker refuses the status; publishing only a minimal one (online, version) until announce-push \
                restarts
                """,
                metadata: ["topic": "\(statusTopic)", "reason": "\(reason)"])
        case .status:
            logger.error(
                "the broker refuses even the minimal status; not publishing it again until announce-push restarts",
                metadata: ["topic": "\(statusTopic)", "reason": "\(reason)"])
        case .receipt(let seq):
            logger.error(
                "the broker refuses a receipt; it stays on disk and is tried again when announce-push restarts",
                metadata: ["topic": "\(receiptTopic)", "receipt": "\(seq)", "reason": "\(reason)"])
        }
    }
}
