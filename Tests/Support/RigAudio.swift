import Foundation

/// What a user would check on the rig from outside the daemon: amixer's view of a volume control, the sound
/// server crashing and coming back, a second stream (music) playing alongside, the level of a tone in a capture.
extension Rig {
    /// One simple mixer element as `amixer -D CONTROL sget ELEMENT` shows it.
    public struct MixerValue: Sendable, Equatable, CustomStringConvertible {
        public var raw: Int
        public var on: Bool
        public init(raw: Int, on: Bool) {
            self.raw = raw
            self.on = on
        }

        public var description: String { "\(raw) [\(on ? "on" : "off")]" }
    }

    /// Reads an element through amixer (another process, like a user would).
    public func mixer(_ control: String = "pulse", element: String = "Master") async throws -> MixerValue {
        let result = try await command("/usr/bin/amixer", ["-D", control, "sget", element])
        guard result.status == 0 else { throw HarnessError("amixer sget failed: \(result)") }
        // "  Mono: Playback 39322 [60%] [on]"
        for line in result.stdout.split(separator: "\n") where line.contains("Playback") && line.contains("[") {
            let fields = line.split(separator: " ")
            guard let index = fields.firstIndex(of: "Playback"), index + 1 < fields.count,
                let raw = Int(fields[index + 1])
            else { continue }
            return MixerValue(raw: raw, on: !line.contains("[off]"))
        }
        throw HarnessError("cannot read amixer output: \(result.stdout)")
    }

    /// Polls the element through amixer until `condition` holds, or 20 s pass; returns what was read last (the
    /// caller's assertion then says what it was).
    @discardableResult
    public func waitForMixer(
        _ control: String = "pulse", _ condition: (MixerValue) -> Bool
    ) async throws -> MixerValue {
        var last = try await mixer(control)
        let reached = try await eventuallyValue(timeout: .seconds(20)) { () async throws -> MixerValue? in
            last = try await mixer(control)
            return condition(last) ? last : nil
        }
        return reached ?? last
    }

    /// Sets an element through amixer: `value` is anything `amixer sset` takes (`13107`, `20%`, `mute`, `unmute`).
    public func setMixer(_ value: String, control: String = "pulse", element: String = "Master") async throws {
        let result = try await command("/usr/bin/amixer", ["-q", "-D", control, "sset", element, value])
        guard result.status == 0 else { throw HarnessError("amixer sset \(value) failed: \(result)") }
    }

    /// Kills the sound server (-9, as a crash) and starts a new one after `down` (the sound device is gone
    /// meanwhile); a running capture goes on into the same file.
    public func restartServer(down: Duration = .zero) async throws {
        let seconds = Double(down.components.seconds) + Double(down.components.attoseconds) / 1e18
        let result = try await run("\(Paths.root)/scripts/rig.sh", ["restart", directory, "\(seconds)"])
        guard result.status == 0 else { throw HarnessError("rig restart failed: \(result)") }
    }

    /// Plays a sine tone on an ALSA PCM of the rig (e.g. `pulse:music`) with aplay, from a WAV file sox makes;
    /// `environment` is added to aplay's (e.g. `PULSE_PROP` for a media role). Returns when it has finished.
    public func playTone(
        device: String, frequency: Int, seconds: Double, amplitude: Double = 0.3, environment: [String: String] = [:]
    ) async throws {
        let file = "\(directory)/tone-\(frequency)-\(UInt32.random(in: 0...UInt32.max)).wav"
        let made = try await run(
            "/usr/bin/sox",
            ["-n", "-r", "16000", "-c", "1", "-b", "16", file, "synth", "\(seconds)", "sine", "\(frequency)",
             "vol", "\(amplitude)"])
        guard made.status == 0 else { throw HarnessError("sox failed: \(made)") }
        defer { try? FileManager.default.removeItem(atPath: file) }
        let played = try await run(
            "/usr/bin/aplay", ["-q", "-D", device, file],
            environment: self.environment.merging(environment) { _, added in added })
        guard played.status == 0 else { throw HarnessError("aplay failed: \(played)") }
    }
}

