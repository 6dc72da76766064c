#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// What to do when the owner has muted the output.
public enum MutePolicy: String, Sendable, Codable, CaseIterable {
    /// Do not play; the job fails with `muted`.
    case respect
    /// Unmute for the alert and mute again afterwards.
    case override
}

/// The owner's everyday level: the raw values an element holds outside alerts; and, for an element without a playback
/// switch that the mute key muted (its volume then at the minimum), the raw values it had before.
public struct EverydayLevel: Sendable, Equatable {
    public var reading: VolumeReading
    public var mutedFrom: [Int]?

    public init(reading: VolumeReading, mutedFrom: [Int]? = nil) {
        self.reading = reading
        self.mutedFrom = mutedFrom
    }

    /// Muted by the playback switch, or by the mute key on an element without one.
    public var isMuted: Bool { reading.isMuted || mutedFrom != nil }
    /// The level to speak of: the one before the mute key when muted so.
    public var raw: [Int] { mutedFrom ?? reading.raw }
}

/// Makes sure an alert is audible and puts the owner's setting back afterwards; and sets the owner's everyday level
/// (the volume keys, `volume` with `level`) without breaking that promise.
///
/// Before the first announcement of a burst (`begin`): if the element is muted, the mute policy decides; if a
/// channel is below the threshold, the exact raw values are saved to the state file, then raised. After the
/// queue has run empty (`end`, not between back-to-back jobs): the original goes back exactly — unless the
/// element no longer holds what the daemon set, meaning the user changed it meanwhile, and the user wins.
///
/// The everyday level is what the mixer holds outside alerts (during one, what it goes back to). Setting it
/// during an alert changes what comes back after, and the alert itself never plays below the threshold (nor muted
/// under the `override` policy); outside an alert it is written at once. The mute key turns the playback switch
/// off; an element without one (a softvol) is muted by turning it to its minimum, remembering the level, and such a
/// mute counts as muted for the mute policy like the switch.
///
/// Mixer problems never stop an announcement: they are logged and the alert plays at whatever volume there is.
/// All calls are serialised by a lock, so they may come from any thread while the audio thread works; `status()`
/// reads the element through its own handle (`monitor`) outside that lock, so a status request never waits for
/// the audio thread's mixer I/O, nor holds it up.
public final class VolumeGuard: @unchecked Sendable {  // every mutable field is guarded by `lock`
    public enum Decision: Sendable, Equatable {
        case play
        /// Muted and the policy is `respect`: do not play.
        case muted
    }

    public let address: MixerElementAddress
    public let mutePolicy: MutePolicy
    /// Whether a job that asks (`enforce`) plays through the owner's mute under the `respect` policy, as the
    /// `override` policy plays every job (`audio.allow_enforce`). Without it, such a job follows `mutePolicy`.
    public let allowEnforce: Bool
    /// The loudness an alert needs; changed by `setThreshold` (a `volume` request, a reload).
    private var threshold: VolumeLevel?
    private let control: any VolumeControl
    /// A second handle on the same element, for `status()` only (nil: status reads through `control`).
    private let monitor: (any VolumeControl)?
    private let monitorLock = Mutex(())
    private let stateFile: MixerStateFile?
    private let logger: Logger
    private let lock = Mutex(())

    /// Inside a burst (between `begin` and `end`).
    private var active = false
    /// This burst plays through the owner's mute for a job that enforced it: the jobs after it that do not are
    /// muted, as the owner wants.
    private var enforcedThroughMute = false
    /// The mute policy of the burst playing: the terminal's, or `override` once a job enforced it.
    private var burstPolicy: MutePolicy
    /// What the daemon changed and still has to put back.
    private var pending: MixerStateFile.Entry?
    private var lastError: AnnounceError?
    private var raises = 0
    private var restores = 0
    private var userOverrides = 0
    /// The owner's level as last seen, and who wants to hear when it changes (the daemon keeps it in its journal).
    private var everyday: EverydayLevel?
    private var onEverydayChange: (@Sendable (EverydayLevel) -> Void)?
    /// An element without a playback switch muted by the mute key: the raw values before (it is at its minimum).
    private var softMute: [Int]?

