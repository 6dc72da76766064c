import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceServer

struct ConfigurationTests {
    let base = DaemonConfiguration(socketPath: "/run/a.sock", stateDirectory: "/var/lib/a", voicesDirectory: "/v")

    @Test func aFullFileSetsEveryKey() throws {
        let text = """
            socket = "/run/announce/x.sock"
            socket_mode = "0660"
            socket_group = "audio"
            device = "plughw:0"
            state_dir = "/srv/announce"
            voices = "/opt/voices"
            lang = "en"
            log_level = "debug"

            [queue]
            capacity = 200
            payment_ttl = "10m"
            urgent_ttl = 30
            status_ttl = "45s"
            dedup_window = "48h"
            history_retention = "7d"

            [audio]
            period_us = 5000
            periods = 3
            lead_in_ms = 150
            keep_open = true
            end_ahead_ms = 40
            tail_ms = 250
            volume_threshold = 60

            [access]
            control_users = ["root", 1000]
            control_groups = ["announce"]
            submit_users = ["nobody", 4242]
            submit_groups = ["4343"]
            read_users = ["nobody"]
            read_groups = []
            read_anyone = false

            [limits]
            max_request_bytes = 4096
            max_clients = 8
            reserved_clients = 3
            idle_timeout = "2m"
            request_timeout = "500ms"
            write_timeout = 3
            shutdown_timeout = 2.5
            """
        let c = try ConfigFile.apply(text, onto: base)
        #expect(c.socketPath == "/run/announce/x.sock")
        #expect(c.socketMode == 0o660)
        #expect(c.socketGroup == "audio")
        #expect(c.device == "plughw:0")
        #expect(c.stateDirectory == "/srv/announce")
        #expect(c.voicesDirectory == "/opt/voices")
        #expect(c.language == "en")
        #expect(c.logLevel == "debug")
        #expect(c.queueCapacity == 200)
        #expect(c.paymentTTLSeconds == 600)
        #expect(c.urgentTTLSeconds == 30)
        #expect(c.statusTTLSeconds == 45)
        #expect(c.dedupWindowSeconds == 48 * 3600)
        #expect(c.historyRetentionSeconds == 7 * 86_400)
        #expect(c.periodMicroseconds == 5000)
        #expect(c.periods == 3)
        #expect(c.leadInMs == 150)
        #expect(c.keepDeviceOpen)
        #expect(c.endAheadMs == 40)
        #expect(c.tailMs == 250)
        #expect(c.volumeThreshold == 60)
        #expect(c.controlUsers == ["root", "1000"])
        #expect(c.controlGroups == ["announce"])
        #expect(c.submitUsers == ["nobody", "4242"])
        #expect(c.submitGroups == ["4343"])
        #expect(c.readUsers == ["nobody"])
        #expect(c.readGroups == [])
        #expect(!c.readAnyone)
        #expect(c.maxRequestBytes == 4096)
        #expect(c.maxClients == 8)
        #expect(c.reservedClients == 3 && c.effectiveReservedClients == 3)
        #expect(c.idleTimeoutSeconds == 120)
        #expect(c.requestTimeoutSeconds == 0.5)
        #expect(c.writeTimeoutSeconds == 3)
        #expect(c.shutdownTimeoutSeconds == 2.5)
        #expect(c.problems().isEmpty)
    }

    @Test func anEmptyFileChangesNothing() throws {
        #expect(try ConfigFile.apply("# nothing\n", onto: base) == base)
    }

