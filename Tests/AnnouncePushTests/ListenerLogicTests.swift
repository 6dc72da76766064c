import AnnounceClock
import AnnounceCore
import AnnounceMQTT
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// Configuration, backoff and status prompt throttling: pure logic on injected clocks.
struct ListenerLogicTests {
    /// The shipped example, with real keys put in, is valid and means what its comments say. As shipped (placeholder
    /// keys) it is refused, so an unconfigured terminal does not start with made-up keys.
    @Test func theExampleConfigurationIsValidAndSaysWhatItShows() throws {
        let example = try String(contentsOfFile: "\(Paths.root)/examples/push.toml", encoding: .utf8)
        let directory = try Paths.temporaryDirectory("conf")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "s3cret\n".write(toFile: "\(directory)/push-broker.pass", atomically: true, encoding: .utf8)

        let shipped = #expect(throws: AnnounceError.self) {
            try PushConfiguration.parse(example, source: "push.toml", directory: directory)
        }
        #expect(shipped?.message.contains("keys") == true, "\(String(describing: shipped))")

        let text = example.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            if line.hasPrefix("k2026a = ") { return "k2026a = \"hex:00112233445566778899aabbccddeeff\"" }
            if line.hasPrefix("k2026b = ") {
                return "k2026b = \"base64:\(Data(repeating: 1, count: 32).base64EncodedString())\""
            }
            return String(line)
        }.joined(separator: "\n")
        let c = try PushConfiguration.parse(text, source: "push.toml", directory: directory)
        #expect(c.device == "T1000123")
        #expect(c.broker == MQTTEndpoint(host: "mqtt.example.com", port: 8883, tls: true))
        #expect(c.clientID == "announce-T1000123")
        #expect(c.username == "T1000123")
        #expect(c.password == "s3cret")
        #expect(c.topics == ["announce/T1000123/payments"])
        #expect(c.cleanSession == false)
        #expect(c.keepaliveSeconds == 30)
        #expect(c.tls.caFile == "\(directory)/push-ca.pem")
        #expect(c.keyring.ids == ["k2026a", "k2026b"])
        #expect(c.corpusEnabled && c.corpusDirectory == "\(c.stateDirectory)/corpus")
        #expect(c.corpusRules == CorpusRules())
        #expect(c.alibaba == nil)
        #expect(c.maximumAgeSeconds == 600)
        #expect(c.maximumFutureSeconds == 60)
        #expect(c.holdSeconds == 5)
        #expect(c.reconnect == Backoff.Policy(initialSeconds: 1, maximumSeconds: 60))
        #expect(c.takeover.backoff == Backoff.Policy(initialSeconds: 60, maximumSeconds: 1800))
        #expect(c.clockSync == .kernel && c.clockWaitSeconds == 600)
        #expect(c.socketPath == "/run/announce/announce.sock")
        #expect(c.stateDirectory == "/var/lib/announce-push")
        #expect(c.statusEnabled && c.statusRefreshSeconds == 300 && c.statusTopic == "announce/T1000123/status")
        #expect(c.receiptsEnabled && c.receiptTopic == "announce/T1000123/receipts")
        #expect(c.effectiveReceiptKeyID == "k2026b")
    }

    @Test func minimalConfigurationGetsTheDocumentedDefaults() throws {
        let c = try PushConfiguration.parse(
            """
            device = "T9"
            [broker]
            url = "mqtt://127.0.0.1:1883"
            [keys]
            k1 = "hex:00112233445566778899aabbccddeeff"
            """)
        #expect(c.topics == ["announce/T9/payments"])
        #expect(c.clientID == "announce-T9")
        #expect(c.cleanSession == false)
        #expect(c.holdSeconds == 5)
        #expect(c.prompts.lostPrompt == "network-lost")
        #expect(c.prompts.restoredPrompt == "network-restored")
        #expect(c.prompts.connectedPrompt == "server-connected")
    }

    /// Every duration has a range, checked as the file is read: a huge `max_age` is an error naming the key, not an
    /// integer overflow (SIGILL) when the verifier turns it into milliseconds (issue 16, item 8).
    @Test(arguments: PushConfiguration.durationRanges.keys.sorted())
    func aDurationOutOfItsRangeIsAnErrorNamingTheKey(key: String) {
        let (section, name) = (key.split(separator: ".")[0], key.split(separator: ".")[1])
        let range = PushConfiguration.durationRanges[key]!
        let keys = "[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n"
        for written in ["\"1e300s\"", "9223372036854775807", "\"\(Int(range.upperBound) + 1)s\""] {
            var text = "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\n"
            let setting = "\(name) = \(written)\n"
            text += section == "broker" ? setting + keys : "\(keys)[\(section)]\n" + setting
            let refused = #expect(throws: AnnounceError.self, "\(key) = \(written)") {
                try PushConfiguration.parse(text, source: "push.toml")
            }
            let expected = "push.toml: \(key): must be \(Duration.describe(range: range)), not"
            #expect(refused?.message.contains(expected) == true, "\(String(describing: refused))")
        }
    }

    /// docs/push.md's table of duration ranges is the code's.
    @Test func theDocumentedDurationRangesAreTheCodes() throws {
        let text = try String(contentsOfFile: "\(Paths.root)/docs/push.md", encoding: .utf8)
        let table = try #require(text.components(separatedBy: "| duration | range |").dropFirst().first)
        var documented: [String: String] = [:]
        for line in table.split(separator: "\n").dropFirst() {
            guard line.hasPrefix("| `") else { break }
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            for key in cells[0].split(separator: ",") {
                documented[key.trimmingCharacters(in: CharacterSet(charactersIn: " `"))] = cells[1]
            }
        }
        #expect(documented == PushConfiguration.durationRanges.mapValues { Duration.describe(range: $0) })
    }

    @Test func configurationMistakesNameTheKey() {
        let base = "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\n"
        let key = "[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n"
        let cases: [(String, String)] = [
            (base + key + "[broker.tls]\nca_file = \"x\"\n", "use mqtts://"),
            (base + "keepalive = \"soon\"\n" + key, "broker.keepalive"),
            (base + "colour = \"red\"\n" + key, "broker.colour: unknown key"),
            (base, "keys: at least one key"),
            ("[broker]\nurl = \"mqtt://h\"\n" + key, "device: is required"),
            ("device = \"T9\"\n[broker]\nurl = \"http://h\"\n" + key, "broker.url"),
            (base + key.replacingOccurrences(of: "0011", with: ""), "bytes; at least 16"),
            (base + key + "[daemon]\nhold = 60\n", "daemon.hold: daemon.hold + daemon.timeout must be shorter than broker.keepalive"),
            (base + "password = \"x\"\n" + key, "broker.password: needs broker.username"),
            (base + "keepalive = \"8s\"\n" + key, "daemon.hold + daemon.timeout must be shorter"),
            ("device = 'T9'\n[broker\n", "line"),
            (base + key + "[corpus]\nmax_clips = 0\n", "corpus.max_clips: must be a whole number 1…10000"),
            (base + key + "[corpus]\nmaximum = 3\n", "corpus.maximum: unknown key"),
            (base + key + "[corpus]\ntimeout = \"2h\"\n", "corpus.timeout"),
            (base + key + "[receipts]\nenabled = false\n", "corpus.enabled: corpus pushes need receipts.enabled"),
            (base + "[alibaba]\nproduct_key = \"a1\"\n", "alibaba: product_key, device_name and device_secret"),
        ]
        for (text, expected) in cases {
            let error = #expect(throws: AnnounceError.self, "\(expected)") { try PushConfiguration.parse(text) }
            #expect(
                error?.message.contains(expected) == true, "\(String(describing: error)) should mention \(expected)")
        }
    }

    /// A file that cannot be read says why; one that is not UTF-8 says that (announced's reader, shared).
    @Test func anUnreadableOrNonTextFileSaysWhich() throws {
        let folder = try Paths.temporaryDirectory("push-config-read")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let binary = folder + "/push.toml"
        try Data([0x64, 0x65, 0x76, 0x69, 0x63, 0x65, 0x20, 0x3D, 0x20, 0xFF]).write(to: URL(fileURLWithPath: binary))
        for (path, expected) in [
            (folder, "config file \(folder) cannot be read (Is a directory)"),
            (folder + "/absent.toml", "config file \(folder)/absent.toml cannot be read (No such file or directory)"),
            (binary, "config file \(binary) is not UTF-8 text"),
        ] {
            let error = #expect(throws: AnnounceError.self) { try PushConfiguration.load(path: path) }
            #expect(error?.message == expected)
        }
    }

    @Test func backoffDoublesUpToTheCapAndResets() {
        var backoff = Backoff(Backoff.Policy(initialSeconds: 1, maximumSeconds: 60))
        let ceilings = (0..<9).map { _ in backoff.next(random: 1) }
        #expect(ceilings == [1, 2, 4, 8, 16, 32, 60, 60, 60])
        var jittered = Backoff(Backoff.Policy(initialSeconds: 1, maximumSeconds: 60))
        #expect(jittered.next(random: 0) == 0.5)
        #expect(jittered.next(random: 0) == 1)
        backoff.reset()
        #expect(backoff.next(random: 1) == 1)
        // Many failures never overflow.
        for _ in 0..<200 { _ = backoff.next() }
        #expect(backoff.next(random: 1) == 60)
    }

    /// Runs events at times (seconds) and polls every 0.5 s, returning (time, prompt) spoken. `waking`: instead, wakes
    /// only at the events and at ``StatusPrompter/nextDue(now:)``, as the listener waits.
    func simulate(
        _ policy: StatusPrompter.Policy = .init(), until end: Double, events: [(Double, Bool)], waking: Bool = false
    ) -> [(Double, String)] {
        var prompter = StatusPrompter(policy: policy, now: 0)
        var spoken: [(Double, String)] = []
        var pending = events.sorted { $0.0 < $1.0 }
        var t = 0.0
        while t <= end {
            while let event = pending.first, event.0 <= t {
                pending.removeFirst()
                if event.1 { prompter.connected(now: event.0) } else { prompter.disconnected(now: event.0) }
            }
            while let prompt = prompter.poll(now: t) { spoken.append((t, prompt)) }
            guard waking else {
                t += 0.5
                continue
            }
            let due = prompter.nextDue(now: t)
            #expect(due.map { $0 > t } ?? true, "a prompt still due at \(t) after polling")
            guard let next = [due, pending.first?.0].compactMap({ $0 }).min() else { break }
            t = next
        }
        return spoken
    }

    /// Waking only at the prompter's next due time speaks what polling speaks, when polling does.
    @Test func wakingAtTheNextDueTimeSpeaksWhatPollingSpeaks() {
        var flapping: [(Double, Bool)] = [(0, true)]
        for start in stride(from: 10.0, to: 300, by: 15) { flapping += [(start, false), (start + 12, true)] }
        var disabled = StatusPrompter.Policy()
        disabled.enabled = false
        let runs: [(StatusPrompter.Policy, Double, [(Double, Bool)])] = [
            (.init(), 100, [(1, true)]),
            (.init(), 100, [(1, true), (20, false), (25, true), (40, false), (49, true)]),
            (.init(), 100, [(1, true), (20, false), (45, true)]),
            (.init(), 400, flapping),
            (.init(), 300, [(200, true)]),
            (.init(), 300, []),
            (disabled, 100, [(1, true), (20, false), (45, true)]),
        ]
        for (policy, end, events) in runs {
            let polled = simulate(policy, until: end, events: events)
            let woken = simulate(policy, until: end, events: events, waking: true)
            #expect(woken.map(\.0) == polled.map(\.0) && woken.map(\.1) == polled.map(\.1), "\(events)")
        }
        var prompter = StatusPrompter(policy: .init(), now: 0)
        #expect(prompter.nextDue(now: 3) == 10, "network-lost 10 s after the start without a connection")
        prompter.connected(now: 4)
        #expect(prompter.nextDue(now: 4) == 4, "server-connected at once")
    }

    @Test func firstConnectionSaysServerConnectedOnce() {
        let spoken = simulate(until: 100, events: [(1, true)])
        #expect(spoken.map(\.1) == ["server-connected"])
    }

    @Test func shortBlipsSayNothingAndARealOutageSaysLostThenRestored() {
        let blips = simulate(until: 100, events: [(1, true), (20, false), (25, true), (40, false), (49, true)])
        #expect(blips.map(\.1) == ["server-connected"])
        let outage = simulate(until: 100, events: [(1, true), (20, false), (45, true)])
        #expect(outage.map(\.1) == ["server-connected", "network-lost", "network-restored"])
        #expect(outage[1].0 == 30)  // lost_after (10 s) after the drop
    }

    /// A link flapping every 15 s for 5 minutes: at most one lost/restored pair per minimum interval (60 s).
    @Test func flappingLinkDoesNotChatter() {
        var events: [(Double, Bool)] = [(0, true)]
        var t = 10.0
        while t < 300 {
            events.append((t, false))  // down 12 s (long enough to count as lost) …
            events.append((t + 12, true))  // … up 3 s
            t += 15
        }
        let spoken = simulate(until: 400, events: events)
        let lost = spoken.filter { $0.1 == "network-lost" }.map(\.0)
        #expect(lost.count <= 6, "\(spoken)")
        for (a, b) in zip(lost, lost.dropFirst()) { #expect(b - a >= 60) }
        // Lost and restored alternate, and the link ended up: the last word is "restored".
        let words = spoken.dropFirst().map(\.1)
        for (index, word) in words.enumerated() {
            #expect(word == (index.isMultiple(of: 2) ? "network-lost" : "network-restored"))
        }
        #expect(spoken.last?.1 == "network-restored")
    }

    @Test func neverConnectingSaysLostOnceAndConnectingLaterSaysServerConnected() {
        let spoken = simulate(until: 300, events: [(200, true)])
        #expect(spoken.map(\.1) == ["network-lost", "server-connected"])
    }

    @Test func disabledPromptsSayNothing() {
        var policy = StatusPrompter.Policy()
        policy.enabled = false
        #expect(simulate(policy, until: 100, events: [(1, true), (20, false), (45, true)]).isEmpty)
    }

    // MARK: Takeovers (one identity per terminal)

    /// One connection's end (`#expect` cannot call a mutating method itself).
    private func end(
        _ watch: inout TakeoverWatch, held: Double, closedByBroker: Bool, random: Double = 1
    ) -> TakeoverWatch.Verdict {
        watch.ended(heldSeconds: held, closedByBroker: closedByBroker, random: random)
    }

    /// Three connections in a row closed by the broker right after it accepted them are a conflict; the listener
    /// then waits the long backoff (1 min doubling to 30 min, jittered) after each takeover.
    @Test func threeQuickTakeoversInARowAreAConflictAndEachLaterOneWaitsLonger() {
        var watch = TakeoverWatch(TakeoverWatch.Policy())
        #expect(end(&watch, held: 0.8, closedByBroker: true, random: 1) == .takenOver(count: 1))
        #expect(end(&watch, held: 1.2, closedByBroker: true, random: 1) == .takenOver(count: 2))
        #expect(!watch.conflict)
        #expect(end(&watch, held: 0.5, closedByBroker: true, random: 1) == .conflict(detected: true, seconds: 60))
        #expect(watch.conflict)
        #expect(end(&watch, held: 1, closedByBroker: true, random: 1) == .conflict(detected: false, seconds: 120))
        #expect(end(&watch, held: 1, closedByBroker: true, random: 0) == .conflict(detected: false, seconds: 120))
        for _ in 0..<10 { _ = watch.ended(heldSeconds: 1, closedByBroker: true, random: 1) }
        #expect(end(&watch, held: 1, closedByBroker: true, random: 1) == .conflict(detected: false, seconds: 1800))
    }

    /// What breaks a row: a connection that lasted, one this listener ended or one a message explains (not closed by
    /// the broker for nothing), a failed attempt (a broker going down is not another client).
    @Test func anythingButAQuickCloseByTheBrokerBreaksTheRow() {
        var watch = TakeoverWatch(TakeoverWatch.Policy())
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        #expect(end(&watch, held: 30, closedByBroker: true) == .ordinary)
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        #expect(end(&watch, held: 1, closedByBroker: false) == .ordinary)
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        _ = watch.ended(heldSeconds: 1, closedByBroker: true)
        watch.attemptFailed()
        #expect(end(&watch, held: 1, closedByBroker: true) == .takenOver(count: 1))
        #expect(!watch.conflict)
    }

    /// The listener that keeps the session: once in conflict, a connection it held for long and lost to the other
    /// one's return is an ordinary loss (reconnected at the usual pace, so the returning one is taken over quickly and
    /// waits longer still); the conflict is reported until a connection lasts twice the longest wait.
    @Test func theHolderReconnectsAtOnceAndTheConflictEndsOnlyAfterALongQuietConnection() {
        var watch = TakeoverWatch(TakeoverWatch.Policy())
        for _ in 0..<3 { _ = watch.ended(heldSeconds: 1, closedByBroker: true) }
        #expect(watch.conflict)
        #expect(end(&watch, held: 300, closedByBroker: true) == .ordinary)
        #expect(watch.conflict, "a long connection taken over is no proof that the other client is gone")
        let early = watch.held(seconds: 3599)
        #expect(!early)
        let cleared = watch.held(seconds: 3600)
        #expect(cleared)
        #expect(!watch.conflict)
        // Over: a new row starts from nothing, and the long backoff from its first step.
        for _ in 0..<2 { _ = watch.ended(heldSeconds: 1, closedByBroker: true) }
        #expect(end(&watch, held: 1, closedByBroker: true, random: 1) == .conflict(detected: true, seconds: 60))
    }

    @Test func theConflictBackoffIsConfigurable() throws {
        let c = try PushConfiguration.parse(
            """
            device = "T9"
            [broker]
            url = "mqtt://h"
            conflict_reconnect_min = "10s"
            conflict_reconnect_max = "2m"
            [keys]
            k1 = "hex:00112233445566778899aabbccddeeff"
            """)
        #expect(c.takeover.backoff == Backoff.Policy(initialSeconds: 10, maximumSeconds: 120))
        let defaults = try PushConfiguration.parse(
            "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\n[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n")
        #expect(defaults.takeover == TakeoverWatch.Policy())
        #expect(defaults.takeover.backoff == Backoff.Policy(initialSeconds: 60, maximumSeconds: 1800))
        #expect(throws: AnnounceError.self) {
            try PushConfiguration.parse(
                "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\nconflict_reconnect_min = \"5m\"\n"
                    + "conflict_reconnect_max = \"1m\"\n[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n")
        }
    }

    // MARK: The clock

    /// `security.clock_sync`: the kernel by default, `trust`, or a file; anything else is an error naming the key.
    /// `clock_wait` defaults to 10 minutes.
    @Test func theClockSourceIsTheKernelTrustOrAFile() throws {
        let base =
            "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\n[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n"
        let defaults = try PushConfiguration.parse(base)
        #expect(defaults.clockSync == .kernel && defaults.clockWaitSeconds == 600)
        for (setting, source) in [
            ("kernel", ClockSync.kernel), ("trust", .trust),
            ("/run/systemd/timesync/synchronized", .file("/run/systemd/timesync/synchronized")),
        ] {
            let c = try PushConfiguration.parse(base + "[security]\nclock_sync = \"\(setting)\"\nclock_wait = \"0\"\n")
            #expect(c.clockSync == source && c.clockWaitSeconds == 0)
        }
        let error = #expect(throws: AnnounceError.self) {
            try PushConfiguration.parse(base + "[security]\nclock_sync = \"kernal\"\n")
        }
        let expected = "security.clock_sync: must be \"kernel\", \"trust\" or an absolute file path"
        #expect(error?.message.contains(expected) == true)
    }

    /// Not synchronised: waiting (a verdict of stale or future is not final) until `clock_wait` is over, then judged
    /// by it all the same; synchronised once the source says so, and for the rest of the run.
    @Test func theClockIsWaitedForThenUsedAndOnceSynchronisedStaysSo() throws {
        let folder = try Paths.temporaryDirectory("clock")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let flag = "\(folder)/synchronized"
        let started = ContinuousClock.now
        let watch = ClockWatch(source: .file(flag), waitSeconds: 600, started: started)
        #expect(watch.state(now: started + .seconds(599)).state == .waiting)
        #expect(!ClockWatch.State.waiting.isFinal && !ClockWatch.State.waiting.isTrusted)
        #expect(watch.state(now: started + .seconds(600)).state == .unsynchronized)
        #expect(ClockWatch.State.unsynchronized.isFinal && !ClockWatch.State.unsynchronized.isTrusted)
        #expect(FileManager.default.createFile(atPath: flag, contents: Data()))
        #expect(watch.state(now: started + .seconds(1)).state == .synchronized)
        try FileManager.default.removeItem(atPath: flag)
        #expect(watch.state == .synchronized, "a clock once set right stays trusted for the run")
        #expect(ClockWatch(source: .trust, waitSeconds: 0).state == .trusted)
    }

    /// The kernel's account can be read here (this machine runs no NTP client, so it says unsynchronised, with the
    /// maximum error it has); under systemd's ProtectClock= the read itself would fail, which is why the unit does
    /// not set it.
    @Test func theKernelsAccountCanBeRead() {
        let (_, detail) = ClockSync.kernel.read()
        #expect(detail.hasPrefix("the kernel's maximum error is "), "\(detail)")
    }
}
