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
import Synchronization

/// The audio thread: takes jobs from the queue one at a time, renders them with the voice pack and writes them
/// to the sink.
///
/// - Back-to-back jobs are written without draining in between (gapless); a job arriving while the last one's
///   tail is still playing joins it without a gap too. The device drains — and, unless `keepOpen`, is
///   released — only when the queue has run empty and everything was heard.
/// - A burst (jobs until the queue runs empty) starts by asking the `VolumeGuard` (threshold, mute policy) and
///   ducking other audio; both are put back after the burst, not between its jobs.
/// - A cancel from another thread wakes the sink, which stops within a period; buffered audio is dropped.
/// - A device failure closes the device and retries with backoff (`DeviceRecovery`), replaying the job from its
///   start; the queue is kept. A job is reported failed only after `giveUpAfterMs` — never silently lost.
public final class Player: @unchecked Sendable {
    public struct Settings: Sendable, Equatable {
        /// Silence before the first job of a burst, so an amplifier that wakes on signal does not clip it.
        public var leadInMs = 0
        /// Keep the PCM open between bursts (lowest latency) instead of releasing the device.
        public var keepOpen = false
        /// Retry and give-up times for a failing device.
        public var recovery = RecoverySettings()
        /// CPU priority (nice value) the audio thread asks for, so that a busy CPU does not hold it up long
        /// enough for the buffer to run dry; nil: the process's own. Refused unless permitted (root,
        /// CAP_SYS_NICE, or RLIMIT_NICE — systemd `LimitNICE=`), which is logged and changes nothing else.
        public var threadNice: Int?
        public init() {}
    }

    public enum Event: Sendable {
        /// The job is being heard: its first audible sample has left the device's buffer, or the whole job was
        /// written (again, on a replay after a device failure). `firstSampleNanos`: when its first sample was
        /// handed to the device.
        case started(id: UInt64, firstSampleNanos: UInt64)
        case finished(JobResult)
        /// The device failed while playing `job`; what happens next.
        case deviceError(AnnounceError, job: UInt64, decision: DeviceRecovery.Decision)
        /// The device works again after `failures` failures.
        case deviceRecovered(failures: Int)
    }

    private struct Current {
        var id: UInt64?
        var cancel = false
    }

    private struct Shared {
        var state: AudioEngineStatus.DeviceState = .idle
        var recovery: DeviceRecovery
        var lastError: AnnounceError?
        var retryAt: UInt64?
    }

    private let queue: JobQueue<Job>
    private let sink: any AudioSink
    private let settings: Settings
    private let volume: VolumeGuard?
    private let ducker: Ducker?
    private let logger: Logger
    private let onEvent: @Sendable (Event) -> Void
    private let pack: Mutex<VoicePack>
    /// The job playing now, and whether a cancel was asked for it.
    private let current = Mutex(Current())
    private let shared: Mutex<Shared>
    /// Signalled by `cancelCurrent`, to cut a backoff wait short.
    private let wakeup = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

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

    /// Starts the audio thread. It runs until the queue is closed and empty.
    public func start() {
        SystemThread.detach { [self] in
            Self.nameThread("announce-audio")
            raisePriority()
            run()
            finished.signal()
        }
    }

    /// Names the calling thread for `top -H` and `ps -L`. Foundation's `Thread.name` does not reach the kernel on
    /// Linux, so the audio thread would show the name of the thread that made it; `pthread_setname_np` and
    /// `prctl` are not visible to Swift, and writing `/proc/thread-self/comm` is what they do. Best effort.
    private static func nameThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// Waits for the audio thread to finish (after `queue.close()`).
    public func join() { finished.wait() }

    /// Replaces the voice pack for jobs rendered from now on.
    public func replacePack(_ newPack: VoicePack) { pack.withLock { $0 = newPack } }

    /// Stops the job that is playing if it is `id` (or any job if nil); returns whether one was stopped.
    /// Any thread: the sink is woken and stops within a period.
    @discardableResult
    public func cancelCurrent(id: UInt64? = nil) -> Bool {
        let cancelled = current.withLock { state in
            guard let playing = state.id, id == nil || id == playing else { return false }
            state.cancel = true
            return true
        }
        if cancelled {
            sink.wake()
            wakeup.signal()
        }
        return cancelled
    }

    public var playingJobID: UInt64? { current.withLock { $0.id } }

    /// While the device is being retried, the number of device failures so far (it grows with every attempt);
    /// nil otherwise. Cheap, for liveness checks. Any thread.
    public var recoveryAttempts: Int? {
        shared.withLock { $0.state == .recovering ? $0.recovery.failures : nil }
    }

