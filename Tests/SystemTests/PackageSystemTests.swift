import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// The arm64 packages on an arm64 trixie system: Debian's arm64 kernel under qemu-system-aarch64 with real
/// systemd and snd-aloop (scripts/vm/run.sh --arch arm64). What the speaker gets there is compared with the amd64
/// render of the same amount — this test process's own, on x86_64 — sample for sample.
@Suite struct ARM64SystemTests {
    @Test func theArm64PackagesInstallUsersEnabledUnitsAndAVerifiedHardenedService() async throws {
        try PackageChecks.install(try await VirtualMachineRun.arm64.value.facts("install"), arch: "arm64")
    }

    @Test func sayOnArm64IsHeardAsTheAmd64RenderSampleForSample() async throws {
        let facts = try await VirtualMachineRun.arm64.value.facts("activation")
        let amd64 = try PackageChecks.amd64Render("100.00")
        // The arm64 executable composes and renders exactly what the amd64 one does (the same clips, the same
        // integer and float steps)…
        let arm64 = try facts.render("expected")
        #expect(arm64 == amd64, "the arm64 render differs from the amd64 one (\(arm64.count) and \(amd64.count) samples)")
        // …and the speaker got it: checked against the amd64 render.
        try PackageChecks.activation(facts, expected: amd64)
    }

    @Test func masterBelowTheThresholdIsRaisedForTheAlertAndPutBackOnArm64() async throws {
        try PackageChecks.volumeThreshold(try await VirtualMachineRun.arm64.value.facts("volume_threshold"))
    }

    @Test func anUpgradeOnArm64KeepsTheJournalAndTheEditedConffile() async throws {
        try PackageChecks.upgrade(try await VirtualMachineRun.arm64.value.facts("upgrade"))
    }

    @Test func purgeOnArm64RemovesWhatThePackagesMade() async throws {
        try PackageChecks.purge(try await VirtualMachineRun.arm64.value.facts("purge"))
    }
}

