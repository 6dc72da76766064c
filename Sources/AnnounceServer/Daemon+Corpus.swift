import AnnounceCore
import AnnounceSound
#if canImport(Glibc)
import Glibc
#endif
import Logging

/// The pushed clips (docs/voice-packs.md, "Pushed clips"): loaded with the voice packs at start and at a reload
/// (SIGHUP), and on their own when the push listener has installed a new version (`corpus`). Nothing here touches
/// the queue or a job: a job composed before keeps what it was composed with.
extension Daemon {
    /// `corpus`: loads the version the corpus folder holds now, leaving the packs and the queue as they are, and
    /// says what is loaded. The version loaded already is not decoded again. A version that cannot be loaded leaves
    /// the one loaded in force, and the reply's `error` says why. Nil when the daemon loads no pushed clips.
    /// Blocking (decoding): called off the cooperative pool.
    public func reloadCorpus() -> DaemonStatus.Corpus? {
        let (configuration, voices) = live.withLock { ($0.configuration, $0.voices) }
        guard let directory = configuration.corpusDirectory else { return nil }
        let current = Self.currentCorpusVersion(directory)
        if current == voices.corpus.directory, voices.corpus.problem == nil {
            return Self.corpusStatus(voices, directory: directory)
        }
        let options = Self.voicePackOptions(stateDirectory: configuration.stateDirectory)
        var corpus: Corpus
        do {
            defer { Self.releaseDecoders(logger) }
            corpus = try VoicePackLoader.loadCorpus(directory: directory, sampleRate: voices.sampleRate, options: options)
        } catch {
            corpus = voices.corpus.with(problem: error)
        }
        let updated = live.withLock { live -> VoiceLibrary in
            live.voices = live.voices.with(corpus: corpus)
            return live.voices
        }
        if let folder = options.preparedDirectory {
            // The file of the pushed clips replaced goes; the packs' stay.
            var keep: Set<String> = []
            for pack in updated.packs { if case let .mapped(file) = pack.storage { keep.insert(file) } }
            if case let .mapped(file) = updated.corpus.storage { keep.insert(file) }
            PreparedClips.prune(folder, keep: keep)
        }
        Self.logCorpus(updated.corpus, directory: directory, logger)
        return Self.corpusStatus(updated, directory: directory)
    }

    /// The version folder `current` names in a corpus folder (nil: none yet).
    static func currentCorpusVersion(_ directory: String) -> String? {
        guard let pointer = realpath(Path.join(directory, CorpusManifest.currentLink), nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// The `corpus` section of `status` (nil: no pushed clips are loaded at all).
    static func corpusStatus(_ voices: VoiceLibrary, directory: String?) -> DaemonStatus.Corpus? {
        guard let directory else { return nil }
        let corpus = voices.corpus
        return DaemonStatus.Corpus(
            directory: directory, version: corpus.version,
            clips: corpus.ids.map { id in
                DaemonStatus.Corpus.Clip(id: id, ms: (corpus.clips[id]?.count ?? 0) * 1000 / voices.sampleRate)
            },
            error: corpus.problem.map(ErrorInfo.init))
    }

    /// What was loaded, or why not (at error level: the fleet's clips cannot be spoken).
    static func logCorpus(_ corpus: Corpus, directory: String, _ logger: Logger) {
        var metadata: Logger.Metadata = [
            "dir": "\(directory)", "version": "\(corpus.version)", "clips": "\(corpus.clips.count)",
        ]
        if let problem = corpus.problem {
            metadata["error"] = "\(problem)"
            logger.error(
                "the pushed clips cannot be loaded; the ones loaded before stay (docs/voice-packs.md)",
                metadata: metadata)
        } else {
            logger.info("pushed clips loaded", metadata: metadata)
        }
    }
}
