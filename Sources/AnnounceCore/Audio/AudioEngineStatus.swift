/// Everything the audio engine can tell about itself, carried in `AudioStatus.engine` (the `status` and `volume`
/// replies): the device and its negotiated parameters, whether it is recovering, xrun/suspend/recovery counts,
/// the volume now against the threshold, and the ducked controls.
public struct AudioEngineStatus: Sendable, Equatable, Codable {
    public enum DeviceState: String, Sendable, Codable {
        /// Closed, nothing to play.
        case idle
        /// Open between announcements (`keepOpen`).
        case open
        /// An announcement is being written.
        case playing
        /// The device failed; retrying with backoff. The queue is kept.
        case recovering
    }

    public var sink: SinkStatus
    public var state: DeviceState
    public var keepOpen: Bool
    public var leadInMs: Int
    /// Silence between two announcements of a burst, milliseconds.
    public var pauseMs: Int?
    /// Device failures since start (each one closed the device and retried the job).
    public var deviceFailures: Int
    /// Times the device came back after failing.
    public var recoveries: Int
    /// Jobs reported failed because the device stayed away longer than the give-up time.
    public var jobsGivenUp: Int
    /// The last device error, while recovering or since.
    public var lastError: ErrorInfo?
    /// Milliseconds until the next retry, while recovering.
    public var retryInMs: Int?
    public var volume: VolumeStatus?
    public var ducking: DuckStatus?

    public init(
        sink: SinkStatus, state: DeviceState, keepOpen: Bool, leadInMs: Int, deviceFailures: Int, recoveries: Int,
        jobsGivenUp: Int
    ) {
        self.sink = sink
        self.state = state
        self.keepOpen = keepOpen
        self.leadInMs = leadInMs
        self.deviceFailures = deviceFailures
        self.recoveries = recoveries
        self.jobsGivenUp = jobsGivenUp
    }
}
