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

/// How ducking behaves.
public struct DuckSettings: Sendable, Equatable {
    /// How much quieter the other streams get, in dB (positive).
    public var decibels: Double
    /// Length of the fade down and back up, milliseconds (0: a step).
    public var rampMs: Int
    /// Time between two volume steps of a ramp, milliseconds.
    public var stepMs: Int

    public init(decibels: Double, rampMs: Int = 150, stepMs: Int = 15) {
        self.decibels = decibels
        self.rampMs = rampMs
        self.stepMs = stepMs
    }

    /// Attenuation (dB) at each step of a ramp from 0 to `decibels`; the last is `decibels`.
    public var rampSteps: [Double] {
        let count = rampMs > 0 && stepMs > 0 ? max(1, rampMs / stepMs) : 1
        return (1...count).map { decibels * Double($0) / Double(count) }
    }
}

/// Lowers other streams' volume controls while announcements play and restores them afterwards — on bare ALSA
/// the softvol control in front of dmix of each other stream type, on the rig a PulseAudio sink's volume.
///
/// `duck()` and `restore()` return at once; the ramps run one after another on the ducker's own thread (a
/// `SerialThread`), so the first sample of an announcement is never held up by a fade. Before each step the control is read: if it no
/// longer holds what the ducker set, the user moved it, the ducker lets go of it and never restores it (user
/// wins). What is ducked is recorded in the state file before the first step, so a crash is repaired at start.
public final class Ducker: Sendable {
    private struct Target {
        let control: any VolumeControl
        var original: VolumeReading?
        var lastWritten: VolumeReading?
        var ducks = 0
        var userOverrides = 0
        var lastError: AnnounceError?
    }

    public let settings: DuckSettings
    private let stateFile: MixerStateFile?
    private let logger: Logger
    private let sleep: @Sendable (Int) -> Void
    private struct State: @unchecked Sendable {  // its controls (mixer handles) are only called on the ramps' thread
        var targets: [Target]
        /// Whether the ducker has been asked to hold the others down (as seen by callers, not by the ramp).
        var requested = false
    }

    private let ramps = SerialThread(name: "announce-duck")
    private let state: Mutex<State>

    public init(
        controls: [any VolumeControl], settings: DuckSettings, stateFile: MixerStateFile?, logger: Logger,
        sleep: @escaping @Sendable (Int) -> Void = { usleep(UInt32(max(0, $0)) * 1000) }
    ) {
        // Ducks an earlier run could not undo (unreachable at start-up) are owed: the next burst's restore
        // brings those controls back to the remembered original.
        let owed = (try? stateFile?.entries())?.filter { $0.purpose == .duck } ?? []
        let targets = controls.map { control in
            var target = Target(control: control)
            if let entry = owed.first(where: { $0.element == control.address }) {
                target.original = entry.original
                target.lastWritten = entry.applied
            }
            return target
        }
        self.state = Mutex(State(targets: targets))
        self.settings = settings
        self.stateFile = stateFile
        self.logger = logger
        self.sleep = sleep
    }

    /// Starts fading the other streams down (no-op if already down). Returns at once.
    public func duck() {
        let start = state.withLock { state -> Bool in
            defer { state.requested = true }
            return !state.requested
        }
        guard start else { return }
        ramps.submit { self.rampDown() }
    }

    /// Starts fading them back to where the owner had them. Returns at once.
    public func restore() {
        let start = state.withLock { state -> Bool in
            defer { state.requested = false }
            return state.requested
        }
        guard start else { return }
        ramps.submit { self.rampUp() }
    }

    /// Waits until every ramp asked for so far has finished (tests, shutdown).
    public func waitUntilIdle() { ramps.sync {} }

    public func status() -> DuckStatus {
        let controls = state.withLock { $0.targets }.map { target in
            DuckedControl(
                element: "\(target.control.address)", ducked: target.original != nil,
                raw: target.lastWritten?.raw, original: target.original?.raw, ducks: target.ducks,
                userOverrides: target.userOverrides, lastError: target.lastError.map(ErrorInfo.init))
        }
        return DuckStatus(decibels: settings.decibels, rampMs: settings.rampMs, controls: controls)
    }

    // MARK: - On the ducker's queue

