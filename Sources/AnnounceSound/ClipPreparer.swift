import AnnounceCore

/// Prepares one decoded clip for playback, once: converted to the output rate (libsoxr), silence trimmed,
/// loudness matched (libebur128), faded at both ends. Used for every clip of a pack at load and for speech
/// synthesised at run time, so both sound alike and join without clicks.
public struct ClipPreparer: Sendable {
    public let settings: ClipSettings
    public let outputRate: Int

    public init(settings: ClipSettings, outputRate: Int) {
        self.settings = settings
        self.outputRate = outputRate
    }

    /// What preparing a clip did, for reports and tests.
    public struct Report: Sendable, Equatable {
        /// Loudness after trimming, before any gain (LUFS).
        public var loudness: Double
        /// Gain applied, dB.
        public var gainDb: Double
        /// Whether the peak ceiling kept the clip from reaching the loudness target.
        public var peakLimited: Bool
    }

    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// Nothing is above the trim threshold.
        case silent
        case resampler(SoxrError)
        case loudness(Ebur128Error)

        public var description: String {
            switch self {
            case .silent: "is silent (nothing above the trim threshold)"
            case .resampler(let error): "cannot be resampled: \(error)"
            case .loudness(let error): "cannot be measured: \(error)"
            }
        }
    }

    /// Prepares mono samples at `sampleRate`.
    public func prepare(_ samples: [Float], sampleRate: Int) throws(Failure) -> (samples: [Float], report: Report) {
        var converted: [Float]
        do {
            converted = try Resampler.convert(samples, from: sampleRate, to: outputRate)
        } catch {
            throw .resampler(error)
        }
        let margin = settings.trimMarginMs * outputRate / 1000
        let threshold = ClipProcessing.linear(decibels: settings.trimThresholdDb)
        let window = settings.trimWindowMs * outputRate / 1000
        converted = ClipProcessing.trimSilence(converted, threshold: threshold, window: window, margin: margin)
        guard !converted.isEmpty else { throw .silent }
        var report = Report(loudness: -.infinity, gainDb: 0, peakLimited: false)
        do {
            report.loudness = try Loudness.ofClip(converted, sampleRate: outputRate)
        } catch {
            throw .loudness(error)
        }
        if let target = settings.loudnessLufs {
            let peakDb = ClipProcessing.decibels(ClipProcessing.peak(converted))
            let gain = ClipProcessing.loudnessGainDb(
                loudness: report.loudness, peakDb: peakDb, target: target, ceiling: settings.peakCeilingDb)
            report.gainDb = gain
            report.peakLimited = gain < target - report.loudness - 0.01
            ClipProcessing.applyGain(&converted, ClipProcessing.linear(decibels: gain))
        }
        ClipProcessing.applyFades(&converted, length: settings.fadeMs * outputRate / 1000)
        return (converted, report)
    }
}
