import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// `announce-ctl render` against what the real daemon plays through the real rig, the chime when speech cannot
/// be built, free text through the daemon, and the offline `words` command.
@Suite(.serialized)
struct SpeechEndToEndTests {
    /// 50 ms periods (200 ms of buffer): these tests compare samples, and a busy machine should not starve the
    /// daemon into underruns.
    static let daemonArguments = ["--period-us", "50000"]

    /// Runs announce-ctl without a daemon, on the default packs.
    func offline(_ arguments: [String]) async throws -> CommandResult {
        try await run("\(Paths.bin)/announce-ctl", arguments, environment: ["ANNOUNCE_VOICES": Paths.voices])
    }

    /// `announce-ctl render` into a temporary WAV; returns its samples.
    func render(_ arguments: [String], voices: String = Paths.voices, expectStatus: Int32 = 0) async throws -> [Int16] {
        let directory = try Paths.temporaryDirectory("render")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = "\(directory)/out.wav"
        let result = try await run(
            "\(Paths.bin)/announce-ctl", ["render", "--voices", voices, "--output", file] + arguments)
        #expect(result.status == expectStatus, "\(result)")
        let audio = try SoundFile.read(path: file)
        #expect(audio.sampleRate == 16000 && audio.channels == 1)
        return audio.samples.map { Int16(max(-32768, min(32767, ($0 * 32768).rounded()))) }
    }

    /// Asserts that `captured` holds `expected` sample for sample once aligned, and nothing after it
    /// (``AudioMatch/compareSamples(expected:captured:startTolerance:)``: rig glitches tolerated and reported).
    func expectSameSamples(_ expected: [Int16], _ captured: [Int16], _ what: String, startToleranceMs: Int = 0) {
        let comparison = AudioMatch.compareSamples(
            expected: expected, captured: captured, startTolerance: startToleranceMs * 16)
        print("\(what): \(comparison)")
        #expect(comparison.failures.isEmpty, "\(what): \(comparison.failures)")
    }

    @Test func renderWritesExactlyWhatTheDaemonPlays() async throws {
        let cases: [[String]] = [
            ["12345.67"],
            ["--channel", "alipay", "--style", "units", "--liang", "2.02"],
            ["--refund", "--channel", "wechat", "--fen", "100005"],
        ]
        // With the lead-in a terminal uses to wake its amplifier, every sample of the render is played.
        try await withRig { rig in
            try await withDaemon(rig: rig, arguments: Self.daemonArguments + ["--lead-in-ms", "40"]) { daemon in
                for arguments in cases {
                    let expected = try await render(["--lead-in-ms", "40"] + arguments)
                    #expect(expected.prefix(40 * 16).allSatisfy { $0 == 0 })
                    var result: CommandResult?
                    let captured = try await rig.capture {
                        result = try await daemon.ctl(["say", "--wait"] + arguments)
                    }
                    #expect(result?.status == 0, "\(String(describing: result))\n\(daemon.log)")
                    expectSameSamples(expected, captured, arguments.joined(separator: " "))
                }
            }
        }
        // Without it, the same samples, but the rig may drop the first milliseconds of a new stream.
        try await withRig { rig in
            try await withDaemon(rig: rig, arguments: Self.daemonArguments) { daemon in
                let expected = try await render(cases[0])
                var result: CommandResult?
                let captured = try await rig.capture { result = try await daemon.ctl(["say", "--wait"] + cases[0]) }
                #expect(result?.status == 0, "\(String(describing: result))\n\(daemon.log)")
                expectSameSamples(expected, captured, "no lead-in", startToleranceMs: 50)
            }
        }
    }

    /// `combine`: a pushed clip, an amount and digits, heard as the voice library renders them — the pushed clip's own
    /// samples among the pack's words, digits one by one.
    @Test func aCombinationIsHeardWithThePushedClipAndThePacksWords() async throws {
        let corpus = try CorpusFolder.make(["new_order": "bai.wav"])
        defer { try? FileManager.default.removeItem(atPath: corpus) }
        let library = try VoicePackLoader.loadLibrary(directory: Paths.voices, defaultLanguage: "zh", corpus: corpus)
        let parts: [CombinationPart] = [.clip("new_order"), .amount(try Amount(parsing: "12.50")), .digits("0423")]
        let announcement = try library.defaultPack.composer.compose(
            .combination(parts), corpus: Set(library.corpus.clips.keys))
        #expect(announcement.text == "new_order十二点五元零四二三" && announcement.missing.isEmpty, "\(announcement)")
        let rendering = try library.defaultPack.rendering(announcement, leadInMs: 40)
        let pushed = try #require(library.corpus.clips["new_order"])
        #expect(Array(rendering.samples[rendering.segments[0]]) == Array(pushed), "the render starts with the pushed clip")
        try await withRig { rig in
            try await withDaemon(
                rig: rig, arguments: Self.daemonArguments + ["--lead-in-ms", "40", "--corpus", corpus]
            ) { daemon in
                var result: CommandResult?
                let captured = try await rig.capture {
                    result = try await daemon.ctl(["combine", "--wait", "new_order", "{$12.50}", "{#0423}"])
                }
                #expect(result?.status == 0, "\(String(describing: result))\n\(daemon.log)")
                #expect(result?.stdout.contains("new_order十二点五元零四二三") == true, "\(result?.stdout ?? "")")
                expectSameSamples(rendering.samples, captured, "combine")
                // An id neither the pushed clips nor the pack have: refused when sent, with the reason; nothing heard.
                let unknown = try await daemon.ctl(["combine", "urged", "{$1}"])
                #expect(unknown.status == 2 && unknown.stdout.contains("not_found"), "\(unknown)")
                #expect(unknown.stdout.contains("\"urged\""), "\(unknown)")
            }
        }
    }

