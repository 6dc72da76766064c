import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// Copies a default pack to a temporary folder and lets a test change its clips and manifest.
func packCopy(
    _ language: String = "zh", _ change: (String, inout [String: Any]) throws -> Void
) throws -> String {
    let directory = try Paths.temporaryDirectory("pack")
    try FileManager.default.removeItem(atPath: directory)
    try FileManager.default.copyItem(atPath: "\(Paths.voices)/\(language)", toPath: directory)
    let manifestPath = "\(directory)/manifest.json"
    var manifest =
        try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifestPath)))
        as! [String: Any]
    try change(directory, &manifest)
    try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: manifestPath))
    return directory
}

/// Rewrites every clip of a pack copy in another format (and optionally another rate), renaming the files.
func convertClips(
    in directory: String, manifest: inout [String: Any], format: SoundFile.Format, rate: (String) -> Int?
) throws {
    var renamed: [String: String] = [:]
    let original = try VoicePackLoader.readManifest(directory: directory)
    for file in original.allFiles {
        let audio = try SoundFile.read(path: "\(directory)/\(file)")
        var samples = audio.samples
        var outputRate = audio.sampleRate
        if let wanted = rate(file) {
            samples = try Resampler.convert(samples, from: audio.sampleRate, to: wanted)
            outputRate = wanted
        }
        let newFile = (file as NSString).deletingPathExtension + "." + format.fileExtension
        try FileManager.default.removeItem(atPath: "\(directory)/\(file)")
        try SoundFile.write(path: "\(directory)/\(newFile)", samples: samples, sampleRate: outputRate, format: format)
        renamed[file] = newFile
    }
    var clips = manifest["clips"] as! [String: String]
    for (token, file) in clips { clips[token] = renamed[file] }
    manifest["clips"] = clips
    if var variants = manifest["variants"] as? [[String: Any]] {
        for index in variants.indices { variants[index]["file"] = renamed[variants[index]["file"] as! String] }
        manifest["variants"] = variants
    }
    manifest["chime"] = renamed[manifest["chime"] as! String]
}

/// Packs for real: the default packs built by scripts/build-voice-pack.sh, and copies of them in every format
/// libsndfile reads, at mixed rates, and broken on purpose.
@Suite(.serialized)
struct VoicePackAudioTests {
    static let amounts = ["1005", "100.00", "12345.67", "0.05", "110000", "999999999999.99", "20.02", "1091"]

