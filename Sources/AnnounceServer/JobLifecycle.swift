import AnnounceCore
import AnnounceJournal
import Dispatch
import Logging
import Synchronization

/// The life of every job, in one place: the one owner of the queue, the journal, the de-duplication window and
/// what this run knows about each job (its info, and the clients waiting for its end). The rest of the daemon
/// asks it instead of keeping its own copy.
///
/// ```
///             accept (journaled, then queued)
///   ─────────────▶ queued ──take──▶ playing ──last sample left the device──▶ spoken
///                    │  ▲              │  │
///                    │  └─replayed─────┘  ├──▶ failed     (device away too long, muted, no speech)
///                    │   (device failed)  └──▶ cancelled  (a client)
///                    ├──▶ expired    (ttl passed before its turn)
///                    └──▶ cancelled  (a client; superseded status prompt)
/// ```
///
/// Every transition is journaled before it takes effect, or its effect is undone:
/// - **accept**: the job and its order id are committed before the reply and before it is queued; a commit
///   that fails refuses the job (`journal`) and nothing is queued.
/// - **cancel** of waiting jobs: taken out of the queue, journaled `cancelled`; if that write fails they are
///   put back where they were and the cancel is refused (`journal`).
/// - **final states** (spoken, failed, expired, cancelled while playing): the job has already ended when the
///   audio thread reports it, so the state is published — waiters answered, `status` updated — only once it
///   is on disk, and only then handed to the subscribers of `subscribe` (``events``). A write that fails is
///   retried until it succeeds (the journal's reserve covers a full disk); meanwhile the job still counts as
///   unfinished (`status.queue.unfinished`, `status.journal.unrecorded`).
///   **The one documented outcome of a final state that never reached the disk** (the process died first) is
///   that the job is spoken again at the next start.
/// - **playing** is recorded in the background and only for the record: a job is spoken again unless its end
///   was recorded, whether it had started or not.
/// - **shutdown** leaves waiting and unheard jobs as they are in the journal: they are spoken at the next start.
///
/// Threads: accept, cancel, capacity and close run on one serial *acceptor* queue (the de-duplication check,
/// the bound check, the journal commit and the enqueue are one step); journal progress is written on one
/// serial *recorder* queue. Neither runs on Swift's cooperative pool: both block on the disk.
final class JobLifecycle: Sendable {
    typealias Submission = Daemon.Submission

    private struct Entry {
        var info: JobInfo
        var waiters: [CheckedContinuation<JobInfo?, Never>] = []
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        /// Finished jobs in the order they finished, to forget the oldest.
        var finishedOrder: [UInt64] = []
        var dedup: DedupWindow
        /// Shutting down: nothing more is accepted, waiters are answered as the jobs are.
        var closed = false
        /// Changes waiting for the recorder, in order; the first is being written.
        var unrecorded: [Journal.Change] = []
        var recording = false
        /// The error of the last failed progress write, while writes keep failing.
        var journalError: AnnounceError?
        var journalFailures = 0
        /// Resumed when nothing is left to record.
        var flushWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let journal: Journal
    let queue: JobQueue<Job>
    private let state: Mutex<State>
    private let logger: Logger
    private let acceptor = DispatchQueue(label: "announce.acceptor")
    private let recorder = DispatchQueue(label: "announce.recorder")
    /// Finished jobs remembered for `wait` and lookups.
    private let keepFinished: Int
    /// Called once per job when its final state is on disk (metrics, logs, subscribers): the job as it ended,
    /// and the player's result when it played.
    private let onFinal: @Sendable (JobInfo, JobResult?) -> Void
    /// Tells the audio thread that a cancel was flagged for a job it holds.
    private let wakePlayer: @Sendable () -> Void
    /// The subscribers of `subscribe`: every final state, as it reaches the disk (never blocking for them).
    let events: FinalEvents
    /// The payment heard last (`heard`, for `status`), and the last one that was not a replay (`original`: what
    /// `replay` repeats, `status.lastPayment`): the journal's at start, then each one as its `spoken` is on disk.
    private let lastPayments: Mutex<(heard: JobInfo?, original: JobInfo?)>

