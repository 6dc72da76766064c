#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The socket protocol (docs/protocol.md): one JSON object per line each way, `id` echoed in replies.
public enum ProtocolVersion {
    public static let current = 1
    /// Longest request line accepted by default, in bytes (newline excluded).
    public static let maximumLineLength = 16 * 1024
}

/// The operations of the protocol.
public enum Operation: String, Sendable, CaseIterable, Codable {
    case say, prompt, text, status, queue, cancel, replay, history, volume, ping, metrics, today, subscribe, corpus
    case combine
    /// A repeating notice: started, or stopped (`stop`).
    case repeatNotice = "repeat"
}

/// What a peer may do. `read` only looks; `submit` also makes the speaker speak (say, prompt, text: the push
/// listener's role); `control` also changes what others asked for or the speaker itself (cancel, replay, volume).
public enum Access: String, Sendable, Codable, Comparable {
    case none, read, submit, control

    private var rank: Int {
        switch self {
        case .none: 0
        case .read: 1
        case .submit: 2
        case .control: 3
        }
    }

    public static func < (lhs: Access, rhs: Access) -> Bool { lhs.rank < rhs.rank }
}

/// A request as it arrives on the socket. Every field but `op` is optional; each operation checks its own.
/// Unknown fields are ignored, so that newer clients can talk to older daemons.
public struct Request: Codable, Sendable, Equatable {
    /// Echoed in every reply. A JSON string; a JSON integer is accepted and echoed as a string.
    public var id: String?
    /// Protocol version the client speaks; refused if it is newer than ``ProtocolVersion/current``.
    public var v: Int?
    public var op: String
    // say
    public var amount: String?
    public var fen: Int64?
    public var channel: String?
    public var refund: Bool?
    public var lang: String?
    public var style: String?
    public var liang: Bool?
    public var order: String?
    // say, prompt, replay
    public var priority: String?
    /// Seconds; 0 means no ttl. Absent: the priority class's default.
    public var ttl: Double?
    public var wait: Bool?
    // prompt
    public var prompt: String?
    // text: free text (synthesised with espeak-ng in the voice pack's language)
    public var text: String?
    // cancel, replay
    public var job: UInt64?
    public var all: Bool?
    // history
    public var limit: Int?
    // volume
    public var threshold: Int?
    public var reset: Bool?
    /// The speaker's everyday level, percent on alsamixer's scale.
    public var level: Int?
    // today: the local day (YYYY-MM-DD; absent: today), and whether to speak it (a job, with `wait` and `lang`)
    public var date: String?
    public var say: Bool?
    // subscribe: replay the final states of the jobs with an id above this one first
    public var since: UInt64?
    // combine: the parts of a combination broadcast, in order
    public var parts: [Part]?
    // say, prompt, text, combine: play through the owner's mute, if the terminal allows it (`audio.allow_enforce`)
    public var enforce: Bool?
    // replay without `job`: the last spoken job of this kind, `payment` (absent) or `combination`
    public var kind: String?
    // repeat: seconds between two times, how many times at most, or stop it (`order`, or `all`)
    public var every: Double? = nil
    public var times: Int? = nil
    public var stop: Bool? = nil

    /// One part of a `combine` request: exactly one of its fields.
    public struct Part: Codable, Sendable, Equatable {
        /// A clip by id: a pushed clip, else a token of the voice pack.
        public var clip: String?
        /// An amount, yuan as text (as `say`'s `amount`).
        public var amount: String?
        /// Digits read one by one, `0`–`9` only.
        public var digits: String?

        public init(clip: String? = nil, amount: String? = nil, digits: String? = nil) {
            self.clip = clip
            self.amount = amount
            self.digits = digits
        }

        /// A part written as Alibaba Cloud IoT's combination lists write one: `{$12.50}` an amount, `{#0423}` digits
        /// (our choice: the platform leaves other dynamic parts to the device), anything else a clip id.
        public init(listItem item: String) {
            if item.hasPrefix("{$"), item.hasSuffix("}"), item.count >= 3 {
                self.init(amount: String(item.dropFirst(2).dropLast()))
            } else if item.hasPrefix("{#"), item.hasSuffix("}"), item.count >= 3 {
                self.init(digits: String(item.dropFirst(2).dropLast()))
            } else {
                self.init(clip: item)
            }
        }
    }

