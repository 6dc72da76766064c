import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// Faults from outside (issue 8): SIGKILL at random points of an announcement, a full disk under the journal.
    @Suite
    struct FaultInjectionTests {
        /// What one round of the kill test saw.
        struct Round: CustomStringConvertible {
            var index: Int
            var delayMs: Int
            var accepted: Bool
            /// Milliseconds of sound heard on the rig between the request and the kill.
            var heardMs: Int
            /// The rig's Master volume (raw) just before the kill, and once the next start has spoken what it
            /// recovered.
            var volumeAtKill: Int
            var volumeAfter = -1
            /// What the next start made of the job: spoken before the kill, recovered (spoken again from its
            /// start), or interrupted (not spoken again).
            var fate = "?"
            var description: String {
                "round \(index): kill after \(delayMs) ms, accepted \(accepted), heard \(heardMs) ms, \(fate), "
                    + "volume \(volumeAtKill) at the kill, \(volumeAfter) after"
            }
        }

        /// Each round: start the daemon on the state the last one left, let it finish what it recovered, ask
        /// for one payment and SIGKILL the daemon at a random moment from just after the request to just after
        /// the announcement's end, recording what the rig heard. Then, across all rounds: every accepted payment
        /// is in the journal once and finished; a payment the next start speaks again was not heard before the
        /// kill (beyond a fragment shorter than a syllable); one it does not speak again was heard. The owner's
        /// volume (30 %, below the 80 % threshold each announcement raises it to) is back after every kill.
        @Test func killNineAtRandomPointsLosesNothingAndSpeaksNothingTwice() async throws {
            let rounds = 100
            var seen: [Round] = []
            let volume = ["--mixer", "pulse", "--volume-threshold", "80%"]
            try await withRig { rig in
                try await rig.setMixer("30%")
                let owners = try await rig.mixer()
                try await withDaemonSet { daemons, directory in
                    for index in 0..<rounds {
                        let daemon = try await daemons.start(rig: rig, arguments: volume, directory: directory)
                        let status = try #require(try await daemon.reply(Request(op: "status")).status)
                        if index > 0 {
                            seen[index - 1].fate =
                                status.journal.recoveredAtStart == 1
                                ? "recovered" : status.journal.interruptedAtStart == 1 ? "interrupted" : "finished"
                        }
                        try await daemon.waitUntilIdle()
                        // After what it recovered was spoken: a volume left raised would be taken for the owner's.
                        if index > 0 { seen[index - 1].volumeAfter = try await rig.mixer().raw }
                        // Announcements here last 1.0–1.7 s; kill anywhere in [0, 1.9 s).
                        let delayMs = Int.random(in: 0..<1900)
                        var accepted = false
                        var volumeAtKill = -1
                        let captured = try await rig.capture {
                            let reply = try await daemon.reply(
                                Request(op: "say", amount: "\(index + 1)", order: "K-\(index)"))
                            accepted = reply.ok
                            try await Task.sleep(for: .milliseconds(delayMs))
                            volumeAtKill = try await rig.mixer().raw
                            _ = try await daemon.stop(signal: SIGKILL)
                        }
                        let heard = AudioMatch.onset(captured).flatMap { onset in
                            AudioMatch.end(captured).map { $0 - onset }
                        }
                        seen.append(
                            Round(
                                index: index, delayMs: delayMs, accepted: accepted, heardMs: (heard ?? 0) / 16,
                                volumeAtKill: volumeAtKill))
                    }

                    try await withDaemon(rig: rig, arguments: volume, directory: directory) { daemon in
                        let status = try #require(try await daemon.reply(Request(op: "status")).status)
                        seen[rounds - 1].fate =
                            status.journal.recoveredAtStart == 1
                            ? "recovered" : status.journal.interruptedAtStart == 1 ? "interrupted" : "finished"
                        try await daemon.waitUntilIdle()
                        seen[rounds - 1].volumeAfter = try await rig.mixer().raw
                        let history = try #require(
                            try await daemon.reply(Request(op: "history", limit: rounds * 2)).jobs)
                        for round in seen where round.accepted {
                            let jobs = history.filter { $0.order == "K-\(round.index)" }
                            #expect(jobs.count == 1, "\(round): journaled once — \(jobs)")
                            let job = try #require(jobs.first)
                            switch round.fate {
                            case "recovered":
                                #expect(job.state == .spoken, "\(round): \(job)")
                                #expect(round.heardMs < 100, "\(round): heard before the kill and spoken again")
                            case "interrupted":
                                #expect(job.state == .failed && job.error?.code == "interrupted", "\(round): \(job)")
                                #expect(round.heardMs > 0, "\(round): never heard, yet not spoken again (lost)")
                            default:
                                #expect(job.state == .spoken, "\(round): \(job)")
                            }
                        }
                        #expect(seen.filter(\.accepted).count == history.count, "no job beyond the rounds' own")
                        for round in seen {
                            #expect(round.volumeAfter == owners.raw, "\(round): the owner's \(owners.raw) not restored")
                        }
                        // Not a vacuous check: many kills hit while the volume was raised.
                        let raised = seen.filter { $0.volumeAtKill > owners.raw }.count
                        #expect(raised > 10, "only \(raised) kills while the volume was raised")
                        #expect(try await rig.mixer() == owners, "muted or changed at the end")
                    }
                }
            }
            let fates = Dictionary(grouping: seen, by: \.fate).mapValues(\.count)
            let raised = seen.filter { $0.volumeAtKill > $0.volumeAfter }.count
            print(
                "kill -9 ×\(rounds): \(fates), not accepted before the kill: \(seen.filter { !$0.accepted }.count), "
                    + "killed with the volume raised: \(raised)")
        }

        /// The journal's disk fills up while payments are queued: new payments are refused with `journal` (the
        /// client keeps its payment and retries; nothing is accepted that is not journaled), the queued ones are
        /// still spoken, and once space is back payments are accepted again.
        @Test func aFullDiskRefusesNewJobsClearlyAndStillSpeaksTheQueuedOnes() async throws {
            let amounts = ["12345.67", "8.50", "1005"]
            try await withRig { rig in
                try await withSmallStateFilesystem(megabytes: 4) { directory, mount in
                    try await withDaemon(rig: rig, directory: directory) { daemon in
                        var refusals: [Response] = []
                        let captured = try await rig.capture {
                            for amount in amounts {
                                #expect(try await daemon.reply(Request(op: "say", amount: amount)).ok)
                            }
                            try fill(mount)
                            for index in 0..<5 {
                                let request = Request(op: "say", amount: "\(index + 1)", order: "F-\(index)")
                                refusals.append(try await daemon.reply(request))
                            }
                            try await daemon.waitForStatus { $0.queue.playing == nil && $0.queue.waiting == 0 }
                        }
                        for refusal in refusals {
                            #expect(refusal.error?.code == "journal", "\(refusal)")
                            #expect(refusal.error?.message.contains("journal") == true, "\(refusal)")
                        }
                        // The three queued payments were heard, in order.
                        let expected = try amounts.flatMap(rendered)
                        let match = AudioMatch.correlation(expected: expected, captured: captured)
                        #expect(
                            match.value > 0.9, "the queued payments were not all heard (\(match.value))\n\(daemon.log)")
                        #expect(try await daemon.reply(Request(op: "ping")).ok, "still serving")

                        // Space again: the refused payment is accepted on retry (it was never taken).
                        try FileManager.default.removeItem(atPath: "\(mount)/filler")
                        let retry = try await daemon.reply(Request(op: "say", amount: "1", order: "F-0", wait: true))
                        #expect(retry.ok && retry.job?.state == .spoken, "\(retry)")
                    }
                }
            }
        }

        func rendered(_ amount: String) throws -> [Int16] {
            let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
            return try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
        }

        /// Fills the file system at `directory` to the last byte.
        func fill(_ directory: String) throws {
            guard let file = fopen("\(directory)/filler", "w") else { throw HarnessError("cannot create the filler") }
            defer { fclose(file) }
            let block = [UInt8](repeating: 0xA5, count: 4096)
            while fwrite(block, 1, block.count, file) == block.count {}
            fflush(file)
            var byte: UInt8 = 1
            while fwrite(&byte, 1, 1, file) == 1 && fflush(file) == 0 {}
        }

        /// Runs `body` with a daemon folder whose `state/` (the journal) is a fresh tmpfs of `megabytes` (the
        /// tests run as root); unmounts and removes it afterwards.
        func withSmallStateFilesystem<T>(
            megabytes: Int, _ body: (_ directory: String, _ mount: String) async throws -> T
        ) async throws -> T {
            let directory = try Paths.temporaryDirectory("full")
            let mount = "\(directory)/state"
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
            let mounted = try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", mount])
            func cleanUp() async {
                _ = try? await run("/bin/umount", ["-l", mount])
                try? FileManager.default.removeItem(atPath: directory)
            }
            guard mounted.status == 0 else {
                await cleanUp()
                throw HarnessError("cannot mount a tmpfs: \(mounted)")
            }
            do {
                let result = try await body(directory, mount)
                await cleanUp()
                return result
            } catch {
                await cleanUp()
                throw error
            }
        }
    }
}