    @Test(
        "a pack in any libsndfile format announces the same words",
        arguments: [SoundFile.Format.flac, .ogg, .opus, .mp3])
    func packInFormat(_ format: SoundFile.Format) throws {
        let reference = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        let directory = try packCopy { directory, manifest in
            try convertClips(in: directory, manifest: &manifest, format: format) { _ in nil }
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pack = try VoicePackLoader.load(directory: directory)
        #expect(pack.sampleRate == 16000)
        for amount in ["1005", "100.00"] {
            let expected = try reference.render(reference.composer.compose(amount: Amount(parsing: amount)))
            let rendered = try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
            let match = AudioMatch.correlation(expected: expected, captured: rendered)
            // Lossless FLAC is the same waveform; lossy codecs at their default quality stay close.
            #expect(match.value > (format == .flac ? 0.999 : 0.8), "\(format) \(amount): correlation \(match.value)")
            let ratio = Double(rendered.count) / Double(expected.count)
            #expect(abs(ratio - 1) < 0.1, "\(format) \(amount): \(rendered.count) vs \(expected.count) samples")
        }
    }

    @Test func clipsAtMixedRatesAreConvertedOnceAtLoad() throws {
        let reference = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        let rates = [8000, 22050, 44100, 48000]
        let directory = try packCopy { directory, manifest in
            try convertClips(in: directory, manifest: &manifest, format: .wav) { file in
                rates[abs(file.unicodeScalars.reduce(0) { $0 &+ Int($1.value) }) % rates.count]
            }
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let manifest = try VoicePackLoader.readManifest(directory: directory)
        var seen = Set<Int>()
        for file in manifest.allFiles { seen.insert(try SoundFile.read(path: "\(directory)/\(file)").sampleRate) }
        #expect(seen.count >= 3, "the copy really mixes rates: \(seen)")

        let pack = try VoicePackLoader.load(directory: directory)
        #expect(pack.sampleRate == 16000)
        for file in manifest.allFiles {
            let clip = try #require(pack.clips[file])
            let original = try #require(reference.clips[file])
            // Same duration at the output rate, whatever rate the file had (a clip left at 8 or 48 kHz would be
            // half or three times as long). Within 50 ms: an 8 kHz file has lost the hiss of its sibilants, so
            // its trimmed onset comes a little later.
            #expect(abs(clip.count - original.count) < 16000 / 20, "\(file): \(clip.count) vs \(original.count)")
        }
        for amount in Self.amounts.prefix(3) {
            let expected = try reference.render(reference.composer.compose(amount: Amount(parsing: amount)))
            let rendered = try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
            let match = AudioMatch.correlation(expected: expected, captured: rendered)
            // 8 kHz clips lose everything above 4 kHz, so the match is close but not perfect.
            #expect(match.value > 0.9, "\(amount): correlation \(match.value)")
        }
        // And a library of packs at different rates plays all of them at the default pack's rate.
        let library = try Paths.temporaryDirectory("lib")
        defer { try? FileManager.default.removeItem(atPath: library) }
        try FileManager.default.copyItem(atPath: directory, toPath: "\(library)/zh")
        let en = try packCopy("en") { directory, manifest in
            try convertClips(in: directory, manifest: &manifest, format: .flac) { _ in 22050 }
            manifest["sampleRate"] = 22050
        }
        try FileManager.default.moveItem(atPath: en, toPath: "\(library)/en")
        let loaded = try VoicePackLoader.loadLibrary(directory: library, defaultLanguage: "zh")
        #expect(loaded.sampleRate == 16000)
        #expect(Set(loaded.languages) == ["zh", "en"])
        #expect(try loaded.pack(language: "en").manifest.sampleRate == 22050)
        #expect(try loaded.pack(language: "en").sampleRate == 16000)
        let englishDefault = try VoicePackLoader.loadLibrary(directory: library, defaultLanguage: "en")
        #expect(englishDefault.sampleRate == 22050 && englishDefault.languages.first == "en")
    }

    @Test(arguments: ["zh", "en"])
    func loudnessIsMatchedAcrossClips(language: String) throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/\(language)")
        let target = try #require(pack.manifest.clipSettings.loudnessLufs)
        let manifest = pack.manifest
        var before: [Double] = []
        var after: [Double] = []
        for file in manifest.allFiles where file != manifest.chime {
            let raw = try SoundFile.read(path: "\(pack.directory)/\(file)")
            before.append(try Loudness.ofClip(raw.samples, sampleRate: raw.sampleRate))
            let clip = try #require(pack.clips[file]).map { Float($0) / 32767 }  // kept as played: 16-bit
            let loudness = try Loudness.ofClip(clip, sampleRate: pack.sampleRate)
            after.append(loudness)
            let peakDb = ClipProcessing.decibels(ClipProcessing.peak(clip))
            let limited = peakDb > manifest.clipSettings.peakCeilingDb - 0.05
            // Every clip reaches the target, unless its peak already sits at the ceiling (then it is quieter).
            #expect(abs(loudness - target) < 0.5 || (limited && loudness < target), "\(file): \(loudness) LUFS")
            #expect(peakDb <= manifest.clipSettings.peakCeilingDb + 0.01, "\(file) peaks at \(peakDb) dBFS")
        }
        let spreadBefore = (before.max() ?? 0) - (before.min() ?? 0)
        let spreadAfter = (after.max() ?? 0) - (after.min() ?? 0)
        print("loudness spread \(language): \(spreadBefore) LU as built, \(spreadAfter) LU as loaded")
        #expect(spreadAfter < spreadBefore, "matching made the spread \(spreadAfter) LU (was \(spreadBefore))")
    }

    /// The largest sample step where two words meet is no larger than the largest step inside the words:
    /// joins do not click. Checked for both gap settings and both packs.
    @Test(arguments: [("zh", 0), ("zh", 20), ("en", 0), ("en", 30)])
    func joinsDoNotClick(language: String, gapMs: Int) throws {
        var options = VoicePackLoader.Options()
        options.gapMs = gapMs
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/\(language)", options: options)
        let window = pack.sampleRate / 500  // 2 ms on each side of a join
        for amount in Self.amounts {
            let rendering = try pack.rendering(pack.composer.compose(amount: Amount(parsing: amount)))
            var inside = 0
            var atJoins = 0
            for segment in rendering.segments {
                inside = max(
                    inside,
                    ClipProcessing.largestStep(
                        rendering.samples, in: segment.lowerBound + window..<segment.upperBound - window))
            }
            for (previous, next) in zip(rendering.segments, rendering.segments.dropFirst()) {
                atJoins = max(
                    atJoins,
                    ClipProcessing.largestStep(
                        rendering.samples, in: previous.upperBound - window..<next.lowerBound + window))
            }
            #expect(inside > 1000, "\(amount): speech has real steps (\(inside))")
            #expect(
                atJoins <= inside, "\(language) gap \(gapMs) \(amount): step \(atJoins) at a join, \(inside) inside")
        }
    }

