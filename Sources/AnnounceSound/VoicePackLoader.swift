import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Loads voice pack folders: reads `manifest.json`, validates it, decodes every clip once through libsndfile
/// (any format it reads) and prepares it (``ClipPreparer``). A broken pack is refused with `bad_voice_pack`
/// and a message naming the clip and the problem. See docs/voice-packs.md.
public enum VoicePackLoader {
    public struct Options: Sendable {
        /// The output rate; nil: the manifest's `sampleRate`. Clips at any other rate are converted at load.
        public var sampleRate: Int?
        /// Silence between words, ms; nil: the manifest's `gapMs`.
        public var gapMs: Int?
        /// Longest clip accepted, in seconds.
        public var maximumClipSeconds: Double = 8
        /// Give the pack an espeak-ng voice for free text (its manifest's `speech`, else the language's default).
        public var synthesizeFreeText = true
        public init() {}
    }

    public static let manifestName = "manifest.json"

    public static func readManifest(directory: String) throws(AnnounceError) -> VoicePackManifest {
        let path = Path.join(directory, manifestName)
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AnnounceError(.badVoicePack, "voice pack manifest \(path) is missing or unreadable")
        }
        do {
            return try JSONDecoder().decode(VoicePackManifest.self, from: data)
        } catch {
            throw AnnounceError(.badVoicePack, "voice pack manifest \(path) is not valid", cause: "\(error)")
        }
    }

    public static func load(directory: String, options: Options = Options()) throws(AnnounceError) -> VoicePack {
        let manifest = try readManifest(directory: directory)
        let composer = try Composer(manifest: manifest)
        let problems = manifest.problems(requiredTokens: composer.readerTokens)
        guard problems.isEmpty else {
            throw AnnounceError(
                .badVoicePack, "voice pack \(directory) is broken: " + problems.joined(separator: "; "))
        }
        if let rate = options.sampleRate, !(8000...192_000).contains(rate) {
            throw AnnounceError(.badVoicePack, "output rate \(rate) Hz is out of range 8000…192000")
        }
        if let gap = options.gapMs, !(0...1000).contains(gap) {
            throw AnnounceError(.badVoicePack, "gap \(gap) ms is out of range 0…1000")
        }
        let preparer = ClipPreparer(
            settings: manifest.clipSettings, outputRate: options.sampleRate ?? manifest.sampleRate)
        var clips: [String: [Float]] = [:]
        for file in manifest.allFiles {
            clips[file] = try loadClip(file, directory: directory, preparer: preparer, options: options).samples
        }
        var synthesizer: (any SpeechSynthesizer)?
        if options.synthesizeFreeText,
            let speech = manifest.speech ?? SpeechSettings.defaults(language: manifest.language)
        {
            synthesizer = EspeakSynthesizer(settings: speech, preparer: preparer)
        }
        return try VoicePack(
            manifest: manifest, directory: directory, clips: clips, sampleRate: preparer.outputRate,
            gapMs: options.gapMs, synthesizer: synthesizer, warnings: manifest.warnings())
    }

    /// Loads every pack of a library folder: the folder itself if it is a pack, else each sub-folder holding
    /// a `manifest.json`. All packs are converted to one output rate (`options.sampleRate`, else the default
    /// pack's rate), so one device plays them all. Any broken pack refuses the whole library, naming it.
    public static func loadLibrary(
        directory: String, defaultLanguage: String? = nil, options: Options = Options()
    ) throws(AnnounceError) -> VoiceLibrary {
        let folders = try packFolders(directory)
        var manifests: [(folder: String, manifest: VoicePackManifest)] = []
        for folder in folders { manifests.append((folder, try readManifest(directory: folder))) }
        var options = options
        if options.sampleRate == nil {
            let key = defaultLanguage.map(Composer.languageKey)
            let chosen = manifests.first { Composer.languageKey($0.manifest.language) == key } ?? manifests.first
            options.sampleRate = chosen?.manifest.sampleRate
        }
        var packs: [VoicePack] = []
        for (folder, _) in manifests { packs.append(try load(directory: folder, options: options)) }
        return try VoiceLibrary(packs: packs, defaultLanguage: defaultLanguage)
    }

    /// The pack folders of a library folder, sorted.
    public static func packFolders(_ directory: String) throws(AnnounceError) -> [String] {
        let manager = FileManager.default
        if manager.fileExists(atPath: Path.join(directory, manifestName)) {
            return [directory]
        }
        let entries: [String]
        do {
            entries = try manager.contentsOfDirectory(atPath: directory)
        } catch {
            throw AnnounceError(.badVoicePack, "voice pack folder \(directory) cannot be read", cause: errorReason(error))
        }
        let folders = entries.sorted().map { Path.join(directory, $0) }.filter {
            manager.fileExists(atPath: Path.join($0, manifestName))
        }
        guard !folders.isEmpty else {
            throw AnnounceError(
                .badVoicePack, "\(directory) holds no voice pack (no \(manifestName) in it or its folders)")
        }
        return folders
    }

    /// Decodes, checks and prepares one clip; every refusal names the clip and the problem.
    static func loadClip(
        _ file: String, directory: String, preparer: ClipPreparer, options: Options
    ) throws(AnnounceError) -> (samples: [Float], report: ClipPreparer.Report) {
        let path = Path.join(directory, file)
        func refuse(_ problem: String, cause: String? = nil) -> AnnounceError {
            AnnounceError(.badVoicePack, "voice pack clip \(file): \(problem)", cause: cause)
        }
        guard FileManager.default.fileExists(atPath: path) else { throw refuse("file \(path) is missing") }
        let audio: DecodedAudio
        do {
            audio = try SoundFile.read(path: path, maximumFrames: Int(options.maximumClipSeconds * 192_000))
        } catch {
            throw refuse("cannot be decoded", cause: error.description)
        }
        guard audio.channels == 1 else { throw refuse("has \(audio.channels) channels; clips must be mono") }
        guard audio.frames > 0 else { throw refuse("is empty") }
        guard audio.seconds <= options.maximumClipSeconds else {
            let seconds = (audio.seconds * 100).rounded() / 100
            throw refuse("is \(seconds) s long; the limit is \(options.maximumClipSeconds) s")
        }
        do {
            return try preparer.prepare(audio.samples, sampleRate: audio.sampleRate)
        } catch {
            throw refuse(error.description)
        }
    }
}
