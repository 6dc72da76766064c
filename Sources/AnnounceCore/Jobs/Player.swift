#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// The audio thread: takes jobs from the queue one at a time, renders them with the voice pack and writes them
/// to the sink, and tells when each one has been *heard*.
///
/// - A job is heard when its last sample has left the device — the sink's delay says the device holds nothing
///   of it any more — not when it was written. Only then is it reported `spoken` (docs/protocol.md,
///   "Durability": a job not heard in full is spoken again). The player checks the delay after every period it
///   writes and while the last job plays out, so a job is confirmed within a period of its end.
/// - A burst (jobs until the queue runs empty and everything was heard) starts with `leadInMs` of silence on
///   a freshly started stream (an amplifier or sound server that wakes on the stream does not clip the first
///   syllable), and has `pauseMs` of silence between two announcements — written to the same running stream,
///   so nothing underruns — so that two payments are heard as two. Never a pause before the first: only a job
///   that starts less than `pauseMs` after the last sound stopped waits out the rest of the pause.
/// - A burst starts by asking the `VolumeGuard` (threshold, mute policy) and ducking other audio; both are put
///   back after the burst, not between its jobs. The device drains — and, unless `keepOpen`, is released —
///   only when the queue has run empty and everything was heard. Before that the last announcement is followed
///   by two periods of silence, as aplay pads its last period: a device that moves audio in whole periods (dmix
///   over a card, snd-aloop) stops only after the period holding the announcement's last samples went out whole.
///   The tail counts toward the pause if another job comes.
/// - A cancel (flagged in the queue by another thread, then `wake()`) stops within a period; buffered audio is
///   dropped, and any other job whose end was still in the buffer is played again from its start.
/// - A device failure closes the device and retries with backoff (`DeviceRecovery`), replaying from its start
///   every job not yet heard; the queue is kept. After `giveUpAfterMs` the job in hand and every job waiting are
///   reported failed together, and the device is `missing`: each later job tries it once and fails at once if it
///   is still away, and it is probed every few seconds until it opens (also from the start, if it is away then).
/// - `abort()` (a shutdown that ran out of time) stops at once and leaves the jobs in hand unfinished: not
///   heard, so not reported — the journal still has them, and the next start speaks them.
public final class Player: @unchecked Sendable {
    public struct Settings: Sendable, Equatable {
        /// Silence before the first announcement of a burst: what a freshly started stream loses (a sound server
        /// drops up to ~14 ms of it, an amplifier powered up with the stream its first tens of ms) is silence, not
        /// the first syllable. docs/audio.md has the measurements behind the default.
        public var leadInMs = 50
        /// Silence between two announcements of a burst, so that they are heard as two.
        public var pauseMs = 500
        /// Keep the PCM open between bursts (lowest latency) instead of releasing the device.
        public var keepOpen = false
        /// How long the device, opened while a job is being journaled (``JobQueue/hint()``), waits for that job
        /// before it is released again: the job was refused after all (the journal failed), or a cancel took it.
        public var openAheadMs = 2000
        /// Retry and give-up times for a failing device.
        public var recovery = RecoverySettings()
        /// Open the device once when the audio thread starts, so that one that is away is known `missing` from the
        /// start (the daemon: `status` and the fleet must say so before a payment finds out).
        public var probeAtStart = false
        /// CPU priority (nice value) the audio thread asks for, so that a busy CPU does not hold it up long
        /// enough for the buffer to run dry; nil: the process's own. Refused unless permitted (root,
        /// CAP_SYS_NICE, or RLIMIT_NICE — systemd `LimitNICE=`), which is logged and changes nothing else.
        public var threadNice: Int?
        /// On a device whose ring other clients share (dmix, ``SinkStatus/sharedRing``), how far ahead of the speaker
        /// a job's end may be written: from the point where the rest of a job fits the buffer until its end has
        /// played, the ring is kept at most this full. A daemon killed with a job's end written and not yet played
        /// leaves it to play on while another client (music) holds the card — heard whole, then spoken again after
        /// the restart, since it was never recorded heard: this bounds that window (docs/protocol.md,
        /// "Durability"). A device whose period is longer keeps a period and a third of this ahead (its position may
        /// move a period at a time). Nil, or as long as the buffer: the whole buffer, as on every other device.
        public var endAheadMs: Int? = 60
        /// Silence after the last announcement of a burst before the device drains and is released, at least two
        /// periods (see the type's documentation). A sound server whose graph holds more than its ALSA plugin's
        /// delay reports, and pauses its sink the moment the last stream ends, drops what it still held: PipeWire
        /// with WirePlumber's role loopbacks (the loopback's quantum and the sink's headroom: up to ~190 ms in the
        /// VM) — a longer tail makes what it drops silence (docs/audio.md, "PipeWire").
        public var tailMs = 0
        public init() {}
    }

