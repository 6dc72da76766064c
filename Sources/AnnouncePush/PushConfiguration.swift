import AnnounceCore
import AnnounceMQTT
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import TOMLKit

/// Everything `announce-push` needs, read from `/etc/announce/push.toml` (TOML). Documented key by key in
/// docs/push.md; `examples/push.toml` is a complete example. Every key is checked: an unknown key (a typo) or a
/// value of the wrong kind is an error naming the key.
public struct PushConfiguration: Sendable {
    /// This terminal's id: its topic is built from it and every message must be signed for it.
    public var device: String
    public var broker: MQTTEndpoint
    public var clientID: String
    public var username: String?
    public var password: String?
    public var tls = MQTTTLS()
    /// Topic filters subscribed with QoS 1. Default: `announce/<device>/payments`.
    public var topics: [String]
    /// Seconds between MQTT PINGREQs when idle; the broker drops the client after 1.5 times this.
    public var keepaliveSeconds = 30
    /// false (default): a persistent session, so the broker keeps QoS 1 messages while the terminal is away.
    public var cleanSession = false
    /// A connection attempt that has not been accepted after this long is abandoned.
    public var connectTimeoutSeconds = 10.0
    /// Capped exponential backoff between connection attempts.
    public var reconnect = Backoff.Policy(initialSeconds: 1, maximumSeconds: 60)
    /// How a client taking this client id's session is told from a lost connection, and the wait after each
    /// takeover once it is (`broker.conflict_reconnect_min`/`_max`).
    public var takeover = TakeoverWatch.Policy()

    /// The daemon's socket.
    public var socketPath: String
    /// How long a message is retried while the daemon cannot take it, before the connection is dropped unacknowledged
    /// (the broker keeps the message and redelivers it once the daemon answers again).
    public var holdSeconds = 5.0
    /// How long one request to the daemon may take.
    public var daemonTimeoutSeconds = 5.0

    public var keyring = Keyring()
    public var maximumAgeSeconds = 600.0
    public var maximumFutureSeconds = 60.0
    public var currencies: Set<String> = ["CNY"]
    /// Where the listener learns that the system clock was set right (`security.clock_sync`), and how long it
    /// leaves payments the clock calls stale or future with the broker until then (`security.clock_wait`).
    public var clockSync = ClockSync.kernel
    public var clockWaitSeconds = 600.0

    public var prompts = StatusPrompter.Policy()
    /// How payments are read when a message does not say (`[reading]`): style and 两; unset, the daemon decides.
    public var reading = ReadingDefaults.Choice()
    public var logLevel = "info"
    /// Where the Prometheus endpoint listens (`[metrics] listen`); nil: none (the default).
    public var metricsListen: ListenAddress?

    /// Where pending receipts are kept until the broker acknowledges them (`<stateDirectory>/receipts`).
    public var stateDirectory = "/var/lib/announce-push"
    /// The retained status on `statusTopic` (and the last will there).
    public var statusEnabled = true
    public var statusTopic: String
    /// The status is published again after this long even if nothing changed.
    public var statusRefreshSeconds = 300.0
    /// A signed receipt on `receiptTopic` for every payment handed to the daemon.
    public var receiptsEnabled = true
    public var receiptTopic: String
    /// The key that signs receipts: `receiptKeyID`, else the last key id by name.
    public var receiptKeyID: String?

    /// Corpus pushes (pushed clips, docs/push.md "Corpus push"): accepted (`corpus.enabled`), kept in
    /// `corpusDirectory` (`<state_dir>/corpus` unless `corpus.directory` says), under `corpusRules`.
    public var corpusEnabled = true
    public var corpusDirectoryOverride: String?
    public var corpusRules = CorpusRules()
    /// The folder of pushed clips: the daemon's `corpus` setting must name it.
    public var corpusDirectory: String { corpusDirectoryOverride ?? Path.join(stateDirectory, "corpus") }

    /// `[alibaba]`: speak to the Alibaba Cloud IoT Platform's thing model (千里传音) instead of our own channel
    /// (docs/push.md, "Alibaba Cloud IoT Platform"). Nil: our own channel.
    public var alibaba: AlibabaThingSettings?

    public init(device: String, broker: MQTTEndpoint, socketPath: String) {
        self.device = device
        self.broker = broker
        self.socketPath = socketPath
        clientID = "announce-\(device)"
        topics = [Self.defaultTopic(device: device)]
        statusTopic = "announce/\(device)/status"
        receiptTopic = "announce/\(device)/receipts"
    }

