import AnnounceALSA
import AnnounceCore
import AnnounceSound
import AnnounceJournal
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Prometheus
import Synchronization

/// The daemon's parts wired together: voice packs, journal, queue, audio thread, job book; accepting jobs and
/// the audio thread's events here, the other operations in Daemon+Operations.swift, reload and stop in
/// Daemon+Lifecycle.swift. Transport-free: ``RequestHandler`` maps request lines to these methods.
///
/// Every change to the set of jobs (accept, cancel, replay, shutdown) runs on one serial *acceptor* queue, so
/// the de-duplication check, the bound check, the journal commit and the enqueue happen as one step and a job
/// is in the queue in the order the journal numbered it. The audio thread only takes from the queue.
public final class Daemon: Sendable {
    /// What a `say`/`prompt`/`replay` came to.
    public enum Submission: Sendable, Equatable {
        case accepted(JobInfo)
        /// The order id was accepted before (within the window): the original job, as it is now.
        case duplicate(JobInfo)
    }

    /// Settings that a reload (SIGHUP) may change while the daemon runs.
    struct Live: Sendable {
        var configuration: DaemonConfiguration
        var policy: AccessPolicy
        var voices: VoiceLibrary
        /// `volume` set at run time (kept in the journal); overrides the configured threshold.
        var thresholdOverride: Int?
    }

    public let configuration: DaemonConfiguration
    let logger: Logger
    let queue: JobQueue<Job>
    let book = JobBook()
    let player: Player
    /// The alert volume and mute policy on the configured mixer element (nil: none configured).
    let volumeGuard: VolumeGuard?
    let journal: Journal
    let metrics: DaemonMetrics
    let live: Mutex<Live>
    let dedup: Mutex<DedupWindow>
    let acceptor = DispatchQueue(label: "announce.acceptor")
    let stopping = Atomic<Bool>(false)
    let playerStarted = Atomic<Bool>(false)
    /// Jobs cut by a shutdown that ran out of time: recorded `failed`/`interrupted`, not `cancelled`.
    let cutByShutdown = Mutex<Set<UInt64>>([])
    let lastDeviceError = Mutex<AnnounceError?>(nil)
    let startedAt = Monotonic.nanos
    let recovered: (pending: Int, interrupted: Int)
    let clients = Atomic<Int>(0)

