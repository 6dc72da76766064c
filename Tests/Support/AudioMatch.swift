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

    /// Why the capture is not the expected audio; empty when it is. A glitch (the rig's own: samples skipped or
    /// inserted) is tolerated only up to one period (160 samples) each and 5 % in all: a longer gap, repeat or
    /// cut loses the sync and fails.
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
            search: for ahead in stride(from: 0, through: 160, by: 8) where i + ahead + 48 <= expected.count {
                let block = (i + ahead)..<(i + ahead + 48)
                guard expected[block].contains(where: { abs(Int($0)) > 100 }) else { continue }
                let first = block.lowerBound
                // At most one period (10 ms at 16 kHz) skipped or inserted: a longer gap or repeat is a failure.
                for shift in -160...160
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

/// One announcement (or a fragment of one) found in a capture by ``AudioMatch/hearings(of:in:)``.
public struct Hearing: Sendable, CustomStringConvertible {
    /// Where its first audible sample is in the capture.
    public var start: Int
    /// For each candidate, how many of its samples (from its own first audible sample) the capture matches from
    /// `start` on, within a gain and at most one period's glitch at a time.
    public var matched: [Int]
    /// The candidate matched furthest (nil: the sound is none of them).
    public var best: Int?
    /// Whether `best` was heard to its last audible sample.
    public var complete: Bool
    /// Where the next search starts (just after what was matched).
    public var end: Int

    public var description: String {
        let what = best.map { "candidate \($0) \(complete ? "complete" : "fragment of \(matched[$0]) samples")" }
        return "at \(start): \(what ?? "unknown sound of \(end - start) samples (best match \(matched.max() ?? 0))")"
    }
}

extension Hearing {
    /// Where the heard candidate's last audible sample is in the capture.
    public var heardEnd: Int? { best.map { start + matched[$0] } }
}

extension AudioMatch {
    /// The one way a payment may be heard complete twice through the rig's sound server (docs/protocol.md,
    /// "Durability"): the daemon was killed once the server had its last sample rendered — the server drops a dead
    /// client's queue but plays what it rendered — and before its `spoken` was journaled (the wake-up at its end and
    /// one commit), so the next start speaks it again. `killFrame` is where the capture was when the kill was sent
    /// (``Rig/capturedFrames()``); the first hearing must end within `window` frames before it — 80 ms: the
    /// server's render-ahead (under 40 ms measured), the wake-up and commit (3.3 ms), and room for a commit on a
    /// loaded machine — or at most `captureLag` after it (parec's 20 ms fragments reach the file a little late).
    /// Any later kill means the daemon recorded the hearing late: a double. (It was 150 ms before the window was
    /// measured per sound stack.)
    public static func inReplayWindow(
        heardEnd: Int, killFrame: Int, window: Int = 1_280, captureLag: Int = 800
    ) -> Bool {
        killFrame - heardEnd <= window && heardEnd - killFrame <= captureLag
    }

    /// Finds every announcement in `captured`, in order: at each onset, each candidate is aligned on its own
    /// onset (within ±`search` samples), its gain estimated (the sink's volume scales what the monitor hears),
    /// and followed sample by sample; a stretch that stops matching is tolerated only if the capture matches again
    /// within `maxGlitch` samples of shift (one period of the rig's own glitches). A gap, a repeat or a cut longer
    /// than that ends the match: the rest then starts no candidate and is reported as an unknown sound, or it
    /// was a cut (a fragment). Complete means matched to the candidate's last audible sample.
    public static func hearings(
        of candidates: [[Int16]], in captured: [Int16], search: Int = 480, maxGlitch: Int = 160
    ) -> [Hearing] {
        // The capture may be heard at any volume (the sink's volume scales it): its onset is its first sample
        // above the rig's silence, which is exact zeros; each candidate is aligned on its own onset within
        // ±`search` samples, then followed sample by sample.
        let captureThreshold: Int32 = 8
        let onsets = candidates.map { onset($0, threshold: 300) ?? 0 }
        let ends = candidates.map { end($0, threshold: 64) ?? $0.count }
        var result: [Hearing] = []
        var position = 0
        while position < captured.count {
            guard let start = captured[position...].firstIndex(where: { abs(Int32($0)) >= captureThreshold }) else {
                break
            }
            var matched: [Int] = []
            var reach: [Int] = []
            for (index, candidate) in candidates.enumerated() {
                let (count, last) = follow(
                    candidate, from: onsets[index], in: captured, at: start, search: search, maxGlitch: maxGlitch)
                matched.append(count)
                reach.append(last)
            }
            let bestIndex = matched.indices.max { matched[$0] < matched[$1] }
            var hearing = Hearing(start: start, matched: matched, best: nil, complete: false, end: start + 1)
            // Its extent: up to the next 0.1 s of silence.
            var extent = start
            var quiet = 0
            while extent < captured.count && quiet < 1600 {
                quiet = abs(Int32(captured[extent])) < captureThreshold ? quiet + 1 : 0
                extent += 1
            }
            extent -= quiet
            // A candidate matched for 50 ms, or for all of a shorter sound (a fragment cut off early): from its
            // onset (a quiet rise before the candidate's own onset is searched like any hearing's) to within one
            // period of the sound's end.
            if let bestIndex,
                matched[bestIndex] >= 800 || (matched[bestIndex] >= 64 && reach[bestIndex] >= extent - 160)
            {
                hearing.best = bestIndex
                hearing.complete = onsets[bestIndex] + matched[bestIndex] >= ends[bestIndex]
                hearing.end = max(start + 1, reach[bestIndex])
            } else {
                // None of them: skip to the next stretch of silence.
                hearing.end = extent
            }
            result.append(hearing)
            // Past what matched, and past the quiet tail of the candidate (below the onset threshold).
            var next = hearing.end
            while next < captured.count && abs(Int32(captured[next])) < 64 && next < hearing.end + 160 { next += 1 }
            position = next
        }
        return result
    }

    /// How many samples of `expected` from `from` on the capture holds from near `at` on (and the capture index
    /// just after the last matched one): aligned by correlation within ±`search` (coarse, then fine), scaled by a
    /// least-squares gain, each sample within 3 units (plus 0.5 %), glitches resynchronised within ±`maxGlitch`
    /// samples.
    static func follow(
        _ expected: [Int16], from: Int, in captured: [Int16], at: Int, search: Int, maxGlitch: Int
    ) -> (matched: Int, end: Int) {
        let probe = min(400, expected.count - from)
        guard probe > 160 else { return (0, at) }
        // Normalised by both sides' energy over the samples compared, and only where the capture holds sound (the
        // rig's silence is exact zeros): a fragment cut short must line up with its own start, not with a louder
        // later stretch of the candidate. At least 64 samples must take part.
        func correlation(_ lag: Int) -> Double {
            var dot = 0.0
            var energy = 0.0
            var expectedEnergy = 0.0
            var count = 0
            for index in 0..<probe {
                let j = at + lag + index
                guard j >= 0, j < captured.count, captured[j] != 0 else { continue }
                count += 1
                let x = Double(expected[from + index])
                let y = Double(captured[j])
                dot += x * y
                energy += y * y
                expectedEnergy += x * x
            }
            return count >= 64 && energy > 0 && expectedEnergy > 0 ? dot / (energy * expectedEnergy).squareRoot() : -1
        }
        // Coarse (every other lag), then fine around the four best coarse lags: a short fragment's true lag can sit
        // between two coarse ones and read lower there than a chance alignment over a smaller overlap. (Every 4th
        // lag was too coarse for speech at 16 kHz: 2 samples off the true lag read 0.67 where a lag a pitch period
        // off read 0.89, and a whole announcement heard through PipeWire at 60 % was "an unknown sound".)
        let coarse = stride(from: -search, through: search, by: 2).map { (lag: $0, value: correlation($0)) }
        var fine: [(lag: Int, value: Double)] = []
        for candidate in coarse.sorted(by: { $0.value > $1.value }).prefix(4) {
            for lag in (candidate.lag - 1)...(candidate.lag + 1) where !fine.contains(where: { $0.lag == lag }) {
                fine.append((lag, correlation(lag)))
            }
        }
        fine.sort { $0.value > $1.value }
        // Gain: the median ratio over the loud samples of the first 0.1 s (robust to a fragment's cut-off end).
        func gainRatios(above floor: Double, lag: Int) -> [Double] {
            var ratios: [Double] = []
            for index in 0..<min(1600, expected.count - from) {
                let j = at + lag + index
                guard j >= 0, j < captured.count else { break }
                let x = Double(expected[from + index])
                // Where the capture is silent the sound was cut (or not begun): no evidence of the gain there.
                if abs(x) >= floor && captured[j] != 0 { ratios.append(Double(captured[j]) / x) }
            }
            return ratios
        }
        func gain(at lag: Int) -> Double? {
            // A fragment of a few ms may hold no loud sample yet: then the quieter ones give the gain.
            var ratios = gainRatios(above: 500, lag: lag)
            if ratios.count < 16 { ratios = gainRatios(above: 64, lag: lag) }
            guard !ratios.isEmpty else { return nil }
            ratios.sort()
            let gain = ratios[ratios.count / 2]
            return gain > 0 ? gain : nil
        }
        func same(_ i: Int, _ j: Int, gain: Double) -> Bool {
            guard i < expected.count else { return false }
            let heard = j >= 0 && j < captured.count ? Double(captured[j]) : 0
            let want = gain * Double(expected[i])
            return abs(heard - want) <= 3 + 0.005 * abs(want)
        }
        // Speech correlates with itself a pitch period away: heard quietly (a low volume rounds the small samples
        // to silence, which the correlation leaves out), a lag one period off can read a little higher than the
        // true one. Of the best-correlated lags, the first whose first 64 samples match is taken.
        guard let best = fine.first else { return (0, at) }
        var chosen: (lag: Int, gain: Double)?
        for candidate in fine.prefix(8) {
            guard let gain = gain(at: candidate.lag) else { continue }
            if (0..<min(64, expected.count - from)).allSatisfy({ same(from + $0, at + candidate.lag + $0, gain: gain) }) {
                chosen = (candidate.lag, gain)
                break
            }
        }
        guard let (bestLag, gain) = chosen ?? gain(at: best.lag).map({ (best.lag, $0) }) else { return (0, at) }
        func same(_ i: Int, _ j: Int) -> Bool { same(i, j, gain: gain) }
        var i = from
        var j = at + bestLag
        while i < expected.count {
            if same(i, j) {
                i += 1
                j += 1
                continue
            }
            // A glitch: the next 32 samples must match again within ±maxGlitch of shift, within maxGlitch samples.
            var resumed: (Int, Int)?
            search: for ahead in stride(from: 0, through: maxGlitch, by: 8) where i + ahead + 32 <= expected.count {
                let block = (i + ahead)..<(i + ahead + 32)
                guard expected[block].contains(where: { abs(Int($0)) > 100 }) else { continue }
                for shift in -maxGlitch...maxGlitch
                where (0..<32).allSatisfy({ same(block.lowerBound + $0, j + ahead + shift + $0) }) {
                    resumed = (block.lowerBound, j + ahead + shift)
                    break search
                }
            }
            guard let resumed else { break }
            (i, j) = resumed
        }
        return (i - from, j)
    }
}
