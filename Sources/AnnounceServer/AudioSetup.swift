import AnnounceALSA
import AnnounceCore
import Logging

/// The audio side of the daemon built from its configuration, in one place: the ALSA sink, the volume guard on the
/// configured mixer element, the ducker on the other streams' controls, and the player settings. Building it
/// first repairs what a daemon that died mid-alert left behind (the mixer state file).
struct AudioSetup {
    let sink: AlsaSink
    let volume: VolumeGuard?
    let ducker: Ducker?
    let settings: Player.Settings

    /// The file that remembers mixer changes to put back, inside the state directory.
    static func stateFilePath(stateDirectory: String) -> String { "\(stateDirectory)/mixer-state.json" }

    /// - Parameter threshold: the threshold in force (a `volume` request's, else the configured one).
    init(_ configuration: DaemonConfiguration, threshold: VolumeLevel?, logger: Logger) throws(AnnounceError) {
        let audio = configuration.audio
        AlsaLibraryLog.route(to: logger)
        let stateFile = MixerStateFile(path: Self.stateFilePath(stateDirectory: configuration.stateDirectory))
        Self.restoreLeftovers(stateFile, logger: logger)

        sink = AlsaSink(
            device: configuration.device, periodMicroseconds: configuration.periodMicroseconds,
            periods: configuration.periods, logger: logger)
        var settings = Player.Settings()
        settings.probeAtStart = true
        settings.leadInMs = configuration.leadInMs
        settings.pauseMs = configuration.pauseMs
        settings.keepOpen = configuration.keepDeviceOpen
        settings.endAheadMs = configuration.endAheadMs
        settings.tailMs = configuration.tailMs
        settings.recovery = audio.recovery
        settings.threadNice = audio.threadNice
        self.settings = settings

        if let address = audio.mixer {
            let element = try AlsaMixerElement(address: address)
            // A second handle on the element for status requests: they never wait for the audio thread's mixer
            // I/O, nor hold it up (issue 16).
            let guarded = VolumeGuard(
                control: element, threshold: threshold, mutePolicy: audio.mutePolicy, stateFile: stateFile,
                logger: logger, monitor: try AlsaMixerElement(address: address), allowEnforce: audio.allowEnforce)
            do {
                try element.connect()
                // A dB threshold on an element without dB information can never work: refuse to start.
                try guarded.validate()
            } catch where error.code == .badConfiguration {
                throw error
            } catch {
                logger.error(
                    "mixer element not available now; retrying at each announcement",
                    metadata: ["mixer": "\(address)", "error": "\(error)"])
            }
            volume = guarded
        } else {
            volume = nil
        }

        if audio.duckDecibels > 0 {
            var controls: [any VolumeControl] = []
            for address in audio.duckControls { controls.append(try AlsaMixerElement(address: address)) }
            ducker = Ducker(
                controls: controls, settings: DuckSettings(decibels: audio.duckDecibels, rampMs: audio.duckRampMs),
                stateFile: stateFile, logger: logger)
        } else {
            ducker = nil
        }
    }

    /// A leftover state file means the daemon died mid-alert: put the owner's volume, mute and ducked
    /// controls back (unless someone changed them since).
    private static func restoreLeftovers(_ stateFile: MixerStateFile, logger: Logger) {
        let outcomes = stateFile.restoreLeftovers { address throws(AnnounceError) in
            try AlsaMixerElement(address: address)
        }
        for outcome in outcomes {
            switch outcome {
            case let .restored(entry):
                logger.notice(
                    "restored a mixer setting left changed by an earlier run",
                    metadata: [
                        "mixer": "\(entry.element)", "purpose": "\(entry.purpose.rawValue)",
                        "to": "\(entry.original.raw)",
                    ])
            case let .keptUserSetting(entry, current):
                logger.notice(
                    "a mixer setting left by an earlier run was changed since; keeping it",
                    metadata: ["mixer": "\(entry.element)", "now": "\(current.raw)"])
            case let .unreachable(entry, error):
                logger.error(
                    "cannot restore a mixer setting left by an earlier run; retrying after the next announcement",
                    metadata: ["mixer": "\(entry.element)", "error": "\(error)"])
            }
        }
    }
}

extension AudioStatus {
    /// The summary fields from the engine's report: the mixer and its volume (percent on alsamixer's scale, the
    /// lowest channel), mute, the duck controls, underruns, and every recovery (underrun, suspend, device back).
    mutating func fill(from engine: AudioEngineStatus) {
        self.engine = engine
        if let volume = engine.volume {
            mixer = volume.element
            self.volume = volume.percent.flatMap { $0.min() }.map { Int($0.rounded()) }
            level = volume.level
            muted = volume.muted
            if threshold == nil { threshold = volume.thresholdPercent.map { Int($0.rounded()) } }
        }
        if let ducking = engine.ducking { ducked = ducking.controls.map(\.element) }
        xruns = engine.sink.xruns
        recoveries = engine.sink.xruns + engine.sink.suspends + engine.recoveries
        if let error = engine.lastError { lastError = error }
    }
}