    public init(
        control: any VolumeControl, threshold: VolumeLevel?, mutePolicy: MutePolicy, stateFile: MixerStateFile?,
        logger: Logger, monitor: (any VolumeControl)? = nil, allowEnforce: Bool = false
    ) {
        self.allowEnforce = allowEnforce
        self.burstPolicy = mutePolicy
        self.address = control.address
        self.control = control
        self.monitor = monitor
        self.threshold = threshold
        self.mutePolicy = mutePolicy
        self.stateFile = stateFile
        self.logger = logger
        // A change an earlier run could not put back (its mixer was unreachable at start-up) is still owed to
        // the owner: the next `end()` restores it.
        pending = (try? stateFile?.entries())?.first { $0.element == control.address && $0.purpose == .alert }
    }

    /// Calls `observer` with the owner's level whenever it changes: set through ``changeEveryday(_:)``, or found
    /// changed on the mixer (amixer, another program) at an alert. Called under the guard's lock, possibly on the
    /// audio thread: it must not block or call back.
    public func observeEveryday(_ observer: @escaping @Sendable (EverydayLevel) -> Void) {
        lock.withLock { _ in
            onEverydayChange = observer
        }
    }

    /// Checks that the threshold can be used on this element (a dB threshold needs dB information).
    public func validate() throws(AnnounceError) {
        try lock.withLock { _ throws(AnnounceError) in
            if let threshold { _ = try VolumeMapping.raw(for: threshold, scale: control.scale(), element: "\(address)") }
        }
    }

    /// Changes the threshold from the next burst on (a burst playing keeps what it raised to).
    public func setThreshold(_ level: VolumeLevel?) {
        lock.withLock { _ in
            threshold = level
        }
    }

    /// The threshold in force.
    public var currentThreshold: VolumeLevel? {
        return lock.withLock { _ -> VolumeLevel? in
            return threshold
        }
    }

    /// How often the volume was raised for an alert, put back after, and left to the owner who changed it meanwhile,
    /// since start: counts only, no mixer I/O (metrics read them while the audio thread works).
    public var counts: (raises: Int, restores: Int, userOverrides: Int) {
        return lock.withLock { _ -> (raises: Int, restores: Int, userOverrides: Int) in
            return (raises, restores, userOverrides)
        }
    }

    /// Called before every job. The first call of a burst raises/unmutes as needed; later ones only re-check
    /// the mute switch (an owner who mutes mid-burst is respected from the next job on). A job that `enforce`s it
    /// plays through the mute when ``allowEnforce`` (as under the `override` policy), mid-burst too; the jobs after
    /// it in the burst that do not are muted.
    public func begin(enforce: Bool = false) -> Decision {
        return lock.withLock { _ -> Decision in
            let enforced = enforce && allowEnforce && mutePolicy == .respect
            if enforce && !enforced && mutePolicy == .respect {
                logger.notice(
                    "a job asks to play through the mute; this terminal does not allow it (audio.allow_enforce)",
                    metadata: ["mixer": "\(address)"])
            }
            let policy = enforced ? MutePolicy.override : mutePolicy
            let reading: VolumeReading
            do throws(AnnounceError) { reading = try control.read() } catch {
                note(error, "cannot read the volume; playing at whatever volume is set")
                active = true
                return .play
            }
            let muted = reading.isMuted || softMute != nil
            if active {
                if enforced {
                    // Muted since the burst began (or this burst unmuted it already): held unmuted for this job.
                    burstPolicy = .override
                    if muted {
                        hold(original: owner(reading), current: reading, policy: .override)
                        enforcedThroughMute = true
                    }
                    return .play
                }
                // The daemon's own unmute looks like "not muted"; only a mute made since counts, or one an enforced
                // job played through.
                return (muted || enforcedThroughMute) && policy == .respect ? .muted : .play
            }
            noticeSoftUnmute(reading)
            let mutedNow = reading.isMuted || softMute != nil
            if mutedNow && policy == .respect {
                logger.notice("output is muted; not playing (mute policy respect)", metadata: ["mixer": "\(address)"])
                return .muted
            }
            active = true
            burstPolicy = policy
            enforcedThroughMute = mutedNow && enforced
            if enforcedThroughMute {
                logger.notice("output is muted; playing through it for a job that enforces it", metadata: ["mixer": "\(address)"])
            }
            let original = owner(reading)
            observe(original)
            hold(original: original, current: reading, policy: policy)
            return .play
        }
    }

    /// Called when the queue has run empty: restores what `begin` changed, unless the user changed it since.
    public func end() {
        lock.withLock { _ in
            guard active else { return }
            active = false
            enforcedThroughMute = false
            burstPolicy = mutePolicy
            restore()
        }
    }

