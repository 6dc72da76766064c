import AnnounceCore

/// The audio engine's own settings (`[audio]` in the config file, the audio flags): the mixer element whose volume
/// and mute switch the daemon manages, a threshold in dB, ducking, and device recovery. The device, period, lead-in,
/// keep-open and percent threshold live in `DaemonConfiguration` next to the other daemon settings.
/// Documented in docs/configuration.md and docs/audio.md.
public struct AudioConfiguration: Sendable, Equatable {
    /// Mixer element whose volume is held at the threshold and whose mute switch `mutePolicy` governs
    /// (`default/Master` unless set); nil (`mixer = "none"`): the daemon leaves the volume and the mute switch alone.
    public var mixer: MixerElementAddress? = Self.defaultMixer

    /// The element used unless another is set: the default card's Master.
    public static let defaultMixer = MixerElementAddress(control: "default", element: "Master")

    /// Parses a mixer setting: `CTL/NAME[,INDEX]`, or `none` for no mixer.
    public static func parseMixer(_ text: String) throws(AnnounceError) -> MixerElementAddress? {
        text == "none" ? nil : try MixerElementAddress(parsing: text)
    }
    /// The threshold in dB, for elements with dB information (`volume_threshold = "-20dB"`); the percent
    /// threshold (`DaemonConfiguration.volumeThreshold`) is the other way to give it.
    public var volumeThresholdDecibels: Double?
    public var mutePolicy: MutePolicy = .respect
    /// Whether a job that asks (`enforce`: the fleet's enforce flag) plays through the owner's mute under the
    /// `respect` policy.
    public var allowEnforce = false
    /// Other streams' volume controls, lowered by `duckDecibels` while announcements play.
    public var duckControls: [MixerElementAddress] = []
    /// How much quieter the other streams get, dB (0: mix without ducking).
    public var duckDecibels: Double = 0
    /// Length of the duck fade down and back up, milliseconds.
    public var duckRampMs = 150
    /// Retry and give-up times for a failing device.
    public var recovery = RecoverySettings()
    /// Nice value the audio thread asks for (−20…19); applied when the daemon is permitted (docs/audio.md).
    public var threadNice = -10

    public init() {}

    /// Problems with values that can be checked without the sound system, in `DaemonConfiguration.problems()` form.
    public func problems(percentThreshold: Int?) -> [String] {
        var problems: [String] = []
        func check(_ condition: Bool, _ problem: String) { if !condition { problems.append(problem) } }
        check(
            percentThreshold == nil || volumeThresholdDecibels == nil,
            "audio.volume_threshold: give it in percent or in dB, not both")
        if let volumeThresholdDecibels {
            check((-120...24).contains(volumeThresholdDecibels), "audio.volume_threshold: dB must be −120…24")
        }
        check((0...120).contains(duckDecibels), "audio.duck_db: must be 0…120")
        check(duckDecibels == 0 || !duckControls.isEmpty, "audio.duck_db: needs audio.duck_controls to lower")
        check((0...5_000).contains(duckRampMs), "audio.duck_ramp_ms: must be 0…5000")
        check(recovery.initialBackoffMs > 0, "audio.device_retry: the first retry wait must be positive")
        check(
            recovery.maximumBackoffMs >= recovery.initialBackoffMs,
            "audio.device_retry_max: must be at least the first wait (\(recovery.initialBackoffMs)ms)")
        // Their ranges: DaemonConfiguration.durationRanges.
        check((-20...19).contains(threadNice), "audio.thread_nice: must be −20…19")
        return problems
    }

    /// The threshold in force: a percentage (a `volume` request's, else the configured one), else the dB one.
    public func threshold(percent: Int?) -> VolumeLevel? {
        if let percent { return .percent(Double(percent)) }
        return volumeThresholdDecibels.map(VolumeLevel.decibels)
    }

    /// The `[audio]` keys, as `announced --check-config` prints them.
    public var summary: String {
        """
        mixer = "\(mixer.map { "\($0)" } ?? "none")"
        mute_policy = "\(mutePolicy.rawValue)"
        allow_enforce = \(allowEnforce)
        duck_controls = [\(duckControls.map { "\"\($0)\"" }.joined(separator: ", "))]
        duck_db = \(duckDecibels)
        duck_ramp_ms = \(duckRampMs)
        device_retry_max = \(Duration.describe(Double(recovery.maximumBackoffMs) / 1000))
        device_give_up = \(Duration.describe(Double(recovery.giveUpAfterMs) / 1000))
        thread_nice = \(threadNice)
        """
    }
}

/// Audio flags over the config file (nil: not given).
public struct AudioOverrides: Sendable {
    /// `--mixer`: `.some(nil)` is `--mixer none`.
    public var mixer: MixerElementAddress??
    /// A threshold flag in dB (a percentage goes to `ConfigurationOverrides.volumeThreshold`).
    public var volumeThresholdDecibels: Double?
    public var mutePolicy: MutePolicy?
    public var allowEnforce: Bool?
    public var duckControls: [MixerElementAddress]?
    public var duckDecibels: Double?
    public var duckRampMs: Int?
    public var maximumBackoffMs: Int?
    public var giveUpAfterMs: Int?
    public var threadNice: Int?

    public init() {}

    public func apply(to configuration: inout AudioConfiguration) {
        if let mixer { configuration.mixer = mixer }
        if let volumeThresholdDecibels { configuration.volumeThresholdDecibels = volumeThresholdDecibels }
        if let mutePolicy { configuration.mutePolicy = mutePolicy }
        if let allowEnforce { configuration.allowEnforce = allowEnforce }
        if let duckControls { configuration.duckControls = duckControls }
        if let duckDecibels { configuration.duckDecibels = duckDecibels }
        if let duckRampMs { configuration.duckRampMs = duckRampMs }
        if let maximumBackoffMs { configuration.recovery.maximumBackoffMs = maximumBackoffMs }
        if let giveUpAfterMs { configuration.recovery.giveUpAfterMs = giveUpAfterMs }
        if let threadNice { configuration.threadNice = threadNice }
    }
}