    public enum Event: Sendable {
        /// The job's first sample was handed to the device: `attempt` 1, or a replay from its start after a
        /// device failure or a cancel of another job.
        case started(id: UInt64, attempt: Int)
        /// How the job ended: `spoken` once its last sample has left the device, else failed or cancelled.
        case finished(JobResult)
        /// A notice cut by a payment or urgent job (``JobPriority/interrupts(_:)``) went back to the queue: it is
        /// played again from its start after it.
        case requeued(id: UInt64)
        /// The device failed while playing `job`; what happens next.
        case deviceError(AnnounceError, job: UInt64, decision: DeviceRecovery.Decision)
        /// The device works again after `failures` failures.
        case deviceRecovered(failures: Int)
        /// The device could not be opened at start: it counts as missing until it can.
        case deviceMissing(AnnounceError)
    }

    private struct Shared {
        var state: AudioEngineStatus.DeviceState = .idle
        var recovery: DeviceRecovery
        var lastError: AnnounceError?
        var retryAt: UInt64?
        /// The job being written, else the oldest one playing out.
        var playing: UInt64?
        /// Jobs in hand: taken from the queue and not finished.
        var busy = false
    }

    /// A job whose samples went (or are going) to the device and whose last sample has not been played yet.
    private struct Unheard {
        var job: Job
        var result: JobResult
        /// The stream frame just after its last sample, once it is all written.
        var endFrame: UInt64?
    }

    private let queue: JobQueue<Job>
    private let sink: any AudioSink
    private let settings: Settings
    private let volume: VolumeGuard?
    private let ducker: Ducker?
    private let logger: Logger
    private let onEvent: @Sendable (Event) -> Void
    private let pack: Mutex<VoicePack>
    private let shared: Mutex<Shared>
    /// Set by `wake()` when a cancel was flagged in the queue; the audio thread looks which of its jobs.
    private let cancelSignal = Atomic<Bool>(false)
    private let aborted = Atomic<Bool>(false)
    /// Frames written plus device failures: grows while the audio thread makes progress (the watchdog's view).
    private let progressCounter = Atomic<UInt64>(0)
    /// Where the audio thread's own waits end: a backoff cut short by `wake()` or `abort()` (`woken`, kept until the
    /// wait takes it, so that a wake just before the wait is not lost), and `join()`'s wait for the thread's end.
    private struct Signals {
        var woken = false
        var finished = false
    }
    private let signals = ConditionLock(Signals())

    // The audio thread's own state.
    /// Frames handed to the device since the player started (the stream position of what was written).
    private var written: UInt64 = 0
    private var unheard: [Unheard] = []
    /// Jobs in hand to play again from their start (a device failure, or a cancel that dropped the buffer).
    private var replay: [Job] = []
    private var attempts: [UInt64: Int] = [:]
    private var inBurst = false
    private var ducked = false
    /// The stream is running with sound written since it (re)started: the next job gets the pause, not the lead-in.
    private var streamHasSound = false
    /// The stream (re)starts with the next write (opened, dropped, drained): it gets the lead-in.
    private var streamFresh = true
    /// Frames of silence written since the last job's samples (the tail before a burst ends): the pause before
    /// the next job is only what is left of it.
    private var silenceSinceSound = 0
    /// When sound last stopped (a burst ended, or a cancel dropped the buffer): a job that comes sooner than
    /// `pauseMs` after it still gets its pause, in place of (or longer than) the lead-in.
    private var lastSoundEnded: UInt64?

