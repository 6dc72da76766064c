import AnnounceCore
import Synchronization

/// What the daemon knows about the jobs of this run: the live ones (queued, playing), the recently finished
/// ones, and the clients waiting for each. The journal is the durable record; the book is the fast one.
/// Touched by socket tasks and by the audio thread's events, so everything is behind one lock.
final class JobBook: Sendable {
    private struct Entry {
        var info: JobInfo
        var waiters: [CheckedContinuation<JobInfo?, Never>] = []
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var finishedOrder: [UInt64] = []
        var closed = false
    }

    private let state = Mutex(State())
    /// Finished jobs remembered for `wait` and lookups.
    private let keepFinished: Int

    init(keepFinished: Int = 1000) {
        self.keepFinished = keepFinished
    }

    func add(_ info: JobInfo) {
        state.withLock { $0.entries[info.id] = Entry(info: info) }
    }

    func info(_ id: UInt64) -> JobInfo? {
        state.withLock { $0.entries[id]?.info }
    }

    func markPlaying(_ id: UInt64, atMs: Int64) {
        state.withLock { state in
            guard state.entries[id]?.info.state == .queued else { return }
            state.entries[id]?.info.state = .playing
            state.entries[id]?.info.startedAt = WallClock.iso8601(ms: atMs)
        }
    }

    /// Records a final state and resumes everyone waiting for the job. Returns the job's final info.
    @discardableResult
    func finish(
        _ id: UInt64, state final: JobState, error: AnnounceError?, firstSampleMs: Double?, finishedMs: Double?,
        atMs: Int64
    ) -> JobInfo? {
        let (waiters, info): ([CheckedContinuation<JobInfo?, Never>], JobInfo?) = state.withLock { state in
            guard var entry = state.entries[id], !entry.info.state.isFinal else { return ([], nil) }
            entry.info.state = final
            entry.info.firstSampleMs = firstSampleMs
            entry.info.finishedMs = finishedMs
            entry.info.finishedAt = WallClock.iso8601(ms: atMs)
            if firstSampleMs != nil && entry.info.startedAt == nil { entry.info.startedAt = entry.info.finishedAt }
            entry.info.error = error.map(ErrorInfo.init)
            let waiters = entry.waiters
            entry.waiters = []
            state.entries[id] = entry
            state.finishedOrder.append(id)
            if state.finishedOrder.count > keepFinished {
                let dropped = state.finishedOrder.removeFirst()
                state.entries[dropped] = nil
            }
            return (waiters, entry.info)
        }
        if let info { for waiter in waiters { waiter.resume(returning: info) } }
        return info
    }

    /// Returns when the job reaches a final state (at once if it already has), or — at shutdown — with the
    /// job as it is (not final). Nil if the book does not know the job.
    func waitUntilFinished(_ id: UInt64) async -> JobInfo? {
        await withCheckedContinuation { (continuation: CheckedContinuation<JobInfo?, Never>) in
            let immediate: JobInfo?? = state.withLock { state in
                guard let entry = state.entries[id] else { return .some(nil) }
                if entry.info.state.isFinal || state.closed { return .some(entry.info) }
                state.entries[id]?.waiters.append(continuation)
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }

    /// Shutdown: everyone still waiting gets the job as it is now (queued: it stays in the journal).
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
    }

    /// Live jobs (queued or playing).
    var liveCount: Int { state.withLock { $0.entries.values.filter { !$0.info.state.isFinal }.count } }
}