/// The checks both architectures' VMs share: what installing, upgrading and purging the packages must do, and
/// what the speaker must get (scripts/vm/guest/system-test.sh records the facts).
enum PackageChecks {
    static func install(_ facts: Facts, arch: String) throws {
        #expect(facts.status("dpkg_install") == 0, "dpkg -i: \(facts["dpkg_install"])")
        let packages = facts["packages"].split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(packages.count == 3, "\(facts["packages"])")
        for fields in packages {
            #expect(fields.count == 4 && fields[3] == "ii", "not installed: \(fields)")
            #expect(fields.count == 4 && fields[2] == (fields[0] == "announce-voices" ? "all" : arch), "\(fields)")
        }
        // The maintainer scripts, as debhelper writes them: units enabled and started, users and folders made.
        #expect(facts["service_enabled"] == "enabled" && facts["socket_enabled"] == "enabled", "\(facts.summary)")
        #expect(facts["push_enabled"] == "enabled", "\(facts.summary)")
        #expect(facts["service_active"] == "active" && facts["socket_active"] == "active", "\(facts.summary)")
        #expect(facts["id"].contains("(audio)"), "announce is not in the audio group: \(facts["id"])")
        #expect(facts["push_id"].contains("(announce)"), "announce-push may not reach the socket: \(facts["push_id"])")
        #expect(facts["run_dir"] == "announce announce 755", "\(facts["run_dir"])")
        #expect(facts["conffiles"].contains("/etc/announce/announced.toml"), "\(facts["conffiles"])")
        #expect(facts.status("version") == 0 && facts["version"].hasPrefix("announce-ctl ")
                    && facts["version"].contains("(commit "), "\(facts["version"])")
        #expect(facts.status("man") == 0, "man pages: \(facts["man"])")
        #expect(facts["completions"] == "3", "bash completions: \(facts.summary)")
        #expect(facts["cards"].contains("Loopback"), "\(facts["cards"])")
        // The amd64 guest has snd-dummy as a second card too (Debian's arm64 kernel has no such module).
        #expect(arch != "amd64" || facts["cards"].contains("Dummy"), "\(facts["cards"])")
        #expect(facts.status("verify") == 0 && facts["verify"].isEmpty, "systemd-analyze verify: \(facts["verify"])")
        // systemd-analyze security on the running system: exposure at most 2.0 (its --threshold=20).
        #expect(facts.status("security") == 0, "\(facts["security"])")
        let exposure = try #require(VMSystemTests.exposure(facts["exposure"]), "\(facts["exposure"])")
        #expect(exposure <= 2.0, "\(facts["exposure"])")
        #expect(facts.status("push_security") == 0, "\(facts["push_security"])")
        let pushExposure = try #require(VMSystemTests.exposure(facts["push_exposure"]), "\(facts["push_exposure"])")
        #expect(pushExposure <= 2.0, "\(facts["push_exposure"])")
        // Only the daemon's example becomes configuration; the push listener's (placeholder keys) is documentation.
        #expect(facts["etc_announce"] == "announced.toml", "\(facts.summary)")
        #expect(facts["push_example"] == "/usr/share/doc/announce/examples/push.toml", "\(facts.summary)")
        #expect(facts["push_config"].contains("No such file"), "\(facts.summary)")
        // docs/asound.conf's softvol controls exist on card 0 (the loopback).
        #expect(facts["controls"].contains("'Master'") && facts["controls"].contains("'Music'"), "\(facts["controls"])")
    }

    /// The daemon stopped, the socket held by systemd: the first client starts it, and what the speaker
    /// (hw:Loopback,1,0) got is `expected`, sample for sample within AudioMatch's tolerance, whole.
    static func activation(_ facts: Facts, expected: [Int16]) throws {
        #expect(facts["service_before"] == "inactive", "the daemon ran before anyone asked: \(facts.summary)")
        #expect(facts["socket_unit"] == "active")
        #expect(facts["socket_file"] == "root announce 660", "\(facts["socket_file"])")
        #expect(facts.status("say") == 0, "\(facts["say"])")
        #expect(facts["say"].contains("job 1 spoken"), "\(facts["say"])")
        #expect(facts["service_after"] == "active")
        #expect(facts["status_text"] == "listening on /run/announce/announce.sock", "\(facts["status_text"])")

        let heard = try facts.capture("heard")
        let hearings = AudioMatch.hearings(of: [expected], in: heard)
        #expect(hearings.count == 1 && hearings.first?.best == 0 && hearings.first?.complete == true,
                "hw:Loopback,1,0 did not get 到账一百元 once, whole: \(hearings)")
        let match = AudioMatch.correlation(expected: expected, captured: heard)
        #expect(match.value > 0.95, "correlation \(match.value)")

        // Restarted, it maps the clips its first start prepared (one file per pack, under StateDirectory=) and
        // loads no decoder, and what it speaks is the same.
        let prepared = facts["prepared"].split(separator: " ")
        #expect(prepared.count == 2 && prepared.allSatisfy { $0.hasSuffix(".clips") }, "\(facts["prepared"])")
        #expect(facts.status("restart") == 0, "\(facts["restart"])")
        #expect(facts.status("say_again") == 0 && facts["say_again"].contains("job 2 spoken"), "\(facts["say_again"])")
        #expect(facts["prepared_mapped"] == "2", "\(facts.summary)")
        #expect(facts["decoders_after_restart"] == "0", "\(facts.summary)")
        let again = AudioMatch.hearings(of: [expected], in: try facts.capture("heard_again"))
        #expect(again.count == 1 && again.first?.best == 0 && again.first?.complete == true, "\(again)")
    }

    static func volumeThreshold(_ facts: Facts) throws {
        let scale = try #require(VMSystemTests.softvolScale(facts["master_tlv"]), "\(facts["master_tlv"])")
        let before = try #require(VMSystemTests.mixer(facts["master_before"]), "\(facts["master_before"])")
        let during = try #require(VMSystemTests.mixer(facts["master_during"]), "\(facts["master_during"])")
        let after = try #require(VMSystemTests.mixer(facts["master_after"]), "\(facts["master_after"])")
        // examples/announced.toml: volume_threshold = 60 (alsamixer's scale).
        let threshold = try VolumeMapping.raw(for: .percent(60), scale: scale, element: "Master")
        #expect(before.raw.allSatisfy { $0 == 76 }, "\(facts["master_before"])")
        #expect(during.raw.allSatisfy { $0 >= threshold }, "not raised to 60% (raw \(threshold)): \(facts["master_during"])")
        #expect(after.raw == before.raw, "not put back: \(facts["master_after"])")
        // Heard at the raised level: the capture is the render times the gain amixer showed during the alert.
        let heard = try facts.capture("heard")
        let expected = try facts.render("expected")
        let match = AudioMatch.correlation(expected: expected, captured: heard)
        #expect(match.value > 0.95, "correlation \(match.value)")
        let gain = try VMSystemTests.level(heard) - VMSystemTests.level(expected)
        let duringDecibels = try #require(during.decibels.min())
        #expect(abs(gain - duringDecibels) < 1.5,
                "heard \(gain) dB relative to the render, amixer said \(duringDecibels) dB during the alert")
    }

    /// The next version installed over the running one (scripts/vm/run.sh builds it as VERSION+upgrade1).
    static func upgrade(_ facts: Facts) throws {
        #expect(facts.status("dpkg_upgrade") == 0, "dpkg -i of the next version: \(facts["dpkg_upgrade"])")
        for line in facts["packages"].split(separator: "\n") {
            let fields = line.split(separator: " ")
            #expect(fields.count == 3 && fields[1].hasSuffix("+upgrade1") && fields[2] == "ii", "\(line)")
        }
        // The operator's edit of the conffile is kept, silently (the packaged file did not change).
        #expect(facts["conffile_tail"] == "# kept across upgrades: an operator's line", "\(facts["conffile_tail"])")
        // Nothing set aside (.dpkg-dist, .dpkg-old); push.toml is the operator's, where the push step wrote it.
        let files = facts["etc_announce"].split(separator: " ")
        #expect(files.contains("announced.toml") && !files.contains { $0.contains(".dpkg-") }, "\(facts["etc_announce"])")
        // The journal is kept: every job recorded before is there after, as it was.
        let before = try VMSystemTests.replies(facts["history_before"]).flatMap { $0.jobs ?? [] }
        let after = try VMSystemTests.replies(facts["history_after"]).flatMap { $0.jobs ?? [] }
        #expect(!before.isEmpty, "no history before the upgrade: \(facts["history_before"])")
        for job in before {
            #expect(after.contains { $0.id == job.id && $0.state == job.state && $0.amount == job.amount },
                    "job \(job.id) (\(job.state)) is not in the journal after the upgrade")
        }
        // The new executable speaks, numbering on from the old journal ("job N spoken …").
        #expect(facts.status("say") == 0 && facts["say"].contains("spoken"), "\(facts["say"])")
        let words = facts["say"].split(separator: " ")
        let id = words.firstIndex(of: "job").flatMap { words.index(after: $0) < words.endIndex ? Int(words[$0 + 1]) : nil }
        #expect((id ?? 0) > (before.map(\.id).max() ?? .max), "a new job id after the old ones: \(facts["say"])")
        let hearings = AudioMatch.hearings(of: [try facts.render("expected")], in: try facts.capture("heard"))
        #expect(hearings.count == 1 && hearings.first?.complete == true, "\(hearings)")
        #expect(facts["service"] == "active")
    }

    static func purge(_ facts: Facts) throws {
        #expect(facts.status("purge") == 0, "dpkg --purge: \(facts["purge"])")
        #expect(facts["packages_left"].isEmpty, "\(facts["packages_left"])")
        for name in ["state_dir", "push_state_dir", "etc_announce", "run_dir"] {
            #expect(facts[name].contains("No such file"), "\(name) left after purge: \(facts[name])")
        }
        #expect(facts["executables"] == "0" && facts["unit_files"] == "0", "\(facts.summary)")
        #expect(facts["enable_links"] == "0", "units still enabled: \(facts.summary)")
        #expect(facts["socket_unit"] != "active", "the socket is still held: \(facts.summary)")
        #expect(facts["daemon_processes"] == "0", "\(facts.summary)")
        // Debian keeps system users on purge (debian/announce.postrm says why).
        #expect(facts["users"] == "announce announce-push", "\(facts.summary)")
    }

    /// What the amd64 build (this test process) renders for an amount with the default Mandarin pack.
    static func amd64Render(_ amount: String) throws -> [Int16] {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        return try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
    }
}
