import AnnounceCore
import Logging
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The terminal's status as published, retained, on `announce/<device>/status` (docs/fleet.md, "Status").
/// Absent fields are unknown (e.g. everything the daemon reports while it does not answer).
public struct DeviceStatus: Codable, Sendable, Equatable {
    public struct Daemon: Codable, Sendable, Equatable {
        /// `running`, `stopping`, or `unreachable` (it does not answer on its socket).
        public var state: String
        public var uptime_s: Int64?
    }

    public struct Audio: Codable, Sendable, Equatable {
        /// The ALSA device.
        public var device: String
        /// `idle`, `open`, `playing`, `recovering` (the device failed; retrying).
        public var state: String?
        /// The last device error, while recovering or since (`code: message`).
        public var error: String?
    }

    public struct Volume: Codable, Sendable, Equatable {
        /// The everyday volume now, percent on alsamixer's scale.
        public var level: Int?
        /// An announcement is raised to this if the volume is lower, percent (absent: never raised).
        public var threshold: Int?
        public var muted: Bool?
    }

    public struct Queue: Codable, Sendable, Equatable {
        /// Jobs waiting to be spoken.
        public var depth: Int
        /// Jobs accepted and not finished yet (waiting, playing, or their end not recorded yet).
        public var unfinished: Int
    }

    public struct Heard: Codable, Sendable, Equatable {
        public var order: String?
        /// When its last sample left the device, Unix milliseconds.
        public var at: Int64?
    }

    public struct Journal: Codable, Sendable, Equatable {
        /// Writable, with its full-disk reserve in place, and sound at start.
        public var ok: Bool
        /// Job starts and ends not on disk yet: in flight, or held while the disk cannot be written (`error`).
        public var unrecorded: Int?
        public var reserve: Bool?
        public var error: String?
        /// The journal was found damaged at start and set aside (this run began with an empty one).
        public var recovered_from_corruption: String?
        /// False while the daemon keeps its journal in memory (its state folder cannot be used; `error` says why):
        /// payments are spoken, and this listener acknowledges each only once heard.
        public var durable: Bool?
    }

    public struct Receipts: Codable, Sendable, Equatable {
        /// Receipts owed or not acknowledged by the broker yet.
        public var pending: Int
        /// Of those, not on this terminal's disk (it cannot be written).
        public var unsaved: Int?
        public var error: String?
    }

    public struct Clock: Codable, Sendable, Equatable {
        /// ``ClockWatch/State``: `synchronized`, `trusted` (used as it is), `waiting` (not synchronised yet: payments
        /// the clock calls stale or future are left with the broker) or `unsynchronized` (not synchronised within
        /// `security.clock_wait`: judged by it all the same).
        public var state: String
        /// `security.clock_sync`: `kernel`, `trust` or `file`.
        public var source: String
    }

    public var v = 1
    public var device: String
    public var online: Bool
    /// When this status was made, Unix milliseconds.
    public var at: Int64?
    public var version: String?
    /// Seconds since announce-push started.
    public var uptime_s: Int64?
    /// With `online: false`: `stopped` (a clean stop) or `connection_lost` (the broker's last will). With
    /// `online: true`: `status_refused`, a minimal status because the broker refused the full one.
    public var reason: String?
    public var daemon: Daemon?
    public var audio: Audio?
    public var volume: Volume?
    public var queue: Queue?
    public var last_heard: Heard?
    public var journal: Journal?
    public var receipts: Receipts?
    /// This run of announce-push: a random id drawn at start. Two ids alternating on one device's topic are two
    /// terminals using its identity.
    public var instance: String?
    /// `ok`, or `conflict`: another client takes this client id's session at the broker (a cloned image).
    public var identity: String?
    public var clock: Clock?
    /// Messages refused since announce-push started, by reason (docs/push.md): the forged and unreadable ones get no
    /// receipt and are counted only here (and in the metrics).
    public var refused: [String: Int]?

    public init(device: String, online: Bool) {
        self.device = device
        self.online = online
    }

    /// What the broker publishes for a terminal that vanished (its last will), or a clean stop publishes.
    public static func offline(device: String, reason: String, atMs: Int64? = nil) -> DeviceStatus {
        var status = DeviceStatus(device: device, online: false)
        status.reason = reason
        status.at = atMs
        status.version = AnnounceVersion.current
        return status
    }

    /// A status built from the daemon's `status` (nil: it did not answer) and the listener's own account.
    public static func online(
        device: String, daemon: DaemonStatus?, receipts: Receipts?, listener: ListenerReport.Facts? = nil,
        uptimeSeconds: Int64, atMs: Int64
    ) -> DeviceStatus {
        var status = DeviceStatus(device: device, online: true)
        status.at = atMs
        status.version = AnnounceVersion.current
        status.uptime_s = uptimeSeconds
        status.receipts = receipts
        if let listener { status.add(listener) }
        guard let daemon else {
            status.daemon = Daemon(state: "unreachable")
            return status
        }
        status.daemon = Daemon(state: daemon.state, uptime_s: Int64(daemon.uptimeSeconds.rounded(.down)))
        let audio = daemon.audio
        status.audio = Audio(
            device: audio.device, state: audio.engine?.state.rawValue,
            error: (audio.engine?.lastError ?? audio.lastError).map { "\($0.code): \($0.message)" })
        // The owner's everyday level, not the mixer now (which an alert raises to the threshold); a daemon that
        // keeps no level reports the mixer's value.
        status.volume = Volume(level: audio.level ?? audio.volume, threshold: audio.threshold, muted: audio.muted)
        status.queue = Queue(depth: daemon.queue.waiting, unfinished: daemon.queue.unfinished)
        status.last_heard = daemon.lastHeard.map {
            Heard(order: $0.order, at: $0.finishedAt.flatMap(ISO8601Milliseconds.parse))
        }
        let journal = daemon.journal
        // Changes on their way to disk (a job that just ended, its commit a few ms off) are not a fault: the
        // journal is unwell when a write failed (the error stays until one succeeds), its reserve is spent, or it
        // was found damaged at start.
        status.journal = Journal(
            ok: journal.lastError == nil && journal.reserve != false && journal.recoveredFromCorruption == nil
                && journal.durable != false,
            unrecorded: journal.unrecorded, reserve: journal.reserve,
            error: (journal.problem ?? journal.lastError).map { "\($0.code): \($0.message)" },
            recovered_from_corruption: journal.recoveredFromCorruption, durable: journal.durable)
        return status
    }