    /// A snapshot of the device, recovery, volume and ducking state. Any thread.
    public func status() -> AudioEngineStatus {
        let shared = self.shared.withLock { $0 }
        var status = AudioEngineStatus(
            sink: sink.status, state: shared.state, keepOpen: settings.keepOpen, leadInMs: settings.leadInMs,
            deviceFailures: shared.recovery.failures, recoveries: shared.recovery.recoveries,
            jobsGivenUp: shared.recovery.jobsGivenUp)
        status.lastError = shared.lastError.map(ErrorInfo.init)
        if let retryAt = shared.retryAt {
            let now = Monotonic.nanos
            status.retryInMs = retryAt > now ? Int((retryAt - now) / 1_000_000) : 0
        }
        status.volume = volume?.status()
        status.ducking = ducker?.status()
        return status
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

    private func run() {
        var inBurst = false
        var ducked = false
        var leadIn = settings.leadInMs
        while let job = queue.dequeue() {
            inBurst = true
            let result: JobResult
            if volume?.begin() == .muted {
                result = JobResult(
                    id: job.id, state: .failed, error: AnnounceError(.muted, "the output is muted (mute policy respect)"),
                    finishedNanos: Monotonic.nanos - job.acceptedAt)
            } else {
                if !ducked, let ducker {
                    ducker.duck()
                    ducked = true
                }
                result = play(job, leadIn: leadIn)
                if result.frames > 0 { leadIn = 0 }
            }
            onEvent(.finished(result))
            if queue.count == 0 {
                endBurst(ducked: ducked)
                inBurst = false
                ducked = false
                leadIn = settings.leadInMs
            }
        }
        if inBurst { endBurst(ducked: ducked) }
        sink.close()
        ducker?.waitUntilIdle()
        setState(.idle)
    }

    /// The queue ran empty: stop the stream, release the device unless kept open, put the mixer back.
    private func endBurst(ducked: Bool) {
        sink.drain()
        if settings.keepOpen && sink.status.isOpen {
            setState(.open)
        } else {
            sink.close()
            setState(.idle)
        }
        volume?.end()
        if ducked { ducker?.restore() }
    }

    private func play(_ job: Job, leadIn: Int) -> JobResult {
        current.withLock { $0 = Current(id: job.id) }
        defer { current.withLock { $0 = Current() } }
        while wakeup.wait(timeout: .now()) == .success {}  // forget wake-ups meant for an earlier job
        // A job composed with a particular voice pack (its language; before a reload) is rendered with it.
        let pack = job.voice ?? self.pack.withLock { $0 }
        let samples: [Int16]
        var buildError: AnnounceError?
        do {
            samples = try pack.render(job.announcement, leadInMs: leadIn)
        } catch {
            // The speech cannot be built: a chime is better than silence. Said so in the result and the log.
            buildError = error
            samples = (try? pack.renderChime(leadInMs: leadIn)) ?? []
        }
        let cancelled = { self.current.withLock { $0.cancel } }
        shared.withLock { $0.recovery.jobStarted() }
        while true {
            if cancelled() {
                return JobResult(id: job.id, state: .cancelled, finishedNanos: Monotonic.nanos - job.acceptedAt)
            }
            do {
                try sink.open(sampleRate: pack.sampleRate)
                setState(.playing)
                let firstSample = Monotonic.nanos
                // `started` (journaled: after a crash the job is not spoken again) only once the first audible
                // sample has left the device's buffer — the lead-in and a buffer and a period beyond it written —
                // so that a crash before anything was heard replays the job instead of losing it.
                let device = sink.status
                let head = device.bufferFrames.map { buffer in
                    min(samples.count, leadIn * pack.sampleRate / 1000 + buffer + (device.periodFrames ?? 0))
                }
                var frames = 0
                if let head, head < samples.count {
                    frames = try sink.write(samples[..<head], stop: cancelled)
                    if frames == head { onEvent(.started(id: job.id, firstSampleNanos: firstSample)) }
                    if !cancelled() { frames += try sink.write(samples[head...], stop: cancelled) }
                } else {
                    frames = try sink.write(samples[...], stop: cancelled)
                    onEvent(.started(id: job.id, firstSampleNanos: firstSample))
                }
                if !cancelled(), queue.count == 0 {
                    // The last job for now: wait until it has been heard (a new job or a cancel ends the wait).
                    _ = try sink.waitUntilPlayed { cancelled() || self.queue.count > 0 }
                }
                let now = Monotonic.nanos
                deviceWorked()
                if cancelled() {
                    sink.drop()
                    return JobResult(
                        id: job.id, state: .cancelled, firstSampleNanos: firstSample - job.acceptedAt,
                        finishedNanos: now - job.acceptedAt, frames: frames)
                }
                return JobResult(
                    id: job.id, state: buildError == nil ? .spoken : .failed, error: buildError,
                    firstSampleNanos: firstSample - job.acceptedAt, finishedNanos: now - job.acceptedAt,
                    frames: frames)
            } catch {
                sink.close()
                let decision = deviceFailed(error)
                onEvent(.deviceError(error, job: job.id, decision: decision))
                switch decision {
                case .giveUp:
                    setState(.idle)
                    return JobResult(
                        id: job.id, state: .failed, error: error, finishedNanos: Monotonic.nanos - job.acceptedAt)
                case let .retry(afterMs):
                    _ = wakeup.wait(timeout: .now() + .milliseconds(afterMs))
                }
            }
        }
    }

    private func deviceFailed(_ error: AnnounceError) -> DeviceRecovery.Decision {
        shared.withLock { shared in
            let now = Monotonic.nanos
            let decision = shared.recovery.failed(at: now)
            shared.lastError = error
            switch decision {
            case let .retry(afterMs):
                shared.state = .recovering
                shared.retryAt = now + UInt64(afterMs) * 1_000_000
            case .giveUp:
                shared.retryAt = nil
            }
            return decision
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