extension AudioMatch {
    /// Amplitude of the `frequency` component in `samples` (Goertzel), as the peak of a sine of that frequency.
    /// A 20 dB quieter tone gives a tenth of the value; other sounds at other frequencies barely register.
    public static func toneLevel<C: Collection>(_ samples: C, frequency: Double, rate: Double = 16000) -> Double
    where C.Element == Int16 {
        guard !samples.isEmpty else { return 0 }
        let omega = 2 * Double.pi * frequency / rate
        let coefficient = 2 * cos(omega)
        var previous = 0.0
        var beforePrevious = 0.0
        for sample in samples {
            let value = Double(sample) + coefficient * previous - beforePrevious
            beforePrevious = previous
            previous = value
        }
        let power = previous * previous + beforePrevious * beforePrevious - coefficient * previous * beforePrevious
        return 2 * power.squareRoot() / Double(samples.count)
    }

    /// Like `correlation`, but aligned by the end of the sound: how well the capture *ends* with `expected`
    /// (after a sound server restart the capture is the part before the crash, then everything played since).
    public static func correlationAtEnd(expected: [Int16], captured: [Int16], search: Int = 400) -> (value: Double, lag: Int) {
        guard let expectedEnd = end(expected), let capturedEnd = end(captured) else { return (0, 0) }
        let base = capturedEnd - expectedEnd
        var best = (value: -1.0, lag: 0)
        for lag in (base - search)...(base + search) {
            let value = normalisedCorrelation(expected, captured, lag: lag)
            if value > best.value { best = (value, lag) }
        }
        return best
    }

    /// Finds `expected` anywhere in `captured`, even under other sound (music): a search over every lag on both
    /// signals decimated by `factor` (block means, which also mute high tones such as a 3 kHz test tone), refined
    /// at full rate. Returns the normalised correlation there (−1…1) and the lag (where `expected[0]` falls).
    public static func locate(expected: [Int16], captured: [Int16], factor: Int = 8) -> (value: Double, lag: Int) {
        func decimate(_ samples: [Int16]) -> [Double] {
            stride(from: 0, to: samples.count - factor + 1, by: factor).map { start in
                var sum = 0.0
                for index in start..<(start + factor) { sum += Double(samples[index]) }
                return sum / Double(factor)
            }
        }
        let small = decimate(expected)
        let large = decimate(captured)
        guard !small.isEmpty, large.count >= small.count else { return (0, 0) }
        let energy = small.reduce(0) { $0 + $1 * $1 }
        var best = (value: -Double.infinity, lag: 0)
        small.withUnsafeBufferPointer { a in
            large.withUnsafeBufferPointer { b in
                var window = b[0..<a.count].reduce(0) { $0 + $1 * $1 }
                for lag in 0...(b.count - a.count) {
                    if lag > 0 {
                        window += b[lag + a.count - 1] * b[lag + a.count - 1] - b[lag - 1] * b[lag - 1]
                    }
                    var dot = 0.0
                    for index in 0..<a.count { dot += a[index] * b[lag + index] }
                    let value = dot / max(1, (energy * max(window, 0)).squareRoot())
                    if value > best.value { best = (value, lag) }
                }
            }
        }
        var refined = (value: -1.0, lag: 0)
        for lag in (best.lag * factor - 2 * factor)...(best.lag * factor + 2 * factor) {
            let value = normalisedCorrelation(expected, captured, lag: lag)
            if value > refined.value { refined = (value, lag) }
        }
        return refined
    }

    /// `toneLevel` over consecutive windows of `window` samples.
    public static func toneLevels(_ samples: [Int16], frequency: Double, window: Int = 1600) -> [Double] {
        stride(from: 0, to: samples.count - window + 1, by: window).map { start in
            toneLevel(samples[start..<(start + window)], frequency: frequency)
        }
    }
}
