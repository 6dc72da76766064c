import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// The audio policy through the real daemon on the real rig, checked the way an owner would: amixer before,
/// during and after an alert; what the speaker played (the rig's capture); a music stream's level; a sound server
/// that crashes with jobs waiting.
extension DaemonIntegration {
    @Suite
    struct AudioPolicyTests {
        let pack: VoicePack

        init() throws {
            pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        }

        func rendered(_ amount: String) throws -> [Int16] {
            try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
        }

        @Test func theVolumeIsRaisedForTheAlertAndPutBackExactlyAfter() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")  // 20%: too quiet to hear in a shop
                let arguments = ["--mixer", "pulse", "--volume-threshold", "60%", "--metrics-listen", "127.0.0.1:0"]
                try await withDaemon(rig: rig, arguments: arguments) { daemon in
                    #expect(try await rig.mixer() == Rig.MixerValue(raw: 13107, on: true), "before")
                    var during: Rig.MixerValue?
                    let captured = try await rig.capture {
                        let reply = try await daemon.ctl(["say", "12345.67"])
                        #expect(reply.status == 0, "\(reply)")
                        during = try await rig.waitForMixer() { $0.raw != 13107 }
                        try await daemon.waitUntilBurstEnded()
                    }
                    #expect(during == Rig.MixerValue(raw: 39322, on: true), "during: 60% as amixer sets it")
                    let after = try await rig.mixer()
                    #expect(after == Rig.MixerValue(raw: 13107, on: true), "after: exactly as before")

                    // What the speaker played was raised too: PulseAudio's gain is (raw/65536)^3.
                    let expected = try rendered("12345.67")
                    let match = AudioMatch.correlation(expected: expected, captured: captured)
                    #expect(match.value > 0.9, "the announcement is not in the capture (\(match.value))")
                    let start = max(0, match.lag)
                    let heard = AudioMatch.rms(captured[start..<min(captured.count, start + expected.count)])
                    let gain = heard / AudioMatch.rms(expected)
                    #expect(abs(gain - 0.216) < 0.05, "played at gain \(gain), expected 0.6³ = 0.216")

                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect(status.audio.mixer == "pulse/Master")
                    #expect(status.audio.volume == 20 && status.audio.threshold == 60)
                    #expect(status.audio.engine?.volume?.raises == 1 && status.audio.engine?.volume?.restores == 1)
                    #expect(status.audio.engine?.sink.periodFrames == 1280, "80 ms periods at 16 kHz")
                    // The same, scraped over HTTP.
                    let metrics = try await daemon.scrape()
                    #expect(HTTP.sample("announce_volume_raises_total", in: metrics) == 1, "\(metrics)")
                    #expect(HTTP.sample("announce_volume_restores_total", in: metrics) == 1)
                    #expect(HTTP.sample("announce_volume_user_overrides_total", in: metrics) == 0)
                    // Once at start (is the device there? status says missing if not), once for the alert.
                    #expect(HTTP.sample("announce_audio_pcm_opens_total", in: metrics) == 2)
                    let xruns = HTTP.sample("announce_audio_xruns_total", in: metrics)
                    #expect(xruns == status.audio.xruns.map(Double.init))
                }
            }
        }

        @Test func backToBackJobsKeepTheVolumeRaisedUntilTheQueueIsEmpty() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")
                try await withDaemon(rig: rig, arguments: ["--mixer", "pulse", "--volume-threshold", "60%"]) {
                    daemon in
                    for amount in ["8.50", "1005", "12.30"] {
                        let reply = try await daemon.ctl(["say", amount])
                        #expect(reply.status == 0, "\(reply)")
                    }
                    // What amixer shows from the first raise until the queue is empty: never the owner's 20%
                    // in between (no restore between back-to-back jobs).
                    try await rig.waitForMixer() { $0.raw == 39322 }
                    var seen: [Int] = []
                    while try await daemon.reply(Request(op: "status")).status?.queue.unfinished ?? 0 > 0 {
                        let raw = try await rig.mixer().raw
                        if seen.last != raw { seen.append(raw) }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    let status = try await daemon.waitUntilBurstEnded()
                    // (The last reading may already be the restore: the jobs' ends are recorded after it.)
                    let whileQueued = seen.last == 13107 ? Array(seen.dropLast()) : seen
                    #expect(whileQueued == [39322], "the volume went \(seen) while jobs were queued")
                    let after = try await rig.mixer().raw
                    #expect(after == 13107, "put back once the queue ran empty")
                    #expect(status.audio.engine?.volume?.raises == 1, "raised once for the burst")
                    #expect(status.audio.engine?.volume?.restores == 1, "restored once, after the burst")
                    let history = try await daemon.reply(Request(op: "history")).jobs ?? []
                    #expect(history.filter { $0.state == .spoken }.count == 3, "\(history.map(\.state))")
                }
            }
        }

        @Test func aVolumeTheUserChangesDuringTheAlertIsKept() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")
                try await withDaemon(rig: rig, arguments: ["--mixer", "pulse", "--volume-threshold", "60%"]) {
                    daemon in
                    _ = try await daemon.ctl(["say", "12345.67"])
                    try await rig.waitForMixer() { $0.raw == 39322 }
                    try await rig.setMixer("50000")  // the owner turns it up during the announcement
                    let status = try await daemon.waitUntilBurstEnded()
                    let after = try await rig.mixer().raw
                    #expect(after == 50000, "the owner's choice wins")
                    #expect(status.audio.engine?.volume?.userOverrides == 1)
                    #expect(status.audio.engine?.volume?.restores == 0)
                }
            }
        }

        @Test func aDaemonKilledMidAlertPutsTheVolumeBackWhenItStartsAgain() async throws {
            try await withRig { rig in
                try await rig.setMixer("13107")
                let directory = try Paths.temporaryDirectory("kill9")
                defer { try? FileManager.default.removeItem(atPath: directory) }
                let arguments = ["--mixer", "pulse", "--volume-threshold", "60%"]
                let first = try await DaemonProcess.start(rig: rig, arguments: arguments, directory: directory)
                let accepted = try await first.reply(Request(op: "say", amount: "987654321.99"))
                let raised = try await rig.waitForMixer() { $0.raw == 39322 }
                #expect(raised.raw == 39322)
                // Killed mid-announcement: the restart restores the owner's volume first (the state file), then
                // speaks the cut job again in full — raising the volume again for it — and restores it after.
                try await first.waitUntilStarted(try #require(accepted.job?.id))
                #expect(try await first.stop(signal: SIGKILL) == 128 + SIGKILL)
                #expect(try await rig.mixer().raw == 39322, "kill -9 left the volume raised")
                #expect(FileManager.default.fileExists(atPath: "\(directory)/state/mixer-state.json"))

                try await withDaemon(rig: rig, arguments: arguments, directory: directory) { second in
                    #expect(second.log.contains("restored a mixer setting left changed by an earlier run"))
                    try await second.waitUntilIdle()
                    let job = try #require(try await second.reply(Request(op: "history", limit: 1)).jobs?.first)
                    #expect(job.state == .spoken && job.attempts == 2, "spoken again in full: \(job)")
                    #expect(try await rig.mixer().raw == 13107, "the owner's volume after the replay")
                    #expect(!FileManager.default.fileExists(atPath: "\(directory)/state/mixer-state.json"))
                }
            }
        }

        @Test func mutedWithPolicyRespectNothingPlaysAndTheJobSaysMuted() async throws {
            try await withRig { rig in
                try await rig.setMixer("mute")
                try await withDaemon(rig: rig, arguments: ["--mixer", "pulse", "--mute-policy", "respect"]) { daemon in
                    var reply: CommandResult?
                    let captured = try await rig.capture { reply = try await daemon.ctl(["say", "--wait", "100"]) }
                    #expect(reply?.status == 5, "\(String(describing: reply))")
                    #expect(reply?.stdout.contains("muted") == true, "\(String(describing: reply))")
                    let level = AudioMatch.rms(captured)
                    #expect(level < 10, "something played while muted (rms \(level))")
                    #expect(try await rig.mixer().on == false, "still muted")
                }
            }
        }

        @Test func mutedWithPolicyOverrideTheAlertPlaysAndTheMuteComesBack() async throws {
            try await withRig { rig in
                try await rig.setMixer("mute")
                try await withDaemon(rig: rig, arguments: ["--mixer", "pulse", "--mute-policy", "override"]) {
                    daemon in
                    var reply: CommandResult?
                    let captured = try await rig.capture { reply = try await daemon.ctl(["say", "--wait", "100"]) }
                    #expect(reply?.status == 0, "\(String(describing: reply))\n\(daemon.log)")
                    let match = AudioMatch.correlation(expected: try rendered("100"), captured: captured)
                    #expect(match.value > 0.9, "the alert was not heard (\(match.value))")
                    try await daemon.waitUntilIdle()
                    let after = try await rig.waitForMixer() { !$0.on }
                    #expect(after.on == false, "the owner's mute is back")
                }
            }
        }

        /// Policy `respect` on a terminal that allows enforcing (`--allow-enforce`): a payment that asks for it
        /// (`--enforce`, the fleet's enforce flag) is heard through the mute, and the mute comes back; one that does
        /// not is not played.
        @Test func mutedAnEnforcedJobIsHeardWhereAllowedAndTheMuteComesBack() async throws {
            try await withRig { rig in
                try await rig.setMixer("mute")
                try await withDaemon(
                    rig: rig, arguments: ["--mixer", "pulse", "--mute-policy", "respect", "--allow-enforce"]
                ) { daemon in
                    let plain = try await daemon.ctl(["say", "--wait", "5"])
                    #expect(plain.status == 5 && plain.stdout.contains("muted"), "\(plain)")
                    var reply: CommandResult?
                    let captured = try await rig.capture { reply = try await daemon.ctl(["say", "--wait", "--enforce", "100"]) }
                    #expect(reply?.status == 0, "\(String(describing: reply))\n\(daemon.log)")
                    let match = AudioMatch.correlation(expected: try rendered("100"), captured: captured)
                    #expect(match.value > 0.9, "the enforced alert was not heard (\(match.value))")
                    try await daemon.waitUntilIdle()
                    let after = try await rig.waitForMixer() { !$0.on }
                    #expect(after.on == false, "the owner's mute is back")
                    let job = try #require(try await daemon.reply(Request(op: "history", limit: 1)).jobs?.first)
                    #expect(job.enforce == true && job.state == .spoken, "\(job)")
                }
            }
        }

        /// Music (a 3 kHz tone on the rig's "music" stream) with an announcement over it: the capture, the tone's
        /// level in 0.1 s windows, the announcement's place in the capture, and the music control as amixer saw it.
        struct MusicRun {
            var levels: [Double]
            /// The announcement's first and last sample in the capture.
            var announcement: Range<Int>
            var match: Double
            /// The lowest the music control went while the announcement played.
            var lowestMusicControl: Int
            var captured: [Int16]

            /// Median tone level over the windows in `seconds` (capture time).
            func level(_ seconds: ClosedRange<Double>) -> Double {
                let range = Int(seconds.lowerBound * 10)..<Int(seconds.upperBound * 10)
                let window = levels[range.clamped(to: levels.indices)].sorted()
                return window.isEmpty ? 0 : window[window.count / 2]
            }

            var start: Double { Double(announcement.lowerBound) / 16000 }
            var end: Double { Double(announcement.upperBound) / 16000 }
        }

        func playOverMusic(
            _ rig: Rig, _ daemon: DaemonProcess, amount: String, amplitude: Double, musicDevice: String = "pulse:music",
            musicEnvironment: [String: String] = [:]
        ) async throws -> MusicRun {
            var lowest = Int.max
            let captured = try await rig.capture {
                async let music: Void = rig.playTone(
                    device: musicDevice, frequency: 3000, seconds: 8, amplitude: amplitude,
                    environment: musicEnvironment)
                // The music heard for a second and a half before the announcement: the "before" the levels are
                // compared with (the player's start is waited for, not slept through: sox and aplay start slowly on
                // a busy machine).
                let musicHeard = try await eventually(timeout: .seconds(20)) {
                    let heard = rig.capturedSoFar()
                    let start = heard.firstIndex { abs(Int($0)) > 1000 } ?? heard.count
                    return heard.count - start >= 24_000
                }
                #expect(musicHeard, "the music did not start")
                let reply = try await daemon.ctl(["say", amount])
                #expect(reply.status == 0, "\(reply)")
                while try await daemon.reply(Request(op: "status")).status?.queue.unfinished ?? 0 > 0 {
                    lowest = min(lowest, try await rig.mixer("pulse:music").raw)
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await music
            }
            let expected = try rendered(amount)
            let match = AudioMatch.locate(expected: expected, captured: captured)
            let onset = match.lag + (AudioMatch.onset(expected) ?? 0)
            let end = match.lag + (AudioMatch.end(expected) ?? expected.count)
            return MusicRun(
                levels: AudioMatch.toneLevels(captured, frequency: 3000), announcement: onset..<end,
                match: match.value, lowestMusicControl: lowest, captured: captured)
        }

        @Test func musicIsDuckedWhileTheAnnouncementPlaysAndComesBackAfter() async throws {
            try await withRig { rig in
                let arguments = [
                    "--mixer", "none", "--duck-control", "pulse:music/Master", "--duck-db", "20",
                    "--duck-ramp-ms", "100", "--metrics-listen", "127.0.0.1:0",
                ]
                try await withDaemon(rig: rig, arguments: arguments, device: "pulse:announce") { daemon in
                    let run = try await playOverMusic(rig, daemon, amount: "12345.67", amplitude: 0.3)
                    #expect(run.match > 0.8, "the announcement is not in the capture (\(run.match))")
                    // Music before the announcement, while it plays (past the 100 ms fade), and after (past the
                    // fade back, music still playing).
                    let before = run.level((run.start - 1.0)...(run.start - 0.2))
                    let during = run.level((run.start + 0.4)...(run.end - 0.2))
                    let after = run.level((run.end + 0.6)...(run.end + 1.4))
                    #expect(before > 2000, "no music heard before the announcement (\(before))")
                    let duckedBy = 20 * log10(before / max(during, 1))
                    #expect(duckedBy > 15 && duckedBy < 25, "music ducked by \(duckedBy) dB, expected about 20")
                    let backBy = 20 * log10(before / max(after, 1))
                    #expect(abs(backBy) < 1, "music not back after the announcement (\(after) vs \(before))")
                    // amixer saw the music control at −20 dB on PulseAudio's cubic scale: 65536 × 10^(−20/60).
                    #expect(run.lowestMusicControl == 30419, "music control went down to \(run.lowestMusicControl)")
                    let restored = try await rig.waitForMixer("pulse:music") { $0.raw == 65536 }
                    #expect(restored.raw == 65536, "music control back where it was")
                    let status = try await daemon.waitUntilBurstEnded()
                    #expect(status.audio.ducked == ["pulse:music/Master"])
                    #expect(status.audio.engine?.ducking?.controls.first?.ducks == 1)
                    let metrics = try await daemon.scrape()
                    let sample = "announce_duck_engagements_total{control=\"pulse:music/Master\"}"
                    let ducks = HTTP.sample(sample, in: metrics)
                    #expect(ducks == 1, "\(metrics)")
                }
            }
        }

        @Test func inMixModeMusicPlaysOnUnchangedAlongsideTheAnnouncement() async throws {
            try await withRig { rig in
                // Mix: no duck controls (or duck_db 0): both streams sound at once, through the sound server here,
                // through dmix on bare ALSA.
                try await withDaemon(rig: rig, arguments: ["--mixer", "none"], device: "pulse:announce") { daemon in
                    let run = try await playOverMusic(rig, daemon, amount: "12345.67", amplitude: 0.1)
                    #expect(run.match > 0.6, "the announcement is not heard over the music (\(run.match))")
                    let before = run.level((run.start - 1.0)...(run.start - 0.2))
                    let during = run.level((run.start + 0.4)...(run.end - 0.2))
                    let after = run.level((run.end + 0.6)...(run.end + 1.4))
                    #expect(before > 500, "no music heard before the announcement (\(before))")
                    let changedBy = 20 * log10(before / max(during, 1))
                    #expect(abs(changedBy) < 1.5, "music level changed by \(changedBy) dB while announcing")
                    #expect(abs(20 * log10(before / max(after, 1))) < 1, "music level after: \(after) vs \(before)")
                    #expect(run.lowestMusicControl == 65536, "the music control was touched")
                    let status = try await daemon.waitUntilBurstEnded()
                    #expect(status.audio.engine?.ducking == nil, "no ducker in mix mode")
                }
            }
        }

        @Test func aSoundServerDucksMusicByTheAnnouncementsMediaRole() async throws {
            // The PulseAudio way (docs/audio.md): the daemon only mixes; its stream carries media.role=announce
            // (PULSE_PROP, read by ALSA's pulse plugin) and the server's module-role-ducking lowers music streams.
            try await withRig { rig in
                let loaded = try await rig.command(
                    "/usr/bin/pactl",
                    ["load-module", "module-role-ducking", "trigger_roles=announce", "ducking_roles=music",
                     "volume=-20dB"])
                #expect(loaded.status == 0, "\(loaded)")
                try await withDaemon(
                    rig: rig, arguments: ["--mixer", "none"], environment: ["PULSE_PROP": "media.role=announce"]
                ) { daemon in
                    let run = try await playOverMusic(
                        rig, daemon, amount: "12345.67", amplitude: 0.3, musicDevice: "pulse",
                        musicEnvironment: ["PULSE_PROP": "media.role=music"])
                    #expect(run.match > 0.8, "the announcement is not in the capture (\(run.match))")
                    let before = run.level((run.start - 1.0)...(run.start - 0.2))
                    let during = run.level((run.start + 0.4)...(run.end - 0.2))
                    let after = run.level((run.end + 0.6)...(run.end + 1.4))
                    #expect(before > 2000, "no music heard before the announcement (\(before))")
                    let duckedBy = 20 * log10(before / max(during, 1))
                    #expect(duckedBy > 15 && duckedBy < 25, "music ducked by \(duckedBy) dB, expected about 20")
                    #expect(abs(20 * log10(before / max(after, 1))) < 1, "music not back: \(after) vs \(before)")
                    let status = try await daemon.waitUntilBurstEnded()
                    #expect(status.audio.engine?.ducking == nil, "the daemon itself lowered nothing")
                }
            }
        }

        @Test func jobsQueuedWhileTheSoundServerRestartsAllPlayInOrder() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig, arguments: ["--device-retry-max", "500ms"]) { daemon in
                    let amounts = ["12345.67", "8.50", "1005"]
                    let captured = try await rig.capture {
                        for amount in amounts {
                            let reply = try await daemon.ctl(["say", amount])
                            #expect(reply.status == 0, "\(reply)")
                        }
                        try await Task.sleep(for: .milliseconds(700))  // the first is playing
                        try await rig.restartServer()
                        try await daemon.waitUntilIdle()
                    }
                    let history = try await daemon.reply(Request(op: "history")).jobs ?? []
                    let spoken = history.filter { $0.state == .spoken }.map(\.id).sorted()
                    #expect(spoken == [1, 2, 3], "\(history.map { "\($0.id) \($0.state)" })\n\(daemon.log)")
                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    let engine = try #require(status.audio.engine)
                    #expect(engine.deviceFailures >= 1 && engine.recoveries >= 1, "\(engine)")
                    // The capture is what played before the crash, then everything since: the part of job 1 the
                    // crash cut, then job 1 from its start, 2 and 3 — each whole, once, in order.
                    let renders = try amounts.map(rendered)
                    let heard = AudioMatch.hearings(of: renders, in: captured)
                    let whole = heard.filter(\.complete)
                    #expect(whole.map(\.best) == [0, 1, 2], "\(heard)")
                    #expect(heard.filter { !$0.complete }.allSatisfy { $0.best == 0 }, "only job 1 was cut: \(heard)")
                    // Only the job playing at the crash was played again.
                    let replays = daemon.log.split(separator: "\n").filter { $0.contains("played again from its start") }
                    #expect(!replays.isEmpty && replays.allSatisfy { $0.contains("job.id=1 ") }, "\(replays)")
                }
            }
        }

        @Test func keepOpenHoldsTheDeviceBetweenAnnouncements() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig, arguments: ["--keep-open", "--mixer", "none"]) { daemon in
                    for amount in ["1", "2"] {
                        let reply = try await daemon.ctl(["say", "--wait", amount])
                        #expect(reply.status == 0, "\(reply)")
                    }
                    let status = try await daemon.waitForStatus { $0.audio.engine?.state == .open }
                    #expect(status.audio.engine?.sink.isOpen == true)
                }
            }
        }
    }
}
