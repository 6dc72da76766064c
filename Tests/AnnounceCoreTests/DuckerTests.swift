import Foundation
import Logging
import Synchronization
import Testing

@testable import AnnounceCore

/// Ducking against fake controls: ramps, exact restore, the user taking a control over, crash safety.
struct DuckerTests {
    let stateFile: MixerStateFile

    init() throws {
        let directory = NSTemporaryDirectory() + "ducker-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        stateFile = MixerStateFile(path: "\(directory)/mixer-state.json")
    }

    func makeDucker(_ controls: [FakeVolumeControl], decibels: Double = 20, rampMs: Int = 100, stepMs: Int = 10) -> Ducker {
        Ducker(
            controls: controls, settings: DuckSettings(decibels: decibels, rampMs: rampMs, stepMs: stepMs),
            stateFile: stateFile, logger: Logger(label: "test"), sleep: { _ in })
    }

    func rawWrites(_ control: FakeVolumeControl) -> [Int] {
        control.writes.compactMap { write in
            guard write.hasPrefix("write raw [") else { return nil }
            return Int(write.dropFirst("write raw [".count).dropLast())
        }
    }

    @Test func rampStepsEndExactlyOnTheAmount() {
        let settings = DuckSettings(decibels: 20, rampMs: 150, stepMs: 15)
        #expect(settings.rampSteps.count == 10)
        #expect(settings.rampSteps.last == 20)
        #expect(zip(settings.rampSteps, settings.rampSteps.dropFirst()).allSatisfy { $0 < $1 })
        #expect(DuckSettings(decibels: 12, rampMs: 0).rampSteps == [12])
    }

    @Test func ducksWithADownwardRampAndRestoresExactlyWithAnUpwardOne() throws {
        // PulseAudio-like control (no dB): 20 dB is raw × 10^(−1/3).
        let music = FakeVolumeControl("pulse:music/Master", raw: [65536], range: 0...65536)
        let ducker = makeDucker([music])
        ducker.duck()
        ducker.waitUntilIdle()
        let down = rawWrites(music)
        #expect(down.count == 10)
        #expect(zip(down, down.dropFirst()).allSatisfy { $0 > $1 }, "fades down: \(down)")
        #expect(music.value.raw == [30419])
        #expect(ducker.status().controls.first?.ducked == true)
        #expect(try stateFile.entries().map(\.purpose) == [.duck])

        ducker.restore()
        ducker.waitUntilIdle()
        let up = Array(rawWrites(music).dropFirst(down.count))
        #expect(zip(up, up.dropFirst()).allSatisfy { $0 < $1 }, "fades up: \(up)")
        #expect(music.value.raw == [65536], "back to the exact original")
        #expect(ducker.status().controls.first?.ducked == false)
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func onAControlWithDBTheDuckIsExactlyTheAmount() {
        let music = FakeVolumeControl("hw:0/Music", raw: [230, 200], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([music], decibels: 12)
        ducker.duck()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [170, 140], "−12 dB = 60 steps of 0.2 dB on each channel")
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [230, 200])
    }

    @Test func everyControlIsDuckedAndRestored() {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let video = FakeVolumeControl("hw:0/Video", raw: [200], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([music, video], decibels: 10)
        ducker.duck()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [205] && video.value.raw == [150])
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [255] && video.value.raw == [200])
    }

    @Test func aControlTheUserMovesWhileDuckedIsLeftToThem() throws {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([music])
        ducker.duck()
        ducker.waitUntilIdle()
        music.userSets(raw: [100])
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [100], "the user's new setting wins")
        #expect(ducker.status().controls.first?.userOverrides == 1)
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func aUserWhoMovesTheControlMidRampStopsTheRamp() {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let moves = Atomic<Int>(0)
        music.afterWrite = { control in
            if moves.add(1, ordering: .relaxed).newValue == 3 { control.userSets(raw: [240]) }
        }
        let ducker = makeDucker([music])
        ducker.duck()
        ducker.waitUntilIdle()
        #expect(music.writes.count == 3, "no step after the user moved it: \(music.writes)")
        #expect(music.value.raw == [240])
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [240])
    }

    @Test func duckIsIdempotentWithinABurst() {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([music])
        ducker.duck()
        ducker.duck()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [155])
        #expect(ducker.status().controls.first?.ducks == 1)
        ducker.restore()
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(music.value.raw == [255])
    }

    @Test func aControlThatFailsIsSkippedAndTheOthersStillDuck() {
        let broken = FakeVolumeControl("hw:1/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        broken.readFailures = 100
        let video = FakeVolumeControl("hw:0/Video", raw: [255], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([broken, video])
        ducker.duck()
        ducker.waitUntilIdle()
        #expect(video.value.raw == [155])
        #expect(ducker.status().controls.first?.lastError?.code == "mixer")
        ducker.restore()
        ducker.waitUntilIdle()
        #expect(video.value.raw == [255])
    }

    @Test func aCrashWhileDuckedIsRepairedAtStartEvenMidRamp() throws {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let ducker = makeDucker([music])
        ducker.duck()
        ducker.waitUntilIdle()
        // The daemon "dies" here: the duck is recorded; a ramp stopped half-way is also recognised as ours.
        music.value = VolumeReading(raw: [205], switches: [true])
        stateFile.restoreLeftovers { _ in music }
        #expect(music.value.raw == [255])
        #expect(try stateFile.entries().isEmpty)
    }

    @Test func aDuckOwedByAnEarlierRunIsPaidBackAfterTheNextBurst() throws {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let first = makeDucker([music])
        first.duck()  // ducked, then the daemon died; the restore at start found no mixer
        first.waitUntilIdle()
        #expect(music.value.raw == [155])
        let next = makeDucker([music])
        #expect(next.status().controls.first?.ducked == true)
        next.duck()
        next.restore()
        next.waitUntilIdle()
        #expect(music.value.raw == [255], "the original from the earlier run, not the ducked value")
    }
}
