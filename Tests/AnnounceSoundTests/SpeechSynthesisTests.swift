import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// libespeak-ng for real: free text spoken in the pack's voice, prepared like its clips, cached.
@Suite(.serialized)
struct SpeechSynthesisTests {
    @Test func theDefaultPacksSpeakFreeTextInTheirOwnVoice() throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        let synthesizer = try #require(pack.synthesizer as? EspeakSynthesizer)
        #expect(synthesizer.settings.voice == "cmn-latn-pinyin+f3", "never the broken cmn voice")
        // The builder made the network-lost clip from the same text with the espeak-ng program: synthesising it
        // through the library at run time must give the same speech (same voice, rate, pitch range).
        let spoken = try synthesizer.speech(for: "网络已断开")
        let file = try #require(pack.manifest.clips["网络已断开"])
        let clip = try #require(pack.clips[file])
        let spokenInt = spoken.map(ClipProcessing.int16)
        let clipInt = clip.array  // kept as played
        let match = AudioMatch.correlation(expected: clipInt, captured: spokenInt)
        #expect(match.value > 0.9, "run-time speech differs from the pack's clip: correlation \(match.value)")
        #expect(abs(spoken.count - clip.count) < pack.sampleRate / 20, "\(spoken.count) vs \(clip.count) samples")
        // Prepared like a clip: at the pack's loudness, faded.
        let loudness = try Loudness.ofClip(spoken, sampleRate: pack.sampleRate)
        #expect(
            abs(loudness - (pack.manifest.clipSettings.loudnessLufs ?? 0)) < 0.5 || ClipProcessing.peak(spoken) > 0.85)
        #expect(spoken.first == 0)
        // A different text is a different sound.
        let other = try synthesizer.speech(for: "服务器已连接").map(ClipProcessing.int16)
        #expect(AudioMatch.correlation(expected: clipInt, captured: other).value < match.value - 0.2)
    }

    @Test func freeTextRendersThroughThePackAndIsCached() throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/en")
        let synthesizer = try #require(pack.synthesizer as? EspeakSynthesizer)
        let text = "Please collect your order at the counter & say <thanks>"
        let announcement = try pack.composer.compose(.text(text))
        let first = try pack.render(announcement)
        let counts = synthesizer.cacheCounts
        let second = try pack.render(announcement)
        #expect(first == second)
        #expect(synthesizer.cacheCounts.hits == counts.hits + 1)
        #expect(synthesizer.cacheCounts.misses == counts.misses)
        let seconds = Double(first.count) / Double(pack.sampleRate)
        #expect(seconds > 2 && seconds < 8, "\(seconds) s for \(text.count) characters")
        #expect(AudioMatch.rms(first) > 1000, "it is speech, not silence")
    }

    @Test func theCacheIsBounded() throws {
        let preparer = ClipPreparer(settings: ClipSettings(), outputRate: 16000)
        let synthesizer = EspeakSynthesizer(
            settings: SpeechSettings(voice: "en-us", speed: 300), preparer: preparer, cacheCapacity: 2)
        for word in ["one", "two", "three", "one"] { _ = try synthesizer.speech(for: word) }
        // "one" was evicted by "three", so it is synthesised twice.
        #expect(synthesizer.cacheCounts.misses == 4)
        _ = try synthesizer.speech(for: "three")
        #expect(synthesizer.cacheCounts.hits == 1)
    }

    @Test func anUnknownVoiceIsASynthesisError() throws {
        let synthesizer = EspeakSynthesizer(
            settings: SpeechSettings(voice: "no-such-voice"),
            preparer: ClipPreparer(settings: ClipSettings(), outputRate: 16000))
        do {
            _ = try synthesizer.speech(for: "hello")
            Issue.record("spoke with a voice that does not exist")
        } catch {
            #expect(error.code == .synthesisFailed)
            #expect(error.cause?.contains("espeak_SetVoiceByName(no-such-voice)") == true, "\(error)")
        }
    }
}
