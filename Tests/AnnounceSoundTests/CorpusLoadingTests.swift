import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// Pushed clips as the daemon loads them (docs/voice-packs.md, "Pushed clips"): the version `current` names, each
/// clip prepared like a pack's at the library's rate, beside the packs; nothing of them keeps the packs from loading.
struct CorpusLoadingTests {
    @Test func theVersionInForceIsLoadedAtTheLibrarysRate() throws {
        let directory = try CorpusFolder.make(["new_order": "yuan.wav", "urged": "bai.wav"])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = VoicePackLoader.Options()
        options.sampleRate = 8000
        options.synthesizeFreeText = false
        let library = try VoicePackLoader.loadLibrary(directory: Paths.voices, options: options, corpus: directory)
        #expect(library.corpus.problem == nil)
        #expect(library.corpus.ids == ["new_order", "urged"])
        #expect(library.corpus.version == 1)
        // Prepared like a pack's clip (trimmed, at 8 kHz): as long as the pack's own 元 at that rate.
        let yuan = try #require(library.packs.first { $0.language == "zh" }?.clips["clips/yuan.wav"])
        #expect(library.corpus.clips["new_order"]?.count == yuan.count)
        // No folder, or no version yet: no pushed clip, no problem.
        let none = try VoicePackLoader.loadCorpus(directory: "\(directory)/absent", sampleRate: 16000)
        #expect(none.clips.isEmpty && none.problem == nil && none.version == 0)
    }

    /// A version the loader refuses (a clip that is not audio, a manifest naming a file out of the folder) leaves the
    /// library loadable, with no pushed clip and the reason.
    @Test func aBrokenVersionKeepsNothingFromLoading() throws {
        let directory = try CorpusFolder.make(["new_order": "yuan.wav"])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data("not audio".utf8).write(to: URL(fileURLWithPath: "\(directory)/v1/new_order.wav"))
        var options = VoicePackLoader.Options()
        options.synthesizeFreeText = false
        let library = try VoicePackLoader.loadLibrary(directory: Paths.voices, options: options, corpus: directory)
        #expect(library.corpus.clips.isEmpty)
        #expect(library.corpus.problem?.code == .badVoicePack)
        #expect(library.corpus.problem?.message.contains("new_order.wav") == true, "\(String(describing: library.corpus.problem))")
        // A manifest whose file is a path is refused before anything is read.
        var manifest = CorpusManifest(version: 1)
        manifest.clips["x"] = .init(file: "../../../etc/passwd", format: "wav", size: 1)
        try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: "\(directory)/v1/corpus.json"))
        #expect(throws: AnnounceError.self) {
            try VoicePackLoader.loadCorpus(directory: directory, sampleRate: 16000)
        }
    }
}
