import AnnounceCore
import AnnounceSound
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Everything the daemon needs to start. Built from the defaults, then the config file, then flags (flags
/// win). Documented key by key in docs/configuration.md.
public struct DaemonConfiguration: Sendable, Equatable {
    // Where
    /// Unix socket path the daemon listens on.
    public var socketPath: String
    /// Socket file permissions. Anyone who can connect may use the `read` operations if `readAnyone`;
    /// `control` operations are checked against the peer's credentials whatever the mode.
    public var socketMode: UInt32 = 0o666
    /// Group owning the socket file (name or number), or nil: the daemon's own group.
    public var socketGroup: String?
    /// ALSA PCM name to play on. ALSA's own `null` device discards the sound at once (a dry run).
    public var device = "default"
    /// Folder for the journal and other state.
    public var stateDirectory: String
    /// Folder holding voice packs (one sub-folder each) or a voice pack itself.
    public var voicesDirectory: String
    /// How `voicesDirectory` was chosen (``VoicePackSearch``): `--voices`, `voices in FILE`, `$ANNOUNCE_VOICES`,
    /// `installed` — said in the error when no pack is there.
    public var voicesOrigin = VoicePackSearch.installedOrigin
    /// The folder of clips the fleet pushed (the push listener's `corpus` folder, docs/voice-packs.md "Pushed
    /// clips"), loaded beside the voice packs so that they can be spoken by id; nil (`corpus = ""`): none. A folder
    /// that does not exist yet is an empty corpus.
    public var corpusDirectory: String? = Self.defaultCorpusDirectory
    /// Language of the voice pack used when a request names none ("zh", "en", …).
    public var language = "zh"
    public var logLevel = "info"
    /// What says the wall clock is right (``ClockSync``): times recorded while it is not are corrected once it is.
    public var clockSync = ClockSync.kernel

    // Queue
    /// Most urgent + payment jobs waiting at once; more are refused with `queue_full`.
    public var queueCapacity = 64
    /// Default ttl per priority class, seconds; 0: none. A request's `ttl` overrides it.
    public var paymentTTLSeconds: Double = 0
    public var urgentTTLSeconds: Double = 0
    public var statusTTLSeconds: Double = 60
    /// How long an order id is remembered for de-duplication, seconds.
    public var dedupWindowSeconds: Double = 24 * 3600
    /// How long finished jobs stay in the journal for `history`/`replay`, seconds.
    public var historyRetentionSeconds: Double = 30 * 24 * 3600

    // Audio
    /// ALSA period time wanted, microseconds. The audio thread (and behind ALSA's pulse plugin, the sound server's
    /// client thread) wakes once a period while a job plays: 80 ms periods cost a 2.7 s announcement about a quarter
    /// of the CPU of 10 ms ones, below aplay's for the same samples (docs/benchmarks.md, "CPU per announcement").
    /// The whole announcement is there to write at once, so a long period delays neither the first sample nor the
    /// end being noticed (the writer waits for the device's delay, not for a period).
    public var periodMicroseconds = 80_000
    /// ALSA periods per buffer wanted. Playback starts once one period is written, so a long buffer costs no
    /// latency; what is left in it when the writer wakes is the headroom for an audio thread that a loaded CPU
    /// holds up: 240 ms at 80 ms × 4 (docs/audio.md: 10 ms × 4, 30 ms of headroom, underran on a loaded 2-core
    /// machine; 10 ms × 16, 150 ms, did not).
    public var periods = 4
    /// Silence before the first announcement of a burst (amplifier wake), milliseconds.
    public var leadInMs = 50
    /// Silence between two announcements heard one after the other, milliseconds (0: none).
    public var pauseMs = 500
    /// Keep the PCM open between bursts.
    public var keepDeviceOpen = false
    /// On dmix (a ring other clients share), how far ahead of the speaker a job's end is written, milliseconds
    /// (``Player/Settings/endAheadMs``).
    public var endAheadMs = 60
    /// Silence after the last announcement of a burst before the device is released, milliseconds; at least two
    /// periods whatever this says (``Player/Settings/tailMs``). PipeWire wants 250 (examples/pipewire/).
    public var tailMs = 0
    /// The volume (percent) an announcement is raised to if the mixer is lower; nil: never raised.
    /// A `volume` request may override it at run time (kept in the journal). `audio.volumeThresholdDecibels`
    /// gives it in dB instead.
    public var volumeThreshold: Int?
    /// Mixer element, mute policy, ducking, device recovery (the audio engine's own settings).
    public var audio = AudioConfiguration()
    /// Under a systemd watchdog (`WatchdogSec=`): the audio thread counts as hung when one job plays, or jobs
    /// wait unplayed, this long, and the watchdog pings stop. Longer than any announcement. Seconds.
    public var audioStallLimitSeconds: Double = 30

    // The shop (docs/configuration.md: [reading], [keys], [summary])
    /// How amounts are read when a request does not say: reading style and 两, for every channel and per channel.
    public var reading = ReadingDefaults()
    /// The hardware keys (evdev).
    public var keys = KeysConfiguration()
    /// Speak the day's total every day at this local time; nil: never.
    public var summaryTime: DailyTime?

    // Access (peer credentials from SO_PEERCRED)
    /// Users and groups (names or numbers) allowed `control` operations (say, prompt, text, cancel, replay,
    /// volume set). Root and the daemon's own user always are.
    public var controlUsers: [String] = []
    public var controlGroups: [String] = []
    /// Users and groups allowed `submit` operations only (say, prompt, text; and what `read` allows): the push
    /// listener, which must make the speaker speak but never cancel, replay or change the volume.
    public var submitUsers: [String] = []
    public var submitGroups: [String] = []
    /// Users and groups allowed `read` operations (status, queue, history, volume get, ping, metrics), in
    /// addition to everyone with `control`; or anyone who can connect when `readAnyone`.
    public var readUsers: [String] = []
    public var readGroups: [String] = []
    public var readAnyone = true

    // Limits
    /// Longest request line, bytes.
    public var maxRequestBytes = ProtocolVersion.maximumLineLength
    /// Most connections at once; more are answered `busy` and closed.
    public var maxClients = 64
    /// Of `maxClients`, how many only peers that may speak (`submit` or `control` access) may use: peers that may
    /// only read hold at most the rest, so that no read-only peer can starve payments by holding connections.
    /// Nil: a quarter of `maxClients` (``effectiveReservedClients``).
    public var reservedClients: Int?
    /// A connection with no request in progress and nothing received for this long is closed, seconds.
    public var idleTimeoutSeconds: Double = 300
    /// A request line must be complete this long after its first byte arrived, seconds.
    public var requestTimeoutSeconds: Double = 10
    /// A client that does not read its replies for this long is disconnected, seconds.
    public var writeTimeoutSeconds: Double = 10
    /// SIGTERM waits this long for the announcement playing to finish before cutting it, seconds.
    public var shutdownTimeoutSeconds: Double = 10
    /// Events a `subscribe` client may leave unread before it is dropped (`lagged`).
    public var subscriberBuffer = 1024

    // Metrics
    /// Where the Prometheus endpoint listens (`GET /metrics`); nil: no endpoint (the default).
    public var metricsListen: ListenAddress?

    public init(socketPath: String, stateDirectory: String, voicesDirectory: String) {
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
        self.voicesDirectory = voicesDirectory
    }

    /// The default config file.
    public static let defaultConfigFile = "/etc/announce/announced.toml"
    /// Where the installed push listener keeps the clips it was pushed (its state folder's `corpus`).
    public static let defaultCorpusDirectory = "/var/lib/announce-push/corpus"

    /// The default socket path: `/run/announce/announce.sock` for root, `$XDG_RUNTIME_DIR/announce.sock` otherwise.
    public static func defaultSocketPath(isRoot: Bool, runtimeDirectory: String?) -> String {
        if isRoot { return "/run/announce/announce.sock" }
        return "\(runtimeDirectory ?? "/tmp")/announce.sock"
    }

    /// The defaults for this process: paths differ for root and for a user.
    public static func defaults(
        environment: [String: String] = ProcessInfo.processInfo.environment
    )
        -> DaemonConfiguration
    {
        let isRoot = getuid() == 0
        // Voice packs as announce-ctl finds them: $ANNOUNCE_VOICES, else the installed ones (the config file and
        // --voices come over this).
        let search = VoicePackSearch.standard(flag: nil, environment: environment[VoicePackSearch.environmentVariable])
        let place = search.places.first { VoicePackSearch.inspect($0.path) == nil } ?? search.places[0]
        var configuration = DaemonConfiguration(
            socketPath: defaultSocketPath(isRoot: isRoot, runtimeDirectory: environment["XDG_RUNTIME_DIR"]),
            stateDirectory: isRoot ? "/var/lib/announce" : "\(environment["HOME"] ?? "/tmp")/.local/state/announce",
            voicesDirectory: place.path)
        configuration.voicesOrigin = place.origin
        return configuration
    }

    /// Where the voice packs are looked for: the folder chosen, and for the installed default every installed place.
    public var voicesSearch: VoicePackSearch {
        let chosen = VoicePackSearch.Place(path: voicesDirectory, origin: voicesOrigin)
        guard voicesOrigin == VoicePackSearch.installedOrigin else { return VoicePackSearch(places: [chosen]) }
        return VoicePackSearch(places: [chosen] + VoicePackSearch.installed.places.filter { $0 != chosen })
    }

    /// The journal file inside the state folder.
    public var journalPath: String { Path.join(stateDirectory, "journal.sqlite") }

    /// Checks values that do not depend on the system (ranges, formats). Returns every problem found.
    public func problems() -> [String] {
        var problems: [String] = []
        func check(_ condition: Bool, _ problem: String) { if !condition { problems.append(problem) } }
        check(!socketPath.isEmpty && socketPath.utf8.count < 108, "socket: the path must be 1…107 bytes")
        check(socketMode <= 0o777, "socket_mode: must be an octal mode such as \"0660\"")
        check(!device.isEmpty, "device: must not be empty")
        check(queueCapacity >= 1 && queueCapacity <= 100_000, "queue.capacity: must be 1…100000")
        for (key, seconds) in durations {
            if let problem = Duration.problem(seconds, within: Self.durationRange(key)) {
                problems.append("\(key): \(problem)")
            }
        }
        check((1_000...500_000).contains(periodMicroseconds), "audio.period_us: must be 1000…500000")
        check((2...64).contains(periods), "audio.periods: must be 2…64")
        check((0...5_000).contains(leadInMs), "audio.lead_in_ms: must be 0…5000")
        check((0...5_000).contains(pauseMs), "audio.pause_ms: must be 0…5000")
        check((20...1_000).contains(endAheadMs), "audio.end_ahead_ms: must be 20…1000")
        check((0...5_000).contains(tailMs), "audio.tail_ms: must be 0…5000")
        if let volumeThreshold { check((0...100).contains(volumeThreshold), "audio.volume_threshold: must be 0…100") }
        problems += audio.problems(percentThreshold: volumeThreshold)
        check(
            (256...(1 << 20)).contains(maxRequestBytes), "limits.max_request_bytes: must be 256…1048576")
        check((1...10_000).contains(maxClients), "limits.max_clients: must be 1…10000")
        if let reservedClients {
            check(
                (0..<maxClients).contains(reservedClients),
                "limits.reserved_clients: must be 0 … max_clients − 1 (\(maxClients - 1)), so that readers keep a slot")
        }
        check((16...65_536).contains(subscriberBuffer), "limits.subscriber_buffer: must be 16…65536")
        problems += keys.problems()
        for channel in reading.channels.keys.sorted() where channel.isEmpty || channel.utf8.count > 64 {
            problems.append("reading.channels.\(channel): a channel name is 1…64 characters")
        }
        check(
            ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(logLevel),
            "log_level: must be trace, debug, info, notice, warning, error or critical")
        return problems
    }

    /// The range of every duration setting, by key (docs/configuration.md gives the same). The config file, the
    /// flags and ``problems()`` check against it, before any duration becomes an integer of milliseconds.
    public static let durationRanges: [String: ClosedRange<Double>] = [
        "queue.payment_ttl": 0...JobRequest.maximumTTLSeconds,
        "queue.urgent_ttl": 0...JobRequest.maximumTTLSeconds,
        "queue.status_ttl": 0...JobRequest.maximumTTLSeconds,
        "queue.dedup_window": 0...366 * day,
        "queue.history_retention": 0...3660 * day,
        "audio.device_retry_max": Double(RecoverySettings().initialBackoffMs) / 1000...60,
        "audio.device_give_up": 0...3600,
        "audio.stall_limit": 0.001...3600,
        "limits.idle_timeout": 0.001...day,
        "limits.request_timeout": 0.001...day,
        "limits.write_timeout": 0.001...day,
        "limits.shutdown_timeout": 0.001...day,
        "keys.long_press": 0.3...10,
        "keys.repeat_delay": 0.1...5,
        "keys.repeat_interval": 0.05...5,
        "keys.debounce": 0...0.5,
    ]

    private static let day = 86_400.0

    /// The range of the duration setting `key` (one of ``durationRanges``).
    public static func durationRange(_ key: String) -> ClosedRange<Double> {
        guard let range = durationRanges[key] else { preconditionFailure("no duration setting \(key)") }
        return range
    }

    /// Every duration setting and its value now, in seconds.
    var durations: [(key: String, seconds: Double)] {
        [
            ("queue.payment_ttl", paymentTTLSeconds), ("queue.urgent_ttl", urgentTTLSeconds),
            ("queue.status_ttl", statusTTLSeconds), ("queue.dedup_window", dedupWindowSeconds),
            ("queue.history_retention", historyRetentionSeconds),
            ("audio.device_retry_max", Double(audio.recovery.maximumBackoffMs) / 1000),
            ("audio.device_give_up", Double(audio.recovery.giveUpAfterMs) / 1000),
            ("audio.stall_limit", audioStallLimitSeconds),
            ("limits.idle_timeout", idleTimeoutSeconds), ("limits.request_timeout", requestTimeoutSeconds),
            ("limits.write_timeout", writeTimeoutSeconds), ("limits.shutdown_timeout", shutdownTimeoutSeconds),
            ("keys.long_press", Double(keys.bindings.longPressMs) / 1000),
            ("keys.repeat_delay", Double(keys.bindings.repeatDelayMs) / 1000),
            ("keys.repeat_interval", Double(keys.bindings.repeatIntervalMs) / 1000),
            ("keys.debounce", Double(keys.bindings.debounceMs) / 1000),
        ]
    }

    /// The connections kept for peers that may speak: `reservedClients`, else a quarter of `maxClients`.
    public var effectiveReservedClients: Int { reservedClients ?? maxClients / 4 }

    /// Default ttl of a priority class, milliseconds (nil: none).
    public func defaultTTLMs(for priority: JobPriority) -> Int64? {
        let seconds: Double
        switch priority {
        case .urgent: seconds = urgentTTLSeconds
        case .payment, .notice: seconds = paymentTTLSeconds
        case .status: seconds = statusTTLSeconds
        }
        return seconds > 0 ? Int64(seconds * 1000) : nil
    }

    /// The effective configuration as TOML-like lines (`announced --check-config`).
    public var summary: String {
        func list(_ values: [String]) -> String { "[" + values.map { "\"\($0)\"" }.joined(separator: ", ") + "]" }
        return """
            socket = "\(socketPath)"
            socket_mode = "\(String(socketMode, radix: 8))"
            socket_group = \(socketGroup.map { "\"\($0)\"" } ?? "(the daemon's)")
            device = "\(device)"
            state_dir = "\(stateDirectory)"
            voices = "\(voicesDirectory)" # \(voicesOrigin)
            corpus = "\(corpusDirectory ?? "")"
            lang = "\(language)"
            log_level = "\(logLevel)"
            clock_sync = "\(clockSync)"
            [queue]
            capacity = \(queueCapacity)
            payment_ttl = \(Duration.describe(paymentTTLSeconds))
            urgent_ttl = \(Duration.describe(urgentTTLSeconds))
            status_ttl = \(Duration.describe(statusTTLSeconds))
            dedup_window = \(Duration.describe(dedupWindowSeconds))
            history_retention = \(Duration.describe(historyRetentionSeconds))
            [audio]
            period_us = \(periodMicroseconds)
            periods = \(periods)
            lead_in_ms = \(leadInMs)
            pause_ms = \(pauseMs)
            keep_open = \(keepDeviceOpen)
            end_ahead_ms = \(endAheadMs)
            tail_ms = \(tailMs)
            volume_threshold = \(volumeThreshold.map(String.init) ?? audio.volumeThresholdDecibels.map { "\"\($0)dB\"" } ?? "(none)")
            \(audio.summary)
            stall_limit = \(Duration.describe(audioStallLimitSeconds))
            [reading]
            \(reading.summary)
            [keys]
            \(keys.summary)
            [summary]
            say_at = \(summaryTime.map { "\"\($0)\"" } ?? "(never)")
            [access]
            control_users = \(list(controlUsers)) (and root, and the daemon's own user)
            control_groups = \(list(controlGroups))
            submit_users = \(list(submitUsers))
            submit_groups = \(list(submitGroups))
            read_users = \(list(readUsers))
            read_groups = \(list(readGroups))
            read_anyone = \(readAnyone)
            [limits]
            max_request_bytes = \(maxRequestBytes)
            max_clients = \(maxClients)
            reserved_clients = \(effectiveReservedClients)\(reservedClients == nil ? " (a quarter of max_clients)" : "")
            idle_timeout = \(Duration.describe(idleTimeoutSeconds))
            request_timeout = \(Duration.describe(requestTimeoutSeconds))
            write_timeout = \(Duration.describe(writeTimeoutSeconds))
            shutdown_timeout = \(Duration.describe(shutdownTimeoutSeconds))
            subscriber_buffer = \(subscriberBuffer)
            [metrics]
            listen = \(metricsListen.map { "\"\($0)\"" } ?? "(off)")
            """
    }
}

/// Command-line settings, applied over the config file (flags win). Nil: not given.
public struct ConfigurationOverrides: Sendable {
    public var socketPath: String?
    public var socketMode: UInt32?
    public var socketGroup: String?
    public var device: String?
    public var stateDirectory: String?
    public var voicesDirectory: String?
    /// `--corpus`: `""` turns the pushed clips off.
    public var corpusDirectory: String?
    public var language: String?
    public var logLevel: String?
    public var queueCapacity: Int?
    public var paymentTTLSeconds: Double?
    public var statusTTLSeconds: Double?
    public var dedupWindowSeconds: Double?
    public var periodMicroseconds: Int?
    public var periods: Int?
    public var leadInMs: Int?
    public var pauseMs: Int?
    public var keepDeviceOpen: Bool?
    public var audioStallLimitSeconds: Double?
    public var maxClients: Int?
    public var reservedClients: Int?
    public var idleTimeoutSeconds: Double?
    public var requestTimeoutSeconds: Double?
    public var shutdownTimeoutSeconds: Double?
    /// `--metrics-listen`: `.some(nil)` turns the endpoint off (`--metrics-listen off`).
    public var metricsListen: ListenAddress??
    /// `--volume-threshold`: a percentage replaces the configured threshold (dB or percent), and so does a dB value.
    public var volumeThreshold: VolumeLevel?
    /// `--reading-style`, `--liang`/`--no-liang`: the terminal's reading defaults (`reading.style`, `reading.liang`).
    public var readingStyle: ReadingStyle?
    public var liang: Bool?
    /// The other audio flags.
    public var audio = AudioOverrides()

    public init() {}

    public func apply(to configuration: inout DaemonConfiguration) {
        func set<T>(_ value: T?, _ keyPath: WritableKeyPath<DaemonConfiguration, T>) {
            if let value { configuration[keyPath: keyPath] = value }
        }
        set(socketPath, \.socketPath)
        set(socketMode, \.socketMode)
        if let socketGroup { configuration.socketGroup = socketGroup.isEmpty ? nil : socketGroup }
        set(device, \.device)
        set(stateDirectory, \.stateDirectory)
        if let voicesDirectory {
            configuration.voicesDirectory = voicesDirectory
            configuration.voicesOrigin = "--voices"
        }
        if let corpusDirectory { configuration.corpusDirectory = corpusDirectory.isEmpty ? nil : corpusDirectory }
        set(language, \.language)
        set(logLevel, \.logLevel)
        set(queueCapacity, \.queueCapacity)
        set(paymentTTLSeconds, \.paymentTTLSeconds)
        set(statusTTLSeconds, \.statusTTLSeconds)
        set(dedupWindowSeconds, \.dedupWindowSeconds)
        set(periodMicroseconds, \.periodMicroseconds)
        set(periods, \.periods)
        set(leadInMs, \.leadInMs)
        set(pauseMs, \.pauseMs)
        set(keepDeviceOpen, \.keepDeviceOpen)
        set(audioStallLimitSeconds, \.audioStallLimitSeconds)
        set(maxClients, \.maxClients)
        if let reservedClients { configuration.reservedClients = reservedClients }
        set(idleTimeoutSeconds, \.idleTimeoutSeconds)
        set(requestTimeoutSeconds, \.requestTimeoutSeconds)
        set(shutdownTimeoutSeconds, \.shutdownTimeoutSeconds)
        if let metricsListen { configuration.metricsListen = metricsListen }
        switch volumeThreshold {
        case let .percent(value)?:
            configuration.volumeThreshold = Int(value.rounded())
            configuration.audio.volumeThresholdDecibels = nil
        case let .decibels(value)?:
            configuration.volumeThreshold = nil
            configuration.audio.volumeThresholdDecibels = value
        case nil:
            break
        }
        audio.apply(to: &configuration.audio)
        if let readingStyle { configuration.reading.all.style = readingStyle }
        if let liang { configuration.reading.all.liang = liang }
    }
}

extension DaemonConfiguration {
    /// Defaults, then the config file (`path`, or the default file if it exists), then `overrides`; checked.
    public static func resolve(
        configFile path: String?, overrides: ConfigurationOverrides,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(AnnounceError) -> DaemonConfiguration {
        let file = path ?? defaultConfigFile
        var configuration = try ConfigFile.load(
            path: file, required: path != nil, onto: defaults(environment: environment))
        // A value out of range that the file set is named with the file (`file: queue.capacity: must be 1…100000`),
        // as ConfigFile names one it cannot read; one a flag set is named by its key alone (each flag's help
        // names its key).
        let fromFile = FileManager.default.fileExists(atPath: file) ? Set(configuration.problems()) : []
        overrides.apply(to: &configuration)
        let problems = configuration.problems().map { fromFile.contains($0) ? "\(file): \($0)" : $0 }
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
        return configuration
    }
}
