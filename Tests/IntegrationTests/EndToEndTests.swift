import AnnounceCore
import AnnounceSound
import Foundation
import AnnounceTestSupport
import Testing

/// The whole path for real: announce-ctl → Unix socket → announced → queue → clips → ALSA PCM → the rig's
/// sink, captured from its monitor and compared with the same announcement rendered offline.
@Suite(.serialized)
struct EndToEndTests {
    let pack: VoicePack

    init() throws {
        pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
    }

    func rendered(_ amount: String) throws -> [Int16] {
        try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
    }

    @Test func sayIsHeardAsTheExpectedAnnouncement() async throws {
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                var result: CommandResult?
                let captured = try await rig.capture {
                    result = try await daemon.ctl(["say", "--wait", "100.00"])
                }
                let reply = try #require(result)
                #expect(reply.status == 0, "announce-ctl failed: \(reply)\n\(daemon.log)")
                #expect(reply.stdout.contains("job 1 queued: 到账一百元"), "\(reply.stdout)")
                #expect(reply.stdout.contains("job 1 spoken"), "\(reply.stdout)")

                // Sample for sample 到账一百元 and nothing after it (rig glitches under load tolerated and reported).
                let heard = AudioMatch.compareSamples(
                    expected: try rendered("100.00"), captured: captured, startTolerance: 320)
                print("100.00: \(heard)")
                #expect(heard.failures.isEmpty, "captured audio is not 到账一百元: \(heard.failures)\n\(daemon.log)")
                let wrong = AudioMatch.compareSamples(expected: try rendered("200.00"), captured: captured)
                #expect(!wrong.failures.isEmpty, "到账二百元 matches as well")
            }
        }
    }

    @Test func silenceDoesNotPassForTheAnnouncement() async throws {
        // The comparison itself must fail on what a broken daemon would produce: nothing, or another amount.
        try await withRig { rig in
            let captured = try await rig.capture { try await Task.sleep(for: .milliseconds(500)) }
            let match = AudioMatch.correlation(expected: try rendered("100.00"), captured: captured)
            #expect(match.value < 0.5, "silence correlates \(match.value) with the announcement")
            let samples = AudioMatch.compareSamples(expected: try rendered("100.00"), captured: captured)
            #expect(!samples.failures.isEmpty, "silence passes for the announcement: \(samples)")
        }
    }

    @Test func secondSayWhileTheFirstPlaysIsPlayedAfterItInFull() async throws {
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                var first: CommandResult?
                var second: CommandResult?
                let captured = try await rig.capture {
                    first = try await daemon.ctl(["say", "12345.67"])
                    try await Task.sleep(for: .milliseconds(300))  // the first is playing now
                    second = try await daemon.ctl(["say", "--wait", "8.50"])
                }
                #expect(first?.status == 0 && second?.status == 0, "\(String(describing: first)) \(String(describing: second))")
                #expect(second?.stdout.contains("job 2 spoken") == true, "\(second?.stdout ?? "")\n\(daemon.log)")

                // The first announcement, the pause, then the second, each whole, sample for sample, nothing after.
                let a = try rendered("12345.67")
                let b = try rendered("8.50")
                let pause = [Int16](repeating: 0, count: 500 * 16)
                let both = AudioMatch.compareSamples(expected: a + pause + b, captured: captured, startTolerance: 320)
                print("12345.67 + 8.50: \(both)")
                #expect(both.failures.isEmpty, "the capture is not the first announcement then the second: \(both.failures)")
                let swapped = AudioMatch.compareSamples(expected: b + pause + a, captured: captured)
                #expect(!swapped.failures.isEmpty, "order not distinguishable")
            }
        }
    }

    /// Two payments queued back to back are heard as two: each whole, with a clear pause between the last
    /// audible sample of the first and the first of the second (issue 17: 300–1500 ms), and none before the
    /// first beyond the lead-in.
    @Test func twoPaymentsQueuedTogetherAreHeardAsTwoWithAPauseBetween() async throws {
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                let amounts = ["100", "50"]
                let captured = try await rig.capture {
                    for amount in amounts {
                        #expect(try await daemon.reply(Request(op: "say", amount: amount, channel: "alipay")).ok)
                    }
                    try await daemon.waitUntilIdle()
                }
                let pack = self.pack
                let renders = try amounts.map { amount in
                    try pack.render(
                        pack.composer.compose(
                            .payment(amount: try Amount(parsing: amount), channel: "alipay", refund: false),
                            options: nil))
                }
                let heard = AudioMatch.hearings(of: renders, in: captured)
                #expect(heard.map(\.best) == [0, 1] && heard.allSatisfy(\.complete), "\(heard)")
                guard heard.count == 2 else { return }
                let lastOfFirst = try #require(captured[heard[0].start..<heard[1].start].lastIndex { abs(Int32($0)) >= 64 })
                let gapMs = Double(heard[1].start - lastOfFirst) / 16
                print("pause between two payments: \(gapMs) ms")
                #expect(gapMs >= 300 && gapMs <= 1500, "\(gapMs) ms between them")
            }
        }
    }

    @Test func refusedAmountGivesAClearErrorAndExitStatus() async throws {
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                let result = try await daemon.ctl(["say", "--", "-5"])
                #expect(result.status == 2)
                #expect(result.stdout.contains("invalid_amount"), "\(result)")
            }
        }
        let unreachable = try await run("\(Paths.bin)/announce-ctl", ["say", "--socket", "/nonexistent/s.sock", "1"])
        #expect(unreachable.status == 4)
        #expect(unreachable.stderr.contains("cannot connect"))
    }
}
