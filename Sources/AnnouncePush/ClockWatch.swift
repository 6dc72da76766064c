import AnnounceCore
import AnnounceClock
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Whether the listener can trust the wall clock to judge a payment's age, over one run (docs/push.md, "The clock").
///
/// A terminal without a battery-backed clock boots at its last shutdown time (systemd-timesyncd) or in 1970, and is
/// set right only once its NTP client reaches a server. A payment judged `stale` or `future` by such a clock would be
/// acknowledged and forgotten by the broker: lost, though nothing was wrong with it. So while the clock is
/// ``State/waiting`` such a verdict is not final: the listener leaves the message with the broker until the clock is
/// trusted, then judges it. After `waitSeconds` without synchronisation (a terminal with no network time at all) it
/// judges by the clock all the same (``State/unsynchronized``) rather than hold payments for ever.
///
/// Once the source has said synchronised, the clock stays trusted for the run: a clock set right drifts by parts
/// per million when its NTP client later loses its server (the kernel takes hours to call it unsynchronised again),
/// which no payment window notices. Read from the MQTT thread and the status reporter's thread.
public final class ClockWatch: Sendable {
    public enum State: String, Sendable {
        /// The source says the clock was set right (this run).
        case synchronized
        /// `security.clock_sync = "trust"`: used as it is.
        case trusted
        /// Not synchronised yet: a message outside the window is left with the broker.
        case waiting
        /// Not synchronised after `security.clock_wait`: judged by it all the same.
        case unsynchronized

        /// Whether a `stale` or `future` verdict by the clock is final.
        public var isFinal: Bool { self != .waiting }

        /// Whether the clock is known to be right, or taken as right by choice.
        public var isTrusted: Bool { self == .synchronized || self == .trusted }
    }

    public let source: ClockSync
    public let waitSeconds: Double
    private let started: ContinuousClock.Instant
    private let synchronizedOnce = Mutex(false)

    public init(source: ClockSync, waitSeconds: Double, started: ContinuousClock.Instant = .now) {
        self.source = source
        self.waitSeconds = waitSeconds
        self.started = started
    }

    /// The state now, asking the source unless it has already said synchronised.
    public var state: State { state(now: .now).state }

    /// The state at `now`, with the source's own words when it was asked.
    public func state(now: ContinuousClock.Instant) -> (state: State, detail: String?) {
        if source == .trust { return (.trusted, nil) }
        if synchronizedOnce.withLock({ $0 }) { return (.synchronized, nil) }
        let (synchronized, detail) = source.read()
        if synchronized {
            synchronizedOnce.withLock { $0 = true }
            return (.synchronized, detail)
        }
        return (now - started >= .seconds(waitSeconds) ? .unsynchronized : .waiting, detail)
    }

    /// Seconds until the wait is over (0 once it is).
    public func waitLeft(now: ContinuousClock.Instant = .now) -> Double {
        max(0, waitSeconds - (now - started).inSeconds)
    }
}
