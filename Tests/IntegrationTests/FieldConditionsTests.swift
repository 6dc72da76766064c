import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension DaemonIntegration {
    /// Issue 27, the daemon's side: a clock that is wrong or set while running, a state folder that cannot be used or
    /// fails while running, a speaker that is missing. (A kill while a payment's end is in dmix's ring: the VM.)
    /// Real daemons, real file systems (ext4 on a loop device, turned read-only by the kernel), real faketime.
    @Suite
    struct FieldConditionsTests {
        let pack: VoicePack

        init() throws {
            pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        }

        func history(_ daemon: DaemonProcess) async throws -> [JobInfo] {
            try #require(try await daemon.reply(Request(op: "history", limit: 100)).jobs)
        }

        // MARK: A failing disk

        /// The flash card under the state folder fails while the daemon runs (the kernel turns it read-only, as a
        /// worn card does): the daemon keeps speaking, says the journal is in memory (status, log, each accepted
        /// job) and still knows the orders it had. Such a card comes back only once checked and mounted again, which
        /// needs the daemon stopped (it maps its prepared clips from the state folder): the next start works on it.
        @Test func aDiskThatFailsWhileRunningDegradesAndKeepsSpeaking() async throws {
            try await FailingDisk.with { disk in
                try await withDaemonSet { daemons, _ in
                    let daemon = try await daemons.start(rig: nil, device: "null", directory: disk.directory)
                    let before = try await daemon.reply(Request(op: "say", amount: "5", order: "F-1", wait: true))
                    #expect(before.job?.state == .spoken && before.job?.durable == nil)

                    try await disk.fail()
                    let during = try await daemon.reply(Request(op: "say", amount: "6", order: "F-2", wait: true))
                    #expect(during.ok && during.job?.state == .spoken, "still spoken: \(during)")
                    #expect(during.job?.durable == false, "the reply says it is not on disk: \(during)")
                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect(status.journal.durable == false)
                    #expect(
                        status.journal.problem?.message == "the state folder \(disk.mount) is on a read-only file system",
                        "\(String(describing: status.journal.problem))")
                    #expect(daemon.log.contains("the journal is kept in memory from now on"), "said at error level")
                    let again = try await daemon.reply(Request(op: "say", amount: "5", order: "F-1"))
                    #expect(again.error?.code == "duplicate", "the orders on disk are still known: \(again)")
                    try await daemon.stopCleanly()

                    try await disk.repair()
                    let next = try await daemons.start(rig: nil, device: "null", directory: disk.directory)
                    #expect(try await next.reply(Request(op: "status")).status?.journal.durable == nil)
                    #expect(try await history(next).map(\.order) == ["F-1"], "what was on disk before the failure")
                }
            }
        }

        /// A state folder that cannot be used at start: the daemon starts, names what is wrong, speaks, and — when
        /// the folder can still be read — knows the orders in it; once the folder can be used again (remounted
        /// writable; the directory in the journal's place removed) it goes back to the file with what it accepted
        /// meanwhile, and a restart knows every order.
        @Test func aStateFolderUnusableAtStartIsNamedAndTheJournalComesBack() async throws {
            // Read-only (a card mounted read-only), holding a journal with order R-1.
            let prepare: (FailingDisk) async throws -> Void = { disk in
                try await withDaemon(rig: nil, device: "null", directory: disk.directory) { daemon in
                    _ = try await daemon.reply(Request(op: "say", amount: "5", order: "R-1", wait: true))
                }
            }
            try await FailingDisk.with(readOnly: true, prepare: prepare) { disk in
                try await withDaemon(rig: nil, device: "null", directory: disk.directory) { daemon in
                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect(
                        status.journal.problem?.message == "the state folder \(disk.mount) is on a read-only file system")
                    #expect(try await daemon.reply(Request(op: "say", amount: "5", order: "R-1")).error?.code == "duplicate")
                    let new = try await daemon.reply(Request(op: "say", amount: "7", order: "R-2", wait: true))
                    #expect(new.job?.state == .spoken && new.job?.durable == false)
                    try await disk.remountWritable()
                    try await daemon.waitForStatus(timeout: .seconds(40)) { $0.journal.durable == nil }
                    #expect(daemon.log.contains("the journal is on disk again"))
                }
                try await withDaemon(rig: nil, device: "null", directory: disk.directory) { daemon in
                    #expect(try await history(daemon).map(\.order) == ["R-2", "R-1"], "job ids went on from the file's")
                    let resent = try await daemon.reply(Request(op: "say", amount: "7", order: "R-2"))
                    #expect(resent.error?.code == "duplicate", "\(resent)")
                }
            }
            // The journal's name taken by a directory: named as such (not SQLITE_CANTOPEN); back on disk once it goes.
            try await withDaemonSet { daemons, directory in
                let journal = "\(directory)/state/journal.sqlite"
                try FileManager.default.createDirectory(atPath: journal, withIntermediateDirectories: true)
                let daemon = try await daemons.start(rig: nil, device: "null", directory: directory)
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.journal.problem?.message == "\(journal) is a directory, not a journal file")
                let said = try await daemon.reply(Request(op: "say", amount: "8", order: "D-1", wait: true))
                #expect(said.job?.state == .spoken && said.job?.durable == false)
                // What announce-ctl shows a person.
                let shown = try await daemon.ctl(["say", "9"])
                #expect(shown.status == 0 && shown.stdout.contains("[NOT ON DISK: the daemon's journal is in memory"), "\(shown)")
                let view = try await daemon.ctl(["status"])
                #expect(view.stdout.contains("journal:  IN MEMORY, not on disk: \(journal) is a directory"), "\(view.stdout)")
                try await daemon.waitUntilIdle()
                try FileManager.default.removeItem(atPath: journal)
                try await daemon.waitForStatus(timeout: .seconds(40)) { $0.journal.durable == nil }
                #expect(try await history(daemon).compactMap(\.order) == ["D-1"], "written to the file it could make")
            }
        }

        // MARK: A missing speaker

        /// A speaker that is not there: `--check-config` warns, the daemon starts and says it is missing; payments
        /// sent together are all failed together once the device is given up on (one attempt each after the
        /// first's retries), and the status says missing for as long as it is.
        @Test func aMissingSpeakerIsSaidAtOnceAndEveryWaitingPaymentFailsTogether() async throws {
            let arguments = ["--device-give-up", "2s"]
            let check = try await run(
                "\(Paths.bin)/announced",
                ["--check-config", "--device", "hw:7,0", "--voices", Paths.voices, "--config", "/dev/null"])
            #expect(check.status == 0, "a warning, not a problem: \(check)")
            #expect(check.stdout.contains("# warning: device \"hw:7,0\" cannot be opened now"), "\(check.stdout)")
            try await withDaemon(rig: nil, arguments: arguments, device: "hw:7,0") { daemon in
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.audio.engine?.state == .missing)
                #expect(daemon.log.contains("the audio device cannot be opened now"))
                let view = try await daemon.ctl(["status"])
                #expect(view.stdout.contains("device:   hw:7,0 — missing (CANNOT BE OPENED"), "\(view.stdout)")
                let ids = try await withThrowingTaskGroup(of: UInt64?.self) { group in
                    for (index, amount) in ["1", "2", "3"].enumerated() {
                        group.addTask {
                            try await daemon.reply(Request(op: "say", amount: amount, order: "M-\(index)")).job?.id
                        }
                    }
                    return try await group.reduce(into: [UInt64]()) { if let id = $1 { $0.append(id) } }
                }
                #expect(ids.count == 3)
                let settled = try await daemon.waitForStatus { $0.queue.unfinished == 0 }
                let jobs = try await history(daemon)
                #expect(jobs.count == 3 && jobs.allSatisfy { $0.state == .failed && $0.error?.code == "audio_device" })
                #expect(settled.audio.engine?.state == .missing)
                #expect(settled.audio.engine?.jobsGivenUp == 3)
                // A payment now fails at once: one attempt, no retries for another 2 s.
                let failuresBefore = settled.audio.engine?.deviceFailures ?? 0
                let late = try await daemon.reply(Request(op: "say", amount: "4", wait: true))
                #expect(late.job?.state == .failed && late.job?.error?.message.hasPrefix("the audio device is missing") == true, "\(late)")
                let after = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(after.audio.engine?.deviceFailures == failuresBefore + 1)
                #expect(after.audio.engine?.state == .missing)
            }
        }

        // MARK: A wrong clock

        /// A terminal without a battery-backed clock: payments accepted with the clock at 2000-01-01 (not
        /// synchronised), then the daemon restarted with the clock set and trusted, in the same boot. Nothing is
        /// purged, the order is still a duplicate, its times are corrected to the real day, and `today` counts it.
        /// Then the clock set back a day: still nothing purged, nothing doubled.
        @Test func aClockSetForwardOrBackPurgesNothingAndDoublesNothing() async throws {
            try await withDaemonSet { daemons, directory in
                let synced = "\(directory)/synchronised"
                let config = "\(directory)/announced.toml"
                try "clock_sync = \"\(synced)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
                let arguments = ["--config", config]
                let wrong = try await daemons.start(
                    rig: nil, arguments: arguments, device: "null", directory: directory,
                    launcher: ["/usr/bin/faketime", "2000-01-01 00:00:00"])
                let said = try await wrong.reply(Request(op: "say", amount: "12.50", order: "C-1", wait: true))
                #expect(said.job?.state == .spoken && said.job?.acceptedAt?.hasPrefix("2000-01-01") == true, "\(said)")
                #expect(wrong.log.contains("the wall clock is not synchronised"))
                try await wrong.stopCleanly()

                #expect(FileManager.default.createFile(atPath: synced, contents: nil))
                let right = try await daemons.start(rig: nil, arguments: arguments, device: "null", directory: directory)
                #expect(!right.log.contains("journal purged"), "\(right.log)")
                let today = WallClock.iso8601(ms: WallClock.nowMs).prefix(10)
                let jobs = try await history(right)
                #expect(jobs.count == 1 && jobs.first?.acceptedAt?.hasPrefix(String(today)) == true, "corrected: \(jobs)")
                let resent = try await right.reply(Request(op: "say", amount: "12.50", order: "C-1"))
                #expect(resent.error?.code == "duplicate" && resent.job?.state == .spoken, "\(resent)")
                let summary = try #require(try await right.reply(Request(op: "today")).summary)
                #expect(summary.totals.payments.count == 1 && summary.totals.payments.fen == 1250, "\(summary)")
                try await right.stopCleanly()

                let back = try await daemons.start(
                    rig: nil, arguments: arguments, device: "null", directory: directory,
                    launcher: ["/usr/bin/faketime", "-f", "-1d"])
                #expect(!back.log.contains("journal purged"))
                #expect(try await history(back).map(\.order) == ["C-1"])
                #expect(try await back.reply(Request(op: "say", amount: "12.50", order: "C-1")).error?.code == "duplicate")
            }
        }

        /// A payment with a 300 s ttl, accepted while the sound server cannot be reached, survives a crash and a
        /// restart with the clock a day ahead: its ttl counts on the boot clock, so it is spoken by the restarted
        /// daemon, not expired by the jump.
        @Test func aTtlIsNeitherShortenedNorStretchedByAClockJump() async throws {
            let render = try pack.render(pack.composer.compose(amount: Amount(parsing: "38")))
            try await withRig { rig in
                try await withDaemonSet { daemons, directory in
                    let captured = try await rig.capture {
                        // The first daemon finds no sound server (as at a boot where it starts late).
                        let first = try await daemons.start(
                            rig: rig, directory: directory, environment: ["PULSE_SERVER": "unix:\(directory)/none"])
                        let accepted = try await first.reply(Request(op: "say", amount: "38", order: "L-1", ttl: 300))
                        #expect(accepted.ok, "\(accepted)")
                        try await first.waitForLog("audio device failed; retrying")
                        #expect(try await first.stop(signal: SIGKILL) == 128 + SIGKILL)
                        let ahead = try await daemons.start(
                            rig: rig, directory: directory, launcher: ["/usr/bin/faketime", "-f", "+1d"])
                        try await ahead.waitUntilIdle()
                        let jobs = try await history(ahead)
                        #expect(jobs.map(\.state) == [.spoken], "not expired by the jump: \(jobs)")
                    }
                    let hearings = AudioMatch.hearings(of: [render], in: captured)
                    #expect(hearings.filter(\.complete).count == 1, "\(hearings)")
                }
            }
        }
    }
}
