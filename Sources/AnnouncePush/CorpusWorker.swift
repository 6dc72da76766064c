import AnnounceCore
import AnnounceDownload
import AnnounceSound
import Logging
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Runs the corpus pushes owed (``Receipts/owedCorpusTasks()``), one at a time and in order, on a thread of its own
/// (`push-corpus`), off the MQTT thread: a download may take a minute, and payments must not wait behind it. For each
/// task:
///
/// 1. **Done before?** A task whose outcome is noted (``CorpusStore/outcome(of:)``) ran before a restart that came
///    before its receipt: the receipt is made from what was noted. One whose id the version in force holds was
///    installed before a restart: only the daemon's load is left.
/// 2. **Run**: `put` downloads each clip into a staging folder (libcurl, https only; at most the size announced, and
///    then refused unless the size and SHA-256 are exactly those announced), checks every one with the daemon's own
///    loader (``VoicePackLoader/checkCorpusClips(_:directory:sampleRate:options:)``), and installs the new version
///    atomically (``CorpusStore``); `delete` and `delete_all` install a version without those clips. Nothing is
///    installed unless all of it can be: a task is whole or not at all.
/// 3. **The daemon loads it** (`corpus` on its socket), asked until it answers; one that cannot load it gets the
///    previous version back (`daemon_refused`).
/// 4. **Outcome noted, then the receipt**: the outcome on disk first, then the receipt replaces the owed entry
///    (``Receipts/corpusDone(_:receipt:)``), so a restart between the two makes the same receipt, never another.
///
/// A download that fails for the network is tried `attempts` times (1 s, 2 s … apart) before the task is `failed`;
/// what the push itself gets wrong (a size or hash that differs, a clip the loader refuses, ids that are not names,
/// too many clips) is `refused` at once. Stopping leaves the task owed: the next start runs it again from step 1.
public final class CorpusWorker: Sendable {
    let store: CorpusStore
    let rules: CorpusRules
    let receipts: Receipts
    let daemon: DaemonLink
    let logger: Logger
    /// Whether a deletion gets a receipt when it is done: on our channel yes; the Alibaba Cloud thing model answers
    /// `DeleteSpeech` when it comes and defines no event for it.
    let receiptForDeletes: Bool
    /// Told after a task has finished (the status, the platform's properties).
    let changed: @Sendable () -> Void
    private let thread = SerialThread(name: "push-corpus")
    /// How long a task waits before it is tried again when its outcome cannot be written.
    static let retrySeconds = 5.0
    /// Set by ``stop()``, which wakes a wait between two tries at once.
    private let stopping = ConditionLock(false)
    private let scheduled = Atomic<Bool>(false)

    public init(
        store: CorpusStore, rules: CorpusRules, receipts: Receipts, daemon: DaemonLink, logger: Logger,
        receiptForDeletes: Bool = true, changed: @escaping @Sendable () -> Void = {}
    ) {
        self.receiptForDeletes = receiptForDeletes
        self.store = store
        self.rules = rules
        self.receipts = receipts
        self.daemon = daemon
        self.logger = logger
        self.changed = changed
    }

    /// Starts on what is owed already, and on every task noted from now on.
    public func start() {
        receipts.onCorpusTask { [weak self] in self?.wake() }
        wake()
    }

    /// Lets the task being run end at its next step (it stays owed); a wait before its next try ends at once.
    public func stop() {
        stopping.withLock { $0 = true }
        stopping.broadcast()
    }

    var isStopping: Bool { stopping.withLock { $0 } }

    /// Waits `seconds` before a task's next try, less if ``stop()`` comes first.
    private func pause(seconds: Double) {
        stopping.withLock(when: { $0 }, until: Monotonic.nanos(afterSeconds: seconds)) { _ in }
    }

    private func wake() {
        guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        thread.submit { [self] in
            scheduled.store(false, ordering: .releasing)
            while !isStopping, let (seq, task, message) = receipts.owedCorpusTasks().first {
                guard var outcome = outcome(of: task) else { return }  // stopping: still owed
                outcome.message = outcome.message ?? message
                do throws(AnnounceError) {
                    try store.record(task.task, outcome)
                } catch {
                    // Its receipt waits (it is made only once the outcome is on disk); tried again shortly.
                    logger.error(
                        "cannot note a corpus push's outcome; its receipt waits", metadata: ["error": "\(error)"])
                    thread.after(seconds: Self.retrySeconds) { [weak self] in self?.wake() }
                    return
                }
                receipts.corpusDone(seq, receipt: receipt(task, outcome))
                log(task, outcome)
                changed()
            }
        }
    }