    public init(
        id: String? = nil, v: Int? = nil, op: String, amount: String? = nil, fen: Int64? = nil,
        channel: String? = nil, refund: Bool? = nil, lang: String? = nil, style: String? = nil,
        liang: Bool? = nil, order: String? = nil, priority: String? = nil, ttl: Double? = nil, wait: Bool? = nil,
        prompt: String? = nil, job: UInt64? = nil, all: Bool? = nil, limit: Int? = nil, threshold: Int? = nil,
        reset: Bool? = nil, text: String? = nil, level: Int? = nil, date: String? = nil, say: Bool? = nil,
        since: UInt64? = nil, parts: [Part]? = nil, enforce: Bool? = nil, kind: String? = nil
    ) {
        self.kind = kind
        self.id = id
        self.v = v
        self.op = op
        self.amount = amount
        self.fen = fen
        self.channel = channel
        self.refund = refund
        self.lang = lang
        self.style = style
        self.liang = liang
        self.order = order
        self.priority = priority
        self.ttl = ttl
        self.wait = wait
        self.prompt = prompt
        self.job = job
        self.all = all
        self.limit = limit
        self.threshold = threshold
        self.reset = reset
        self.text = text
        self.level = level
        self.date = date
        self.say = say
        self.since = since
        self.parts = parts
        self.enforce = enforce
    }

    enum CodingKeys: String, CodingKey {
        case id, v, op, amount, fen, channel, refund, lang, style, liang, order, priority, ttl, wait, prompt, job,
            all, limit, threshold, reset, text, level, date, say, since, parts, enforce, kind, every, times, stop
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if let text = try? c.decodeIfPresent(String.self, forKey: .id) {
            id = text
        } else {
            id = try c.decodeIfPresent(Int64.self, forKey: .id).map(String.init)
        }
        v = try c.decodeIfPresent(Int.self, forKey: .v)
        op = try c.decode(String.self, forKey: .op)
        amount = try c.decodeIfPresent(String.self, forKey: .amount)
        fen = try c.decodeIfPresent(Int64.self, forKey: .fen)
        channel = try c.decodeIfPresent(String.self, forKey: .channel)
        refund = try c.decodeIfPresent(Bool.self, forKey: .refund)
        lang = try c.decodeIfPresent(String.self, forKey: .lang)
        style = try c.decodeIfPresent(String.self, forKey: .style)
        liang = try c.decodeIfPresent(Bool.self, forKey: .liang)
        order = try c.decodeIfPresent(String.self, forKey: .order)
        priority = try c.decodeIfPresent(String.self, forKey: .priority)
        ttl = try c.decodeIfPresent(Double.self, forKey: .ttl)
        wait = try c.decodeIfPresent(Bool.self, forKey: .wait)
        prompt = try c.decodeIfPresent(String.self, forKey: .prompt)
        job = try c.decodeIfPresent(UInt64.self, forKey: .job)
        all = try c.decodeIfPresent(Bool.self, forKey: .all)
        limit = try c.decodeIfPresent(Int.self, forKey: .limit)
        threshold = try c.decodeIfPresent(Int.self, forKey: .threshold)
        reset = try c.decodeIfPresent(Bool.self, forKey: .reset)
        text = try c.decodeIfPresent(String.self, forKey: .text)
        level = try c.decodeIfPresent(Int.self, forKey: .level)
        date = try c.decodeIfPresent(String.self, forKey: .date)
        say = try c.decodeIfPresent(Bool.self, forKey: .say)
        since = try c.decodeIfPresent(UInt64.self, forKey: .since)
        parts = try c.decodeIfPresent([Part].self, forKey: .parts)
        enforce = try c.decodeIfPresent(Bool.self, forKey: .enforce)
        kind = try c.decodeIfPresent(String.self, forKey: .kind)
        every = try c.decodeIfPresent(Double.self, forKey: .every)
        times = try c.decodeIfPresent(Int.self, forKey: .times)
        stop = try c.decodeIfPresent(Bool.self, forKey: .stop)
    }
}

/// The error object of a reply.
public struct ErrorInfo: Codable, Sendable, Equatable {
    public var code: String
    public var message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public init(_ error: AnnounceError) {
        self.init(code: error.code.rawValue, message: error.message)
    }
}

/// A job as reported to clients (`say`, `queue`, `history`, `cancel` …).
public struct JobInfo: Codable, Sendable, Equatable {
    public var id: UInt64
    public var state: JobState
    public var priority: JobPriority?
    public var text: String?
    public var tokens: [String]?
    public var amount: String?
    public var channel: String?
    public var refund: Bool?
    public var prompt: String?
    public var lang: String?
    public var order: String?
    /// The job this one replays (`replay`).
    public var replayOf: UInt64?
    /// Jobs ahead of this one when it was accepted or listed (0: next to play).
    public var position: Int?
    /// Wall-clock times, ISO 8601 UTC with milliseconds.
    public var acceptedAt: String?
    public var startedAt: String?
    public var finishedAt: String?
    /// The ttl the job was accepted with, seconds (absent: none).
    public var ttl: Double?
    /// Request received → first sample of the announcement handed to ALSA, milliseconds (composing and the
    /// journal commit included; after the lead-in, if one was played before it).
    public var firstSampleMs: Double?
    /// Request received → first sample of the lead-in handed to ALSA, when the job started a stream with one.
    public var leadInStartMs: Double?
    /// Request received → finished, milliseconds (for `spoken`: its last sample had left the device).
    public var finishedMs: Double?
    public var error: ErrorInfo?
    /// Times its playback began, when more than zero (2 or more: played again from its start after its first
    /// playing was cut off — a device failure, or a daemon that stopped before its end was heard).
    public var attempts: Int?
    /// False on a job accepted while the daemon keeps its journal in memory (its state folder cannot be used,
    /// `status.journal.problem` says why): spoken as ever, but lost if the daemon stops before the journal is back
    /// on disk. Absent: on disk.
    public var durable: Bool?
    /// True on a job that asked to play through the owner's mute (`enforce`); whether it may is the terminal's
    /// `audio.allow_enforce`.
    public var enforce: Bool?

