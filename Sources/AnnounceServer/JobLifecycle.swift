import AnnounceClock
import AnnounceCore
import AnnounceJournal
import Logging

/// The life of every job, in one place: the one owner of the queue's lanes, the journal, the de-duplication window,
/// the cancel flags and what this run knows about each job (its info, and the clients waiting for its end), on one
/// executor (a ``SerialThread`` of its own, `announce-jobs`). The rest of the daemon asks it instead of keeping its own copy
/// (docs/architecture.md).
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
/// An actor on its own executor: the socket side awaits its methods (they run on `announce-jobs`, journal calls
/// included, never on Swift's cooperative pool); the audio thread takes its next job from ``queue`` — the one
/// hand-off, which the actor fills and flags — and reports through ``post(_:)``, in order, never waiting.
actor JobLifecycle {
    typealias Submission = Daemon.Submission

    private struct Entry {
        var info: JobInfo
        var waiters: [CheckedContinuation<JobInfo?, Never>] = []
    }

    /// The hand-off to the audio thread: the lanes of waiting jobs, in play order, and the cancel flags of those in
    /// its hands. Filled and flagged here; the audio thread takes from it (its lock never waits on the disk).
    nonisolated let queue: JobQueue<Job>
    /// The subscribers of `subscribe`: every final state, as it reaches the disk (never blocking for them).
    nonisolated let events: FinalEvents
    /// Where every method of this actor runs.
    nonisolated let executor: SerialThread
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    let journal: Journal
    /// What says whether the wall clock is right (``stamp()``).
    private let clockSync: ClockSync
    let logger: Logger
    /// Finished jobs remembered for `wait` and lookups.
    private let keepFinished: Int
    /// Called once per job when its final state is on disk (metrics, logs): the job as it ended, and the player's
    /// result when it played.
    private let onFinal: @Sendable (JobInfo, JobResult?) -> Void
    /// Tells the audio thread that a cancel was flagged for a job it holds.
    private let wakePlayer: @Sendable () -> Void

    private var entries: [UInt64: Entry] = [:]
    /// Finished jobs in the order they finished, to forget the oldest.
    private var finishedOrder: [UInt64] = []
    private var dedup: DedupWindow
    /// Shutting down: nothing more is accepted, waiters are answered as the jobs are.
    private(set) var isClosed = false
    /// Changes not on disk yet, in order, and the player's results waiting for their outcome to be on disk.
    private var unrecorded: [Journal.Change] = []
    private var results: [UInt64: JobResult] = [:]
    /// A write of `unrecorded` is scheduled on the executor (soon, or after a failure's backoff).
    private var writeScheduled = false
    /// The error of the last failed progress write, while writes keep failing.
    private var journalError: AnnounceError?
    private var journalFailures = 0
    /// Resumed when nothing is left to record.
    private var flushWaiters: [CheckedContinuation<Void, Never>] = []
    /// The payment heard last (`heard`, for `status`), and the last one that was not a replay (`original`: what
    /// `replay` repeats, `status.lastPayment`): the journal's at start, then each one as its `spoken` is on disk.
    private(set) var lastHeard: JobInfo?
    private(set) var lastPayment: JobInfo?
    /// The offset between the wall and boot clocks the journal's times of this boot were last corrected to.
    private var alignedOffsetMs: Int64?
    /// Whether the journal was last seen in memory.
    private var inMemory: Bool
    /// The repeating notices running (JobLifecycle+Repeats.swift): the journal's at start, then each one started.
    var repeats: [String: RepeatRun] = [:]

    init(
        journal: Journal, capacity: Int, dedupWindowMs: Int64, now: ClockStamp, clockSync: ClockSync = .trust,
        logger: Logger, keepFinished: Int = 1000, subscriberBuffer: Int = 1024, executor: SerialThread = SerialThread(name: "announce-jobs"),
        wakePlayer: @escaping @Sendable () -> Void, onFinal: @escaping @Sendable (JobInfo, JobResult?) -> Void
    ) throws(AnnounceError) {
        self.journal = journal
        self.clockSync = clockSync
        self.queue = JobQueue(capacity: capacity)
        self.logger = logger
        self.keepFinished = keepFinished
        self.wakePlayer = wakePlayer
        self.onFinal = onFinal
        self.executor = executor
        self.events = FinalEvents(capacity: subscriberBuffer, logger: logger)
        // Read before the actor runs anything: the daemon's start, on its own thread.
        let lastSpoken = try journal.lastSpokenPayment()?.info
        lastHeard = lastSpoken
        lastPayment = lastSpoken
        dedup = DedupWindow(windowMs: dedupWindowMs, entries: try journal.dedupEntries(now: now, windowMs: dedupWindowMs))
        if now.trusted { alignedOffsetMs = now.offsetMs }
        inMemory = journal.problem != nil
        for record in try journal.runningRepeats() { repeats[record.plan.order] = RepeatRun(record: record) }
        queue.onDiscard { [weak self] job, reason in
            guard let self, reason == .expired else { return }
            self.post { lifecycle in
                lifecycle.finished(
                    JobResult(
                        id: job.id, state: .expired, error: AnnounceError(.expired, "its ttl passed before its turn")))
            }
        }
    }

    // MARK: Entering from threads that are not async

    /// Runs `body` on the executor after what was posted before it; never waits (the audio thread's reports).
    nonisolated func post(_ body: @escaping @Sendable (isolated JobLifecycle) -> Void) {
        executor.submit { self.assumeIsolated(body) }
    }

    /// Runs `body` on the executor and waits for it: for threads of the daemon's own that are not async (the start,
    /// the keys' thread), never from Swift's cooperative pool.
    nonisolated func sync<T: Sendable>(
        _ body: @escaping @Sendable (isolated JobLifecycle) throws(AnnounceError) -> T
    ) throws(AnnounceError) -> T {
        try executor.sync { () -> Result<T, AnnounceError> in
            self.assumeIsolated { lifecycle -> Result<T, AnnounceError> in
                do throws(AnnounceError) { return .success(try body(lifecycle)) } catch { return .failure(error) }
            }
        }.get()
    }

    // MARK: Accepting

    /// De-duplicates, journals and queues a composed job, as one step. Replies only after the journal commit. A
    /// status prompt that replaced a waiting one ends that one `cancelled`/`superseded`.
    func accept(
        _ job: Job, record: JobRecord, dedupKey: (order: String, kind: DedupWindow.Kind)?
    ) throws(AnnounceError) -> Submission {
        // The de-duplication window runs on the boot clock: a wall-clock jump neither ends nor stretches it.
        let accepted = stamp()
        var record = record
        record.accepted = accepted
        let nowMs = accepted.bootMs
        guard !isClosed else {
            throw AnnounceError(.shuttingDown, "the daemon is shutting down; try again after it restarts")
        }
        if let dedupKey, let entry = dedup.lookup(dedupKey.order, kind: dedupKey.kind, nowMs: nowMs) {
            return .duplicate(try info(entry.jobID) ?? JobInfo(id: entry.jobID, state: .spoken))
        }
        guard queue.hasRoom(for: job.priority) else {
            throw AnnounceError(
                .queueFull, "the queue is full (\(queue.capacity) jobs waiting); nothing was dropped, try again")
        }
        // The audio thread opens the device while the journal commits (they are independent).
        queue.hint()
        let committed = try journal.insert(record, clockTrusted: accepted.trusted)
        var job = job
        job.id = committed.jobID
        var info = committed.info
        info.position = position(for: job.priority)
        if !journal.isDurable {
            info.durable = false
            noteDurability()
        }
        if let dedupKey {
            dedup.insert(
                DedupWindow.Entry(order: dedupKey.order, kind: dedupKey.kind, jobID: job.id, acceptedAtMs: nowMs))
        }
        entries[job.id] = Entry(info: info)
        // Committed, so queued whatever the bound says now (a reload may have lowered it since the check); only a
        // close could refuse it, and closing runs here too.
        try enqueue(job)
        return .accepted(info)
    }

    /// Puts a job the journal already holds (recovered at start) back in the queue.
    func adopt(_ job: Job, info: JobInfo) throws(AnnounceError) {
        entries[job.id] = Entry(info: info)
        try enqueue(job)
    }

    /// Queues a job the journal holds; a status prompt it replaces (the last one wins) ends cancelled.
    private func enqueue(_ job: Job) throws(AnnounceError) {
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
        case .urgent, .payment, .notice: return waiting.filter { $0.priority <= priority }.count
        case .status: return waiting.filter { $0.priority != .status }.count
        }
    }

    /// Changes the queue bound (a reload).
    func setCapacity(_ capacity: Int) { queue.capacity = capacity }

    // MARK: Playing and ending (reported by the audio thread, through `post`)

    /// The audio thread began playing the job (`attempt` > 1: again from its start).
    func started(_ id: UInt64, attempt: Int) {
        let now = stamp()
        if var entry = entries[id], !entry.info.state.isFinal {
            entry.info.state = .playing
            if entry.info.startedAt == nil { entry.info.startedAt = WallClock.iso8601(ms: now.wallMs) }
            entry.info.attempts = attempt
            entries[id] = entry
        }
        record(.started(id: id, at: now, attempt: attempt))
    }

    /// A notice the audio thread cut for a payment is waiting again (its start is recorded again when it plays).
    func requeued(_ id: UInt64) {
        if var entry = entries[id], !entry.info.state.isFinal {
            entry.info.state = .queued
            entries[id] = entry
        }
    }

    /// A job ended (the audio thread's result, an expiry, a superseded prompt): recorded, then published.
    func finished(_ result: JobResult) {
        let outcome = Journal.Outcome(
            id: result.id, state: result.state, at: stamp(),
            firstSampleMs: result.firstSampleNanos.map { Double($0) / 1e6 },
            finishedMs: result.finishedNanos.map { Double($0) / 1e6 }, error: result.error)
        results[result.id] = result
        record(.finished(outcome))
    }

    // MARK: Cancelling

    /// Cancels one job (`id`) or every job (nil), waiting or playing. Waiting ones are journaled `cancelled`
    /// before this returns; playing ones stop within a period and are returned once their end is recorded.
    func cancel(_ id: UInt64?) async throws(AnnounceError) -> [JobInfo] {
        let (removed, flagged) = queue.cancel { id == nil || $0 == id }
        let now = stamp()
        let error = AnnounceError(.cancelled, "cancelled by a client")
        do throws(AnnounceError) {
            try journal.finishNow(removed.map { Journal.Outcome(id: $0.id, state: .cancelled, at: now, error: error) })
        } catch {
            // Not recorded, so not done: the jobs go back where they were.
            for superseded in queue.restore(removed) {
                finished(
                    JobResult(
                        id: superseded.id, state: .cancelled,
                        error: AnnounceError(.superseded, "replaced by a newer status prompt")))
            }
            throw error
        }
        for job in removed {
            publish(Journal.Outcome(id: job.id, state: .cancelled, at: now, error: error), result: nil)
        }
        if !flagged.isEmpty { wakePlayer() }
        var cancelled = removed.compactMap { entries[$0.id]?.info }
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

    /// Refuses new jobs from now on and takes the waiting ones out of the queue (they stay queued in the journal).
    /// Returns them.
    func close() -> [Job] {
        isClosed = true
        endPauses()
        return queue.closeNow()
    }

    /// Waits until every change reported so far is on disk, or `timeout` has passed (a disk that stays full).
    func flush(timeout: Duration) async {
        guard writeScheduled || !unrecorded.isEmpty else { return }
        let milliseconds = Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        executor.after(milliseconds: milliseconds) { [weak self] in
            // Out of time: whoever still waits is let go (the changes stay queued for the recorder).
            self?.assumeIsolated { $0.resumeFlushWaiters() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            flushWaiters.append(continuation)
        }
    }

    private func resumeFlushWaiters() {
        let waiters = flushWaiters
        flushWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    /// The end of a shutdown: everyone still waiting gets the job as it is now (not final: it stays in the
    /// journal and is spoken after the restart).
    func releaseWaiters() {
        isClosed = true
        for (id, entry) in entries where !entry.waiters.isEmpty {
            for waiter in entry.waiters { waiter.resume(returning: entry.info) }
            entries[id]?.waiters = []
        }
        events.close(
            AnnounceError(.shuttingDown, "the daemon is stopping; subscribe again with \"since\" after it restarts"))
    }

    // MARK: Asking

    /// A job as known now: this run's, else the journal's.
    func info(_ id: UInt64) throws(AnnounceError) -> JobInfo? {
        if let info = entries[id]?.info { return info }
        return try journal.job(id)?.info
    }

    /// This run's view of a job, if it has one.
    func liveInfo(_ id: UInt64) -> JobInfo? { entries[id]?.info }

    /// Returns when the job's final state is on disk (at once if it already is), or — at shutdown — with the
    /// job as it is (not final). Nil if the job is unknown.
    func waitUntilFinished(_ id: UInt64) async -> JobInfo? {
        guard let entry = entries[id] else { return try? journal.job(id)?.info }
        if entry.info.state.isFinal || isClosed { return entry.info }
        return await withCheckedContinuation { (continuation: CheckedContinuation<JobInfo?, Never>) in
            entries[id]?.waiters.append(continuation)
        }
    }

    /// Jobs accepted and not finished on disk yet (waiting, playing, or with their end not recorded yet).
    var unfinished: Int { entries.values.filter { !$0.info.state.isFinal }.count }

    /// The jobs with an id above `since` that are not final yet, in turn with acceptances (so that a job is either
    /// listed here, or final on disk, or accepted after this): what a `subscribe` with `since` waits for.
    func unfinished(after since: UInt64) -> [JobInfo] {
        entries.values.map(\.info).filter { $0.id > since && !$0.state.isFinal }.sorted { $0.id < $1.id }
    }

    /// The most recent jobs, newest first (from the journal; live ones as they are now).
    func history(limit: Int) throws(AnnounceError) -> [JobInfo] {
        try journal.history(limit: limit).map { record in entries[record.jobID]?.info ?? record.info }
    }

    /// A job's journal row (`replay`), the last payment spoken when `id` is nil.
    func record(of id: UInt64?, kind: ReplayKind = .payment) throws(AnnounceError) -> JobRecord? {
        if let id { return try journal.job(id) }
        switch kind {
        case .payment: return try journal.lastSpokenPayment()
        case .combination: return try journal.lastSpokenCombination()
        }
    }

    /// The final states on disk of the jobs above `afterID`, lowest first (what `subscribe` replays).
    func finishedJobs(afterID: UInt64, limit: Int) throws(AnnounceError) -> [JobRecord] {
        try journal.finishedJobs(afterID: afterID, limit: limit)
    }

    /// The payments of a local day (`today`).
    func dayTotals(fromMs: Int64, toMs: Int64) throws(AnnounceError) -> DayTotals {
        _ = stamp()
        flushClockCorrection()
        return try journal.dayTotals(fromMs: fromMs, toMs: toMs)
    }

    /// A setting kept in the journal (the volume threshold, the everyday level).
    func setting(_ name: String) throws(AnnounceError) -> String? { try journal.setting(name) }

    /// Keeps a setting in the journal, durably, unless it already holds that value.
    func setSetting(_ name: String, _ value: String?) throws(AnnounceError) {
        if try journal.setting(name) != value { try journal.setSetting(name, value) }
    }

    /// The journal's part of `status`.
    func journalStatus(recovered: (pending: Int, interrupted: Int)) -> DaemonStatus.Journal {
        var status = DaemonStatus.Journal(
            path: journal.path, recoveredAtStart: recovered.pending, interruptedAtStart: recovered.interrupted,
            dedupOrders: dedup.count, dedupWindowSeconds: Double(dedup.windowMs) / 1000,
            recoveredFromCorruption: journal.recoveredFromCorruption)
        status.unrecorded = unrecorded.count
        status.lastError = journalError.map(ErrorInfo.init)
        status.reserve = journal.hasReserve
        if let problem = journal.problem {
            status.durable = false
            status.problem = ErrorInfo(problem)
        }
        return status
    }

    /// What `status` asks of the job side, in one step: the journal's part, the jobs not finished, whether it is
    /// closing, the last payment and the payment heard last.
    func statusParts(
        recovered: (pending: Int, interrupted: Int)
    ) -> (DaemonStatus.Journal, Int, Bool, JobInfo?, JobInfo?) {
        (journalStatus(recovered: recovered), unfinished, isClosed, lastPayment, lastHeard)
    }

    /// The `queue` listing: the job playing, then the waiting ones in play order with their positions.
    func listing(playing: UInt64?, waiting: [UInt64]) -> [JobInfo] {
        var listing: [JobInfo] = []
        if let playing, let info = entries[playing]?.info { listing.append(info) }
        for (index, id) in waiting.enumerated() {
            guard var info = entries[id]?.info else { continue }
            info.position = index
            listing.append(info)
        }
        return listing
    }

    /// Changes not on disk yet (a full disk, at shutdown).
    var unrecordedCount: Int { unrecorded.count }

    func setDedupWindow(_ windowMs: Int64) { dedup.windowMs = windowMs }

    /// Forgets order ids older than the window, and history older than its retention (hourly).
    func housekeeping(keepMs: Int64, windowMs: Int64) throws(AnnounceError) -> (jobs: Int, orders: Int) {
        let now = stamp()
        _ = dedup.expire(nowMs: now.bootMs)
        try journal.purgeRepeats(nowMs: now.wallMs, keepMs: keepMs)
        return try journal.purge(now: now, keepMs: keepMs, windowMs: windowMs)
    }

    // MARK: The journal's durability

    /// While the journal is in memory: tries its file again (``Journal/returnToDisk()``).
    func returnToDisk() -> Journal.DiskReturn? {
        guard journal.problem != nil else { return nil }
        let outcome = journal.returnToDisk()
        if outcome == .onDisk { noteDurability() }
        return outcome
    }

    /// Says so (error level, a status hint) the first time a write finds the journal moved to memory: its file
    /// stopped taking writes while the daemon ran (a read-only remount, an I/O error). Its way back is
    /// ``Daemon/retryJournal()``'s.
    private func noteDurability() {
        let problem = journal.problem
        let changed = inMemory != (problem != nil)
        inMemory = problem != nil
        guard changed, let problem else { return }
        logger.error(
            """
            \(problem.message): the journal is kept in memory from now on — payments are spoken, but what is \
            accepted is lost if the daemon stops before the journal is back on disk
            """,
            metadata: ["event": .event(.journalInMemory), "journal": "\(journal.path)", "error": "\(problem.cause ?? "")"])
        events.statusChanged()
    }

    // MARK: The clock

    /// Now, on both clocks. Once the wall clock is trusted at an offset from the boot clock other than the one
    /// the journal's times of this boot were last corrected to (the clock was set: NTP after a boot without a
    /// battery-backed clock, or by hand), the journal corrects them (``Journal/Change/clockSet(_:)``), in turn
    /// with the other changes.
    func stamp() -> ClockStamp {
        let now = ClockStamp.now(sync: clockSync)
        guard now.trusted else { return now }
        if let aligned = alignedOffsetMs, abs(aligned - now.offsetMs) <= 1000 { return now }
        alignedOffsetMs = now.offsetMs
        logger.notice(
            "the wall clock is set and trusted; correcting the times of this boot's jobs",
            metadata: ["offset_ms": "\(now.offsetMs)"])
        record(.clockSet(now))
        return now
    }

    /// Writes a clock correction ``stamp()`` just noted at once, before a read that depends on it (`today`).
    private func flushClockCorrection() {
        if unrecorded.contains(where: { if case .clockSet = $0 { true } else { false } }) { writeUnrecorded() }
    }

    // MARK: The recorder

    /// Queues a change; what has gathered is written in one transaction, in order, once the executor has run what is
    /// before it.
    private func record(_ change: Journal.Change) {
        unrecorded.append(change)
        guard !writeScheduled else { return }
        writeScheduled = true
        post { $0.writeUnrecorded() }
    }

    /// Writes every change gathered so far in one transaction and publishes the final states among them; on a
    /// failure, tries again after a backoff (the changes stay first in line).
    private func writeUnrecorded() {
        writeScheduled = false
        guard !unrecorded.isEmpty else {
            resumeFlushWaiters()
            return
        }
        let batch = unrecorded
        do throws(AnnounceError) {
            try journal.record(batch)
        } catch {
            journalError = error
            journalFailures += 1
            if journalFailures == 1 || journalFailures % 100 == 0 {
                logger.error(
                    "journal: cannot record the jobs' progress; retrying (their ends are published once recorded)",
                    metadata: [
                        "event": .event(.journalUnwritable), "changes": "\(batch.count)", "error": "\(error)",
                        "failures": "\(journalFailures)",
                    ])
            }
            writeScheduled = true
            executor.after(milliseconds: min(2_000, 25 << min(journalFailures, 7))) { [weak self] in
                self?.assumeIsolated { $0.writeUnrecorded() }
            }
            return
        }
        unrecorded.removeFirst(batch.count)
        if journalFailures > 0 {
            logger.notice("journal: the jobs' progress is recorded again", metadata: ["failures": "\(journalFailures)"])
        }
        journalError = nil
        journalFailures = 0
        noteDurability()
        for case let .finished(outcome) in batch {
            publish(outcome, result: results.removeValue(forKey: outcome.id))
        }
        if unrecorded.isEmpty { resumeFlushWaiters() }
    }

    /// A final state is on disk: update this run's view, answer the waiters, tell `onFinal`.
    private func publish(_ outcome: Journal.Outcome, result: JobResult?) {
        guard var entry = entries[outcome.id], !entry.info.state.isFinal else { return }
        entry.info.state = outcome.state
        entry.info.firstSampleMs = outcome.firstSampleMs
        entry.info.finishedMs = outcome.finishedMs
        entry.info.leadInStartMs = result?.leadInStartNanos.map { Double($0) / 1e6 }
        entry.info.finishedAt = WallClock.iso8601(ms: outcome.at.wallMs)
        if outcome.firstSampleMs != nil && entry.info.startedAt == nil {
            entry.info.startedAt = entry.info.finishedAt
        }
        entry.info.error = outcome.error.map(ErrorInfo.init)
        let waiters = entry.waiters
        entry.waiters = []
        entries[outcome.id] = entry
        finishedOrder.append(outcome.id)
        if finishedOrder.count > keepFinished {
            entries[finishedOrder.removeFirst()] = nil
        }
        let info = entry.info
        for waiter in waiters { waiter.resume(returning: info) }
        if info.state == .spoken && info.amount != nil {
            lastHeard = info
            if info.replayOf == nil { lastPayment = info }
        }
        events.publish(info)
        onFinal(info, result)
    }
}
