import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// What the shop hears and sets, through the real daemon on the real rig: the everyday volume level (amixer and the
/// captured loudness), the day's total (what `today` prints and what is heard), the terminal's reading style.
/// The hardware keys themselves need input devices, which only the VM has (Tests/SystemTests); here: a daemon
/// told to read devices that cannot be used keeps running.
extension DaemonIntegration {
    @Suite
    struct ShopTests {
        let pack: VoicePack
        let english: VoicePack

        init() throws {
            pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
            english = try VoicePackLoader.load(directory: "\(Paths.voices)/en")
        }

        func rendered(_ amount: String, channel: String = "plain", options: ReadingOptions? = nil) throws -> [Int16] {
            try pack.render(pack.composer.compose(amount: Amount(parsing: amount), channel: channel, options: options))
        }

        /// The one loud stretch of a capture, compared with `expected`: correlation, and the gain it was heard at.
        func heard(_ expected: [Int16], in captured: [Int16]) -> (correlation: Double, gain: Double) {
            let match = AudioMatch.correlation(expected: expected, captured: captured)
            let start = max(0, match.lag)
            let gain = AudioMatch.rms(captured[start..<min(captured.count, start + expected.count)])
                / AudioMatch.rms(expected)
            return (match.value, gain)
        }

        @Test func theEverydayLevelIsSetAndReadAndAlertsStillReachTheThreshold() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")  // 20 %
                let directory = try Paths.temporaryDirectory("level")
                defer { try? FileManager.default.removeItem(atPath: directory) }
                let arguments = ["--mixer", "pulse", "--volume-threshold", "60%"]
                try await withDaemon(rig: rig, arguments: arguments, directory: directory) { daemon in
                    let shown = try await daemon.ctl(["volume"])
                    #expect(shown.status == 0 && shown.stdout.contains("level 20%, threshold 60% (config)"), "\(shown)")

                    // 40 %: below the threshold. amixer shows it; an alert is raised to 60 % and comes back to 40 %.
                    let set = try await daemon.ctl(["volume", "--level", "40"])
                    #expect(set.status == 0 && set.stdout.contains("level 40%"), "\(set)")
                    #expect(try await rig.mixer() == Rig.MixerValue(raw: 26215, on: true), "40 % as amixer sets it")
                    var during: Rig.MixerValue?
                    let quiet = try await rig.capture {
                        #expect(try await daemon.ctl(["say", "12.34"]).status == 0)
                        during = try await rig.waitForMixer() { $0.raw != 26215 }
                        try await daemon.waitUntilBurstEnded()
                    }
                    #expect(during?.raw == 39322, "the alert is raised to the threshold")
                    #expect(try await rig.mixer().raw == 26215, "and the owner's 40 % comes back")
                    let first = heard(try rendered("12.34"), in: quiet)
                    #expect(first.correlation > 0.9 && abs(first.gain - 0.216) < 0.05, "heard at \(first), not 0.6³")

                    // 80 %: above the threshold. Nothing is raised: the alert is heard at the owner's level.
                    #expect(try await daemon.ctl(["volume", "--level", "80"]).status == 0)
                    #expect(try await rig.mixer().raw == 52429)
                    let loud = try await rig.capture {
                        let said = try await daemon.ctl(["say", "--wait", "12.34"])
                        #expect(said.status == 0, "\(said)")
                    }
                    let second = heard(try rendered("12.34"), in: loud)
                    #expect(second.correlation > 0.9 && abs(second.gain - 0.512) < 0.08, "heard at \(second), not 0.8³")
                    #expect(try await rig.mixer().raw == 52429, "nothing to put back")

                    let status = try #require(try await daemon.reply(Request(op: "volume")).volume)
                    #expect(status.level == 80 && status.threshold == 60 && status.volume == 80)

                    // Out of range and malformed: refused, nothing changes.
                    let refused = try await daemon.reply(Request(op: "volume", level: 150))
                    #expect(refused.error?.code == "bad_request" && refused.error?.message.contains("0…100") == true)
                    // A value that cannot be used is 2, whoever finds it (README, "exit status").
                    #expect(try await daemon.ctl(["volume", "--level", "101"]).status == 2)
                    #expect(try await rig.mixer().raw == 52429)
                }
                // The level is in the journal: a mixer that forgot it (a power cut on bare ALSA) gets it back.
                try await rig.setMixer("19661")  // 30 %
                try await withDaemon(rig: rig, arguments: arguments, directory: directory) { daemon in
                    let mixer = try await rig.mixer()
                    #expect(mixer.raw == 52429, "\(daemon.log)")
                    #expect(daemon.log.contains("volume level put back as last set"))
                }
            }
        }

        @Test func withoutAMixerTheLevelCannotBeSetAndSaysWhy() async throws {
            try await withDaemon(rig: nil, arguments: ["--mixer", "none"], device: "null") { daemon in
                let result = try await daemon.ctl(["volume", "--level", "50"])
                #expect(result.status == 2 && result.stdout.contains("not_found"), "\(result)")
                #expect(result.stdout.contains("audio.mixer"), "\(result)")
            }
        }

        @Test func todayCountsThePaymentsHeardAndSpeaksThemWithTheAmountReader() async throws {
            try await withRig { rig in
                try await rig.setMixer("65536")
                try await withDaemon(rig: rig, arguments: ["--mixer", "pulse"]) { daemon in
                    // 0.10 + 0.20 + 1,234.50 (as a float would add them: 1234.8000000000002), a refund, a replay.
                    for amount in ["0.10", "0.20", "1,234.50"] {
                        #expect(try await daemon.ctl(["say", "-w", amount]).status == 0)
                    }
                    #expect(try await daemon.ctl(["say", "-w", "-r", "50"]).status == 0)
                    #expect(try await daemon.ctl(["replay", "-w"]).status == 0)
                    // A payment not heard: muted under the respect policy.
                    try await rig.setMixer("mute")
                    #expect(try await daemon.ctl(["say", "-w", "9.99"]).status == 5)
                    try await rig.setMixer("unmute")

                    let printed = try await daemon.ctl(["today"])
                    #expect(printed.status == 0, "\(printed)")
                    let expectedLine = "3 payments, 1,234.80 yuan; 1 refund, 50.00 yuan; 1 payment not heard"
                    #expect(printed.stdout.contains(expectedLine), "\(printed.stdout)")
                    let summary = try #require(try await daemon.reply(Request(op: "today")).summary)
                    #expect(summary.payments == DayTotals.Tally(count: 3, fen: 123_480))
                    #expect(summary.refunds == DayTotals.Tally(count: 1, fen: 5_000) && summary.unheard == 1)
                    #expect(summary.date == LocalDay.today.description)

                    var said: CommandResult?
                    let captured = try await rig.capture { said = try await daemon.ctl(["today", "--say", "-w"]) }
                    let result = try #require(said)
                    #expect(result.status == 0, "\(result)")
                    #expect(result.stdout.contains("今日收款三笔，共一千二百三十四点八元退款一笔，共五十元"), "\(result.stdout)")
                    let expected = try pack.render(pack.composer.compose(summary: summary.totals))
                    let comparison = AudioMatch.compareSamples(
                        expected: expected, captured: captured, startTolerance: 320)
                    #expect(comparison.failures.isEmpty, "the total heard is not the rendered one: \(comparison)")
                    // The spoken total is not a payment: the count is the same afterwards.
                    let after = try #require(try await daemon.reply(Request(op: "today")).summary)
                    #expect(after.payments.count == 3)

                    // Another day has nothing; a date that is not one is refused.
                    let yesterday = LocalDay(containing: LocalDay.today.bounds.startMs - 1)
                    let empty = try #require(try await daemon.reply(Request(op: "today", date: "\(yesterday)")).summary)
                    #expect(empty.payments.count == 0 && empty.refunds.count == 0)
                    let bad = try await daemon.ctl(["today", "--date", "2026-02-30"])
                    #expect(bad.status == 2 && bad.stdout.contains("does not exist"), "\(bad)")
                    let english = try await daemon.ctl(["today", "--say", "-w", "--lang", "en"])
                    let spoken = "payments today three total one thousand two hundred and thirty four"
                    #expect(english.stdout.contains(spoken), "\(english)")
                }
            }
        }

        @Test func theDayFollowsTheTerminalsTimeZone() async throws {
            // Kiribati (UTC+14) and Baker Island (UTC−12): at every instant they are on different dates.
            let directory = try Paths.temporaryDirectory("zone")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let arguments = ["--mixer", "none"]
            let eastDay = try await withDaemon(
                rig: nil, arguments: arguments, device: "null", directory: directory, environment: ["TZ": "LINT-14"]
            ) { east in
                #expect(try await east.ctl(["say", "-w", "8.80"]).status == 0)
                let day = try #require(try await east.reply(Request(op: "today")).summary)
                #expect(day.payments.count == 1 && day.zone == "LINT" && day.utcOffset == "+14:00")
                #expect(day.from.hasSuffix("T10:00:00.000Z"), "midnight at +14 is 10:00 UTC the day before")
                return day
            }
            try await withDaemon(
                rig: nil, arguments: arguments, device: "null", directory: directory, environment: ["TZ": "BIT+12"]
            ) { west in
                let westDay = try #require(try await west.reply(Request(op: "today")).summary)
                #expect(westDay.date != eastDay.date && westDay.payments.count == 1, "the same payment, its own day")
                #expect(westDay.from.hasSuffix("T12:00:00.000Z"))
                // The east's date is another day here, and the payment is not in it.
                let other = try #require(try await west.reply(Request(op: "today", date: eastDay.date)).summary)
                #expect(other.payments.count == 0, "\(other)")
            }
        }

        @Test func theTerminalsReadingStyleAppliesPerChannelUnlessTheRequestSays() async throws {
            try await withRig { rig in
                let directory = try Paths.temporaryDirectory("reading")
                defer { try? FileManager.default.removeItem(atPath: directory) }
                let config = "\(directory)/announced.toml"
                try """
                    [reading]
                    style = "units"
                    liang = true
                    [reading.channels.wechat]
                    style = "decimal"
                    liang = false
                    """.write(toFile: config, atomically: true, encoding: .utf8)
                try await withDaemon(rig: rig, arguments: ["--config", config, "--mixer", "none"]) { daemon in
                    var plain: CommandResult?
                    let captured = try await rig.capture { plain = try await daemon.ctl(["say", "-w", "2.50"]) }
                    #expect(plain?.stdout.contains("到账两元五角") == true, "\(String(describing: plain))")
                    let expected = try rendered("2.50", options: ReadingOptions(style: .units, liang: true))
                    let comparison = AudioMatch.compareSamples(
                        expected: expected, captured: captured, startTolerance: 320)
                    #expect(comparison.failures.isEmpty, "not heard as 到账两元五角: \(comparison)")

                    let wechat = try await daemon.ctl(["say", "-c", "wechat", "2.50"])
                    #expect(wechat.stdout.contains("微信收款二点五元"), "\(wechat)")
                    let asked = try await daemon.ctl(["say", "--style", "decimal", "2.50"])
                    #expect(asked.stdout.contains("到账两点五元") == false && asked.stdout.contains("到账二点五元"),
                            "the request's own style wins, 两 from the terminal stays (a number before 点 keeps 二)")
                    let history = try await daemon.reply(Request(op: "history", limit: 3)).jobs ?? []
                    #expect(history.map(\.text) == ["到账二点五元", "微信收款二点五元", "到账两元五角"])
                }
            }
        }

        @Test func keysOnDevicesThatCannotBeUsedAreLoggedAndTheDaemonRuns() async throws {
            let directory = try Paths.temporaryDirectory("keys")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let config = "\(directory)/announced.toml"
            try """
                [keys]
                enabled = true
                devices = ["/dev/null", "/dev/input/by-id/usb-no-such-keypad-event-kbd", "name:No Such Keypad"]
                """.write(toFile: config, atomically: true, encoding: .utf8)
            let arguments = ["--config", config, "--mixer", "none"]
            try await withDaemon(rig: nil, arguments: arguments, device: "null") { daemon in
                try await daemon.waitForLog("/dev/null is not an input event device")
                try await daemon.waitForLog("input device not present")
                #expect(daemon.log.contains("usb-no-such-keypad"))
                #expect(try await daemon.ctl(["say", "-w", "1.00"]).status == 0, "the daemon works on")
            }
        }

        @Test func unknownKeyNamesStopTheDaemonWithTheKeyNamed() async throws {
            let directory = try Paths.temporaryDirectory("badkeys")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let config = "\(directory)/announced.toml"
            let text = "[keys]\nenabled = true\nvolume_up = \"KEY_LOUDER\"\n"
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            let check = try await run("\(Paths.bin)/announced", ["--config", config, "--check-config"])
            #expect(check.status == 1, "\(check)")
            #expect(check.stderr.contains("keys.volume_up: unknown key \"KEY_LOUDER\""), "\(check.stderr)")
        }

        @Test func theDaysTotalIsSpokenAtItsTimeOfDay() async throws {
            // The next whole minute at least 30 s away, on the daemon's clock (UTC here).
            let now = WallClock.nowMs
            let at = (now + 30_000 + 59_999) / 60_000 * 60_000
            let minutes = Int(at / 60_000 % 1440)
            let time = "\(minutes / 60 < 10 ? "0" : "")\(minutes / 60):\(minutes % 60 < 10 ? "0" : "")\(minutes % 60)"
            let directory = try Paths.temporaryDirectory("sayat")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let config = "\(directory)/announced.toml"
            try "[summary]\nsay_at = \"\(time)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
            try await withDaemon(
                rig: nil, arguments: ["--config", config, "--mixer", "none"], device: "null",
                environment: ["TZ": "UTC0"]
            ) { daemon in
                #expect(try await daemon.ctl(["say", "-w", "3.00"]).status == 0)
                try await daemon.waitForLog("the day's total, at summary.say_at", timeout: .seconds(150))
                try await daemon.waitUntilIdle()
                let jobs = try await daemon.reply(Request(op: "history", limit: 1)).jobs ?? []
                #expect(jobs.first?.text == "今日收款一笔，共三元" && jobs.first?.state == .spoken, "\(jobs)")
                #expect(WallClock.nowMs >= at, "spoken at \(time), not before")
            }
        }
    }
}
