import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// `announced --check-config` and `announce-ctl` as a user meets them: help, output, --json, exit statuses.
    @Suite
    struct CommandLineTests {
        func announced(_ arguments: [String]) async throws -> CommandResult {
            try await run("\(Paths.bin)/announced", arguments)
        }

        @Test func checkConfigValidatesEverythingAndPrintsTheResult() async throws {
            let directory = try Paths.temporaryDirectory("chk")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let good = "\(directory)/good.toml"
            try """
            voices = "\(Paths.voices)"
            state_dir = "\(directory)/state"
            socket = "\(directory)/s.sock"
            lang = "en"
            [queue]
            capacity = 12
            dedup_window = "2h"
            """.write(toFile: good, atomically: true, encoding: .utf8)
            let ok = try await announced(["--config", good, "--check-config", "--queue-capacity", "20"])
            #expect(ok.status == 0, "\(ok)")
            #expect(ok.stdout.contains("capacity = 20"), "flags win over the file: \(ok.stdout)")
            #expect(ok.stdout.contains("dedup_window = \"2h\""))
            #expect(ok.stdout.contains("# voice en:") && ok.stdout.contains("(default)"))
            #expect(ok.stdout.contains("# configuration ok"))
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/state"), "checking creates nothing")

            let typo = "\(directory)/typo.toml"
            try "[queue]\ncapasity = 3\n".write(toFile: typo, atomically: true, encoding: .utf8)
            let bad = try await announced(["--config", typo, "--check-config"])
            #expect(bad.status == 1)
            #expect(bad.stderr.contains("queue.capasity: unknown key"), "\(bad)")

            let noVoices = try await announced(["--config", good, "--voices", "\(directory)/none", "--check-config"])
            #expect(noVoices.status == 1)
            #expect(noVoices.stderr.contains("voices:"), "\(noVoices)")

            let missing = try await announced(["--config", "\(directory)/missing.toml", "--check-config"])
            #expect(missing.status == 1 && missing.stderr.contains("does not exist"), "\(missing)")

            // Every problem of the file is `file: section.key: problem`: a value of the wrong type inside a
            // section, one out of range, a string left open.
            let wrong = "\(directory)/wrong.toml"
            try "[queue]\ncapacity = \"many\"\n".write(toFile: wrong, atomically: true, encoding: .utf8)
            let typed = try await announced(["--config", wrong, "--check-config"])
            #expect(typed.status == 1 && typed.stderr == "announced: \(wrong): queue.capacity: must be an integer\n")
            try "[audio]\nvolume_threshold = 150\n".write(toFile: wrong, atomically: true, encoding: .utf8)
            let range = try await announced(["--config", wrong, "--check-config"])
            #expect(
                range.status == 1 && range.stderr == "announced: \(wrong): audio.volume_threshold: must be 0…100\n",
                "\(range)")
            try "device = \"default\"\n[audio]\nmixer = \"default/Master\n".write(
                toFile: wrong, atomically: true, encoding: .utf8)
            let open = try await announced(["--config", wrong, "--check-config"])
            #expect(
                open.status == 1
                    && open.stderr == "announced: \(wrong): audio.mixer: unterminated string: its closing quote is "
                    + "missing (line 3, column 24)\n", "\(open)")
        }

        @Test func logLinesCarryTheirPriorityForJournaldAndATimeElsewhere() async throws {
            let directory = try Paths.temporaryDirectory("log")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // Standard error is the journal stream when $JOURNAL_STREAM names its device and inode (systemd).
            let logFile = "\(directory)/announced.log"
            #expect(FileManager.default.createFile(atPath: logFile, contents: nil))
            var info = stat()
            #expect(stat(logFile, &info) == 0)
            // As root, in a mount namespace without a journal socket, so that a journald on this machine does not
            // take the records (they go to standard error only when the journal cannot take them).
            let noJournal = getuid() == 0 ? try FakeJournal(listening: false) : nil
            try await withDaemon(
                rig: nil, device: "null", directory: directory,
                environment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"], launcher: noJournal?.launcher ?? []
            ) { daemon in
                #expect(try await daemon.reply(Request(op: "say", amount: "1", order: "L 1", wait: true)).ok)
                _ = try await daemon.ctl(["say", "2"], as: .nobody)
                let lines = daemon.log.split(separator: "\n")
                #expect(
                    lines.contains { $0.hasPrefix("<6>announced: job accepted ") && $0.contains("order.id=\"L 1\"") })
                #expect(lines.contains { $0.hasPrefix("<4>announced: request refused: unauthorized ") })
                #expect(lines.allSatisfy { $0.hasPrefix("<") }, "\(daemon.log)")
            }
            try await withDaemon(rig: nil, device: "null") { daemon in
                let first = try #require(daemon.log.split(separator: "\n").first)
                #expect(
                    first.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info announced: .*/) != nil, "\(first)"
                )
            }
        }

        /// A second daemon on a live socket refuses to start, before it loads anything, saying which setting and
        /// what to do — not `internal` (a bug), and not "stopping: finishing the announcement playing" for a start
        /// that never happened.
        @Test func aSecondDaemonDoesNotTakeOverALiveSocket() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let state = try Paths.temporaryDirectory("two")
                defer { try? FileManager.default.removeItem(atPath: state) }
                let second = try await announced([
                    "--socket", daemon.socket, "--state-dir", "\(state)/state", "--voices", Paths.voices,
                    "--device", "null",
                ])
                #expect(second.status == 1, "\(second)")
                #expect(
                    second.stderr.contains(
                        "critical announced: cannot start error=\"bad_configuration: socket: another process is "
                            + "listening on \(daemon.socket); not taking it over (stop that daemon first, or give "
                            + "this one another --socket)\""), "\(second)")
                #expect(!second.stderr.contains("internal") && !second.stderr.contains("stopping"), "\(second)")
                #expect(!second.stderr.contains("voice pack loaded"), "refused before loading: \(second)")
                #expect(!FileManager.default.fileExists(atPath: "\(state)/state"), "no journal opened")
                #expect(try await daemon.reply(Request(op: "ping")).ok, "the first daemon still has its socket")
            }
        }

        /// `say -w` whose daemon stops before the job plays: the job's line, then the daemon's error line (the job
        /// stays queued for the next start), exit 3 — not the acceptance printed twice. The job is held by a
        /// device that cannot open (retried), so that it is still waiting when SIGTERM comes (and the stop waits
        /// half a second for it, not the default 10 s).
        @Test func aWaitedSayWhoseDaemonStopsSaysWhy() async throws {
            try await withDaemon(rig: nil, arguments: ["--shutdown-timeout", "0.5"], device: "nosuchpcm") { daemon in
                let waiting = Task { try await daemon.ctl(["say", "-w", "8.5"]) }
                try await daemon.waitForLog("audio device failed")
                daemon.signal(SIGTERM)
                let said = try await waiting.value
                #expect(said.status == 3, "\(said)")
                #expect(
                    said.stdout == "job 1 queued: 到账八点五元 (position 0)\n"
                        + "error: shutting_down: the daemon is stopping; job 1 stays queued and is spoken after "
                        + "restart; try again once the daemon has restarted\n", "\(said)")
                #expect(try await daemon.waitForExit() == 0)
            }
        }

        /// One rule: a value announce-ctl cannot use is invalid input (2) whether it finds it or the daemon does
        /// (`bad_request`); a usage error (64) is a command line of the wrong shape. Connection options may come
        /// before the command.
        @Test func aValueThatCannotBeUsedIsInvalidInputWhoeverFindsIt() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                for (arguments, stderr) in [
                    (["volume", "150"], "announce-ctl: a percentage is 0…100, not 150\n"),
                    (
                        ["cancel", "abc"],
                        "announce-ctl: The value 'abc' is invalid for '<ids>' (announce-ctl cancel --help describes "
                            + "the options)\n"
                    ),
                    (
                        ["say", "--fen", "12.5"],
                        "announce-ctl: The value '12.5' is invalid for '--fen <n>' (announce-ctl say --help describes "
                            + "the options)\n"
                    ),
                ] {
                    let local = try await daemon.ctl(arguments)
                    #expect(local.status == 2 && local.stderr == stderr && local.stdout.isEmpty, "\(arguments): \(local)")
                }
                // The same kind of mistake found by the daemon.
                let ttl = try await daemon.ctl(["say", "-t", "-1", "10"])
                #expect(
                    ttl.status == 2 && ttl.stdout == "error: bad_request: ttl must be seconds between 0 (none) and 604800\n",
                    "\(ttl)")
                let limit = try await daemon.ctl(["history", "-n", "0"])
                #expect(limit.status == 2 && limit.stdout.hasPrefix("error: bad_request: "), "\(limit)")
                // The shape: still 64.
                let shape = try await daemon.ctl(["volume", "--reset", "70"])
                #expect(shape.status == 64 && shape.stderr.hasPrefix("announce-ctl: give a threshold or --reset"))

                let before = try await run(
                    "\(Paths.bin)/announce-ctl", ["-s", daemon.socket, "-j", "say", "1"],
                    environment: ["ANNOUNCE_SOCKET": "/nonexistent/s.sock"])
                #expect(before.status == 0 && before.stdout.hasPrefix("{"), "\(before)")
            }
        }

        @Test func helpReadsLikeAManual() async throws {
            let help = try await run("\(Paths.bin)/announce-ctl", ["--help"])
            for command in [
                "say", "prompt", "status", "queue", "cancel", "replay", "history", "volume", "ping", "metrics",
            ] {
                #expect(help.stdout.contains("  \(command) "), "\(command) missing from --help")
            }
            #expect(help.stdout.contains("Exit status:\n  0   success\n  1   any other failure"), "\(help.stdout)")
            #expect(help.stdout.contains("  6   no voice pack found") && help.stdout.contains("  64  usage error"))
            let say = try await run("\(Paths.bin)/announce-ctl", ["say", "--help"])
            #expect(
                say.stdout.contains("-w, --wait") && say.stdout.contains("-o, --order")
                    && say.stdout.contains("-j, --json")
            )
            #expect(say.stdout.contains("announce-ctl say -c alipay -w 8.50"))
            let daemonHelp = try await announced(["--help"])
            #expect(daemonHelp.stdout.contains("--check-config") && daemonHelp.stdout.contains("SIGHUP"))
        }

        /// One executable, installed under the three names (links), runs the program its name says;
        /// `announce PROGRAM ARGS…` does the same; any other name or program is a usage error.
        @Test func theOneExecutableRunsEachProgramByItsName() async throws {
            func inode(_ path: String) -> UInt? {
                var info = stat()
                return stat(path, &info) == 0 ? UInt(info.st_ino) : nil
            }
            let names = ["announce", "announced", "announce-ctl", "announce-push"]
            let inodes = Set(names.map { inode("\(Paths.bin)/\($0)") })
            #expect(inodes.count == 1 && inodes.first! != nil, "one file under every name: \(inodes)")

            let words = try await run(
                "\(Paths.bin)/announce", ["announce-ctl", "words", "--voices", Paths.voices, "100"])
            #expect(words.status == 0 && words.stdout == "100\t到账一百元\n", "\(words)")
            let daemonHelp = try await run("\(Paths.bin)/announce", ["announced", "--help"])
            #expect(daemonHelp.status == 0 && daemonHelp.stdout.contains("USAGE: announced"), "\(daemonHelp)")
            let pushHelp = try await run("\(Paths.bin)/announce-push", ["--help"])
            #expect(pushHelp.status == 0 && pushHelp.stdout.contains("USAGE: announce-push"), "\(pushHelp)")

            let bare = try await run("\(Paths.bin)/announce", [])
            #expect(bare.status == 64 && bare.stderr.contains("usage: announce PROGRAM"), "\(bare)")
            let help = try await run("\(Paths.bin)/announce", ["--help"])
            #expect(help.status == 0 && help.stdout.contains("announce-ctl    the command line"), "\(help)")
            let unknown = try await run("\(Paths.bin)/announce", ["speak", "1"])
            #expect(unknown.status == 64 && unknown.stderr.hasPrefix("announce: unknown program \"speak\"\n"))

            let directory = try Paths.temporaryDirectory("name")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try FileManager.default.createSymbolicLink(
                atPath: "\(directory)/speaker", withDestinationPath: "\(Paths.bin)/announce")
            let other = try await run("\(directory)/speaker", ["say", "1"])
            #expect(other.status == 64 && other.stderr.hasPrefix("announce: called as \"speaker\""), "\(other)")
        }

        /// The command line loads none of the C libraries that only the daemon, `render` or the push listener
        /// need: they are loaded on first use (Sources/CLazyLibraries), which keeps each `announce-ctl say` from
        /// paying for some 40 libraries. The daemon loads those a payment needs up front (libespeak-ng, for free
        /// text only, at the first text: SpeechEndToEndTests; the decoders when a pack must be prepared).
        @Test func theCommandLineStartsWithoutTheDaemonsLibraries() async throws {
            let libraries = [
                "libasound", "libsndfile", "libsoxr", "libebur128", "libespeak-ng", "libsystemd", "libmosquitto",
                "libsqlite3", "libcurl",
            ]
            let ping = try await run(
                "\(Paths.bin)/announce-ctl", ["ping", "--socket", "/nonexistent/s.sock"],
                environment: ["LD_DEBUG": "files"])
            #expect(ping.status == 4 && ping.stderr.contains("cannot connect"), "\(ping)")
            #expect(ping.stderr.contains("file=libc.so.6"), "LD_DEBUG shows what is loaded: \(ping.stderr)")
            for library in libraries {
                #expect(!ping.stderr.contains("file=\(library)"), "announce-ctl ping loaded \(library)")
            }
            let daemon = try await run("\(Paths.bin)/announced", ["--help"], environment: ["LD_DEBUG": "files"])
            #expect(daemon.status == 0)
            for library in ["libasound", "libsystemd", "libsqlite3"] {
                #expect(daemon.stderr.contains("file=\(library)"), "announced did not load \(library) at start")
            }
            // Not at start: libespeak-ng (at the first text), nor the decoders (only when a voice pack has to be
            // prepared: SpeechEndToEndTests, theDecoderLibrariesLeaveOnceThePacksAreDecoded).
            for library in ["libespeak-ng", "libsndfile", "libsoxr", "libebur128", "libcurl"] {
                #expect(!daemon.stderr.contains("file=\(library)"), "announced loaded \(library) at start")
            }
        }

        /// What a caller sees for a missing daemon, an unknown option or a bad amount: one line each, saying what
        /// went wrong and what to do, with the documented exit status — word for word.
        @Test func badInputGetsClearMessagesAndStatuses() async throws {
            let ctl = "\(Paths.bin)/announce-ctl"
            let unreachable = try await run(ctl, ["say", "--socket", "/nonexistent/s.sock", "1"])
            #expect(unreachable.status == 4 && unreachable.stdout.isEmpty)
            #expect(
                unreachable.stderr
                    == "announce-ctl: cannot connect to the daemon at /nonexistent/s.sock: No such file or directory; "
                    + "is announced running? Start it (systemctl start announced.socket), or give its socket with "
                    + "--socket or $ANNOUNCE_SOCKET\n")

            let option = try await run(ctl, ["say", "--bogus", "1"])
            #expect(option.status == 64)
            #expect(
                option.stderr
                    == "announce-ctl: Unknown option '--bogus' (announce-ctl say --help describes the options)\n",
                "\(option)")
            let missing = try await run(ctl, ["say", "--wait"])
            #expect(missing.status == 64)
            #expect(
                missing.stderr
                    == "announce-ctl: give an AMOUNT or --fen (announce-ctl say --help describes the options)\n")
            let subcommand = try await run(ctl, ["frobnicate"])
            #expect(subcommand.status == 64)
            #expect(
                subcommand.stderr
                    == "announce-ctl: Unexpected argument 'frobnicate' (announce-ctl --help describes the options)\n")
            // (Not --bogus: ArgumentParser suggests the nearest option, --corpus, for that one.)
            let daemonOption = try await run("\(Paths.bin)/announced", ["--frobnicate"])
            #expect(daemonOption.status == 64)
            #expect(
                daemonOption.stderr
                    == "announced: Unknown option '--frobnicate' (announced --help describes the options)\n")
            let pushOption = try await run("\(Paths.bin)/announce-push", ["--bogus"])
            #expect(pushOption.status == 64 && pushOption.stderr.hasPrefix("announce-push: Unknown option '--bogus' ("))
            #expect(pushOption.stderr.split(separator: "\n").count == 1)

            let decimals = try await run(ctl, ["words", "--voices", Paths.voices, "1.005"])
            #expect(decimals.status == 2)
            #expect(
                decimals.stderr == "announce-ctl: 1.005: the amount has 3 decimals (\".005\"); at most 2 are allowed\n")
            let letters = try await run(ctl, ["words", "--voices", Paths.voices, "abc"])
            #expect(letters.status == 2)
            #expect(
                letters.stderr.hasPrefix("announce-ctl: abc: the amount contains the invalid character \"a\" (U+0061)"))
            let render = try await run(ctl, ["render", "--voices", Paths.voices, "--output", "/dev/null", "1.005"])
            #expect(render.status == 2)
            #expect(
                render.stderr
                    == "announce-ctl: invalid_amount: the amount has 3 decimals (\".005\"); at most 2 are allowed "
                    + "(too_many_decimals)\n")
            let language = try await run(ctl, ["words", "--voices", Paths.voices, "--lang", "fr", "1"])
            #expect(language.status == 2)
            #expect(
                language.stderr
                    == "announce-ctl: unknown_language: no voice pack for language \"fr\" in \(Paths.voices) (it has: "
                    + "en, zh); choose one with --lang, or another folder with --voices\n")
            // No packs where it looked: where that was, and what to do; exit 6.
            let noVoices = try await run(ctl, ["words", "--voices", "/nonexistent", "1"])
            #expect(noVoices.status == 6)
            #expect(
                noVoices.stderr == "announce-ctl: bad_voice_pack: no voice pack found; looked in /nonexistent "
                    + "(--voices): no such folder. \(VoicePackSearch.advice)\n", "\(noVoices)")
            let environment = try await run(
                ctl, ["render", "--output", "/dev/null", "1"], environment: ["ANNOUNCE_VOICES": "/x"])
            #expect(environment.status == 6)
            #expect(environment.stderr.contains("looked in /x ($ANNOUNCE_VOICES): no such folder."), "\(environment)")

            // A negative amount is an amount (refused as one), never an option swallowed without a word.
            let negative = try await run(ctl, ["words", "--voices", Paths.voices, "-l", "en", "-1", "2"])
            #expect(negative.status == 2 && negative.stdout == "2\tpayment received two yuan\n", "\(negative)")
            #expect(
                negative.stderr == "announce-ctl: -1: the amount \"-1\" is negative; only positive amounts are announced\n")
        }

        /// The daemon finds its voice packs as announce-ctl does: --voices, the config file, $ANNOUNCE_VOICES, the
        /// installed ones; and says where it looked when there are none.
        @Test func theDaemonFindsVoicePacksAsTheCommandLineDoes() async throws {
            let directory = try Paths.temporaryDirectory("vsr")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let config = "\(directory)/a.toml"
            try "state_dir = \"\(directory)/state\"\n".write(toFile: config, atomically: true, encoding: .utf8)
            let found = try await run(
                "\(Paths.bin)/announced", ["--config", config, "--check-config"],
                environment: ["ANNOUNCE_VOICES": Paths.voices])
            #expect(found.status == 0, "\(found)")
            #expect(found.stdout.contains("voices = \"\(Paths.voices)\" # $ANNOUNCE_VOICES"), "\(found)")
            let missing = try await run(
                "\(Paths.bin)/announced", ["--config", config, "--check-config"],
                environment: ["ANNOUNCE_VOICES": "\(directory)/none"])
            #expect(missing.status == 1)
            #expect(
                missing.stderr.contains("voices: no voice pack found; looked in \(directory)/none ($ANNOUNCE_VOICES)"),
                "\(missing)")
            let flag = try await run(
                "\(Paths.bin)/announced", ["--config", config, "--voices", Paths.voices, "--check-config"],
                environment: ["ANNOUNCE_VOICES": "\(directory)/none"])
            #expect(flag.status == 0 && flag.stdout.contains("# --voices"), "--voices wins: \(flag)")
        }

        /// A pack that loads but lacks a prompt's clip is said so when it is loaded — by --check-config and in the
        /// daemon's log at start — not first noticed as a chime.
        @Test func aPackMissingAClipIsWarnedAboutAtLoad() async throws {
            let library = try Paths.temporaryDirectory("voices")
            defer { try? FileManager.default.removeItem(atPath: library) }
            try FileManager.default.copyItem(atPath: "\(Paths.voices)/zh", toPath: "\(library)/zh")
            let manifestPath = "\(library)/zh/manifest.json"
            var manifest =
                try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifestPath)))
                as! [String: Any]
            var clips = manifest["clips"] as! [String: String]
            let token = try #require((manifest["prompts"] as! [String: [String]])["low-battery"]?.first)
            clips[token] = nil
            manifest["clips"] = clips
            try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: manifestPath))
            let warning = "prompt \"low-battery\" uses token \"\(token)\" that has no clip"

            let check = try await announced(["--voices", library, "--state-dir", "\(library)/state", "--check-config"])
            #expect(check.status == 0, "\(check)")
            #expect(check.stdout.contains("# warning: voice zh: \(warning); the chime plays instead"), "\(check)")
            try await withDaemon(rig: nil, arguments: ["--voices", library], device: "null") { daemon in
                #expect(daemon.log.contains(warning), "\(daemon.log)")
            }
        }

        @Test func outputJSONAndExitStatuses() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let said = try await daemon.ctl(["say", "--json", "--wait", "--order", "E-1", "12.30"])
                #expect(said.status == 0, "\(said)")
                let lines = said.stdout.split(separator: "\n").map {
                    try? JSONDecoder().decode(Response.self, from: Data($0.utf8))
                }
                #expect(lines.count == 2 && lines.allSatisfy { $0 != nil }, "one JSON reply per line: \(said.stdout)")
                #expect(lines.last??.job?.state == .spoken && lines.last??.job?.text == "到账十二点三元")

                let duplicate = try await daemon.ctl(["say", "--order", "E-1", "12.30"])
                #expect(duplicate.status == 3 && duplicate.stdout.contains("error: duplicate"), "\(duplicate)")
                #expect(duplicate.stdout.hasSuffix("; an order is announced once; announce-ctl replay repeats it\n"))
                let invalid = try await daemon.ctl(["say", "1.005"])
                #expect(invalid.status == 2 && invalid.stdout.contains("invalid_amount"), "\(invalid)")
                let language = try await daemon.ctl(["say", "-l", "fr", "1"])
                #expect(language.status == 2 && language.stdout.contains("unknown_language"), "\(language)")
                let prompt = try await daemon.ctl(["prompt", "no-such"])
                #expect(prompt.status == 2 && prompt.stdout.contains("not_found"), "\(prompt)")
                let usage = try await daemon.ctl(["say"])
                #expect(usage.status == 64, "\(usage)")

                // text takes --lang (the voice), -w (waits, and says how it ended) and -o (once only).
                let text = try await daemon.ctl(["text", "--json", "-w", "-l", "en", "-o", "T-1", "hello"])
                #expect(text.status == 0, "\(text)")
                let textJob = try JSONDecoder().decode(
                    Response.self, from: Data(try #require(text.stdout.split(separator: "\n").last).utf8)
                ).job
                #expect(textJob?.state == .spoken && textJob?.lang == "en" && textJob?.order == "T-1", "\(text)")
                let textAgain = try await daemon.ctl(["text", "-o", "T-1", "hello"])
                #expect(textAgain.status == 3 && textAgain.stdout.contains("error: duplicate"), "\(textAgain)")
                let textLanguage = try await daemon.ctl(["text", "--lang", "fr", "bonjour"])
                #expect(textLanguage.status == 2 && textLanguage.stdout.contains("unknown_language"), "\(textLanguage)")

                let history = try await daemon.ctl(["history"])
                #expect(
                    history.status == 0 && history.stdout.contains("spoken") && history.stdout.contains("order=E-1"))
                let queue = try await daemon.ctl(["queue"])
                #expect(queue.stdout.contains("the queue is empty"), "\(queue)")
                let status = try await daemon.ctl(["status"])
                #expect(status.stdout.contains("voices:   en (en-espeak), zh* (zh-espeak)"), "\(status)")
                let volume = try await daemon.ctl(["volume", "65"])
                #expect(volume.stdout.contains("threshold 65% (set)"), "\(volume)")
                let cancel = try await daemon.ctl(["cancel", "99"])
                #expect(cancel.status == 2 && cancel.stdout.contains("not_found"), "\(cancel)")
                let metrics = try await daemon.ctl(["metrics"])
                #expect(metrics.stdout.contains("# TYPE announce_jobs_accepted_total counter"))
            }
            let unreachable = try await run("\(Paths.bin)/announce-ctl", ["status", "--socket", "/nonexistent/s.sock"])
            #expect(unreachable.status == 4 && unreachable.stderr.contains("cannot connect"))
        }
    }
}
