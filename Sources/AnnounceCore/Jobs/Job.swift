/// Where a job is in its life. The last four are final.
public enum JobState: String, Sendable, Codable, Equatable, CaseIterable {
    case queued, playing, spoken, failed, expired, cancelled

    public var isFinal: Bool {
        switch self {
        case .queued, .playing: false
        case .spoken, .failed, .expired, .cancelled: true
        }
    }
}

/// The priority classes, learned from speech-dispatcher's (important / message / notification). The exact
/// rules are in docs/protocol.md ("Queue rules") and enforced by ``JobQueue``:
/// - `urgent` goes before every waiting job (FIFO among urgent jobs), never interrupts the job playing, never
///   dropped; counts toward the queue bound. Like speechd's `important`.
/// - `payment` is FIFO and never dropped; counts toward the queue bound. Like speechd's `message`.
/// - `notice` (a shop's notices: a new takeout order, a repeating reminder) is FIFO and never dropped, counts toward
///   the bound, and plays only when no urgent or payment job waits. It is the one class another job interrupts: a
///   payment or urgent job accepted while a notice plays cuts it, and the notice is heard again, whole, after it.
/// - `status` (network/server prompts) plays only when no urgent, payment or notice job waits; at most one waits —
///   a newer one replaces it ("last one wins", the older ends `cancelled`/`superseded`); it does not count
///   toward the bound, so a status prompt never makes room by dropping a payment, and is never refused as
///   `queue_full`. Like speechd's `notification`/`progress`.
public enum JobPriority: String, Sendable, Codable, Equatable, CaseIterable, Comparable {
    case urgent, payment, notice, status

    /// Dequeue rank: lower goes first.
    var rank: Int {
        switch self {
        case .urgent: 0
        case .payment: 1
        case .notice: 2
        case .status: 3
        }
    }

    /// Whether a job of this class, accepted while a job of class `playing` plays, cuts it (the cut job is played
    /// again from its start after it): payments and urgent jobs cut a notice, nothing else cuts anything.
    public func interrupts(_ playing: JobPriority) -> Bool { playing == .notice && rank < playing.rank }

    /// Urgent and payment jobs are bounded by the queue capacity and never dropped.
    public var isBounded: Bool { self != .status }

    public static func < (lhs: JobPriority, rhs: JobPriority) -> Bool { lhs.rank < rhs.rank }
}

/// What the queue needs to know to order and expire an element.
public protocol Schedulable: Sendable {
    /// Unique, and growing with acceptance: the queue keeps each lane in id order.
    var id: UInt64 { get }
    var priority: JobPriority { get }
    /// Monotonic deadline (``Monotonic/nanos``) after which the element is not played, or nil.
    var expiresAt: UInt64? { get }
}

/// One accepted announcement. Composed at acceptance, so a job that is queued can always be spoken.
public struct Job: Sendable, Identifiable, Equatable, Schedulable {
    public var id: UInt64
    public var utterance: Utterance
    public var order: String?
    public var announcement: Announcement
    /// Monotonic time (nanoseconds, `ContinuousClock`-based) at which the request was accepted. For a job
    /// recovered from the journal after a restart it is the daemon's start if the acceptance was earlier.
    public var acceptedAt: UInt64
    public var priority: JobPriority
    /// Monotonic deadline from the job's ttl, or nil: no ttl.
    public var expiresAt: UInt64?
    /// The voice pack the job was composed with and is rendered with; nil: the player's own pack.
    /// Carried by the job so that a voice pack reload (SIGHUP) never breaks a job already queued.
    public var voice: VoicePack?
    /// Times its playing began in earlier runs (a job recovered from the journal after it was cut off).
    public var attempts = 0
    /// Play through the owner's mute, if the terminal allows it (``VolumeGuard/allowEnforce``).
    public var enforce = false

    public init(
        id: UInt64, utterance: Utterance, order: String? = nil, announcement: Announcement, acceptedAt: UInt64,
        priority: JobPriority = .payment, expiresAt: UInt64? = nil, voice: VoicePack? = nil
    ) {
        self.id = id
        self.utterance = utterance
        self.order = order
        self.announcement = announcement
        self.acceptedAt = acceptedAt
        self.priority = priority
        self.expiresAt = expiresAt
        self.voice = voice
    }

    public static func == (lhs: Job, rhs: Job) -> Bool {
        lhs.id == rhs.id && lhs.utterance == rhs.utterance && lhs.order == rhs.order
            && lhs.announcement == rhs.announcement && lhs.acceptedAt == rhs.acceptedAt
            && lhs.priority == rhs.priority && lhs.expiresAt == rhs.expiresAt
            && lhs.voice?.manifest == rhs.voice?.manifest
    }
}

/// How a job ended, with the daemon's own monotonic timestamps.
public struct JobResult: Sendable, Equatable {
    public var id: UInt64
    public var state: JobState
    public var error: AnnounceError?
    /// Accepted → first sample of the announcement itself (after any lead-in) handed to ALSA, in nanoseconds.
    public var firstSampleNanos: UInt64?
    /// Accepted → first sample of the lead-in handed to ALSA, when the job started a stream with one.
    public var leadInStartNanos: UInt64?
    /// The lead-in played before it, milliseconds (nil: none).
    public var leadInMs: Int?
    /// Accepted → finished (for `spoken`: its last sample had left the device), in nanoseconds.
    public var finishedNanos: UInt64?
    /// Frames of the announcement.
    public var frames: Int
    /// Times its playback began (more than 1: played again from its start after a device failure).
    public var attempts: Int
    /// When (``Monotonic/nanos``) its last sample was found to have left the device; nil unless heard.
    public var heardAt: UInt64?

    public init(
        id: UInt64, state: JobState, error: AnnounceError? = nil, firstSampleNanos: UInt64? = nil,
        finishedNanos: UInt64? = nil, frames: Int = 0, attempts: Int = 0
    ) {
        self.id = id
        self.state = state
        self.error = error
        self.firstSampleNanos = firstSampleNanos
        self.finishedNanos = finishedNanos
        self.frames = frames
        self.attempts = attempts
    }
}

/// Monotonic nanoseconds since an arbitrary start, the clock of every job timing.
public enum Monotonic {
    private static let origin = ContinuousClock.now
    public static var nanos: UInt64 {
        let elapsed = ContinuousClock.now - origin
        let (seconds, attoseconds) = elapsed.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}