    public init(
        queue: JobQueue<Job>, pack: VoicePack, sink: any AudioSink, settings: Settings = Settings(),
        volume: VolumeGuard? = nil, ducker: Ducker? = nil, logger: Logger = Logger(label: "announce.player"),
        onEvent: @escaping @Sendable (Event) -> Void
    ) {
        self.queue = queue
        self.pack = Mutex(pack)
        self.sink = sink
        self.settings = settings
        self.volume = volume
        self.ducker = ducker
        self.logger = logger
        self.onEvent = onEvent
        self.shared = Mutex(Shared(recovery: DeviceRecovery(settings: settings.recovery)))
    }

    /// Starts the audio thread. It runs until the queue is closed and empty (and everything written was heard),
    /// or until `abort()`.
    public func start() {
        SystemThread.detach(name: "announce-audio") { [self] in
            raisePriority()
            run()
            signals.withLock { $0.finished = true }
            signals.broadcast()
        }
    }

    /// Waits for the audio thread to finish (after `queue.close()`/`closeNow()`, or `abort()`).
    public func join() { signals.withLock(when: \.finished) { _ in } }

    /// Replaces the voice pack for jobs rendered from now on.
    public func replacePack(_ newPack: VoicePack) { pack.withLock { $0 = newPack } }

    /// Wakes the audio thread to look at the cancels flagged in the queue (`JobQueue.cancel`). Any thread: the
    /// job stops within a period.
    public func wake() {
        cancelSignal.store(true, ordering: .releasing)
        sink.wake()
        signals.withLock { $0.woken = true }
        signals.broadcast()
    }

    /// Stops at once (a shutdown out of time): buffered audio is dropped and the jobs in hand are left
    /// unfinished — no event — so that the journal speaks them at the next start. Any thread.
    public func abort() {
        aborted.store(true, ordering: .releasing)
        sink.wake()
        signals.withLock { $0.woken = true }
        signals.broadcast()
    }

    /// The job being written, else the oldest one still playing out. Any thread.
    public var playingJobID: UInt64? { shared.withLock { $0.playing } }

    /// While the device is being retried, the number of device failures so far (it grows with every attempt);
    /// nil otherwise. Cheap, for liveness checks. Any thread.
    public var recoveryAttempts: Int? {
        shared.withLock { $0.state == .recovering ? $0.recovery.failures : nil }
    }

    /// What the watchdog asks: nil while the audio thread has nothing in hand; else a number that grows with
    /// every frame written and every device failure. The same number for long means a hung audio thread —
    /// however long the announcement (free text may last minutes). Any thread.
    public var progress: UInt64? {
        shared.withLock { $0.busy } ? progressCounter.load(ordering: .relaxed) : nil
    }

    /// A snapshot of the device, recovery, volume and ducking state. Any thread.
    public func status() -> AudioEngineStatus {
        let shared = self.shared.withLock { $0 }
        var status = AudioEngineStatus(
            sink: sink.status, state: shared.state, keepOpen: settings.keepOpen, leadInMs: settings.leadInMs,
            deviceFailures: shared.recovery.failures, recoveries: shared.recovery.recoveries,
            jobsGivenUp: shared.recovery.jobsGivenUp)
        status.pauseMs = settings.pauseMs
        status.lastError = shared.lastError.map(ErrorInfo.init)
        if let retryAt = shared.retryAt {
            let now = Monotonic.nanos
            status.retryInMs = retryAt > now ? Int((retryAt - now) / 1_000_000) : 0
        }
        status.volume = volume?.status()
        status.ducking = ducker?.status()
        return status
    }

    /// The audio engine's counters, for metrics: no device or mixer I/O — short locks only — so a scrape never
    /// holds up the audio thread. Any thread.
    public func health() -> AudioHealth {
        let shared = self.shared.withLock { $0 }
        let sink = self.sink.status
        let volume = self.volume?.counts
        return AudioHealth(
            state: shared.state, xruns: sink.xruns, suspends: sink.suspends, opens: sink.opens,
            deviceFailures: shared.recovery.failures, recoveries: shared.recovery.recoveries,
            jobsGivenUp: shared.recovery.jobsGivenUp, volumeRaises: volume?.raises ?? 0,
            volumeRestores: volume?.restores ?? 0, volumeUserOverrides: volume?.userOverrides ?? 0,
            ducks: ducker?.status().controls.map { ($0.element, $0.ducks) } ?? [])
    }

    // MARK: - The audio thread