    private func rampDown() {
        var plans: [(index: Int, scale: VolumeScale)] = []
        for index in state.withLock({ $0.targets.indices }) {
            let control = state.withLock { state in state.targets[index].control }
            do {
                let current = try control.read()
                let scale = try control.scale()
                // A restore that failed half-way leaves the control where the ducker put it: the owner's
                // setting is still the one remembered, not what the control holds now.
                let (held, lastWritten) = state.withLock { state in (state.targets[index].original, state.targets[index].lastWritten) }
                let reading = held != nil && lastWritten?.raw == current.raw ? held! : current
                let floor = reading.raw.map { VolumeMapping.attenuated(raw: $0, by: settings.decibels, scale: scale) }
                let entry = MixerStateFile.Entry(
                    element: control.address, purpose: .duck, original: reading,
                    applied: VolumeReading(raw: floor, switches: reading.switches))
                try stateFile?.record(entry)
                state.withLock { state in
                    state.targets[index].original = reading
                    state.targets[index].lastWritten = current
                    state.targets[index].ducks += 1
                }
                plans.append((index, scale))
            } catch {
                fail(index, error, "cannot duck this control")
            }
        }
        for attenuation in settings.rampSteps {
            plans = plans.filter { plan in
                step(plan.index) { original in
                    original.raw.map { VolumeMapping.attenuated(raw: $0, by: attenuation, scale: plan.scale) }
                }
            }
            if attenuation < settings.decibels { sleep(settings.stepMs) }
        }
        if !plans.isEmpty {
            let ducked = state.withLock { state in plans.map { "\(state.targets[$0.index].control.address)" } }
            logger.debug("ducked", metadata: ["controls": "\(ducked.joined(separator: ", "))"])
        }
    }

    private func rampUp() {
        var plans: [(index: Int, scale: VolumeScale)] = []
        for index in state.withLock({ $0.targets.indices }) {
            let (control, original) = state.withLock { state in (state.targets[index].control, state.targets[index].original) }
            guard original != nil else { continue }
            do { plans.append((index, try control.scale())) } catch { fail(index, error, "cannot restore this control") }
        }
        for attenuation in settings.rampSteps.reversed().dropFirst() + [0] {
            plans = plans.filter { plan in
                step(plan.index) { original in
                    original.raw.map { VolumeMapping.attenuated(raw: $0, by: attenuation, scale: plan.scale) }
                }
            }
            if attenuation > 0 { sleep(settings.stepMs) }
        }
        for plan in plans {
            let control = state.withLock { state -> any VolumeControl in
                state.targets[plan.index].original = nil
                return state.targets[plan.index].control
            }
            try? stateFile?.remove(control.address, purpose: .duck)
        }
    }

    /// Writes one ramp step on one control if it still holds what the ducker last wrote; otherwise the user
    /// has taken it over: let go of it. Returns whether the ramp goes on for this control.
    private func step(_ index: Int, values: (VolumeReading) -> [Int]) -> Bool {
        let (control, original, lastWritten) = state.withLock { state in
            (state.targets[index].control, state.targets[index].original, state.targets[index].lastWritten)
        }
        guard let original, let lastWritten else { return false }
        do {
            let current = try control.read()
            guard current.raw == lastWritten.raw else {
                state.withLock { state in
                    state.targets[index].original = nil
                    state.targets[index].userOverrides += 1
                }
                try? stateFile?.remove(control.address, purpose: .duck)
                logger.notice(
                    "the user changed a ducked control; keeping their setting",
                    metadata: ["mixer": "\(control.address)", "now": "\(current.raw)"])
                return false
            }
            let next = values(original)
            if next != current.raw { try control.write(raw: next) }
            state.withLock { state in state.targets[index].lastWritten = VolumeReading(raw: next, switches: current.switches) }
            return true
        } catch {
            fail(index, error, "cannot change this control")
            return false
        }
    }

    private func fail(_ index: Int, _ error: AnnounceError, _ message: Logger.Message) {
        let address = state.withLock { state -> MixerElementAddress in
            state.targets[index].lastError = error
            return state.targets[index].control.address
        }
        logger.warning(message, metadata: ["mixer": "\(address)", "error": "\(error)"])
    }
}

/// The ducking side of `status`.
public struct DuckStatus: Sendable, Equatable, Codable {
    public var decibels: Double
    public var rampMs: Int
    public var controls: [DuckedControl]
}

public struct DuckedControl: Sendable, Equatable, Codable {
    public var element: String
    /// Whether the ducker holds this control lowered now.
    public var ducked: Bool
    /// What the ducker last set.
    public var raw: [Int]?
    /// The owner's setting it will restore.
    public var original: [Int]?
    public var ducks: Int
    public var userOverrides: Int
    public var lastError: ErrorInfo?
}
