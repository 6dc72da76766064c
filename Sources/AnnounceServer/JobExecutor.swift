import AnnounceCore

#if canImport(Glibc)
import Glibc
#endif

/// The one executor of every job's life (docs/architecture.md): a thread of its own, `announce-jobs`, that runs in
/// turn the work of the ``JobLifecycle`` actor — its async methods, the audio thread's reports, the timers of that
/// work — and so every journal call. It may block on the disk (a commit on a slow flash card): it is not one of
/// Swift's cooperative threads, so what waits behind it is job work only, never a socket or a timer of NIO's.
///
/// A serial executor in Swift's sense (the actor's `unownedExecutor`), and a plain queue of closures for callers
/// that are not async (the audio thread: ``submit(_:)``, which never waits) and for timers (``after(milliseconds:_:)``).
/// First in, first out: two things submitted in order run in that order.
final class JobExecutor: SerialExecutor, @unchecked Sendable {  // every stored value is behind `state`'s lock
    private struct Timer {
        var deadline: UInt64
        var sequence: Int
        var work: @Sendable () -> Void
    }

    private struct State {
        var work: [@Sendable () -> Void] = []
        var head = 0
        var timers: [Timer] = []
        var sequence = 0
        /// Bumped by every new timer, so that a wait for a later deadline starts again for an earlier one.
        var timerChanges = 0
        var thread: pthread_t?

        var nextDeadline: UInt64? { timers.map(\.deadline).min() }
    }

    private let state = ConditionLock(State())

    init(name: String = "announce-jobs") {
        SystemThread.detach(name: name) { [self] in
            state.withLock { $0.thread = pthread_self() }
            run()
        }
    }

    // MARK: SerialExecutor

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        submit { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Swift asks this when it cannot tell by itself that code runs on this executor (a closure run by
    /// ``submit(_:)`` that enters the actor with `assumeIsolated`).
    func checkIsolated() {
        precondition(isCurrent, "not on the job executor (announce-jobs)")
    }

    /// Whether the calling thread is this executor's.
    var isCurrent: Bool {
        let thread = state.withLock { $0.thread }
        return thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
    }

    // MARK: Work

    /// Runs `work` on the executor's thread after what was submitted before it. Never waits.
    func submit(_ work: @escaping @Sendable () -> Void) {
        state.withLock { $0.work.append(work) }
        state.signal()
    }

    /// Runs `work` on the executor's thread once `milliseconds` have passed (monotonic time).
    func after(milliseconds: Int, _ work: @escaping @Sendable () -> Void) {
        let deadline = Monotonic.nanos + UInt64(max(0, milliseconds)) * 1_000_000
        state.withLock { state in
            state.sequence += 1
            state.timerChanges += 1
            state.timers.append(Timer(deadline: deadline, sequence: state.sequence, work: work))
        }
        state.signal()
    }

    private func run() {
        while true {
            let (deadline, changes) = state.withLock { ($0.nextDeadline, $0.timerChanges) }
            let due = state.withLock(
                when: {
                    $0.head < $0.work.count || $0.timerChanges != changes
                        || ($0.nextDeadline.map { $0 <= Monotonic.nanos } ?? false)
                },
                until: deadline
            ) { state -> [@Sendable () -> Void] in
                let now = Monotonic.nanos
                var due: [@Sendable () -> Void] = []
                let expired = state.timers.filter { $0.deadline <= now }.sorted {
                    ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence)
                }
                if !expired.isEmpty {
                    state.timers.removeAll { $0.deadline <= now }
                    due += expired.map(\.work)
                }
                due += state.work[state.head...]
                state.work.removeAll(keepingCapacity: true)
                state.head = 0
                return due
            }
            for work in due { work() }
        }
    }
}
