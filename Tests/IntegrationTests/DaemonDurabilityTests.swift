import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// Exactly-once across restarts, crashes and signals, checked through the journal (`history`, `status`) and,
    /// on the rig, through what was actually played.
    @Suite
    struct DaemonDurabilityTests {
        let pack: VoicePack

        init() throws {
            pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        }

        func rendered(_ amount: String) throws -> [Int16] {
            try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
        }

        func history(_ daemon: DaemonProcess) async throws -> [UInt64: JobInfo] {
            let jobs = try #require(try await daemon.reply(Request(op: "history", limit: 100)).jobs)
            return Dictionary(uniqueKeysWithValues: jobs.map { ($0.id, $0) })
        }

        @Test func duplicatesAreRefusedAcrossARestartAndHistorySurvives() async throws {
            try await withDaemonSet { _, directory in
                let original = try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                    try await daemon.reply(Request(op: "say", amount: "66.60", order: "R-1", wait: true))
                }
                #expect(original.job?.state == .spoken)
                try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                    let again = try await daemon.reply(Request(op: "say", amount: "66.60", order: "R-1"))
                    #expect(again.error?.code == "duplicate", "\(again)")
                    #expect(again.job?.id == original.job?.id && again.job?.state == .spoken)
                    #expect(try await history(daemon)[1]?.order == "R-1")
                    let replay = try await daemon.reply(Request(op: "replay", wait: true))
                    #expect(replay.job?.replayOf == 1 && replay.job?.state == .spoken, "replay survives restarts too")
                    #expect(try await daemon.reply(Request(op: "status")).status?.journal.dedupOrders == 1)
                }
            }
        }

        @Test func anAcceptedReplyMeansJournaledEvenIfTheDaemonIsKilledAtOnce() async throws {
            try await withDaemonSet { daemons, directory in
                let killed = try await daemons.start(rig: nil, device: "null", directory: directory)
                // Accepted on the rig-less null device, then SIGKILL right after the reply: nothing is lost.
                let reply = try await killed.reply(Request(op: "say", amount: "5", order: "K-1"))
                #expect(reply.ok)
                #expect(try await killed.stop(signal: SIGKILL) == 128 + SIGKILL)
                try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                    try await daemon.waitUntilIdle()
                    let job = try #require(try await history(daemon)[1])
                    #expect(job.order == "K-1")
                    // Spoken before the kill (the null device plays at once), or else spoken after the restart.
                    #expect(job.state == .spoken, "\(job)")
                    #expect(
                        try await daemon.reply(Request(op: "say", amount: "5", order: "K-1")).error?.code == "duplicate"
                    )
                }
            }
        }

        @Test func killNineWhilePlayingSpeaksThatJobAgainInFullThenTheRestOnce() async throws {
            let amounts = ["1", "987654321.99", "1005", "10010", "0.05"]
            let renders = try amounts.map(rendered)
            try await withRig { rig in
                try await withDaemonSet { daemons, directory in
                    let first = try await daemons.start(rig: rig, directory: directory)
                    let killedIn = try await rig.capture {
                        for amount in amounts {
                            #expect(try await first.reply(Request(op: "say", amount: amount)).ok)
                        }
                        // Well into job 2: its start is journaled, its end is not …
                        try await first.waitUntilStarted(2)
                        // … and it is heard: its start is journaled when it is written, which is up to a buffer
                        // (320 ms) before the device plays it.
                        let heard = try await eventually(timeout: .seconds(20)) {
                            let so = AudioMatch.hearings(of: renders, in: rig.capturedSoFar())
                            return so.count >= 2 && so[1].best != nil
                        }
                        try #require(heard, "job 2 was never heard starting")
                        #expect(try await first.stop(signal: SIGKILL) == 128 + SIGKILL)
                    }
                    var second: DaemonProcess?
                    let captured = try await rig.capture {
                        let daemon = try await daemons.start(rig: rig, directory: directory)
                        second = daemon
                        try await daemon.waitUntilIdle()
                    }
                    let daemon = try #require(second)
                    let jobs = try await history(daemon)
                    for id in UInt64(1)...5 {
                        #expect(jobs[id]?.state == .spoken, "job \(id): \(String(describing: jobs[id]))")
                    }
                    #expect(jobs[2]?.attempts == 2, "job 2 was played again from its start")
                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect(status.journal.recoveredAtStart == 4 && status.journal.interruptedAtStart == 1)

                    // Before the kill: job 1 whole, then the start of job 2 cut off.
                    let before = AudioMatch.hearings(of: renders, in: killedIn)
                    // (A fragment that stops inside the prefix all payments share may match job 1 just as far.)
                    #expect(before.count == 2 && before.map(\.complete) == [true, false], "\(before)")
                    #expect(before.first?.best == 0 && before.last.map { $0.matched[1] == $0.matched.max() } == true)
                    // After the restart: job 2 whole (from its start), then 3, 4, 5, each once, and nothing more.
                    let after = AudioMatch.hearings(of: renders, in: captured)
                    #expect(after.map(\.best) == [1, 2, 3, 4] && after.allSatisfy(\.complete), "\(after)")
                }
            }
        }

        @Test func sigtermFinishesTheAnnouncementPlayingAndKeepsTheRest() async throws {
            let amounts = ["12345.67", "8.50", "1005"]
            try await withRig { rig in
                try await withDaemonSet { daemons, directory in
                    let daemon = try await daemons.start(rig: rig, directory: directory)
                    var status: Int32 = -1
                    let captured = try await rig.capture {
                        for amount in amounts { _ = try await daemon.reply(Request(op: "say", amount: amount)) }
                        try await daemon.waitForStatus { $0.queue.playing == 1 }
                        daemon.signal(SIGTERM)
                        try await daemon.waitForStatus { $0.state == "stopping" }
                        let refused = try await daemon.reply(Request(op: "say", amount: "1"))
                        #expect(refused.error?.code == "shutting_down", "\(refused)")
                        status = try await daemon.waitForExit()
                    }
                    #expect(status == 0, "\(daemon.log)")
                    // Job 1 was heard in full, and only job 1.
                    let first = try rendered(amounts[0])
                    #expect(AudioMatch.correlation(expected: first, captured: captured).value > 0.95)
                    let heard = try #require(AudioMatch.end(captured)) - (try #require(AudioMatch.onset(captured)))
                    let want = try #require(AudioMatch.end(first)) - (try #require(AudioMatch.onset(first)))
                    #expect(abs(heard - want) < pack.sampleRate / 10, "heard \(heard) samples, expected \(want)")

                    try await withDaemon(rig: rig, directory: directory) { restarted in
                        try await restarted.waitUntilIdle()
                        let jobs = try await history(restarted)
                        #expect([1, 2, 3].map { jobs[$0]?.state } == [.spoken, .spoken, .spoken], "\(jobs)")
                        #expect(try await restarted.reply(Request(op: "status")).status?.journal.recoveredAtStart == 2)
                    }
                }
            }
        }

        @Test func aShutdownThatRunsOutOfTimeCutsTheAnnouncementAndTheNextStartSpeaksItInFull() async throws {
            try await withRig { rig in
                try await withDaemonSet { daemons, directory in
                    let daemon = try await daemons.start(
                        rig: rig, arguments: ["--shutdown-timeout", "0.5"], directory: directory)
                    var status: Int32 = -1
                    let cut = try await rig.capture {
                        _ = try await daemon.reply(Request(op: "say", amount: "987654321.99"))
                        try await daemon.waitUntilStarted(1)
                        daemon.signal(SIGTERM)
                        status = try await daemon.waitForExit()
                    }
                    #expect(status == 0, "\(daemon.log)")
                    let whole = try rendered("987654321.99")
                    let heard = AudioMatch.hearings(of: [whole], in: cut)
                    #expect(heard.count == 1 && heard.first?.complete == false, "cut: \(heard)")
                    #expect(daemon.log.contains("spoken again at the next start"), "the log says what happens next")
                    var restarted: DaemonProcess?
                    let again = try await rig.capture {
                        let second = try await daemons.start(rig: rig, directory: directory)
                        restarted = second
                        try await second.waitUntilIdle()
                    }
                    let second = try #require(restarted)
                    let job = try #require(try await history(second)[1])
                    #expect(job.state == .spoken && job.attempts == 2, "\(job)\n\(second.log)")
                    #expect(try await second.reply(Request(op: "status")).status?.journal.recoveredAtStart == 1)
                    let replayed = AudioMatch.hearings(of: [whole], in: again)
                    #expect(replayed.count == 1 && replayed.first?.complete == true, "heard whole: \(replayed)")
                }
            }
        }

        @Test func aJobWhoseTTLPassedWhileTheDaemonWasDownExpiresInsteadOfPlaying() async throws {
            try await withRig { rig in
                try await withDaemonSet { daemons, directory in
                    let first = try await daemons.start(rig: rig, directory: directory)
                    _ = try await first.reply(Request(op: "say", amount: "987654321.99"))
                    let late = try await first.reply(Request(op: "say", amount: "2", ttl: 1))
                    let patient = try await first.reply(Request(op: "say", amount: "3", ttl: 600))
                    try await first.waitForStatus { $0.queue.playing == 1 }
                    #expect(try await first.stop(signal: SIGKILL) == 128 + SIGKILL)
                    try await Task.sleep(for: .milliseconds(1_200))
                    let second = try await daemons.start(rig: nil, device: "null", directory: directory)
                    try await second.waitUntilIdle()
                    let jobs = try await history(second)
                    let lateID = try #require(late.job?.id)
                    let patientID = try #require(patient.job?.id)
                    #expect(jobs[lateID]?.state == .expired, "\(String(describing: jobs[lateID]))")
                    #expect(jobs[patientID]?.state == .spoken, "\(String(describing: jobs[patientID]))")
                }
            }
        }

        @Test func sighupReloadsConfigAndVoicesWithoutDroppingTheQueue() async throws {
            try await withRig { rig in
                try await withDaemonSet { _, directory in
                    let voices = "\(directory)/voices"
                    try FileManager.default.createDirectory(atPath: voices, withIntermediateDirectories: true)
                    try FileManager.default.createSymbolicLink(
                        atPath: "\(voices)/zh", withDestinationPath: "\(Paths.voices)/zh")
                    let config = "\(directory)/announced.toml"
                    try "[queue]\ncapacity = 3\n".write(toFile: config, atomically: true, encoding: .utf8)
                    try await withDaemon(
                        rig: rig, arguments: ["--config", config, "--voices", voices], directory: directory
                    ) {
                        daemon in
                        #expect(
                            try await daemon.reply(Request(op: "say", amount: "1", lang: "en")).error?.code
                                == "unknown_language")
                        for amount in ["987654321.99", "2", "3"] {
                            #expect(try await daemon.reply(Request(op: "say", amount: amount)).ok)
                        }
                        try await daemon.waitForStatus { $0.queue.playing == 1 }

                        // A broken file is refused and changes nothing.
                        try "[queue]\ncapasity = 10\n".write(toFile: config, atomically: true, encoding: .utf8)
                        daemon.signal(SIGHUP)
                        try await daemon.waitForLog("reload failed")
                        #expect(try await daemon.reply(Request(op: "status")).status?.queue.capacity == 3)
                        // A good one takes effect: another pack, another bound; the queue is untouched.
                        try FileManager.default.createSymbolicLink(
                            atPath: "\(voices)/en", withDestinationPath: "\(Paths.voices)/en")
                        try "[queue]\ncapacity = 10\n".write(toFile: config, atomically: true, encoding: .utf8)
                        daemon.signal(SIGHUP)
                        let status = try await daemon.waitForStatus { $0.voices.count == 2 }
                        #expect(status.queue.capacity == 10)
                        #expect(
                            status.queue.playing == 1 && status.queue.waiting == 2,
                            "the queue was kept: \(status.queue)")
                        #expect(try await daemon.reply(Request(op: "say", amount: "1", lang: "en")).ok)
                        try await daemon.waitUntilIdle()
                        let jobs = try await history(daemon)
                        #expect(
                            (1...4).map { jobs[UInt64($0)]?.state } == [.spoken, .spoken, .spoken, .spoken], "\(jobs)")
                    }
                }
            }
        }
    }
}
