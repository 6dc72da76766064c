import AnnounceCore
import AnnounceServer
import AnnounceTelemetry
import AnnounceVersion
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Metrics
import Prometheus

struct Announced: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "announced",
        abstract: "Speaks payment announcements through ALSA, taking jobs over a Unix socket.",
        discussion: """
            Settings come from the defaults, then the config file (--config, default \
            /etc/announce/announced.toml if it exists), then these flags: flags win. Every key is described \
            in docs/configuration.md; the socket protocol in docs/protocol.md.
            Signals: SIGTERM/SIGINT finish the announcement playing and exit 0, keeping waiting jobs in the \
            journal for the next start; SIGHUP reloads the config file and the voice packs, keeping the queue.
            Exit status: 0 stopped normally (or --check-config found no problem); 1 cannot start (bad \
            configuration, voice pack, journal or socket); 64 usage error.
            """,
        version: BuildInfo.line(program: "announced")
    )

    @Option(help: ArgumentHelp("Config file (TOML).", valueName: "path"))
    var config: String?

    @Flag(name: .customLong("check-config"), help: "Check the configuration and voice packs, print them, and exit.")
    var checkConfig = false

    @Option(help: ArgumentHelp("Unix socket to listen on.", valueName: "path"))
    var socket: String?

    @Option(
        name: .customLong("socket-mode"), help: ArgumentHelp("Socket file mode, octal (e.g. 0660).", valueName: "mode"))
    var socketMode: String?

    @Option(name: .customLong("socket-group"), help: ArgumentHelp("Group owning the socket file.", valueName: "group"))
    var socketGroup: String?

    @Option(help: ArgumentHelp("ALSA PCM to play on (null: discard, for a dry run).", valueName: "pcm"))
    var device: String?

    @Option(name: .customLong("state-dir"), help: ArgumentHelp("Folder for the journal.", valueName: "dir"))
    var stateDir: String?

    @Option(help: ArgumentHelp("A voice pack folder, or a folder of packs (all are loaded).", valueName: "dir"))
    var voices: String?

    @Option(
        help: ArgumentHelp(
            "The folder of pushed clips (the push listener's corpus; \"\": none).", valueName: "dir"))
    var corpus: String?

    @Option(
        name: [.customLong("lang"), .customLong("voice")],
        help: ArgumentHelp(
            "Language of the pack used when a request names none (--voice is the old name).",
            valueName: "lang"))
    var lang: String?

    @Option(
        name: .customLong("queue-capacity"), help: ArgumentHelp("Most payment + urgent jobs waiting.", valueName: "n"))
    var queueCapacity: Int?

    @Option(
        name: .customLong("payment-ttl"),
        help: ArgumentHelp("Default ttl of payments (0: none).", valueName: "duration"))
    var paymentTTL: String?

    @Option(
        name: .customLong("status-ttl"), help: ArgumentHelp("Default ttl of status prompts.", valueName: "duration"))
    var statusTTL: String?

    @Option(
        name: .customLong("dedup-window"),
        help: ArgumentHelp("How long order ids are remembered.", valueName: "duration"))
    var dedupWindow: String?

    @Option(name: .customLong("period-us"), help: ArgumentHelp("ALSA period time wanted, µs.", valueName: "n"))
    var periodMicroseconds: Int?

    @Option(help: ArgumentHelp("ALSA periods per buffer wanted (playback starts after one).", valueName: "n"))
    var periods: Int?

    @Option(
        name: .customLong("lead-in-ms"), help: ArgumentHelp("Silence before a burst (amplifier wake).", valueName: "ms")
    )
    var leadInMs: Int?

    @Option(
        name: .customLong("pause-ms"),
        help: ArgumentHelp("Silence between two announcements heard one after the other (0: none).", valueName: "ms"))
    var pauseMs: Int?

    @Flag(name: .customLong("keep-open"), inversion: .prefixedNo, help: "Keep the PCM open between announcements.")
    var keepOpen: Bool?

    @OptionGroup(title: "Audio engine") var audio: AudioOptions

    @Option(
        name: .customLong("reading-style"),
        help: ArgumentHelp("How amounts are read unless a request says: decimal (十点五元) or units (十元五角).",
                           valueName: "style"))
    var readingStyle: String?

    @Flag(
        name: .customLong("liang"), inversion: .prefixedNo,
        help: "Say 两 (or with --no-liang 二) before 百/千/万/亿 unless a request says.")
    var liang: Bool?

    @Option(
        name: .customLong("audio-stall-limit"),
        help: ArgumentHelp("Under a systemd watchdog: one job playing this long means a hung audio thread.",
                           valueName: "duration"))
    var audioStallLimit: String?

    @Option(name: .customLong("max-clients"), help: ArgumentHelp("Most connections at once.", valueName: "n"))
    var maxClients: Int?

    @Option(
        name: .customLong("reserved-clients"),
        help: ArgumentHelp(
            "Of --max-clients, how many only peers that may speak may use (default: a quarter).", valueName: "n"))
    var reservedClients: Int?

    @Option(
        name: .customLong("idle-timeout"), help: ArgumentHelp("Close idle connections after.", valueName: "duration"))
    var idleTimeout: String?

    @Option(
        name: .customLong("request-timeout"),
        help: ArgumentHelp("A request line must arrive within.", valueName: "duration"))
    var requestTimeout: String?

    @Option(
        name: .customLong("shutdown-timeout"),
        help: ArgumentHelp("SIGTERM waits this long for the announcement playing.", valueName: "duration"))
    var shutdownTimeout: String?

    @Option(
        name: .customLong("metrics-listen"),
        help: ArgumentHelp(
            "Serve Prometheus metrics over HTTP at HOST:PORT/metrics (127.0.0.1:9464; off: none).",
            valueName: "address"))
    var metricsListen: String?

    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp("trace, debug, info, notice, warning, error, critical.", valueName: "level"))
    var logLevel: String?

    func overrides() throws -> ConfigurationOverrides {
        func duration(_ text: String?, _ flag: String, _ key: String) throws -> Double? {
            try Self.duration(text, flag: flag, key: key)
        }
        var overrides = ConfigurationOverrides()
        overrides.socketPath = socket
        if let socketMode {
            guard let mode = UInt32(socketMode, radix: 8), mode <= 0o777 else {
                throw ValidationError("--socket-mode: not an octal mode such as 0660")
            }
            overrides.socketMode = mode
        }
        overrides.socketGroup = socketGroup
        overrides.device = device
        overrides.stateDirectory = stateDir
        overrides.voicesDirectory = voices
        overrides.corpusDirectory = corpus
        overrides.language = lang
        overrides.logLevel = logLevel
        overrides.queueCapacity = queueCapacity
        overrides.paymentTTLSeconds = try duration(paymentTTL, "payment-ttl", "queue.payment_ttl")
        overrides.statusTTLSeconds = try duration(statusTTL, "status-ttl", "queue.status_ttl")
        overrides.dedupWindowSeconds = try duration(dedupWindow, "dedup-window", "queue.dedup_window")
        overrides.periodMicroseconds = periodMicroseconds
        overrides.periods = periods
        overrides.leadInMs = leadInMs
        overrides.pauseMs = pauseMs
        overrides.keepDeviceOpen = keepOpen
        overrides.audioStallLimitSeconds = try duration(audioStallLimit, "audio-stall-limit", "audio.stall_limit")
        try audio.apply(to: &overrides)
        if let readingStyle {
            guard let style = ReadingStyle(rawValue: readingStyle) else {
                throw ValidationError("--reading-style: decimal or units, not \"\(readingStyle)\"")
            }
            overrides.readingStyle = style
        }
        overrides.liang = liang
        overrides.maxClients = maxClients
        overrides.reservedClients = reservedClients
        overrides.idleTimeoutSeconds = try duration(idleTimeout, "idle-timeout", "limits.idle_timeout")
        overrides.requestTimeoutSeconds = try duration(requestTimeout, "request-timeout", "limits.request_timeout")
        overrides.shutdownTimeoutSeconds = try duration(shutdownTimeout, "shutdown-timeout", "limits.shutdown_timeout")
        if let metricsListen {
            if metricsListen == "off" {
                overrides.metricsListen = .some(nil)
            } else {
                do {
                    overrides.metricsListen = .some(try ListenAddress(parsing: metricsListen))
                } catch {
                    throw ValidationError("--metrics-listen: \(error.message) (like metrics.listen in the config file)")
                }
            }
        }
        return overrides
    }

    func validate() throws { _ = try overrides() }

    /// A duration flag's seconds, within the range of its config key (`DaemonConfiguration.durationRanges`).
    static func duration(_ text: String?, flag: String, key: String) throws -> Double? {
        guard let text else { return nil }
        do {
            return try Duration.seconds(.text(text), within: DaemonConfiguration.durationRange(key))
        } catch {
            throw ValidationError("--\(flag): \(error) (like \(key) in the config file)")
        }
    }

    func run() async throws {
        let overrides = try overrides()
        let configFile = config
        let configuration: DaemonConfiguration
        do {
            configuration = try DaemonConfiguration.resolve(configFile: configFile, overrides: overrides)
        } catch {
            StandardError.write("announced: \(error.message)\n")
            throw ExitCode(1)
        }
        if checkConfig {
            do {
                print(try DaemonCheck.report(configuration))
            } catch {
                StandardError.write("announced: \(error.message)\n")
                throw ExitCode(1)
            }
            return
        }

        AnnounceLogHandler.bootstrap(
            program: "announced", level: Logger.Level(rawValue: configuration.logLevel) ?? .info)
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = Logger(label: "announced")
        let listener = SystemdIntegration.listener(configuredPath: configuration.socketPath, logger: logger)
        let daemon: Daemon
        do {
            // A socket another daemon serves is refused before the voice packs and the journal are touched.
            try listener.refuseIfTaken()
            daemon = try Daemon(configuration: configuration, logger: logger, metricsRegistry: registry)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
        let runner = DaemonRunner(
            daemon: daemon,
            listener: listener,
            logger: logger,
            reloadConfiguration: { try DaemonConfiguration.resolve(configFile: configFile, overrides: overrides) })
        do {
            try await runner.runGroup()
        } catch {
            logger.critical("stopped on an error", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}