    /// `--config /dev/null` is "no settings", as for other daemons; a file that cannot be read or is not text
    /// says which of the two, and why (it used to say "cannot be read as UTF-8 text" for all three); a FIFO is
    /// refused at once instead of holding the start (or a reload) until someone writes to it.
    @Test func theFileIsReadAsCatWouldAndItsProblemsAreNamed() throws {
        #expect(try ConfigFile.load(path: "/dev/null", required: true, onto: base) == base)
        let folder = try Paths.temporaryDirectory("config-read")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        func message(_ path: String) -> String {
            do {
                _ = try ConfigFile.load(path: path, required: true, onto: base)
                return "loaded"
            } catch { return error.message }
        }
        #expect(message(folder) == "config file \(folder) cannot be read (Is a directory)")
        let fifo = folder + "/fifo.toml"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(message(fifo) == "config file \(fifo) cannot be read (a FIFO, not a file)")  // not a hang
        let latin1 = folder + "/latin1.toml"
        try Data("lang = \"zh\" # caf".utf8 + [0xE9]).write(to: URL(fileURLWithPath: latin1))  // ISO 8859-1 é
        #expect(message(latin1) == "config file \(latin1) is not UTF-8 text")
    }

    /// The problem `text` has as the file t.toml, or "" if none.
    func message(_ text: String) -> String {
        do {
            _ = try ConfigFile.apply(text, source: "t.toml", onto: base)
            return ""
        } catch {
            return error.message
        }
    }

