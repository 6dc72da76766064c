import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

extension Output {
    /// The audio engine's report (`status` → audio.engine) as indented lines: the device and its negotiated
    /// parameters, recoveries, the volume against the threshold, and each ducked control.
    static func engineLines(_ engine: AudioEngineStatus) -> [String] {
        var lines: [String] = []
        let sink = engine.sink
        var device = "          \(engine.state.rawValue)"
        if let rate = sink.sampleRate, let format = sink.format, let channels = sink.channels {
            device += ", \(rate) Hz \(format) ×\(channels)"
        }
        if let period = sink.periodFrames, let buffer = sink.bufferFrames {
            device += ", period \(period) / buffer \(buffer) frames"
        }
        device += engine.keepOpen ? ", kept open" : ", opened per burst"
        if engine.leadInMs > 0 { device += ", lead-in \(engine.leadInMs) ms" }
        lines.append(device)
        var recovery = "          \(sink.xruns) xruns, \(sink.suspends) suspends, \(engine.deviceFailures) device "
            + "failures, \(engine.recoveries) device recoveries, \(engine.jobsGivenUp) jobs given up"
        if let retry = engine.retryInMs { recovery += "; retrying in \(retry) ms" }
        lines.append(recovery)
        if let volume = engine.volume {
            var line = "          mixer \(volume.element)"
            if let percent = volume.percent, let raw = volume.raw {
                line += " " + zip(percent, raw).map { cFormat("%.0f%% (%ld)", $0, $1) }.joined(separator: " ")
            }
            if let muted = volume.muted { line += muted ? " [muted]" : " [on]" }
            if let threshold = volume.threshold { line += ", threshold \(threshold)" }
            line += ", mute policy \(volume.mutePolicy.rawValue)"
            if volume.raised { line += ", raised now" }
            line += "; \(volume.raises) raised, \(volume.restores) restored, \(volume.userOverrides) left to the user"
            if let error = volume.error ?? volume.lastError { line += " — \(error.code): \(error.message)" }
            lines.append(line)
        }
        if let ducking = engine.ducking {
            let controls = ducking.controls.map { control in
                "\(control.element) \(control.ducked ? "ducked" : "up")"
                    + (control.userOverrides > 0 ? " (\(control.userOverrides) left to the user)" : "")
            }
            lines.append(
                cFormat("          ducking −%.1f dB over %ld ms: ", ducking.decibels, ducking.rampMs)
                    + controls.joined(separator: ", "))
        }
        return lines
    }
}
