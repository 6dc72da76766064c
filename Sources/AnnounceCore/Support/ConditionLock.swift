import CPthread
#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex with one condition variable: where a thread of the daemon's own waits for work —
/// the audio thread for its next job (``JobQueue``), a ``SerialThread`` (the job executor among them) for its next
/// task, a caller for a result another thread hands back. pthread, not Foundation's NSCondition: no Foundation in
/// the core, and ThreadSanitizer understands it.
public final class ConditionLock<Value>: @unchecked Sendable {  // the value is only reached under the mutex
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` under the lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` under the lock once `ready` holds, waiting (the lock released) until a `signal`/`broadcast`
    /// makes it true, or until `deadline` (monotonic nanoseconds, ``Monotonic/nanos``) passes: then `body` gets
    /// the value anyway and must check `ready` itself.
    public func withLock<Result>(
        when ready: (Value) -> Bool, until deadline: UInt64? = nil, _ body: (inout Value) throws -> Result
    ) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(value) {
            guard let deadline else {
                pthread_cond_wait(condition, mutex)
                continue
            }
            let now = Monotonic.nanos
            guard now < deadline else { break }
            // Against the monotonic clock: a wall-clock step must not stretch or cut a wait.
            var clock = timespec()
            clock_gettime(CLOCK_MONOTONIC, &clock)
            let target = UInt64(clock.tv_sec) * 1_000_000_000 + UInt64(clock.tv_nsec) + (deadline - now)
            var until = timespec(tv_sec: Int(target / 1_000_000_000), tv_nsec: Int(target % 1_000_000_000))
            _ = pthread_cond_clockwait(condition, mutex, CLOCK_MONOTONIC, &until)
        }
        return try body(&value)
    }

    /// Wakes one waiter (call with or without the lock held).
    public func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiter.
    public func broadcast() { pthread_cond_broadcast(condition) }
}
