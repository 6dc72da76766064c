import AnnounceCore
import AnnounceTestSupport
import Foundation
import Logging
import Testing

@testable import AnnounceALSA

/// The simple mixer element for real, on the rig's ALSA control "pulse" (PulseAudio's sink volume: raw 0…65536,
/// a mute switch, no dB), checked from outside with amixer the way a user would.
extension ALSAOnTheRig {
    @Test func readsAndSetsTheVolumeAndSwitchAmixerSees() async throws {
        try await withRigEnvironment { rig in
            let master = try AlsaMixerElement(address: MixerElementAddress(control: "pulse", element: "Master"))
            try await rig.setMixer("13107")
            #expect(try master.read() == VolumeReading(raw: [13107], switches: [true]))
            let scale = try master.scale()
            #expect(scale.raw == 0...65536)
            #expect(scale.decibels == nil, "PulseAudio's Master has no dB information")

            try master.write(raw: [39322])
            #expect(try await rig.mixer() == Rig.MixerValue(raw: 39322, on: true))
            try master.write(switches: [false])
            #expect(try await rig.mixer() == Rig.MixerValue(raw: 39322, on: false))
            try master.write(switches: [true])
            #expect(try await rig.mixer().on)
        }
    }

    /// A connected element does not keep the values it loaded: each read handles the change events pending. The
    /// pulse plugin learns of a change asynchronously (the server's event, then its own query of the sink), so
    /// the read that shows it comes a few milliseconds after amixer returns, not necessarily the first (CI's ASan
    /// run once read before the event had come). Without the events handled, no read would ever show it.
    @Test func aChangeMadeByAnotherProgramIsSeenWithoutReopening() async throws {
        try await withRigEnvironment { rig in
            let master = try AlsaMixerElement(address: MixerElementAddress(control: "pulse", element: "Master"))
            try master.connect()
            #expect(try master.read().raw != [20000] && master.read().switches == [true])
            try await rig.setMixer("20000")
            let volumeSeen = try await eventually(timeout: .seconds(20), every: .milliseconds(10)) {
                try master.read().raw == [20000]
            }
            #expect(volumeSeen)
            try await rig.setMixer("mute")
            let muteSeen = try await eventually(timeout: .seconds(20), every: .milliseconds(10)) {
                try master.read().switches == [false]
            }
            #expect(muteSeen)
        }
    }

    @Test func eachStreamHasItsOwnControl() async throws {
        try await withRigEnvironment { rig in
            let music = try AlsaMixerElement(address: MixerElementAddress(parsing: "pulse:music/Master"))
            try music.write(raw: [10000])
            #expect(try await rig.mixer("pulse:music").raw == 10000)
            #expect(try await rig.mixer("pulse:announce").raw == 65536)
            #expect(try await rig.mixer("pulse").raw == 65536)
        }
    }

    @Test func theMixerComesBackAfterTheSoundServerRestarts() async throws {
        try await withRigEnvironment { rig in
            let master = try AlsaMixerElement(address: MixerElementAddress(control: "pulse", element: "Master"))
            try master.write(raw: [30000])
            try await rig.restartServer()
            // The old connection is dead; the element reopens and reads the new server (which starts at 100%).
            #expect(try master.read().raw == [65536])
            try master.write(raw: [25000])
            #expect(try await rig.mixer().raw == 25000)
        }
    }

    @Test func aWrongElementOrCardIsAMixerErrorNamingIt() async throws {
        try await withRigEnvironment { _ in
            let wrong = try AlsaMixerElement(address: MixerElementAddress(control: "pulse", element: "Speaker"))
            do throws(AnnounceError) {
                try wrong.connect()
                Issue.record("an element that does not exist was found")
            } catch {
                #expect(error.code == .mixer)
                #expect(error.message.contains("pulse/Speaker"), "\(error)")
                #expect(error.cause?.contains("snd_mixer_find_selem") == true, "\(error)")
            }
            let card = try AlsaMixerElement(address: MixerElementAddress(control: "hw:NoSuchCard", element: "Master"))
            #expect(throws: AnnounceError.self) { try card.read() }
        }
    }

    @Test func theVolumeGuardRaisesAndRestoresTheRealMaster() async throws {
        try await withRigEnvironment { rig in
            let state = "\(rig.directory)/mixer-state.json"
            let master = try AlsaMixerElement(address: MixerElementAddress(control: "pulse", element: "Master"))
            let guarded = VolumeGuard(
                control: master, threshold: .percent(60), mutePolicy: .override,
                stateFile: MixerStateFile(path: state), logger: Logger(label: "test"))
            try await rig.setMixer("13107")
            try await rig.setMixer("mute")
            #expect(guarded.begin() == .play)
            #expect(try await rig.mixer() == Rig.MixerValue(raw: 39322, on: true), "60% and unmuted for the alert")
            guarded.end()
            #expect(try await rig.mixer() == Rig.MixerValue(raw: 13107, on: false), "exactly as the owner left it")
            #expect(!FileManager.default.fileExists(atPath: state))
        }
    }

    @Test func theDuckerRampsARealControlDownAndBack() async throws {
        try await withRigEnvironment { rig in
            let music = try AlsaMixerElement(address: MixerElementAddress(parsing: "pulse:music/Master"))
            try await rig.setMixer("50000", control: "pulse:music")
            let ducker = Ducker(
                controls: [music], settings: DuckSettings(decibels: 20, rampMs: 60, stepMs: 15),
                stateFile: MixerStateFile(path: "\(rig.directory)/mixer-state.json"), logger: Logger(label: "test"))
            ducker.duck()
            ducker.waitUntilIdle()
            #expect(try await rig.mixer("pulse:music").raw == VolumeMapping.attenuated(
                raw: 50000, by: 20, scale: VolumeScale(raw: 0...65536)))
            ducker.restore()
            ducker.waitUntilIdle()
            #expect(try await rig.mixer("pulse:music").raw == 50000)
        }
    }
}
