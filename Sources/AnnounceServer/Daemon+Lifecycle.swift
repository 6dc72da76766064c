import AnnounceCore
import AnnounceSound
import AnnounceTelemetry
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging

/// Housekeeping, configuration reload (SIGHUP) and graceful stop (SIGTERM).
extension Daemon {
    /// Forgets history and order ids older than their retention (hourly).
    public func housekeeping() async {
        let current = live.withLock { $0.configuration }
        let windowMs = Int64(current.dedupWindowSeconds * 1000)
        let keepMs = Int64(max(current.historyRetentionSeconds, current.dedupWindowSeconds) * 1000)
        do {
            let purged = try await jobs.housekeeping(keepMs: keepMs, windowMs: windowMs)
            logger.debug("housekeeping", metadata: ["jobs": "\(purged.jobs)", "orders": "\(purged.orders)"])
        } catch {
            logger.error("housekeeping failed", metadata: ["error": "\(error)"])
        }
    }

    /// While the journal is kept in memory: tries its file again (on the job executor: no job is accepted
    /// meanwhile), and says so when it is back on disk.
    public func retryJournal() async {
        switch await jobs.returnToDisk() {
        case nil: return
        case .onDisk?:
            logger.notice(
                "the journal is on disk again, with what was accepted while it was kept in memory",
                metadata: ["event": .event(.journalOnDisk), "journal": "\(configuration.journalPath)"])
            jobs.events.statusChanged()
        case .waitingFor(let jobs)?:
            logger.info(
                "the journal's file can be used again; moving there once the jobs accepted in memory have finished",
                metadata: ["jobs": "\(jobs)"])
        case .unusable(let problem)?:
            logger.debug("the journal's file still cannot be used", metadata: ["error": "\(problem)"])
        }
    }

