import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging

/// Turns request lines into replies: decoding, version and access checks, then the daemon's operation.
/// Knows the protocol (docs/protocol.md), not the transport.
struct RequestHandler: Sendable {
    let daemon: Daemon

    /// Default and largest `limit` of `history`.
    static let defaultHistory = 10
    static let maximumHistory = 1000

    /// Handles one line from `peer`; `reply` is called once, or twice for `wait` (acceptance, then the final).
    func handle(line: [UInt8], peer: PeerCredentials, reply: (Response) async throws -> Void) async throws {
        let request: Request
        switch RequestLine.decode(line) {
        case .blank: return
        case .refused(let id, let error): return try await refuse(id, error, reply)
        case .request(let decoded): request = decoded
        }
        do {
            try request.checkVersion()
            let required = try request.requiredAccess()
            let granted = daemon.access(for: peer)
            guard granted >= required else {
                let who = AccessPolicy.userName(peer.uid).map { "\($0) (uid \(peer.uid))" } ?? "uid \(peer.uid)"
                daemon.logger.warning(
                    "request refused: unauthorized",
                    metadata: [
                        "event": .event(.unauthorized), "op": "\(request.op)", "peer.uid": "\(peer.uid)",
                        "peer.pid": "\(peer.pid)",
                    ])
                throw AnnounceError(
                    .unauthorized,
                    "\(who) may not use \(request.op) (it needs \(required.rawValue) access; see access.* in "
                        + "announced.toml)")
            }
            try await perform(request, peer: peer, reply: reply)
        } catch let error as AnnounceError {
            try await refuse(request.id, error, reply)
        }
    }

    private func refuse(_ id: String?, _ error: AnnounceError, _ reply: (Response) async throws -> Void) async throws {
        daemon.metrics.refused(error.code)
        try await reply(.failure(id: id, error))
    }

    private func perform(_ request: Request, peer: PeerCredentials, reply: (Response) async throws -> Void) async throws
    {
        let id = request.id
        switch try request.operation() {
        case .ping:
            try await reply(Response(id: id, ok: true, v: ProtocolVersion.current))
        case .say, .prompt, .text, .combine:
            var job = try request.jobRequest()
            // The terminal's reading style and 两 (per channel) for what the request left open.
            daemon.limits.reading.apply(to: &job)
            try await answer(try await daemon.submit(job), wait: job.wait, id: id, reply: reply)
        case .replay:
            let priority = try request.priorityClass(default: .urgent)
            let submission = try await daemon.replay(
                job: request.job, kind: try request.replayKind(), order: try request.orderID(), priority: priority,
                ttlMs: try request.ttlMilliseconds(), wait: request.wait ?? false)
            try await answer(submission, wait: request.wait ?? false, id: id, reply: reply)
        case .cancel:
            let oneJob = request.job != nil
            let everything = request.all == true
            guard oneJob != everything else {
                throw AnnounceError(.badRequest, "cancel needs either \"job\" (an id) or \"all\": true")
            }
            let cancelled = try await daemon.cancel(job: everything ? nil : request.job)
            try await reply(Response(id: id, ok: true, jobs: cancelled))
        case .queue:
            try await reply(Response(id: id, ok: true, jobs: daemon.queueListing()))
        case .history:
            let limit = request.limit ?? Self.defaultHistory
            guard (1...Self.maximumHistory).contains(limit) else {
                throw AnnounceError(.badRequest, "limit must be 1…\(Self.maximumHistory)")
            }
            let jobs = try await daemon.history(limit: limit)
            try await reply(Response(id: id, ok: true, jobs: jobs))
        case .status:
            let status = await daemon.status(peer: peer)
            try await reply(Response(id: id, ok: true, v: ProtocolVersion.current, status: status))
        case .volume:
            try await reply(Response(id: id, ok: true, volume: try await volume(request)))
        case .today:
            try await today(request, reply: reply)
        case .metrics:
            try await reply(Response(id: id, ok: true, metrics: daemon.metricsText()))
        case .subscribe:
            try await subscribe(since: request.since, id: id, peer: peer, reply: reply)
        case .repeatNotice:
            var response = Response(id: id, ok: true)
            switch try request.repeatCommand() {
            case .start(let plan):
                let (info, started) = try await daemon.startRepeat(plan)
                response.repeat = info
                if !started {
                    daemon.metrics.refused(.duplicate)
                    response.ok = false
                    response.error = ErrorInfo(
                        AnnounceError(
                            .duplicate, "repeat \(plan.order) was already started (\(info.state.rawValue)); not started again"))
                }
            case .stop(let order):
                response.repeats = try await daemon.stopRepeats(order, state: .stopped)
            case .show(let order):
                response.repeat = try await daemon.jobs.repeatInfo(order)
            }
            try await reply(response)
        case .corpus:
            let daemon = self.daemon
            guard let corpus = try await offThePool({ daemon.reloadCorpus() }) else {
                throw AnnounceError(.notFound, "this daemon loads no pushed clips (corpus = \"\" in announced.toml)")
            }
            try await reply(Response(id: id, ok: true, corpus: corpus))
        }
    }

    /// Jobs read from the journal at a time while replaying.
    static let replayPage = 500

