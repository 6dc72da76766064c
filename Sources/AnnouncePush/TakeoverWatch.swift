/// Tells another client using this listener's client id (the same SD-card image flashed onto two terminals) from an
/// ordinary lost connection, and makes the listener give way instead of fighting (docs/fleet.md, "One identity per
/// terminal").
///
/// An MQTT broker keeps one session per client id: a second client connecting with it takes the session over, and
/// the first one's connection is closed. Over MQTT 3.1.1 the client is told nothing more (libmosquitto reports the
/// connection lost, rc 7; mosquitto logs "Client X already connected, closing old connection"). Two listeners with one
/// id therefore knock each other off at the pace of their reconnect backoff — seen in the field: 96 connections in
/// 70 s — and the payments go now to one shop, now to the other. The signs of a takeover: a connection the broker
/// accepted and then closed (end of stream, not a network error) within ``Policy/windowSeconds``, several times in a
/// row, while connecting again works at once (a failed attempt breaks the row: a broker going down is not this).
/// ``Policy/limit`` of those in a row is a conflict.
///
/// Then the listener waits ``Policy/backoff`` (1 min doubling to 30 min, with jitter) after each takeover rather than
/// its reconnect backoff. One listener keeps the session: a connection held longer than the window and then closed
/// (the other one, back after its long wait, took it) is an ordinary loss, reconnected at the usual pace, and
/// the returning one is taken over quickly in turn and waits longer still. The conflict is reported until a
/// connection has been held ``Policy/clearAfterSeconds`` without a takeover. Pure logic; the listener feeds it.
public struct TakeoverWatch: Sendable {
    public struct Policy: Sendable, Equatable {
        /// A connection the broker closes this soon after accepting it counts as taken over.
        public var windowSeconds = 10.0
        /// This many in a row: another client uses the id.
        public var limit = 3
        /// The wait after each takeover once a conflict is known (`broker.conflict_reconnect_min`/`_max`).
        public var backoff = Backoff.Policy(initialSeconds: 60, maximumSeconds: 1800)

        public init() {}

        /// How long a connection must last for the conflict to be over: twice the longest wait, so that the other
        /// client, were it still there, would have come back and taken the session at least once meanwhile.
        public var clearAfterSeconds: Double { max(2 * backoff.maximumSeconds, windowSeconds) }
    }

    /// What one connection's end means.
    public enum Verdict: Sendable, Equatable {
        /// Not a takeover: the usual reconnect backoff.
        case ordinary
        /// Perhaps taken over (`count` in a row), not yet a conflict: the usual backoff.
        case takenOver(count: Int)
        /// Taken over while another client is known to use the id (`detected`: just found): wait `seconds`.
        case conflict(detected: Bool, seconds: Double)
    }

    public let policy: Policy
    public private(set) var inARow = 0
    /// Another client is believed to use this client id.
    public private(set) var conflict = false
    private var backoff: Backoff

    public init(_ policy: Policy) {
        self.policy = policy
        backoff = Backoff(policy.backoff)
    }

    /// A connection the broker had accepted ended after `heldSeconds`. `closedByBroker`: the broker closed it (end of
    /// stream) and nothing this listener published explains it (``Outbox`` blames a message the broker refuses by
    /// closing the connection). `random` is the jitter (injected by tests).
    public mutating func ended(
        heldSeconds: Double, closedByBroker: Bool, random: Double = Double.random(in: 0...1)
    ) -> Verdict {
        guard closedByBroker, heldSeconds < policy.windowSeconds else {
            inARow = 0
            return .ordinary
        }
        inARow += 1
        if conflict { return .conflict(detected: false, seconds: backoff.next(random: random)) }
        guard inARow >= policy.limit else { return .takenOver(count: inARow) }
        conflict = true
        return .conflict(detected: true, seconds: backoff.next(random: random))
    }

    /// An attempt failed (refused, timed out, unreachable): whatever closed the last connections, it was not a
    /// client taking the session over at once.
    public mutating func attemptFailed() { inARow = 0 }

    /// The current connection has lasted `heldSeconds`. True when that ends a conflict (the other client is gone:
    /// re-provisioned, switched off).
    public mutating func held(seconds heldSeconds: Double) -> Bool {
        guard conflict, heldSeconds >= policy.clearAfterSeconds else { return false }
        conflict = false
        inARow = 0
        backoff.reset()
        return true
    }
}