    @Test func theJoinMeasureCatchesAClickWithoutFades() throws {
        // Control for the test above: two clips cut at the top of a waveform and joined without fades click.
        let rate = 16000
        let tone = sine(200, amplitude: 0.5, seconds: 0.1, rate: rate)
        let cut = Array(tone[0..<(rate / 200 * 9 / 4)])  // two and a quarter periods: ends at a peak
        var faded = cut
        ClipProcessing.applyFades(&faded, length: rate / 200)
        let manifest = VoicePackManifest(
            name: "t", language: "zh", sampleRate: rate, gapMs: 0, clips: ["一": "a", "元": "b"],
            templates: ["plain": ["{amount}"]], chime: "a")
        for (clip, clicks) in [(cut, true), (faded, false)] {
            let reversed = clip.map { -$0 }
            let pack = try VoicePack(manifest: manifest, directory: "/x", clips: ["a": clip, "b": reversed])
            let rendering = try pack.rendering(Announcement(tokens: ["一", "元"], text: "", files: ["a", "b"]))
            let join = rendering.segments[0].upperBound
            let inside = ClipProcessing.largestStep(rendering.samples, in: 10..<(join - 10))
            let atJoin = ClipProcessing.largestStep(rendering.samples, in: (join - 10)..<(join + 10))
            #expect((atJoin > inside) == clicks, "clicks \(clicks): \(atJoin) at the join, \(inside) inside")
        }
    }

    @Test func renderedDurationIsTheSumOfClipsAndGaps() throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        for amount in Self.amounts {
            let announcement = try pack.composer.compose(amount: Amount(parsing: amount))
            let samples = try pack.render(announcement, leadInMs: 50)
            let clipFrames = announcement.files.reduce(0) { $0 + (pack.clips[$1]?.count ?? 0) }
            let gap = pack.gapMs * pack.sampleRate / 1000
            #expect(samples.count == 50 * pack.sampleRate / 1000 + clipFrames + gap * (announcement.files.count - 1))
            // Trimmed clips: "到账一千零五元" takes about as long as espeak-ng saying it at once (≈ 2.4 s), not
            // the 4.6 s of untrimmed clips.
            let seconds = Double(samples.count) / Double(pack.sampleRate)
            if amount == "1005" { #expect(seconds > 1.2 && seconds < 3.2, "\(seconds) s") }
        }
    }
}