    /// Applies a new configuration (SIGHUP): voice packs, access lists, queue bound, ttls, window, limits, log
    /// level take effect at once; the queue is kept (queued jobs keep the pack they were composed with).
    /// Settings that need a restart are reported and left as they are. On any error nothing changes.
    @discardableResult
    public func reload(_ new: DaemonConfiguration) async throws(AnnounceError) -> [String] {
        let problems = new.problems()
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
        let policy = try AccessPolicy(configuration: new)
        var voices: VoiceLibrary
        do {
            defer { Self.releaseDecoders(logger) }
            // Decoding clips reads the disk: off Swift's cooperative pool.
            let options = Self.voicePackOptions(stateDirectory: configuration.stateDirectory)
            voices = try await offThePool { () throws(AnnounceError) in
                try VoicePackLoader.loadLibrary(
                    directory: new.voicesSearch.locate(), defaultLanguage: new.language, options: options,
                    corpus: new.corpusDirectory)
            }
        }
        // Pushed clips that cannot be loaded now leave the ones loaded before in force, as `corpus` does.
        let loaded = live.withLock { $0.voices }
        if let problem = voices.corpus.problem, loaded.sampleRate == voices.sampleRate {
            voices = voices.with(corpus: loaded.corpus.with(problem: problem))
        }
        var needRestart: [String] = []
        let old = configuration
        if new.socketPath != old.socketPath { needRestart.append("socket") }
        if new.socketMode != old.socketMode || new.socketGroup != old.socketGroup {
            needRestart.append("socket_mode/socket_group")
        }
        if new.device != old.device { needRestart.append("device") }
        if new.stateDirectory != old.stateDirectory { needRestart.append("state_dir") }
        if new.metricsListen != old.metricsListen { needRestart.append("metrics.listen") }
        if new.subscriberBuffer != old.subscriberBuffer { needRestart.append("limits.subscriber_buffer") }
        if new.periodMicroseconds != old.periodMicroseconds || new.periods != old.periods
            || new.leadInMs != old.leadInMs || new.pauseMs != old.pauseMs || new.keepDeviceOpen != old.keepDeviceOpen
            || new.endAheadMs != old.endAheadMs || new.tailMs != old.tailMs
        {
            needRestart.append("audio.period_us/periods/lead_in_ms/pause_ms/keep_open/end_ahead_ms/tail_ms")
        }
        var newAudio = new.audio
        newAudio.volumeThresholdDecibels = old.audio.volumeThresholdDecibels
        if newAudio != old.audio { needRestart.append("audio.mixer/mute_policy/duck_*/device_*") }
        if new.keys != old.keys { needRestart.append("keys") }  // the key reader starts with the daemon (ShopServices)
        var effective = new
        // What needs a restart stays as the daemon started.
        effective.socketPath = old.socketPath
        effective.socketMode = old.socketMode
        effective.socketGroup = old.socketGroup
        effective.device = old.device
        effective.stateDirectory = old.stateDirectory
        effective.metricsListen = old.metricsListen
        effective.subscriberBuffer = old.subscriberBuffer
        effective.audio = old.audio
        effective.audio.volumeThresholdDecibels = new.audio.volumeThresholdDecibels
        effective.keys = old.keys
        live.withLock {
            $0.configuration = effective
            $0.policy = policy
            $0.voices = voices
        }
        await jobs.setCapacity(new.queueCapacity)
        let override = live.withLock { $0.thresholdOverride }
        volumeGuard?.setThreshold(new.audio.threshold(percent: override ?? new.volumeThreshold))
        await jobs.setDedupWindow(Int64(new.dedupWindowSeconds * 1000))
        player.replacePack(voices.defaultPack)
        Self.logLoaded(voices, logger)
        if let corpus = new.corpusDirectory { Self.logCorpus(voices.corpus, directory: corpus, logger) }
        if let level = Logger.Level(rawValue: new.logLevel) { AnnounceLogHandler.level = level }
        logger.notice(
            "configuration reloaded",
            metadata: [
                "event": .event(.reloaded), "voices": "\(voices.languages.sorted().joined(separator: ","))",
                "capacity": "\(new.queueCapacity)", "queued": "\(jobs.queue.count)",
                "restart_needed_for": "\(needRestart.joined(separator: ","))",
            ])
        return needRestart
    }

    /// Graceful stop (SIGTERM): refuses new jobs, lets the jobs in hand play to their end (cut after
    /// `shutdown_timeout`), and keeps every job not heard — waiting, or cut — in the journal for the next start.
    public func stop() async {
        let waiting = await jobs.close()
        // A daemon that never started (it could not listen) has nothing playing to finish: it says nothing of it.
        if playerStarted.load(ordering: .acquiring) {
            logger.notice(
                "stopping: finishing the announcement playing; waiting jobs stay in the journal",
                metadata: [
                    "event": .event(.stopping), "waiting": "\(waiting.count)",
                    "playing": "\(player.playingJobID.map(String.init) ?? "none")",
                ])
        }
        let timeout = live.withLock { $0.configuration.shutdownTimeoutSeconds }
        let player = self.player
        let logger = self.logger
        let cutter = Task {
            try await Task.sleep(for: .seconds(timeout))
            if let playing = player.playingJobID {
                logger.warning(
                    "shutdown: cutting the announcement playing; it is spoken again at the next start",
                    metadata: ["job.id": "\(playing)"])
            }
            player.abort()
        }
        if playerStarted.load(ordering: .acquiring) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                SystemThread.detach {
                    player.join()
                    continuation.resume()
                }
            }
        }
        cutter.cancel()
        await jobs.flush(timeout: .seconds(5))
        let unrecorded = await jobs.unrecordedCount
        if unrecorded > 0 {
            logger.error(
                "stopping with job ends not recorded (the journal cannot be written); those jobs are spoken again at the next start",
                metadata: ["changes": "\(unrecorded)"])
        }
        await jobs.releaseWaiters()
        await jobs.events.waitUntilServed(timeout: .seconds(2))
    }
}