    /// The receipt of a task done (nil: a deletion the channel answered when it came).
    private func receipt(_ task: CorpusTask, _ outcome: CorpusStore.Outcome) -> Receipt? {
        if task.op != .put, !receiptForDeletes { return nil }
        return receipts.corpusReceiptFor(
            task: task.task, state: outcome.state, error: outcome.error, clips: outcome.clips)
    }

    private func log(_ task: CorpusTask, _ outcome: CorpusStore.Outcome) {
        var metadata: Logger.Metadata = [
            "task": "\(task.task)", "op": "\(task.op.rawValue)", "state": "\(outcome.state.rawValue)",
            "clips": "\(outcome.clips)",
        ]
        if let version = outcome.version { metadata["version"] = "\(version)" }
        guard let error = outcome.error else {
            logger.notice("corpus push done", metadata: metadata)
            return
        }
        metadata["error.code"] = "\(error)"
        metadata["detail"] = "\(outcome.detail ?? "")"
        logger.warning("corpus push not done", metadata: metadata)
    }

    // MARK: Running a task

    /// What became of `task`: noted before, or run now. Nil when stopping cut it short (it stays owed).
    func outcome(of task: CorpusTask) -> CorpusStore.Outcome? {
        if let noted = store.outcome(of: task.task) { return noted }
        let installed: CorpusManifest
        do throws(AnnounceError) {
            let current = try store.current()
            installed = current.tasks.contains(task.task) ? current : try run(task, on: current)
        } catch {
            // A try the stop cut short (no more retries, or a download that broke as the listener stopped) is not
            // the task's outcome: it stays owed, and the next start runs it again.
            if isStopping && Self.isTransient(error.code) { return nil }
            let clips = (try? store.current())?.clips.count ?? 0
            let state: Receipt.State = Self.isTransient(error.code) ? .failed : .refused
            return CorpusStore.Outcome(
                state: state, error: error.code.rawValue, detail: error.description, clips: clips)
        }
        return confirm(task, installed)
    }

    /// Errors of the terminal (now), not of the push: `failed`, and the service may push again.
    static func isTransient(_ code: AnnounceError.Code) -> Bool {
        [.downloadFailed, .noSpace, .internalError, .daemonRefused].contains(code)
    }

    /// Builds and installs the version the task makes of `current`; returns it.
    private func run(_ task: CorpusTask, on current: CorpusManifest) throws(AnnounceError) -> CorpusManifest {
        var next = current
        next.version = current.version + 1
        next.tasks = Array((current.tasks + [task.task]).suffix(CorpusManifest.taskMemory))
        let staging = try store.stage()
        do throws(AnnounceError) {
            switch task.op {
            case .put:
                var clips = task.clips
                if let list = task.list {
                    clips = try fetchList(list)
                    try rules.judge(CorpusTask(task: task.task, op: .put, clips: clips))
                }
                for clip in clips {
                    next.clips[clip.id] = CorpusManifest.Clip(
                        file: CorpusManifest.fileName(id: clip.id, format: clip.format), format: clip.format,
                        size: clip.size, sha256: clip.sha256, task: task.task)
                }
                guard next.clips.count <= rules.maximumClips else {
                    throw AnnounceError(
                        .tooMany, "\(next.clips.count) pushed clips with these; at most \(rules.maximumClips) are kept")
                }
                guard next.bytes <= rules.maximumBytes else {
                    throw AnnounceError(
                        .tooMany, "\(next.bytes) bytes of pushed clips with these; at most \(rules.maximumBytes)")
                }
                let needed = clips.reduce(0) { $0 + $1.size }
                guard store.freeBytes >= needed + 64 * 1024 else {
                    throw AnnounceError(
                        .noSpace, "\(needed) bytes to download, \(store.freeBytes) free in \(store.directory)")
                }
                for clip in clips { try download(clip, into: staging) }
                // libsndfile and its codecs are needed again only at the next push (the daemon does the same).
                defer { SoundFile.unloadLibrary() }
                do {
                    try VoicePackLoader.checkCorpusClips(
                        clips.compactMap { next.clips[$0.id] }, directory: staging)
                } catch {
                    throw AnnounceError(.badClip, error.message, cause: error.cause)
                }
            case .delete:
                for id in task.ids { next.clips[id] = nil }
            case .deleteAll:
                next.clips = [:]
            }
            try store.install(next, staging: staging)
        } catch {
            store.discard(staging: staging)
            throw error
        }
        return next
    }

