#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging

/// What to do when the owner has muted the output.
public enum MutePolicy: String, Sendable, Codable, CaseIterable {
    /// Do not play; the job fails with `muted`.
    case respect
    /// Unmute for the alert and mute again afterwards.
    case override
}

/// Makes sure an alert is audible and puts the owner's setting back afterwards.
///
/// Before the first announcement of a burst (`begin`): if the element is muted, the mute policy decides; if a
/// channel is below the threshold, the exact raw values are saved to the state file, then raised. After the
/// queue has run empty (`end`, not between back-to-back jobs): the original goes back exactly — unless the
/// element no longer holds what the daemon set, meaning the user changed it meanwhile, and the user wins.
///
/// Mixer problems never stop an announcement: they are logged and the alert plays at whatever volume there is.
/// All calls are serialised by a lock, so `status()` may be called from any thread while the audio thread works.
public final class VolumeGuard: @unchecked Sendable {
    public enum Decision: Sendable, Equatable {
        case play
        /// Muted and the policy is `respect`: do not play.
        case muted
    }

    public let address: MixerElementAddress
    public let mutePolicy: MutePolicy
    /// The loudness an alert needs; changed by `setThreshold` (a `volume` request, a reload).
    private var threshold: VolumeLevel?
    private let control: any VolumeControl
    private let stateFile: MixerStateFile?
    private let logger: Logger
    private let lock = Lock()

    /// Inside a burst (between `begin` and `end`).
    private var active = false
    /// What the daemon changed and still has to put back.
    private var pending: MixerStateFile.Entry?
    private var lastError: AnnounceError?
    private var raises = 0
    private var restores = 0
    private var userOverrides = 0

    public init(
        control: any VolumeControl, threshold: VolumeLevel?, mutePolicy: MutePolicy, stateFile: MixerStateFile?,
        logger: Logger
    ) {
        self.address = control.address
        self.control = control
        self.threshold = threshold
        self.mutePolicy = mutePolicy
        self.stateFile = stateFile
        self.logger = logger
        // A change an earlier run could not put back (its mixer was unreachable at start-up) is still owed to
        // the owner: the next `end()` restores it.
        pending = (try? stateFile?.entries())?.first { $0.element == control.address && $0.purpose == .alert }
    }

    /// Checks that the threshold can be used on this element (a dB threshold needs dB information).
    public func validate() throws(AnnounceError) {
        lock.lock()
        defer { lock.unlock() }
        if let threshold { _ = try VolumeMapping.raw(for: threshold, scale: control.scale(), element: "\(address)") }
    }

    /// Changes the threshold from the next burst on (a burst playing keeps what it raised to).
    public func setThreshold(_ level: VolumeLevel?) {
        lock.lock()
        defer { lock.unlock() }
        threshold = level
    }

    /// The threshold in force.
    public var currentThreshold: VolumeLevel? {
        lock.lock()
        defer { lock.unlock() }
        return threshold
    }

    /// How often the volume was raised for an alert, put back after, and left to the owner who changed it meanwhile,
    /// since start: counts only, no mixer I/O (metrics read them while the audio thread works).
    public var counts: (raises: Int, restores: Int, userOverrides: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (raises, restores, userOverrides)
    }

    /// Called before every job. The first call of a burst raises/unmutes as needed; later ones only re-check
    /// the mute switch (an owner who mutes mid-burst is respected from the next job on).
    public func begin() -> Decision {
        lock.lock()
        defer { lock.unlock() }
        let reading: VolumeReading
        do { reading = try control.read() } catch {
            note(error, "cannot read the volume; playing at whatever volume is set")
            active = true
            return .play
        }
        if active {
            // The daemon's own unmute looks like "not muted"; only a mute made since counts.
            return reading.isMuted && mutePolicy == .respect ? .muted : .play
        }
        if reading.isMuted && mutePolicy == .respect {
            logger.notice("output is muted; not playing (mute policy respect)", metadata: ["mixer": "\(address)"])
            return .muted
        }
        active = true
        if pending == nil { raise(from: reading) }
        return .play
    }

    /// Called when the queue has run empty: restores what `begin` changed, unless the user changed it since.
    public func end() {
        lock.lock()
        defer { lock.unlock() }
        guard active else { return }
        active = false
        restore()
    }

    /// A snapshot for `status` replies: reads the element now.
    public func status() -> VolumeStatus {
        lock.lock()
        defer { lock.unlock() }
        var status = VolumeStatus(
            element: "\(address)", threshold: threshold?.description, mutePolicy: mutePolicy,
            raised: pending != nil, raises: raises, restores: restores, userOverrides: userOverrides)
        do {
            let reading = try control.read()
            let scale = try control.scale()
            status.raw = reading.raw
            status.muted = reading.switches.map { $0.contains(false) }
            status.percent = reading.raw.map { VolumeMapping.normalized(raw: $0, scale: scale) * 100 }
            if let threshold, let raw = try? VolumeMapping.raw(for: threshold, scale: scale, element: "\(address)") {
                status.thresholdRaw = raw
                status.thresholdPercent = VolumeMapping.normalized(raw: raw, scale: scale) * 100
            }
        } catch {
            status.error = ErrorInfo(error)
        }
        if let lastError { status.lastError = ErrorInfo(lastError) }
        return status
    }

    private func raise(from reading: VolumeReading) {
        var target = reading
        if let threshold {
            do {
                let floor = try VolumeMapping.raw(for: threshold, scale: control.scale(), element: "\(address)")
                target.raw = reading.raw.map { max($0, floor) }
            } catch {
                note(error, "cannot work out the volume threshold")
            }
        }
        if reading.isMuted, mutePolicy == .override, let switches = reading.switches {
            target.switches = switches.map { _ in true }
        }
        guard target != reading else { return }
        let entry = MixerStateFile.Entry(element: address, purpose: .alert, original: reading, applied: target)
        do {
            // The original goes to disk first: if the daemon dies now, the next start puts it back.
            try stateFile?.record(entry)
            pending = entry
            if target.raw != reading.raw { try control.write(raw: target.raw) }
            if let switches = target.switches, switches != reading.switches { try control.write(switches: switches) }
            raises += 1
            logger.info(
                "volume raised for the alert",
                metadata: [
                    "event": .event(.volumeRaised), "mixer": "\(address)", "from": "\(reading.raw)",
                    "to": "\(target.raw)",
                    "unmuted": "\(reading.isMuted && !(target.switches?.contains(false) ?? false))",
                ])
        } catch {
            note(error, "cannot raise the volume; playing at the volume that is set")
        }
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
            if current.raw == entry.applied.raw {
                if current.raw != entry.original.raw { try control.write(raw: entry.original.raw) }
            } else {
                kept.append("volume")
            }
            if let original = entry.original.switches, current.switches != nil {
                if current.switches == entry.applied.switches {
                    if current.switches != original { try control.write(switches: original) }
                } else {
                    kept.append("mute switch")
                }
            }
            pending = nil
            try? stateFile?.remove(address, purpose: .alert)
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
    public var mutePolicy: MutePolicy
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