    @Test func mistakesAreNamedNotIgnored() {
        #expect(message("sockett = \"/x\"") == "t.toml: sockett: unknown key")
        #expect(message("[queue]\ncapasity = 3") == "t.toml: queue.capasity: unknown key")
        // Always `file: section.key: problem`, whichever reader found it (the typed ones get the bare key).
        #expect(message("[queue]\ncapacity = \"lots\"") == "t.toml: queue.capacity: must be an integer")
        #expect(message("[audio]\nkeep_open = 1") == "t.toml: audio.keep_open: must be true or false")
        #expect(message("[audio]\nmute_policy = 1") == "t.toml: audio.mute_policy: must be a string")
        #expect(message("[audio]\nvolume_threshold = \"loud\"").hasPrefix("t.toml: audio.volume_threshold: must be"))
        #expect(message("[limits]\nmax_clients = 1.5") == "t.toml: limits.max_clients: must be an integer")
        #expect(message("socket_mode = \"rw\"").hasPrefix("t.toml: socket_mode: must be an octal mode"))
        #expect(
            message("[limits]\nidle_timeout = \"soon\"").hasPrefix("t.toml: limits.idle_timeout: must be a duration"))
        #expect(
            message("[access]\ncontrol_users = \"root\"")
                == "t.toml: access.control_users: must be an array of names or numbers")
        #expect(message("queue = 3") == "t.toml: queue: must be a table ([queue])")
    }

    /// A TOML syntax error is said the same way, with where it is; toml++'s own words for a string left open
    /// ("unescaped control characters other than TAB …") become what they mean.
    @Test func syntaxErrorsNameTheKeyAndTheLine() {
        #expect(
            message("device = \"default\"\n[audio]\nmixer = \"default/Master\n")
                == "t.toml: audio.mixer: unterminated string: its closing quote is missing (line 3, column 24)")
        #expect(
            message("[queue]\n  'capacity' = 'x")
                == "t.toml: queue.capacity: unterminated string: its closing quote is missing (line 2, column 18)")
        let missing = message("device = ")
        #expect(
            missing.hasPrefix("t.toml: device: not valid TOML (") && missing.hasSuffix("(line 1, column 10)"), "\(missing)")
        let header = message("[queue\ncapacity = 3")
        #expect(header.hasPrefix("t.toml: line 1, column 7: not valid TOML (table header: "), "\(header)")
    }

    /// A value out of range is named with the file that set it; one a flag set, by its key (the flag's help names
    /// the key).
    @Test func aValueOutOfRangeIsNamedWithTheFileThatSetIt() throws {
        let directory = try Paths.temporaryDirectory("cfg-range")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = "\(directory)/announced.toml"
        try "[audio]\nvolume_threshold = 150\n".write(toFile: file, atomically: true, encoding: .utf8)
        func message(_ overrides: ConfigurationOverrides) -> String {
            do {
                _ = try DaemonConfiguration.resolve(configFile: file, overrides: overrides)
                return ""
            } catch {
                return error.message
            }
        }
        #expect(message(ConfigurationOverrides()) == "\(file): audio.volume_threshold: must be 0…100")
        var flags = ConfigurationOverrides()
        flags.volumeThreshold = .percent(60)
        flags.queueCapacity = 0
        #expect(message(flags) == "queue.capacity: must be 1…100000", "the file's value overridden, the flag's named")
    }

    @Test func rangesAreChecked() {
        var c = base
        c.queueCapacity = 0
        c.volumeThreshold = 101
        c.logLevel = "loud"
        c.idleTimeoutSeconds = 0
        c.endAheadMs = 10
        c.tailMs = -1
        let problems = c.problems().joined(separator: "\n")
        #expect(problems.contains("audio.end_ahead_ms: must be 20…1000"))
        #expect(problems.contains("audio.tail_ms: must be 0…5000"))
        #expect(problems.contains("queue.capacity"))
        #expect(problems.contains("audio.volume_threshold"))
        #expect(problems.contains("log_level"))
        #expect(problems.contains("limits.idle_timeout"))
    }

    /// Connections kept for peers that may speak (issue 16, item 9): a quarter of max_clients unless set, and
    /// never all of them (readers keep at least one).
    @Test func reservedClientsDefaultToAQuarterAndLeaveReadersASlot() {
        var c = base
        #expect(c.effectiveReservedClients == 16)
        c.maxClients = 3
        #expect(c.effectiveReservedClients == 0)
        c.reservedClients = 3
        #expect(c.problems() == ["limits.reserved_clients: must be 0 … max_clients − 1 (2), so that readers keep a slot"])
        c.reservedClients = 2
        #expect(c.problems().isEmpty)
        #expect(c.summary.contains("reserved_clients = 2\n"))
        #expect(base.summary.contains("reserved_clients = 16 (a quarter of max_clients)"))
    }

    @Test func flagsWinOverTheFile() throws {
        let directory = try Paths.temporaryDirectory("cfg")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = "\(directory)/announced.toml"
        try "device = \"plughw:0\"\n[queue]\ncapacity = 5\n".write(toFile: file, atomically: true, encoding: .utf8)
        var overrides = ConfigurationOverrides()
        overrides.queueCapacity = 9
        let c = try DaemonConfiguration.resolve(configFile: file, overrides: overrides)
        #expect(c.device == "plughw:0")
        #expect(c.queueCapacity == 9)
        #expect(throws: AnnounceError.self) {
            try DaemonConfiguration.resolve(
                configFile: "\(directory)/missing.toml", overrides: ConfigurationOverrides())
        }
    }

    /// Every duration setting has a range, checked as the file is read: a huge value is a configuration error
    /// naming the key, not an integer overflow (SIGILL) when it becomes milliseconds (issue 16, item 8).
    @Test(arguments: DaemonConfiguration.durationRanges.keys.sorted())
    func aDurationOutOfItsRangeIsAnErrorNamingTheKey(key: String) throws {
        let (section, name) = (key.split(separator: ".")[0], key.split(separator: ".")[1])
        let range = DaemonConfiguration.durationRange(key)
        for written in ["\"1e300s\"", "9223372036854775807", "\"\(Int(range.upperBound) + 1)s\""] {
            let text = "[\(section)]\n\(name) = \(written)\n"
            let refused = #expect(throws: AnnounceError.self, "\(key) = \(written)") {
                try ConfigFile.apply(text, source: "t.toml", onto: base)
            }
            let expected = "t.toml: \(key): must be \(Duration.describe(range: range)), not"
            #expect(refused?.message.contains(expected) == true, "\(String(describing: refused))")
        }
        // The bounds themselves are fine.
        for bound in [range.lowerBound, range.upperBound] {
            let c = try ConfigFile.apply("[\(section)]\n\(name) = \(bound)\n", onto: base)
            #expect(c.problems().isEmpty, "\(key) = \(bound): \(c.problems())")
        }
    }

    /// The same ranges for a configuration built in code (or by flags): `problems()` names each one.
    @Test func problemsNameEveryDurationOutOfRange() {
        var c = base
        c.dedupWindowSeconds = 1e300
        c.historyRetentionSeconds = 1e300
        c.paymentTTLSeconds = 8 * 86_400
        c.audioStallLimitSeconds = 0
        c.shutdownTimeoutSeconds = 1e18
        let problems = c.problems()
        #expect(problems.contains("queue.dedup_window: must be 0 … 366d, not 1e+300s"), "\(problems)")
        #expect(problems.contains("queue.history_retention: must be 0 … 3660d, not 1e+300s"), "\(problems)")
        #expect(problems.contains("queue.payment_ttl: must be 0 … 7d, not 8d"), "\(problems)")
        #expect(problems.contains("audio.stall_limit: must be 1ms … 1h, not 0"), "\(problems)")
        #expect(problems.contains("limits.shutdown_timeout: must be 1ms … 1d, not 1e+18s"), "\(problems)")
        #expect(problems.count == 5, "\(problems)")
    }

    @Test func durations() throws {
        #expect(Duration.parseSeconds("90") == 90)
        #expect(Duration.parseSeconds("0.5") == 0.5)
        #expect(Duration.parseSeconds("500ms") == 0.5)
        #expect(Duration.parseSeconds("10m") == 600)
        #expect(Duration.parseSeconds("24h") == 86_400)
        #expect(Duration.parseSeconds("7d") == 604_800)
        #expect(Duration.parseSeconds("-1s") == nil)
        #expect(Duration.parseSeconds("soon") == nil)
        #expect(Duration.parseSeconds(" 10 m ") == 600)
        #expect(Duration.parseSeconds("1e400s") == nil, "not finite")
        #expect(Duration.parseSeconds("1e308d") == nil, "not finite once in seconds")
        #expect(Duration.parseSeconds("nan") == nil)
        #expect(throws: Duration.Problem.self) { try Duration.seconds(.seconds(.infinity), within: 0...1) }
        #expect(try Duration.seconds(.text("500ms"), within: 0...1) == 0.5)
        #expect(Duration.describe(86_400) == "\"1d\"")
        #expect(Duration.describe(90) == "\"90s\"")
        #expect(Duration.describe(0.25) == "\"250ms\"")
        #expect(Duration.describe(0) == "0")
    }
}

