import AnnounceCore
import AnnounceMQTT
import AnnouncePush
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
import UnixSignals

struct AnnouncePushCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "announce-push",
        abstract: "Receives signed payment notifications over MQTT and has announced speak them.",
        discussion: "See docs/push.md (message format, configuration) and docs/fleet.md.",
        version: BuildInfo.line(program: "announce-push"),
        subcommands: [Run.self, CheckConfig.self, Sign.self, Publish.self, Corpus.self],
        defaultSubcommand: Run.self
    )
}

struct ConfigOption: ParsableArguments {
    @Option(name: .long, help: "The push configuration (TOML).")
    var config: String = PushConfiguration.defaultPath

    func load() throws -> PushConfiguration { try loadConfiguration(config) }
}

/// Loads the configuration or exits with status 2 and the problems on standard error.
func loadConfiguration(_ path: String) throws -> PushConfiguration {
    do {
        return try PushConfiguration.load(path: path)
    } catch {
        StandardError.write("announce-push: \(error.message)\n")
        throw ExitCode(2)
    }
}

/// The listener (the systemd service runs this).
struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Listen to the broker and forward payments (default).")

    @OptionGroup var options: ConfigOption

    @Option(name: .customLong("log-level"), help: "Overrides log_level of the config: trace … critical.")
    var logLevel: String?

    @Option(
        name: .customLong("metrics-listen"),
        help: ArgumentHelp(
            "Serve Prometheus metrics over HTTP at HOST:PORT/metrics (overrides metrics.listen; off: none).",
            valueName: "address"))
    var metricsListen: String?

    func validate() throws {
        if let logLevel, Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("unknown --log-level \(logLevel)")
        }
        _ = try metricsAddress(default: nil)
    }

    /// `--metrics-listen` over the configuration's `metrics.listen`.
    func metricsAddress(default configured: ListenAddress?) throws -> ListenAddress? {
        guard let metricsListen else { return configured }
        if metricsListen == "off" { return nil }
        do {
            return try ListenAddress(parsing: metricsListen)
        } catch {
            throw ValidationError("--metrics-listen: \(error.message) (like metrics.listen in the config file)")
        }
    }

    func run() throws {
        let configuration = try options.load()
        let level = Logger.Level(rawValue: logLevel ?? configuration.logLevel) ?? .info
        AnnounceLogHandler.bootstrap(program: "announce-push", level: level)
        let logger = Logger(label: "announce-push")
        let metrics = PushMetrics()
        let endpoint = try metricsAddress(default: configuration.metricsListen).map { address in
            MetricsEndpoint(address: address, program: "announce-push", logger: logger) { metrics.exposition() }
        }
        _ = try? endpoint?.start().wait()
        defer { endpoint?.stopNow() }
        let listener = PushListener(configuration: configuration, logger: logger, metrics: metrics)
        // SIGTERM (systemd) and SIGINT stop the listener; it closes the session and returns. Trapped (as the
        // daemon traps them, swift-service-lifecycle's UnixSignals) before the listener starts.
        let trapped = ConditionLock(false)
        let signals = Task {
            let sequence = await UnixSignalsSequence(trapping: .sigterm, .sigint)
            trapped.withLock { $0 = true }
            trapped.broadcast()
            for await _ in sequence { listener.stop() }
        }
        defer { signals.cancel() }
        trapped.withLock(when: { $0 }) { _ in }
        do {
            try listener.run()
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config", abstract: "Read the configuration, report problems, print what it says.")

    @OptionGroup var options: ConfigOption

    func run() throws {
        let c = try options.load()
        print(
            """
            device      \(c.device)
            broker      \(c.broker)  client id \(c.clientID)  keepalive \(c.keepaliveSeconds) s  \
            clean session \(c.cleanSession)
            topics      \(c.topics.joined(separator: " "))  (QoS 1)
            reconnect   \(c.reconnect.initialSeconds) s doubling up to \(c.reconnect.maximumSeconds) s; taken over by \
            another client: \(c.takeover.backoff.initialSeconds) s doubling up to \(c.takeover.backoff.maximumSeconds) s
            daemon      \(c.socketPath)  hold \(c.holdSeconds) s
            keys        \(c.keyring.ids.joined(separator: " "))
            window      \(c.maximumAgeSeconds) s old … \(c.maximumFutureSeconds) s ahead
            clock       synchronised: \(c.clockSync); until then outside the window held, for at most \
            \(c.clockWaitSeconds) s
            metrics     \(c.metricsListen.map { "http://\($0)/metrics" } ?? "off")
            reading     style \(c.reading.style?.rawValue ?? "(the daemon's)")  liang \
            \(c.reading.liang.map(String.init) ?? "(the daemon's)")
            status      \(c.statusEnabled ? "\(c.statusTopic) (retained, last will; refresh \(c.statusRefreshSeconds) s)" : "off")
            receipts    \(c.receiptsEnabled ? "\(c.receiptTopic) (\(c.alibaba == nil ? "signed with \(c.effectiveReceiptKeyID ?? "?")" : "the platform's event"))" : "off")
            corpus      \(c.corpusEnabled ? "\(c.corpusDirectory) (at most \(c.corpusRules.maximumClips) clips, \(c.corpusRules.maximumBytes) bytes, \(c.corpusRules.maximumClipBytes) per clip; \(c.corpusRules.allowPlainHTTP ? "https and http" : "https only"))" : "off")
            platform    \(c.alibaba.map { "Alibaba Cloud IoT: product \($0.productKey), device \($0.deviceName), client id \($0.signIn.clientID)" } ?? "our own channel (signed messages)")
            state       \(c.stateDirectory)
            """)
    }
}

/// Who signs a message (`sign`, `publish`, `corpus`): the device, the key, the time, from the options or a config.
struct SignerOptions: ParsableArguments {
    @Option(name: .customLong("created-at"), help: "Creation time, Unix milliseconds (default: now).")
    var createdAt: Int64?

    @Option(help: "Device id (default: the config's).")
    var device: String?

    @Option(help: "Key id to sign with (default: the config's last key, by name).")
    var kid: String?

    @Option(help: "The key itself, \"hex:…\" or \"base64:…\" (default: the config's key for --kid).")
    var key: String?

    @Option(name: .long, help: "The push configuration to take the device and keys from.")
    var config: String?

    /// The configuration (if given), the device, the key id and its bytes, and the creation time.
    func signing() throws -> (
        configuration: PushConfiguration?, device: String, keyID: String, key: [UInt8], createdAt: Int64
    ) {
        let configuration = try config.map(loadConfiguration)
        guard let device = device ?? configuration?.device else {
            throw ValidationError("give --device or --config")
        }
        var keyring = configuration?.keyring ?? Keyring()
        let keyID = kid ?? keyring.ids.last ?? "k1"
        if let key {
            do {
                try keyring = Keyring(encoded: [keyID: key])
            } catch {
                throw ValidationError(error.message)
            }
        }
        guard let secret = keyring.bytes(keyID) else {
            throw ValidationError("no key \"\(keyID)\": give --key, or --config with that key id")
        }
        let createdAt = createdAt ?? Int64((Date().timeIntervalSince1970 * 1000).rounded())
        return (configuration, device, keyID, secret, createdAt)
    }
}

/// What `sign` and `publish` put in the message.
struct MessageOptions: ParsableArguments {
    @Argument(help: "The amount in yuan as text (\"100.00\"); or give --fen.")
    var amount: String?

    @Option(help: "The amount in integer fen instead.")
    var fen: Int64?

    @Option(help: "Order id (default: a new unique one).")
    var order: String?

    @Option(help: "Payment channel: plain, alipay, wechat, unionpay …")
    var channel: String = "plain"

    @Flag(help: "A refund.")
    var refund = false

    @Option(help: "ISO 4217 currency.")
    var currency: String = "CNY"

    @Option(help: ArgumentHelp("Reading style the message asks for: decimal or units (default: none).", valueName: "s"))
    var style: String?

    @Flag(inversion: .prefixedNo, help: "Ask for 两 (or, with --no-liang, for 二) before 百/千/万/亿 (default: none).")
    var liang: Bool?

    @Option(
        name: .customLong("part"),
        help: ArgumentHelp(
            "A combination instead of a payment: its parts in order, one per --part (a clip id, {$AMOUNT}, {#DIGITS}).",
            valueName: "part"))
    var parts: [String] = []

    @Flag(help: "Ask the speaker to play through its mute (if its daemon allows it: audio.allow_enforce).")
    var enforce = false

    @Option(name: .customLong("class"), help: ArgumentHelp("A combination's class: payment or notice.", valueName: "c"))
    var noticeClass: String?

    @Option(help: ArgumentHelp("A repeating notice: the combination said again every N seconds (1-3600).", valueName: "n"))
    var every: Int?

    @Option(help: ArgumentHelp("A repeating notice's most times (default 10).", valueName: "n"))
    var times: Int?

    @Flag(help: "Stop the repeating notice --order (instead of an amount or parts).")
    var stop = false

    @Flag(name: .customLong("replay-last"), help: "Say the last combination broadcast again (once per --order).")
    var replayLast = false

    @OptionGroup var signer: SignerOptions

    /// The signed message.
    func message() throws -> (PushMessage, PushConfiguration?) {
        let given = [amount != nil, fen != nil, !parts.isEmpty, stop, replayLast].filter { $0 }.count
        guard given == 1 else {
            throw ValidationError("give an amount, --fen, --part, --stop or --replay-last (one of them)")
        }
        if (stop || replayLast) && order == nil { throw ValidationError("--stop and --replay-last need --order") }
        var noticeClass: PushMessage.NoticeClass?
        if let text = self.noticeClass {
            guard let parsed = PushMessage.NoticeClass(rawValue: text) else {
                throw ValidationError("--class: payment or notice")
            }
            noticeClass = parsed
        }
        if !parts.isEmpty && (channel != "plain" || refund) {
            throw ValidationError("a combination (--part) has no --channel or --refund: its parts say what is spoken")
        }
        let (configuration, device, keyID, secret, createdAt) = try signer.signing()
        var readingStyle: ReadingStyle?
        if let style {
            guard let parsed = ReadingStyle(rawValue: style) else { throw ValidationError("--style: decimal or units") }
            readingStyle = parsed
        }
        let order = order ?? "P\(createdAt)-\(UInt32.random(in: 0...UInt32.max))"
        var message = PushMessage(
            device: device, order: order, amount: parts.isEmpty ? amount.map(PushAmount.text) ?? .fen(fen ?? 0) : nil,
            currency: currency, channel: channel, refund: refund, createdAt: createdAt, keyID: keyID,
            style: readingStyle, liang: liang, parts: parts.isEmpty ? nil : parts, enforce: enforce ? true : nil)
        message.noticeClass = noticeClass
        message.every = every
        message.times = times
        if stop || replayLast {
            message = PushMessage(device: device, order: order, amount: nil, createdAt: createdAt, keyID: keyID)
            message.stop = stop ? true : nil
            message.replay = replayLast ? .combination : nil
        }
        // What the listener would refuse for its shape is refused here too (the signature is not checked yet).
        do {
            _ = try PushMessage(payload: PushSigner.sign(message, key: secret).payload())
        } catch {
            StandardError.write("announce-push: \(error.message)\n")
            throw ExitCode(2)
        }
        return (PushSigner.sign(message, key: secret), configuration)
    }
}

struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a signed payment message (JSON), e.g. for mosquitto_pub -s.")

    @OptionGroup var message: MessageOptions

    func run() throws {
        let (signed, _) = try message.message()
        print(String(decoding: signed.payload(), as: UTF8.self))
    }
}