    public init(
        configuration: DaemonConfiguration, logger: Logger, metricsRegistry: PrometheusCollectorRegistry? = nil
    ) throws(AnnounceError) {
        self.configuration = configuration
        self.logger = logger
        let problems = configuration.problems()
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
        let policy = try AccessPolicy(configuration: configuration)
        let started = Monotonic.nanos
        let voices = try VoicePackLoader.loadLibrary(
            directory: configuration.voicesDirectory, defaultLanguage: configuration.language)
        for pack in voices.packs {
            logger.info(
                "voice pack loaded",
                metadata: [
                    "lang": "\(pack.language)", "pack": "\(pack.manifest.name)", "dir": "\(pack.directory)",
                    "clips": "\(pack.clips.count)", "default": "\(pack.language == voices.defaultPack.language)",
                ])
        }
        logger.debug("voice packs loaded", metadata: ["ms": "\(Double(Monotonic.nanos - started) / 1e6)"])
        journal = try Journal(path: configuration.journalPath)
        let (mode, synchronous) = try journal.durabilitySettings()
        logger.info(
            "journal open",
            metadata: [
                "path": "\(configuration.journalPath)", "journal_mode": "\(mode)", "synchronous": "\(synchronous)",
            ])
        let override = try journal.setting(Self.thresholdSetting).flatMap(Int.init)
        live = Mutex(Live(configuration: configuration, policy: policy, voices: voices, thresholdOverride: override))
        metrics = DaemonMetrics(registry: metricsRegistry)

        let nowMs = WallClock.nowMs
        let windowMs = Int64(configuration.dedupWindowSeconds * 1000)
        dedup = Mutex(DedupWindow(windowMs: windowMs, entries: try journal.dedupEntries(sinceMs: nowMs - windowMs)))
        let keepMs = Int64(max(configuration.historyRetentionSeconds, configuration.dedupWindowSeconds) * 1000)
        let purged = try journal.purge(jobsBeforeMs: nowMs - keepMs, ordersBeforeMs: nowMs - windowMs)
        if purged.jobs + purged.orders > 0 {
            logger.info("journal purged", metadata: ["jobs": "\(purged.jobs)", "orders": "\(purged.orders)"])
        }

        queue = JobQueue(capacity: configuration.queueCapacity)
        let audio = try AudioSetup(
            configuration, threshold: configuration.audio.threshold(percent: override ?? configuration.volumeThreshold),
            logger: logger)
        volumeGuard = audio.volume
        let events = EventTarget()
        player = Player(
            queue: queue, pack: voices.defaultPack, sink: audio.sink, settings: audio.settings, volume: audio.volume,
            ducker: audio.ducker, logger: logger
        ) { event in
            events.daemon?.handle(event)
        }

        // Jobs the previous run accepted but never spoke are spoken now (subject to their ttl).
        let recovery = try journal.recover(nowMs: nowMs)
        recovered = (recovery.pending.count, recovery.interrupted.count)
        events.daemon = self
        queue.onDiscard { [weak self] job, reason in
            guard let self, reason == .expired else { return }
            self.finishJob(
                JobResult(id: job.id, state: .expired, error: AnnounceError(.expired, "its ttl passed before its turn"))
            )
        }
        for record in recovery.interrupted {
            logger.warning(
                "job interrupted by the previous run's end; not spoken again",
                metadata: ["job.id": "\(record.jobID)", "text": "\(record.text)"])
        }
        try requeue(recovery.pending, voices: voices, nowMs: nowMs)
        if !recovery.pending.isEmpty {
            logger.notice("recovered unspoken jobs from the journal", metadata: ["jobs": "\(recovery.pending.count)"])
        }
    }

    static let thresholdSetting = "volume_threshold"

    /// Starts the audio thread (once).
    public func start() {
        guard !playerStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        player.start()
    }

    // MARK: Accepting jobs

