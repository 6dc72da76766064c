import AnnounceCore
import AnnounceInput
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import TOMLKit

/// Reads `announced.toml` (TOML, through TOMLKit) onto a configuration. Every key is checked: an unknown key
/// (a typo) or a value of the wrong kind is an error naming the key, never silently ignored.
public enum ConfigFile {
    /// Applies the file at `path` to `configuration`. A missing file is an error only if `required`.
    public static func load(
        path: String, required: Bool, onto configuration: DaemonConfiguration
    ) throws(AnnounceError) -> DaemonConfiguration {
        guard FileManager.default.fileExists(atPath: path) else {
            if required { throw AnnounceError(.badRequest, "config file \(path) does not exist") }
            return configuration
        }
        return try apply(ConfigText.read(path), source: path, onto: configuration)
    }

    /// Applies TOML `text` to `configuration`.
    public static func apply(
        _ text: String, source: String = "config", onto configuration: DaemonConfiguration
    ) throws(AnnounceError) -> DaemonConfiguration {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw AnnounceError(
                .badRequest,
                syntaxProblem(
                    error.description, line: Int(error.source.begin.line), column: Int(error.source.begin.column),
                    in: text, source: source))
        } catch {
            throw AnnounceError(.badRequest, "\(source): not valid TOML", cause: "\(error)")
        }
        var reader = Reader(source: source, configuration: configuration)
        reader.read(table)
        if !reader.problems.isEmpty {
            throw AnnounceError(.badRequest, reader.problems.joined(separator: "\n"))
        }
        return reader.configuration
    }

    /// Whether `text` holds `part`, by the standard library alone: `String.contains` of a string resolves to
    /// Foundation's here (TOMLKit brings it in), which the release build, linked without full Foundation, cannot
    /// link ("undefined symbol … range(of:options:range:locale:)").
    static func holds(_ text: String, _ part: String) -> Bool {
        let text = Array(text.utf8)
        let part = Array(part.utf8)
        guard part.count <= text.count else { return false }
        return (0...(text.count - part.count)).contains { text[$0..<($0 + part.count)].elementsEqual(part) }
    }

    /// A TOML syntax error as every other problem of the file is said: `file: section.key: problem`, with where it
    /// is (`(line 3, column 8)`), the key being the one written on that line under the last `[section]` above it;
    /// `file: line 3, column 8: problem` on a line without a key (a table header). toml++'s own words ("Error while
    /// parsing string: unescaped control characters other than TAB (U+0009) are explicitly prohibited") become
    /// what they mean when it is clear: a string left open.
    static func syntaxProblem(
        _ description: String, line: Int, column: Int, in text: String, source: String
    ) -> String {
        var problem = description
        let parsing = "Error while parsing "
        if problem.hasPrefix(parsing) { problem.removeFirst(parsing.count) }
        if problem.hasPrefix("string: ") || problem.hasPrefix("literal string: "),
            holds(problem, "control characters") || holds(problem, "end-of-file")
        {
            problem = "unterminated string: its closing quote is missing"
        } else {
            problem = "not valid TOML (\(problem))"
        }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let place = "line \(line), column \(column)"
        guard (1...lines.count).contains(line) else { return "\(source): \(place): \(problem)" }
        let written = lines[line - 1].drop(while: \.isWhitespace)
        guard !written.hasPrefix("["), let equals = written.firstIndex(of: "=") else {
            return "\(source): \(place): \(problem)"
        }
        let key = written[..<equals].trimmingSpaces().filter { $0 != "\"" && $0 != "'" }
        let section = lines[..<(line - 1)].reversed().lazy.compactMap { text -> String? in
            let header = text.trimmingSpaces()
            guard header.hasPrefix("["), let end = header.firstIndex(of: "]") else { return nil }
            return header[..<end].filter { $0 != "[" }.trimmingSpaces()
        }.first
        return "\(source): \(section.map { "\($0).\(key)" } ?? key): \(problem) (\(place))"
    }

    private struct Reader {
        let source: String
        var configuration: DaemonConfiguration
        var problems: [String] = []
        /// The section being read (`queue`), while ``section(_:_:_:)`` reads one.
        var section: String?

        init(source: String, configuration: DaemonConfiguration) {
            self.source = source
            self.configuration = configuration
        }

        /// `file: section.key: message`, always: a key given bare inside a section (the typed readers get the key
        /// as the section's reader has it, `capacity`) is named with its section (`queue.capacity`).
        mutating func problem(_ key: String, _ message: String) {
            // A Character, not a string: Foundation's String.contains cannot be linked in the release build (holds).
            let name = key.contains(Character(".")) ? key : section.map { "\($0).\(key)" } ?? key
            problems.append("\(source): \(name): \(message)")
        }

        mutating func read(_ table: TOMLTable) {
            for key in table.keys {
                guard let value = table[key] else { continue }
                switch key {
                case "socket": string(key, value) { $0.socketPath = $1 }
                case "socket_mode":
                    // "0660" (a string of octal digits) or 0o660 (a TOML octal integer).
                    let mode =
                        value.string.flatMap { UInt32($0, radix: 8) } ?? value.int.flatMap { UInt32(exactly: $0) }
                    if let mode, mode <= 0o777 {
                        configuration.socketMode = mode
                    } else {
                        problem(key, "must be an octal mode such as \"0660\" or 0o660")
                    }
                case "socket_group": string(key, value) { $0.socketGroup = $1.isEmpty ? nil : $1 }
                case "device": string(key, value) { $0.device = $1 }
                case "state_dir": string(key, value) { $0.stateDirectory = $1 }
                case "voices":
                    string(key, value) { [source] configuration, path in
                        configuration.voicesDirectory = path
                        configuration.voicesOrigin = "voices in \(source)"
                    }
                case "corpus": string(key, value) { $0.corpusDirectory = $1.isEmpty ? nil : $1 }
                case "lang": string(key, value) { $0.language = $1 }
                case "log_level": string(key, value) { $0.logLevel = $1 }
                case "clock_sync":
                    if let sync = value.string.flatMap(ClockSync.init(text:)) {
                        configuration.clockSync = sync
                    } else {
                        problem(key, ClockSync.expected)
                    }
                case "queue": section(key, value) { reader, key, value in reader.queue(key, value) }
                case "audio": section(key, value) { reader, key, value in reader.audio(key, value) }
                case "access": section(key, value) { reader, key, value in reader.access(key, value) }
                case "limits": section(key, value) { reader, key, value in reader.limits(key, value) }
                case "metrics": section(key, value) { reader, key, value in reader.metrics(key, value) }
                case "reading": section(key, value) { reader, key, value in reader.reading(key, value) }
                case "keys": section(key, value) { reader, key, value in reader.keys(key, value) }
                case "summary": section(key, value) { reader, key, value in reader.summary(key, value) }
                default: problem(key, "unknown key")
                }
            }
        }

        mutating func queue(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "capacity": int(key, value) { $0.queueCapacity = $1 }
            case "payment_ttl": duration("queue.\(key)", value) { $0.paymentTTLSeconds = $1 }
            case "urgent_ttl": duration("queue.\(key)", value) { $0.urgentTTLSeconds = $1 }
            case "status_ttl": duration("queue.\(key)", value) { $0.statusTTLSeconds = $1 }
            case "dedup_window": duration("queue.\(key)", value) { $0.dedupWindowSeconds = $1 }
            case "history_retention": duration("queue.\(key)", value) { $0.historyRetentionSeconds = $1 }
            default: problem("queue.\(key)", "unknown key")
            }
        }

        mutating func audio(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "period_us": int(key, value) { $0.periodMicroseconds = $1 }
            case "periods": int(key, value) { $0.periods = $1 }
            case "lead_in_ms": int(key, value) { $0.leadInMs = $1 }
            case "pause_ms": int(key, value) { $0.pauseMs = $1 }
            case "keep_open": bool(key, value) { $0.keepDeviceOpen = $1 }
            case "allow_enforce": bool(key, value) { $0.audio.allowEnforce = $1 }
            case "end_ahead_ms": int(key, value) { $0.endAheadMs = $1 }
            case "tail_ms": int(key, value) { $0.tailMs = $1 }
            case "volume_threshold": threshold(key, value)
            case "stall_limit": duration("audio.\(key)", value) { $0.audioStallLimitSeconds = $1 }
            case "mixer":
                if value.string == "none" {
                    configuration.audio.mixer = nil
                } else {
                    element("audio.\(key)", value) { $0.audio.mixer = $1 }
                }
            case "mute_policy":
                string(key, value) { configuration, text in
                    if let policy = MutePolicy(rawValue: text) { configuration.audio.mutePolicy = policy }
                }
                if let text = value.string, MutePolicy(rawValue: text) == nil {
                    problem("audio.\(key)", "must be \"respect\" or \"override\"")
                }
            case "duck_controls":
                guard let array = value.array else {
                    return problem("audio.\(key)", "must be an array of \"CTL/ELEMENT\" strings")
                }
                var controls: [MixerElementAddress] = []
                for item in array { element("audio.\(key)", item) { _, address in controls.append(address) } }
                configuration.audio.duckControls = controls
            case "duck_db":
                if let number = value.double ?? value.int.map(Double.init) {
                    configuration.audio.duckDecibels = abs(number)
                } else {
                    problem("audio.\(key)", "must be a number of dB")
                }
            case "duck_ramp_ms": int(key, value) { $0.audio.duckRampMs = $1 }
            case "thread_nice": int(key, value) { $0.audio.threadNice = $1 }
            case "device_retry_max":
                duration("audio.\(key)", value) { $0.audio.recovery.maximumBackoffMs = Int(($1 * 1000).rounded()) }
            case "device_give_up":
                duration("audio.\(key)", value) { $0.audio.recovery.giveUpAfterMs = Int(($1 * 1000).rounded()) }
            default: problem("audio.\(key)", "unknown key")
            }
        }

        mutating func access(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "control_users": names(key, value) { $0.controlUsers = $1 }
            case "control_groups": names(key, value) { $0.controlGroups = $1 }
            case "submit_users": names(key, value) { $0.submitUsers = $1 }
            case "submit_groups": names(key, value) { $0.submitGroups = $1 }
            case "read_users": names(key, value) { $0.readUsers = $1 }
            case "read_groups": names(key, value) { $0.readGroups = $1 }
            case "read_anyone": bool(key, value) { $0.readAnyone = $1 }
            default: problem("access.\(key)", "unknown key")
            }
        }

        mutating func limits(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "max_request_bytes": int(key, value) { $0.maxRequestBytes = $1 }
            case "max_clients": int(key, value) { $0.maxClients = $1 }
            case "reserved_clients": int(key, value) { $0.reservedClients = $1 }
            case "idle_timeout": duration("limits.\(key)", value) { $0.idleTimeoutSeconds = $1 }
            case "request_timeout": duration("limits.\(key)", value) { $0.requestTimeoutSeconds = $1 }
            case "write_timeout": duration("limits.\(key)", value) { $0.writeTimeoutSeconds = $1 }
            case "shutdown_timeout": duration("limits.\(key)", value) { $0.shutdownTimeoutSeconds = $1 }
            case "subscriber_buffer": int(key, value) { $0.subscriberBuffer = $1 }
            default: problem("limits.\(key)", "unknown key")
            }
        }

        mutating func metrics(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "listen":
                guard let text = value.string else {
                    return problem("metrics.\(key)", "must be a string such as \"127.0.0.1:9464\" (\"\": off)")
                }
                guard !text.isEmpty else {
                    configuration.metricsListen = nil
                    return
                }
                do {
                    configuration.metricsListen = try ListenAddress(parsing: text)
                } catch {
                    problem("metrics.\(key)", error.message)
                }
            default: problem("metrics.\(key)", "unknown key")
            }
        }

        // MARK: The shop: reading defaults, keys, the daily summary

        mutating func reading(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "style", "liang":
                readingChoice("reading.\(key)", key, value) { $0.all = $1($0.all) }
            case "channels":
                guard let channels = value.table else {
                    return problem("reading.channels", "must be a table of channels ([reading.channels.alipay])")
                }
                for channel in channels.keys {
                    let name = "reading.channels.\(channel)"
                    guard let table = channels[channel]?.table else {
                        problem(name, "must be a table with style and/or liang")
                        continue
                    }
                    for inner in table.keys {
                        guard let innerValue = table[inner] else { continue }
                        guard inner == "style" || inner == "liang" else {
                            problem("\(name).\(inner)", "unknown key")
                            continue
                        }
                        readingChoice("\(name).\(inner)", inner, innerValue) { configuration, update in
                            configuration.channels[channel] = update(configuration.channels[channel] ?? .init())
                        }
                    }
                }
            default: problem("reading.\(key)", "unknown key")
            }
        }

        /// `style = "decimal"|"units"` or `liang = true|false` into a `ReadingDefaults.Choice`.
        mutating func readingChoice(
            _ name: String, _ key: String, _ value: any TOMLValueConvertible,
            _ set: (inout ReadingDefaults, (ReadingDefaults.Choice) -> ReadingDefaults.Choice) -> Void
        ) {
            if key == "style" {
                guard let text = value.string, let style = ReadingStyle(rawValue: text) else {
                    return problem(name, "must be \"decimal\" (十点五元) or \"units\" (十元五角)")
                }
                set(&configuration.reading) { var choice = $0; choice.style = style; return choice }
            } else {
                guard let flag = value.bool else { return problem(name, "must be true or false") }
                set(&configuration.reading) { var choice = $0; choice.liang = flag; return choice }
            }
        }

        mutating func keys(_ key: String, _ value: any TOMLValueConvertible) {
            let name = "keys.\(key)"
            if let action = KeyAction(rawValue: key) {
                // A key name ("KEY_VOLUMEUP", "volumeup"), its number, or "" for none.
                if let text = value.string {
                    if text.isEmpty {
                        configuration.keys.bindings[action] = nil
                    } else if let code = KeyCode(name: text) {
                        configuration.keys.bindings[action] = code
                    } else {
                        problem(
                            name,
                            "unknown key \"\(text)\" (a name from linux/input-event-codes.h such as KEY_VOLUMEUP, "
                                + "its number, or \"\" for none)")
                    }
                } else if let number = value.int, let code = KeyCode(code: number) {
                    configuration.keys.bindings[action] = code
                } else {
                    problem(name, "must be a key name such as \"KEY_VOLUMEUP\", a key number 1…767, or \"\"")
                }
                return
            }
            switch key {
            case "enabled": bool(name, value) { $0.keys.enabled = $1 }
            case "devices":
                guard let array = value.array else {
                    return problem(name, "must be an array of device paths and \"name:…\" entries")
                }
                var specs: [InputDeviceSpec] = []
                for item in array {
                    guard let text = item.string, let spec = InputDeviceSpec(parsing: text) else {
                        problem(
                            name, "\(item.string.map { "\"\($0)\"" } ?? "an entry") is neither a path (/dev/input/…) "
                                + "nor \"name:DEVICE NAME\"")
                        continue
                    }
                    specs.append(spec)
                }
                configuration.keys.devices = specs
            case "long_press": milliseconds(name, value) { $0.keys.bindings.longPressMs = $1 }
            case "repeat_delay": milliseconds(name, value) { $0.keys.bindings.repeatDelayMs = $1 }
            case "repeat_interval": milliseconds(name, value) { $0.keys.bindings.repeatIntervalMs = $1 }
            case "debounce": milliseconds(name, value) { $0.keys.bindings.debounceMs = $1 }
            case "volume_step": int(name, value) { $0.keys.volumeStep = $1 }
            default: problem(name, "unknown key")
            }
        }

        mutating func summary(_ key: String, _ value: any TOMLValueConvertible) {
            switch key {
            case "say_at":
                guard let text = value.string else { return problem("summary.say_at", "must be a string \"HH:MM\"") }
                if text.isEmpty {
                    configuration.summaryTime = nil
                } else if let time = DailyTime(parsing: text) {
                    configuration.summaryTime = time
                } else {
                    problem("summary.say_at", "must be a local time \"HH:MM\" (00:00…23:59), or \"\" for never")
                }
            default: problem("summary.\(key)", "unknown key")
            }
        }

        /// A duration setting (as `duration`, within its range) in whole milliseconds.
        mutating func milliseconds(
            _ key: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, Int) -> Void
        ) {
            duration(key, value) { configuration, seconds in set(&configuration, Int((seconds * 1000).rounded())) }
        }

        // MARK: Typed values

        mutating func section(
            _ key: String, _ value: any TOMLValueConvertible,
            _ each: (inout Reader, String, any TOMLValueConvertible) -> Void
        ) {
            guard let table = value.table else { return problem(key, "must be a table ([\(key)])") }
            section = key
            defer { section = nil }
            for inner in table.keys {
                guard let innerValue = table[inner] else { continue }
                each(&self, inner, innerValue)
            }
        }

        mutating func string(
            _ key: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, String) -> Void
        ) {
            guard let text = value.string else { return problem(key, "must be a string") }
            set(&configuration, text)
        }

        mutating func int(
            _ key: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, Int) -> Void
        ) {
            guard let number = value.int else { return problem(key, "must be an integer") }
            set(&configuration, number)
        }

        mutating func bool(
            _ key: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, Bool) -> Void
        ) {
            guard let flag = value.bool else { return problem(key, "must be true or false") }
            set(&configuration, flag)
        }

        /// The duration setting `name` (`"queue.dedup_window"`): seconds as a number, or a string with a unit
        /// ("500ms", "90s", "10m", "24h", "7d"), within its range (``DaemonConfiguration/durationRanges``). `set`
        /// runs only with a value in range, so it may turn it into milliseconds.
        mutating func duration(
            _ name: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, Double) -> Void
        ) {
            let written: Duration.Written
            if let number = value.int {
                written = .seconds(Double(number))
            } else if let number = value.double {
                written = .seconds(number)
            } else if let text = value.string {
                written = .text(text)
            } else {
                return problem(name, "must be a duration: seconds, or a string such as \"500ms\", \"90s\", \"24h\"")
            }
            do {
                set(&configuration, try Duration.seconds(written, within: DaemonConfiguration.durationRange(name)))
            } catch {
                problem(name, error.description)
            }
        }

        /// `volume_threshold`: a percentage (`60`, `"60%"`) or decibels (`"-20dB"`).
        mutating func threshold(_ key: String, _ value: any TOMLValueConvertible) {
            let level: VolumeLevel?
            if let number = value.int {
                level = .percent(Double(number))
            } else if let text = value.string {
                level = try? VolumeLevel(parsing: text)
            } else {
                level = nil
            }
            switch level {
            case let .percent(percent)? where percent == percent.rounded():
                configuration.volumeThreshold = Int(percent)
                configuration.audio.volumeThresholdDecibels = nil
            case let .decibels(decibels)?:
                configuration.volumeThreshold = nil
                configuration.audio.volumeThresholdDecibels = decibels
            default:
                problem("audio.\(key)", "must be a whole percentage (60, \"60%\") or decibels (\"-20dB\")")
            }
        }

        /// A mixer element, `"CTL/ELEMENT"` or `"CTL/ELEMENT,INDEX"` (`"hw:0/Master"`, `"pulse:music/Master"`).
        mutating func element(
            _ key: String, _ value: any TOMLValueConvertible,
            _ set: (inout DaemonConfiguration, MixerElementAddress) -> Void
        ) {
            guard let text = value.string, let address = try? MixerElementAddress(parsing: text) else {
                return problem(key, "must be a mixer element \"CTL/ELEMENT\" such as \"hw:0/Master\"")
            }
            set(&configuration, address)
        }

        /// User or group names or numbers: an array of strings and integers.
        mutating func names(
            _ key: String, _ value: any TOMLValueConvertible, _ set: (inout DaemonConfiguration, [String]) -> Void
        ) {
            guard let array = value.array else { return problem(key, "must be an array of names or numbers") }
            var names: [String] = []
            for element in array {
                if let text = element.string, !text.isEmpty {
                    names.append(text)
                } else if let number = element.int, number >= 0 {
                    names.append(String(number))
                } else {
                    return problem(key, "must be an array of names or numbers")
                }
            }
            set(&configuration, names)
        }
    }
}