    /// The owner's everyday level now (what the mixer holds, or what an alert that holds it raised puts back) and
    /// the element's scale.
    public func everydayLevel() throws(AnnounceError) -> (level: EverydayLevel, scale: VolumeScale) {
        return try lock.withLock { _ throws(AnnounceError) -> (level: EverydayLevel, scale: VolumeScale) in
            let scale = try control.scale()
            let reading = try control.read()
            noticeSoftUnmute(reading, scale: scale)
            let owners = pending.flatMap { reading == $0.applied ? $0.original : nil } ?? reading
            return (EverydayLevel(reading: owners, mutedFrom: softMute), scale)
        }
    }

    /// Changes the owner's everyday level (the volume): `change` gets the level now and returns the new one.
    /// Outside an alert the mixer takes it at once. During one, it is what comes back after the alert, and the
    /// alert keeps at least the threshold — and stays unmuted under the `override` policy, while under `respect` a
    /// mute silences it now. On an element muted by the mute key, `change` gets the level from before the mute,
    /// and a new level unmutes it. Returns the new level and the scale.
    @discardableResult
    public func changeEveryday(
        _ change: (VolumeReading, VolumeScale) throws(AnnounceError) -> VolumeReading
    ) throws(AnnounceError) -> (level: EverydayLevel, scale: VolumeScale) {
        return try lock.withLock { _ throws(AnnounceError) -> (level: EverydayLevel, scale: VolumeScale) in
            let scale = try control.scale()
            let current = try control.read()
            noticeSoftUnmute(current, scale: scale)
            var original = owner(current)
            if let level = softMute { original.raw = level }
            let wanted = try change(original, scale)
            softMute = nil
            try apply(wanted, over: current)
            return (EverydayLevel(reading: wanted), scale)
        }
    }

    /// The mute key: mutes, or unmutes when muted — with the playback switch, or on an element without one by
    /// its minimum volume (and back to the level it had). Returns whether it is muted now.
    public func toggleMute() throws(AnnounceError) -> Bool {
        return try lock.withLock { _ throws(AnnounceError) -> Bool in
            let scale = try control.scale()
            let current = try control.read()
            noticeSoftUnmute(current, scale: scale)
            var wanted = owner(current)
            if let switches = wanted.switches {
                let mute = !wanted.isMuted
                wanted.switches = switches.map { _ in !mute }
            } else if let level = softMute {
                softMute = nil
                wanted.raw = level
            } else {
                softMute = wanted.raw
                wanted.raw = wanted.raw.map { _ in scale.raw.lowerBound }
            }
            try apply(wanted, over: current)
            return wanted.isMuted || softMute != nil
        }
    }

    /// Puts back a level kept from an earlier run (the daemon's journal), a mute by the mute key included.
    public func restoreEveryday(_ level: EverydayLevel) throws(AnnounceError) {
        try lock.withLock { _ throws(AnnounceError) in
            let current = try control.read()
            let original = owner(current)
            guard level.reading.raw.count == original.raw.count else { return }
            var wanted = original
            wanted.raw = level.reading.raw
            softMute = original.switches == nil ? level.mutedFrom : nil
            try apply(wanted, over: current)
        }
    }

    /// The owner's new level: held for the alert playing (at least the threshold), or written at once.
    private func apply(_ wanted: VolumeReading, over current: VolumeReading) throws(AnnounceError) {
        guard wanted.raw.count == current.raw.count, wanted.switches?.count == current.switches?.count else {
            throw AnnounceError(.internalError, "a level for \(wanted.raw.count) channels of \(address)")
        }
        if active {
            hold(original: wanted, current: current, policy: burstPolicy)
        } else {
            if pending != nil {
                // An earlier alert's raise that could not be put back: the owner's new level replaces it.
                pending = nil
                try? stateFile?.remove(address, purpose: .alert)
            }
            try write(wanted, over: current)
        }
        observe(wanted)
        logger.info(
            "everyday volume set",
            metadata: [
                "mixer": "\(address)", "raw": "\(wanted.raw)", "muted": "\(wanted.isMuted || softMute != nil)",
            ])
    }

