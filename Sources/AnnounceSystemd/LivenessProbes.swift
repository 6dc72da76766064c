import NIOCore
import Synchronization

/// Tells a stuck worker from a busy one by what it reports working on: alive while idle (nil), and while the
/// work item changes at least every `limit`. The same item for longer than `limit` means stuck.
public final class ProgressWatch<Work: Equatable & Sendable>: Sendable {
    public let limit: Duration
    private let seen: Mutex<(work: Work?, since: ContinuousClock.Instant)>

    public init(limit: Duration, now: ContinuousClock.Instant = .now) {
        self.limit = limit
        seen = Mutex((nil, now))
    }

    /// Records what the worker reports now; false if it has reported the same work item for `limit` or more.
    public func isAlive(working work: Work?, now: ContinuousClock.Instant = .now) -> Bool {
        seen.withLock { seen in
            guard let work else {
                seen = (nil, now)
                return true
            }
            if seen.work != work { seen = (work, now) }
            return now - seen.since < limit
        }
    }
}

/// Alive while every event loop has run the no-op task scheduled on it at the previous check: a loop that is
/// blocked does not run it.
public final class EventLoopProbe: Sendable {
    private let loops: [any EventLoop]
    /// Per loop: a task scheduled at the previous check has not run yet.
    private let pending: Mutex<[Bool]>

    public init(_ group: EventLoopGroup) {
        loops = Array(group.makeIterator())
        pending = Mutex(Array(repeating: false, count: loops.count))
    }

    /// Call once per watchdog interval; never blocks.
    public func check() -> Bool {
        var alive = true
        for (index, loop) in loops.enumerated() {
            let stillPending = pending.withLock { pending in
                defer { pending[index] = true }
                return pending[index]
            }
            if stillPending {
                alive = false
                continue
            }
            loop.execute { [self] in pending.withLock { $0[index] = false } }
        }
        return alive
    }
}
