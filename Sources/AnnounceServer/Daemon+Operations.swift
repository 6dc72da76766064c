import AnnounceCore
import AnnounceJournal
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

/// The operations of the protocol other than accepting jobs: cancel, replay, history, queue, status, volume.
extension Daemon {

    /// Cancels one waiting or playing job, or all of them. Returns the cancelled jobs in their final state.
    public func cancel(job id: UInt64?) async throws(AnnounceError) -> [JobInfo] {
        let cancelled = try await jobs.cancel(id)
        for info in cancelled where info.state == .cancelled {
            logger.info("job cancelled", metadata: ["job.id": "\(info.id)"])
        }
        metrics.queueDepth(waitingByPriority)
        return cancelled
    }

    /// Speaks again a job from the journal (the last spoken payment, or combination, if `id` is nil), as a new job;
    /// with `order`, once per order id (a redelivered "replay last" is not heard twice).
    public func replay(
        job id: UInt64?, kind: ReplayKind = .payment, order: String? = nil, priority: JobPriority, ttlMs: Int64?,
        wait: Bool
    ) async throws(AnnounceError) -> Submission {
        guard let source = try await jobs.record(of: id, kind: kind) else {
            if let id { throw AnnounceError(.notFound, "no job \(id) in the history") }
            switch kind {
            case .payment: throw AnnounceError(.notFound, "nothing has been announced yet")
            case .combination: throw AnnounceError(.notFound, "no combination broadcast has been spoken yet")
            }
        }
        guard let utterance = source.decodedUtterance else {
            throw AnnounceError(.internalError, "the journal row of job \(source.jobID) cannot be read")
        }
        let request = JobRequest(
            utterance: utterance, lang: source.lang, style: source.readingStyle, liang: source.liang, order: order,
            priority: priority, ttlMs: ttlMs, wait: wait, enforce: source.enforce == true)
        return try await submit(request, replayOf: source.jobID)
    }

    /// The most recent jobs, newest first (from the journal; live ones as they are now).
    public func history(limit: Int) async throws(AnnounceError) -> [JobInfo] {
        try await jobs.history(limit: limit)
    }

    /// The job playing, then the waiting ones in play order, with their positions.
    public func queueListing() async -> [JobInfo] {
        let playing = player.playingJobID
        let waiting = jobs.queue.snapshot.map(\.id)
        return await jobs.listing(playing: playing, waiting: waiting)
    }

    /// Waits for a job's final state (or the shutdown).
    func waitUntilFinished(_ id: UInt64) async -> JobInfo? {
        await jobs.waitUntilFinished(id)
    }

    public func status(peer: PeerCredentials?) async -> DaemonStatus {
        let current = live.withLock { $0 }
        let waiting = jobs.queue.snapshot
        var byPriority: [String: Int] = [:]
        for priority in JobPriority.allCases {
            byPriority[priority.rawValue] = waiting.filter { $0.priority == priority }.count
        }
        let voices = current.voices.packs.sorted { $0.language < $1.language }.map { pack in
            DaemonStatus.Voice(
                lang: pack.language, name: pack.manifest.name, sampleRate: pack.sampleRate, clips: pack.clips.count,
                isDefault: pack.language == current.voices.defaultPack.language)
        }
        let recovered = self.recovered
        let (journal, unfinished, closed, lastPayment, lastHeard) = await jobs.statusParts(recovered: recovered)
        let repeats = await jobs.runningRepeats
        // The mixer's part may wait on a sound server: off Swift's cooperative pool.
        let audio = (try? await offThePool { self.audioStatus() }) ?? AudioStatus(device: current.configuration.device)
        var status = DaemonStatus(
            state: closed ? "stopping" : "running", v: ProtocolVersion.current,
            pid: getpid(), uptimeSeconds: Double(Monotonic.nanos - startedAt) / 1e9,
            socket: current.configuration.socketPath, clients: clients.load(ordering: .relaxed),
            queue: DaemonStatus.Queue(
                waiting: waiting.count, capacity: jobs.queue.capacity, byPriority: byPriority,
                playing: player.playingJobID, unfinished: unfinished),
            voices: voices,
            journal: journal,
            totals: metrics.currentTotals, audio: audio,
            peer: peer.map {
                DaemonStatus.Peer(pid: $0.pid, uid: $0.uid, gid: $0.gid, access: current.policy.access(for: $0))
            })
        status.version = BuildInfo.version
        status.commit = BuildInfo.commit
        status.lastPayment = lastPayment
        if let endpoint = metricsEndpoint {
            var metrics = DaemonStatus.Metrics(listen: "\(endpoint.address)")
            switch endpoint.state {
            case .serving(let address): metrics.serving = "\(address)"
            case .unavailable(let reason): metrics.error = reason
            case .starting, .stopped: break
            }
            status.metrics = metrics
        }
        status.lastHeard = lastHeard
        status.repeats = repeats.isEmpty ? nil : repeats
        status.corpus = Self.corpusStatus(current.voices, directory: current.configuration.corpusDirectory)
        return status
    }

    /// The audio section of `status` and the reply of `volume`. The daemon knows the device and the threshold;
    /// the audio side (mixer, ducking, recoveries) adds what it knows here.
    public func audioStatus() -> AudioStatus {
        let current = live.withLock { $0 }
        let threshold = current.thresholdOverride ?? current.configuration.volumeThreshold
        let configured = threshold != nil || current.configuration.audio.volumeThresholdDecibels != nil
        let source = current.thresholdOverride != nil ? "set" : (configured ? "config" : nil)
        var status = AudioStatus(
            device: current.configuration.device, threshold: threshold, thresholdSource: source,
            lastError: lastDeviceError.withLock { $0 }.map(ErrorInfo.init))
        status.fill(from: player.status())
        return status
    }

    /// The volume threshold in force: a `volume` set, else the configuration.
    public var volumeThreshold: Int? {
        live.withLock { $0.thresholdOverride ?? $0.configuration.volumeThreshold }
    }

    /// Sets (or with nil, resets to the configured value) the volume threshold, durably.
    public func setVolumeThreshold(_ percent: Int?) async throws(AnnounceError) -> AudioStatus {
        if let percent, !(0...100).contains(percent) {
            throw AnnounceError(.badRequest, "threshold must be a percentage 0…100")
        }
        try await jobs.setSetting(Self.thresholdSetting, percent.map(String.init))
        live.withLock { $0.thresholdOverride = percent }
        let configured = live.withLock { $0.configuration }
        volumeGuard?.setThreshold(configured.audio.threshold(percent: percent ?? configured.volumeThreshold))
        jobs.events.statusChanged()
        logger.notice("volume threshold set", metadata: ["threshold": "\(percent.map(String.init) ?? "config")"])
        return audioStatus()
    }

    /// Waiting jobs per priority class, now.
    var waitingByPriority: [JobPriority: Int] {
        var counts: [JobPriority: Int] = [:]
        for job in jobs.queue.snapshot { counts[job.priority, default: 0] += 1 }
        return counts
    }

    /// Every metric in the Prometheus text format, brought up to date (the queue, the audio engine's counters).
    /// Reads counters and snapshots only — no device, mixer or journal I/O — so a scrape on the metrics thread
    /// never waits for the audio thread, nor holds it up.
    public func metricsText() -> String {
        metrics.queueDepth(waitingByPriority)
        return metrics.exposition(health: player.health(), uptimeSeconds: Double(Monotonic.nanos - startedAt) / 1e9)
    }

    public func access(for peer: PeerCredentials) -> Access { live.withLock { $0.policy.access(for: peer) } }

    var limits: DaemonConfiguration { live.withLock { $0.configuration } }
}
