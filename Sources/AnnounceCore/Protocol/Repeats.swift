/// Repeating notices (`repeat`, docs/protocol.md "Repeating notices"): a combination said again and again — "you
/// have a new takeout order" every 30 seconds — until it is stopped (a `repeat` with `stop`, the fleet's stop
/// message, the shop pressing the replay key) or has been said `times` times. Each time is a job of class `notice`:
/// it never plays while a payment waits, and a payment accepted while it plays cuts it (it is said again after).

/// Where a repeating notice is in its life. Every state but `repeating` is final.
public enum RepeatState: String, Sendable, Codable, Equatable, CaseIterable {
    /// Being said, time after time.
    case repeating
    /// Said `times` times.
    case done
    /// Stopped by a `repeat` with `stop` (the fleet's stop message, `announce-ctl repeat --stop`).
    case stopped
    /// Stopped by the shop: the replay key pressed while it repeated.
    case acknowledged
    /// A time could not be queued (its clips were deleted since, the voice pack has no such language any more).
    case failed

    public var isFinal: Bool { self != .repeating }
}

/// A validated `repeat` that starts one: what is said, how often, how many times.
public struct RepeatPlan: Sendable, Equatable, Codable {
    /// The repeat's own id (the request's `order`): a start sent again with it is a duplicate, and `stop` names it.
    public var order: String
    public var parts: [CombinationPart]
    public var lang: String?
    public var style: ReadingStyle?
    public var liang: Bool?
    public var enforce: Bool
    /// Silence between the end of one time and the start of the next, milliseconds.
    public var everyMs: Int64
    /// Most times it is said.
    public var times: Int

    public init(
        order: String, parts: [CombinationPart], lang: String? = nil, style: ReadingStyle? = nil, liang: Bool? = nil,
        enforce: Bool = false, everyMs: Int64, times: Int
    ) {
        self.order = order
        self.parts = parts
        self.lang = lang
        self.style = style
        self.liang = liang
        self.enforce = enforce
        self.everyMs = everyMs
        self.times = times
    }

    /// Shortest and longest pause between two times, seconds.
    public static let everyRange: ClosedRange<Double> = 1...3600
    /// Most times one repeat is said, and how many when `times` is absent.
    public static let maximumTimes = 1000
    public static let defaultTimes = 10
    /// Most repeats running at once.
    public static let maximumRunning = 16

    /// The job that says it the `time`-th time (1-based): a combination of class `notice`, its order id the
    /// repeat's with the time (`A1#3`), so that one queued again after a restart is the same job, not a second.
    public func occurrence(_ time: Int) -> JobRequest {
        JobRequest(
            utterance: .combination(parts), lang: lang, style: style, liang: liang, order: "\(order)#\(time)",
            priority: .notice, ttlMs: 0, enforce: enforce)
    }
}

/// A repeating notice as reported to clients (the `repeat` reply, `status.repeats`, the `repeat` event).
public struct RepeatInfo: Codable, Sendable, Equatable {
    public var order: String
    public var state: RepeatState
    /// The sentence said each time.
    public var text: String?
    public var every: Double
    public var times: Int
    /// Times that have ended so far (heard or not), and of those the times heard to their end.
    public var played: Int
    public var heard: Int
    /// The job saying it now, or waiting to (absent between two times).
    public var job: UInt64?
    public var startedAt: String?
    public var endedAt: String?
    /// Why it failed (`failed`).
    public var error: ErrorInfo?

    public init(
        order: String, state: RepeatState, text: String? = nil, every: Double, times: Int, played: Int = 0,
        heard: Int = 0, job: UInt64? = nil, startedAt: String? = nil, endedAt: String? = nil, error: ErrorInfo? = nil
    ) {
        self.order = order
        self.state = state
        self.text = text
        self.every = every
        self.times = times
        self.played = played
        self.heard = heard
        self.job = job
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.error = error
    }
}

/// What a `repeat` request asks.
public enum RepeatCommand: Sendable, Equatable {
    case start(RepeatPlan)
    /// Stop the repeat of this id, or every one running (nil: `all`).
    case stop(order: String?)
    /// The repeat of this id as it is now, running or ended (an `order` and nothing else).
    case show(order: String)
}

extension Request {
    /// Validates a `repeat` request: a start (`parts`, `order`, `every`, optional `times`), a `stop` (`order`, or
    /// `all`), or a look (`order` alone).
    public func repeatCommand() throws(AnnounceError) -> RepeatCommand {
        if stop == true {
            if all == true {
                if order != nil { throw AnnounceError(.badRequest, "stop takes \"order\" or \"all\", not both") }
                return .stop(order: nil)
            }
            guard let order = try orderID() else {
                throw AnnounceError(.badRequest, "a repeat's stop needs its \"order\", or \"all\": true")
            }
            return .stop(order: order)
        }
        guard let order = try orderID() else {
            throw AnnounceError(.badRequest, "a repeat needs an \"order\": its id, to stop it and to send it again safely")
        }
        if parts == nil && every == nil && times == nil && all == nil { return .show(order: order) }
        guard let every, every.isFinite, RepeatPlan.everyRange.contains(every) else {
            throw AnnounceError(
                .badRequest,
                "a repeat needs \"every\": the seconds between two times, "
                    + "\(Int(RepeatPlan.everyRange.lowerBound))…\(Int(RepeatPlan.everyRange.upperBound))")
        }
        let times = self.times ?? RepeatPlan.defaultTimes
        guard (1...RepeatPlan.maximumTimes).contains(times) else {
            throw AnnounceError(.badRequest, "\"times\" must be 1…\(RepeatPlan.maximumTimes)")
        }
        // The parts, the language and the reading as a combination's.
        var combination = self
        combination.op = Operation.combine.rawValue
        combination.order = nil
        let job = try combination.jobRequest()
        guard case .combination(let parts) = job.utterance else {
            throw AnnounceError(.badRequest, "a repeat says a combination")
        }
        if priority != nil { throw AnnounceError(.badRequest, "a repeat is always said as a notice; drop \"priority\"") }
        if ttl != nil || wait == true {
            throw AnnounceError(.badRequest, "a repeat has no \"ttl\" or \"wait\"; stop it with \"stop\"")
        }
        return .start(
            RepeatPlan(
                order: order, parts: parts, lang: job.lang, style: job.style, liang: job.liang, enforce: job.enforce,
                everyMs: Int64((every * 1000).rounded()), times: times))
    }
}