    @Test func freeTextIsSynthesisedByTheDaemonAsRenderDoes() async throws {
        let text = "请到前台取货"
        let expected = try await render(["--lead-in-ms", "40", "--text", text])
        #expect(AudioMatch.rms(expected) > 500, "the render is speech")
        try await withRig { rig in
            try await withDaemon(rig: rig, arguments: Self.daemonArguments + ["--lead-in-ms", "40"]) { daemon in
                var result: CommandResult?
                let captured = try await rig.capture { result = try await daemon.ctl(["text", "--wait", text]) }
                #expect(result?.status == 0, "\(String(describing: result))\n\(daemon.log)")
                #expect(result?.stdout.contains("spoken") == true, "\(result?.stdout ?? "")")
                expectSameSamples(expected, captured, "text \(text)")
                let empty = try await daemon.ctl(["text", "  "])
                #expect(empty.status == 2 && empty.stdout.contains("bad_request"), "\(empty)")
            }
        }
    }

    /// libespeak-ng (with the libpulse, X11 and D-Bus Debian's build brings) is loaded at the first free text,
    /// not at start: the idle daemon does not map it; a text loads it; and a daemon that cannot load it fails
    /// the text with the loader's reason while payments are spoken as ever.
    @Test func theSpeechLibraryLoadsAtTheFirstTextAndPaymentsNeverNeedIt() async throws {
        func mapsSpeechLibrary(_ daemon: DaemonProcess) throws -> Bool {
            // Read to its end (a /proc file says it is empty: String(contentsOfFile:) may stop early).
            let maps = try WholeFile.read(atPath: "/proc/\(daemon.processID)/maps").get()
            return String(decoding: maps, as: UTF8.self).contains("libespeak-ng")
        }
        try await withDaemon(rig: nil, device: "null") { daemon in
            let paid = try await daemon.ctl(["say", "--wait", "1.00"])
            #expect(paid.status == 0 && paid.stdout.contains("spoken"), "\(paid)")
            #expect(try !mapsSpeechLibrary(daemon), "loaded before any text")
            let text = try await daemon.ctl(["text", "--wait", "请到前台取货"])
            #expect(text.status == 0 && text.stdout.contains("spoken"), "\(text)\n\(daemon.log)")
            #expect(try mapsSpeechLibrary(daemon), "a text was spoken without loading libespeak-ng?\n\(daemon.log)")
        }
        // A libespeak-ng.so.1 the loader finds first and cannot load (a broken installation).
        let broken = try Paths.temporaryDirectory("broken-espeak")
        defer { try? FileManager.default.removeItem(atPath: broken) }
        try Data("not a library".utf8).write(to: URL(fileURLWithPath: "\(broken)/libespeak-ng.so.1"))
        try await withDaemon(rig: nil, device: "null", environment: ["LD_LIBRARY_PATH": broken]) { daemon in
            let text = try await daemon.ctl(["text", "--wait", "请到前台取货"])
            #expect(text.status == 5, "\(text)\n\(daemon.log)")
            #expect(
                text.stdout.contains("synthesis_failed") && text.stdout.contains("libespeak-ng.so.1: file too short"),
                "\(text)")
            let paid = try await daemon.ctl(["say", "--wait", "2.00"])
            #expect(paid.status == 0 && paid.stdout.contains("spoken"), "\(paid)\n\(daemon.log)")
        }
        // --check-config loads it, and says so when it cannot.
        let base = ["--voices", Paths.voices, "--state-dir", "\(broken)/state", "--socket", "\(broken)/s", "--check-config"]
        let warning = "# warning: free text cannot be spoken: libespeak-ng cannot be loaded"
        let checked = try await run("\(Paths.bin)/announced", base, environment: ["LD_LIBRARY_PATH": broken])
        #expect(checked.status == 0 && checked.stdout.contains(warning), "\(checked)")
        #expect(checked.stdout.contains("libespeak-ng.so.1: file too short"), "\(checked)")
        let healthy = try await run("\(Paths.bin)/announced", base)
        #expect(healthy.status == 0 && !healthy.stdout.contains(warning), "\(healthy)")
    }

    /// libsndfile and its codecs decode the packs at start and at a reload, then leave the daemon's memory; a
    /// reload loads them again through the same stubs (a stub still pointing into the unloaded library would
    /// crash the daemon there), and payments go on throughout. The next start finds the clips prepared in its
    /// state folder and maps them: no decoder library (libsndfile, libsoxr, libebur128) ever enters it.
    @Test func theDecoderLibrariesLeaveOnceThePacksAreDecoded() async throws {
        func maps(_ daemon: DaemonProcess) throws -> String {
            String(decoding: try WholeFile.read(atPath: "/proc/\(daemon.processID)/maps").get(), as: UTF8.self)
        }
        func mapped(_ daemon: DaemonProcess, _ libraries: [String] = ["libsndfile", "libFLAC", "libvorbis", "libopus", "libmpg123"]) throws -> [String] {
            let maps = try maps(daemon)
            return libraries.filter { maps.contains($0) }
        }
        let config = try Paths.temporaryDirectory("decoders")
        defer { try? FileManager.default.removeItem(atPath: config) }
        // ALSA as on a terminal without a sound server: this machine's configuration hooks in PulseAudio, whose
        // libpulsecommon needs libsndfile too and would keep it mapped. No mixer for the same reason.
        let alsa = "\(config)/alsa.conf"
        try "pcm.null {\n    type null\n}\n".write(toFile: alsa, atomically: true, encoding: .utf8)
        let file = "\(config)/announced.toml"
        try "[audio]\nmixer = \"none\"\n".write(toFile: file, atomically: true, encoding: .utf8)
        let prepared = "\(config)/state/prepared"
        try await withDaemon(
            rig: nil, arguments: ["--config", file], device: "null", directory: config,
            environment: ["ALSA_CONFIG_PATH": alsa]
        ) { daemon in
            #expect(try mapped(daemon) == [], "still mapped after start\n\(daemon.log)")
            let paid = try await daemon.ctl(["say", "--wait", "1.00"])
            #expect(paid.status == 0 && paid.stdout.contains("spoken"), "\(paid)")
            for round in 1...2 {
                // Without its prepared clips, a reload decodes the packs again (with them, round 2, it maps them).
                if round == 1 { try FileManager.default.removeItem(atPath: prepared) }
                daemon.signal(SIGHUP)
                let reloaded = try await eventually(timeout: .seconds(30)) {
                    daemon.log.components(separatedBy: "configuration reloaded").count > round
                }
                #expect(reloaded, "reload \(round) not logged\n\(daemon.log)")
                #expect(try mapped(daemon) == [], "still mapped after reload \(round)\n\(daemon.log)")
                let again = try await daemon.ctl(["say", "--wait", "--lang", "en", "\(round).50"])
                #expect(again.status == 0 && again.stdout.contains("spoken"), "\(again)\n\(daemon.log)")
            }
            let files = try FileManager.default.contentsOfDirectory(atPath: prepared).sorted()
            #expect(files.count == 2 && files.allSatisfy { $0.hasSuffix(".clips") }, "one file per pack: \(files)")
        }
        try await withDaemon(
            rig: nil, arguments: ["--config", file], device: "null", directory: config,
            environment: ["ALSA_CONFIG_PATH": alsa]
        ) { daemon in
            let decoders = ["libsndfile", "libsoxr", "libebur128"]
            let loaded = try mapped(daemon, decoders)
            #expect(loaded == [], "a start with prepared clips loaded a decoder\n\(daemon.log)")
            #expect(try maps(daemon).components(separatedBy: "\(prepared)/").count == 3, "both packs' files mapped")
            let paid = try await daemon.ctl(["say", "--wait", "2.00"])
            #expect(paid.status == 0 && paid.stdout.contains("spoken"), "\(paid)")
            #expect(try mapped(daemon, decoders) == [], "\(daemon.log)")
        }
    }

    /// The clips a restarted daemon maps from the file the previous run prepared are the very samples
    /// `announce-ctl render` decodes from the pack.
    @Test func aRestartSpeaksThePreparedClipsSampleForSample() async throws {
        let directory = try Paths.temporaryDirectory("prepared")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let expected = try await render(["--lead-in-ms", "40", "123.45"])
        try await withRig { rig in
            for start in ["first", "second"] {
                try await withDaemon(
                    rig: rig, arguments: Self.daemonArguments + ["--lead-in-ms", "40"], directory: directory
                ) { daemon in
                    #expect(daemon.log.contains("prepared="), "\(start) start: clips not mapped\n\(daemon.log)")
                    var result: CommandResult?
                    let captured = try await rig.capture { result = try await daemon.ctl(["say", "--wait", "123.45"]) }
                    #expect(result?.status == 0, "\(String(describing: result))")
                    expectSameSamples(expected, captured, "\(start) start")
                }
            }
        }
    }

    @Test func aMissingClipPlaysTheChimeAndReportsIt() async throws {
        // A pack whose low-battery prompt has lost its clip: it loads (with a warning), and asking for the
        // prompt plays the chime and reports missing_clip instead of staying silent.
        let library = try Paths.temporaryDirectory("voices")
        defer { try? FileManager.default.removeItem(atPath: library) }
        try FileManager.default.copyItem(atPath: "\(Paths.voices)/zh", toPath: "\(library)/zh")
        let manifestPath = "\(library)/zh/manifest.json"
        var manifest =
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifestPath)))
            as! [String: Any]
        var clips = manifest["clips"] as! [String: String]
        let prompts = manifest["prompts"] as! [String: [String]]
        let token = try #require(prompts["low-battery"]?.first)
        clips[token] = nil
        manifest["clips"] = clips
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: manifestPath))

        let chime = try await render(
            ["--lead-in-ms", "40", "--prompt", "low-battery"], voices: library, expectStatus: 1)
        let pack = try VoicePackLoader.load(directory: "\(library)/zh")
        #expect(chime == (try pack.renderChime(leadInMs: 40)), "render writes the chime the daemon plays")

        try await withRig { rig in
            try await withDaemon(
                rig: rig, arguments: Self.daemonArguments + ["--voices", library, "--lead-in-ms", "40"]
            ) { daemon in
                var result: CommandResult?
                let captured = try await rig.capture {
                    result = try await daemon.ctl(["prompt", "--wait", "low-battery"])
                }
                let reply = try #require(result)
                #expect(reply.status == 5, "\(reply)\n\(daemon.log)")
                #expect(reply.stdout.contains("missing_clip") && reply.stdout.contains(token), "\(reply.stdout)")
                expectSameSamples(chime, captured, "chime")
                #expect(daemon.log.contains("missing_clip"), "the daemon's log says so:\n\(daemon.log)")
                // The pack still speaks everything else.
                let spoken = try await daemon.ctl(["prompt", "--wait", "network-lost"])
                #expect(spoken.status == 0, "\(spoken)")
            }
        }
    }

    @Test func wordsPrintsTheSentenceForEveryAmountWithoutADaemon() async throws {
        let plain = try await offline(["words", "1005", "10010", "100000001", "0.05", "10.50", "¥100", "1,000.00"])
        #expect(plain.status == 0, "\(plain)")
        let sentences: [String] = plain.stdout.split(separator: "\n").map { line in
            line.split(separator: "\t").last.map(String.init) ?? ""
        }
        let expected = ["到账一千零五元", "到账一万零一十元", "到账一亿零一元", "到账零点零五元", "到账十点五元", "到账一百元", "到账一千元"]
        #expect(sentences == expected)
        let json = try await offline(["words", "--json", "--lang", "en", "--channel", "alipay", "105.30"])
        #expect(json.status == 0, "\(json)")
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["amount"] as? String == "105.30")
        #expect(object["text"] as? String == "alipay payment received one hundred and five yuan and thirty fen")
        #expect((object["tokens"] as? [String])?.first == "alipay payment received")
        let tokens = try await offline(["words", "--tokens", "--style", "units", "--refund", "12.34"])
        #expect(tokens.stdout == "12.34\t退款十二元三角四分\n\t退款 | 十 | 二 | 元 | 三 | 角 | 四 | 分\n", "\(tokens)")
    }

    @Test func wordsRefusesEachBadAmountNamingTheProblem() async throws {
        let refusals: [(String, String)] = [
            ("12,34", "decimal separator"), ("-5", "negative"), ("0", "zero"), ("1.005", "3 decimals"),
            ("1e3", "exponent"), ("12a", "invalid character"), ("1000000000000", "too large"), ("", "empty"),
        ]
        for (amount, problem) in refusals {
            let result = try await offline(["words", "--", amount])
            #expect(result.status == 2, "\(amount): \(result)")
            #expect(result.stderr.contains(problem), "\(amount): \(result.stderr)")
        }
        let json = try await offline(["words", "--json", "--", "100", "-5"])
        #expect(json.status == 2)
        let lines = json.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines[1].contains("\"code\":\"invalid_amount\""), "\(json.stdout)")
        let channel = try await offline(["words", "--channel", "paypal", "1"])
        #expect(channel.status == 2 && channel.stderr.contains("paypal"), "\(channel)")
        let language = try await offline(["words", "--lang", "fr", "1"])
        #expect(language.status == 2 && language.stderr.contains("fr"), "\(language)")
    }
}
