#if canImport(Glibc)
import Glibc
#endif

/// How long and how often to retry a device that failed (sound server restarted, USB speaker unplugged).
public struct RecoverySettings: Sendable, Equatable, Codable {
    /// Wait before the first retry; doubles after each failure in a row.
    public var initialBackoffMs = 100
    /// Longest wait between two retries.
    public var maximumBackoffMs = 2_000
    /// A job whose device has been failing this long is reported `failed` (`audio_device`), with every job
    /// waiting behind it, and the device counts as missing: each later job tries it once, and fails at once if it
    /// is still away. Until then it is retried — replayed from its start — and every job behind it waits.
    public var giveUpAfterMs = 30_000

    public init() {}

    public init(initialBackoffMs: Int, maximumBackoffMs: Int, giveUpAfterMs: Int) {
        self.initialBackoffMs = initialBackoffMs
        self.maximumBackoffMs = maximumBackoffMs
        self.giveUpAfterMs = giveUpAfterMs
    }
}

/// The device failure state machine of the audio thread: `ready` ⇄ `recovering(n)` → `missing`; each failure
/// either asks for a retry after an exponential backoff or, once the job has been failing for `giveUpAfterMs`,
/// gives up: the device is then missing, and every failure gives up at once until the device works again. A
/// success after failures counts as one recovery. Pure: time is passed in.
public struct DeviceRecovery: Sendable, Equatable {
    public enum Decision: Sendable, Equatable {
        /// Close the device, wait this long, reopen and replay the job from its start.
        case retry(afterMs: Int)
        /// Report the job failed.
        case giveUp
    }

    public let settings: RecoverySettings
    /// Failures since the device last worked.
    public private(set) var consecutiveFailures = 0
    /// Device failures since start.
    public private(set) var failures = 0
    /// Times the device came back after failing.
    public private(set) var recoveries = 0
    /// Jobs given up on because the device stayed away.
    public private(set) var jobsGivenUp = 0
    /// When (monotonic ns) the current job first failed.
    private var jobFailingSince: UInt64?
    /// Given up on: the device failed for `giveUpAfterMs`, and has not worked since.
    public private(set) var isMissing = false

    public init(settings: RecoverySettings) {
        self.settings = settings
    }

    public var isRecovering: Bool { consecutiveFailures > 0 }

    /// A new job starts: its own give-up clock starts at its first failure.
    public mutating func jobStarted() {
        jobFailingSince = nil
    }

    /// The device failed at `now` (monotonic ns).
    public mutating func failed(at now: UInt64) -> Decision {
        failures += 1
        consecutiveFailures += 1
        let since = jobFailingSince ?? now
        jobFailingSince = since
        if isMissing || now - since >= UInt64(max(0, settings.giveUpAfterMs)) * 1_000_000 {
            jobsGivenUp += 1
            isMissing = true
            return .giveUp
        }
        return .retry(afterMs: backoff(consecutiveFailures))
    }

    /// The device worked (a job was written). Returns true when this ends a failure streak (a recovery).
    @discardableResult
    public mutating func succeeded() -> Bool {
        jobFailingSince = nil
        isMissing = false
        guard consecutiveFailures > 0 else { return false }
        consecutiveFailures = 0
        recoveries += 1
        return true
    }

    /// Given up on `count` more jobs than the one `failed` gave up on (every job waiting fails with it).
    public mutating func gaveUp(more count: Int) {
        jobsGivenUp += max(0, count)
    }

    /// Backoff before retry number `failures` (1-based): initial × 2^(n−1), at most the maximum.
    public func backoff(_ failures: Int) -> Int {
        let initial = max(1, settings.initialBackoffMs)
        let shift = min(max(0, failures - 1), 30)
        return min(max(initial, settings.maximumBackoffMs), initial << shift)
    }
}

/// What a PCM error code means for a writer, following alsa-utils' aplay and speech-dispatcher's ALSA output:
/// underrun and suspend are recovered in place, "try again"/"interrupted" are retried, anything else means the
/// device is gone (unplugged, sound server died) and the job goes to `DeviceRecovery`.
public enum PCMErrorKind: Sendable, Equatable {
    /// -EPIPE: the buffer ran dry; re-prepare and go on.
    case underrun
    /// -ESTRPIPE: the system suspended; resume (or re-prepare) and go on.
    case suspended
    /// -EAGAIN: no room yet; wait for the device.
    case tryAgain
    /// -EINTR: a signal interrupted the call; call again.
    case interrupted
    /// Anything else (-ENODEV, -EIO, -EBADFD, -ENOTCONN …): reopen later.
    case deviceLost

    public init(code: Int32) {
        switch -code {
        case EPIPE: self = .underrun
        case ESTRPIPE: self = .suspended
        case EAGAIN: self = .tryAgain
        case EINTR: self = .interrupted
        default: self = .deviceLost
        }
    }
}