    init(
        journal: Journal, capacity: Int, dedupWindowMs: Int64, nowMs: Int64, logger: Logger, keepFinished: Int = 1000,
        subscriberBuffer: Int = 1024,
        wakePlayer: @escaping @Sendable () -> Void, onFinal: @escaping @Sendable (JobInfo, JobResult?) -> Void
    ) throws(AnnounceError) {
        self.journal = journal
        self.queue = JobQueue(capacity: capacity)
        self.logger = logger
        self.keepFinished = keepFinished
        self.wakePlayer = wakePlayer
        self.onFinal = onFinal
        self.events = FinalEvents(capacity: subscriberBuffer, logger: logger)
        let lastSpoken = try journal.lastSpokenPayment()?.info
        self.lastPayments = Mutex((heard: lastSpoken, original: lastSpoken))
        let entries = try journal.dedupEntries(sinceMs: nowMs - dedupWindowMs)
        state = Mutex(State(dedup: DedupWindow(windowMs: dedupWindowMs, entries: entries)))
        queue.onDiscard { [weak self] job, reason in
            guard let self, reason == .expired else { return }
            self.finished(
                JobResult(id: job.id, state: .expired, error: AnnounceError(.expired, "its ttl passed before its turn")))
        }
    }

    // MARK: Accepting

    /// De-duplicates, journals and queues a composed job, as one step on the acceptor. Replies only after the
    /// journal commit. A status prompt that replaced a waiting one ends that one `cancelled`/`superseded`.
    func accept(
        _ job: Job, record: JobRecord, dedupKey: (order: String, kind: DedupWindow.Kind)?
    ) async throws(AnnounceError) -> Submission {
        try await onAcceptor { () throws(AnnounceError) -> Submission in
            let nowMs = record.acceptedAt
            let closed = self.state.withLock { $0.closed }
            guard !closed else {
                throw AnnounceError(.shuttingDown, "the daemon is shutting down; try again after it restarts")
            }
            if let dedupKey,
                let entry = self.state.withLock({ $0.dedup.lookup(dedupKey.order, kind: dedupKey.kind, nowMs: nowMs) })
            {
                return .duplicate(try self.info(entry.jobID) ?? JobInfo(id: entry.jobID, state: .spoken))
            }
            guard self.queue.hasRoom(for: job.priority) else {
                throw AnnounceError(
                    .queueFull,
                    "the queue is full (\(self.queue.capacity) jobs waiting); nothing was dropped, try again")
            }
            // The audio thread opens the device while the journal commits (they are independent).
            self.queue.hint()
            let committed = try self.journal.insert(record)
            var job = job
            job.id = committed.jobID
            var info = committed.info
            info.position = self.position(for: job.priority)
            self.state.withLock { state in
                if let dedupKey {
                    state.dedup.insert(
                        DedupWindow.Entry(order: dedupKey.order, kind: dedupKey.kind, jobID: job.id, acceptedAtMs: nowMs))
                }
                state.entries[job.id] = Entry(info: info)
            }
            // Committed, so queued whatever the bound says now (a reload may have lowered it since the check);
            // only a close could refuse it, and closing runs on this queue too.
            let replaced = try self.queue.enqueue(job, ignoringBound: true)
            if let replaced {
                self.finished(
                    JobResult(
                        id: replaced.id, state: .cancelled,
                        error: AnnounceError(.superseded, "replaced by status prompt \(job.id) (last one wins)")))
            }
            return .accepted(info)
        }
    }

    /// Puts a job the journal already holds (recovered at start) back in the queue.
    func adopt(_ job: Job, info: JobInfo) throws(AnnounceError) {
        state.withLock { $0.entries[job.id] = Entry(info: info) }
        if let replaced = try queue.enqueue(job, ignoringBound: true) {
            finished(
                JobResult(
                    id: replaced.id, state: .cancelled,
                    error: AnnounceError(.superseded, "replaced by status prompt \(job.id) (last one wins)")))
        }
    }