    public init(
        id: UInt64, state: JobState, priority: JobPriority? = nil, text: String? = nil, tokens: [String]? = nil,
        amount: String? = nil, channel: String? = nil, refund: Bool? = nil, prompt: String? = nil,
        lang: String? = nil, order: String? = nil, replayOf: UInt64? = nil, position: Int? = nil,
        acceptedAt: String? = nil, startedAt: String? = nil, finishedAt: String? = nil, ttl: Double? = nil,
        firstSampleMs: Double? = nil, finishedMs: Double? = nil, error: ErrorInfo? = nil, attempts: Int? = nil,
        leadInStartMs: Double? = nil, enforce: Bool? = nil
    ) {
        self.enforce = enforce
        self.id = id
        self.state = state
        self.priority = priority
        self.text = text
        self.tokens = tokens
        self.amount = amount
        self.channel = channel
        self.refund = refund
        self.prompt = prompt
        self.lang = lang
        self.order = order
        self.replayOf = replayOf
        self.position = position
        self.acceptedAt = acceptedAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.ttl = ttl
        self.firstSampleMs = firstSampleMs
        self.finishedMs = finishedMs
        self.error = error
        self.attempts = attempts
        self.leadInStartMs = leadInStartMs
    }
}

/// A reply. `done` is false only on the acceptance reply of a `wait` request; the final reply follows.
public struct Response: Codable, Sendable, Equatable {
    public var id: String?
    public var ok: Bool
    public var done: Bool
    /// Protocol version (`ping`, `status`).
    public var v: Int?
    /// The job a `say`/`prompt`/`replay` created, or for `duplicate` the original job.
    public var job: JobInfo?
    /// `queue` (play order, the playing job first), `history` (newest first), `cancel` (what was cancelled).
    public var jobs: [JobInfo]?
    public var status: DaemonStatus?
    public var volume: AudioStatus?
    /// `metrics`: Prometheus text exposition format.
    public var metrics: String?
    /// `today`: the day's payments and refunds heard.
    public var summary: DaySummary?
    /// `corpus`: the pushed clips loaded now.
    public var corpus: DaemonStatus.Corpus?
    /// `repeat`: the repeat started (or, for `duplicate`, the one of that id), or stopped; the `repeat` event's.
    public var `repeat`: RepeatInfo? = nil
    /// `repeat` with `stop`: every repeat it stopped.
    public var repeats: [RepeatInfo]? = nil
    public var error: ErrorInfo?
    /// `subscribe`: what this line reports, a ``SubscriptionEvent`` name (text, so that an older client reads a
    /// newer daemon's events).
    public var event: String?

    public init(
        id: String?, ok: Bool, done: Bool = true, v: Int? = nil, job: JobInfo? = nil, jobs: [JobInfo]? = nil,
        status: DaemonStatus? = nil, volume: AudioStatus? = nil, metrics: String? = nil, error: ErrorInfo? = nil,
        summary: DaySummary? = nil, event: String? = nil, corpus: DaemonStatus.Corpus? = nil
    ) {
        self.id = id
        self.ok = ok
        self.done = done
        self.v = v
        self.job = job
        self.jobs = jobs
        self.status = status
        self.volume = volume
        self.metrics = metrics
        self.error = error
        self.summary = summary
        self.event = event
        self.corpus = corpus
    }

    public static func failure(id: String?, _ error: AnnounceError, job: JobInfo? = nil) -> Response {
        Response(id: id, ok: false, job: job, error: ErrorInfo(error))
    }
}

/// Wall-clock milliseconds since 1970, and their ISO 8601 form used on the wire.
public enum WallClock {
    public static var nowMs: Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

    public static func iso8601(ms: Int64) -> String {
        // Half a millisecond more: the style truncates to milliseconds, and ms / 1000 is seldom exact in binary
        // (…589.372 is …589.37199…, which would be written …589.371).
        Date(timeIntervalSince1970: (Double(ms) + 0.5) / 1000).formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
