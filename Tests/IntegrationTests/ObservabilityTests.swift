import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// What an operator reads (issue 19): journal entries with fields, the metrics scraped over HTTP, versions.
    @Suite
    struct ObservabilityTests {
        static let isRoot = getuid() == 0

        /// Standard error as the journal stream, the way systemd describes it in `$JOURNAL_STREAM`.
        static func journalStream(_ file: String) throws -> [String: String] {
            #expect(FileManager.default.createFile(atPath: file, contents: nil))
            var info = stat()
            guard stat(file, &info) == 0 else { throw HarnessError("stat \(file)") }
            return ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"]
        }

        /// Under systemd each log record is a native journal entry: the payment's entries carry its order id,
        /// job id, channel, amount and state as fields and the kind of event as MESSAGE_ID, so that
        /// `journalctl ORDER_ID=…` finds them. Nothing of it goes to standard error.
        @Test(.enabled(if: isRoot, "needs root: a mount namespace stands in for journald's socket"))
        func logRecordsAreJournalEntriesWithTheJobsFields() async throws {
            let journal = try FakeJournal()
            let directory = try Paths.temporaryDirectory("jlog")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let stream = try Self.journalStream("\(directory)/announced.log")
            try await withDaemon(
                rig: nil, device: "null", directory: directory, environment: stream, launcher: journal.launcher
            ) { daemon in
                let said = try await daemon.ctl(["say", "--wait", "--order", "J-1", "--channel", "alipay", "1.23"])
                #expect(said.status == 0, "\(said)")
                let spoken = try await journal.waitForEntry { $0["ORDER_ID"] == "J-1" && $0["STATE"] == "spoken" }
                #expect(spoken["MESSAGE_ID"] == EventKind.spoken.messageID, "\(spoken)")
                #expect(spoken["JOB_ID"] == "1" && spoken["CHANNEL"] == "alipay" && spoken["AMOUNT_FEN"] == "123")
                #expect(spoken["PRIORITY"] == "6" && spoken["SYSLOG_IDENTIFIER"] == "announced")
                #expect(spoken["MESSAGE"]?.hasPrefix("job finished ") == true, "\(spoken)")
                #expect(spoken["CODE_FILE"] != nil && spoken["FIRST_SAMPLE_MS"] != nil)
                let accepted = try await journal.waitForEntry { $0["MESSAGE_ID"] == EventKind.accepted.messageID }
                #expect(accepted["ORDER_ID"] == "J-1" && accepted["STATE"] == "queued", "\(accepted)")
                let ready = try await journal.waitForEntry { $0["MESSAGE_ID"] == EventKind.started.messageID }
                #expect(ready["PRIORITY"] == "5" && ready["VERSION"] != nil, "\(ready)")

                let duplicate = try await daemon.ctl(["say", "--order", "J-1", "1.23"])
                #expect(duplicate.status == 3)
                let refused = try await journal.waitForEntry { $0["MESSAGE_ID"] == EventKind.duplicate.messageID }
                #expect(refused["ORDER_ID"] == "J-1" && refused["JOB_ID"] == "1", "\(refused)")
                #expect(!daemon.log.contains("job accepted"), "written to the journal, not to stderr:\n\(daemon.log)")
            }
        }

        /// The journal not listening (journald restarting): the records go to standard error as priority-prefixed
        /// lines, which journald's stream files at the right level.
        @Test(.enabled(if: isRoot, "needs root: a mount namespace hides any real journald"))
        func withoutAJournalLogRecordsAreLinesWithTheirPriority() async throws {
            let missing = try FakeJournal(listening: false)
            let directory = try Paths.temporaryDirectory("jlog")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let stream = try Self.journalStream("\(directory)/announced.log")
            try await withDaemon(
                rig: nil, device: "null", directory: directory, environment: stream, launcher: missing.launcher
            ) { daemon in
                let said = try await daemon.reply(Request(op: "say", amount: "1", order: "L 1", wait: true))
                #expect(said.ok, "\(said)")
                try await daemon.waitForLog("job finished")  // logged once the final state is published
                let lines = daemon.log.split(separator: "\n")
                #expect(
                    lines.contains { $0.hasPrefix("<6>announced: job accepted ") && $0.contains("order.id=\"L 1\"") },
                    "\(daemon.log)")
                #expect(lines.contains { $0.hasPrefix("<6>announced: job finished ") && $0.contains("event=spoken") })
            }
        }

        /// The metrics scraped over HTTP for real: jobs, payments and their amounts, the audio engine, the build;
        /// the payment totals come back after a restart (from the journal).
        @Test func metricsAreScrapedOverHTTPAndPaymentTotalsSurviveARestart() async throws {
            let directory = try Paths.temporaryDirectory("met")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let arguments = ["--metrics-listen", "127.0.0.1:0"]
            try await withDaemon(rig: nil, arguments: arguments, device: "null", directory: directory) { daemon in
                #expect(try await daemon.ctl(["say", "-w", "-o", "M-1", "100"]).status == 0)
                #expect(try await daemon.ctl(["say", "-w", "-o", "M-2", "--refund", "2.50"]).status == 0)
                #expect(try await daemon.ctl(["replay", "-w"]).status == 0)
                let metrics = try await daemon.scrape()
                #expect(HTTP.sample("announce_payments_total{state=\"spoken\"}", in: metrics) == 2, "\(metrics)")
                #expect(HTTP.sample("announce_payments_spoken_fen_total{kind=\"payment\"}", in: metrics) == 10_000)
                #expect(HTTP.sample("announce_payments_spoken_fen_total{kind=\"refund\"}", in: metrics) == 250)
                #expect(HTTP.sample("announce_jobs_finished_total{state=\"spoken\"}", in: metrics) == 3)
                #expect(HTTP.sample("announce_jobs_accepted_total{priority=\"urgent\"}", in: metrics) == 1)
                #expect(HTTP.sample("announce_first_sample_seconds_count", in: metrics) == 3)
                #expect(HTTP.sample("announce_queue_waiting{priority=\"payment\"}", in: metrics) == 0)
                #expect(HTTP.sample("announce_audio_device_state{state=\"idle\"}", in: metrics) == 1)
                #expect((HTTP.sample("announce_audio_pcm_opens_total", in: metrics) ?? 0) >= 1)
                #expect(metrics.contains("announce_build_info{version=\""), "\(metrics)")
                #expect(metrics.contains("# HELP announce_payments_total "))
                // docs/configuration.md lists every metric served.
                let docs = try String(contentsOfFile: "\(Paths.root)/docs/configuration.md", encoding: .utf8)
                let served = metrics.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map {
                    $0.split(separator: " ")[2]
                }
                #expect(served.count >= 20, "\(served)")
                for name in served { #expect(docs.contains("| `\(name)` |"), "\(name) is not in docs/configuration.md") }
                let status = try await daemon.ctl(["status"])
                #expect(status.stdout.contains("metrics:  http://127.0.0.1:"), "\(status)")
            }
            try await withDaemon(rig: nil, arguments: arguments, device: "null", directory: directory) { daemon in
                let metrics = try await daemon.scrape()
                #expect(HTTP.sample("announce_payments_total{state=\"spoken\"}", in: metrics) == 2, "\(metrics)")
                #expect(HTTP.sample("announce_payments_spoken_fen_total{kind=\"payment\"}", in: metrics) == 10_000)
                #expect(HTTP.sample("announce_jobs_finished_total{state=\"spoken\"}", in: metrics) == 0, "this run's")
            }
        }

        /// `announce-ctl status` at a glance (issue 19): which daemon and for how long, the device and its state with
        /// the xruns since start, the volume now with whose it is, the alert threshold and the owner's everyday
        /// level, the queue, and the last payment heard with when — each on the line a support call reads out.
        @Test func statusAtAGlanceSaysWhichDaemonTheDeviceVolumeQueueLastPaymentAndXruns() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")  // 20 %
                let arguments = ["--mixer", "pulse", "--volume-threshold", "60%"]
                try await withDaemon(rig: rig, arguments: arguments) { daemon in
                    let before = try await daemon.ctl(["status"])
                    #expect(before.stdout.contains("last paid: none heard yet"), "\(before)")
                    #expect(try await daemon.ctl(["volume", "--level", "40"]).status == 0)
                    let say = try await daemon.ctl(["say", "-w", "-o", "GLANCE-1", "-c", "alipay", "8.50"])
                    #expect(say.status == 0, "\(say)")
                    try await daemon.waitUntilBurstEnded()
                    let status = try await daemon.ctl(["status"])
                    #expect(status.status == 0, "\(status)")
                    let lines = status.stdout.split(separator: "\n").map(String.init)
                    #expect(lines.count >= 5, "\(status)")
                    guard lines.count >= 5 else { return }
                    #expect(lines[0].hasPrefix("announced 0.") && lines[0].contains("(commit ")
                                && lines[0].contains(", up ") && lines[0].contains(" s, protocol "), "\(lines[0])")
                    #expect(lines[1] == "device:   pulse — idle, 0 xruns since start", "\(lines[1])")
                    #expect(lines[2] == "volume:   pulse/Master 40% (the owner's), alert threshold 60% (config), "
                                + "everyday level 40%", "\(lines[2])")
                    #expect(lines[3].hasPrefix("queue:    0 waiting, capacity "), "\(lines[3])")
                    #expect(lines[3].hasSuffix("playing nothing"), "\(lines[3])")
                    #expect(lines[4].hasPrefix("last paid: 支付宝到账八点五元 (job 1, 8.50, alipay, order GLANCE-1), heard 20"),
                            "\(lines[4])")
                    #expect(lines[4].hasSuffix(" s ago") && lines[4].contains(" UTC, "), "\(lines[4])")
                }
            }
        }

        /// Metrics asked for on a port another program holds: the daemon starts and speaks anyway, and says — in
        /// its log at error level and in `status` — why there are no metrics and what to do.
        @Test func aTakenMetricsPortIsAnErrorTheDaemonSpeaksThrough() async throws {
            let holder = try HTTPListener()
            let arguments = ["--metrics-listen", "127.0.0.1:\(holder.port)"]
            try await withDaemon(rig: nil, arguments: arguments, device: "null") { daemon in
                #expect(try await daemon.ctl(["say", "-w", "1"]).status == 0, "payments are spoken")
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.metrics?.serving == nil, "\(String(describing: status.metrics))")
                #expect(status.metrics?.error?.contains("in use by another program") == true)
                #expect(daemon.log.contains("error announced: metrics endpoint off: cannot listen"), "\(daemon.log)")
                #expect(daemon.log.contains("event=metrics-unavailable"))
                let shown = try await daemon.ctl(["status"])
                #expect(shown.stdout.contains("metrics:  NOT SERVING"), "\(shown)")
            }
        }

        /// A metrics address that cannot be one is a configuration error: named, with an example, before anything
        /// starts.
        @Test func anInvalidMetricsAddressIsAConfigurationError() async throws {
            let flag = try await run(
                "\(Paths.bin)/announced", ["--metrics-listen", "example.com:9464", "--check-config"])
            #expect(flag.status == 64, "\(flag)")
            #expect(flag.stderr.contains("--metrics-listen: \"example.com:9464\" does not name an IP address"))
            let directory = try Paths.temporaryDirectory("mcf")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let file = "\(directory)/a.toml"
            try "voices = \"\(Paths.voices)\"\n[metrics]\nlisten = \"127.0.0.1:70000\"\n"
                .write(toFile: file, atomically: true, encoding: .utf8)
            let config = try await run("\(Paths.bin)/announced", ["--config", file, "--check-config"])
            #expect(config.status == 1, "\(config)")
            #expect(config.stderr.contains("metrics.listen: \"127.0.0.1:70000\" has no port 0…65535"), "\(config)")
            try "voices = \"\(Paths.voices)\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n"
                .write(toFile: file, atomically: true, encoding: .utf8)
            let good = try await run("\(Paths.bin)/announced", ["--config", file, "--check-config"])
            #expect(good.status == 0 && good.stdout.contains("listen = \"127.0.0.1:9464\""), "\(good)")
        }

        /// Every program says its version and the commit it was built from, the same for all (one executable).
        @Test func everyProgramAnswersVersion() async throws {
            var lines: [String] = []
            for program in ["announce", "announced", "announce-ctl", "announce-push"] {
                let result = try await run("\(Paths.bin)/\(program)", ["--version"])
                #expect(result.status == 0, "\(program): \(result)")
                let line = result.stdout.trimmingCharacters(in: .newlines)
                #expect(
                    line.wholeMatch(of: /[a-z-]+ \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)/) != nil,
                    "\(program): \(line)")
                #expect(line.hasPrefix("\(program) "))
                lines.append(String(line.drop { $0 != " " }))
            }
            #expect(Set(lines).count == 1, "\(lines)")
        }
    }
}

/// A TCP listener on a free loopback port, holding it for as long as it lives (a port "another program" uses).
final class HTTPListener {
    let descriptor: Int32
    let port: Int

    init() throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let fd = descriptor
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard ok else { throw HarnessError("cannot hold a port: \(String(cString: strerror(errno)))") }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