    /// Jobs ahead of a new job of `priority` in play order.
    private func position(for priority: JobPriority) -> Int {
        let waiting = queue.snapshot
        switch priority {
        case .urgent: return waiting.filter { $0.priority == .urgent }.count
        case .payment, .status: return waiting.filter { $0.priority != .status }.count
        }
    }

    /// Changes the queue bound (a reload), in turn with acceptances.
    func setCapacity(_ capacity: Int) async {
        await onAcceptor { self.queue.capacity = capacity }
    }

    // MARK: Playing and ending

    /// The audio thread began playing the job (`attempt` > 1: again from its start).
    func started(_ id: UInt64, attempt: Int) {
        let nowMs = WallClock.nowMs
        state.withLock { state in
            guard var entry = state.entries[id], !entry.info.state.isFinal else { return }
            entry.info.state = .playing
            if entry.info.startedAt == nil { entry.info.startedAt = WallClock.iso8601(ms: nowMs) }
            entry.info.attempts = attempt
            state.entries[id] = entry
        }
        record(.started(id: id, atMs: nowMs, attempt: attempt))
    }

    /// A job ended (the audio thread's result, an expiry, a superseded prompt): recorded, then published.
    func finished(_ result: JobResult) {
        let outcome = Journal.Outcome(
            id: result.id, state: result.state, atMs: WallClock.nowMs,
            firstSampleMs: result.firstSampleNanos.map { Double($0) / 1e6 },
            finishedMs: result.finishedNanos.map { Double($0) / 1e6 }, error: result.error)
        record(.finished(outcome), result: result)
    }

    // MARK: Cancelling

    /// Cancels one job (`id`) or every job (nil), waiting or playing. Waiting ones are journaled `cancelled`
    /// before this returns; playing ones stop within a period and are returned once their end is recorded.
    func cancel(_ id: UInt64?) async throws(AnnounceError) -> [JobInfo] {
        let (removed, flagged) = try await onAcceptor { () throws(AnnounceError) -> ([Job], [UInt64]) in
            let (removed, flagged) = self.queue.cancel { id == nil || $0 == id }
            let nowMs = WallClock.nowMs
            let error = AnnounceError(.cancelled, "cancelled by a client")
            do throws(AnnounceError) {
                try self.journal.finishNow(
                    removed.map { Journal.Outcome(id: $0.id, state: .cancelled, atMs: nowMs, error: error) })
            } catch {
                // Not recorded, so not done: the jobs go back where they were.
                for superseded in self.queue.restore(removed) {
                    self.finished(
                        JobResult(
                            id: superseded.id, state: .cancelled,
                            error: AnnounceError(.superseded, "replaced by a newer status prompt")))
                }
                throw error
            }
            for job in removed {
                self.publish(
                    Journal.Outcome(id: job.id, state: .cancelled, atMs: nowMs, error: error), result: nil)
            }
            return (removed, flagged)
        }
        if !flagged.isEmpty { wakePlayer() }
        var cancelled = removed.compactMap { liveInfo($0.id) }
        for playing in flagged {
            if let info = await waitUntilFinished(playing) { cancelled.append(info) }
        }
        if cancelled.isEmpty, let id {
            if let info = try info(id) {
                throw AnnounceError(.notFound, "job \(id) has already finished (\(info.state.rawValue))")
            }
            throw AnnounceError(.notFound, "no job \(id)")
        }
        return cancelled
    }

    // MARK: Shutting down

    /// Refuses new jobs from now on and takes the waiting ones out of the queue (they stay queued in the
    /// journal). Returns them.
    func close() async -> [Job] {
        await onAcceptor {
            self.state.withLock { $0.closed = true }
            return self.queue.closeNow()
        }
    }

