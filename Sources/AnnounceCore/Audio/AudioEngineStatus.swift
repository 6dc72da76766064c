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
        /// The device cannot be opened: given up after `device_give_up` (the jobs waiting then failed with it), or
        /// absent at start. Each new job tries it once and fails at once if it is still away; it is probed every
        /// few seconds meanwhile.
        case missing
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
    /// The volume guard's report, kept on the heap (see `init(from:)`).
    public var volume: VolumeStatus? {
        get { volumeBox?.value }
        set { volumeBox = newValue.map(StatusBox.init) }
    }
    private var volumeBox: StatusBox<VolumeStatus>?
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

    private enum CodingKeys: String, CodingKey {
        case sink, state, keepOpen, leadInMs, pauseMs, deviceFailures, recoveries, jobsGivenUp, lastError, retryInMs,
            volume, ducking
    }

    /// Written out, with `volume` out of line: with `VolumeStatus` (17 stored properties) inline, the synthesized
    /// decoder of this struct crashed in Swift 6.3.1 debug builds — a bad pointer in an outlined destroy when it
    /// returned, for any input, even `{"sink":{…},"state":"idle",…}`. `StatusCodingTests` decodes one. A field added
    /// to the struct must be added here and to `encode(to:)`: the round trip in `StatusCodingTests` sets every one.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sink = try container.decode(SinkStatus.self, forKey: .sink)
        state = try container.decode(DeviceState.self, forKey: .state)
        keepOpen = try container.decode(Bool.self, forKey: .keepOpen)
        leadInMs = try container.decode(Int.self, forKey: .leadInMs)
        pauseMs = try container.decodeIfPresent(Int.self, forKey: .pauseMs)
        deviceFailures = try container.decode(Int.self, forKey: .deviceFailures)
        recoveries = try container.decode(Int.self, forKey: .recoveries)
        jobsGivenUp = try container.decode(Int.self, forKey: .jobsGivenUp)
        lastError = try container.decodeIfPresent(ErrorInfo.self, forKey: .lastError)
        retryInMs = try container.decodeIfPresent(Int.self, forKey: .retryInMs)
        volume = try container.decodeIfPresent(VolumeStatus.self, forKey: .volume)
        ducking = try container.decodeIfPresent(DuckStatus.self, forKey: .ducking)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sink, forKey: .sink)
        try container.encode(state, forKey: .state)
        try container.encode(keepOpen, forKey: .keepOpen)
        try container.encode(leadInMs, forKey: .leadInMs)
        try container.encodeIfPresent(pauseMs, forKey: .pauseMs)
        try container.encode(deviceFailures, forKey: .deviceFailures)
        try container.encode(recoveries, forKey: .recoveries)
        try container.encode(jobsGivenUp, forKey: .jobsGivenUp)
        try container.encodeIfPresent(lastError, forKey: .lastError)
        try container.encodeIfPresent(retryInMs, forKey: .retryInMs)
        try container.encodeIfPresent(volume, forKey: .volume)
        try container.encodeIfPresent(ducking, forKey: .ducking)
    }
}

/// An immutable value on the heap: keeps a large optional out of its owner's inline layout. Compared by value.
final class StatusBox<Value: Sendable & Equatable>: Sendable, Equatable {
    let value: Value

    init(_ value: Value) { self.value = value }

    static func == (lhs: StatusBox, rhs: StatusBox) -> Bool { lhs.value == rhs.value }
}
