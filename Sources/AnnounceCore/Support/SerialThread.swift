#if canImport(Glibc)
import Glibc
#endif

/// A thread of our own that runs what it is given one after another, in the order given, with timers: the daemon's
/// one way to do ordered work that may block (docs/architecture.md, "Threads and executors"). The job executor
/// (`announce-jobs`: the `JobLifecycle` actor runs on it, so it is a `SerialExecutor` too), the ducker's ramps
/// (`announce-duck`), the keys' actions (`announce-action`) and the push listener's workers each have one.
///
/// Work may block (a commit on a slow flash card, a mixer that waits on a sound server): the thread is not one of
/// Swift's cooperative threads, so what waits behind it is that thread's work only. First in, first out: two
/// things submitted in order run in that order; timers run in deadline order once due (monotonic time). When the
/// `SerialThread` is released, its thread runs what was submitted, drops the timers not yet due, and ends.
public final class SerialThread: SerialExecutor, Sendable {
    private struct Timer {
        var deadline: UInt64
        var sequence: Int
        var work: @Sendable () -> Void
    }

    private struct State {
        var work: [@Sendable () -> Void] = []
        var timers: [Timer] = []
        var sequence = 0
        /// Bumped by every new timer, so that a wait for a later deadline starts again for an earlier one.
        var timerChanges = 0
        var thread: pthread_t?
        var released = false

        var nextDeadline: UInt64? { timers.map(\.deadline).min() }
    }

    /// The state, shared with the thread (which holds it, not the `SerialThread`, so that releasing one ends it).
    private let core = ConditionLock(State())
    public let name: String

    /// Starts the thread, named `name` (at most 15 bytes reach the kernel: `top -H`, `ps -L`).
    public init(name: String) {
        self.name = name
        let core = self.core
        SystemThread.detach(name: name) {
            core.withLock { $0.thread = pthread_self() }
            Self.run(core)
        }
    }

    deinit {
        core.withLock { $0.released = true }
        core.broadcast()
    }

    // MARK: Work

    /// Runs `work` on the thread after what was submitted before it. Never waits.
    public func submit(_ work: @escaping @Sendable () -> Void) {
        core.withLock { $0.work.append(work) }
        core.broadcast()
    }

    /// Runs `work` on the thread once `milliseconds` have passed (monotonic time).
    public func after(milliseconds: Int, _ work: @escaping @Sendable () -> Void) {
        let deadline = Monotonic.nanos + UInt64(max(0, milliseconds)) * 1_000_000
        core.withLock { state in
            state.sequence += 1
            state.timerChanges += 1
            state.timers.append(Timer(deadline: deadline, sequence: state.sequence, work: work))
        }
        core.broadcast()
    }

    /// Runs `work` on the thread once `seconds` have passed.
    public func after(seconds: Double, _ work: @escaping @Sendable () -> Void) {
        after(milliseconds: Int((max(0, seconds) * 1000).rounded(.up)), work)
    }

    /// Runs `body` on the thread after what was submitted before it, and waits for its result. For threads that may
    /// block (never Swift's cooperative pool); on the thread itself it runs at once.
    public func sync<T: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> T) throws(Failure) -> T {
        let run = { @Sendable () -> Result<T, Failure> in
            do throws(Failure) { return .success(try body()) } catch { return .failure(error) }
        }
        if isCurrent { return try run().get() }
        let done = ConditionLock<Result<T, Failure>?>(nil)
        submit {
            let result = run()
            done.withLock { $0 = result }
            done.broadcast()
        }
        return try done.withLock(when: { $0 != nil }) { $0! }.get()
    }

    /// Whether the calling thread is this one.
    public var isCurrent: Bool {
        let thread = core.withLock { $0.thread }
        return thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
    }

    // MARK: SerialExecutor

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        submit { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Swift asks this when it cannot tell by itself that code runs on this executor (a closure run by
    /// ``submit(_:)`` that enters an actor with `assumeIsolated`).
    public func checkIsolated() {
        precondition(isCurrent, "not on the serial thread \(name)")
    }

    // MARK: The thread

    private static func run(_ core: ConditionLock<State>) {
        while true {
            let (deadline, changes) = core.withLock { ($0.nextDeadline, $0.timerChanges) }
            let due = core.withLock(
                when: {
                    !$0.work.isEmpty || $0.released || $0.timerChanges != changes
                        || ($0.nextDeadline.map { $0 <= Monotonic.nanos } ?? false)
                },
                until: deadline
            ) { state -> [@Sendable () -> Void]? in
                let now = Monotonic.nanos
                let expired = state.timers.filter { $0.deadline <= now }.sorted {
                    ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence)
                }
                state.timers.removeAll { $0.deadline <= now }
                let due = expired.map(\.work) + state.work
                state.work.removeAll(keepingCapacity: true)
                if due.isEmpty && state.released {
                    state.timers.removeAll()
                    return nil
                }
                return due
            }
            guard let due else { return }
            for work in due { work() }
        }
    }
}
