import AnnounceCore
import Logging
import Synchronization

/// Hands every final state, as it reaches the disk, to the subscribers of `subscribe` (docs/protocol.md).
///
/// Publishing never blocks and never waits for a subscriber: each subscriber has a bounded buffer of its own, and
/// one that lets it overflow is dropped (its subscription ends with `lagged`; it resubscribes with `since` and
/// loses nothing). So a slow or stuck subscriber costs the recorder — and through it the audio thread — one
/// lock and an append, whatever it does.
final class FinalEvents: Sendable {
    private struct State {
        var next = 0
        var subscribers: [Int: (subscription: Subscription, who: Logger.Metadata)] = [:]
        /// Set at shutdown: new subscriptions end at once with it.
        var closed: AnnounceError?
        /// Subscriptions still being served (their connection task has not given its token back).
        var serving: Set<Int> = []
        /// Resumed when nothing is served any more.
        var leaveWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Events one subscriber may have unread before it is dropped.
    let capacity: Int
    private let logger: Logger
    private let state = Mutex(State())

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    /// A new subscription, receiving every event from now on. Give its token back with ``unsubscribe(_:)``.
    /// `who` names the subscriber in the log if it is dropped.
    func subscribe(who: Logger.Metadata = [:]) -> (token: Int, subscription: Subscription) {
        let subscription = Subscription(capacity: capacity)
        let (token, closed) = state.withLock { state -> (Int, AnnounceError?) in
            state.next += 1
            if state.closed == nil { state.subscribers[state.next] = (subscription, who) }
            state.serving.insert(state.next)
            return (state.next, state.closed)
        }
        if let closed { subscription.end(closed) }
        return (token, subscription)
    }

    /// A last line owed to a client (the final reply of a `wait`): the stop waits for it as for a subscriber's
    /// (``waitUntilServed(timeout:)``), so that the connections are not closed under a reply the stop has just released.
    /// Give the token back with ``unsubscribe(_:)`` once that line is written.
    func owe() -> Int {
        state.withLock { state in
            state.next += 1
            state.serving.insert(state.next)
            return state.next
        }
    }

    /// The subscription's (or the owed reply's) connection task is done with it (its last line written).
    func unsubscribe(_ token: Int) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.subscribers[token] = nil
            state.serving.remove(token)
            guard state.serving.isEmpty else { return [] }
            defer { state.leaveWaiters = [] }
            return state.leaveWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// After ``close(_:)``: waits until every subscriber has been told why its stream ends (its last line written),
    /// or `timeout` (a subscriber that does not read), so that the shutdown does not cut that line off.
    func waitUntilServed(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let done = self.state.withLock { state -> Bool in
                        guard !state.serving.isEmpty else { return true }
                        state.leaveWaiters.append(continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                for waiter in self.state.withLock({ state in
                    defer { state.leaveWaiters = [] }
                    return state.leaveWaiters
                }) {
                    waiter.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// A job's final state is on disk.
    func publish(_ info: JobInfo) { publish(.final(info)) }

    /// A repeating notice's end is on disk.
    func publish(_ info: RepeatInfo) { publish(.repeatEnded(info)) }

    private func publish(_ item: Subscription.Item) {
        let overflowed = state.withLock { state -> [(subscription: Subscription, who: Logger.Metadata)] in
            var overflowed: [(subscription: Subscription, who: Logger.Metadata)] = []
            for (token, subscriber) in state.subscribers where !subscriber.subscription.offer(item) {
                state.subscribers[token] = nil
                overflowed.append(subscriber)
            }
            return overflowed
        }
        for (subscription, who) in overflowed {
            let reason = AnnounceError(
                .lagged,
                "this subscriber left \(capacity) events unread and was dropped; subscribe again with \"since\" "
                    + "(nothing is lost)")
            // What it has buffered, and then why it ends, reach it if it reads again; else its connection closes
            // once it has not read for `limits.write_timeout`.
            logger.warning(
                "subscriber dropped: it did not read its events",
                metadata: who.merging(["buffer": "\(capacity)"]) { first, _ in first })
            subscription.end(reason)
        }
    }

    /// Something `status` reports has changed.
    func statusChanged() {
        for subscriber in state.withLock({ Array($0.subscribers.values) }) {
            subscriber.subscription.markStatusChanged()
        }
    }

    /// Ends every subscription, and every later one, with `reason` (shutdown).
    func close(_ reason: AnnounceError) {
        let all = state.withLock { state -> [Subscription] in
            state.closed = reason
            defer { state.subscribers = [:] }
            return state.subscribers.values.map(\.subscription)
        }
        for subscription in all { subscription.end(reason) }
    }
}

/// One subscriber's events: a bounded buffer filled by ``FinalEvents`` (any thread, never blocking) and read by
/// the subscriber's connection task.
final class Subscription: Sendable {
    enum Item: Sendable, Equatable {
        case final(JobInfo)
        case repeatEnded(RepeatInfo)
        case statusChanged
        /// Nothing more comes: why (`lagged`, `shutting_down`).
        case ended(AnnounceError)
    }

    private struct State {
        /// Finals and repeat ends, in order.
        var events: [Item] = []
        var head = 0
        var statusChanged = false
        var ended: AnnounceError?
        var waiter: CheckedContinuation<Item, Never>?

        var unread: Int { events.count - head }

        /// The next item, if there is one: buffered events first, then a status change, then the end.
        mutating func take() -> Item? {
            if head < events.count {
                let item = events[head]
                head += 1
                if head == events.count {
                    events.removeAll(keepingCapacity: true)
                    head = 0
                }
                return item
            }
            if statusChanged {
                statusChanged = false
                return .statusChanged
            }
            return ended.map(Item.ended)
        }

        /// The waiting reader, given the item it is resumed with (which is therefore taken from the buffer).
        mutating func takeWaiter() -> CheckedContinuation<Item, Never>? {
            guard let waiter else { return nil }
            // The reader only waits when nothing was buffered, so the item it gets is the one just added.
            _ = take()
            self.waiter = nil
            return waiter
        }
    }

    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int) { self.capacity = capacity }

    /// Adds an event (a final, a repeat's end); false when the buffer is full (the event is not added).
    func offer(_ item: Item) -> Bool {
        let (accepted, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Item, Never>?) in
            guard state.ended == nil else { return (true, nil) }
            guard state.unread < capacity else { return (false, nil) }
            state.events.append(item)
            return (true, state.takeWaiter())
        }
        waiter?.resume(returning: item)
        return accepted
    }

    func markStatusChanged() {
        let waiter = state.withLock { state -> CheckedContinuation<Item, Never>? in
            guard state.ended == nil else { return nil }
            state.statusChanged = true
            return state.takeWaiter()
        }
        waiter?.resume(returning: .statusChanged)
    }

    /// Ends the subscription: what is buffered is still delivered, then `.ended(reason)`.
    func end(_ reason: AnnounceError) {
        let waiter = state.withLock { state -> CheckedContinuation<Item, Never>? in
            guard state.ended == nil else { return nil }
            state.ended = reason
            return state.takeWaiter()
        }
        waiter?.resume(returning: .ended(reason))
    }

    /// The next item, waiting for one. A cancelled task gets `.ended(shutting_down)`.
    func next() async -> Item {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Item, Never>) in
                let item = state.withLock { state -> Item? in
                    if let item = state.take() { return item }
                    state.waiter = continuation
                    return nil
                }
                if let item { continuation.resume(returning: item) }
            }
        } onCancel: {
            end(AnnounceError(.shuttingDown, "the subscription was cancelled"))
        }
    }
}