    /// A snapshot for `status` replies: reads the element now, through `monitor` when there is one.
    public func status() -> VolumeStatus {
        let snapshot = lock.withLock { _ in
            var status = VolumeStatus(
                element: "\(address)", threshold: self.threshold?.description, mutePolicy: mutePolicy,
                raised: pending != nil, raises: raises, restores: restores, userOverrides: userOverrides)
            if allowEnforce { status.allowEnforce = true }
            if let lastError { status.lastError = ErrorInfo(lastError) }
            return (status, self.threshold, pending, softMute)
        }
        var status = snapshot.0
        let (threshold, held, mutedFrom) = (snapshot.1, snapshot.2, snapshot.3)
        // The element's scale converts through its handle: everything is worked out under that handle's lock.
        let read = { (element: any VolumeControl) in
            do throws(AnnounceError) {
                let reading = try element.read()
                let scale = try element.scale()
                status.raw = reading.raw
                status.muted = mutedFrom != nil ? true : reading.switches.map { $0.contains(false) }
                status.percent = reading.raw.map { VolumeMapping.normalized(raw: $0, scale: scale) * 100 }
                let everyday = mutedFrom ?? (held.flatMap { reading == $0.applied ? $0.original : nil } ?? reading).raw
                status.everydayRaw = everyday
                status.level = everyday.min().map { VolumeMapping.percent(ofRaw: $0, scale: scale) }
                if let threshold, let raw = try? VolumeMapping.raw(for: threshold, scale: scale, element: "\(self.address)") {
                    status.thresholdRaw = raw
                    status.thresholdPercent = VolumeMapping.normalized(raw: raw, scale: scale) * 100
                }
            } catch {
                status.error = ErrorInfo(error)
            }
        }
        if let monitor {
            monitorLock.withLock { _ in read(monitor) }
        } else {
            lock.withLock { _ in read(control) }
        }
        return status
    }

    // MARK: - Under the lock

    /// The owner's level, given what the mixer holds: an entry still owed (from this burst, or an earlier alert
    /// whose restore failed) whose values the mixer still holds means the owner's level is the entry's original;
    /// if the mixer holds something else, the owner changed it since, and their setting wins.
    private func owner(_ current: VolumeReading) -> VolumeReading {
        guard let entry = pending else { return current }
        if current == entry.applied { return entry.original }
        pending = nil
        try? stateFile?.remove(address, purpose: .alert)
        userOverrides += 1
        logger.notice(
            "the user changed the mixer since the daemon raised it; keeping their setting",
            metadata: ["mixer": "\(address)", "now": "\(current.raw)"])
        return current
    }

    /// Makes the mixer at least as loud as the threshold (and unmuted under `override`, the terminal's policy or an
    /// enforced job's) for the alert, remembering `original` — the owner's level — to put back after it. Mixer
    /// problems are logged, never thrown.
    private func hold(original: VolumeReading, current: VolumeReading, policy: MutePolicy) {
        var target = original
        // Muted by the mute key on an element without a switch, under `respect`: silence now, nothing raised.
        let softMuted = softMute != nil && policy == .respect
        if let threshold, !softMuted {
            do {
                let floor = try VolumeMapping.raw(for: threshold, scale: control.scale(), element: "\(address)")
                target.raw = original.raw.map { max($0, floor) }
            } catch {
                note(error, "cannot work out the volume threshold")
            }
        }
        if original.isMuted, policy == .override, let switches = original.switches {
            target.switches = switches.map { _ in true }
        }
        do {
            if target == original {
                // Nothing to hold: the owner's level is loud enough (and audible) as it is.
                if pending != nil {
                    pending = nil
                    try? stateFile?.remove(address, purpose: .alert)
                }
                try write(original, over: current)
                return
            }
            let wasHeld = pending != nil
            let entry = MixerStateFile.Entry(element: address, purpose: .alert, original: original, applied: target)
            // The original goes to disk first: if the daemon dies now, the next start puts it back. A state folder
            // that cannot be written (docs/deployment.md) does not keep the alert quiet: raised all the same.
            if entry != pending {
                do throws(AnnounceError) {
                    try stateFile?.record(entry)
                } catch {
                    note(error, "cannot note the owner's volume on disk; raising it all the same (a crash now leaves it raised)")
                }
            }
            pending = entry
            try write(target, over: current)
            if !wasHeld {
                raises += 1
                logger.info(
                    "volume raised for the alert",
                    metadata: [
                        "event": .event(.volumeRaised), "mixer": "\(address)", "from": "\(original.raw)",
                        "to": "\(target.raw)",
                        "unmuted": "\(original.isMuted && !(target.switches?.contains(false) ?? false))",
                    ])
            }
        } catch {
            note(error, "cannot raise the volume; playing at the volume that is set")
        }
    }

