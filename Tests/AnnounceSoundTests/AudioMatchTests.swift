import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Testing

/// The comparison every rig test judges by must see what a listener would: a payment heard whole, a fragment, a
/// gap, a repeat, a cut, another payment — on the default pack's real renders, at any volume.
struct AudioMatchTests {
    let renders: [[Int16]]

    init() throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        renders = try ["1005", "1", "987654321.99"].map {
            try pack.render(pack.composer.compose(amount: Amount(parsing: $0)))
        }
    }

    func scaled(_ samples: [Int16], _ gain: Double) -> [Int16] {
        samples.map { Int16((Double($0) * gain).rounded(.towardZero)) }
    }

    let silence = [Int16](repeating: 0, count: 8_000)

    @Test func wholeAnnouncementsAreFoundInOrderAtAnyVolume() {
        for gain in [1.0, 0.125, 0.027] {
            let capture = silence + scaled(renders[0], gain) + silence + scaled(renders[2], gain) + silence
            let heard = AudioMatch.hearings(of: renders, in: capture)
            #expect(heard.map(\.best) == [0, 2] && heard.allSatisfy(\.complete), "gain \(gain): \(heard)")
        }
    }

    @Test func aCutIsAFragmentAndTheWholeAfterItIsComplete() {
        let cut = Array(renders[2].prefix(renders[2].count / 3))
        let capture = silence + cut + silence + renders[2] + silence
        let heard = AudioMatch.hearings(of: renders, in: capture)
        #expect(heard.map(\.best) == [2, 2] && heard.map(\.complete) == [false, true], "\(heard)")
    }

    @Test func aGapLongerThanAPeriodInsideAnAnnouncementIsNotAWholeHearing() {
        let middle = renders[2].count / 2
        let gap = Array(renders[2][..<middle]) + [Int16](repeating: 0, count: 320) + Array(renders[2][middle...])
        let heard = AudioMatch.hearings(of: renders, in: silence + gap + silence)
        #expect(!heard.contains { $0.complete }, "a 20 ms gap passed as whole: \(heard)")
    }

    @Test func aRepeatLongerThanAPeriodIsNotAWholeHearing() {
        let middle = renders[2].count / 2
        let repeated = Array(renders[2][..<middle]) + Array(renders[2][(middle - 320)...])
        let heard = AudioMatch.hearings(of: renders, in: silence + repeated + silence)
        #expect(!heard.contains { $0.complete }, "a 20 ms repeat passed as whole: \(heard)")
    }

    @Test func aGlitchOfLessThanAPeriodIsTolerated() {
        let middle = renders[2].count / 2
        let skipped = Array(renders[2][..<middle]) + Array(renders[2][(middle + 100)...])
        let heard = AudioMatch.hearings(of: renders, in: silence + skipped + silence)
        #expect(heard.map(\.best) == [2] && heard.first?.complete == true, "\(heard)")
    }

    /// A kill just after an announcement began leaves a few hundred samples: its quiet rise and the first sound.
    /// That is a fragment of it (then heard whole when spoken again), while noise as short is still unknown.
    @Test func aCutJustAfterTheOnsetIsAFragmentButShortNoiseIsNot() {
        for (index, render) in renders.enumerated() {
            let first = render.firstIndex { abs(Int32($0)) >= 8 } ?? 0
            let onset = render.firstIndex { abs(Int32($0)) >= 300 } ?? 0
            let cut = Array(render[first..<(onset + 200)])
            let heard = AudioMatch.hearings(of: renders, in: silence + scaled(cut, 0.5) + silence + render + silence)
            // (Every render begins with 到账: which of them the fragment is cannot be told, only that it is one.)
            #expect(
                heard.count == 2 && heard[0].best != nil && !heard[0].complete && heard[1].best == index
                    && heard[1].complete,
                "\(cut.count) samples cut from \(index): \(heard)")
        }
        let noise = (0..<315).map { Int16(truncatingIfNeeded: ($0 * 7919) % 20_000 - 10_000) }
        let heard = AudioMatch.hearings(of: renders, in: silence + noise + silence)
        #expect(heard.count == 1 && heard[0].best == nil, "\(heard)")
    }

    @Test func somethingElseIsAnUnknownSound() {
        let noise = (0..<8_000).map { Int16(truncatingIfNeeded: ($0 * 7919) % 20_000 - 10_000) }
        let heard = AudioMatch.hearings(of: renders, in: silence + noise + silence + renders[1] + silence)
        #expect(heard.count == 2 && heard[0].best == nil && heard[1].best == 1 && heard[1].complete, "\(heard)")
    }
}