    public static func defaultTopic(device: String) -> String { "announce/\(device)/payments" }

    /// The key id receipts are signed with.
    public var effectiveReceiptKeyID: String? { receiptKeyID ?? keyring.ids.last }

    public static let defaultPath = "/etc/announce/push.toml"

    /// The range of every duration setting, by key (docs/push.md gives the same). Checked as the file is read,
    /// before a duration becomes an integer (milliseconds, keepalive seconds) or a sleep.
    public static let durationRanges: [String: ClosedRange<Double>] = [
        "broker.keepalive": 5...3600,
        "broker.connect_timeout": 0.001...3600,
        "broker.reconnect_min": 0.001...3600,
        "broker.reconnect_max": 0.001...3600,
        "broker.conflict_reconnect_min": 0.001...86_400,
        "broker.conflict_reconnect_max": 0.001...86_400,
        "daemon.hold": 0.001...3600,
        "daemon.timeout": 0.001...3600,
        "security.max_age": 0.001...7 * 86_400,
        "security.max_future": 0...86_400,
        "security.clock_wait": 0...86_400,
        "prompts.lost_after": 0...86_400,
        "prompts.min_interval": 0...86_400,
        "status.refresh": 10...86_400,
        "corpus.timeout": 1...3600,
        "corpus.max_age": 0.001...30 * 86_400,
    ]

    static func durationRange(_ name: String) -> ClosedRange<Double> {
        guard let range = durationRanges[name] else { preconditionFailure("no duration setting \(name)") }
        return range
    }

    public var verifier: PushVerifier {
        PushVerifier(
            device: device, keyring: keyring, maximumAgeMs: Int64(maximumAgeSeconds * 1000),
            maximumFutureMs: Int64(maximumFutureSeconds * 1000), currencies: currencies, reading: reading)
    }

    // MARK: Loading

    public static func load(path: String) throws(AnnounceError) -> PushConfiguration {
        try parse(ConfigText.read(path), source: path, directory: Path.directory(of: path))
    }

