import Foundation
import Testing

@testable import AnnounceCore

struct VolumeMappingTests {
    /// PulseAudio's Master through ALSA: raw 0…65536, no dB.
    let pulse = VolumeScale(raw: 0...65536)

    /// A softvol-like element: 0…255, 0.2 dB per step, −51 dB … 0 dB.
    var softvol: VolumeScale { (try? FakeVolumeControl(raw: [0], range: 0...255, centidBPerStep: 20).scale())! }

    /// A small-range element: 0…24, 1 dB per step (alsamixer maps it linearly in dB).
    var narrow: VolumeScale { (try? FakeVolumeControl(raw: [0], range: 0...24, centidBPerStep: 100).scale())! }

    @Test func percentOnAnElementWithoutDBIsLinearInRawStepsLikeAmixer() throws {
        // `amixer -D pulse sset Master 60%` sets 39322; the threshold must mean the same value.
        #expect(try VolumeMapping.raw(for: .percent(60), scale: pulse, element: "pulse/Master") == 39322)
        #expect(try VolumeMapping.raw(for: .percent(100), scale: pulse, element: "pulse/Master") == 65536)
        #expect(try VolumeMapping.raw(for: .percent(0), scale: pulse, element: "pulse/Master") == 0)
        #expect(abs(VolumeMapping.normalized(raw: 13107, scale: pulse) - 0.2) < 1e-4)
    }

    @Test func aDBThresholdOnAnElementWithoutDBIsAClearConfigurationError() {
        #expect(throws: AnnounceError.self) {
            try VolumeMapping.raw(for: .decibels(-20), scale: pulse, element: "pulse/Master")
        }
        do {
            _ = try VolumeMapping.raw(for: .decibels(-20), scale: pulse, element: "pulse/Master")
        } catch {
            #expect(error.code == .badConfiguration)
            #expect(error.message.contains("no dB information"), "\(error)")
        }
    }

    @Test func aDBThresholdPicksTheStepAtOrAboveIt() throws {
        // −20 dB at 0.2 dB/step is exactly step 155; −20.1 dB rounds up to the quieter-but-not-below step 155.
        #expect(try VolumeMapping.raw(for: .decibels(-20), scale: softvol, element: "x") == 155)
        #expect(try VolumeMapping.raw(for: .decibels(-20.1), scale: softvol, element: "x") == 155)
        #expect(try VolumeMapping.raw(for: .decibels(-20.3), scale: softvol, element: "x") == 154)
        #expect(try VolumeMapping.raw(for: .decibels(3), scale: softvol, element: "x") == 255)
        #expect(try VolumeMapping.raw(for: .decibels(-90), scale: softvol, element: "x") == 0)
    }

    @Test func percentOnANarrowDBRangeIsLinearInDB() throws {
        // 24 dB span: 50% is −12 dB, step 12.
        #expect(try VolumeMapping.raw(for: .percent(50), scale: narrow, element: "x") == 12)
        #expect(abs(VolumeMapping.normalized(raw: 12, scale: narrow) - 0.5) < 1e-9)
    }

    @Test func percentOnAWideDBRangeFollowsTheCubicCurve() throws {
        // alsamixer: normalized = (10^((dB − max)/60) − floor) / (1 − floor), floor = 10^((min − max)/60).
        let floor = pow(10, -51.0 / 60)
        for percent in stride(from: 5.0, through: 100, by: 5) {
            let raw = try VolumeMapping.raw(for: .percent(percent), scale: softvol, element: "x")
            let shown = VolumeMapping.normalized(raw: raw, scale: softvol) * 100
            #expect(shown >= percent - 1e-9, "\(percent)% → raw \(raw) shows \(shown)%")
            let below = VolumeMapping.normalized(raw: raw - 1, scale: softvol) * 100
            #expect(below < percent, "raw \(raw - 1) already shows \(below)% ≥ \(percent)%")
        }
        // 50% is about −16 dB on this curve, far from the −25.5 dB a linear-in-dB mapping would give.
        let half = try VolumeMapping.raw(for: .percent(50), scale: softvol, element: "x")
        let dB = Double((half - 255) * 20) / 100
        let expected = 60 * log10(0.5 * (1 - floor) + floor)
        #expect(abs(dB - expected) <= 0.2, "50% → \(dB) dB, expected ≈ \(expected) dB")
    }

    @Test func attenuationWithoutDBUsesThePerceptualScaleWhichIsPulseAudiosOwn() {
        // PulseAudio: gain = (raw/65536)^3, so −20 dB is raw × 10^(−20/60).
        let lowered = VolumeMapping.attenuated(raw: 65536, by: 20, scale: pulse)
        #expect(lowered == 30419)
        let gain = pow(Double(lowered) / 65536, 3)
        #expect(abs(20 * log10(gain) + 20) < 0.01)
        #expect(VolumeMapping.attenuated(raw: 0, by: 20, scale: pulse) == 0)
        #expect(VolumeMapping.attenuated(raw: 500, by: 0, scale: pulse) == 500)
    }

    @Test func attenuationWithDBIsExactOnTheElementsTable() {
        #expect(VolumeMapping.attenuated(raw: 255, by: 20, scale: softvol) == 155)
        #expect(VolumeMapping.attenuated(raw: 200, by: 6, scale: softvol) == 170)
        #expect(VolumeMapping.attenuated(raw: 10, by: 20, scale: softvol) == 0)
    }

    @Test func volumeLevelsParseFromTheFlagSyntax() throws {
        #expect(try VolumeLevel(parsing: "60%") == .percent(60))
        #expect(try VolumeLevel(parsing: "60") == .percent(60))
        #expect(try VolumeLevel(parsing: "-20dB") == .decibels(-20))
        #expect(try VolumeLevel(parsing: "-6.5 dB") == .decibels(-6.5))
        for bad in ["", "loud", "150%", "-5%", "dB"] {
            #expect(throws: AnnounceError.self, "\"\(bad)\"") { try VolumeLevel(parsing: bad) }
        }
        #expect(VolumeLevel.percent(60).description == "60%")
        #expect(VolumeLevel.decibels(-20).description == "-20 dB")
    }

    @Test func mixerElementAddressesParseLikeAmixerNames() throws {
        #expect(try MixerElementAddress(parsing: "hw:0/PCM,1") == MixerElementAddress(control: "hw:0", element: "PCM", index: 1))
        #expect(try MixerElementAddress(parsing: "pulse:music") == MixerElementAddress(control: "pulse:music", element: "Master"))
        #expect(try MixerElementAddress(parsing: "default/Speaker").description == "default/Speaker")
        #expect(try MixerElementAddress(parsing: "hw:0/Music,2").description == "hw:0/Music,2")
        #expect(throws: AnnounceError.self) { try MixerElementAddress(parsing: "/Master") }
        #expect(throws: AnnounceError.self) { try MixerElementAddress(parsing: "hw:0/") }
    }
}
