#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A bounded, lock-protected priority FIFO shared by the socket side (producers) and the audio thread (the
/// consumer). Producers never block: a full queue refuses with `queue_full`, never drops silently. The
/// consumer blocks on a condition variable, woken one waiter at a time.
///
/// The rules (see ``JobPriority`` and docs/protocol.md):
/// - `dequeue` takes the oldest `urgent` element, else the oldest `payment`, else the waiting `status` one.
/// - `urgent` + `payment` elements together are bounded by `capacity`; `status` has one slot of its own and a
///   newer status element replaces the waiting one (returned to the caller as superseded).
/// - An element whose `expiresAt` has passed when its turn comes is not returned; it is handed to `onDiscard`
///   as `.expired` and the next one is taken.
public final class JobQueue<Element: Schedulable>: @unchecked Sendable {
    /// Why an element left the queue without being played.
    public enum Discard: Sendable, Equatable {
        case expired
    }

    /// One first-in-first-out lane (array with a moving head, compacted now and then).
    private struct Lane {
        var items: [Element] = []
        var head = 0
        var count: Int { items.count - head }
        var isEmpty: Bool { items.count == head }
        var waiting: ArraySlice<Element> { items[head...] }

        mutating func append(_ element: Element) { items.append(element) }

        mutating func takeFirst() -> Element {
            let element = items[head]
            head += 1
            if head > 64 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
            return element
        }

        mutating func remove(where predicate: (Element) -> Bool) -> [Element] {
            var removed: [Element] = []
            var kept: [Element] = []
            for element in items[head...] {
                if predicate(element) { removed.append(element) } else { kept.append(element) }
            }
            items = kept
            head = 0
            return removed
        }
    }

    private let condition = Condition()
    private var urgent = Lane()
    private var payment = Lane()
    private var status: Element?
    private var closed = false
    private var capacityValue: Int
    private var discardHandler: (@Sendable (Element, Discard) -> Void)?

    public init(capacity: Int) {
        precondition(capacity > 0, "a queue needs room for at least one job")
        self.capacityValue = capacity
    }

    /// Most `urgent` + `payment` elements waiting at once. May be changed while running (config reload);
    /// lowering it never drops what is already waiting.
    public var capacity: Int {
        get { condition.withLock { capacityValue } }
        set {
            precondition(newValue > 0, "a queue needs room for at least one job")
            condition.withLock { capacityValue = newValue }
        }
    }

    /// Called (outside the lock, on the consumer's thread) for every element discarded at its turn.
    public func onDiscard(_ handler: @escaping @Sendable (Element, Discard) -> Void) {
        condition.withLock { discardHandler = handler }
    }

    /// Whether an element of `priority` would be accepted now (the bound, and not closed).
    public func hasRoom(for priority: JobPriority) -> Bool {
        condition.withLock { !closed && (!priority.isBounded || urgent.count + payment.count < capacityValue) }
    }

    /// Adds an element in its lane. Throws `queue_full` (never drops silently) or `shutting_down`.
    /// `ignoringBound` is for jobs already accepted earlier (recovered from the journal after a restart).
    /// Returns the status element this one replaced ("last one wins"), if any.
    @discardableResult
    public func enqueue(_ element: Element, ignoringBound: Bool = false) throws(AnnounceError) -> Element? {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { throw AnnounceError(.shuttingDown, "the daemon is shutting down") }
        var replaced: Element?
        switch element.priority {
        case .urgent, .payment:
            guard ignoringBound || urgent.count + payment.count < capacityValue else {
                throw AnnounceError(
                    .queueFull, "the queue is full (\(capacityValue) jobs waiting); nothing was dropped, try again")
            }
            if element.priority == .urgent { urgent.append(element) } else { payment.append(element) }
        case .status:
            replaced = status
            status = element
        }
        condition.signal()
        return replaced
    }

    /// Removes the next element to play, waiting until there is one. Returns nil once the queue is closed and
    /// empty (or closed with `closeNow`), or when `deadline` (monotonic nanoseconds) passes.
    public func dequeue(until deadline: UInt64? = nil) -> Element? {
        while true {
            condition.lock()
            while isEmpty {
                if closed {
                    condition.unlock()
                    return nil
                }
                if let deadline {
                    let now = Monotonic.nanos
                    guard now < deadline else {
                        condition.unlock()
                        return nil
                    }
                    _ = condition.wait(until: Date(timeIntervalSinceNow: Double(deadline - now) / 1e9))
                } else {
                    condition.wait()
                }
            }
            let (element, expired, handler) = takeNext()
            condition.unlock()
            if let element { return element }
            if let expired { handler?(expired, .expired) }
        }
    }

    /// Removes the next element to play if there is one, without waiting.
    public func tryDequeue() -> Element? {
        while true {
            condition.lock()
            guard !isEmpty else {
                condition.unlock()
                return nil
            }
            let (element, expired, handler) = takeNext()
            condition.unlock()
            if let element { return element }
            if let expired { handler?(expired, .expired) }
        }
    }

    /// Removes and returns every waiting element that matches, in play order.
    @discardableResult
    public func remove(where predicate: (Element) -> Bool) -> [Element] {
        condition.lock()
        defer { condition.unlock() }
        var removed = urgent.remove(where: predicate) + payment.remove(where: predicate)
        if let waiting = status, predicate(waiting) {
            removed.append(waiting)
            status = nil
        }
        return removed
    }

    /// The waiting elements in the order they would be played (expired ones included until their turn).
    public var snapshot: [Element] {
        condition.lock()
        defer { condition.unlock() }
        return Array(urgent.waiting) + Array(payment.waiting) + (status.map { [$0] } ?? [])
    }

    /// Every waiting element.
    public var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return urgent.count + payment.count + (status == nil ? 0 : 1)
    }

    /// Waiting elements that count toward the bound (`urgent` + `payment`).
    public var boundedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return urgent.count + payment.count
    }

    /// Refuses new elements; the consumer drains what is left, then gets nil.
    public func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Refuses new elements and takes every waiting one out, so the consumer gets nil after what it is playing.
    /// Returns what was waiting, in play order (a graceful shutdown leaves them in the journal).
    @discardableResult
    public func closeNow() -> [Element] {
        condition.lock()
        closed = true
        var waiting = Array(urgent.waiting) + Array(payment.waiting)
        if let status { waiting.append(status) }
        urgent = Lane()
        payment = Lane()
        status = nil
        condition.broadcast()
        condition.unlock()
        return waiting
    }

    private var isEmpty: Bool { urgent.isEmpty && payment.isEmpty && status == nil }

    /// Under the lock: the next element, or an expired one to report (and the handler to report it with).
    private func takeNext() -> (Element?, Element?, (@Sendable (Element, Discard) -> Void)?) {
        let element: Element
        if !urgent.isEmpty {
            element = urgent.takeFirst()
        } else if !payment.isEmpty {
            element = payment.takeFirst()
        } else {
            element = status!
            status = nil
        }
        if let deadline = element.expiresAt, Monotonic.nanos >= deadline {
            return (nil, element, discardHandler)
        }
        return (element, nil, nil)
    }
}