struct AccessPolicyTests {
    let policy = AccessPolicy(
        controlUIDs: [0, 1000], controlGIDs: [500], readUIDs: [2000], readGIDs: [600], readAnyone: false)

    @Test func controlByUserOrAnyOfItsGroups() {
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 1000, gid: 1000)) == .control)
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 500)) == .control)
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000, groups: [20, 500])) == .control)
    }

    /// `submit` (say, prompt, text) sits between read and control: by user or by any of its groups, and control
    /// wins where both are given (issue 16, item 13).
    @Test func submitByUserOrAnyOfItsGroupsAndControlWins() {
        var both = policy
        both.submitUIDs = [4000, 1000]
        both.submitGIDs = [700]
        #expect(both.access(for: PeerCredentials(pid: 1, uid: 4000, gid: 4000)) == .submit)
        #expect(both.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000, groups: [20, 700])) == .submit)
        #expect(both.access(for: PeerCredentials(pid: 1, uid: 1000, gid: 1000)) == .control)
        #expect(both.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000, groups: [500, 700])) == .control)
        #expect(both.access(for: PeerCredentials(pid: 1, uid: 2000, gid: 2000)) == .read)
    }

    @Test func readIsNarrowerUnlessAnyoneMayRead() {
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 2000, gid: 2000)) == .read)
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000, groups: [600])) == .read)
        #expect(policy.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000, groups: [601])) == .none)
        var open = policy
        open.readAnyone = true
        #expect(open.access(for: PeerCredentials(pid: 1, uid: 3000, gid: 3000)) == .read)
    }

    @Test func rootAndTheDaemonsOwnUserAlwaysHaveControl() throws {
        var configuration = DaemonConfiguration(socketPath: "/s", stateDirectory: "/t", voicesDirectory: "/v")
        configuration.controlUsers = []
        configuration.readAnyone = false
        let resolved = try AccessPolicy(configuration: configuration, daemonUID: 4242)
        #expect(resolved.access(for: PeerCredentials(pid: 1, uid: 0, gid: 0)) == .control)
        #expect(resolved.access(for: PeerCredentials(pid: 1, uid: 4242, gid: 4242)) == .control)
        #expect(resolved.access(for: PeerCredentials(pid: 1, uid: 65534, gid: 65534)) == .none)
    }

    @Test func namesResolveThroughTheSystemDatabase() throws {
        #expect(AccessPolicy.userID("root") == 0)
        #expect(AccessPolicy.groupID("root") == 0)
        #expect(AccessPolicy.userID("1234") == 1234)
        #expect(AccessPolicy.userID("no-such-user-here") == nil)
        var configuration = DaemonConfiguration(socketPath: "/s", stateDirectory: "/t", voicesDirectory: "/v")
        configuration.controlGroups = ["no-such-group-here"]
        #expect { try AccessPolicy(configuration: configuration) } throws: {
            ($0 as? AnnounceError)?.message.contains("no group \"no-such-group-here\"") == true
        }
    }

    @Test func peerGroupsAreReadUpToTheZeroPadding() {
        var list = PeerCredentials.GroupList()
        withUnsafeMutableBytes(of: &list.gids) { raw in
            let gids = raw.bindMemory(to: UInt32.self)
            gids[0] = 4
            gids[1] = 24
            gids[2] = 1000
        }
        #expect(list.values == [4, 24, 1000])
        var withRoot = PeerCredentials.GroupList()
        withUnsafeMutableBytes(of: &withRoot.gids) { raw in
            let gids = raw.bindMemory(to: UInt32.self)
            gids[1] = 27
        }
        #expect(withRoot.values == [27], "group 0 cannot be told from padding and never grants access by itself")
        #expect(PeerCredentials.GroupList().values == [])
    }
}