    /// Writes what differs between `current` and `wanted`.
    private func write(_ wanted: VolumeReading, over current: VolumeReading) throws(AnnounceError) {
        if wanted.raw != current.raw { try control.write(raw: wanted.raw) }
        if let switches = wanted.switches, switches != current.switches { try control.write(switches: switches) }
    }

    private func restore() {
        guard let entry = pending else { return }
        let current: VolumeReading
        do { current = try control.read() } catch {
            note(error, "cannot read the volume to restore it; will retry after the next alert")
            return
        }
        do {
            var kept: [String] = []
            var now = entry.original
            if current.raw == entry.applied.raw {
                if current.raw != entry.original.raw { try control.write(raw: entry.original.raw) }
            } else {
                kept.append("volume")
                now.raw = current.raw
            }
            if let original = entry.original.switches, current.switches != nil {
                if current.switches == entry.applied.switches {
                    if current.switches != original { try control.write(switches: original) }
                } else {
                    kept.append("mute switch")
                    now.switches = current.switches
                }
            }
            pending = nil
            try? stateFile?.remove(address, purpose: .alert)
            observe(now)
            if kept.isEmpty {
                restores += 1
                logger.info(
                    "volume restored",
                    metadata: ["event": .event(.volumeRestored), "mixer": "\(address)", "to": "\(entry.original.raw)"])
            } else {
                userOverrides += 1
                logger.notice(
                    "the user changed the mixer during the alert; keeping their setting",
                    metadata: [
                        "event": .event(.volumeLeft), "mixer": "\(address)", "kept": "\(kept.joined(separator: ", "))",
                        "now": "\(current.raw)",
                    ])
            }
        } catch {
            note(error, "cannot restore the volume; will retry after the next alert")
        }
    }

    /// The owner's level as seen now; a new one is reported (the daemon keeps it across restarts).
    private func observe(_ reading: VolumeReading) {
        let level = EverydayLevel(reading: reading, mutedFrom: softMute)
        guard everyday?.reading.raw != level.reading.raw || everyday?.mutedFrom != level.mutedFrom else { return }
        everyday = level
        onEverydayChange?(level)
    }

    /// An element muted by the mute key that someone turned up by hand (amixer) is no longer muted.
    private func noticeSoftUnmute(_ reading: VolumeReading, scale: VolumeScale? = nil) {
        guard softMute != nil, pending == nil else { return }
        guard let minimum = (scale ?? (try? control.scale()))?.raw.lowerBound else { return }
        if reading.raw.contains(where: { $0 > minimum }) {
            softMute = nil
            observe(reading)
        }
    }

    private func note(_ error: AnnounceError, _ message: Logger.Message) {
        lastError = error
        logger.warning(message, metadata: ["mixer": "\(address)", "error": "\(error)"])
    }
}

/// The volume side of `status`.
public struct VolumeStatus: Sendable, Equatable, Codable {
    public var element: String
    /// Raw volume per channel now.
    public var raw: [Int]?
    /// Loudness per channel now, 0…100 on alsamixer's scale.
    public var percent: [Double]?
    /// Whether a playback switch is off now (nil: the element has none).
    public var muted: Bool?
    public var threshold: String?
    /// The threshold as a raw value on this element.
    public var thresholdRaw: Int?
    /// The threshold on alsamixer's percent scale of this element (the same as `threshold` when given in percent).
    public var thresholdPercent: Double?
    /// The owner's everyday level per channel: what the element holds, or while an alert holds it raised, what goes
    /// back after it (raw); and as a whole percentage on alsamixer's scale (the quietest channel; a level set as N %
    /// reads N %).
    public var everydayRaw: [Int]?
    public var level: Int?
    public var mutePolicy: MutePolicy
    /// True when a job that asks plays through the mute (`audio.allow_enforce`).
    public var allowEnforce: Bool?
    /// Whether the daemon holds the volume raised (or unmuted) now.
    public var raised: Bool
    public var raises: Int
    public var restores: Int
    /// Times the user changed the volume during an alert and their setting was kept.
    public var userOverrides: Int
    /// Reading the element failed just now.
    public var error: ErrorInfo?
    /// The last mixer problem met while raising or restoring.
    public var lastError: ErrorInfo?

    public init(
        element: String, threshold: String?, mutePolicy: MutePolicy, raised: Bool, raises: Int, restores: Int,
        userOverrides: Int
    ) {
        self.element = element
        self.threshold = threshold
        self.mutePolicy = mutePolicy
        self.raised = raised
        self.raises = raises
        self.restores = restores
        self.userOverrides = userOverrides
    }
}
