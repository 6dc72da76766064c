import Foundation
import Logging
import Synchronization
import Testing

@testable import AnnounceCore

/// The volume policy against a fake mixer element: when to raise, what to put back, when the user wins,
/// mute policies, and crash safety through the state file.
struct VolumeGuardTests {
    let directory: String
    let stateFile: MixerStateFile

    init() throws {
        directory = NSTemporaryDirectory() + "volume-guard-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        stateFile = MixerStateFile(path: "\(directory)/mixer-state.json")
    }

    func makeGuard(
        _ control: FakeVolumeControl, threshold: VolumeLevel? = .percent(60), policy: MutePolicy = .respect,
        allowEnforce: Bool = false
    ) -> VolumeGuard {
        VolumeGuard(
            control: control, threshold: threshold, mutePolicy: policy, stateFile: stateFile,
            logger: Logger(label: "test"), allowEnforce: allowEnforce)
    }

    /// A job that enforces it plays through the owner's mute (unmuted and raised, put back muted after), when the
    /// terminal allows it; the jobs after it in the burst that do not are muted, as the owner wants.
    @Test func anEnforcedJobPlaysThroughTheMuteWhereAllowed() throws {
        let control = FakeVolumeControl(raw: [10, 10], switches: [false])
        let guarded = makeGuard(control, policy: .respect, allowEnforce: true)
        #expect(guarded.begin() == .muted, "not enforced: the mute is respected")
        #expect(control.writes.isEmpty)
        #expect(guarded.begin(enforce: true) == .play)
        #expect(control.value == VolumeReading(raw: [60, 60], switches: [true, true]))
        #expect(guarded.begin() == .muted, "the next job of the burst does not enforce it")
        #expect(guarded.begin(enforce: true) == .play)
        guarded.end()
        #expect(control.value == VolumeReading(raw: [10, 10], switches: [false, false]))
        #expect(try stateFile.entries().isEmpty)
        #expect(guarded.status().allowEnforce == true)
    }

    @Test func anEnforcedJobFollowsTheMutePolicyWhereNotAllowed() {
        let control = FakeVolumeControl(raw: [10], switches: [false])
        let guarded = makeGuard(control, policy: .respect)
        #expect(guarded.begin(enforce: true) == .muted)
        #expect(control.writes.isEmpty)
        #expect(guarded.status().allowEnforce == nil)
    }

    /// The owner mutes while a burst plays: an enforced job after that is unmuted for, and the mute comes back.
    @Test func anEnforcedJobMidBurstUnmutesWhatTheOwnerMuted() {
        let control = FakeVolumeControl(raw: [80], switches: [true])
        let guarded = makeGuard(control, policy: .respect, allowEnforce: true)
        #expect(guarded.begin() == .play)
        control.userSets(switches: [false])
        #expect(guarded.begin() == .muted)
        #expect(guarded.begin(enforce: true) == .play)
        #expect(control.value.switches == [true])
        guarded.end()
        #expect(control.value == VolumeReading(raw: [80], switches: [false]), "the owner's mute is back")
    }

    @Test func belowThresholdIsRaisedAndTheExactOriginalComesBackAfter() throws {
        // A stereo element, left at 20, right at 75: only the channel below 60% is raised.
        let control = FakeVolumeControl(raw: [20, 75], switches: [true])
        let guarded = makeGuard(control)
        #expect(guarded.begin() == .play)
        #expect(control.value.raw == [60, 75])
        #expect(guarded.status().raised)
        guarded.end()
        #expect(control.value.raw == [20, 75])
        #expect(control.writes == ["write raw [60, 75]", "write raw [20, 75]"])
        #expect(try stateFile.entries().isEmpty, "nothing is owed once the original is back")
        let status = guarded.status()
        #expect(!status.raised && status.raises == 1 && status.restores == 1 && status.userOverrides == 0)
    }

    @Test func theOriginalIsOnDiskBeforeTheVolumeIsRaised() throws {
        let control = FakeVolumeControl(raw: [10])
        let file = stateFile
        var onDiskAtRaise: [MixerStateFile.Entry] = []
        control.afterWrite = { _ in if onDiskAtRaise.isEmpty { onDiskAtRaise = (try? file.entries()) ?? [] } }
        let guarded = makeGuard(control)
        _ = guarded.begin()
        #expect(onDiskAtRaise.count == 1)
        #expect(onDiskAtRaise.first?.original.raw == [10])
        #expect(onDiskAtRaise.first?.applied.raw == [60])
        #expect(onDiskAtRaise.first?.purpose == .alert)
    }

