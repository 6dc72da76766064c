import AnnounceCore
import CMalloc
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
        /// Keep the prepared clips in a file here and map it (``PreparedClips``); nil: decode every clip and keep
        /// it in memory. The daemon uses `<state_dir>/prepared`.
        public var preparedDirectory: String?
        public init() {}
    }

    public static let manifestName = "manifest.json"

    public static func readManifest(directory: String) throws(AnnounceError) -> VoicePackManifest {
        try readManifestAndBytes(directory: directory).manifest
    }

    /// The manifest and the bytes it was read from.
    static func readManifestAndBytes(
        directory: String
    ) throws(AnnounceError) -> (manifest: VoicePackManifest, bytes: Data) {
        let path = Path.join(directory, manifestName)
        let data: Data
        do {
            let descriptor = try PackFile.open(manifestName, in: directory)
            defer { close(descriptor) }
            data = try PackFile.readAll(descriptor, limit: PackFile.manifestLimit)
        } catch .missing {
            throw AnnounceError(.badVoicePack, "voice pack manifest \(path) is missing or unreadable")
        } catch {
            throw AnnounceError(.badVoicePack, "voice pack manifest \(path) \(error)")
        }
        do {
            return (try JSONDecoder().decode(VoicePackManifest.self, from: data), data)
        } catch {
            // Where the JSON breaks (line, column), which the decoder does not say; else what does not fit.
            if let problem = JSONSyntax.firstProblem(Array(data)) {
                throw AnnounceError(.badVoicePack, "voice pack manifest \(path) is not valid JSON: \(problem)")
            }
            throw AnnounceError(.badVoicePack, "voice pack manifest \(path) is not valid", cause: "\(error)")
        }
    }

    public static func load(directory: String, options: Options = Options()) throws(AnnounceError) -> VoicePack {
        let (manifest, manifestBytes) = try readManifestAndBytes(directory: directory)
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
        var synthesizer: (any SpeechSynthesizer)?
        if options.synthesizeFreeText,
            let speech = manifest.speech ?? SpeechSettings.defaults(language: manifest.language)
        {
            synthesizer = EspeakSynthesizer(settings: speech, preparer: preparer)
        }
        let (clips, storage) = try prepare(
            files: manifest.allFiles, directory: directory, manifest: manifestBytes, preparer: preparer,
            options: options)
        return try VoicePack(
            manifest: manifest, directory: directory, clips: clips, storage: storage, sampleRate: preparer.outputRate,
            gapMs: options.gapMs, synthesizer: synthesizer, warnings: manifest.warnings())
    }

    /// Prepares `files` of the folder `directory` (a pack's, or a version of the pushed clips) with `preparer`:
    /// mapped from the file of prepared clips when `options.preparedDirectory` holds one made from exactly these
    /// bytes; else decoded, checked and prepared (``loadClip(_:directory:preparer:options:)``), and — with a
    /// prepared folder — written there and mapped. `manifest` is the bytes of what names the files (part of the key).
    static func prepare(
        files: [String], directory: String, manifest: Data, preparer: ClipPreparer, options: Options
    ) throws(AnnounceError) -> (clips: [String: ClipSamples], storage: VoicePack.ClipStorage) {
        guard !files.isEmpty else { return ([:], .memory) }
        let prepared = options.preparedDirectory.flatMap { folder in
            PreparedClips.key(
                directory: directory, manifest: Array(manifest), files: files, outputRate: preparer.outputRate,
                limits: options.maximumClipSeconds
            ).map { (key: $0, path: PreparedClips.path(in: folder, key: $0)) }
        }
        if let prepared,
            let clips = PreparedClips.map(prepared.path, key: prepared.key, rate: preparer.outputRate, files: files)
        {
            return (clips, .mapped(file: prepared.path))
        }
        var decoded: [String: [Int16]] = [:]
        for file in files {
            decoded[file] = try loadClip(file, directory: directory, preparer: preparer, options: options).samples
                .map(ClipProcessing.int16)
        }
        guard let prepared else { return (decoded.mapValues(ClipSamples.init), .memory) }
        do {
            try PreparedClips.write(decoded, key: prepared.key, rate: preparer.outputRate, to: prepared.path)
        } catch {
            return (decoded.mapValues(ClipSamples.init), .unsaved(reason: error.description))
        }
        guard let clips = PreparedClips.map(prepared.path, key: prepared.key, rate: preparer.outputRate, files: files)
        else {
            return (
                decoded.mapValues(ClipSamples.init),
                .unsaved(reason: "\(prepared.path) was written but reads back wrong")
            )
        }
        return (clips, .mapped(file: prepared.path))
    }

    /// Loads the pushed clips of a corpus folder (docs/voice-packs.md, "Pushed clips"): the version its `current`
    /// link names. A folder without that link — nothing pushed yet, or no folder at all — is the empty corpus.
    public static func loadCorpus(
        directory: String, sampleRate: Int, options: Options = Options()
    ) throws(AnnounceError) -> Corpus {
        let link = Path.join(directory, CorpusManifest.currentLink)
        var info = stat()
        guard lstat(link, &info) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return .empty }
            throw AnnounceError(
                .badVoicePack, "the pushed clips' link \(link) cannot be read", cause: String(cString: strerror(errno)))
        }
        guard let pointer = realpath(link, nil) else {
            throw AnnounceError(
                .badVoicePack, "the pushed clips' link \(link) leads nowhere", cause: String(cString: strerror(errno)))
        }
        defer { free(pointer) }
        return try loadCorpusVersion(directory: String(cString: pointer), sampleRate: sampleRate, options: options)
    }

    /// Loads one version folder of pushed clips: its `corpus.json`, and every clip decoded, checked and prepared as
    /// a pack's clips are (mono, not empty or silent, at most `options.maximumClipSeconds`; at `sampleRate`, with the
    /// default processing, so that they sit with the packs' clips). The push listener loads a version it is about
    /// to install with this same function: what it installs, the daemon can load.
    public static func loadCorpusVersion(
        directory: String, sampleRate: Int, options: Options = Options()
    ) throws(AnnounceError) -> Corpus {
        let path = Path.join(directory, CorpusManifest.fileName)
        let bytes: Data
        do {
            let descriptor = try PackFile.open(CorpusManifest.fileName, in: directory)
            defer { close(descriptor) }
            bytes = try PackFile.readAll(descriptor, limit: PackFile.manifestLimit)
        } catch {
            throw AnnounceError(.badVoicePack, "the pushed clips' manifest \(path) \(error)")
        }
        let manifest: CorpusManifest
        do {
            manifest = try JSONDecoder().decode(CorpusManifest.self, from: bytes)
        } catch {
            throw AnnounceError(.badVoicePack, "the pushed clips' manifest \(path) is not valid", cause: "\(error)")
        }
        let problems = manifest.problems()
        guard problems.isEmpty else {
            throw AnnounceError(.badVoicePack, "the pushed clips in \(directory): " + problems.joined(separator: "; "))
        }
        let preparer = ClipPreparer(settings: ClipSettings(), outputRate: sampleRate)
        let (byFile, storage) = try prepare(
            files: manifest.clips.values.map(\.file).sorted(), directory: directory, manifest: bytes,
            preparer: preparer, options: options)
        var clips: [String: ClipSamples] = [:]
        for (id, clip) in manifest.clips { clips[id] = byFile[clip.file] }
        return Corpus(directory: directory, manifest: manifest, clips: clips, storage: storage)
    }

    /// Checks pushed clips as the daemon will load them — each decoded through libsndfile and prepared like a pack's
    /// clip (mono, not empty or silent, at most `maximumClipSeconds`) — without keeping them: the push listener's
    /// check of the clips it downloaded, before it installs them. Refuses with `bad_voice_pack` naming the clip.
    public static func checkCorpusClips(
        _ clips: [CorpusManifest.Clip], directory: String, sampleRate: Int = 16000, options: Options = Options()
    ) throws(AnnounceError) {
        let preparer = ClipPreparer(settings: ClipSettings(), outputRate: sampleRate)
        for clip in clips {
            _ = try loadClip(clip.file, directory: directory, preparer: preparer, options: options)
        }
    }

    /// Loads every pack of a library folder: the folder itself if it is a pack, else each sub-folder holding
    /// a `manifest.json`. All packs are converted to one output rate (`options.sampleRate`, else the default
    /// pack's rate), so one device plays them all. Any broken pack refuses the whole library, naming it.
    /// `corpus`: a folder of pushed clips to load too, at the same rate (``loadCorpus(directory:sampleRate:options:)``);
    /// pushed clips that cannot be loaded refuse nothing — the library holds none, and says why
    /// (``Corpus/problem``): the fleet's clips never keep the daemon from announcing payments.
    public static func loadLibrary(
        directory: String, defaultLanguage: String? = nil, options: Options = Options(), corpus: String? = nil
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
        var pushed = Corpus.empty
        if let corpus, let rate = packs.first?.sampleRate {
            do {
                pushed = try loadCorpus(directory: corpus, sampleRate: rate, options: options)
            } catch {
                pushed = Corpus.empty.with(problem: error)
            }
        }
        if let folder = options.preparedDirectory {
            // Files of packs that changed or left; those the packs being replaced still map stay readable.
            var keep: Set<String> = []
            for pack in packs { if case let .mapped(file) = pack.storage { keep.insert(file) } }
            if case let .mapped(file) = pushed.storage { keep.insert(file) }
            PreparedClips.prune(folder, keep: keep)
        }
        // Decoding and preparing left the heap holding the freed scratch (each clip's decoded, resampled and
        // Float samples, small blocks malloc keeps): about 1 MB with the default packs. The daemon runs for
        // months; give it back to the system.
        malloc_trim(0)
        return try VoiceLibrary(packs: packs, defaultLanguage: defaultLanguage, corpus: pushed)
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
        let descriptor: Int32
        do {
            descriptor = try PackFile.open(file, in: directory)
        } catch .missing {
            throw refuse("file \(path) is missing")
        } catch {
            throw refuse("\(error)")
        }
        defer { close(descriptor) }
        let audio: DecodedAudio
        do {
            audio = try SoundFile.read(
                descriptor: descriptor, path: path, maximumFrames: Int(options.maximumClipSeconds * 192_000))
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

/// The files of a voice pack, opened safely: only regular files inside the pack's own folder. A clip named
/// `../../../etc/shadow`, or a link that leads out of the folder, is refused, and so is anything but a regular
/// file: a FIFO would block the load forever, and with it a reload (SIGHUP) and the stop (SIGTERM).
enum PackFile {
    enum Problem: Error, CustomStringConvertible {
        case missing
        case outside(resolved: String, folder: String)
        case notRegular(kind: String)
        case unreadable(String)
        case tooLarge(limit: Int)

        var description: String {
            switch self {
            case .missing: "is missing"
            case let .outside(resolved, folder): "is outside the voice pack folder \(folder) (it is \(resolved))"
            case let .notRegular(kind): "is not a regular file (a \(kind)); only regular files are read"
            case let .unreadable(reason): "cannot be read: \(reason)"
            case let .tooLarge(limit): "is larger than \(limit) bytes"
            }
        }
    }

    /// Largest manifest read.
    static let manifestLimit = 1 << 20

    /// Opens `name` (relative to the pack folder `directory`) for reading, or says why not. Links are resolved first
    /// and the file must lie inside the pack folder (itself resolved: a pack folder may be a link); then it is opened
    /// without following a link and without blocking, and fstat must show a regular file before anything reads it.
    /// The caller closes the descriptor.
    static func open(_ name: String, in directory: String) throws(Problem) -> Int32 {
        guard let folder = resolved(directory) else { throw .missing }
        guard let path = resolved(directory + "/" + name) else {
            if errno == ENOENT || errno == ENOTDIR { throw .missing }
            throw .unreadable(String(cString: strerror(errno)))
        }
        guard path.hasPrefix(folder.hasSuffix("/") ? folder : folder + "/") else {
            throw .outside(resolved: path, folder: folder)
        }
        let descriptor = Glibc.open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)
        guard descriptor >= 0 else { throw .unreadable(String(cString: strerror(errno))) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw .unreadable(reason)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw .notRegular(kind: kind(info.st_mode))
        }
        return descriptor
    }

    /// The whole content of a regular file open as `descriptor`, up to `limit` bytes.
    static func readAll(_ descriptor: Int32, limit: Int) throws(Problem) -> Data {
        let (bytes, failure) = WholeFile.drain(descriptor, limit: limit)
        if let failure { throw .unreadable(String(cString: strerror(failure))) }
        guard bytes.count <= limit else { throw .tooLarge(limit: limit) }
        return Data(bytes)
    }

    /// `path` with every link, `.` and `..` resolved (realpath), or nil with errno set.
    private static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    private static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: "FIFO"
        case S_IFDIR: "folder"
        case S_IFCHR: "character device"
        case S_IFBLK: "block device"
        case S_IFSOCK: "socket"
        default: "special file"
        }
    }
}
