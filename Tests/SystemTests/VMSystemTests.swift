import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// The terminal as deployed, checked in a VM with a real kernel (Debian 13's), real ALSA drivers (snd-dummy,
/// snd-aloop), real systemd and the project's own amd64 packages installed with dpkg (docs/deployment.md).
/// What the speaker gets is captured on hw:Loopback,1,0 and compared with `announce-ctl render`.
@Suite struct VMSystemTests {
    @Test func thePackagesInstallUsersEnabledUnitsAndAVerifiedHardenedService() async throws {
        try PackageChecks.install(try await VirtualMachineRun.amd64.value.facts("install"), arch: "amd64")
    }

    @Test func socketActivatedSayIsHeardAsTheOfflineRender() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("activation")
        try PackageChecks.activation(facts, expected: try facts.render("expected"))
    }

    @Test func daemonRunsConfinedAsItsOwnUser() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("confinement")
        let credentials = facts["credentials"].split(separator: " ")
        #expect(credentials.count == 3, "\(facts["credentials"])")
        #expect(credentials.first == "announce" && credentials.dropFirst().first == "announce", "\(facts.summary)")
        #expect(credentials.last?.split(separator: ",").contains("audio") == true, "\(facts.summary)")
        #expect(facts["no_new_privs"] == "1")
        #expect(facts["effective_capabilities"] == "0000000000000000")
        #expect(facts["seccomp"] == "2", "no system call filter: \(facts.summary)")
        #expect(facts["state_dir"] == "announce announce 750")
        // Under its unit's LimitNICE and system call filter the audio thread gets the priority it asks for.
        #expect(facts["audio_thread_nice"] == "-10", "audio thread nice: \(facts.summary)")
        #expect(facts["log_priority_refused"] == "0", "\(facts.summary)")
    }

    @Test func thePushListenersUserMaySpeakAndOthersCannotConnect() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("access")
        #expect(facts.status("push_user_say") == 0 && facts["push_user_say"].contains("spoken"),
                "announce-push could not make it speak: \(facts["push_user_say"])")
        // It has the submit role (examples/announced.toml): it may speak, not cancel (exit 3, unauthorized).
        #expect(facts.status("push_user_cancel") == 3 && facts["push_user_cancel"].contains("unauthorized"),
                "\(facts["push_user_cancel"])")
        // Not in group announce: the socket's mode (0660) refuses the connection (exit 4: unreachable).
        #expect(facts.status("stranger_ping") == 4, "\(facts["stranger_ping"])")
        #expect(facts["stranger_ping"].contains("ermission denied"), "\(facts["stranger_ping"])")
        // In group announce but not in submit_users: may read, may not speak (exit 3: refused, unauthorized).
        #expect(facts.status("staff_say") == 3 && facts["staff_say"].contains("unauthorized"), "\(facts["staff_say"])")
        #expect(facts.status("staff_status") == 0, "\(facts["staff_status"])")
    }

    @Test func pushListenerUnderItsUnitTurnsASignedPublishIntoOneSpokenJob() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("push")
        // Not configured: skipped by ConditionPathExists, nothing failed.
        let unconfigured = facts["unconfigured"].split(separator: "\n")
        for property in ["ActiveState=inactive", "Result=success", "ConditionResult=no", "NRestarts=0"] {
            #expect(unconfigured.contains(Substring(property)), "\(facts["unconfigured"])")
        }
        // The example's placeholder keys: exit 2 (configuration), once: RestartPreventExitStatus stops a loop.
        let placeholder = facts["placeholder"].split(separator: "\n")
        for property in ["ActiveState=failed", "Result=exit-code", "ExecMainStatus=2", "NRestarts=0"] {
            #expect(placeholder.contains(Substring(property)), "\(facts["placeholder"])")
        }
        #expect(facts["placeholder_journal"].contains("key"), "the problem is not in the journal: \(facts["placeholder_journal"])")
        // Configured: connects to the real broker as its own user with the socket's group.
        #expect(facts["connected"] == "yes", "\(facts["journal"])")
        let credentials = facts["credentials"].split(separator: " ")
        #expect(credentials.first == "announce-push" && credentials.last?.split(separator: ",").contains("announce") == true,
                "\(facts["credentials"])")
        #expect(facts.status("publish") == 0 && facts.status("publish_again") == 0, "\(facts.summary)")
        #expect(facts["journal"].contains("payment forwarded"), "\(facts["journal"])")
        #expect(facts["duplicate_logged"] == "yes", "the second delivery was not answered duplicate: \(facts["journal"])")
        #expect(facts["service"] == "active", "\(facts["journal"])")
        // The daemon's account: one job for the order, spoken.
        let jobs = try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }.filter { $0.order == "VM-PUSH-1" }
        #expect(jobs.count == 1 && jobs.first?.state == .spoken && jobs.first?.amount == "100.00", "\(facts["history"])")
        // What the speaker got: 到账一百元 once.
        let heard = try facts.capture("heard")
        let expected = try facts.render("expected")
        let match = AudioMatch.correlation(expected: expected, captured: heard)
        #expect(match.value > 0.95, "the pushed payment was not heard as rendered (correlation \(match.value))")
        let parts = Self.sounds(in: heard, silence: 16_000 * 3 / 10)
        #expect(parts.count == 1, "expected one announcement, heard \(parts.count) sounds")
    }

    @Test func masterBelowTheThresholdIsRaisedForTheAlertAndPutBack() async throws {
        try PackageChecks.volumeThreshold(try await VirtualMachineRun.amd64.value.facts("volume_threshold"))
    }

    @Test func musicThroughDmixIsDuckedWhileTheAnnouncementPlaysAndRestoredAfter() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("duck")
        let before = try #require(Self.mixer(facts["music_before"]), "\(facts["music_before"])")
        let during = try #require(Self.mixer(facts["music_during"]), "\(facts["music_during"])")
        let after = try #require(Self.mixer(facts["music_after"]), "\(facts["music_after"])")
        #expect(!facts["music.log"].contains("open error"), "the music player (user nobody, group audio) failed: \(facts["music.log"])")
        // duck_db = 20 in examples/announced.toml (docs/asound.conf gives the control softvol's dB scale).
        #expect(!before.decibels.isEmpty && !during.decibels.isEmpty, "Music has no dB: \(facts["music_during"])")
        #expect(zip(before.decibels, during.decibels).allSatisfy { $0 - $1 >= 19 }, "\(facts["music_during"])")
        #expect(after.raw == before.raw, "Music not restored: \(facts["music_after"])")

        // What the speaker got: the 6 kHz music tone and the announcement mixed, the tone's level read around the
        // announcement (toneAround). The fade (duck_ramp_ms 150) runs beside the first samples by design (the
        // announcement is never held up by it); on the emulated CPU it ends within about half a second, and from
        // 0.6 s on, all of it is ducked.
        let duck = try Self.toneAround(heard: try facts.capture("heard"), expected: try facts.render("expected"))
        print("duck: music 15 dB down \(duck.duckedAfterMs.map { "\($0) ms" } ?? "never") after the first sample")
        #expect(duck.music > -20, "no music before the announcement (\(duck.music) dB)")
        #expect(duck.music - duck.loudestDuring >= 15, "music at \(duck.music) dB, during the announcement up to \(duck.loudestDuring) dB")
        #expect(abs(duck.restored - duck.music) < 1, "music at \(duck.music) dB before, \(duck.restored) dB after")
    }

    /// The speaker's keys, on a USB keypad made through /dev/uinput (evemu-device) and pressed with evemu-event:
    /// real evdev nodes, udev, the drop-in's group and device access, the daemon's key reader.
    @Test func theKeypadsKeysSetTheLevelSpeakItMuteReplayAndSurviveAReplug() async throws {
        let run = try await VirtualMachineRun.amd64.value
        let facts = run.facts("keys")
        let scale = try #require(Self.softvolScale(run.facts("volume_threshold")["master_tlv"]), "no Master scale")
        func raw(_ percent: Int) throws -> Int {
            try VolumeMapping.raw(for: .percent(Double(percent)), scale: scale, element: "Master")
        }
        func percent(_ name: String) throws -> Int {
            let value = try #require(Self.mixer(facts[name])?.raw.min(), "\(name): \(facts[name])")
            return VolumeMapping.percent(ofRaw: value, scale: scale)
        }
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        #expect(facts["uinput"].hasPrefix("crw"), "no /dev/uinput in the VM: \(facts["uinput"])")
        #expect(facts["daemon_groups"].split(separator: ",").contains("input"), "the drop-in's group: \(facts.summary)")
        let journal = facts["journal"]
        #expect(journal.contains("input device opened") && journal.contains("Announce Test Keypad"), "\(journal)")
        // Bad input, logged and nothing else: a device without our keys, a path that is not there.
        #expect(journal.contains("input device has none of the configured keys; not used")
                && journal.contains("Announce Test Mouse"), "\(journal)")
        #expect(journal.contains("input device not present") && journal.contains("usb-missing-keypad"), "\(journal)")

        // Volume up from 70 %: 80 % on the mixer, and 音量八 heard.
        let seventy = try raw(70)
        let eighty = try raw(80)
        #expect(Self.mixer(facts["master_70"])?.raw.allSatisfy { $0 == seventy } == true, "\(facts["master_70"])")
        #expect(Self.mixer(facts["master_up"])?.raw.allSatisfy { $0 == eighty } == true, "\(facts["master_up"])")
        #expect(facts["volume_up"].contains("level 80%"), "\(facts["volume_up"])")
        let up = AudioMatch.correlation(
            expected: try pack.render(pack.composer.compose(prompt: "volume-8")), captured: try facts.capture("up"))
        #expect(up.value > 0.95, "音量八 was not heard (correlation \(up.value))")

        // Held 1.4 s: a few steps (one at once, then one every 300 ms after 600 ms), not the kernel's dozens; each
        // step on the mixer.
        let steps = try #require(facts.number("held_steps"), "\(facts.summary)")
        #expect((2...7).contains(steps), "\(steps) steps for a key held 1.4 s")
        #expect(try percent("master_held") == 80 - 10 * steps, "\(facts["master_held"]) after \(steps) steps down")

        // Mute: docs/asound.conf's softvol Master has no switch: the volume at its minimum, the daemon says muted, a
        // payment is not played (muted); mute again: the level it had, and 已取消静音 heard.
        #expect(Self.mixer(facts["master_muted"])?.raw.allSatisfy { $0 == 0 } == true, "\(facts["master_muted"])")
        #expect(facts["volume_muted"].contains("[muted]"), "\(facts["volume_muted"])")
        #expect(facts.status("say_muted") == 5 && facts["say_muted"].contains("muted"), "\(facts["say_muted"])")
        #expect(Self.mixer(facts["master_unmuted"])?.raw == Self.mixer(facts["master_held"])?.raw,
                "\(facts["master_unmuted"]) is not the level before the mute")
        let unmuted = AudioMatch.correlation(
            expected: try pack.render(pack.composer.compose(prompt: "unmuted")), captured: try facts.capture("unmuted"))
        #expect(unmuted.value > 0.95, "已取消静音 was not heard (correlation \(unmuted.value))")

        // Play/pause pressed: the last payment again, heard, recorded as a replay of it.
        let jobs = try Self.replies(facts["replay_history"]).flatMap { $0.jobs ?? [] }
        #expect(jobs.count == 2 && jobs[1].amount == "6.60", "\(facts["replay_history"])")
        #expect(jobs.first?.replayOf == jobs.last?.id && jobs.first?.state == .spoken, "\(facts["replay_history"])")
        let replay = AudioMatch.correlation(
            expected: try pack.render(pack.composer.compose(amount: Amount(parsing: "6.60"))),
            captured: try facts.capture("replay"))
        #expect(replay.value > 0.95, "到账六点六元 was not heard again (correlation \(replay.value))")

        // Pressed while a notice repeats: the repeat is acknowledged (it ends so, and says so), nothing replayed.
        #expect(facts["repeat_started"].contains("repeat KEY-R repeating"), "\(facts["repeat_started"])")
        let acknowledged = try Self.replies(facts["repeat_acknowledged"]).first?.repeats?.first
        #expect(acknowledged?.order == "KEY-R" && acknowledged?.state == .acknowledged, "\(facts["repeat_acknowledged"])")
        let newest = try Self.replies(facts["repeat_history"]).flatMap { $0.jobs ?? [] }.first
        #expect(newest?.order == "KEY-R#1" && newest?.replayOf == nil, "no replay: \(facts["repeat_history"])")
        #expect(journal.contains("acknowledged"), "\(journal)")

        // Unplugged and plugged in again: noticed both ways, and its volume key works.
        #expect(facts.number("gone_count") ?? 0 >= 1 && facts.number("opened_count") ?? 0 >= 2, "\(facts.summary)")
        #expect(try percent("master_after_replug") == percent("master_before_replug") + 10,
                "\(facts["master_before_replug"]) → \(facts["master_after_replug"])")
        #expect(facts["service"] == "active" && facts.status("ping") == 0, "\(facts.summary)")
    }

    @Test func aLongPressSpeaksTheDaysTotal() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("today")
        #expect(facts.number("actions") == 1, "one long press, one action: \(facts.summary)")
        let summary = try #require(try Self.replies(facts["today_before"]).first?.summary, "\(facts["today_before"])")
        #expect(summary.payments.count > 0, "the system test made payments today: \(facts["today_before"])")
        let job = try #require(try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }.first)
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        let expected = try pack.composer.compose(summary: summary.totals)
        #expect(job.text == expected.text && job.state == .spoken, "\(facts["history"])")
        #expect(expected.text.hasPrefix("今日收款"))
        let heard = AudioMatch.correlation(expected: try pack.render(expected), captured: try facts.capture("total"))
        #expect(heard.value > 0.95, "\(expected.text) was not heard (correlation \(heard.value))")
        #expect(facts["today_printed"].contains("\(summary.payments.count) payment"), "\(facts["today_printed"])")

        // A short press (replay) and a long press (the day's total) while a 4.5 s payment played: the payment was
        // heard whole, first and alone; the replay and the total were spoken after it.
        let during = try facts.capture("during")
        let payment = try facts.render("payment")
        let hearings = AudioMatch.hearings(of: [payment], in: during)
        #expect(hearings.first?.best == 0 && hearings.first?.complete == true, "the payment was cut: \(hearings)")
        let paymentEnd = try #require(hearings.first?.heardEnd)
        let paymentStart = try #require(hearings.first?.start)
        #expect(AudioMatch.onset(during).map { abs($0 - paymentStart) < 160 } == true, "something played before it")
        let after = Self.sounds(in: Array(during[paymentEnd...]), silence: 16_000 / 5)
        #expect(after.count >= 2, "the replay and the day's total did not follow the payment: \(after.count) sounds")
        let jobs = try Self.replies(facts["history_during"]).flatMap { $0.jobs ?? [] }
        #expect(jobs.count == 3 && jobs.allSatisfy { $0.state == .spoken }, "\(facts["history_during"])")
        #expect(jobs.last?.amount == "98765.43", "the payment was accepted first: \(facts["history_during"])")
    }

    @Test func reloadRereadsTheConfigurationInTheSameProcess() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("reload")
        #expect(facts.status("reload") == 0, "\(facts["reload"])")
        #expect(facts["logged"] == "yes", "no 'SIGHUP: reloading' from the daemon: \(facts.summary)")
        #expect(facts["pid_after"] == facts["pid_before"] && facts["service_after"] == "active", "\(facts.summary)")
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
    }

    @Test func watchdogRestartsAHungDaemon() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("watchdog")
        #expect(facts["watchdog_usec"] == "10s", "\(facts.summary)")
        // SIGSTOP: no more pings; systemd's watchdog kills it and Restart=on-failure starts a new one.
        #expect(facts["pid_after"] != facts["pid_before"] && facts.number("pid_after") ?? 0 > 0, "\(facts.summary)")
        #expect(facts.number("restarts_after") == (facts.number("restarts_before") ?? -1) + 1, "\(facts.summary)")
        #expect(facts.number("watchdog_timeouts") ?? 0 >= 1, "no 'Watchdog timeout' in the journal: \(facts.summary)")
        // The new daemon speaks.
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        let match = AudioMatch.correlation(expected: try facts.render("expected"), captured: try facts.capture("heard"))
        #expect(match.value > 0.95, "after the restart 到账八点五元 was not heard (correlation \(match.value))")
    }

    @Test func killedMidAlertIsRestartedAndSpeaksTheCutAlertInFullAndTheQueuedJobsOnce() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("kill_mid_alert")
        #expect(facts["playing_when_killed"] == "yes", "\(facts.summary)")
        #expect(facts.status("kill") == 0, "\(facts["kill"])")
        #expect(facts["pid_after"] != facts["pid_before"] && facts.number("pid_after") ?? 0 > 0, "\(facts.summary)")
        #expect(facts.number("restarts_after") == (facts.number("restarts_before") ?? -1) + 1, "\(facts.summary)")

        // Master was raised (and Music ducked) when the daemon was killed; the new daemon put them back from its
        // mixer state file, and after the queued jobs they are as the owner left them.
        let masterBefore = try #require(Self.mixer(facts["master_before"]), "\(facts["master_before"])")
        let masterDuring = try #require(Self.mixer(facts["master_during"]), "\(facts["master_during"])")
        let masterAfter = try #require(Self.mixer(facts["master_after"]), "\(facts["master_after"])")
        let musicDuring = try #require(Self.mixer(facts["music_during"]), "\(facts["music_during"])")
        let musicAfter = try #require(Self.mixer(facts["music_after"]), "\(facts["music_after"])")
        #expect(zip(masterDuring.raw, masterBefore.raw).allSatisfy { $0 > $1 }, "not raised: \(facts["master_during"])")
        #expect(masterAfter.raw == masterBefore.raw, "Master not restored: \(facts["master_after"])")
        #expect(musicDuring.raw.allSatisfy { $0 < 255 }, "not ducked when killed: \(facts["music_during"])")
        #expect(musicAfter.raw.allSatisfy { $0 == 255 }, "Music not restored: \(facts["music_after"])")
        #expect(facts.number("restored_logged") ?? 0 >= 1, "no 'restored a mixer setting' in the journal")

        // The journal's account (docs/protocol.md, "Durability"): all three jobs recovered at the restart, the
        // cut-off alert among them as interrupted; each spoken once in the end — the cut-off one again in full.
        let status = try #require(try Self.replies(facts["status_after"]).first?.status, "\(facts["status_after"])")
        #expect(status.journal.recoveredAtStart == 3 && status.journal.interruptedAtStart == 1, "\(status.journal)")
        let jobs = try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }
        let byAmount = Dictionary(grouping: jobs, by: { $0.amount ?? "" })
        for amount in ["12345.67", "2.00", "3.00"] {
            #expect(byAmount[amount]?.count == 1 && byAmount[amount]?.first?.state == .spoken,
                    "\(amount) not one job, spoken: \(facts["history"])")
        }

        // What the speaker got: the beginning of the alert, cut off by the kill; after the restart the alert in
        // full, then 到账二元 and 到账三元 — each whole once, nothing more (AudioMatch.hearings: every sound
        // followed sample by sample against the renders, within the gain Master gave it).
        let renders = [try facts.render("first"), try facts.render("queued_1"), try facts.render("queued_2")]
        let hearings = AudioMatch.hearings(of: renders, in: try facts.capture("heard"))
        let heard = hearings.map { ($0.best ?? -1, $0.complete) }
        #expect(heard.count == 4 && heard[0] == (0, false) && heard[1] == (0, true) && heard[2] == (1, true)
                && heard[3] == (2, true),
                "expected a fragment of the alert, then the alert, 2.00 and 3.00 whole; heard \(hearings)")
        if let fragment = hearings.first, fragment.best == 0 {
            let played = fragment.matched[0]
            #expect(played >= 16_000 / 20, "the alert was cut after \(played) samples: it had not started playing")
        }
    }

    /// A kill at a payment's tail on dmix (docs/protocol.md, "Durability"): its last sample written, dmix's ring
    /// holding the rest, the daemon killed 128 ms before the end. dmix stops the card with its last client, so the
    /// end is not heard; the restarted daemon does not count the payment heard but speaks it again from its start:
    /// a fragment, then the whole, once; the journal says spoken, attempts 2.
    @Test func killedAtTheTailOnDmixThePaymentIsSpokenAgainWholeNotCountedHeard() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("kill_at_tail")
        #expect(facts["say"].contains("queued"), "\(facts["say"])")
        print("kill_at_tail: killed \(facts["killed_before_end_ms"]) ms before the announcement's end")
        #expect(facts["pid_after"] != facts["pid_before"] && facts.number("pid_after") ?? 0 > 0, "\(facts.summary)")
        #expect(facts.number("restarts_after") == (facts.number("restarts_before") ?? -1) + 1, "\(facts.summary)")
        let jobs = try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }.filter { $0.order == "VM-TAIL-1" }
        #expect(jobs.count == 1 && jobs.first?.state == .spoken && jobs.first?.attempts == 2, "\(facts["history"])")
        // What the speaker got: 到账一百元 without its end (the card stopped with the daemon), then whole, once.
        let (expected, hearings) = try Self.expectCutThenWhole(facts)
        // Cut in its tail — the last 256 ms, what dmix's ring held — not before.
        if let fragment = hearings.first, fragment.best == 0, let onset = AudioMatch.onset(expected),
            let end = AudioMatch.end(expected)
        {
            #expect(fragment.matched[0] >= end - onset - 4_096, "cut \(end - onset - fragment.matched[0]) samples before the end")
        }
    }

    /// The same kill at a payment's tail with another client holding the card (a player on the `music` PCM), which
    /// keeps dmix's ring playing after the daemon's death (docs/protocol.md, "Durability"): the daemon sees a shared
    /// ring and writes a job's end at most `end_ahead_ms` (here a period and a third: 85 ms) ahead of the speaker, so
    /// a kill 400 ms before the end (placed by the capture: what the speaker got) finds the end not yet written —
    /// the payment is heard cut short, then whole, once; never whole twice, as with the whole buffer ahead (the step
    /// makes dmix's ring 1 s long, so that the kill has room on both sides).
    @Test func killedAtTheTailWithAnotherClientOnDmixThePaymentIsHeardCutThenWholeNotWholeTwice() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("kill_at_tail_shared")
        #expect(facts.status("say") == 0 && facts["say"].contains("queued"), "\(facts["say"])")
        print("kill_at_tail_shared: killed \(facts["killed_before_end_ms"]) ms before the announcement's end")
        #expect(facts["pid_after"] != facts["pid_before"] && facts.number("pid_after") ?? 0 > 0, "\(facts.summary)")
        #expect(facts["player_alive"] == "yes" && !facts["player_before_stop.log"].lowercased().contains("error"),
                "the other client stopped: \(facts["player_before_stop.log"])")
        let status = try #require(try Self.replies(facts["status"]).first?.status, "\(facts["status"])")
        #expect(status.audio.engine?.sink.sharedRing == true, "dmix not seen as a shared ring: \(status.audio)")
        #expect(status.audio.engine?.sink.bufferFrames == 16_384, "not the step's 1 s ring: \(status.audio)")
        let jobs = try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }.filter { $0.order == "VM-TAIL-2" }
        #expect(jobs.count == 1 && jobs.first?.state == .spoken && jobs.first?.attempts == 2, "\(facts["history"])")
        try Self.expectCutThenWhole(facts)
    }

    /// A kill at the tail's capture: the payment (`expected`) cut short at its end, then whole — two hearings.
    @discardableResult
    static func expectCutThenWhole(
        _ facts: Facts, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> (expected: [Int16], hearings: [Hearing]) {
        let expected = try facts.render("expected")
        let hearings = AudioMatch.hearings(of: [expected], in: try facts.capture("heard"))
        let heard = hearings.map { ($0.best ?? -1, $0.complete) }
        #expect(heard.count == 2 && heard[0] == (0, false) && heard[1] == (0, true),
                "expected the payment cut short at its end, then whole; heard \(hearings)", sourceLocation: sourceLocation)
        return (expected, hearings)
    }

    /// The wall clock set two days ahead, then three back, with restarts between (docs/protocol.md, "Time"): the
    /// order id stays a duplicate throughout, the history keeps its job, and nothing is purged.
    @Test func theWallClockJumpingEitherWayKeepsTheOrderAndPurgesNothing() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("clock_jump")
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        #expect(facts.status("forward") == 0 && facts.status("back") == 0 && facts.status("put_back") == 0, "\(facts.summary)")
        for name in ["say_forward", "say_forward_restarted", "say_back_restarted"] {
            #expect(facts.status(name) == 3 && facts[name].contains("duplicate"), "\(name): \(facts[name])")
        }
        #expect(facts.status("restart_forward") == 0 && facts.status("restart_back") == 0, "\(facts.summary)")
        for name in ["history_forward", "history_back"] {
            let jobs = try Self.replies(facts[name]).flatMap { $0.jobs ?? [] }.filter { $0.order == "VM-CLOCK-1" }
            #expect(jobs.count == 1 && jobs.first?.state == .spoken, "\(name): \(facts[name])")
        }
        #expect(facts["purged"] == "0", "'journal purged' logged: \(facts.summary)")
        // Put back: the clock is where it was, give or take the step's own duration.
        let format = ISO8601DateFormatter()
        let before = try #require(format.date(from: facts["date_before"]), "\(facts["date_before"])")
        let after = try #require(format.date(from: facts["date_after"]), "\(facts["date_after"])")
        #expect(after.timeIntervalSince(before) >= 0 && after.timeIntervalSince(before) < 600, "\(before) → \(after)")
    }

    // MARK: PipeWire (issue 29): the third sound stack, as examples/pipewire/ sets it up

    @Test func throughPipeWireSayIsHeardWholeAsTheRender() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("pipewire")
        #expect(facts["ready"] == "yes", "PipeWire and WirePlumber did not come up: \(facts["nodes"])")
        #expect(facts.status("verify") == 0 && facts["verify"].isEmpty, "systemd-analyze verify: \(facts["verify"])")
        #expect(facts.status("enable") == 0, "\(facts["enable"])")
        #expect(facts["pipewire_id"].contains("(pipewire)") && facts["pipewire_id"].contains("(audio)"), "\(facts["pipewire_id"])")
        #expect(facts["versions"].contains("wireplumber 0.5"), "\(facts["versions"])")
        // The daemon under its unit with the drop-in: group pipewire for the socket.
        #expect(facts["daemon_groups"].split(separator: ",").contains("pipewire"), "\(facts.summary)")
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        let status = try #require(try Self.replies(facts["status"]).first?.status, "\(facts["status"])")
        #expect(status.audio.device == "pipewire:ROLE=Announcement", "\(status.audio)")
        let expected = try facts.render("expected")
        let hearings = AudioMatch.hearings(of: [expected], in: try facts.capture("heard"))
        #expect(hearings.count == 1 && hearings.first?.best == 0, "through PipeWire 到账一百元 was not heard once: \(hearings)")
        Self.expectWholeThroughPipeWire(hearings, of: [expected])
    }

    /// Every hearing through PipeWire complete. Kept visible, not hidden: in one VM run of three the stream's end
    /// was cut — 到账一百元 heard sample for sample but for its last 9 ms (147 samples of its fade), then silence,
    /// though the daemon pads two periods of silence after it: the ALSA pipewire plugin's delay leaves out the VM
    /// sink's 2048 frames of headroom, so the daemon takes the end for played and closes the stream up to ~190 ms
    /// early (issue 29's note). Anything cut by more than 50 ms at its end, or anywhere else, still fails.
    /// Heard from its start to within 50 ms (800 samples) of its last audible sample.
    static func nearlyWhole(_ hearing: Hearing, of candidates: [[Int16]]) -> Bool {
        guard let best = hearing.best else { return false }
        let audible = (AudioMatch.end(candidates[best], threshold: 64) ?? 0) - (AudioMatch.onset(candidates[best]) ?? 0)
        return hearing.matched[best] >= audible - 800
    }

    static func expectWholeThroughPipeWire(
        _ hearings: [Hearing], of candidates: [[Int16]], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for hearing in hearings {
            guard hearing.best != nil, !hearing.complete else { continue }
            #expect(nearlyWhole(hearing, of: candidates), "cut by more than 50 ms: \(hearing)", sourceLocation: sourceLocation)
            withKnownIssue("PipeWire in the VM: the stream's last milliseconds cut at its close", isIntermittent: true) {
                #expect(hearing.complete, "\(hearing)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func throughPipeWireMasterIsRaisedForTheAlertAndPutBackAndMuteIsRespectedOrOverridden() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("pipewire_volume")
        let before = try #require(Self.mixer(facts["master_before"]), "\(facts["master_before"])")
        let during = try #require(Self.mixer(facts["master_during"]), "\(facts["master_during"])")
        let after = try #require(Self.mixer(facts["master_after"]), "\(facts["master_after"])")
        let maximum = try #require(Self.playbackLimit(facts["master_before"]), "no limits: \(facts["master_before"])")
        let scale = VolumeScale(raw: 0...maximum)
        let threshold = try VolumeMapping.raw(for: .percent(60), scale: scale, element: "Master")
        #expect(before.raw.allSatisfy { VolumeMapping.percent(ofRaw: $0, scale: scale) == 20 }, "\(facts["master_before"])")
        #expect(during.raw.allSatisfy { $0 >= threshold }, "not raised to 60% (raw \(threshold)): \(facts["master_during"])")
        #expect(after.raw == before.raw, "not put back exactly: \(facts["master_after"])")
        // Heard at the raised level: PipeWire's ALSA ctl maps its raw value cubically onto the sink's linear volume.
        let heard = try facts.capture("heard")
        let expected = try facts.render("expected")
        let hearings = AudioMatch.hearings(of: [expected], in: heard)
        #expect(hearings.count == 1 && hearings.first?.best == 0, "\(hearings)")
        Self.expectWholeThroughPipeWire(hearings, of: [expected])
        let gain = try Self.level(heard) - Self.level(expected)
        let raised = try #require(during.raw.min())
        let cubic = 60 * log10(Double(raised) / Double(maximum))
        #expect(abs(gain - cubic) < 1.5, "heard \(gain) dB relative to the render; Master at raw \(raised) is \(cubic) dB")
        // Muted, mute_policy "respect": not played (exit 5, muted), still muted.
        #expect(facts.status("say_muted") == 5 && facts["say_muted"].contains("muted"), "\(facts["say_muted"])")
        #expect(Self.switches(facts["master_muted"]) == ["off"], "\(facts["master_muted"])")
        // "override": played, and muted again after, at the owner's volume.
        #expect(facts.status("say_override") == 0 && facts["say_override"].contains("spoken"), "\(facts["say_override"])")
        let override = try facts.render("override")
        let overridden = AudioMatch.hearings(of: [override], in: try facts.capture("override"))
        #expect(overridden.count == 1 && overridden.first?.best == 0, "\(overridden)")
        Self.expectWholeThroughPipeWire(overridden, of: [override])
        #expect(Self.switches(facts["master_after_override"]) == ["off"], "\(facts["master_after_override"])")
        #expect(Self.mixer(facts["master_after_override"])?.raw == before.raw, "\(facts["master_after_override"])")
    }

    /// WirePlumber 0.5's role-based policy with the package's drop-in (examples/pipewire/wireplumber-announce.conf):
    /// the announcement's stream carries media.role Announcement (the ALSA pipewire plugin's ROLE), its loopback
    /// ducks the Multimedia one, and music on a Music-role stream is lowered while it plays, the daemon touching no
    /// control. With no role (mix), the music keeps its level.
    @Test func wirePlumberDucksMusicByRoleWhileTheAnnouncementPlaysAndMixLeavesIt() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("pipewire_duck")
        #expect(!facts["music.log"].lowercased().contains("error"), "pw-play: \(facts["music.log"])")
        let stream = try #require(Self.daemonStream(facts["graph_during"]), "no stream of the daemon: \(facts["graph_during"])")
        #expect(stream["media.role"] as? String == "Announcement", "\(stream)")
        let mixStream = try #require(Self.daemonStream(facts["graph_mix"]), "no stream of the daemon: \(facts["graph_mix"])")
        #expect(mixStream["media.role"] == nil || mixStream["media.role"] as? String == "Multimedia", "\(mixStream)")

        let expected = try facts.render("expected")
        let duck = try Self.toneAround(heard: try facts.capture("heard"), expected: expected)
        print("PipeWire duck: music 15 dB down \(duck.duckedAfterMs.map { "\($0) ms" } ?? "never") after the first sample")
        #expect(duck.music > -20, "no music before the announcement (\(duck.music) dB)")
        #expect(duck.music - duck.loudestDuring >= 15, "music at \(duck.music) dB, during the announcement up to \(duck.loudestDuring) dB")
        #expect(abs(duck.restored - duck.music) < 1, "music at \(duck.music) dB before, \(duck.restored) dB after")

        let heardMix = try facts.capture("heard_mix")
        let mix = try Self.toneAround(heard: heardMix, expected: expected)
        #expect(mix.music > -20, "no music before the announcement (\(mix.music) dB)")
        #expect(abs(mix.loudestDuring - mix.music) < 1.5, "mix: music at \(mix.music) dB, up to \(mix.loudestDuring) dB")
        #expect(abs(mix.restored - mix.music) < 1, "music at \(mix.music) dB before, \(mix.restored) dB after")
        // Seen in three VM runs of four: with the announcement's stream in the Multimedia loopback beside the
        // music, the whole output stops for 100–150 ms once, 1–2 s into the announcement (music and speech alike),
        // on the emulated machine. Not lowered, but not "as it is" either; kept visible until it is understood.
        withKnownIssue("PipeWire mix: one 100–150 ms dropout of the whole output mid-announcement", isIntermittent: true) {
            #expect(abs(mix.quietestDuring - mix.music) < 1.5,
                    "mix: music at \(mix.music) dB, during the announcement down to \(mix.quietestDuring) dB")
        }
    }

    @Test func aPipeWireRestartMidAnnouncementPlaysEveryJobNotHeardAgainFromItsStart() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("pipewire_recovery")
        #expect(facts["playing_when_restarted"] == "yes", "\(facts.summary)")
        #expect(facts.status("restart") == 0 && facts["pipewire_pid_after"] != facts["pipewire_pid_before"], "\(facts.summary)")
        #expect(facts["wireplumber"] == "active", "WirePlumber did not come back with PipeWire: \(facts.summary)")
        let status = try #require(try Self.replies(facts["status_after"]).first?.status, "\(facts["status_after"])")
        let engine = try #require(status.audio.engine, "\(status.audio)")
        #expect(engine.deviceFailures >= 1 && engine.recoveries >= 1, "\(engine)")
        #expect(facts.number("failed_logged") ?? 0 >= 1 && facts.number("works_logged") ?? 0 >= 1, "\(facts.summary)")
        let jobs = try Self.replies(facts["history"]).flatMap { $0.jobs ?? [] }
        let byAmount = Dictionary(grouping: jobs, by: { $0.amount ?? "" })
        for amount in ["12345.67", "2.00", "3.00"] {
            #expect(byAmount[amount]?.count == 1 && byAmount[amount]?.first?.state == .spoken, "\(amount): \(facts["history"])")
        }
        // The capture: the beginning of the first, cut by the restart; then the first whole, 到账二元 and 到账三元.
        let renders = [try facts.render("first"), try facts.render("queued_1"), try facts.render("queued_2")]
        let hearings = AudioMatch.hearings(of: renders, in: try facts.capture("heard"))
        // Nothing behind the cut job is lost: 到账二元 and 到账三元 whole, once each, in order, at the end.
        // The last one ends the stream: its close may cut its last milliseconds (expectWholeThroughPipeWire).
        let whole = hearings.filter { $0.complete || ($0.best == 2 && Self.nearlyWhole($0, of: renders)) }.map { $0.best ?? -1 }
        Self.expectWholeThroughPipeWire(hearings.filter { $0.best == 2 }, of: renders)
        #expect(whole.suffix(2) == [1, 2] && whole.filter { $0 != 0 }.count == 2, "heard \(hearings)")
        #expect(hearings.first.map { $0.best == 0 && !$0.complete } == true, "the first was not cut: \(hearings)")
        // The cut job played again from its start, whole. Seen in two VM runs of three: the replay, begun while
        // WirePlumber was still setting the graph up after the restart, lost 0.8 s in its middle inside PipeWire
        // (the daemon cannot see it; it records the job spoken). Kept visible until it is solved.
        withKnownIssue("PipeWire restart: the replay begun while WirePlumber sets up loses audio inside PipeWire", isIntermittent: true) {
            let heard = hearings.map { ($0.best ?? -1, $0.complete) }
            #expect(heard.count == 4 && heard[1] == (0, true),
                    "expected a fragment of the first, then the first, 2.00 and 3.00 whole; heard \(hearings)")
        }
    }

    @Test func afterThePipeWirePhaseTheDaemonPlaysThroughDmixAgain() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("pipewire_stop")
        #expect(facts.status("disable") == 0 && facts["pipewire"] == "inactive", "\(facts.summary)")
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        let hearings = AudioMatch.hearings(of: [try facts.render("expected")], in: try facts.capture("heard"))
        #expect(hearings.count == 1 && hearings.first?.complete == true, "\(hearings)")
    }

    /// The power pulled (qemu killed) while payments were being accepted and one was at its tail on dmix, then the
    /// same disk booted again (issue 27): every payment acknowledged before the cut (say exit 0) is heard whole
    /// exactly once across the two captures — a fragment before the cut and one whole hearing after counts as
    /// once — none twice, one in flight at most once; the journal says each acknowledged one spoken; Master is
    /// the owner's again.
    @Test func aPowerCutMidAnnouncementLosesNoAcknowledgedPaymentAndDoublesNone() async throws {
        let run = try await VirtualMachineRun.amd64.value
        let cut = run.facts("power_cut")
        let after = run.facts("power_cut_after")
        #expect(cut["not_cut"] == "(missing)", "\(cut["not_cut"])")
        #expect(after["cut"].hasPrefix("cut "), "the host did not pull the power: \(after.summary)")
        let acknowledged = Self.files(in: "\(cut.directory)/acknowledged").sorted()
        let sent = Self.files(in: "\(cut.directory)/sent").filter { !$0.hasSuffix(".say") }.sorted()
        #expect(acknowledged.count >= 3, "\(acknowledged)")
        print("power cut: 0.4 s into \(cut["target"]); acknowledged \(acknowledged.joined(separator: " ")), sent \(sent.count)")
        // The capture of the boot after it began before the daemon could play.
        #expect(after["capture_unit"].contains("ActiveState=active") && after["capture_unit"].contains("Result=success"),
                "\(after["capture_unit"])")
        #expect(Double(after["capture_started"]) ?? .infinity < Double(after["daemon_started"]).map { $0 / 1e6 } ?? 0,
                "the capture began at \(after["capture_started"]) s, the daemon at \(after["daemon_started"]) µs after boot")

        let orders = (1...8).map { "PC-\($0)" }
        let renders = try (1...8).map { try after.render("pc\($0)") }
        let hearings = AudioMatch.hearings(of: renders, in: try cut.capture("heard"))
            + AudioMatch.hearings(of: renders, in: try after.capture("heard"))
        var whole = [Int](repeating: 0, count: orders.count)
        for hearing in hearings where hearing.complete { whole[hearing.best ?? 0] += 1 }
        // (The recordings' own logs, where an overrun — the recording losing samples — would be said.)
        let recordings = "recording: \(cut["heard.arecord.log"]) \(after["heard.arecord.log"])"
        #expect(hearings.allSatisfy { $0.best != nil }, "a sound that is none of the payments: \(hearings); \(recordings)")
        let jobs = try Self.replies(after["history"]).flatMap { $0.jobs ?? [] }
        for (index, order) in orders.enumerated() {
            let journaled = jobs.filter { $0.order == order }
            if acknowledged.contains(order) {
                #expect(whole[index] == 1, "\(order) (acknowledged) heard whole \(whole[index]) times: \(hearings); \(recordings)")
                #expect(journaled.count == 1 && journaled.first?.state == .spoken, "\(order): \(after["history"])")
            } else {
                #expect(whole[index] <= 1, "\(order) heard whole \(whole[index]) times: \(hearings)")
                #expect(journaled.count <= 1 && journaled.allSatisfy { $0.state == .spoken }, "\(order): \(after["history"])")
                #expect(journaled.isEmpty == (whole[index] == 0), "\(order): journaled \(journaled), heard \(whole[index])")
            }
        }
        let status = try #require(try Self.replies(after["status"]).first?.status, "\(after["status"])")
        print("power cut: recovered at start \(status.journal.recoveredAtStart), of them interrupted \(status.journal.interruptedAtStart)")
        // The owner's volume (alsactl store'd, below the threshold, raised when the power went) is back.
        let owner = try #require(Self.mixer(cut["master_owner"]), "\(cut["master_owner"])")
        #expect(Self.mixer(after["master_after"])?.raw == owner.raw, "Master \(after["master_after"]), the owner's \(owner.raw)")
    }

    /// The replies printed by `announce-ctl … --json`, one per line.
    /// Logs are journal entries with the job's fields: a payment is found by `journalctl ORDER_ID=…` under the real
    /// journald, with its message id, channel and amount. Metrics are scraped over HTTP from the unit as installed:
    /// without the metrics drop-in the daemon says why there are none and speaks on; with it, a real scrape on
    /// loopback answers, with the payment totals the journal holds (kept across the restarts before it).
    @Test func aPaymentIsFoundInTheJournalByItsOrderAndMetricsAreScrapedOnLoopback() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("observability")
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        #expect(facts.status("journal_order") == 0, "\(facts["journal_order"])")
        let entries = facts["journal_order"].split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(!entries.isEmpty && entries.allSatisfy { $0["ORDER_ID"] as? String == "VM-JOURNAL-1" }, "\(facts["journal_order"])")
        let spoken = entries.first { $0["MESSAGE_ID"] as? String == EventKind.spoken.messageID }
        #expect(spoken != nil, "no entry with the spoken event's MESSAGE_ID: \(facts["journal_order"])")
        #expect(spoken?["SYSLOG_IDENTIFIER"] as? String == "announced")
        #expect(spoken?["_SYSTEMD_UNIT"] as? String == "announced.service")
        #expect(spoken?["CHANNEL"] as? String == "alipay" && spoken?["AMOUNT_FEN"] as? String == "850")
        #expect(spoken?["STATE"] as? String == "spoken" && spoken?["EVENT"] as? String == "spoken")
        #expect(spoken?["JOB_ID"] as? String != nil && spoken?["PRIORITY"] as? String == "6")
        #expect(!facts["journal_other"].contains("VM-JOURNAL-1") && !facts["journal_other"].contains("finished"),
                "another order id finds nothing of this one: \(facts["journal_other"])")

        // [metrics] listen with the unit as shipped (no network): said, not fatal.
        #expect(facts.status("say_no_dropin") == 0, "\(facts["say_no_dropin"])")
        #expect(facts.status("scrape_no_dropin") != 0, "\(facts["scrape_no_dropin"])")
        #expect(facts["status_no_dropin"].contains("NOT SERVING"), "\(facts["status_no_dropin"])")
        #expect(facts["unavailable_logged"].contains("drop-in"), "\(facts["unavailable_logged"])")
        // With the drop-in: a real scrape.
        #expect(facts.status("scrape") == 0, "\(facts["scrape"])")
        let scrape = facts["scrape"]
        #expect(scrape.hasPrefix("HTTP/1.1 200"), "\(scrape)")
        #expect((HTTP.sample("announce_payments_total{state=\"spoken\"}", in: scrape) ?? 0) >= 2, "\(scrape)")
        #expect((HTTP.sample("announce_payments_spoken_fen_total{kind=\"payment\"}", in: scrape) ?? 0) >= 950)
        #expect(HTTP.sample("announce_audio_xruns_total", in: scrape) != nil)
        #expect(facts["status"].contains("metrics:  http://127.0.0.1:9464"), "\(facts["status"])")
    }

    /// The names of the files in a folder (none if there is no such folder).
    static func files(in directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory))?.filter { !$0.hasPrefix(".") } ?? []
    }

    /// The upper bound of the element's playback range ("Limits: Playback 0 - 65536").
    static func playbackLimit(_ output: String) -> Int? {
        guard let line = output.split(separator: "\n").first(where: { $0.contains("Limits:") }) else { return nil }
        return line.split(separator: " ").last.flatMap { Int($0) }
    }

    /// Each channel's playback switch as amixer shows it ("[on]", "[off]").
    static func switches(_ output: String) -> [String] {
        output.split(separator: "\n").filter { !$0.contains("Limits") && $0.contains("Playback") }.compactMap { line in
            line.split(separator: " ").last(where: { $0 == "[on]" || $0 == "[off]" }).map { String($0.dropFirst().dropLast()) }
        }
    }

    /// The properties of the daemon's stream in a `pw-dump`: the node the ALSA pipewire plugin makes for it
    /// ("alsa_playback.announce…"; the daemon is the only ALSA client in the VM's PipeWire steps).
    static func daemonStream(_ dump: String) -> [String: Any]? {
        guard let objects = try? JSONSerialization.jsonObject(with: Data(dump.utf8)) as? [[String: Any]] else { return nil }
        for object in objects where object["type"] as? String == "PipeWire:Interface:Node" {
            guard let info = object["info"] as? [String: Any], let props = info["props"] as? [String: Any] else { continue }
            if (props["node.name"] as? String)?.hasPrefix("alsa_playback.") == true { return props }
        }
        return nil
    }

    /// The 6 kHz music tone's level around the announcement in a capture: the announcement found with the tone
    /// notched out (past the music's first half second), then the tone per 100 ms window — before it (the median),
    /// from 0.6 s into it to its end (loudest and quietest), and from half a second after it (the median) — and
    /// how long after its first sample the tone was first 15 dB down.
    static func toneAround(heard: [Int16], expected: [Int16]) throws
        -> (music: Double, loudestDuring: Double, quietestDuring: Double, restored: Double, duckedAfterMs: Int?)
    {
        let musicStart = try #require(AudioMatch.onset(heard), "nothing was heard")
        // The announcement's onset in the notched capture: the first 10 ms with sound in a tenth of it, not a lone
        // sample — a volume step of the music (WirePlumber ducks it as the stream starts, up to 0.3 s before the
        // first sample of speech is heard) leaves one sample of the tone behind the notch.
        let notched = notch(heard)
        let sustained = try #require(
            stride(from: min(heard.count, musicStart + 8_000), to: notched.count - 160, by: 16).first { start in
                notched[start..<start + 160].count { abs(Int32($0)) >= 300 } >= 16
            }, "no announcement in the capture")
        let searchFrom = max(musicStart + 8_000, sustained - 400)
        let match = AudioMatch.correlation(expected: notch(expected), captured: Array(notched[searchFrom...]))
        #expect(match.value > 0.95, "the announcement is not in the mix (correlation \(match.value))")
        let speechStart = searchFrom + (try #require(AudioMatch.onset(expected))) + match.lag
        let speechEnd = searchFrom + (try #require(AudioMatch.end(expected))) + match.lag
        let window = 1_600
        let levels = stride(from: musicStart, to: heard.count - window, by: window).map {
            (start: $0, level: toneLevel(heard[$0..<$0 + window]))
        }
        let musicEnd = try #require(levels.last(where: { $0.level > -40 })?.start)
        let before = levels.filter { $0.start >= musicStart + 4_800 && $0.start + window <= speechStart - 4_800 }
        let during = levels.filter { $0.start >= speechStart + 9_600 && $0.start + window <= speechEnd }
        let after = levels.filter { $0.start >= speechEnd + 8_000 && $0.start + window <= musicEnd }
        #expect(before.count >= 5 && during.count >= 20 && after.count >= 5,
                "\(before.count) / \(during.count) / \(after.count) windows")
        let music = median(before.map(\.level))
        let ducked = levels.first { $0.start >= speechStart && $0.level < music - 15 }
        return (
            music, during.map(\.level).max() ?? 0, during.map(\.level).min() ?? 0, median(after.map(\.level)),
            ducked.map { ($0.start + window - speechStart) * 1000 / 16_000 }
        )
    }

    static func replies(_ output: String) throws -> [Response] {
        try output.split(separator: "\n").map { try JSONDecoder().decode(Response.self, from: Data($0.utf8)) }
    }

    /// The sounds in `samples`: runs that start and end with a sample of magnitude ≥ 300 and contain no
    /// quieter stretch of `silence` samples or more.
    static func sounds(in samples: [Int16], silence: Int) -> [ArraySlice<Int16>] {
        var sounds: [ArraySlice<Int16>] = []
        var start: Int?
        var lastLoud = 0
        for (index, sample) in samples.enumerated() where abs(Int32(sample)) >= 300 {
            if let begun = start, index - lastLoud >= silence {
                sounds.append(samples[begun...lastLoud])
                start = index
            } else if start == nil {
                start = index
            }
            lastLoud = index
        }
        if let start { sounds.append(samples[start...lastLoud]) }
        return sounds
    }

    @Test func stopIsCleanAndTheSocketStartsTheDaemonAgain() async throws {
        let facts = try await VirtualMachineRun.amd64.value.facts("stop_and_reactivate")
        #expect(facts.status("stop") == 0, "\(facts["stop"])")
        #expect(facts["result"] == "success", "SIGTERM did not end in a clean exit: \(facts.summary)")
        #expect(facts["service_stopped"] == "inactive")
        #expect(facts["socket_unit"] == "active", "the socket went away with the daemon")
        #expect(facts.status("ping") == 0, "\(facts["ping"])")
        #expect(facts["service_after_ping"] == "active")
    }

    @Test func anUpgradeKeepsTheJournalAndTheEditedConffile() async throws {
        try PackageChecks.upgrade(try await VirtualMachineRun.amd64.value.facts("upgrade"))
    }

    @Test func purgeRemovesWhatThePackagesMade() async throws {
        try PackageChecks.purge(try await VirtualMachineRun.amd64.value.facts("purge"))
    }

    /// One simple mixer element as `amixer sget` prints it: raw value and dB of every channel
    /// ("  Front Left: Playback 76 [30%] [-35.80dB]"; the raw value is the number before "[N%]"). `decibels` is
    /// empty when the element has no dB information.
    static func mixer(_ output: String) -> (raw: [Int], decibels: [Double])? {
        var raw: [Int] = []
        var decibels: [Double] = []
        for line in output.split(separator: "\n") where !line.contains("Limits") {
            let fields = line.split(separator: " ")
            guard let percent = fields.firstIndex(where: { $0.hasPrefix("[") && $0.hasSuffix("%]") }), percent > 0,
                let value = Int(fields[percent - 1])
            else { continue }
            raw.append(value)
            if let db = fields.last(where: { $0.hasSuffix("dB]") }).flatMap({ Double($0.dropFirst().dropLast(3)) }) {
                decibels.append(db)
            }
        }
        return raw.isEmpty ? nil : (raw, decibels)
    }

    /// The element's scale from `amixer cget` of a softvol control: "max=255" and
    /// "dBscale-min=-51.00dB,step=0.20dB,mute=0".
    static func softvolScale(_ output: String) -> VolumeScale? {
        func number(after key: String, until end: String) -> Double? {
            guard let range = output.range(of: key) else { return nil }
            let rest = output[range.upperBound...]
            return Double(rest.prefix { !end.contains($0) })
        }
        guard let max = number(after: "max=", until: ","), let minimum = number(after: "dBscale-min=", until: "d"),
            let step = number(after: "dB,step=", until: "d")
        else { return nil }
        let low = Int((minimum * 100).rounded())
        let stepCentidB = Int((step * 100).rounded())
        let top = Int(max)
        return VolumeScale(
            raw: 0...top,
            decibels: .init(
                range: low...(low + top * stepCentidB), fromRaw: { low + $0 * stepCentidB },
                toRaw: { centidB, up in
                    let steps = Double(centidB - low) / Double(stepCentidB)
                    return Swift.min(top, Swift.max(0, Int(up ? steps.rounded(.up) : steps.rounded(.down))))
                }))
    }

    /// RMS level of the sound (onset to end) in dB.
    static func level(_ samples: [Int16]) throws -> Double {
        let start = try #require(AudioMatch.onset(samples))
        let end = try #require(AudioMatch.end(samples))
        return 20 * log10(AudioMatch.rms(samples[start..<end]))
    }

    /// The samples with the music tone (6 kHz at 16 kHz: ω = 3π/4) removed by a two-zero notch.
    static func notch(_ samples: [Int16]) -> [Int16] {
        let c = -2 * cos(3 * Double.pi / 4)
        return samples.indices.map { index in
            let x0 = Double(samples[index])
            let x1 = index >= 1 ? Double(samples[index - 1]) : 0
            let x2 = index >= 2 ? Double(samples[index - 2]) : 0
            return Int16(clamping: Int(((x0 + c * x1 + x2) / 4).rounded()))
        }
    }

    /// The amplitude of the 6 kHz music tone in a window (a whole number of its periods), dB full scale.
    static func toneLevel(_ window: ArraySlice<Int16>) -> Double {
        var real = 0.0
        var imaginary = 0.0
        for (n, sample) in window.enumerated() {
            let phase = 2 * Double.pi * 6_000 / 16_000 * Double(n)
            real += Double(sample) * cos(phase)
            imaginary -= Double(sample) * sin(phase)
        }
        let amplitude = 2 * (real * real + imaginary * imaginary).squareRoot() / Double(window.count) / 32_768
        return 20 * log10(max(amplitude, 1e-9))
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? -.infinity : sorted[sorted.count / 2]
    }

    /// "→ Overall exposure level for announced.service: 0.4 SAFE 😀" → 0.4
    static func exposure(_ line: String) -> Double? {
        guard let colon = line.lastIndex(of: ":") else { return nil }
        return line[line.index(after: colon)...].split(separator: " ").first.flatMap { Double($0) }
    }
}