    /// Validates, composes, de-duplicates, journals and queues a job. Replies only after the journal commit.
    public func submit(_ request: JobRequest, replayOf: UInt64? = nil) async throws(AnnounceError) -> Submission {
        // Job timings (first sample, finished) and the ttl count from here: they include composing, the journal
        // commit and the wait for the acceptor, as the client sees them.
        let received = Monotonic.nanos
        let current = live.withLock { $0 }
        let pack = try current.voices.pack(language: request.lang)
        let options = request.readingOptions(defaultStyle: pack.composer.reader.defaultStyle)
        let announcement = try pack.composer.compose(request.utterance, options: options)
        let ttlMs = request.ttlMs ?? current.configuration.defaultTTLMs(for: request.priority)
        return try await onAcceptor { () throws(AnnounceError) -> Submission in
            guard !self.stopping.load(ordering: .acquiring) else {
                throw AnnounceError(.shuttingDown, "the daemon is shutting down; try again after it restarts")
            }
            let nowMs = WallClock.nowMs
            if let order = request.order, let entry = self.dedup.withLock({ $0.lookup(order, nowMs: nowMs) }) {
                return .duplicate(try self.jobInfo(entry.jobID) ?? JobInfo(id: entry.jobID, state: .spoken))
            }
            guard self.queue.hasRoom(for: request.priority) else {
                throw AnnounceError(
                    .queueFull,
                    "the queue is full (\(self.queue.capacity) jobs waiting); nothing was dropped, try again")
            }
            let committing = Monotonic.nanos
            let record = try self.journal.insert(
                JobRecord(
                    priority: request.priority, utterance: request.utterance, lang: pack.language,
                    style: request.style, liang: request.liang, order: request.order, announcement: announcement,
                    replayOf: replayOf, acceptedAtMs: nowMs, ttlMs: ttlMs.flatMap { $0 > 0 ? $0 : nil }))
            let journalNanos = Monotonic.nanos - committing
            if let order = request.order {
                self.dedup.withLock {
                    $0.insert(DedupWindow.Entry(order: order, jobID: record.jobID, acceptedAtMs: nowMs))
                }
            }
            let job = Job(
                id: record.jobID, utterance: request.utterance, order: request.order, announcement: announcement,
                acceptedAt: received, priority: request.priority,
                expiresAt: ttlMs.flatMap { $0 > 0 ? received + UInt64($0) * 1_000_000 : nil }, voice: pack)
            var info = record.info
            info.position = self.position(for: request.priority)
            self.book.add(info)
            // Cannot fail: only this queue adds jobs, it checked the room, and shutdown closes through it too.
            let replaced = try self.queue.enqueue(job)
            self.metrics.jobAccepted(request.priority, journalNanos: journalNanos)
            self.metrics.queueDepth(self.queue.count)
            var metadata: Logger.Metadata = [
                "job.id": "\(job.id)", "text": "\(announcement.text)", "priority": "\(request.priority.rawValue)",
                "journal_ms": "\(Double(journalNanos) / 1e6)",
            ]
            if let order = request.order { metadata["order.id"] = "\(order)" }
            if let replayOf { metadata["replay_of"] = "\(replayOf)" }
            self.logger.info("job accepted", metadata: metadata)
            if let replaced {
                self.finishJob(
                    JobResult(
                        id: replaced.id, state: .cancelled,
                        error: AnnounceError(.superseded, "replaced by status prompt \(job.id) (last one wins)")))
            }
            return .accepted(info)
        }
    }

    /// Jobs ahead of a new job of `priority` in play order.
    private func position(for priority: JobPriority) -> Int {
        let waiting = queue.snapshot
        switch priority {
        case .urgent: return waiting.filter { $0.priority == .urgent }.count
        case .payment: return waiting.filter { $0.priority != .status }.count
        case .status: return waiting.filter { $0.priority != .status }.count
        }
    }

    /// Puts jobs recovered from the journal back in the queue, composed with today's voice packs.
    private func requeue(_ records: [JobRecord], voices: VoiceLibrary, nowMs: Int64) throws(AnnounceError) {
        var failed: [Journal.Outcome] = []
        for record in records {
            do throws(AnnounceError) {
                guard let utterance = record.decodedUtterance else {
                    throw AnnounceError(.internalError, "the journal row of job \(record.jobID) cannot be read")
                }
                let pack = try voices.pack(language: record.lang)
                let options = JobRequest(
                    utterance: utterance, style: record.readingStyle, liang: record.liang, priority: .payment
                ).readingOptions(defaultStyle: pack.composer.reader.defaultStyle)
                let announcement = try pack.composer.compose(utterance, options: options)
                let now = Monotonic.nanos
                let ageNanos = UInt64(max(0, nowMs - record.acceptedAt)) * 1_000_000
                var expiresAt: UInt64?
                if let ttl = record.ttlMs {
                    let remaining = record.acceptedAt + ttl - nowMs
                    expiresAt = remaining > 0 ? now + UInt64(remaining) * 1_000_000 : 0
                }
                let job = Job(
                    id: record.jobID, utterance: utterance, order: record.orderId, announcement: announcement,
                    acceptedAt: now > ageNanos ? now - ageNanos : 0, priority: record.jobPriority,
                    expiresAt: expiresAt, voice: pack)
                book.add(record.info)
                if let replaced = try queue.enqueue(job, ignoringBound: true) {
                    failed.append(
                        Journal.Outcome(
                            id: replaced.id, state: .cancelled, atMs: nowMs,
                            error: AnnounceError(.superseded, "replaced by status prompt \(job.id) (last one wins)")))
                    book.finish(
                        replaced.id, state: .cancelled, error: nil, firstSampleMs: nil, finishedMs: nil, atMs: nowMs)
                }
            } catch {
                logger.error(
                    "recovered job cannot be spoken", metadata: ["job.id": "\(record.jobID)", "error": "\(error)"])
                failed.append(Journal.Outcome(id: record.jobID, state: .failed, atMs: nowMs, error: error))
            }
        }
        try journal.finishNow(failed)
    }