    /// Downloads one clip into the staging folder: at most its size (one byte more tells a larger file), tried again
    /// for the network; refused unless its size and SHA-256 are those announced.
    private func download(_ clip: CorpusTask.Clip, into staging: String) throws(AnnounceError) {
        let path = Path.join(staging, CorpusManifest.fileName(id: clip.id, format: clip.format))
        var delay = 1.0
        var attempt = 1
        while true {
            do throws(AnnounceError) {
                let got = try Downloader.fetch(
                    clip.url, to: path, limits: rules.downloadLimits(maximumBytes: clip.size + 1))
                guard got.bytes == clip.size else {
                    throw AnnounceError(.badSize, "clip \"\(clip.id)\": \(got.bytes) bytes, not \(clip.size)")
                }
                if let expected = clip.sha256, got.sha256 != expected {
                    throw AnnounceError(.badHash, "clip \"\(clip.id)\": SHA-256 \(got.sha256), not \(expected)")
                }
                return
            } catch {
                unlink(path)
                let code = error.code == .tooLarge ? AnnounceError.Code.badSize : error.code
                guard code == .downloadFailed, attempt < rules.attempts, !isStopping else {
                    throw AnnounceError(code, "clip \"\(clip.id)\": \(error.message)", cause: error.cause)
                }
                logger.info(
                    "a clip's download failed; trying again",
                    metadata: ["clip": "\(clip.id)", "attempt": "\(attempt)", "error": "\(error)"])
                pause(seconds: delay)
                delay *= 2
                attempt += 1
            }
        }
    }

    /// The Alibaba Cloud platform's list of clips (`SpeechPost`'s `url`): `{"audios":[{"format","id","size","url"}]}`.
    private func fetchList(_ url: String) throws(AnnounceError) -> [CorpusTask.Clip] {
        let bytes = try Downloader.fetch(url, limits: rules.downloadLimits(maximumBytes: 256 * 1024))
        struct Audio: Decodable {
            var format: String
            var id: String
            var size: Int
            var url: String
        }
        struct List: Decodable { var audios: [Audio] }
        do {
            let list = try JSONDecoder().decode(List.self, from: Data(bytes))
            guard !list.audios.isEmpty else { throw AnnounceError(.malformed, "the list names no clip") }
            return list.audios.map { CorpusTask.Clip(id: $0.id, url: $0.url, format: $0.format, size: $0.size) }
        } catch let error as AnnounceError {
            throw error
        } catch {
            throw AnnounceError(.malformed, "the list of clips is not {\"audios\":[…]}", cause: "\(error)")
        }
    }

    /// Has the daemon load `installed`; waits for it as long as it is down (the task stays owed meanwhile). One that
    /// cannot load it gets the version before back. Nil when stopping cut the wait short.
    private func confirm(_ task: CorpusTask, _ installed: CorpusManifest) -> CorpusStore.Outcome? {
        var wait = Backoff(Backoff.Policy(initialSeconds: 0.2, maximumSeconds: 5))
        var logged = false
        while true {
            guard !isStopping else { return nil }
            let problem: ErrorInfo
            switch daemon.reloadCorpus() {
            case .loaded(let corpus) where corpus.version == installed.version && corpus.error == nil:
                store.prune()
                let done: Receipt.State = task.op == .put ? .installed : .deleted
                return CorpusStore.Outcome(state: done, clips: installed.clips.count, version: installed.version)
            case .loaded(let corpus):
                problem =
                    corpus.error
                    ?? ErrorInfo(
                        code: AnnounceError.Code.daemonRefused.rawValue,
                        message: "the daemon loads version \(corpus.version) from \(corpus.directory), not version "
                            + "\(installed.version) from \(store.directory)")
            case .refused(let error):
                problem = error
            case .unavailable(let reason):
                if !logged {
                    logger.warning(
                        "the daemon cannot load the pushed clips now; asking again", metadata: ["error": "\(reason)"])
                    logged = true
                }
                pause(seconds: wait.next())
                continue
            }
            // Not loadable by the daemon: the version before comes back, and the daemon is told.
            let restored = (try? store.rollback()) ?? false
            if restored { _ = daemon.reloadCorpus() }
            let clips = (try? store.current())?.clips.count ?? 0
            return CorpusStore.Outcome(
                state: .failed, error: AnnounceError.Code.daemonRefused.rawValue,
                detail: "\(problem.code): \(problem.message)", clips: clips)
        }
    }
}
