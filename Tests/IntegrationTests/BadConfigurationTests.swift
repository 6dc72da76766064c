import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// Configuration values a typo or an attacker with the config file could give: each is a clear configuration
    /// error, at start, under `--check-config` and on a reload; nothing crashes (issue 16, item 8).
    @Suite
    struct BadConfigurationTests {
        func announced(_ arguments: [String]) async throws -> CommandResult {
            try await run("\(Paths.bin)/announced", arguments)
        }

        /// Durations too large for milliseconds in an Int64 used to pass `--check-config` (or crash it) and then
        /// kill the daemon at start with SIGILL.
        @Test func hugeDurationsAreConfigurationErrorsNotCrashes() async throws {
            let directory = try Paths.temporaryDirectory("dur")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let base = ["--voices", Paths.voices, "--state-dir", "\(directory)/state", "--socket", "\(directory)/s"]
            for (flag, key, range) in [
                ("--dedup-window", "queue.dedup_window", "0 … 366d"),
                ("--device-give-up", "audio.device_give_up", "0 … 1h"),
                ("--device-retry-max", "audio.device_retry_max", "100ms … 1m"),
                ("--shutdown-timeout", "limits.shutdown_timeout", "1ms … 1d"),
            ] {
                let result = try await announced(base + [flag, "1e300s", "--check-config"])
                #expect(result.status == 64, "\(flag): \(result)")
                #expect(
                    result.stderr.contains("\(flag): must be \(range), not 1e+300s (like \(key) in the config file)"),
                    "\(flag): \(result)")
            }
            for (section, key, range) in [
                ("queue", "dedup_window", "0 … 366d"), ("queue", "history_retention", "0 … 3660d"),
                ("audio", "device_give_up", "0 … 1h"), ("audio", "device_retry_max", "100ms … 1m"),
            ] {
                let file = "\(directory)/\(key).toml"
                try "[\(section)]\n\(key) = 9223372036854775807\n".write(
                    toFile: file, atomically: true, encoding: .utf8)
                for mode in [["--check-config"], []] {
                    let result = try await announced(base + ["--config", file] + mode)
                    #expect(result.status == 1, "\(key) \(mode): \(result)")
                    #expect(
                        result.stderr.contains(
                            "\(file): \(section).\(key): must be \(range), not 9.223372036854776e+18s"),
                        "\(key) \(mode): \(result)")
                }
            }
            #expect(
                !FileManager.default.fileExists(atPath: "\(directory)/state"), "no daemon got as far as its journal")

            // The push listener's `security.max_age` became milliseconds in every signature check.
            let push = "\(directory)/push.toml"
            try """
            device = "T9"
            [broker]
            url = "mqtt://127.0.0.1:1883"
            [security]
            max_age = "1e300s"
            [keys]
            k1 = "hex:00112233445566778899aabbccddeeff"
            """.write(toFile: push, atomically: true, encoding: .utf8)
            let checked = try await run("\(Paths.bin)/announce-push", ["check-config", "--config", push])
            #expect(checked.status == 2, "\(checked)")
            #expect(checked.stderr.contains("\(push): security.max_age: must be 1ms … 7d, not 1e+300s"), "\(checked)")
        }

        /// A SIGHUP to a file with an out-of-range duration used to kill the running daemon with its jobs queued;
        /// the reload is refused, the log says why, the running configuration stays, and every job is spoken.
        @Test func aReloadToAnOutOfRangeDurationKeepsTheRunningConfiguration() async throws {
            try await withRig { rig in
                let config = try Paths.temporaryDirectory("cfg")
                defer { try? FileManager.default.removeItem(atPath: config) }
                let file = "\(config)/announced.toml"
                try "[queue]\ndedup_window = \"2h\"\n".write(toFile: file, atomically: true, encoding: .utf8)
                try await withDaemon(rig: rig, arguments: ["--config", file]) { daemon in
                    for (amount, order) in [("987654321.99", "R1"), ("2", "R2"), ("3", "R3")] {
                        #expect(try await daemon.reply(Request(op: "say", amount: amount, order: order)).ok)
                    }
                    try await daemon.waitForStatus { $0.queue.playing != nil && $0.queue.waiting == 2 }

                    try "[queue]\ndedup_window = \"1e300s\"\nhistory_retention = 1e300\n".write(
                        toFile: file, atomically: true, encoding: .utf8)
                    daemon.signal(SIGHUP)
                    try await daemon.waitForLog("reload failed; the previous configuration stays in force")
                    let line = try #require(daemon.log.split(separator: "\n").first { $0.contains("reload failed") })
                    #expect(line.contains("queue.dedup_window: must be 0 … 366d, not 1e+300s"), "\(line)")
                    #expect(line.contains("queue.history_retention: must be 0 … 3660d, not 1e+300s"), "\(line)")

                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect(status.journal.dedupWindowSeconds == 7200, "the running window stays")
                    #expect(status.queue.waiting + (status.queue.playing == nil ? 0 : 1) >= 1, "\(status.queue)")
                    try await daemon.waitUntilIdle()
                    let history = try #require(try await daemon.reply(Request(op: "history", limit: 3)).jobs)
                    #expect(history.map(\.order) == ["R3", "R2", "R1"])
                    #expect(history.allSatisfy { $0.state == .spoken }, "\(history)")
                    let again = try await daemon.reply(Request(op: "say", amount: "2", order: "R2"))
                    #expect(again.error?.code == "duplicate", "the window still remembers: \(again)")
                }
            }
        }
    }
}