    /// Reads TOML text. Relative file names in it (password_file, TLS files) are taken from `directory`.
    public static func parse(_ text: String, source: String = "config", directory: String = ".")
        throws(AnnounceError) -> PushConfiguration
    {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw AnnounceError(
                .badRequest,
                "\(source): line \(error.source.begin.line), column \(error.source.begin.column): \(error.description)")
        } catch {
            throw AnnounceError(.badRequest, "\(source): not valid TOML", cause: "\(error)")
        }
        var reader = Reader(source: source, directory: directory)
        let configuration = reader.read(table)
        guard reader.problems.isEmpty, let configuration else {
            throw AnnounceError(.badRequest, reader.problems.joined(separator: "\n"))
        }
        return configuration
    }

    private struct Reader {
        let source: String
        let directory: String
        var problems: [String] = []

        mutating func problem(_ key: String, _ message: String) { problems.append("\(source): \(key): \(message)") }

        mutating func read(_ root: TOMLTable) -> PushConfiguration? {
            let known = [
                "device", "socket", "log_level", "broker", "daemon", "security", "keys", "prompts", "reading", "metrics",
                "state_dir", "status", "receipts", "corpus", "alibaba",
            ]
            for key in root.keys where !known.contains(key) { problem(key, "unknown key") }
            let alibabaTable = table(root, "alibaba")
            // Under the Alibaba Cloud thing model the device is its DeviceName unless `device` says otherwise.
            let alibabaDevice = alibabaTable.flatMap { $0["device_name"]?.string }
            guard let device = string(root, "device", "device") ?? alibabaDevice else {
                problem("device", "is required (this terminal's id, e.g. \"T1000123\")")
                return nil
            }
            if (try? PushMessage.checked(device, "device", PushMessage.identifierCharacters, 64)) == nil {
                problem("device", "must be 1 to 64 characters of A-Za-z0-9._:-")
            }
            let brokerTable = table(root, "broker")
            guard let url = brokerTable.flatMap({ string($0, "url", "broker.url") }) else {
                problem("broker.url", "is required (mqtt://host:port or mqtts://host:port)")
                return nil
            }
            let endpoint: MQTTEndpoint
            do {
                endpoint = try MQTTEndpoint(url: url)
            } catch {
                problem("broker.url", error.description)
                return nil
            }
            var configuration = PushConfiguration(
                device: device, broker: endpoint, socketPath: Self.defaultSocket)
            if let text = string(root, "socket", "socket") { configuration.socketPath = text }
            if let level = string(root, "log_level", "log_level") {
                if ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(level) {
                    configuration.logLevel = level
                } else {
                    problem("log_level", "must be trace, debug, info, notice, warning, error or critical")
                }
            }
            if let brokerTable { readBroker(brokerTable, &configuration) }
            if let daemon = table(root, "daemon") { readDaemon(daemon, &configuration) }
            if let security = table(root, "security") { readSecurity(security, &configuration) }
            if let keys = table(root, "keys") {
                var encoded: [String: String] = [:]
                for id in keys.keys {
                    if let text = string(keys, id, "keys.\(id)") { encoded[id] = text }
                }
                do { configuration.keyring = try Keyring(encoded: encoded) } catch { problem("keys", error.message) }
            }
            if let alibabaTable { readAlibaba(alibabaTable, &configuration) }
            if configuration.keyring.ids.isEmpty, configuration.alibaba == nil {
                problem("keys", "at least one key is required ([keys] k1 = \"hex:…\"); nothing verifies without")
            }
            if let prompts = table(root, "prompts") { readPrompts(prompts, &configuration) }
            if let metrics = table(root, "metrics") { readMetrics(metrics, &configuration) }
            if let reading = table(root, "reading") { readReading(reading, &configuration) }
            if let text = string(root, "state_dir", "state_dir") {
                if text.isEmpty {
                    problem("state_dir", "must not be empty")
                } else {
                    configuration.stateDirectory = file(text)
                }
            }
            if let status = table(root, "status") { readStatus(status, &configuration) }
            if let receipts = table(root, "receipts") { readReceipts(receipts, &configuration) }
            if let corpus = table(root, "corpus") { readCorpus(corpus, &configuration) }
            if configuration.corpusEnabled, !configuration.receiptsEnabled {
                problem(
                    "corpus.enabled",
                    "corpus pushes need receipts.enabled (a push is kept with what is owed for it until its receipt)")
            }
            if let alibaba = configuration.alibaba {
                // The platform's topics and sign-in replace ours; it keeps no retained status and no last will.
                configuration.clientID = alibaba.signIn.clientID
                configuration.username = alibaba.signIn.username
                configuration.password = alibaba.signIn.password
                configuration.topics = alibaba.subscriptions
                configuration.statusEnabled = false
                configuration.receiptsEnabled = true
                configuration.receiptTopic = alibaba.eventTopic(AlinkThing.speechUpdateEvent)
                if !endpoint.tls, !alibaba.allowPlainMQTT {
                    problem("broker.url", "the Alibaba Cloud IoT Platform is reached over TLS: use mqtts://")
                }
            }
            if let kid = configuration.receiptKeyID, configuration.keyring.key(kid) == nil {
                problem("receipts.kid", "no key \"\(kid)\" in [keys]")
            }
            // A held payment blocks the MQTT loop for up to hold + one last daemon timeout: no PINGREQ meanwhile.
            if configuration.holdSeconds + configuration.daemonTimeoutSeconds >= Double(configuration.keepaliveSeconds) {
                problem(
                    "daemon.hold",
                    "daemon.hold + daemon.timeout must be shorter than broker.keepalive "
                        + "(the connection is not serviced while a payment is held)")
            }
            return configuration
        }

        static let defaultSocket = "/run/announce/announce.sock"

        mutating func readBroker(_ broker: TOMLTable, _ c: inout PushConfiguration) {
            for key in broker.keys {
                let name = "broker.\(key)"
                switch key {
                case "url": break
                case "client_id":
                    if let text = string(broker, key, name) {
                        if text.isEmpty || text.utf8.count > 128 {
                            problem(name, "must be 1 to 128 bytes")
                        } else {
                            c.clientID = text
                        }
                    }
                case "username": c.username = string(broker, key, name)
                case "password": c.password = string(broker, key, name)
                case "password_file":
                    if let path = string(broker, key, name) { c.password = secret(file: path, name) }
                case "topics":
                    guard let array = broker[key]?.array else {
                        problem(name, "must be an array of topic filters")
                        continue
                    }
                    let topics = array.compactMap { $0.string }
                    if topics.count != array.count || topics.isEmpty || topics.contains(where: \.isEmpty) {
                        problem(name, "must be a non-empty array of topic filters")
                    } else {
                        c.topics = topics
                    }
                case "keepalive": if let seconds = duration(broker, key, name) { c.keepaliveSeconds = Int(seconds) }
                case "clean_session": if let flag = bool(broker, key, name) { c.cleanSession = flag }
                case "connect_timeout":
                    if let seconds = duration(broker, key, name) { c.connectTimeoutSeconds = seconds }
                case "reconnect_min":
                    if let seconds = duration(broker, key, name) { c.reconnect.initialSeconds = seconds }
                case "reconnect_max":
                    if let seconds = duration(broker, key, name) { c.reconnect.maximumSeconds = seconds }
                case "conflict_reconnect_min":
                    if let seconds = duration(broker, key, name) { c.takeover.backoff.initialSeconds = seconds }
                case "conflict_reconnect_max":
                    if let seconds = duration(broker, key, name) { c.takeover.backoff.maximumSeconds = seconds }
                case "tls":
                    guard let tls = broker[key]?.table else {
                        problem(name, "must be a table ([broker.tls])")
                        continue
                    }
                    for inner in tls.keys {
                        let innerName = "broker.tls.\(inner)"
                        let path = string(tls, inner, innerName).map(file)
                        switch inner {
                        case "ca_file": c.tls.caFile = path
                        case "ca_path": c.tls.caPath = path
                        case "cert_file": c.tls.certFile = path
                        case "key_file": c.tls.keyFile = path
                        default: problem(innerName, "unknown key")
                        }
                    }
                default: problem(name, "unknown key")
                }
            }
            if c.reconnect.maximumSeconds < c.reconnect.initialSeconds {
                problem("broker.reconnect_max", "must not be less than broker.reconnect_min")
            }
            if c.takeover.backoff.maximumSeconds < c.takeover.backoff.initialSeconds {
                problem("broker.conflict_reconnect_max", "must not be less than broker.conflict_reconnect_min")
            }
            if (c.tls.certFile == nil) != (c.tls.keyFile == nil) {
                problem("broker.tls", "cert_file and key_file go together")
            }
            if !c.broker.tls, c.tls != MQTTTLS() {
                problem("broker.tls", "TLS files are set but broker.url is mqtt://; use mqtts://")
            }
            if c.password != nil, c.username == nil { problem("broker.password", "needs broker.username") }
        }

        mutating func readDaemon(_ daemon: TOMLTable, _ c: inout PushConfiguration) {
            for key in daemon.keys {
                let name = "daemon.\(key)"
                switch key {
                case "hold": if let seconds = duration(daemon, key, name) { c.holdSeconds = seconds }
                case "timeout": if let seconds = duration(daemon, key, name) { c.daemonTimeoutSeconds = seconds }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readSecurity(_ security: TOMLTable, _ c: inout PushConfiguration) {
            for key in security.keys {
                let name = "security.\(key)"
                switch key {
                case "max_age": if let seconds = duration(security, key, name) { c.maximumAgeSeconds = seconds }
                case "max_future": if let seconds = duration(security, key, name) { c.maximumFutureSeconds = seconds }
                case "clock_sync":
                    guard let text = string(security, key, name) else { continue }
                    if let sync = ClockSync(text: text) {
                        c.clockSync = sync
                    } else {
                        problem(name, ClockSync.expected)
                    }
                case "clock_wait": if let seconds = duration(security, key, name) { c.clockWaitSeconds = seconds }
                case "currencies":
                    let list = security[key]?.array?.compactMap { $0.string } ?? []
                    if list.isEmpty || list.contains(where: { $0.count != 3 }) {
                        problem(name, "must be a non-empty array of 3-letter currency codes")
                    } else {
                        c.currencies = Set(list)
                    }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readPrompts(_ prompts: TOMLTable, _ c: inout PushConfiguration) {
            for key in prompts.keys {
                let name = "prompts.\(key)"
                switch key {
                case "enabled": if let flag = bool(prompts, key, name) { c.prompts.enabled = flag }
                case "lost_after":
                    if let seconds = duration(prompts, key, name) { c.prompts.lostAfterSeconds = seconds }
                case "min_interval":
                    if let seconds = duration(prompts, key, name) { c.prompts.minimumIntervalSeconds = seconds }
                case "connected", "lost", "restored":
                    guard let text = string(prompts, key, name) else { continue }
                    switch key {
                    case "connected": c.prompts.connectedPrompt = text
                    case "lost": c.prompts.lostPrompt = text
                    default: c.prompts.restoredPrompt = text
                    }
                default: problem(name, "unknown key")
                }
            }
        }

        /// `[metrics] listen = "127.0.0.1:9465"`, as the daemon's (`""`: off).
        mutating func readMetrics(_ metrics: TOMLTable, _ c: inout PushConfiguration) {
            for key in metrics.keys {
                let name = "metrics.\(key)"
                switch key {
                case "listen":
                    guard let text = string(metrics, key, name), !text.isEmpty else { continue }
                    do {
                        c.metricsListen = try ListenAddress(parsing: text)
                    } catch {
                        problem(name, error.message)
                    }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readReading(_ reading: TOMLTable, _ c: inout PushConfiguration) {
            for key in reading.keys {
                let name = "reading.\(key)"
                switch key {
                case "style":
                    guard let text = string(reading, key, name) else { continue }
                    if let style = ReadingStyle(rawValue: text) {
                        c.reading.style = style
                    } else {
                        problem(name, "must be \"decimal\" (十点五元) or \"units\" (十元五角)")
                    }
                case "liang": if let flag = bool(reading, key, name) { c.reading.liang = flag }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readStatus(_ status: TOMLTable, _ c: inout PushConfiguration) {
            for key in status.keys {
                let name = "status.\(key)"
                switch key {
                case "enabled": if let flag = bool(status, key, name) { c.statusEnabled = flag }
                case "topic": if let text = topic(status, key, name) { c.statusTopic = text }
                case "refresh": if let seconds = duration(status, key, name) { c.statusRefreshSeconds = seconds }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readReceipts(_ receipts: TOMLTable, _ c: inout PushConfiguration) {
            for key in receipts.keys {
                let name = "receipts.\(key)"
                switch key {
                case "enabled": if let flag = bool(receipts, key, name) { c.receiptsEnabled = flag }
                case "topic": if let text = topic(receipts, key, name) { c.receiptTopic = text }
                case "kid": c.receiptKeyID = string(receipts, key, name)
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readCorpus(_ corpus: TOMLTable, _ c: inout PushConfiguration) {
            for key in corpus.keys {
                let name = "corpus.\(key)"
                switch key {
                case "enabled": if let flag = bool(corpus, key, name) { c.corpusEnabled = flag }
                case "directory":
                    if let text = string(corpus, key, name) {
                        if text.isEmpty { problem(name, "must not be empty") } else { c.corpusDirectoryOverride = file(text) }
                    }
                case "max_clips": if let value = count(corpus, key, name, 1...10_000) { c.corpusRules.maximumClips = value }
                case "max_bytes":
                    if let value = count(corpus, key, name, 1024...(1 << 34)) { c.corpusRules.maximumBytes = value }
                case "max_clip_bytes":
                    if let value = count(corpus, key, name, 64...(1 << 30)) { c.corpusRules.maximumClipBytes = value }
                case "allow_http": if let flag = bool(corpus, key, name) { c.corpusRules.allowPlainHTTP = flag }
                case "ca_file": if let text = string(corpus, key, name) { c.corpusRules.caFile = file(text) }
                case "timeout":
                    if let seconds = duration(corpus, key, name) { c.corpusRules.downloadTimeoutSeconds = seconds }
                case "attempts": if let value = count(corpus, key, name, 1...10) { c.corpusRules.attempts = value }
                case "max_age": if let seconds = duration(corpus, key, name) { c.corpusRules.maximumAgeSeconds = seconds }
                default: problem(name, "unknown key")
                }
            }
        }

        mutating func readAlibaba(_ alibaba: TOMLTable, _ c: inout PushConfiguration) {
            var productKey: String?
            var deviceName: String?
            var secret: String?
            var settings = AlibabaThingSettings.Options()
            for key in alibaba.keys {
                let name = "alibaba.\(key)"
                switch key {
                case "product_key": productKey = string(alibaba, key, name)
                case "device_name": deviceName = string(alibaba, key, name)
                case "device_secret": secret = string(alibaba, key, name)
                case "device_secret_file": if let path = string(alibaba, key, name) { secret = self.secret(file: path, name) }
                case "client_id": if let text = string(alibaba, key, name) { settings.clientID = text }
                case "sign_method":
                    guard let text = string(alibaba, key, name) else { continue }
                    if let method = AlibabaSignIn.Method(rawValue: text) {
                        settings.method = method
                    } else {
                        problem(name, "must be \"hmacsha256\" or \"hmacsha1\"")
                    }
                case "timestamp":
                    guard let text = string(alibaba, key, name) else { continue }
                    if text == "now" || (!text.isEmpty && text.utf8.allSatisfy { (0x30...0x39).contains($0) }) {
                        settings.timestamp = text
                    } else {
                        problem(name, "must be Unix milliseconds as text, or \"now\"")
                    }
                case "delete_all_service": if let text = string(alibaba, key, name) { settings.deleteAllService = text }
                case "replay_service": if let text = string(alibaba, key, name) { settings.replayService = text }
                case "start_repeat_service":
                    if let text = string(alibaba, key, name) { settings.startRepeatService = text }
                case "stop_repeat_service":
                    if let text = string(alibaba, key, name) { settings.stopRepeatService = text }
                case "allow_plain_mqtt": if let flag = bool(alibaba, key, name) { settings.allowPlainMQTT = flag }
                default: problem(name, "unknown key")
                }
            }
            guard let productKey, let deviceName, let secret else {
                problem("alibaba", "product_key, device_name and device_secret (or device_secret_file) are required")
                return
            }
            do {
                c.alibaba = try AlibabaThingSettings(
                    productKey: productKey, deviceName: deviceName, deviceSecret: secret, options: settings)
            } catch {
                problem("alibaba", error.message)
            }
        }

        /// A whole number within `range`.
        mutating func count(_ table: TOMLTable, _ key: String, _ name: String, _ range: ClosedRange<Int>) -> Int? {
            guard let value = table[key] else { return nil }
            guard let number = value.int, range.contains(number) else {
                problem(name, "must be a whole number \(range.lowerBound)…\(range.upperBound)")
                return nil
            }
            return number
        }

        /// A topic to publish to: no wildcards, not empty.
        mutating func topic(_ table: TOMLTable, _ key: String, _ name: String) -> String? {
            guard let text = string(table, key, name) else { return nil }
            // Characters, not substrings: Foundation's substring search is not linked into the release executable.
            guard !text.isEmpty, !text.unicodeScalars.contains(where: { $0 == "+" || $0 == "#" || $0 == "\u{0}" }) else {
                problem(name, "must be a topic name without wildcards (+, #)")
                return nil
            }
            return text
        }

        // MARK: Typed values

        mutating func table(_ parent: TOMLTable, _ key: String) -> TOMLTable? {
            guard let value = parent[key] else { return nil }
            guard let table = value.table else {
                problem(key, "must be a table ([\(key)])")
                return nil
            }
            return table
        }

        mutating func string(_ table: TOMLTable, _ key: String, _ name: String) -> String? {
            guard let value = table[key] else { return nil }
            guard let text = value.string else {
                problem(name, "must be a string")
                return nil
            }
            return text
        }

        mutating func bool(_ table: TOMLTable, _ key: String, _ name: String) -> Bool? {
            guard let value = table[key] else { return nil }
            guard let flag = value.bool else {
                problem(name, "must be true or false")
                return nil
            }
            return flag
        }

        /// The duration setting `name` (`"security.max_age"`): seconds as a number, or a string with a unit
        /// ("500ms", "90s", "10m", "24h"), within its range (``PushConfiguration/durationRanges``).
        mutating func duration(_ table: TOMLTable, _ key: String, _ name: String) -> Double? {
            guard let value = table[key] else { return nil }
            let written: Duration.Written
            if let number = value.int {
                written = .seconds(Double(number))
            } else if let number = value.double {
                written = .seconds(number)
            } else if let text = value.string {
                written = .text(text)
            } else {
                problem(name, "must be a duration: seconds, or a string such as \"500ms\", \"90s\", \"10m\"")
                return nil
            }
            do {
                return try Duration.seconds(written, within: PushConfiguration.durationRange(name))
            } catch {
                problem(name, error.description)
                return nil
            }
        }

        func file(_ path: String) -> String {
            path.hasPrefix("/") ? path : Path.join(directory, path)
        }

        /// The first line of a file holding a secret.
        mutating func secret(file path: String, _ name: String) -> String? {
            let resolved = file(path)
            guard let data = FileManager.default.contents(atPath: resolved),
                let text = String(data: data, encoding: .utf8)
            else {
                problem(name, "cannot read \(resolved)")
                return nil
            }
            return String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        }
    }
}