/// Where `publish` and `corpus` publish: the broker, its credentials and TLS, the topic.
struct BrokerOptions: ParsableArguments {
    @Option(help: "Topic (default: the config's first topic, or announce/<device>/payments).")
    var topic: String?

    @Option(help: "Broker URL, mqtt://host:port or mqtts://host:port (default: the config's).")
    var broker: String?

    @Option(help: "Broker user name (default: the config's).")
    var username: String?

    @Option(help: "File whose first line is the broker password.")
    var passwordFile: String?

    @Option(name: .customLong("ca-file"), help: "CA certificate file for mqtts:// (default: the config's).")
    var caFile: String?

    /// Publishes `payload` as the options and `configuration` say; exits 4 if the broker does not take it.
    func publish(_ payload: [UInt8], configuration: PushConfiguration?, device: String?) throws {
        var publisher: Publisher
        if let configuration {
            publisher = Publisher(configuration: configuration)
        } else {
            guard broker != nil else { throw ValidationError("give --broker or --config") }
            publisher = Publisher(broker: MQTTEndpoint(host: "", port: 0, tls: false))
        }
        if let broker {
            do { publisher.broker = try MQTTEndpoint(url: broker) } catch { throw ValidationError(error.description) }
        }
        if let username { publisher.username = username }
        if let passwordFile {
            guard let text = try? String(contentsOfFile: passwordFile, encoding: .utf8) else {
                throw ValidationError("cannot read \(passwordFile)")
            }
            publisher.password = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        }
        if let caFile { publisher.tls.caFile = caFile }
        guard let topic = topic ?? configuration?.topics.first ?? device.map(PushConfiguration.defaultTopic) else {
            throw ValidationError("give --topic, --device or --config")
        }
        do {
            try publisher.publish(topic: topic, payload: payload)
        } catch {
            StandardError.write("announce-push: \(error.message)\n")
            throw ExitCode(4)
        }
    }
}

