#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Sample-level processing of decoded clips (mono Float in −1…1). Pure Swift, no I/O; the measurements that
/// need a C library (loudness, resampling) are made in AnnounceSound and passed in.
public enum ClipProcessing {
    /// Drops leading and trailing silence: everything before the first and after the last `window` samples
    /// whose RMS level reaches `threshold` (fraction of full scale), keeping `margin` samples of what was cut on
    /// each side so word onsets and tails are not chopped. Measuring RMS over a window (as sox's `silence`
    /// effect does) rather than single samples ignores isolated blips, such as the faint breathy tail of
    /// espeak-ng's female voices, that cross the threshold without being heard as speech.
    public static func trimSilence(_ samples: [Float], threshold: Float, window: Int = 1, margin: Int = 0) -> [Float] {
        let window = max(1, min(window, samples.count))
        guard !samples.isEmpty else { return [] }
        // Running sums of squares: the energy of samples[i..<i+window] is sums[i+window] - sums[i].
        var sums = [Double](repeating: 0, count: samples.count + 1)
        for (index, sample) in samples.enumerated() { sums[index + 1] = sums[index] + Double(sample) * Double(sample) }
        let limit = Double(threshold) * Double(threshold) * Double(window)
        let starts = 0...(samples.count - window)
        guard let first = starts.first(where: { sums[$0 + window] - sums[$0] >= limit }),
            let last = starts.last(where: { sums[$0 + window] - sums[$0] >= limit })
        else { return [] }
        // Within those windows, speech starts and ends at the first and last sample reaching the threshold
        // (a window whose RMS reaches it holds at least one such sample).
        let onset = (first..<(first + window)).first { abs(samples[$0]) >= threshold } ?? first
        let end = (last..<(last + window)).last { abs(samples[$0]) >= threshold } ?? (last + window - 1)
        return Array(samples[max(0, onset - margin)..<min(samples.count, end + 1 + margin)])
    }

    /// A raised-cosine fade-in over the first `length` samples and fade-out over the last, so that joining
    /// clips never creates a step (click): every clip starts and ends at exactly zero.
    /// Clips shorter than two fades get a fade over half their length.
    public static func applyFades(_ samples: inout [Float], length: Int) {
        let count = min(length, samples.count / 2)
        guard count > 0 else { return }
        for index in 0..<count {
            let gain = Float(0.5 - 0.5 * cos(Double.pi * Double(index) / Double(count)))
            samples[index] *= gain
            samples[samples.count - 1 - index] *= gain
        }
    }

    /// Multiplies every sample by `gain`.
    public static func applyGain(_ samples: inout [Float], _ gain: Float) {
        guard gain != 1 else { return }
        for index in samples.indices { samples[index] *= gain }
    }

    /// The gain, in dB, that brings a clip measured at `loudness` LUFS to `target` LUFS without raising its
    /// peak (dBFS) above `ceiling`. A clip that is too peaky for the target gets less (possibly negative)
    /// gain; silence (−∞ LUFS) gets none.
    public static func loudnessGainDb(loudness: Double, peakDb: Double, target: Double, ceiling: Double) -> Double {
        guard loudness.isFinite, peakDb.isFinite else { return 0 }
        return min(target - loudness, ceiling - peakDb)
    }

    /// Peak magnitude of the samples.
    public static func peak(_ samples: [Float]) -> Float {
        samples.reduce(0) { max($0, abs($1)) }
    }

    /// Decibels relative to full scale of a linear magnitude (−∞ for 0).
    public static func decibels(_ magnitude: Float) -> Double {
        magnitude > 0 ? 20 * log10(Double(magnitude)) : -.infinity
    }

    /// The linear magnitude of a level in dB.
    public static func linear(decibels: Double) -> Float {
        Float(pow(10, decibels / 20))
    }

    /// The largest difference between neighbouring samples in `range` (a click shows up as a large one).
    public static func largestStep(_ samples: [Int16], in range: Range<Int>) -> Int {
        let lower = max(range.lowerBound, samples.startIndex)
        let upper = min(range.upperBound, samples.endIndex)
        guard upper - lower >= 2 else { return 0 }
        var largest = 0
        for index in (lower + 1)..<upper {
            largest = max(largest, abs(Int(samples[index]) - Int(samples[index - 1])))
        }
        return largest
    }

    /// Converts to signed 16-bit with rounding and clipping.
    public static func int16(_ sample: Float) -> Int16 {
        let scaled = (sample * 32767).rounded()
        return Int16(max(-32768, min(32767, scaled)))
    }
}
