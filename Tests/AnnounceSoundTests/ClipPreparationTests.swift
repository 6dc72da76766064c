import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// A sine of `frequency` Hz and peak `amplitude`, `seconds` long.
func sine(_ frequency: Double, amplitude: Float, seconds: Double, rate: Int) -> [Float] {
    (0..<Int(seconds * Double(rate))).map {
        amplitude * Float(sin(2 * Double.pi * frequency * Double($0) / Double(rate)))
    }
}

/// Normalised correlation of two equally long Float signals.
func correlation(_ a: [Float], _ b: [Float]) -> Double {
    let count = min(a.count, b.count)
    var dot = 0.0
    var energyA = 0.0
    var energyB = 0.0
    for index in 0..<count {
        dot += Double(a[index]) * Double(b[index])
        energyA += Double(a[index]) * Double(a[index])
        energyB += Double(b[index]) * Double(b[index])
    }
    return energyA > 0 && energyB > 0 ? dot / (energyA * energyB).squareRoot() : 0
}

/// libsoxr and libebur128 for real, against signals whose right answer is known.
struct ResamplerAndLoudnessTests {
    @Test(
        "resampling keeps the tone and gives the exact length",
        arguments: [(22050, 16000), (8000, 16000), (44100, 16000), (48000, 22050)])
    func resamplesASine(_ from: Int, _ to: Int) throws {
        let input = sine(440, amplitude: 0.5, seconds: 0.5, rate: from)
        let output = try Resampler.convert(input, from: from, to: to)
        #expect(output.count == Int((Double(input.count) * Double(to) / Double(from)).rounded()))
        let ideal = sine(440, amplitude: 0.5, seconds: 0.5, rate: to)
        // Away from the ends (filter ramp-up), the converted tone is the ideal tone at the new rate: same phase,
        // same level.
        let middle = (to / 20)..<(output.count - to / 20)
        let match = correlation(Array(output[middle]), Array(ideal[middle]))
        #expect(match > 0.9999, "correlation \(match)")
        let peak = ClipProcessing.peak(Array(output[middle]))
        #expect(abs(peak - 0.5) < 0.01, "peak \(peak)")
    }

    @Test func sameRateIsUntouchedAndBadRatesAreRefused() throws {
        let input = sine(440, amplitude: 0.5, seconds: 0.1, rate: 16000)
        #expect(try Resampler.convert(input, from: 16000, to: 16000) == input)
        #expect(throws: SoxrError.self) { try Resampler.convert(input, from: 0, to: 16000) }
        #expect(!Resampler.libraryVersion.isEmpty)
    }

    /// BS.1770: a 997 Hz sine with peak 1.0 in one channel reads −3.01 LUFS; the level scales with amplitude.
    @Test("loudness of reference sines", arguments: [(1.0, 1.0), (0.1, 1.0), (0.1, 0.2), (0.5, 0.15)])
    func loudnessOfReferenceSines(_ amplitude: Double, _ seconds: Double) throws {
        let tone = sine(997, amplitude: Float(amplitude), seconds: seconds, rate: 48000)
        let measured = try Loudness.ofClip(tone, sampleRate: 48000)
        let expected = -3.01 + 20 * log10(amplitude)
        // Short clips start with the K-weighting filter settling, hence the slightly wider tolerance.
        #expect(
            abs(measured - expected) < (seconds < 0.5 ? 0.3 : 0.1), "measured \(measured) LUFS, expected \(expected)")
        #expect(try Loudness.ofClip([Float](repeating: 0, count: 4800), sampleRate: 48000) == -.infinity)
        #expect(try Loudness.ofClip([], sampleRate: 48000) == -.infinity)
    }

    @Test func preparationMatchesLoudnessUnderThePeakCeiling() throws {
        let preparer = ClipPreparer(settings: ClipSettings(loudnessLufs: -20, peakCeilingDb: -1), outputRate: 16000)
        let silence = [Float](repeating: 0, count: 1600)
        // Quiet tone padded with silence, at another rate: converted, trimmed, raised to −20 LUFS, faded.
        let quiet = silence + sine(997, amplitude: 0.05, seconds: 0.3, rate: 22050) + silence
        let (prepared, report) = try preparer.prepare(quiet, sampleRate: 22050)
        let expectedCount = 0.3 * 16000.0
        let tolerance = 16000.0 * 0.012
        #expect(abs(Double(prepared.count) - expectedCount) < tolerance, "trimmed to the tone: \(prepared.count)")
        #expect(abs(try Loudness.ofClip(prepared, sampleRate: 16000) + 20) < 0.3)
        #expect(!report.peakLimited)
        #expect(prepared.first == 0 && prepared.last.map { abs($0) < 1e-6 } == true, "faded to zero at both ends")
        // A click-like clip (high peak, little energy) cannot reach the target without clipping: held at −1 dBFS.
        var spiky = [Float](repeating: 0.001, count: 3200)
        spiky[1600] = 0.9
        let (limited, limitedReport) = try preparer.prepare(spiky, sampleRate: 16000)
        #expect(limitedReport.peakLimited)
        #expect(abs(ClipProcessing.decibels(ClipProcessing.peak(limited)) + 1) < 0.01)
        #expect(throws: ClipPreparer.Failure.self) { try preparer.prepare(silence, sampleRate: 16000) }
    }
}

/// Every format the installed libsndfile supports, written and read back for real.
struct SoundFormatTests {
    @Test func theFormatsAPackMayUseAreSupportedHere() {
        // Debian 12's libsndfile 1.2 is built with FLAC, Vorbis, Opus and (mpg123/LAME) MP3.
        for format in SoundFile.Format.allCases {
            #expect(format.isSupported(sampleRate: 16000), "\(format) is not supported by \(SoundFile.libraryVersion)")
        }
    }

    @Test("a tone survives a round trip", arguments: SoundFile.Format.allCases)
    func roundTrip(_ format: SoundFile.Format) throws {
        let directory = try Paths.temporaryDirectory("fmt")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/tone.\(format.fileExtension)"
        let tone = sine(440, amplitude: 0.5, seconds: 1, rate: 16000)
        try SoundFile.write(path: path, samples: tone, sampleRate: 16000, format: format)
        let audio = try SoundFile.read(path: path)
        #expect(audio.sampleRate == 16000 && audio.channels == 1)
        // Lossy codecs add encoder delay and padding, a few tens of milliseconds at most.
        #expect(abs(audio.seconds - 1) < 0.08, "\(format): \(audio.seconds) s")
        let level = ClipProcessing.peak(Array(audio.samples.dropFirst(1600).prefix(8000)))
        #expect(abs(level - 0.5) < 0.05, "\(format): peak \(level)")
        if format == .wav || format == .flac {
            #expect(correlation(audio.samples, tone) > 0.9999)
        }
    }
}
