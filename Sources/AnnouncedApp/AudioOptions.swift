import AnnounceCore
import AnnounceServer
import ArgumentParser

/// The audio engine's flags of `announced` (docs/configuration.md, docs/audio.md), over the config file.
struct AudioOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Mixer whose volume and mute the daemon manages: CTL (default, hw:0, pulse …) or CTL/NAME; none: leave "
                + "alone.",
            valueName: "ctl"))
    var mixer: String?

    @Option(
        name: .customLong("mixer-element"),
        help: ArgumentHelp("Simple mixer element on --mixer (default Master).", valueName: "name[,index]"))
    var mixerElement: String?

    @Option(
        name: .customLong("volume-threshold"),
        help: ArgumentHelp(
            "Least loudness for an announcement: N% (alsamixer's scale) or N dB; raised for it, put back after.",
            valueName: "level"))
    var volumeThreshold: String?

    @Option(
        name: .customLong("mute-policy"),
        help: ArgumentHelp("When the mixer is muted: respect (do not play, report muted) or override.", valueName: "p"))
    var mutePolicy: String?

    @Flag(
        name: .customLong("allow-enforce"),
        help: "Play a job that asks (enforce: the fleet's enforce flag) through the mute, under --mute-policy respect.")
    var allowEnforce = false

    @Option(
        name: .customLong("duck-control"),
        help: ArgumentHelp(
            "Another stream's volume control to lower while announcing; repeatable.", valueName: "ctl/name"))
    var duckControls: [String] = []

    @Option(
        name: .customLong("duck-db"),
        help: ArgumentHelp(
            "How much quieter the --duck-control streams get (20, or =-20; 0: just mix).", valueName: "dB"))
    var duckDecibels: Double?

    @Option(name: .customLong("duck-ramp-ms"), help: ArgumentHelp("Length of the duck fade.", valueName: "ms"))
    var duckRampMs: Int?

    @Option(
        name: .customLong("device-give-up"),
        help: ArgumentHelp(
            "Report a job failed after its device has been failing this long (retried until then).",
            valueName: "duration"))
    var giveUpAfter: String?

    @Option(
        name: .customLong("device-retry-max"),
        help: ArgumentHelp("Longest wait between two retries of a failed device.", valueName: "duration"))
    var maximumBackoff: String?

    @Option(
        name: .customLong("audio-nice"),
        help: ArgumentHelp("CPU priority (nice, −20…19) the audio thread asks for; applied if permitted.", valueName: "n"))
    var threadNice: Int?

    /// Puts these flags into `overrides`; a value that cannot be used is a usage error naming the flag.
    func apply(to overrides: inout ConfigurationOverrides) throws {
        func milliseconds(_ text: String?, _ flag: String, _ key: String) throws -> Int? {
            // In range (at most an hour) before it becomes an integer.
            try Announced.duration(text, flag: flag, key: key).map { Int(($0 * 1000).rounded()) }
        }
        do throws(AnnounceError) {
            if mixer == "none" {
                overrides.audio.mixer = .some(nil)
            } else if let mixer, mixer.contains("/" as Character), mixerElement == nil {
                overrides.audio.mixer = .some(try MixerElementAddress(parsing: mixer))  // CTL/NAME, as in the file
            } else if mixer != nil || mixerElement != nil {
                overrides.audio.mixer = .some(
                    try MixerElementAddress(parsing: "\(mixer ?? "default")/\(mixerElement ?? "Master")"))
            }
            overrides.volumeThreshold = try volumeThreshold.map { text throws(AnnounceError) in
                try VolumeLevel(parsing: text)
            }
            if let mutePolicy {
                guard let policy = MutePolicy(rawValue: mutePolicy) else {
                    throw AnnounceError(.badConfiguration, "--mute-policy: respect or override, not \"\(mutePolicy)\"")
                }
                overrides.audio.mutePolicy = policy
            }
            if !duckControls.isEmpty {
                overrides.audio.duckControls = try duckControls.map { text throws(AnnounceError) in
                    try MixerElementAddress(parsing: text)
                }
            }
        } catch {
            throw ValidationError(error.message)
        }
        if case let .percent(value)? = overrides.volumeThreshold, value != value.rounded() {
            throw ValidationError("--volume-threshold: a whole percentage, such as 60%")
        }
        overrides.audio.duckDecibels = duckDecibels.map(abs)  // "20" and "=-20" both mean 20 dB quieter
        overrides.audio.duckRampMs = duckRampMs
        overrides.audio.threadNice = threadNice
        if allowEnforce { overrides.audio.allowEnforce = true }
        overrides.audio.giveUpAfterMs = try milliseconds(giveUpAfter, "device-give-up", "audio.device_give_up")
        overrides.audio.maximumBackoffMs = try milliseconds(
            maximumBackoff, "device-retry-max", "audio.device_retry_max")
    }
}