    /// Waits until every change reported so far is on disk, or `timeout` has passed (a disk that stays full).
    func flush(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let done = self.state.withLock { state -> Bool in
                        guard state.recording || !state.unrecorded.isEmpty else { return true }
                        state.flushWaiters.append(continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                // Out of time: whoever still waits is let go (the changes stay queued for the recorder).
                for waiter in self.state.withLock({ state in
                    defer { state.flushWaiters = [] }
                    return state.flushWaiters
                }) {
                    waiter.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// The end of a shutdown: everyone still waiting gets the job as it is now (not final: it stays in the
    /// journal and is spoken after the restart).
    func releaseWaiters() {
        let released: [(CheckedContinuation<JobInfo?, Never>, JobInfo)] = state.withLock { state in
            state.closed = true
            var released: [(CheckedContinuation<JobInfo?, Never>, JobInfo)] = []
            for (id, entry) in state.entries where !entry.waiters.isEmpty {
                for waiter in entry.waiters { released.append((waiter, entry.info)) }
                state.entries[id]?.waiters = []
            }
            return released
        }
        for (waiter, info) in released { waiter.resume(returning: info) }
        events.close(
            AnnounceError(.shuttingDown, "the daemon is stopping; subscribe again with \"since\" after it restarts"))
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    // MARK: Asking

    /// A job as known now: this run's, else the journal's.
    func info(_ id: UInt64) throws(AnnounceError) -> JobInfo? {
        if let info = state.withLock({ $0.entries[id]?.info }) { return info }
        return try journal.job(id)?.info
    }

    /// This run's view of a job, if it has one.
    func liveInfo(_ id: UInt64) -> JobInfo? { state.withLock { $0.entries[id]?.info } }

    /// Returns when the job's final state is on disk (at once if it already is), or — at shutdown — with the
    /// job as it is (not final). Nil if the job is unknown.
    func waitUntilFinished(_ id: UInt64) async -> JobInfo? {
        let known = await withCheckedContinuation { (continuation: CheckedContinuation<JobInfo?, Never>) in
            let immediate: JobInfo?? = state.withLock { state in
                guard let entry = state.entries[id] else { return .some(nil) }
                if entry.info.state.isFinal || state.closed { return .some(entry.info) }
                state.entries[id]?.waiters.append(continuation)
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
        if let known { return known }
        return try? journal.job(id)?.info
    }

    /// Jobs accepted and not finished on disk yet (waiting, playing, or with their end not recorded yet).
    var unfinished: Int { state.withLock { $0.entries.values.filter { !$0.info.state.isFinal }.count } }

    /// The journal's health, for `status`.
    var journalHealth: (unrecorded: Int, error: AnnounceError?) {
        state.withLock { ($0.unrecorded.count, $0.journalError) }
    }

    /// The payment heard last, if any (this run's, else the journal's at start).
    var lastHeard: JobInfo? { lastPayments.withLock { $0.heard } }
    var lastPayment: JobInfo? { lastPayments.withLock { $0.original } }

    /// The jobs with an id above `since` that are not final yet, taken in turn with acceptances (so that a job is
    /// either listed here, or final on disk, or accepted after this): what a `subscribe` with `since` waits for.
    func unfinished(after since: UInt64) async -> [JobInfo] {
        await onAcceptor {
            self.state.withLock { state in
                state.entries.values.map(\.info).filter { $0.id > since && !$0.state.isFinal }
                    .sorted { $0.id < $1.id }
            }
        }
    }

    /// Order ids remembered, and for how long.
    var dedupSummary: (orders: Int, windowMs: Int64) { state.withLock { ($0.dedup.count, $0.dedup.windowMs) } }

    func setDedupWindow(_ windowMs: Int64) { state.withLock { $0.dedup.windowMs = windowMs } }

    func expireDedup(nowMs: Int64) { state.withLock { _ = $0.dedup.expire(nowMs: nowMs) } }

    // MARK: The recorder

    /// Results waiting for their outcome to be recorded (to publish with it).
    private let results = Mutex<[UInt64: JobResult]>([:])

    /// Queues a change for the recorder; the recorder writes what has gathered in one transaction, in order.
    private func record(_ change: Journal.Change, result: JobResult? = nil) {
        if let result { results.withLock { $0[result.id] = result } }
        let start = state.withLock { state in
            state.unrecorded.append(change)
            guard !state.recording else { return false }
            state.recording = true
            return true
        }
        if start { recorder.async { self.writeUnrecorded() } }
    }

    /// On the recorder: writes every change gathered so far in one transaction, in order, and publishes the
    /// final states among them; on a failure, tries again after a backoff (the changes stay first in line).
    private func writeUnrecorded() {
        while true {
            let batch = state.withLock { state -> [Journal.Change]? in
                guard !state.unrecorded.isEmpty else {
                    state.recording = false
                    let waiters = state.flushWaiters
                    state.flushWaiters = []
                    for waiter in waiters { waiter.resume() }
                    return nil
                }
                return state.unrecorded
            }
            guard let batch else { return }
            do {
                try journal.record(batch)
            } catch {
                let failures = state.withLock { state -> Int in
                    state.journalError = error
                    state.journalFailures += 1
                    return state.journalFailures
                }
                if failures == 1 || failures % 100 == 0 {
                    logger.error(
                        "journal: cannot record the jobs' progress; retrying (their ends are published once recorded)",
                        metadata: [
                            "event": .event(.journalUnwritable), "changes": "\(batch.count)", "error": "\(error)",
                            "failures": "\(failures)",
                        ])
                }
                let backoffMs = min(2_000, 25 << min(failures, 7))
                recorder.asyncAfter(deadline: .now() + .milliseconds(backoffMs)) { self.writeUnrecorded() }
                return
            }
            let recovered = state.withLock { state -> Int in
                state.unrecorded.removeFirst(batch.count)
                defer {
                    state.journalError = nil
                    state.journalFailures = 0
                }
                return state.journalFailures
            }
            if recovered > 0 {
                logger.notice("journal: the jobs' progress is recorded again", metadata: ["failures": "\(recovered)"])
            }
            for case let .finished(outcome) in batch {
                publish(outcome, result: results.withLock { $0.removeValue(forKey: outcome.id) })
            }
        }
    }

    /// A final state is on disk: update this run's view, answer the waiters, tell `onFinal`.
    private func publish(_ outcome: Journal.Outcome, result: JobResult?) {
        let (waiters, info): ([CheckedContinuation<JobInfo?, Never>], JobInfo?) = state.withLock { state in
            guard var entry = state.entries[outcome.id], !entry.info.state.isFinal else { return ([], nil) }
            entry.info.state = outcome.state
            entry.info.firstSampleMs = outcome.firstSampleMs
            entry.info.finishedMs = outcome.finishedMs
            entry.info.leadInStartMs = result?.leadInStartNanos.map { Double($0) / 1e6 }
            entry.info.finishedAt = WallClock.iso8601(ms: outcome.atMs)
            if outcome.firstSampleMs != nil && entry.info.startedAt == nil {
                entry.info.startedAt = entry.info.finishedAt
            }
            entry.info.error = outcome.error.map(ErrorInfo.init)
            let waiters = entry.waiters
            entry.waiters = []
            state.entries[outcome.id] = entry
            state.finishedOrder.append(outcome.id)
            if state.finishedOrder.count > keepFinished {
                state.entries[state.finishedOrder.removeFirst()] = nil
            }
            return (waiters, entry.info)
        }
        guard let info else { return }
        for waiter in waiters { waiter.resume(returning: info) }
        if info.state == .spoken && info.amount != nil {
            lastPayments.withLock { last in
                last.heard = info
                if info.replayOf == nil { last.original = info }
            }
        }
        events.publish(info)
        onFinal(info, result)
    }

    // MARK: The acceptor

    /// Runs `body` on the acceptor: in turn with acceptances and cancels, off Swift's cooperative pool (for
    /// work that blocks on the disk).
    func onAcceptor<T: Sendable>(
        _ body: @escaping @Sendable () throws(AnnounceError) -> T
    ) async throws(AnnounceError) -> T {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<T, AnnounceError>, Never>) in
            acceptor.async {
                do throws(AnnounceError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    func onAcceptor<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
            acceptor.async { continuation.resume(returning: body()) }
        }
    }
}
