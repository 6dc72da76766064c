/// Comparing what the rig captured with what was expected: aligned by onset, then normalised
/// cross-correlation over a small lag window.
public enum AudioMatch {
    /// Index of the first sample whose magnitude reaches `threshold`.
    public static func onset(_ samples: [Int16], threshold: Int16 = 300) -> Int? {
        samples.firstIndex { abs(Int32($0)) >= Int32(threshold) }
    }

    /// Index after the last sample whose magnitude reaches `threshold`.
    public static func end(_ samples: [Int16], threshold: Int16 = 300) -> Int? {
        samples.lastIndex { abs(Int32($0)) >= Int32(threshold) }.map { $0 + 1 }
    }

    /// Best normalised correlation (−1…1) of `expected` against `captured`, trying lags around the
    /// alignment of their onsets. 1.0 means the same waveform up to a gain.
    public static func correlation(expected: [Int16], captured: [Int16], search: Int = 400) -> (value: Double, lag: Int) {
        guard let expectedOnset = onset(expected), let capturedOnset = onset(captured) else { return (0, 0) }
        let base = capturedOnset - expectedOnset
        var best = (value: -1.0, lag: 0)
        for lag in (base - search)...(base + search) {
            let value = normalisedCorrelation(expected, captured, lag: lag)
            if value > best.value { best = (value, lag) }
        }
        return best
    }

    /// Correlation of `a` with `b` shifted so that a[i] lines up with b[i + lag]; parts of `a` outside `b`
    /// count as compared with silence.
    public static func normalisedCorrelation(_ a: [Int16], _ b: [Int16], lag: Int) -> Double {
        var dot = 0.0
        var energyA = 0.0
        var energyB = 0.0
        for index in 0..<a.count {
            let x = Double(a[index])
            energyA += x * x
            let j = index + lag
            guard j >= 0, j < b.count else { continue }
            let y = Double(b[j])
            dot += x * y
            energyB += y * y
        }
        guard energyA > 0, energyB > 0 else { return 0 }
        return dot / (energyA.squareRoot() * energyB.squareRoot())
    }

    /// Root mean square of the samples, in sample units.
    public static func rms<C: Collection>(_ samples: C) -> Double where C.Element == Int16 {
        guard !samples.isEmpty else { return 0 }
        let sum = samples.reduce(0.0) { $0 + Double($1) * Double($1) }
        return (sum / Double(samples.count)).squareRoot()
    }
}

/// What the rig captured compared sample for sample with what should have been played
/// (``AudioMatch/compareSamples(expected:captured:startTolerance:)``).
public struct SampleComparison: Sendable, CustomStringConvertible {
    /// The correlation that found the alignment, and the alignment: expected[i] is heard at captured[i + lag].
    public var correlation: Double
    public var lag: Int
    /// Leading expected samples heard as silence (a freshly opened stream on the rig loses its first ms).
    public var leadingLost: Int
    /// Each place the capture stopped matching and where it matched again.
    public var glitches: [String]
    /// Expected samples not heard across all glitches.
    public var skipped: Int
    /// Where the capture stopped matching for good, if it did.
    public var lostSync: Int?
    /// Index in the capture just after the expected samples.
    public var end: Int
    /// Loudness (rms) of what the capture holds after the expected samples.
    public var after: Double
    public var expectedCount: Int

    /// Why the capture is not the expected audio; empty when it is (glitches skipping at most 5 % tolerated).
    public var failures: [String] {
        var failures: [String] = []
        if let lostSync { failures.append("the capture stops matching at expected sample \(lostSync) of \(expectedCount)") }
        if skipped >= expectedCount / 20 { failures.append("glitches skip \(skipped) samples: \(glitches)") }
        if after >= 30 { failures.append("sound after the expected audio (rms \(after))") }
        return failures
    }

    public var description: String {
        "correlation \(correlation), \(leadingLost) leading samples lost, glitches: \(glitches)"
    }
}

extension AudioMatch {
    /// Compares `captured` with `expected` sample for sample once aligned: the rig passes 16-bit audio at the
    /// sink's rate and full volume through unchanged.
    ///
    /// Two things the host rig does are tolerated and reported, because they happen after the daemon has written
    /// the samples: expected samples within `startTolerance` of the start may be heard as silence (the rig drops
    /// the first milliseconds of a freshly opened stream, hence the lead-in terminals use); and on a loaded 2-core
    /// machine the rig's null sink or its monitor can glitch (a stretch of silence, samples skipped). After a
    /// glitch the comparison finds the expected samples again and goes on exactly. Silence, another announcement,
    /// or anything played after the expected audio fails (see ``SampleComparison/failures``).
    public static func compareSamples(
        expected: [Int16], captured: [Int16], startTolerance: Int = 0
    ) -> SampleComparison {
        let match = correlation(expected: expected, captured: captured)
        // Correlation only finds the alignment; the samples themselves are compared below.
        func same(_ i: Int, _ j: Int) -> Bool {
            let heard = j >= 0 && j < captured.count ? Int(captured[j]) : 0
            return abs(heard - Int(expected[i])) <= 2
        }
        var result = SampleComparison(
            correlation: match.value, lag: match.lag, leadingLost: 0, glitches: [], skipped: 0, lostSync: nil, end: 0,
            after: 0, expectedCount: expected.count)
        var i = 0
        var j = match.lag
        while i < expected.count {
            if same(i, j) {
                i += 1
                j += 1
                continue
            }
            if i < startTolerance && (j < 0 || j >= captured.count || captured[j] == 0) {
                result.leadingLost = i + 1
                i += 1
                j += 1
                continue
            }
            // A glitch: find the next 48 non-silent expected samples again, a little further on in the capture.
            var resumed: (i: Int, j: Int)?
            search: for ahead in stride(from: 0, to: 1600, by: 16) where i + ahead + 48 <= expected.count {
                let block = (i + ahead)..<(i + ahead + 48)
                guard expected[block].contains(where: { abs(Int($0)) > 100 }) else { continue }
                let first = block.lowerBound
                for shift in -400...16000
                where same(first, j + ahead + shift)
                    && (1..<48).allSatisfy({ same(first + $0, j + ahead + shift + $0) })
                {
                    resumed = (block.lowerBound, j + ahead + shift)
                    break search
                }
            }
            guard let resumed else {
                result.lostSync = i
                break
            }
            result.glitches.append(
                "at \(i): \(resumed.i - i) expected samples skipped, \(resumed.j - j - (resumed.i - i)) inserted")
            result.skipped += resumed.i - i
            (i, j) = resumed
        }
        result.end = j
        result.after = rms(captured.dropFirst(max(0, j + 160)))
        return result
    }
}