    /// The listener's own fields. `brief` (the last will, which every CONNECT carries): the instance, and the
    /// identity and the clock only when something is wrong with them.
    public mutating func add(_ facts: ListenerReport.Facts, brief: Bool = false) {
        instance = facts.instance
        if !brief || facts.conflict { identity = facts.conflict ? "conflict" : "ok" }
        if !brief || !facts.clock.isTrusted {
            clock = Clock(state: facts.clock.rawValue, source: facts.clockSource)
        }
        if !brief, !facts.refused.isEmpty { refused = facts.refused }
    }

    public func payload() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(self)) ?? Data())
    }

    /// The same status without what changes every time (when it was made, uptimes): two statuses that differ
    /// only there say nothing new.
    var comparable: DeviceStatus {
        var copy = self
        copy.at = nil
        copy.uptime_s = nil
        copy.daemon?.uptime_s = nil
        return copy
    }
}

/// Publishes the status: at each connection, on every change that matters (a hint from the daemon's events, a
/// final state, a receipt acknowledged, the daemon coming or going), at most once a second, and again every
/// `refresh` even if nothing changed. Runs on a thread of its own (`push-status`): asking the daemon for its `status`
/// never holds the MQTT thread or a payment.
public final class StatusReporter: Sendable {
    private struct State {
        var connected = false
        var scheduled = false
        /// Publish even if unchanged (a new connection, the refresh).
        var force = false
        var lastPublished: ContinuousClock.Instant?
        var last: DeviceStatus?
        var stopped = false
    }

    /// Shortest time between two statuses.
    public static let minimumInterval = Duration.seconds(1)

    let device: String
    let refreshSeconds: Double
    private let outbox: Outbox
    private let fetch: @Sendable () -> DaemonStatus?
    private let receipts: @Sendable () -> DeviceStatus.Receipts?
    private let listener: @Sendable () -> ListenerReport.Facts?
    private let started = ContinuousClock.now
    private let thread = SerialThread(name: "push-status")
    private let state = Mutex(State())

    public init(
        device: String, refreshSeconds: Double, outbox: Outbox, fetch: @escaping @Sendable () -> DaemonStatus?,
        receipts: @escaping @Sendable () -> DeviceStatus.Receipts?,
        listener: @escaping @Sendable () -> ListenerReport.Facts? = { nil }
    ) {
        self.device = device
        self.refreshSeconds = refreshSeconds
        self.outbox = outbox
        self.fetch = fetch
        self.receipts = receipts
        self.listener = listener
    }

    /// Starts the refresh.
    public func start() {
        state.withLock { $0.stopped = false }
        thread.after(seconds: refreshSeconds) { [weak self] in self?.refresh() }
    }

    public func stop() { state.withLock { $0.stopped = true } }

    private func refresh() {
        guard !state.withLock({ $0.stopped }) else { return }
        schedule(force: true)
        thread.after(seconds: refreshSeconds) { [weak self] in self?.refresh() }
    }

    /// Connected to the broker: publish now. Disconnected: nothing until the next connection (the broker
    /// publishes the last will).
    public func connection(_ connected: Bool) {
        state.withLock { $0.connected = connected }
        if connected { schedule(force: true) }
    }

    /// Something that matters may have changed.
    public func changed() { schedule(force: false) }

    private func schedule(force: Bool) {
        let delay = state.withLock { state -> Duration? in
            if force { state.force = true }
            guard state.connected, !state.scheduled else { return nil }
            state.scheduled = true
            guard let last = state.lastPublished else { return .zero }
            return max(.zero, Self.minimumInterval - (ContinuousClock.now - last))
        }
        guard let delay else { return }
        thread.after(seconds: delay.inSeconds) { self.publish() }
    }

    private func publish() {
        let force = state.withLock { state -> Bool in
            state.scheduled = false
            defer { state.force = false }
            return state.force
        }
        let status = DeviceStatus.online(
            device: device, daemon: fetch(), receipts: receipts(), listener: listener(),
            uptimeSeconds: (ContinuousClock.now - started).components.seconds, atMs: WallClockMs.now)
        let publish = state.withLock { state -> Bool in
            guard state.connected, force || state.last?.comparable != status.comparable else { return false }
            state.last = status
            state.lastPublished = .now
            return true
        }
        if publish {
            var minimal = DeviceStatus.offline(device: device, reason: "status_refused")
            minimal.online = true
            minimal.at = status.at
            minimal.instance = status.instance
            outbox.setStatus(status.payload(), minimal: minimal.payload())
        }
    }
}
