import AnnounceALSA
import AnnounceClock
import AnnounceCore
import AnnounceSound
import AnnounceJournal
import AnnounceTelemetry
import AnnounceVersion
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

/// The daemon's parts wired together: voice packs, the job lifecycle (queue, journal, de-duplication, what is
/// known of each job), the audio thread; composing jobs here, the other operations in Daemon+Operations.swift,
/// reload and stop in Daemon+Lifecycle.swift. Transport-free: ``RequestHandler`` maps request lines to these
/// methods. A job's life — accepted, queued, playing, spoken/failed/expired/cancelled — is ``JobLifecycle``'s.
public final class Daemon: Sendable {
    /// What a `say`/`prompt`/`text`/`replay` came to.
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
    let jobs: JobLifecycle
    let player: Player
    /// The alert volume and mute policy on the configured mixer element (nil: none configured).
    let volumeGuard: VolumeGuard?
    let metrics: DaemonMetrics
    let live: Mutex<Live>
    let playerStarted = Atomic<Bool>(false)
    let lastDeviceError = Mutex<AnnounceError?>(nil)
    let startedAt = Monotonic.nanos
    let recovered: (pending: Int, interrupted: Int)
    let clients = Atomic<Int>(0)
    /// The Prometheus endpoint over HTTP, if `metrics.listen` asks for one (started by ``DaemonRunner``).
    public let metricsEndpoint: MetricsEndpoint?

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
            directory: configuration.voicesSearch.locate(), defaultLanguage: configuration.language,
            options: Self.voicePackOptions(stateDirectory: configuration.stateDirectory),
            corpus: configuration.corpusDirectory)
        Self.releaseDecoders(logger)
        Self.logLoaded(voices, logger)
        if let corpus = configuration.corpusDirectory { Self.logCorpus(voices.corpus, directory: corpus, logger) }
        logger.debug("voice packs loaded", metadata: ["ms": "\(Double(Monotonic.nanos - started) / 1e6)"])
        // A state folder that cannot be used (read-only, another owner, not a file, full) does not silence the
        // speaker: the journal is kept in memory until the file can be used again (``retryJournal()``).
        let journal = try Journal.openOrKeepInMemory(path: configuration.journalPath)
        if let problem = journal.problem {
            logger.error(
                """
                \(problem.message): keeping the journal in memory — payments are spoken, but what is accepted is lost \
                if the daemon stops before the journal is back on disk (tried again every \(Self.journalRetrySeconds) s)
                """,
                metadata: [
                    "event": .event(.journalInMemory), "journal": "\(configuration.journalPath)",
                    "error": "\(problem.cause ?? problem.message)",
                ])
        }
        if let evidence = journal.recoveredFromCorruption {
            logger.error(
                """
                the journal was damaged: moved aside, starting with an empty journal (the jobs, order ids and \
                history in it are not known to this run; see docs/deployment.md)
                """,
                metadata: [
                    "event": .event(.journalDamaged), "journal": "\(configuration.journalPath)",
                    "moved_to": "\(evidence)",
                ])
        }
        let (mode, synchronous) = try journal.durabilitySettings()
        logger.info(
            "journal open",
            metadata: [
                "path": "\(configuration.journalPath)", "journal_mode": "\(mode)", "synchronous": "\(synchronous)",
            ])
        if !journal.hasReserve {
            logger.warning(
                "journal: no room for its reserve; a full disk would delay recording the jobs' ends",
                metadata: ["path": "\(configuration.journalPath).reserve"])
        }
        let override = try journal.setting(Self.thresholdSetting).flatMap(Int.init)
        live = Mutex(Live(configuration: configuration, policy: policy, voices: voices, thresholdOverride: override))
        var paymentTotals = Journal.PaymentTotals()
        do {
            paymentTotals = try journal.paymentTotals()
        } catch {
            logger.warning(
                "payment totals start from 0 (the journal's could not be read)", metadata: ["error": "\(error)"])
        }
        let metrics = DaemonMetrics(registry: metricsRegistry, paymentTotals: paymentTotals)
        self.metrics = metrics

        // Durations (the dedup window, retention, ttl) are measured on the boot clock within a boot, so a wall
        // clock set since (NTP after a boot without a battery-backed clock) purges and doubles nothing; the wall
        // times of this boot are corrected once the clock is trusted (docs/protocol.md, "Time").
        let now = ClockStamp.now(sync: configuration.clockSync)
        if now.trusted { try journal.record([.clockSet(now)]) }
        let reanchored = try journal.reanchorUntrustedOrders(now: now)
        if reanchored > 0 {
            logger.notice(
                "order ids stamped by an untrusted clock in an earlier boot are kept a whole window from now",
                metadata: ["orders": "\(reanchored)"])
        }
        if !now.trusted {
            logger.warning(
                "the wall clock is not synchronised; times recorded now are corrected once it is, durations do not depend on it",
                metadata: ["clock_sync": "\(configuration.clockSync)"])
        }
        // What the previous run left unfinished: spoken again below.
        let recovery = try journal.recover()
        let windowMs = Int64(configuration.dedupWindowSeconds * 1000)
        let keepMs = Int64(max(configuration.historyRetentionSeconds, configuration.dedupWindowSeconds) * 1000)
        let purged = try journal.purge(now: now, keepMs: keepMs, windowMs: windowMs)
        if purged.jobs + purged.orders > 0 {
            logger.info("journal purged", metadata: ["jobs": "\(purged.jobs)", "orders": "\(purged.orders)"])
        }

        let audio = try AudioSetup(
            configuration, threshold: configuration.audio.threshold(percent: override ?? configuration.volumeThreshold),
            logger: logger)
        volumeGuard = audio.volume
        let events = EventTarget()
        jobs = try JobLifecycle(
            journal: journal, capacity: configuration.queueCapacity, dedupWindowMs: windowMs, now: now,
            clockSync: configuration.clockSync, logger: logger, subscriberBuffer: configuration.subscriberBuffer,
            wakePlayer: { events.daemon?.player.wake() }
        ) { info, result in
            events.daemon?.ended(info, result: result)
        }
        metricsEndpoint = configuration.metricsListen.map { address in
            MetricsEndpoint(address: address, program: "announced", logger: logger) {
                events.daemon?.metricsText() ?? ""
            }
        }
        player = Player(
            queue: jobs.queue, pack: voices.defaultPack, sink: audio.sink, settings: audio.settings,
            volume: audio.volume, ducker: audio.ducker, logger: logger
        ) { event in
            // The audio thread's reports go to the job executor, in order, without waiting (JobLifecycle.post).
            guard let daemon = events.daemon else { return }
            daemon.jobs.post { jobs in daemon.handle(event, jobs) }
        }

        // Jobs the previous run accepted but never finished hearing are spoken now (subject to their ttl).
        recovered = (recovery.pending.count, recovery.interrupted)
        events.daemon = self
        for record in recovery.pending where record.attempts > 0 {
            logger.warning(
                "job was playing when the previous run ended; speaking it again in full",
                metadata: ["job.id": "\(record.jobID)", "text": "\(record.text)"])
        }
        try requeue(recovery.pending, voices: voices, now: now, journal: journal)
        if !recovery.pending.isEmpty {
            logger.notice("recovered unfinished jobs from the journal", metadata: ["jobs": "\(recovery.pending.count)"])
        }
    }

    static let thresholdSetting = "volume_threshold"

    /// How often a journal kept in memory tries its file again.
    public static let journalRetrySeconds = 5

    /// Starts the audio thread (once).
    public func start() {
        guard !playerStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        player.start()
        resumeRepeats()
        logger.notice(
            "ready",
            metadata: [
                "event": .event(.started), "version": "\(BuildInfo.version)", "commit": "\(BuildInfo.commit)",
                "device": "\(configuration.device)", "queued": "\(jobs.queue.count)",
            ])
    }

    // MARK: Accepting jobs

    /// Validates, composes, de-duplicates, journals and queues a job. Replies only after the journal commit.
    public func submit(_ request: JobRequest, replayOf: UInt64? = nil) async throws(AnnounceError) -> Submission {
        // Job timings (first sample, finished) and the ttl count from here: they include composing, the journal
        // commit and the wait for the acceptor, as the client sees them.
        let received = Monotonic.nanos
        let current = live.withLock { $0 }
        let (pack, announcement) = try compose(request, voices: current.voices)
        let ttlMs = request.ttlMs ?? current.configuration.defaultTTLMs(for: request.priority)
        // Stamped again by the acceptor, in turn with the de-duplication check (JobLifecycle.accept).
        let record = JobRecord(
            priority: request.priority, utterance: request.utterance, lang: pack.language, style: request.style,
            liang: request.liang, order: request.order, announcement: announcement, replayOf: replayOf,
            accepted: .wall(WallClock.nowMs), ttlMs: ttlMs.flatMap { $0 > 0 ? $0 : nil }, enforce: request.enforce)
        var job = Job(
            id: 0, utterance: request.utterance, order: request.order, announcement: announcement,
            acceptedAt: received, priority: request.priority,
            expiresAt: ttlMs.flatMap { $0 > 0 ? received + UInt64($0) * 1_000_000 : nil }, voice: pack)
        job.enforce = request.enforce
        let committing = Monotonic.nanos
        let submission = try await jobs.accept(job, record: record, dedupKey: request.order.map { ($0, request.utterance.dedupKind) })
        if case .accepted(let info) = submission {
            let journalNanos = Monotonic.nanos - committing
            metrics.jobAccepted(request.priority, journalNanos: journalNanos)
            metrics.queueDepth(waitingByPriority)
            jobs.events.statusChanged()
            var metadata = Self.jobMetadata(info, event: .accepted)
            metadata["text"] = "\(announcement.text)"
            metadata["journal_ms"] = "\(Double(journalNanos) / 1e6)"
            logger.info("job accepted", metadata: metadata)
        } else if case .duplicate(let original) = submission {
            // Not an error: a payment delivered twice (a retry, a second channel) is heard once.
            var metadata = Self.jobMetadata(original, event: .duplicate)
            metadata["order.id"] = request.order.map { "\($0)" }
            logger.notice("order already accepted; not announced again", metadata: metadata)
        }
        return submission
    }

    /// The voice pack a request is spoken with, and what it says composed with it (the pushed clips included).
    func compose(
        _ request: JobRequest, voices: VoiceLibrary? = nil
    ) throws(AnnounceError) -> (pack: VoicePack, announcement: Announcement) {
        let voices = voices ?? live.withLock { $0.voices }
        let pack = try voices.pack(language: request.lang)
        let options = request.readingOptions(defaultStyle: pack.composer.reader.defaultStyle)
        return (pack, try pack.composer.compose(request.utterance, options: options, corpus: voices.corpus.idSet))
    }

    /// Puts jobs recovered from the journal back in the queue, composed with today's voice packs.
    private func requeue(
        _ records: [JobRecord], voices: VoiceLibrary, now: ClockStamp, journal: Journal
    ) throws(AnnounceError) {
        var failed: [Journal.Outcome] = []
        var adopted: [(Job, JobInfo)] = []
        for record in records {
            do throws(AnnounceError) {
                guard let utterance = record.decodedUtterance else {
                    throw AnnounceError(.internalError, "the journal row of job \(record.jobID) cannot be read")
                }
                let pack = try voices.pack(language: record.lang)
                let options = JobRequest(
                    utterance: utterance, style: record.readingStyle, liang: record.liang, priority: .payment
                ).readingOptions(defaultStyle: pack.composer.reader.defaultStyle)
                let announcement = try pack.composer.compose(
                    utterance, options: options, corpus: voices.corpus.idSet)
                // Its age on the boot clock within this boot, else on the wall clock (ClockStamp.age).
                let monotonic = Monotonic.nanos
                let ageMs = record.accepted.age(at: now)
                let ageNanos = UInt64(max(0, ageMs)) * 1_000_000
                var expiresAt: UInt64?
                if let ttl = record.ttlMs {
                    let remaining = ttl - ageMs
                    expiresAt = remaining > 0 ? monotonic + UInt64(remaining) * 1_000_000 : 0
                }
                var job = Job(
                    id: record.jobID, utterance: utterance, order: record.orderId, announcement: announcement,
                    acceptedAt: monotonic > ageNanos ? monotonic - ageNanos : 0, priority: record.jobPriority,
                    expiresAt: expiresAt, voice: pack)
                job.attempts = record.attempts
                job.enforce = record.enforce == true
                var info = record.info
                info.state = .queued
                adopted.append((job, info))
            } catch {
                logger.error(
                    "recovered job cannot be spoken", metadata: ["job.id": "\(record.jobID)", "error": "\(error)"])
                failed.append(Journal.Outcome(id: record.jobID, state: .failed, at: now, error: error))
            }
        }
        try journal.finishNow(failed)
        let recovered = adopted
        try jobs.sync { (jobs) throws(AnnounceError) in
            for (job, info) in recovered { try jobs.adopt(job, info: info) }
        }
    }

    // MARK: Player events

    /// An audio thread's report, on the job executor.
    private func handle(_ event: Player.Event, _ jobs: isolated JobLifecycle) {
        switch event {
        case let .started(id, attempt):
            jobs.started(id, attempt: attempt)
        case let .finished(result):
            jobs.finished(result)
        case let .requeued(id):
            jobs.requeued(id)
            logger.info("notice cut by a payment; heard again after it", metadata: ["job.id": "\(id)"])
        case let .deviceError(error, job, decision):
            lastDeviceError.withLock { $0 = error }
            jobs.events.statusChanged()
            switch decision {
            case let .retry(afterMs):
                logger.error(
                    "audio device failed; retrying, every job not heard yet will be played again from its start",
                    metadata: [
                        "event": .event(.deviceFailed), "job.id": "\(job)", "error": "\(error)",
                        "error.code": "\(error.code.rawValue)", "retry_in_ms": "\(afterMs)",
                    ])
            case .giveUp:
                logger.error(
                    """
                    audio device missing: every job waiting is reported failed, and new jobs fail at once until it \
                    can be opened again (tried at each job, and every few seconds)
                    """,
                    metadata: [
                        "event": .event(.deviceMissing), "job.id": "\(job)", "error": "\(error)",
                        "error.code": "\(error.code.rawValue)", "gave_up": "true",
                    ])
            }
        case let .deviceMissing(error):
            lastDeviceError.withLock { $0 = error }
            jobs.events.statusChanged()
            logger.warning(
                """
                the audio device cannot be opened now; jobs are accepted and each tries it, and fails at once if it \
                is still away (it may appear later: a USB speaker plugged in, a sound server started)
                """,
                metadata: [
                    "event": .event(.deviceMissing), "device": "\(configuration.device)", "error": "\(error)",
                ])
        case let .deviceRecovered(failures):
            jobs.events.statusChanged()
            logger.notice(
                "audio device works again", metadata: ["event": .event(.deviceRecovered), "failures": "\(failures)"])
        }
    }

    /// A job's final state is on disk: count it and log it.
    private func ended(_ info: JobInfo, result: JobResult?) {
        metrics.jobFinished(info, firstSampleNanos: result?.firstSampleNanos)
        metrics.queueDepth(waitingByPriority)
        var metadata = Self.jobMetadata(info, event: EventKind.ended(info.state))
        if let firstSampleMs = info.firstSampleMs { metadata["first_sample_ms"] = "\(firstSampleMs)" }
        if let heardAt = result?.heardAt {
            // How long after its last sample left the device the job was on disk as spoken: a crash within this
            // window is the only way a whole announcement is heard twice (docs/protocol.md, "Durability").
            let windowNanos = Monotonic.nanos - heardAt
            metrics.heardRecorded(windowNanos: windowNanos)
            metadata["record_ms"] = "\(Double(windowNanos) / 1e6)"
        }
        if let attempts = info.attempts, attempts > 1 { metadata["attempts"] = "\(attempts)" }
        if let error = info.error {
            metadata["error"] = "\(error.code): \(error.message)"
            metadata["error.code"] = "\(error.code)"
            logger.warning("job finished", metadata: metadata)
        } else {
            logger.info("job finished", metadata: metadata)
        }
    }

    /// The voice packs are decoded (at start, at a reload): libsndfile and its codecs are not needed again until
    /// the next reload, and the daemon runs for months. Unloaded, they are off its resident memory.
    static func releaseDecoders(_ logger: Logger) {
        if let problem = SoundFile.unloadLibrary() {
            logger.warning("libsndfile stays loaded", metadata: ["error": "\(problem)"])
        }
    }

    /// What a pack that loaded lacks (a prompt's clip): the chime plays instead when it is asked for, so it is
    /// said at load, not first heard as a chime.
    /// How the daemon loads its voice packs: their prepared clips kept in `<state_dir>/prepared` (``PreparedClips``).
    static func voicePackOptions(stateDirectory: String) -> VoicePackLoader.Options {
        var options = VoicePackLoader.Options()
        options.preparedDirectory = Path.join(stateDirectory, "prepared")
        return options
    }

    /// Each pack loaded, where its clips are held, and its warnings.
    static func logLoaded(_ voices: VoiceLibrary, _ logger: Logger) {
        for pack in voices.packs {
            var metadata: Logger.Metadata = [
                "lang": "\(pack.language)", "pack": "\(pack.manifest.name)", "dir": "\(pack.directory)",
                "clips": "\(pack.clips.count)", "default": "\(pack.language == voices.defaultPack.language)",
            ]
            switch pack.storage {
            case .memory: break
            case let .mapped(file): metadata["prepared"] = "\(file)"
            case let .unsaved(reason):
                logger.warning(
                    """
                    voice pack "\(pack.manifest.name)": its prepared clips cannot be saved, so they stay in memory \
                    and are decoded again at every start
                    """,
                    metadata: ["lang": "\(pack.language)", "reason": "\(reason)"])
            }
            logger.info("voice pack loaded", metadata: metadata)
            for warning in pack.warnings {
                logger.warning(
                    "voice pack \"\(pack.manifest.name)\": \(warning); the chime plays instead (add the clip, docs/voice-packs.md)",
                    metadata: ["lang": "\(pack.language)", "pack": "\(pack.manifest.name)", "dir": "\(pack.directory)"])
            }
        }
    }

    /// A job's fields in a log entry (journal fields `JOB_ID`, `ORDER_ID`, `CHANNEL`, `AMOUNT_FEN`, `STATE` …),
    /// and the kind of event (`MESSAGE_ID`).
    static func jobMetadata(_ info: JobInfo, event: EventKind) -> Logger.Metadata {
        var metadata: Logger.Metadata = [
            "event": .event(event), "job.id": "\(info.id)", "state": "\(info.state.rawValue)",
        ]
        if let priority = info.priority { metadata["priority"] = "\(priority.rawValue)" }
        if let order = info.order { metadata["order.id"] = "\(order)" }
        if let channel = info.channel { metadata["channel"] = "\(channel)" }
        if let amount = info.amount, let parsed = try? Amount(parsing: amount) {
            metadata["amount_fen"] = "\(parsed.fen)"
        }
        if info.refund == true { metadata["refund"] = "true" }
        if let prompt = info.prompt { metadata["prompt"] = "\(prompt)" }
        if let replayOf = info.replayOf { metadata["replay_of"] = "\(replayOf)" }
        return metadata
    }
}

/// Where the audio thread's and the lifecycle's events go. Weak, so a daemon that is let go (tests) is freed;
/// set once in `Daemon.init`, before the audio thread starts, and never changed.
private final class EventTarget: @unchecked Sendable {
    weak var daemon: Daemon?
}
