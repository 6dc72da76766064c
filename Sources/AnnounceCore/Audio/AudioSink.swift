/// Where rendered samples go: an ALSA PCM in the daemon, a recording or fault-injecting fake in tests.
/// Owned and called by the audio thread only, except `wake()` and `status`, which any thread may use.
public protocol AudioSink: AnyObject {
    /// Opens (or keeps open) the device for mono S16 at `sampleRate`. Idempotent while open.
    func open(sampleRate: Int) throws(AnnounceError)
    /// Writes all samples. Recovers from underruns, suspends and interrupted calls by itself (counting them in
    /// `status`); throws only when the device is gone or unusable. Returns early, with the number of frames
    /// written, as soon as `stop` says so — checked at least once per period and whenever `wake()` is called —
    /// or once the device has played the point `mark` names: the number of frames written before this call
    /// that follow it (nil: no such point). The player marks the end of the oldest job not yet heard, so that
    /// it learns the job was heard when it was, not up to a period later.
    func write(_ samples: ArraySlice<Int16>, stop: () -> Bool, mark: () -> Int?) throws(AnnounceError) -> Int
    /// Frames written and not played yet: what the device (and a sound server behind it) still holds, ALSA's
    /// delay. 0 once everything written has left the device. A job counts as heard only when its last frame
    /// has left (docs/protocol.md, "Durability"), which the player learns from this.
    func pendingFrames() throws(AnnounceError) -> Int
    /// Waits until everything written has been played, calling `interrupt` with the frames still pending at
    /// least once per period, on `wake()`, and as soon as the point `mark` names (the frames written after it)
    /// has been played. Returns true when all was played, false when `interrupt` ended the wait first (nothing
    /// dropped).
    func waitUntilPlayed(mark: () -> Int?, interrupt: (_ pendingFrames: Int) -> Bool) throws(AnnounceError) -> Bool
    /// Stops the stream after what was written has played (immediate after `waitUntilPlayed`).
    func drain()
    /// Discards whatever is still buffered (a cancel).
    func drop()
    /// Releases the device.
    func close()
    /// Wakes a blocked `write` or `waitUntilPlayed` so it re-checks its condition. Any thread.
    func wake()
    /// What the sink knows about the device now. Any thread.
    var status: SinkStatus { get }
}

extension AudioSink {
    /// `write` with no point to wake for.
    public func write(_ samples: ArraySlice<Int16>, stop: () -> Bool) throws(AnnounceError) -> Int {
        try write(samples, stop: stop, mark: { nil })
    }

    /// `waitUntilPlayed` with no point to wake for before the end.
    public func waitUntilPlayed(interrupt: (_ pendingFrames: Int) -> Bool) throws(AnnounceError) -> Bool {
        try waitUntilPlayed(mark: { nil }, interrupt: interrupt)
    }
}

/// A sink's view of its device, for `status` replies and logs.
public struct SinkStatus: Sendable, Equatable, Codable {
    /// The device name (ALSA PCM).
    public var device: String
    /// Whether the device is open now.
    public var isOpen = false
    /// Negotiated parameters while open (or of the last open).
    public var sampleRate: Int?
    public var channels: Int?
    public var format: String?
    public var periodFrames: Int?
    public var bufferFrames: Int?
    /// The device mixes what is written into a ring other clients share (dmix): with another client holding the
    /// card, a dead writer's samples still play. The player then writes a job's end at most
    /// ``Player/Settings/endAheadMs`` ahead of the speaker.
    public var sharedRing: Bool?
    /// Underruns recovered (the device ran dry and was restarted).
    public var xruns = 0
    /// Suspends recovered (system sleep, the device resumed or was re-prepared).
    public var suspends = 0
    /// Calls retried after `EINTR`/`EAGAIN`-style interruptions that were not plain "no room yet" waits.
    public var interruptions = 0
    /// Times the device was opened since start (once per burst unless it is kept open; again after a failure).
    public var opens = 0

    public init(device: String) {
        self.device = device
    }

    /// `opens` and `sharedRing` are newer than the rest: a status from a daemon without them decodes (0, nil).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        device = try container.decode(String.self, forKey: .device)
        isOpen = try container.decode(Bool.self, forKey: .isOpen)
        sampleRate = try container.decodeIfPresent(Int.self, forKey: .sampleRate)
        channels = try container.decodeIfPresent(Int.self, forKey: .channels)
        format = try container.decodeIfPresent(String.self, forKey: .format)
        periodFrames = try container.decodeIfPresent(Int.self, forKey: .periodFrames)
        bufferFrames = try container.decodeIfPresent(Int.self, forKey: .bufferFrames)
        sharedRing = try container.decodeIfPresent(Bool.self, forKey: .sharedRing)
        xruns = try container.decode(Int.self, forKey: .xruns)
        suspends = try container.decode(Int.self, forKey: .suspends)
        interruptions = try container.decode(Int.self, forKey: .interruptions)
        opens = try container.decodeIfPresent(Int.self, forKey: .opens) ?? 0
    }
}

/// The audio engine's counters since start (``Player/health()``): what the metrics export as audio health.
public struct AudioHealth: Sendable {
    public var state: AudioEngineStatus.DeviceState
    /// Underruns and suspends recovered in place.
    public var xruns: Int
    public var suspends: Int
    /// Times the PCM was opened.
    public var opens: Int
    /// Device failures (each one closed the device and retried it), and comebacks after them.
    public var deviceFailures: Int
    public var recoveries: Int
    /// Jobs reported failed because the device stayed away too long.
    public var jobsGivenUp: Int
    /// Alerts that raised the volume, restores after them, and restores left to an owner who changed it.
    public var volumeRaises: Int
    public var volumeRestores: Int
    public var volumeUserOverrides: Int
    /// Per ducked control (`CTL/ELEMENT`), how many bursts lowered it.
    public var ducks: [(control: String, count: Int)]

    public init(
        state: AudioEngineStatus.DeviceState, xruns: Int = 0, suspends: Int = 0, opens: Int = 0,
        deviceFailures: Int = 0, recoveries: Int = 0, jobsGivenUp: Int = 0, volumeRaises: Int = 0,
        volumeRestores: Int = 0, volumeUserOverrides: Int = 0, ducks: [(control: String, count: Int)] = []
    ) {
        self.state = state
        self.xruns = xruns
        self.suspends = suspends
        self.opens = opens
        self.deviceFailures = deviceFailures
        self.recoveries = recoveries
        self.jobsGivenUp = jobsGivenUp
        self.volumeRaises = volumeRaises
        self.volumeRestores = volumeRestores
        self.volumeUserOverrides = volumeUserOverrides
        self.ducks = ducks
    }
}