    // MARK: Player events

    private func handle(_ event: Player.Event) {
        switch event {
        case let .started(id, _):
            let nowMs = WallClock.nowMs
            journal.markStarted(id, atMs: nowMs)
            book.markPlaying(id, atMs: nowMs)
        case let .finished(result):
            var result = result
            if result.state == .cancelled, cutByShutdown.withLock({ $0.remove(result.id) != nil }) {
                result.state = .failed
                result.error = AnnounceError(.interrupted, "cut by shutdown after limits.shutdown_timeout")
            } else if result.state == .cancelled && result.error == nil {
                result.error = AnnounceError(.cancelled, "cancelled by a client while playing")
            }
            finishJob(result)
            metrics.queueDepth(queue.count)
        case let .deviceError(error, job, decision):
            lastDeviceError.withLock { $0 = error }
            switch decision {
            case let .retry(afterMs):
                logger.error(
                    "audio device failed; retrying, the job will be replayed from its start",
                    metadata: ["job.id": "\(job)", "error": "\(error)", "retry_in_ms": "\(afterMs)"])
            case .giveUp:
                logger.error(
                    "audio device failed for too long; the job is reported failed",
                    metadata: ["job.id": "\(job)", "error": "\(error)"])
            }
        case let .deviceRecovered(failures):
            logger.notice("audio device works again", metadata: ["failures": "\(failures)"])
        }
    }

    /// Journals a job's end (in the background, in order), then tells its waiters.
    func finishJob(_ result: JobResult) {
        let nowMs = WallClock.nowMs
        let firstSampleMs = result.firstSampleNanos.map { Double($0) / 1e6 }
        let finishedMs = result.finishedNanos.map { Double($0) / 1e6 }
        let outcome = Journal.Outcome(
            id: result.id, state: result.state, atMs: nowMs, firstSampleMs: firstSampleMs, finishedMs: finishedMs,
            error: result.error)
        journal.finish(outcome) { [self] error in
            if let error {
                logger.error(
                    "journal: cannot record a job's end", metadata: ["job.id": "\(result.id)", "error": "\(error)"])
            }
            book.finish(
                result.id, state: result.state, error: result.error, firstSampleMs: firstSampleMs,
                finishedMs: finishedMs, atMs: nowMs)
            metrics.jobFinished(result.state, firstSampleNanos: result.firstSampleNanos)
            var metadata: Logger.Metadata = ["job.id": "\(result.id)", "state": "\(result.state.rawValue)"]
            if let firstSampleMs { metadata["first_sample_ms"] = "\(firstSampleMs)" }
            if let error = result.error {
                metadata["error"] = "\(error)"
                logger.warning("job finished", metadata: metadata)
            } else {
                logger.info("job finished", metadata: metadata)
            }
        }
    }

    /// Runs `body` on the acceptor queue.
    func onAcceptor<T: Sendable>(
        _ body: @escaping @Sendable () throws(AnnounceError) -> T
    ) async throws(AnnounceError) -> T {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<T, AnnounceError>, Never>) in
            acceptor.async {
                do throws(AnnounceError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    func onAcceptor<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
            acceptor.async { continuation.resume(returning: body()) }
        }
    }
}

/// Where the audio thread's events go. Weak, so a daemon that is let go (tests) is freed; set once in
/// `Daemon.init`, before the audio thread starts, and never changed.
private final class EventTarget: @unchecked Sendable {
    weak var daemon: Daemon?
}
