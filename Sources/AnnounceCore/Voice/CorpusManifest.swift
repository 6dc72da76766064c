/// The pushed clips ("the corpus", 语料): clips the fleet gave this terminal, each under a corpus id, so that they can
/// be spoken by id (docs/voice-packs.md, "Pushed clips"). The push listener installs them (AnnouncePush's
/// `CorpusStore`); the daemon loads them beside its voice packs (AnnounceSound's `VoicePackLoader.loadCorpus`).
///
/// On disk, a corpus folder holds versions, each complete in a folder of its own, and a link `current` naming the
/// one in force; a change makes a new version and turns the link over it in one rename, so a reader sees the old
/// version or the new one, never a mixture:
///
/// ```
/// corpus/current -> v0000000000000007
/// corpus/v0000000000000007/corpus.json        this manifest
/// corpus/v0000000000000007/new_order.wav      one file per clip, named <id>.<format>
/// ```
public struct CorpusManifest: Codable, Sendable, Equatable {
    public static let fileName = "corpus.json"
    /// The link to the version in force, in the corpus folder.
    public static let currentLink = "current"
    public static let supportedFormat = 1
    /// The formats a clip may be pushed in (what the platform and libsndfile name them).
    public static let formats: Set<String> = ["wav", "mp3", "flac", "ogg", "opus", "amr"]
    /// Tasks remembered (``tasks``), the newest kept.
    public static let taskMemory = 256

    public struct Clip: Codable, Sendable, Equatable {
        /// The file in the version folder: `<id>.<format>`.
        public var file: String
        public var format: String
        /// Its size in bytes.
        public var size: Int
        /// Lowercase hex SHA-256 of the file, when the push gave one (our channel always does).
        public var sha256: String?
        /// The task that pushed it.
        public var task: String?

        public init(file: String, format: String, size: Int, sha256: String? = nil, task: String? = nil) {
            self.file = file
            self.format = format
            self.size = size
            self.sha256 = sha256
            self.task = task
        }
    }

    public var format: Int
    /// Grows by one at every change; 0 is the empty corpus no push has touched.
    public var version: UInt64
    /// Corpus id → its clip.
    public var clips: [String: Clip]
    /// The tasks whose effect this version holds, oldest first (the last ``taskMemory``): how a task redelivered
    /// after a crash is known to be done already.
    public var tasks: [String]

    public init(version: UInt64 = 0, clips: [String: Clip] = [:], tasks: [String] = []) {
        format = Self.supportedFormat
        self.version = version
        self.clips = clips
        self.tasks = tasks
    }

    /// Bytes of every clip file.
    public var bytes: Int { clips.values.reduce(0) { $0 + $1.size } }

    /// Why `id` cannot be a corpus id, nil if it can. A corpus id names a clip and becomes its file name, so it is a
    /// name, never a path: 1 to 64 of `A-Za-z0-9_.-`, not starting with a dot (so never `.` or `..`), no `/`.
    public static func problem(id: String) -> String? {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-".unicodeScalars)
        guard !id.isEmpty, id.unicodeScalars.count <= 64, id.unicodeScalars.allSatisfy(allowed.contains) else {
            return "corpus id \"\(id.prefix(80))\" must be 1 to 64 characters of A-Za-z0-9_.- (a name, not a path)"
        }
        guard !id.hasPrefix(".") else { return "corpus id \"\(id)\" must not start with a dot" }
        return nil
    }

    /// The file name of a clip: `<id>.<format>`.
    public static func fileName(id: String, format: String) -> String { "\(id).\(format)" }

    /// What is wrong with this manifest (not the audio): the format, ids, file names; empty if nothing.
    public func problems() -> [String] {
        var problems: [String] = []
        if format != Self.supportedFormat {
            problems.append("format \(format) is not supported (expected \(Self.supportedFormat))")
        }
        for (id, clip) in clips.sorted(by: { $0.key < $1.key }) {
            if let problem = Self.problem(id: id) { problems.append(problem) }
            if !Self.formats.contains(clip.format) {
                problems.append("clip \"\(id)\": format \"\(clip.format)\" is not one of \(Self.formats.sorted())")
            }
            if clip.file != Self.fileName(id: id, format: clip.format) {
                problems.append("clip \"\(id)\": file \"\(clip.file)\" is not \(Self.fileName(id: id, format: clip.format))")
            }
        }
        return problems
    }
}

/// The pushed clips as the daemon holds them: each prepared like a voice pack's clips (at the library's rate,
/// trimmed, loudness matched, faded), by corpus id.
public struct Corpus: Sendable {
    /// The version folder they were loaded from (nil: none).
    public let directory: String?
    public let manifest: CorpusManifest
    /// Corpus id → samples as played.
    public let clips: [String: ClipSamples]
    /// Where ``clips`` are held.
    public let storage: VoicePack.ClipStorage
    /// Why the corpus in the folder could not be loaded (the daemon then holds none, or keeps the previous one).
    public let problem: AnnounceError?

    public init(
        directory: String?, manifest: CorpusManifest, clips: [String: ClipSamples],
        storage: VoicePack.ClipStorage = .memory, problem: AnnounceError? = nil
    ) {
        self.directory = directory
        self.manifest = manifest
        self.clips = clips
        self.idSet = Set(clips.keys)
        self.storage = storage
        self.problem = problem
    }

    /// No pushed clip.
    public static let empty = Corpus(directory: nil, manifest: CorpusManifest(), clips: [:])

    /// The same clips, with a problem noted (a newer corpus that could not be loaded).
    public func with(problem: AnnounceError?) -> Corpus {
        Corpus(directory: directory, manifest: manifest, clips: clips, storage: storage, problem: problem)
    }

    public var version: UInt64 { manifest.version }
    /// The corpus ids, sorted.
    public var ids: [String] { clips.keys.sorted() }
    /// The corpus ids, as a combination is composed against them (made once, at load, not per job).
    public let idSet: Set<String>

    /// How an announcement names pushed clip `id` among its files (``Announcement/files``): a corpus id is a
    /// name, never a path, so it cannot be taken for one of a pack's clip files.
    public static func fileKey(_ id: String) -> String { filePrefix + id }
    /// The corpus id a file of an announcement names, if it names one.
    public static func id(fromFileKey file: String) -> String? {
        file.hasPrefix(filePrefix) ? String(file.dropFirst(filePrefix.count)) : nil
    }
    private static let filePrefix = "corpus:"
}
