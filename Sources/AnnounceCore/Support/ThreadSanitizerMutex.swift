#if ANNOUNCE_TSAN
import Glibc

/// Compiled only into the ThreadSanitizer stage of scripts/test.sh (`-Xswiftc -DANNOUNCE_TSAN`), never into the
/// product. On Linux, `Synchronization.Mutex` waits on a futex inside the uninstrumented standard library, so
/// TSan sees none of its locking and reports every access it guards as a race (a two-thread `withLock` counter
/// is enough). This lock has the same API on a `pthread_mutex_t`, which TSan intercepts; as a declaration of a
/// module that imports Synchronization, it shadows `Synchronization.Mutex` in AnnounceCore and in every module
/// importing AnnounceCore, so the TSan build checks the project's own code with locks TSan understands.
public final class Mutex<Value>: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Plain memory, so that TSan checks each access against the lock (a stored property would add Swift's
    /// exclusivity instrumentation, which misreports a zero-sized `Value`).
    private let value = UnsafeMutablePointer<Value>.allocate(capacity: 1)

    public init(_ initialValue: sending Value) {
        value.initialize(to: initialValue)
        pthread_mutex_init(lock, nil)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    public func withLock<Result, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body(&value.pointee)
    }
}
#endif
