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
        case .say, .prompt, .text:
            let job = try request.jobRequest()
            try await answer(try await daemon.submit(job), wait: job.wait, id: id, reply: reply)
        case .replay:
            let priority = try request.priorityClass(default: .urgent)
            let submission = try await daemon.replay(
                job: request.job, priority: priority, ttlMs: try request.ttlMilliseconds(), wait: request.wait ?? false)
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
            try await reply(Response(id: id, ok: true, jobs: try daemon.history(limit: limit)))
        case .status:
            try await reply(Response(id: id, ok: true, v: ProtocolVersion.current, status: daemon.status(peer: peer)))
        case .volume:
            if request.reset == true {
                guard request.threshold == nil else {
                    throw AnnounceError(.badRequest, "give either \"threshold\" or \"reset\", not both")
                }
                try await reply(Response(id: id, ok: true, volume: try await daemon.setVolumeThreshold(nil)))
            } else if let threshold = request.threshold {
                try await reply(Response(id: id, ok: true, volume: try await daemon.setVolumeThreshold(threshold)))
            } else {
                try await reply(Response(id: id, ok: true, volume: daemon.audioStatus()))
            }
        case .metrics:
            try await reply(Response(id: id, ok: true, metrics: daemon.metricsText()))
        }
    }

    /// Replies to a job submission; for `wait`, a second (final) reply when the job has finished.
    private func answer(
        _ submission: Daemon.Submission, wait: Bool, id: String?, reply: (Response) async throws -> Void
    ) async throws {
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