    @Test func loudEnoughIsLeftAloneAndNothingIsWritten() throws {
        let control = FakeVolumeControl(raw: [80])
        let guarded = makeGuard(control)
        #expect(guarded.begin() == .play)
        guarded.end()
        #expect(control.writes.isEmpty)
        #expect(try stateFile.entries().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: stateFile.path))
    }

    @Test func backToBackJobsRaiseOnceAndRestoreOnceAtTheEnd() {
        let control = FakeVolumeControl(raw: [30])
        let guarded = makeGuard(control)
        for _ in 0..<3 { #expect(guarded.begin() == .play) }
        #expect(control.writes == ["write raw [60]"])
        guarded.end()
        guarded.end()
        #expect(control.writes == ["write raw [60]", "write raw [30]"])
    }

    @Test func aVolumeTheUserChangedDuringTheAlertIsKept() throws {
        let control = FakeVolumeControl(raw: [30])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        control.userSets(raw: [45])
        guarded.end()
        #expect(control.value.raw == [45], "the user's choice wins")
        #expect(guarded.status().userOverrides == 1)
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func mutedWithRespectDoesNotPlayAndChangesNothing() throws {
        let control = FakeVolumeControl(raw: [10], switches: [false])
        let guarded = makeGuard(control, policy: .respect)
        #expect(guarded.begin() == .muted)
        guarded.end()
        #expect(control.writes.isEmpty)
        #expect(control.value == VolumeReading(raw: [10], switches: [false]))
        #expect(guarded.status().muted == true)
    }

    @Test func mutedWithOverrideIsUnmutedRaisedAndPutBackMuted() throws {
        let control = FakeVolumeControl(raw: [10, 10], switches: [false])
        let guarded = makeGuard(control, policy: .override)
        #expect(guarded.begin() == .play)
        #expect(control.value == VolumeReading(raw: [60, 60], switches: [true, true]))
        guarded.end()
        #expect(control.value == VolumeReading(raw: [10, 10], switches: [false, false]))
    }

    @Test func overrideWithoutAThresholdOnlyUnmutes() {
        let control = FakeVolumeControl(raw: [10], switches: [false])
        let guarded = makeGuard(control, threshold: nil, policy: .override)
        #expect(guarded.begin() == .play)
        #expect(control.writes == ["write switches [true]"])
        guarded.end()
        #expect(control.value == VolumeReading(raw: [10], switches: [false]))
    }

    @Test func aUserWhoMutesMidBurstIsRespectedFromTheNextJob() {
        let control = FakeVolumeControl(raw: [80], switches: [true])
        let guarded = makeGuard(control, policy: .respect)
        #expect(guarded.begin() == .play)
        control.userSets(switches: [false])
        #expect(guarded.begin() == .muted)
    }

    @Test func aVolumeChangedDuringAnOverriddenAlertStaysButTheMuteComesBack() {
        let control = FakeVolumeControl(raw: [80], switches: [false])
        let guarded = makeGuard(control, threshold: nil, policy: .override)
        _ = guarded.begin()
        control.userSets(switches: [true])  // same as what the daemon set: indistinguishable, restored to muted
        control.userSets(raw: [70])
        guarded.end()
        #expect(control.value.switches == [false], "switch still as the daemon left it: put back")
        #expect(control.value.raw == [70], "volume untouched by the daemon, the user's stays")
    }

    @Test func mixerFailuresNeverStopTheAlert() throws {
        let control = FakeVolumeControl(raw: [10])
        control.readFailures = 1
        let guarded = makeGuard(control)
        #expect(guarded.begin() == .play, "an unreadable mixer plays at whatever volume there is")
        guarded.end()
        #expect(control.writes.isEmpty)

        let failing = FakeVolumeControl(raw: [10])
        failing.writeFailures = 1
        let second = makeGuard(failing)
        #expect(second.begin() == .play)
        #expect(second.status().lastError?.code == "mixer")
    }

    @Test func aRestoreThatFailsIsOwedAndDoneAfterTheNextAlert() throws {
        let control = FakeVolumeControl(raw: [10])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        control.readFailures = 1
        guarded.end()
        #expect(control.value.raw == [60])
        #expect(try stateFile.entries().count == 1, "still owed, and on disk")
        _ = guarded.begin()
        #expect(control.writes == ["write raw [60]"], "not raised twice")
        guarded.end()
        #expect(control.value.raw == [10])
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func aThresholdInDBOnAnElementWithoutDBFailsValidation() {
        let control = FakeVolumeControl(raw: [10], range: 0...65536)
        let guarded = makeGuard(control, threshold: .decibels(-20))
        #expect(throws: AnnounceError.self) { try guarded.validate() }
        let withDB = makeGuard(FakeVolumeControl(raw: [10], range: 0...255, centidBPerStep: 20), threshold: .decibels(-20))
        #expect(throws: Never.self) { try withDB.validate() }
        #expect(withDB.begin() == .play)
    }

    // MARK: - Crash safety

    @Test func aLeftoverFromACrashMidAlertIsRestoredAtStart() throws {
        let control = FakeVolumeControl(raw: [15])
        _ = makeGuard(control).begin()  // the daemon raised the volume, then died (no end())
        #expect(control.value.raw == [60])
        let outcomes = stateFile.restoreLeftovers { _ in control }
        #expect(control.value.raw == [15])
        guard case .restored = outcomes.first else {
            Issue.record("expected a restore, got \(outcomes)")
            return
        }
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func aLeftoverTheUserChangedSinceIsLeftAlone() throws {
        let control = FakeVolumeControl(raw: [15])
        _ = makeGuard(control).begin()
        control.userSets(raw: [90])
        let outcomes = stateFile.restoreLeftovers { _ in control }
        #expect(control.value.raw == [90])
        guard case .keptUserSetting = outcomes.first else {
            Issue.record("expected the user's setting kept, got \(outcomes)")
            return
        }
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func anUnreachableLeftoverStaysAndTheNextGuardPaysItBack() throws {
        let control = FakeVolumeControl(raw: [15])
        _ = makeGuard(control).begin()
        let outcomes = stateFile.restoreLeftovers { _ throws(AnnounceError) in
            throw AnnounceError(.mixer, "injected: sound server not up yet")
        }
        guard case .unreachable = outcomes.first else {
            Issue.record("expected unreachable, got \(outcomes)")
            return
        }
        #expect(try stateFile.entries().count == 1)
        // The daemon runs on; its guard adopts the debt and settles it after the first alert.
        let next = makeGuard(control)
        #expect(next.status().raised)
        _ = next.begin()
        next.end()
        #expect(control.value.raw == [15])
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func aMuteOverriddenBeforeACrashIsMutedAgainAtStart() throws {
        let control = FakeVolumeControl(raw: [80], switches: [false])
        _ = makeGuard(control, policy: .override).begin()
        #expect(control.value.switches == [true])
        stateFile.restoreLeftovers { _ in control }
        #expect(control.value.switches == [false])
    }

    // MARK: - An owed restore and the next alert (issue 16)

    @Test func anOwedRestoreDoesNotKeepTheNextAlertQuietAfterTheOwnerTurnedItDown() throws {
        let control = FakeVolumeControl(raw: [10])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        control.readFailures = 1
        guarded.end()  // the restore failed: 60 is still on the mixer, owed to the owner
        #expect(control.value.raw == [60] && guarded.status().raised)
        control.userSets(raw: [20])  // the owner turns it down meanwhile
        #expect(guarded.begin() == .play)
        #expect(control.value.raw == [60], "the next alert is raised to the threshold again")
        guarded.end()
        #expect(control.value.raw == [20], "and the owner's 20 comes back, not the stale 10")
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func anOwedRestoreFollowsAThresholdRaisedSince() throws {
        let control = FakeVolumeControl(raw: [10])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        control.readFailures = 1
        guarded.end()
        guarded.setThreshold(.percent(80))
        _ = guarded.begin()
        #expect(control.value.raw == [80], "the alert gets the threshold now in force")
        #expect(try stateFile.entries().first?.original.raw == [10], "the owner's level is still what is owed")
        guarded.end()
        #expect(control.value.raw == [10])
    }

    // MARK: - The everyday level

    @Test func theEverydayLevelIsWrittenAtOnceOutsideAnAlert() throws {
        let control = FakeVolumeControl(raw: [30, 30])
        let guarded = makeGuard(control)
        let (level, _) = try guarded.changeEveryday { reading, _ in
            VolumeReading(raw: [70, 70], switches: reading.switches)
        }
        #expect(level.raw == [70, 70] && control.value.raw == [70, 70])
        #expect(try guarded.everydayLevel().level.reading.raw == [70, 70])
        #expect(try stateFile.entries().isEmpty, "nothing owed")
        #expect(guarded.status().level == 70)
    }

    @Test func aLevelBelowTheThresholdSetDuringAnAlertComesBackAfterIt() throws {
        let control = FakeVolumeControl(raw: [50])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        #expect(control.value.raw == [60])
        try guarded.changeEveryday { reading, _ in VolumeReading(raw: [40], switches: reading.switches) }
        #expect(control.value.raw == [60], "the alert keeps the threshold")
        #expect(try guarded.everydayLevel().level.reading.raw == [40])
        #expect(try stateFile.entries().first?.original.raw == [40], "what a crash would put back")
        #expect(guarded.status().everydayRaw == [40] && guarded.status().raw == [60])
        guarded.end()
        #expect(control.value.raw == [40])
    }

    @Test func aLevelAboveTheThresholdSetDuringAnAlertIsHeardAtOnceAndStays() throws {
        let control = FakeVolumeControl(raw: [50])
        let guarded = makeGuard(control)
        _ = guarded.begin()
        try guarded.changeEveryday { reading, _ in VolumeReading(raw: [90], switches: reading.switches) }
        #expect(control.value.raw == [90])
        #expect(try stateFile.entries().isEmpty, "nothing to put back any more")
        guarded.end()
        #expect(control.value.raw == [90])
        #expect(guarded.status().userOverrides == 0)
    }

    @Test func turningItDownMidBurstStillPlaysTheRestAtTheThreshold() throws {
        let control = FakeVolumeControl(raw: [80])
        let guarded = makeGuard(control)
        _ = guarded.begin()  // loud enough: nothing raised
        try guarded.changeEveryday { reading, _ in VolumeReading(raw: [30], switches: reading.switches) }
        #expect(control.value.raw == [60], "the jobs left in the burst are not played below the threshold")
        guarded.end()
        #expect(control.value.raw == [30])
    }

    @Test func muteDuringAnAlertFollowsTheMutePolicy() throws {
        // respect: the owner's mute silences the alert now, and the next job is not played.
        let control = FakeVolumeControl(raw: [80], switches: [true])
        let respecting = makeGuard(control, policy: .respect)
        _ = respecting.begin()
        try respecting.changeEveryday { reading, _ in VolumeReading(raw: reading.raw, switches: [false]) }
        #expect(control.value.switches == [false])
        #expect(respecting.begin() == .muted)
        respecting.end()
        #expect(control.value.switches == [false])

        // override: the alert stays audible; muted once it is over.
        let other = FakeVolumeControl(raw: [80], switches: [true])
        let overriding = makeGuard(other, policy: .override)
        _ = overriding.begin()
        try overriding.changeEveryday { reading, _ in VolumeReading(raw: reading.raw, switches: [false]) }
        #expect(other.value.switches == [true], "a payment playing is not cut by the mute key under override")
        #expect(overriding.begin() == .play)
        overriding.end()
        #expect(other.value.switches == [false], "muted after the burst, as the owner asked")
    }

    @Test func theOwnersLevelIsReportedWhenItChanges() throws {
        let control = FakeVolumeControl(raw: [30])
        let seen = Mutex<[[Int]]>([])
        let guarded = makeGuard(control)
        guarded.observeEveryday { level in seen.withLock { $0.append(level.reading.raw) } }
        _ = guarded.begin()  // first seen: 30
        control.userSets(raw: [45])  // amixer during the alert: the owner's new level
        guarded.end()
        _ = guarded.begin()
        guarded.end()  // unchanged: not reported again
        try guarded.changeEveryday { reading, _ in VolumeReading(raw: [70], switches: reading.switches) }
        #expect(seen.withLock { $0 } == [[30], [45], [70]])
    }

    @Test func statusReadsThroughItsOwnHandleWithoutWaitingForTheAudioThread() throws {
        // The monitor handle hangs in a read (a sound server that stopped answering): a status request waits on
        // it, but the audio thread's begin() must not wait for the status request.
        let control = FakeVolumeControl(raw: [10])
        let monitor = FakeVolumeControl(raw: [10])
        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        monitor.beforeRead = { _ in
            inRead.signal()
            release.wait()
        }
        let guarded = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .respect, stateFile: stateFile,
            logger: Logger(label: "test"), monitor: monitor)
        let statusDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = guarded.status()
            statusDone.signal()
        }
        inRead.wait()
        let begun = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = guarded.begin()
            begun.signal()
        }
        let finished = begun.wait(timeout: .now() + .seconds(10)) == .success
        release.signal()
        statusDone.wait()
        #expect(finished, "begin() waited for a status request's mixer read")
        #expect(control.value.raw == [60])
        guarded.end()
    }

    // MARK: - The mute key on an element without a playback switch (a softvol)

    @Test func anElementWithoutASwitchIsMutedByItsMinimumAndTheLevelComesBack() throws {
        let control = FakeVolumeControl(raw: [180, 180], switches: nil, range: 0...255, centidBPerStep: 20)
        let guarded = makeGuard(control)
        #expect(try guarded.toggleMute())
        #expect(control.value.raw == [0, 0])
        #expect(guarded.status().muted == true && guarded.status().everydayRaw == [180, 180])
        #expect(guarded.begin() == .muted, "muted by the key is muted for the mute policy")
        guarded.end()
        #expect(control.value.raw == [0, 0], "nothing raised for it")
        #expect(try !guarded.toggleMute())
        #expect(control.value.raw == [180, 180], "unmuted: the level it had")
        #expect(guarded.begin() == .play)
        guarded.end()
    }

    @Test func aSoftMuteUnderOverrideStillLetsTheAlertBeHeard() throws {
        let control = FakeVolumeControl(raw: [180], switches: nil, range: 0...255, centidBPerStep: 20)
        let guarded = makeGuard(control, policy: .override)
        _ = try guarded.toggleMute()
        #expect(guarded.begin() == .play)
        let floor = try VolumeMapping.raw(for: .percent(60), scale: control.scale(), element: "x")
        #expect(control.value.raw == [floor], "raised to the threshold for the alert")
        guarded.end()
        #expect(control.value.raw == [0], "and muted again after it")
    }

    @Test func aSoftMuteDuringAnAlertUnderRespectSilencesItNow() throws {
        let control = FakeVolumeControl(raw: [100], switches: nil, range: 0...255, centidBPerStep: 20)
        let guarded = makeGuard(control)
        _ = guarded.begin()  // 100 is below 60 %: raised
        #expect(control.value.raw != [100])
        _ = try guarded.toggleMute()
        #expect(control.value.raw == [0], "the owner's mute silences the payment playing (respect)")
        #expect(guarded.begin() == .muted)
        guarded.end()
        let owed = try stateFile.entries()
        #expect(control.value.raw == [0] && owed.isEmpty)
        #expect(try !guarded.toggleMute() && control.value.raw == [100])
    }

    @Test func aVolumeStepOrAnAmixerChangeEndsASoftMute() throws {
        let control = FakeVolumeControl(raw: [180], switches: nil, range: 0...255, centidBPerStep: 20)
        let guarded = makeGuard(control)
        _ = try guarded.toggleMute()
        var seen: [Int] = []
        try guarded.changeEveryday { reading, _ in
            seen = reading.raw
            return VolumeReading(raw: [200], switches: nil)
        }
        #expect(seen == [180], "a step starts from the level before the mute")
        #expect(control.value.raw == [200] && guarded.status().muted != true)
        _ = try guarded.toggleMute()
        control.userSets(raw: [90])  // turned up by hand with amixer
        #expect(guarded.begin() == .play, "no longer muted")
        guarded.end()
        #expect(try guarded.everydayLevel().level.mutedFrom == nil)
    }

    @Test func aKeptMuteIsPutBackAtStart() throws {
        let control = FakeVolumeControl(raw: [180], switches: nil, range: 0...255, centidBPerStep: 20)
        let guarded = makeGuard(control)
        try guarded.restoreEveryday(EverydayLevel(reading: VolumeReading(raw: [0]), mutedFrom: [150]))
        #expect(control.value.raw == [0] && guarded.begin() == .muted)
        guarded.end()
        #expect(try !guarded.toggleMute() && control.value.raw == [150])
    }
}