struct VoiceLibraryTests {
    @Test func everyPackIsLoadedAndPickedByLanguage() throws {
        let library = try VoicePackLoader.loadLibrary(directory: Paths.voices, defaultLanguage: "zh")
        #expect(library.languages.sorted() == ["en", "zh"])
        #expect(try library.pack(language: nil).language == "zh")
        #expect(try library.pack(language: "en").language == "en")
        #expect(try library.pack(language: "EN-gb").language == "en", "same primary language")
        #expect(try library.pack(language: "zh-CN").language == "zh")
        #expect { try library.pack(language: "fr") } throws: { ($0 as? AnnounceError)?.code == .unknownLanguage }
        #expect { try VoicePackLoader.loadLibrary(directory: Paths.voices, defaultLanguage: "fr") } throws: {
            ($0 as? AnnounceError)?.code == .unknownLanguage
        }
    }

    @Test func aSinglePackFolderIsALibraryOfOne() throws {
        let library = try VoicePackLoader.loadLibrary(directory: "\(Paths.voices)/en", defaultLanguage: "en")
        #expect(library.languages == ["en"])
    }
}

/// docs/configuration.md stays true to the code: its full example is the defaults, and every example parses.
struct ConfigurationDocumentTests {
    func tomlBlocks() throws -> [String] {
        let text = try String(contentsOfFile: "\(Paths.root)/docs/configuration.md", encoding: .utf8)
        return text.components(separatedBy: "```toml\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
    }

    @Test func theDocumentedFileIsTheDefaults() throws {
        let blocks = try tomlBlocks()
        #expect(blocks.count == 3)
        let defaults = DaemonConfiguration.defaults()
        var documented = try ConfigFile.apply(blocks[0], source: "docs/configuration.md", onto: defaults)
        // The two paths that differ for a user are documented with root's value; the voice packs with the installed
        // place ($ANNOUNCE_VOICES, as the tests run, or another installed place may be the default here).
        documented.socketPath = defaults.socketPath
        documented.stateDirectory = defaults.stateDirectory
        #expect(documented.voicesDirectory == VoicePackSearch.systemFolder)
        documented.voicesDirectory = defaults.voicesDirectory
        documented.voicesOrigin = defaults.voicesOrigin
        #expect(documented == defaults)
    }

    /// The table of duration ranges is the code's.
    @Test func theDocumentedDurationRangesAreTheCodes() throws {
        let text = try String(contentsOfFile: "\(Paths.root)/docs/configuration.md", encoding: .utf8)
        var documented: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `queue.") || line.hasPrefix("| `audio.")
            || line.hasPrefix("| `limits.") || line.hasPrefix("| `keys.")
        {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2 else { continue }
            for key in cells[0].split(separator: ",") {
                documented[key.trimmingCharacters(in: CharacterSet(charactersIn: " `"))] = cells[1]
            }
        }
        let code = DaemonConfiguration.durationRanges.mapValues { Duration.describe(range: $0) }
        #expect(documented == code)
    }

    /// The example installed as /etc/announce/announced.toml gives the push listener the submit role, not control.
    @Test func theShippedExampleMakesThePushListenerASubmitUser() throws {
        let text = try String(contentsOfFile: "\(Paths.root)/examples/announced.toml", encoding: .utf8)
        let c = try ConfigFile.apply(text, source: "examples/announced.toml", onto: DaemonConfiguration.defaults())
        #expect(c.submitUsers == ["announce-push"] && c.controlUsers.isEmpty && c.controlGroups.isEmpty)
        #expect(c.problems().isEmpty, "\(c.problems())")
    }

    @Test func theShopExampleParses() throws {
        let c = try ConfigFile.apply(try tomlBlocks()[1], onto: DaemonConfiguration.defaults())
        #expect(c.problems().isEmpty, "\(c.problems())")
        #expect(c.keys.enabled && c.keys.devices.count == 2 && c.summaryTime?.description == "21:30")
        #expect(c.reading.all.liang == true && c.reading.channels["alipay"]?.style == .units)
    }

    @Test func theLockedDownExampleParses() throws {
        let c = try ConfigFile.apply(try tomlBlocks()[2], onto: DaemonConfiguration.defaults())
        #expect(c.socketMode == 0o660 && c.socketGroup == "announce" && !c.readAnyone)
        #expect(c.submitUsers == ["announce-push"] && c.controlUsers == [] && c.controlGroups == ["announce"])
    }
}

/// Admission of connections: readers never take the slots kept for peers that may speak (issue 16, item 9).
struct ConnectionSlotsTests {
    @Test func readersNeverTakeTheSlotsKeptForSpeakers() throws {
        let slots = ConnectionSlots()
        for held in 1...6 { #expect(try slots.admit(speaker: false, maximum: 8, reserved: 2) == held) }
        #expect { try slots.admit(speaker: false, maximum: 8, reserved: 2) } throws: { error in
            guard case .readersFull(8, 2)? = error as? ConnectionSlots.Refusal else { return false }
            return true
        }
        #expect(try slots.admit(speaker: true, maximum: 8, reserved: 2) == 7)
        #expect(try slots.admit(speaker: true, maximum: 8, reserved: 2) == 8)
        #expect { try slots.admit(speaker: true, maximum: 8, reserved: 2) } throws: { error in
            guard case .full(8)? = error as? ConnectionSlots.Refusal else { return false }
            return true
        }
        // A speaker that leaves frees a slot for a speaker only; a reader that leaves, for anyone.
        #expect(slots.release(speaker: true) == 7)
        #expect(throws: ConnectionSlots.Refusal.self) { try slots.admit(speaker: false, maximum: 8, reserved: 2) }
        #expect(slots.release(speaker: false) == 6)
        #expect(try slots.admit(speaker: false, maximum: 8, reserved: 2) == 7)
        // Refusals took nothing.
        #expect(try slots.admit(speaker: true, maximum: 8, reserved: 2) == 8)
    }
}
