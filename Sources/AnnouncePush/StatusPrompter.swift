/// Decides which connection status prompts to speak, so a flapping link does not chatter:
///
/// - the first connection after start: `server-connected`;
/// - a connection down for `lostAfterSeconds`: `network-lost` (a shorter blip says nothing);
/// - back up after `network-lost` was spoken: `network-restored`;
/// - `network-lost` is spoken at most once per `minimumIntervalSeconds`; one suppressed meanwhile is spoken when the
///   interval has passed if the link is still down. So a flapping link costs at most one lost/restored pair per
///   interval, and the last state is always told.
///
/// Pure logic on an injected clock (seconds); the listener feeds it events and calls ``poll(now:)``, and while it
/// waits, wakes at ``nextDue(now:)`` to do so.
public struct StatusPrompter: Sendable {
    public struct Policy: Sendable, Equatable {
        public var enabled = true
        public var lostAfterSeconds = 10.0
        public var minimumIntervalSeconds = 60.0
        /// Prompt names in the voice pack (scripts/build-voice-pack.sh).
        public var connectedPrompt = "server-connected"
        public var lostPrompt = "network-lost"
        public var restoredPrompt = "network-restored"

        public init() {}
    }

    public let policy: Policy
    private var connected = false
    private var everConnected = false
    private var pendingConnected = false
    /// When the link went down (or the listener started without one).
    private var downSince: Double?
    private var lostSpoken = false
    private var lastLostAt: Double?
    private var pendingRestored = false

    public init(policy: Policy, now: Double) {
        self.policy = policy
        downSince = now
    }

    /// The broker accepted a connection.
    public mutating func connected(now: Double) {
        guard !connected else { return }
        connected = true
        downSince = nil
        if !everConnected {
            everConnected = true
            pendingConnected = true
            lostSpoken = false
        } else if lostSpoken {
            lostSpoken = false
            pendingRestored = true
        }
    }

    /// The connection to the broker is gone (or an attempt failed).
    public mutating func disconnected(now: Double) {
        if connected || downSince == nil { downSince = now }
        connected = false
        pendingRestored = false
    }

    /// When ``poll(now:)`` has a prompt next if nothing happens meanwhile: `now` if one is due already, nil if none
    /// comes before the next event (connected with nothing to say, `network-lost` said, prompts off).
    public func nextDue(now: Double) -> Double? {
        guard policy.enabled else { return nil }
        if connected { return pendingConnected || pendingRestored ? now : nil }
        guard let downSince, !lostSpoken else { return nil }
        var due = downSince + policy.lostAfterSeconds
        if let lastLostAt { due = max(due, lastLostAt + policy.minimumIntervalSeconds) }
        return max(now, due)
    }

    /// The prompt to speak now, if any. Call it after every event, and at ``nextDue(now:)``.
    public mutating func poll(now: Double) -> String? {
        guard policy.enabled else { return nil }
        if connected {
            if pendingConnected {
                pendingConnected = false
                return policy.connectedPrompt
            }
            if pendingRestored {
                pendingRestored = false
                return policy.restoredPrompt
            }
            return nil
        }
        pendingConnected = false
        guard let downSince, !lostSpoken, now - downSince >= policy.lostAfterSeconds else { return nil }
        if let lastLostAt, now - lastLostAt < policy.minimumIntervalSeconds { return nil }
        lostSpoken = true
        lastLostAt = now
        return policy.lostPrompt
    }
}