struct Publish: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign a payment and publish it to the device's topic (QoS 1), for installers and tests.",
        discussion: """
            With --config, the broker, credentials, TLS files, device, topic and key come from the listener's \
            configuration; options override them. Exit status: 0 published (the broker acknowledged), \
            2 invalid input, 4 broker unreachable or did not acknowledge, 64 usage.
            """)

    @OptionGroup var message: MessageOptions

    @OptionGroup var target: BrokerOptions

    @Option(name: .customLong("raw"), help: "Publish this file's bytes as they are (\"-\": standard input), unsigned.")
    var raw: String?

    func run() throws {
        var payload: [UInt8]
        var configuration: PushConfiguration?
        var device = message.signer.device
        if let raw {
            let data =
                raw == "-" ? Data(StandardInput.readAll()) : FileManager.default.contents(atPath: raw)
            guard let data else { throw ValidationError("cannot read \(raw)") }
            payload = Array(data)
            configuration = try message.signer.config.map(loadConfiguration)
        } else {
            let (signed, loaded) = try message.message()
            payload = signed.payload()
            configuration = loaded
            device = signed.device
        }
        try target.publish(payload, configuration: configuration, device: device)
        print(String(decoding: payload, as: UTF8.self))
    }
}

/// `announce-push corpus`: signs a corpus push (docs/push.md, "Corpus push") and publishes it, or only prints it.
struct Corpus: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign a corpus push (clips to install by URL, or to delete) and publish it, for installers and tests.",
        discussion: """
            --clip ID FILE URL (repeated): install the clip FILE, which the terminal downloads from URL, under \
            the corpus id ID; its format, size and SHA-256 are taken from FILE. --delete ID (repeated) or \
            --delete-all instead. Exit status: 0 published (or printed), 2 invalid input, 4 broker unreachable, \
            64 usage.
            """)

    @Option(
        parsing: .upToNextOption,
        help: ArgumentHelp("A clip to install: its corpus id, the file, the URL it is served at.", valueName: "id file url"))
    var clip: [String] = []

    @Option(help: "A corpus id to delete (repeat for more).")
    var delete: [String] = []

    @Flag(name: .customLong("delete-all"), help: "Delete every pushed clip.")
    var deleteAll = false

    @Option(help: "Task id (default: a new unique one).")
    var task: String?

    @Flag(name: .customLong("print"), help: "Only print the signed JSON; publish nothing.")
    var printOnly = false

    @OptionGroup var signer: SignerOptions

    @OptionGroup var target: BrokerOptions

    func run() throws {
        let operations = (clip.isEmpty ? 0 : 1) + (delete.isEmpty ? 0 : 1) + (deleteAll ? 1 : 0)
        guard operations == 1 else { throw ValidationError("give --clip …, --delete … or --delete-all (one of them)") }
        guard clip.count % 3 == 0 else { throw ValidationError("--clip takes three values: ID FILE URL") }
        let (configuration, device, keyID, secret, createdAt) = try signer.signing()
        let taskID = task ?? "C\(createdAt)-\(UInt32.random(in: 0...UInt32.max))"
        var corpusTask: CorpusTask
        if !clip.isEmpty {
            corpusTask = CorpusTask(task: taskID, op: .put)
            for index in stride(from: 0, to: clip.count, by: 3) {
                let (id, file, url) = (clip[index], clip[index + 1], clip[index + 2])
                guard let data = FileManager.default.contents(atPath: file) else {
                    throw ValidationError("cannot read \(file)")
                }
                let format = String(file.split(separator: ".").last ?? "").lowercased()
                corpusTask.clips.append(
                    CorpusTask.Clip(
                        id: id, url: url, format: format, size: data.count, sha256: CorpusDigest.sha256(Array(data))))
            }
        } else if !delete.isEmpty {
            corpusTask = CorpusTask(task: taskID, op: .delete, ids: delete)
        } else {
            corpusTask = CorpusTask(task: taskID, op: .deleteAll)
        }
        let signed = CorpusSigner.sign(
            CorpusMessage(device: device, keyID: keyID, task: corpusTask, createdAt: createdAt), key: secret)
        let payload = signed.payload()
        // What the listener would refuse for its shape is refused here too.
        do {
            _ = try CorpusMessage(payload: payload)
        } catch {
            StandardError.write("announce-push: \(error.message)\n")
            throw ExitCode(2)
        }
        if !printOnly { try target.publish(payload, configuration: configuration, device: device) }
        print(String(decoding: payload, as: UTF8.self))
    }
}