    /// `subscribe`: with `since`, the final states on disk of the jobs above it, then `live` (with the jobs above it
    /// not final yet), then every final state as it reaches the disk, until the daemon stops or the subscriber
    /// falls `limits.subscriber_buffer` events behind. Registered before the replay is read, so that nothing falls
    /// between the two; a job both replayed and published live meanwhile is sent once.
    private func subscribe(
        since: UInt64?, id: String?, peer: PeerCredentials, reply: (Response) async throws -> Void
    ) async throws {
        let (token, subscription) = daemon.jobs.events.subscribe(
            who: ["peer.pid": "\(peer.pid)", "peer.uid": "\(peer.uid)"])
        defer { daemon.jobs.events.unsubscribe(token) }
        daemon.logger.debug(
            "subscriber connected", metadata: ["peer.pid": "\(peer.pid)", "since": "\(since.map(String.init) ?? "-")"])
        var replayed = Set<UInt64>()
        var unfinished: [JobInfo] = []
        if let since {
            unfinished = await daemon.jobs.unfinished(after: since)
            var after = since
            while true {
                let page = try await daemon.jobs.finishedJobs(afterID: after, limit: Self.replayPage)
                for record in page {
                    // This run's view if it has one (it knows a little more, e.g. the lead-in); else the journal's.
                    let live = await daemon.jobs.liveInfo(record.jobID).flatMap { $0.state.isFinal ? $0 : nil }
                    let info = live ?? record.info
                    replayed.insert(info.id)
                    try await reply(
                        Response(id: id, ok: true, done: false, job: info, event: SubscriptionEvent.final.rawValue))
                }
                guard page.count == Self.replayPage, let last = page.last else { break }
                after = last.jobID
            }
        }
        try await reply(
            Response(id: id, ok: true, done: false, jobs: unfinished, event: SubscriptionEvent.live.rawValue))
        while true {
            switch await subscription.next() {
            case .final(let info):
                if !replayed.isEmpty, replayed.remove(info.id) != nil { continue }
                try await reply(
                    Response(id: id, ok: true, done: false, job: info, event: SubscriptionEvent.final.rawValue))
            case .repeatEnded(let info):
                var line = Response(id: id, ok: true, done: false, event: SubscriptionEvent.repeatEnded.rawValue)
                line.repeat = info
                try await reply(line)
            case .statusChanged:
                try await reply(Response(id: id, ok: true, done: false, event: SubscriptionEvent.status.rawValue))
            case .ended(let reason):
                try await reply(.failure(id: id, reason))
                return
            }
        }
    }

    /// `volume`: sets the everyday `level` and/or the `threshold` (or `reset`s it), then reports both.
    private func volume(_ request: Request) async throws(AnnounceError) -> AudioStatus {
        let daemon = self.daemon
        if request.reset == true && request.threshold != nil {
            throw AnnounceError(.badRequest, "give either \"threshold\" or \"reset\", not both")
        }
        if let level = request.level {
            guard (0...100).contains(level) else {
                throw AnnounceError(.badRequest, "level must be a percentage 0…100, not \(level)")
            }
            _ = try await offThePool { () throws(AnnounceError) in try daemon.setVolumeLevel(level) }
        }
        if request.reset == true {
            _ = try await daemon.setVolumeThreshold(nil)
        } else if let threshold = request.threshold {
            _ = try await daemon.setVolumeThreshold(threshold)
        }
        return try await offThePool { daemon.audioStatus() }
    }

    /// `today`: the day's payments and refunds heard; with `say`, also spoken (a job; with `wait`, a final reply
    /// when it has played).
    private func today(_ request: Request, reply: (Response) async throws -> Void) async throws {
        let (day, say) = try request.todayRequest()
        let summary = try await daemon.daySummary(day)
        guard let say else { return try await reply(Response(id: request.id, ok: true, summary: summary)) }
        let submission = try await daemon.sayDaySummary(summary, template: say)
        guard case .accepted(let info) = submission else {
            throw AnnounceError(.internalError, "the day's total was taken for a duplicate")
        }
        guard say.wait else { return try await reply(Response(id: request.id, ok: true, job: info, summary: summary)) }
        let owed = daemon.jobs.events.owe()
        defer { daemon.jobs.events.unsubscribe(owed) }
        try await reply(Response(id: request.id, ok: true, done: false, job: info, summary: summary))
        let final = await daemon.waitUntilFinished(info.id) ?? info
        var error = final.state == .spoken ? nil : final.error
        if !final.state.isFinal {
            error = ErrorInfo(AnnounceError(.shuttingDown, "the daemon is stopping; the day's total stays queued"))
        }
        try await reply(Response(id: request.id, ok: error == nil, job: final, error: error, summary: summary))
    }

    /// Replies to a job submission; for `wait`, a second (final) reply when the job has finished.
    private func answer(
        _ submission: Daemon.Submission, wait: Bool, id: String?, reply: (Response) async throws -> Void
    ) async throws {
        // A final reply the stop releases (shutting_down) is written before the connections close.
        let owed = wait ? daemon.jobs.events.owe() : nil
        defer { if let owed { daemon.jobs.events.unsubscribe(owed) } }
        switch submission {
        case .duplicate(let original):
            daemon.metrics.refused(.duplicate)
            var final = original
            // With wait, a duplicate of a job still queued or playing answers once that job has finished.
            if wait && !original.state.isFinal, let finished = await daemon.waitUntilFinished(original.id) {
                final = finished
            }
            let error = AnnounceError(
                .duplicate, "order already accepted as job \(final.id) (\(final.state.rawValue)); not announced again")
            try await reply(.failure(id: id, error, job: final))
        case .accepted(let info):
            guard wait else { return try await reply(Response(id: id, ok: true, job: info)) }
            try await reply(Response(id: id, ok: true, done: false, job: info))
            let final = await daemon.waitUntilFinished(info.id) ?? info
            if final.state.isFinal {
                let ok = final.state == .spoken
                try await reply(Response(id: id, ok: ok, job: final, error: ok ? nil : final.error))
            } else {
                let error = AnnounceError(
                    .shuttingDown, "the daemon is stopping; job \(final.id) stays queued and is spoken after restart")
                try await reply(.failure(id: id, error, job: final))
            }
        }
    }
}
