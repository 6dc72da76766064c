import AnnounceClient
import AnnounceCore

/// What became of a payment handed to the daemon, and so whether its MQTT message may be acknowledged.
public enum ForwardOutcome: Sendable, Equatable {
    /// Queued as a new job: acknowledge.
    case accepted(JobInfo)
    /// The daemon already has this order (a redelivery): acknowledge; it is not spoken again.
    case duplicate(JobInfo?)
    /// The daemon refused the request itself (it can never be spoken, e.g. an unknown channel): acknowledge.
    case refused(ErrorInfo)
    /// The daemon could not take it now (down, busy, queue full, stopping …): do not acknowledge; retry.
    case unavailable(String)
    /// A repeating notice started (`started`), or already known by its id (a start sent again): acknowledge.
    case repeatNotice(RepeatInfo, started: Bool)
    /// The repeats a stop ended (as they ended): acknowledge.
    case stopped([RepeatInfo])

    public var mayAcknowledge: Bool {
        if case .unavailable = self { return false }
        return true
    }
}

/// The push listener's side of the daemon's socket (the line-JSON protocol of docs/protocol.md, through
/// ``AnnounceClient/Client``): one short connection per request, each with a timeout.
public struct DaemonLink: Sendable {
    public var socketPath: String
    public var timeoutSeconds: Double

    /// Refusals that mean the request can never succeed, so holding the message would only repeat them.
    /// Every other error (queue_full, busy, shutting_down, journal, unauthorized, internal, unknown codes) holds it.
    public static let permanentRefusals: Set<String> = [
        AnnounceError.Code.badRequest.rawValue, AnnounceError.Code.invalidAmount.rawValue,
        AnnounceError.Code.unknownChannel.rawValue, "unknown_language",
        // A combination naming a clip neither the pushed clips nor the pack have.
        AnnounceError.Code.notFound.rawValue,
    ]

    public init(socketPath: String, timeoutSeconds: Double) {
        self.socketPath = socketPath
        self.timeoutSeconds = timeoutSeconds
    }

    /// One request, its final reply; nil with the reason when the exchange failed.
    func exchange(_ request: Request) -> (reply: Response?, failure: String) {
        do {
            let client = try Client(path: socketPath, timeout: timeoutSeconds)
            return (try client.send(request).last, "the daemon sent no reply")
        } catch {
            return (nil, error.message)
        }
    }

    /// Sends a request that queues a job with an order id: a payment's `say` (``VerifiedPayment/request``), a
    /// combination's `combine`.
    public func forward(_ request: Request) -> ForwardOutcome {
        let (answer, failure) = exchange(request)
        guard let reply = answer else { return .unavailable(failure) }
        if reply.ok, let job = reply.job { return .accepted(job) }
        if reply.ok, let info = reply.repeat { return .repeatNotice(info, started: true) }
        if reply.ok, let stopped = reply.repeats { return .stopped(stopped) }
        guard let error = reply.error else { return .unavailable("the daemon replied without a job or an error") }
        if error.code == AnnounceError.Code.duplicate.rawValue, let info = reply.repeat {
            return .repeatNotice(info, started: false)
        }
        if error.code == AnnounceError.Code.duplicate.rawValue { return .duplicate(reply.job) }
        if Self.permanentRefusals.contains(error.code) { return .refused(error) }
        return .unavailable("\(error.code): \(error.message)")
    }

    /// The job of a forwarded request once it is final, waiting at most `timeout` seconds; nil if it is not by then.
    /// Asked as the same request with `wait`: the daemon answers it as a duplicate once the original job has finished
    /// (nothing new is queued).
    public func final(of request: Request, timeout: Double) -> JobInfo? {
        var request = request
        request.wait = true
        do {
            let client = try Client(path: socketPath, timeout: max(0.1, timeout))
            guard let job = try client.send(request).last?.job, job.state.isFinal else { return nil }
            return job
        } catch {
            return nil
        }
    }

    /// A repeating notice as the daemon has it now (running or ended); nil if it cannot say (unreachable, unknown).
    public func repeatInfo(_ order: String) -> RepeatInfo? {
        exchange(Request(op: "repeat", order: order)).reply?.repeat
    }

    /// Asks the daemon to speak a status prompt; returns the refusal or failure, nil when queued.
    public func prompt(_ name: String) -> String? {
        let (answer, failure) = exchange(Request(op: "prompt", prompt: name))
        guard let reply = answer else { return failure }
        return reply.ok ? nil : reply.error.map { "\($0.code): \($0.message)" } ?? "refused"
    }

    /// The daemon's `status` (what it may be asked by this peer, its dedup window), nil if it cannot be had.
    public func status() -> DaemonStatus? {
        exchange(Request(op: "status")).reply?.status
    }

    /// What the daemon said to `corpus` (load the pushed clips installed now).
    public enum CorpusReload: Sendable, Equatable {
        /// What it has loaded (its `error` says why a newer version could not be).
        case loaded(DaemonStatus.Corpus)
        /// It loads no pushed clips, or refuses this user: asking again will not help.
        case refused(ErrorInfo)
        /// It cannot be asked now (down, busy, stopping): ask again later.
        case unavailable(String)
    }

    /// Asks the daemon to load the version of the pushed clips its corpus folder holds now.
    public func reloadCorpus() -> CorpusReload {
        let (answer, failure) = exchange(Request(op: "corpus"))
        guard let reply = answer else { return .unavailable(failure) }
        if reply.ok, let corpus = reply.corpus { return .loaded(corpus) }
        guard let error = reply.error else { return .unavailable("the daemon replied without the pushed clips") }
        if error.code == AnnounceError.Code.notFound.rawValue || error.code == AnnounceError.Code.badRequest.rawValue {
            return .refused(error)
        }
        return .unavailable("\(error.code): \(error.message)")
    }

    /// Whether the daemon answers.
    public func ping() -> Bool {
        exchange(Request(op: "ping")).reply?.ok == true
    }
}