    /// Applies `settings.threadNice` to the audio thread (on Linux the nice value is per thread: `who` 0 is the
    /// calling thread).
    private func raisePriority() {
        guard let nice = settings.threadNice else { return }
        if setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Int32(nice)) == 0 {
            logger.debug("audio thread priority set", metadata: ["nice": "\(nice)"])
        } else {
            let reason = String(cString: strerror(errno))
            logger.info(
                "audio thread keeps the process's CPU priority", metadata: ["nice": "\(nice)", "error": "\(reason)"])
        }
    }

    private var isAborted: Bool { aborted.load(ordering: .acquiring) }

    private func run() {
        probeAtStart()
        while !isAborted, let job = nextJob() {
            play(job)
        }
        // The queue is closed and empty: what is in hand still plays to its end (a graceful stop), unless aborted.
        while !isAborted && (!unheard.isEmpty || !replay.isEmpty) {
            if !replay.isEmpty { play(replay.removeFirst()) }
            settle(untilIdle: true)
        }
        if isAborted {
            sink.drop()
            var left: [UInt64] = []
            for id in unheard.map(\.job.id) + replay.map(\.id) where !left.contains(id) { left.append(id) }
            unheard = []
            replay = []
            for id in left { queue.release(id) }
            if !left.isEmpty {
                logger.warning(
                    "audio stopped with jobs not heard in full; the journal has them for the next start",
                    metadata: ["jobs": "\(left)"])
            }
        }
        if inBurst { endBurst() }
        sink.close()
        ducker?.waitUntilIdle()
        shared.withLock {
            $0.state = $0.recovery.isMissing ? .missing : .idle
            $0.busy = false
            $0.playing = nil
        }
    }

    /// The next job: one to play again first, else the queue's next. While a burst is open (the last job may still
    /// be leaving the device) it never blocks on the queue: it takes a job that is ready, or settles the burst
    /// (confirms what was heard, ends the burst) before it waits — a queue that held only jobs whose ttl passed
    /// must not leave the job before them unconfirmed and the volume raised.
    private func nextJob() -> Job? {
        while !isAborted {
            if !replay.isEmpty { return replay.removeFirst() }
            guard inBurst else { break }
            if let job = queue.tryDequeue() { return started(job) }
            settle(untilIdle: false)
        }
        if isAborted { return nil }
        if !replay.isEmpty { return replay.removeFirst() }
        shared.withLock { $0.busy = false }
        var openedAhead: UInt64?
        while true {
            // A missing device is probed while nothing waits for it, so that `status` says when it is back.
            let probeAt = isMissingNow ? Monotonic.nanos + UInt64(probeIntervalMs) * 1_000_000 : nil
            let deadline = [openedAhead, probeAt].compactMap { $0 }.min()
            switch queue.next(until: deadline) {
            case let .element(job):
                return started(job)
            case .hinted:
                // A job is being journaled: open the device meanwhile (a sound server's connection, a card's
                // set-up), so that its first sample follows the commit at once.
                if openAhead() { openedAhead = Monotonic.nanos + UInt64(settings.openAheadMs) * 1_000_000 }
            case .timedOut:
                if let ahead = openedAhead, Monotonic.nanos >= ahead {
                    if !settings.keepOpen { sink.close() }
                    openedAhead = nil
                }
                if isMissingNow { probe() }
            case .closed:
                return nil
            }
        }
    }

    /// How often a missing device is probed while nothing waits for it.
    private var probeIntervalMs: Int { max(2_000, settings.recovery.maximumBackoffMs) }

    /// Given up on: jobs fail at once until the device works again.
    private var isMissing: Bool { shared.withLock { $0.recovery.isMissing } }

    /// Said missing in `status` (given up on, or not found at start): probed while idle.
    private var isMissingNow: Bool { shared.withLock { $0.state == .missing } }

    /// Opens the device once at start, as the first job would: one that cannot be opened is missing from the start
    /// (said once, at warning: it may appear later, a USB speaker plugged in, a sound server started). Only said:
    /// the first job still gets `giveUpAfterMs` of retries (a sound server that starts after the daemon at boot).
    private func probeAtStart() {
        guard settings.probeAtStart else { return }
        do {
            try sink.open(sampleRate: pack.withLock { $0.sampleRate })
            if !settings.keepOpen { sink.close() }
        } catch {
            shared.withLock {
                $0.lastError = error
                $0.state = .missing
            }
            onEvent(.deviceMissing(error))
        }
    }

    /// Opens and closes a missing device: if it opens, it is back.
    private func probe() {
        do {
            try sink.open(sampleRate: pack.withLock { $0.sampleRate })
        } catch {
            return
        }
        if !settings.keepOpen { sink.close() }
        let failures = shared.withLock { shared -> Int in
            let failures = shared.recovery.consecutiveFailures
            shared.recovery.succeeded()
            shared.state = settings.keepOpen ? .open : .idle
            shared.retryAt = nil
            return failures
        }
        onEvent(.deviceRecovered(failures: failures))
    }

    /// Opens the device for the job on its way, unless it is open; false if it is, or cannot be opened (the job
    /// then opens it itself, and meets the failure with the job in hand).
    private func openAhead() -> Bool {
        guard !sink.status.isOpen else { return false }
        do {
            try sink.open(sampleRate: pack.withLock { $0.sampleRate })
            return true
        } catch {
            return false
        }
    }

    private func started(_ job: Job) -> Job {
        shared.withLock {
            $0.busy = true
            $0.recovery.jobStarted()
        }
        return job
    }

    /// Plays one job: starts the burst if needed, writes the lead-in or the pause, then the job, confirming
    /// earlier jobs as heard as the device plays them. Returns once the job is all written (it is then
    /// unheard until its end leaves the device), or has ended (failed, cancelled), or went back for a replay.
    private func play(_ job: Job) {
        if queue.isCancelRequested(job.id) {
            var result = JobResult(id: job.id, state: .cancelled, finishedNanos: Monotonic.nanos - job.acceptedAt)
            result.error = AnnounceError(.cancelled, "cancelled by a client")
            return finish(job, result)
        }
        inBurst = true
        if volume?.begin(enforce: job.enforce) == .muted {
            return finish(
                job,
                JobResult(
                    id: job.id, state: .failed, error: AnnounceError(.muted, "the output is muted (mute policy respect)"),
                    finishedNanos: Monotonic.nanos - job.acceptedAt))
        }
        if !ducked, let ducker {
            ducker.duck()
            ducked = true
        }
        // A job composed with a particular voice pack (its language; before a reload) is rendered with it.
        let pack = job.voice ?? self.pack.withLock { $0 }
        let samples: [Int16]
        var buildError: AnnounceError?
        do {
            samples = try pack.render(job.announcement)
        } catch {
            // The speech cannot be built: a chime is better than silence. Said so in the result and the log.
            buildError = error
            samples = (try? pack.renderChime()) ?? []
        }
        let attempt = (attempts[job.id] ?? job.attempts) + 1
        attempts[job.id] = attempt
        var result = JobResult(id: job.id, state: buildError == nil ? .spoken : .failed, error: buildError)
        result.attempts = attempt
        result.frames = samples.count
        do {
            try sink.open(sampleRate: pack.sampleRate)
            setState(.playing)
            shared.withLock { $0.playing = job.id }
            // In hand from here: a cancel or a device failure finds it among the unheard.
            unheard.append(Unheard(job: job, result: result))
            let silence: Int
            if streamFresh {
                var silenceMs = settings.leadInMs
                if let ended = lastSoundEnded {
                    silenceMs = max(silenceMs, settings.pauseMs - Int((Monotonic.nanos - ended) / 1_000_000))
                }
                silence = silenceMs * pack.sampleRate / 1000
                if silence > 0 {
                    unheard[unheard.count - 1].result.leadInStartNanos = Monotonic.nanos - job.acceptedAt
                    unheard[unheard.count - 1].result.leadInMs = silenceMs
                }
            } else {
                silence = streamHasSound ? max(0, settings.pauseMs * pack.sampleRate / 1000 - silenceSinceSound) : 0
            }
            guard try writeTracked([Int16](repeating: 0, count: silence)[...]) else { return }
            streamFresh = false
            if let index = unheard.firstIndex(where: { $0.job.id == job.id }) {
                unheard[index].result.firstSampleNanos = Monotonic.nanos - job.acceptedAt
            }
            onEvent(.started(id: job.id, attempt: attempt))
            guard try writeTracked(samples[...], endsJob: true) else { return }
            if let index = unheard.firstIndex(where: { $0.job.id == job.id }) {
                unheard[index].endFrame = written
            }
            streamHasSound = true
            silenceSinceSound = 0
            deviceWorked()
        } catch {
            deviceFailed(error, job: job)
        }
    }

    /// Writes samples a period at a time, confirming the jobs whose end the device has played after each period
    /// and as soon as the oldest unheard job's end is played (the sink's `mark`), whatever the period's length. Returns false when an abort, or a cancel that dropped the buffer, stopped it: the job being
    /// written has then ended (cancelled) or gone back for a replay.
    ///
    /// On a shared ring (``Settings/endAheadMs``) a job's end is written at most that far ahead of the speaker: the
    /// part of `samples` that ends a job (`endsJob`) once the rest fits the buffer, and anything written while an
    /// earlier job's end is still in the ring, go in small steps, each once the ring has played down to make room.
    private func writeTracked(_ samples: ArraySlice<Int16>, endsJob: Bool = false) throws(AnnounceError) -> Bool {
        let status = sink.status
        let chunk = max(64, status.periodFrames ?? 160)
        let stop = { self.isAborted || self.cancelSignal.load(ordering: .acquiring) }
        let ahead = endAheadFrames(status)
        let shallowFrom = endsJob ? samples.endIndex - min(samples.count, status.bufferFrames ?? 0) : samples.endIndex
        var offset = samples.startIndex
        while offset < samples.endIndex {
            if isAborted { return false }
            if cancelSignal.load(ordering: .acquiring) && handleCancels() { return false }
            if yieldToWaiting() { return false }
            var size = chunk
            if let ahead, offset >= shallowFrom || nextEndMark() != nil {
                let pending = try sink.pendingFrames()
                confirm(pending: pending)
                if offset < shallowFrom && nextEndMark() == nil {
                    continue  // the end in the ring was just played: the whole buffer again
                }
                if pending > ahead.low {
                    guard try waitUntilPending(atMost: ahead.low) else { return false }
                    continue
                }
                size = min(chunk, ahead.low + ahead.step - pending)
            }
            let count = try sink.write(
                samples[offset..<min(offset + size, samples.endIndex)], stop: stop, mark: nextEndMark)
            written += UInt64(count)
            progressCounter.add(UInt64(count), ordering: .relaxed)
            offset += count
            confirm(pending: try sink.pendingFrames())
        }
        return true
    }

    /// On a shared ring, how a job's end is written (``Settings/endAheadMs``): in steps of a third of it, each once
    /// the device holds at most `low` frames — the rest of it, but never less than a period, the steps a card's
    /// position may move in (the shipped dmix's are 64 ms): so at most `low + step` ahead. Nil elsewhere, and when
    /// that is no shorter than the buffer.
    private func endAheadFrames(_ status: SinkStatus) -> (low: Int, step: Int)? {
        guard status.sharedRing == true, let milliseconds = settings.endAheadMs, let rate = status.sampleRate,
            let buffer = status.bufferFrames
        else { return nil }
        let frames = max(3, milliseconds * rate / 1000)
        let step = frames / 3
        let low = max(frames - step, status.periodFrames ?? 0)
        return low + step < buffer ? (low, step) : nil
    }

    /// Waits until the device holds at most `target` frames, confirming jobs heard on the way. False when an abort,
    /// or a cancel that dropped the buffer, ended the wait.
    private func waitUntilPending(atMost target: Int) throws(AnnounceError) -> Bool {
        _ = try sink.waitUntilPlayed(mark: { max(self.nextEndMark() ?? 0, target) }) { pending in
            self.confirm(pending: pending)
            return pending <= target || self.isAborted || self.cancelSignal.load(ordering: .acquiring)
        }
        if isAborted { return false }
        if cancelSignal.load(ordering: .acquiring) && handleCancels() { return false }
        return true
    }

    /// The end of the oldest job not yet heard, as the sink's `mark`: the frames written after it. Nil when no
    /// job's end is in the device.
    private func nextEndMark() -> Int? {
        guard let end = unheard.first?.endFrame, end <= written else { return nil }
        return Int(written - end)
    }

    /// Confirms as heard every job whose last frame has left the device (`pending` frames are still in it).
    private func confirm(pending: Int) {
        let played = written - min(written, UInt64(max(0, pending)))
        while let first = unheard.first, let end = first.endFrame, end <= played {
            unheard.removeFirst()
            var result = first.result
            let now = Monotonic.nanos
            result.finishedNanos = now - first.job.acceptedAt
            result.heardAt = now
            finish(first.job, result)
        }
        shared.withLock { $0.playing = unheard.first?.job.id }
    }

    /// Acts on the cancels flagged in the queue. A cancelled job waiting for a replay just ends; one in the
    /// buffer makes the buffer be dropped: it ends `cancelled`, and every other job that was in the buffer is
    /// played again from its start (its end was not heard). Returns whether the buffer was dropped.
    private func handleCancels() -> Bool {
        guard cancelSignal.exchange(false, ordering: .acquiringAndReleasing) else { return false }
        // Decide before finishing any: a finished job is released from the queue, which forgets its flag.
        let waiting = replay.filter { queue.isCancelRequested($0.id) }
        replay.removeAll { queue.isCancelRequested($0.id) }
        for job in waiting {
            var result = JobResult(id: job.id, state: .cancelled, finishedNanos: Monotonic.nanos - job.acceptedAt)
            result.error = AnnounceError(.cancelled, "cancelled by a client while waiting for the device")
            finish(job, result)
        }
        let cancelled = unheard.filter { queue.isCancelRequested($0.job.id) }
        guard !cancelled.isEmpty else { return false }
        sink.drop()
        streamFresh = true
        streamHasSound = false
        lastSoundEnded = Monotonic.nanos
        replay = unheard.filter { !queue.isCancelRequested($0.job.id) }.map(\.job) + replay
        unheard = []
        for entry in cancelled {
            var result = entry.result
            result.state = .cancelled
            result.error = AnnounceError(.cancelled, "cancelled by a client while playing")
            result.finishedNanos = Monotonic.nanos - entry.job.acceptedAt
            finish(entry.job, result)
        }
        shared.withLock { $0.playing = nil }
        return true
    }

    /// Notices being written give way to a payment or urgent job that waits (``JobPriority/interrupts(_:)``): the
    /// buffer is dropped and they go back to the queue, to be heard whole after it. Only while every job in hand is a
    /// notice (a payment's end still in the buffer is heard first), and only while a notice's samples are being
    /// written: a notice whose end is all in the buffer plays out (it is nearly over). Returns whether it cut.
    private func yieldToWaiting() -> Bool {
        guard unheard.contains(where: { $0.endFrame == nil }), unheard.allSatisfy({ $0.job.priority == .notice }),
            queue.hasWaiting(interrupting: .notice)
        else { return false }
        sink.drop()
        streamFresh = true
        streamHasSound = false
        lastSoundEnded = Monotonic.nanos
        let cut = unheard.map(\.job) + replay.filter { $0.priority == .notice }
        replay.removeAll { $0.priority == .notice }
        unheard = []
        shared.withLock { $0.playing = nil }
        for job in cut {
            if queue.requeue(job) {
                onEvent(.requeued(id: job.id))
            } else {
                var result = JobResult(id: job.id, state: .cancelled, finishedNanos: Monotonic.nanos - job.acceptedAt)
                result.error = AnnounceError(.cancelled, "cancelled by a client while playing")
                finish(job, result)
            }
        }
        logger.info("a notice gives way to a payment; it is heard again after it", metadata: ["jobs": "\(cut.map(\.id))"])
        return true
    }

    /// Waits until the device has played everything written, confirming jobs as heard. A new job (unless
    /// `untilIdle`: the last jobs of a graceful stop), an abort or a cancel that dropped the buffer ends the wait
    /// early. Then, with nothing left to play, the burst ends.
    private func settle(untilIdle: Bool) {
        guard inBurst else { return }
        do {
            // The tail: two periods of silence after the last sound (see the type's documentation), or tailMs.
            let status = sink.status
            if streamHasSound, let period = status.periodFrames {
                if silenceSinceSound < 2 * period {
                    let tail = 2 * period - silenceSinceSound
                    guard try writeTracked([Int16](repeating: 0, count: tail)[...]) else { return }
                    silenceSinceSound += tail
                }
                // A longer tail a period at a time, so that a job that comes meanwhile follows at once (the
                // silence written counts toward its pause) instead of waiting behind it.
                let asked = settings.tailMs * (status.sampleRate ?? 0) / 1_000
                while silenceSinceSound < asked {
                    if !untilIdle && queue.count > 0 { return }
                    let size = min(period, asked - silenceSinceSound)
                    guard try writeTracked([Int16](repeating: 0, count: size)[...]) else { return }
                    silenceSinceSound += size
                }
            }
            while !unheard.isEmpty && !isAborted {
                let all = try sink.waitUntilPlayed(mark: nextEndMark) { pending in
                    confirm(pending: pending)
                    return isAborted || cancelSignal.load(ordering: .acquiring) || (!untilIdle && queue.count > 0)
                }
                if all {
                    confirm(pending: 0)
                } else if cancelSignal.load(ordering: .acquiring) {
                    if handleCancels() { return }
                } else {
                    return
                }
            }
        } catch {
            if let job = unheard.first?.job { deviceFailed(error, job: job) }
            return
        }
        _ = handleCancels()
        if unheard.isEmpty && replay.isEmpty && queue.count == 0 && !isAborted { endBurst() }
    }

    /// The burst is over: stop the stream, release the device unless kept open, put the mixer back.
    private func endBurst() {
        sink.drain()
        // The mixer first, then the state: whoever sees the engine idle sees the owner's volume back.
        volume?.end()
        if ducked {
            ducker?.restore()
            ducked = false
        }
        if settings.keepOpen && sink.status.isOpen {
            setState(.open)
        } else {
            sink.close()
            setState(isMissing ? .missing : .idle)
        }
        streamFresh = true
        streamHasSound = false
        lastSoundEnded = Monotonic.nanos
        inBurst = false
        shared.withLock { $0.busy = false }
    }

    /// Reports a job's end and gives it back to the queue.
    private func finish(_ job: Job, _ result: JobResult) {
        attempts[job.id] = nil
        queue.release(job.id)
        onEvent(.finished(result))
    }

    /// The device failed: close it, and every job not heard yet goes back to be played from its start after a
    /// backoff — or, once the device has been away too long, the first of them is reported failed.
    private func deviceFailed(_ error: AnnounceError, job: Job) {
        sink.close()
        streamFresh = true
        streamHasSound = false
        var again = unheard.map(\.job)
        unheard = []
        if !again.contains(where: { $0.id == job.id }) { again.append(job) }
        replay = again + replay.filter { waiting in !again.contains { $0.id == waiting.id } }
        let (decision, wasMissing) = shared.withLock { shared in
            let now = Monotonic.nanos
            let wasMissing = shared.recovery.isMissing
            let decision = shared.recovery.failed(at: now)
            shared.lastError = error
            shared.playing = nil
            switch decision {
            case let .retry(afterMs):
                shared.state = .recovering
                shared.retryAt = now + UInt64(afterMs) * 1_000_000
            case .giveUp:
                shared.retryAt = nil
                shared.state = .missing
            }
            return (decision, wasMissing)
        }
        progressCounter.add(1, ordering: .relaxed)
        onEvent(.deviceError(error, job: replay[0].id, decision: decision))
        switch decision {
        case .giveUp:
            // Every job in hand and every job waiting fails now, together: the service hears of each at once (a
            // receipt) instead of one every `giveUpAfterMs`. Later jobs try the device once each.
            let failed = replay + queue.remove { _ in true }
            replay = []
            shared.withLock {
                $0.recovery.jobStarted()
                $0.recovery.gaveUp(more: failed.count - 1)
            }
            let missing = AnnounceError(
                .audioDevice, "the audio device is missing (\(error.message))", cause: error.cause)
            for (index, job) in failed.enumerated() {
                finish(
                    job,
                    JobResult(
                        id: job.id, state: .failed, error: index == 0 && !wasMissing ? error : missing,
                        finishedNanos: Monotonic.nanos - job.acceptedAt))
            }
        case let .retry(afterMs):
            let deadline = Monotonic.nanos + UInt64(max(0, afterMs)) * 1_000_000
            signals.withLock(when: \.woken, until: deadline) { $0.woken = false }
            _ = handleCancels()
        }
    }

    private func deviceWorked() {
        let failures = shared.withLock { shared -> Int? in
            let failures = shared.recovery.consecutiveFailures
            shared.retryAt = nil
            return shared.recovery.succeeded() ? failures : nil
        }
        if let failures { onEvent(.deviceRecovered(failures: failures)) }
    }

    private func setState(_ state: AudioEngineStatus.DeviceState) {
        shared.withLock { $0.state = state }
    }
}
