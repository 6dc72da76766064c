/// A bounded, lock-protected priority FIFO shared by the socket side (producers) and the audio thread (the
/// consumer). Producers never block: a full queue refuses with `queue_full`, never drops silently. The
/// consumer blocks on a condition variable, woken one waiter at a time.
///
/// The rules (see ``JobPriority`` and docs/protocol.md):
/// - `dequeue` takes the oldest `urgent` element, else the oldest `payment`, else the oldest `notice`, else the
///   waiting `status` one.
/// - `urgent` + `payment` + `notice` elements together are bounded by `capacity`; `status` has one slot of its own and a
///   newer status element replaces the waiting one (returned to the caller as superseded).
/// - An element whose `expiresAt` has passed when its turn comes is not returned; it is handed to `onDiscard`
///   as `.expired` and the next one is taken.
///
/// An element the consumer took stays *in flight* until the consumer `release`s it: a cancel finds it there
/// (and flags it) in the same locked step that searches the waiting lanes, so no element is ever in neither
/// place. Within a lane elements are in id order (ids grow with acceptance), which is how a cancel whose
/// journal write failed puts its elements back where they were (`restore`).
public final class JobQueue<Element: Schedulable>: Sendable {
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

        /// Puts an element back in id order.
        mutating func insertInOrder(_ element: Element) {
            let index = items[head...].firstIndex { $0.id > element.id } ?? items.endIndex
            items.insert(element, at: index)
        }
    }

    private struct State {
        var urgent = Lane()
        var payment = Lane()
        var notice = Lane()
        var status: Element?
        /// Taken by the consumer and not released yet: id → a cancel was asked for it.
        var inFlight: [UInt64: Bool] = [:]
        var closed = false
        /// ``hint()`` was called and no element was taken since.
        var hinted = false
        var capacity: Int
        var discardHandler: (@Sendable (Element, Discard) -> Void)?

        var isEmpty: Bool { urgent.isEmpty && payment.isEmpty && notice.isEmpty && status == nil }
        var bounded: Int { urgent.count + payment.count + notice.count }

        mutating func append(_ element: Element) {
            switch element.priority {
            case .urgent: urgent.append(element)
            case .payment: payment.append(element)
            case .notice: notice.append(element)
            case .status: preconditionFailure("a status element has its slot, not a lane")
            }
        }
    }

    private let state: ConditionLock<State>

    public init(capacity: Int) {
        precondition(capacity > 0, "a queue needs room for at least one job")
        state = ConditionLock(State(capacity: capacity))
    }

    /// Most `urgent` + `payment` elements waiting at once. May be changed while running (config reload);
    /// lowering it never drops what is already waiting.
    public var capacity: Int {
        get { state.withLock { $0.capacity } }
        set {
            precondition(newValue > 0, "a queue needs room for at least one job")
            state.withLock { $0.capacity = newValue }
        }
    }

    /// Called (outside the lock, on the consumer's thread) for every element discarded at its turn.
    public func onDiscard(_ handler: @escaping @Sendable (Element, Discard) -> Void) {
        state.withLock { $0.discardHandler = handler }
    }

    /// Whether an element of `priority` would be accepted now (the bound, and not closed).
    public func hasRoom(for priority: JobPriority) -> Bool {
        state.withLock { !$0.closed && (!priority.isBounded || $0.bounded < $0.capacity) }
    }

    /// Adds an element in its lane. Throws `queue_full` (never drops silently) or `shutting_down`.
    /// `ignoringBound` is for jobs already accepted (recovered from the journal after a restart, or committed
    /// before a reload lowered the bound). Returns the status element this one replaced ("last one wins").
    @discardableResult
    public func enqueue(_ element: Element, ignoringBound: Bool = false) throws(AnnounceError) -> Element? {
        let result: Result<Element?, AnnounceError> = state.withLock { state in
            guard !state.closed else { return .failure(AnnounceError(.shuttingDown, "the daemon is shutting down")) }
            var replaced: Element?
            switch element.priority {
            case .urgent, .payment, .notice:
                guard ignoringBound || state.bounded < state.capacity else {
                    return .failure(
                        AnnounceError(
                            .queueFull,
                            "the queue is full (\(state.capacity) jobs waiting); nothing was dropped, try again"))
                }
                state.append(element)
            case .status:
                replaced = state.status
                state.status = element
            }
            return .success(replaced)
        }
        state.signal()
        return try result.get()
    }

    /// Takes the next element to play, waiting until there is one, and holds it in flight until `release`.
    /// Returns nil once the queue is closed and empty (or closed with `closeNow`), or when `deadline`
    /// (monotonic nanoseconds) passes.
    public func dequeue(until deadline: UInt64? = nil) -> Element? {
        if case let .element(element) = take(until: deadline, wakingAtHint: false) { return element }
        return nil
    }

    /// Takes the next element to play if there is one, without waiting (held in flight until `release`).
    public func tryDequeue() -> Element? {
        dequeue(until: 0)
    }

    /// What ``next(until:)`` waited for.
    public enum Arrival {
        /// The next element, in flight until `release`.
        case element(Element)
        /// ``hint()`` was called: an element is on its way.
        case hinted
        /// `deadline` passed first.
        case timedOut
        /// The queue is closed and empty.
        case closed
    }

    /// Says that an element is about to be enqueued (it is being written to the journal), so that a consumer
    /// waiting in ``next(until:)`` can get ready for it meanwhile. The hint lapses when an element is taken.
    public func hint() {
        state.withLock { $0.hinted = true }
        state.signal()
    }

    /// ``dequeue(until:)`` that also returns at a ``hint()``.
    public func next(until deadline: UInt64? = nil) -> Arrival {
        take(until: deadline, wakingAtHint: true)
    }

    private func take(until deadline: UInt64?, wakingAtHint: Bool) -> Arrival {
        while true {
            let (arrival, expired, handler) = state.withLock(
                when: { !$0.isEmpty || $0.closed || (wakingAtHint && $0.hinted) }, until: deadline
            ) { state -> (Arrival?, Element?, (@Sendable (Element, Discard) -> Void)?) in
                if !state.isEmpty {
                    let (element, expired) = Self.takeNext(&state)
                    return (element.map(Arrival.element), expired, state.discardHandler)
                }
                if state.closed { return (.closed, nil, nil) }
                if wakingAtHint && state.hinted {
                    state.hinted = false
                    return (.hinted, nil, nil)
                }
                return (.timedOut, nil, nil)
            }
            if let expired { handler?(expired, .expired) }
            if let arrival { return arrival }
        }
    }

    /// The consumer is done with an element it took (played, failed, cancelled, or given back at shutdown).
    public func release(_ id: UInt64) {
        state.withLock { _ = $0.inFlight.removeValue(forKey: id) }
    }

    /// Puts an element the consumer took back in its lane, where its id places it (a notice cut by a payment: heard
    /// again from its start after it). False, and the element stays in flight, if a cancel was asked for it.
    public func requeue(_ element: Element) -> Bool {
        let requeued: Bool = state.withLock { state in
            guard state.inFlight[element.id] == false else { return false }
            state.inFlight[element.id] = nil
            switch element.priority {
            case .urgent: state.urgent.insertInOrder(element)
            case .payment: state.payment.insertInOrder(element)
            case .notice: state.notice.insertInOrder(element)
            case .status: return false
            }
            return true
        }
        if requeued { state.signal() }
        return requeued
    }

    /// Whether an element that would cut one of class `playing` waits (``JobPriority/interrupts(_:)``).
    public func hasWaiting(interrupting playing: JobPriority) -> Bool {
        state.withLock { state in
            (!state.urgent.isEmpty && JobPriority.urgent.interrupts(playing))
                || (!state.payment.isEmpty && JobPriority.payment.interrupts(playing))
        }
    }

    /// Whether a cancel was asked for an element in flight.
    public func isCancelRequested(_ id: UInt64) -> Bool {
        state.withLock { $0.inFlight[id] == true }
    }

    /// Ids of the elements in flight (taken by the consumer, not yet released).
    public var inFlight: Set<UInt64> { state.withLock { Set($0.inFlight.keys) } }

    /// Cancels in one step: removes the matching waiting elements and returns them in play order, and flags the
    /// matching elements in flight (returned as `flagged`; the consumer sees `isCancelRequested` and stops).
    public func cancel(where predicate: (UInt64) -> Bool) -> (removed: [Element], flagged: [UInt64]) {
        state.withLock { state in
            let removed = Self.remove(&state) { predicate($0.id) }
            var flagged: [UInt64] = []
            for (id, requested) in state.inFlight where predicate(id) {
                if !requested { state.inFlight[id] = true }
                flagged.append(id)
            }
            return (removed, flagged.sorted())
        }
    }

    /// Undoes `cancel`'s removal (its journal write failed): the elements go back where they were, in id order.
    /// Returns a status element that could not go back because a newer one took its slot (superseded).
    @discardableResult
    public func restore(_ elements: [Element]) -> [Element] {
        let superseded: [Element] = state.withLock { state in
            var superseded: [Element] = []
            for element in elements {
                switch element.priority {
                case .urgent: state.urgent.insertInOrder(element)
                case .payment: state.payment.insertInOrder(element)
                case .notice: state.notice.insertInOrder(element)
                case .status:
                    if let waiting = state.status, waiting.id > element.id {
                        superseded.append(element)
                    } else {
                        if let waiting = state.status { superseded.append(waiting) }
                        state.status = element
                    }
                }
            }
            return superseded
        }
        state.broadcast()
        return superseded
    }

    /// Removes and returns every waiting element that matches, in play order.
    @discardableResult
    public func remove(where predicate: (Element) -> Bool) -> [Element] {
        state.withLock { Self.remove(&$0, where: predicate) }
    }

    /// The waiting elements in the order they would be played (expired ones included until their turn).
    public var snapshot: [Element] {
        state.withLock {
            Array($0.urgent.waiting) + Array($0.payment.waiting) + Array($0.notice.waiting) + ($0.status.map { [$0] } ?? [])
        }
    }

    /// Every waiting element.
    public var count: Int {
        state.withLock { $0.bounded + ($0.status == nil ? 0 : 1) }
    }

    /// Waiting elements that count toward the bound (`urgent` + `payment`).
    public var boundedCount: Int {
        state.withLock { $0.bounded }
    }

    /// Refuses new elements; the consumer drains what is left, then gets nil.
    public func close() {
        state.withLock { $0.closed = true }
        state.broadcast()
    }

    /// Refuses new elements and takes every waiting one out, so the consumer gets nil after what it is playing.
    /// Returns what was waiting, in play order (a graceful shutdown leaves them in the journal).
    @discardableResult
    public func closeNow() -> [Element] {
        let waiting: [Element] = state.withLock { state in
            state.closed = true
            var waiting = Array(state.urgent.waiting) + Array(state.payment.waiting) + Array(state.notice.waiting)
            if let status = state.status { waiting.append(status) }
            state.urgent = Lane()
            state.payment = Lane()
            state.notice = Lane()
            state.status = nil
            return waiting
        }
        state.broadcast()
        return waiting
    }

    private static func remove(_ state: inout State, where predicate: (Element) -> Bool) -> [Element] {
        var removed =
            state.urgent.remove(where: predicate) + state.payment.remove(where: predicate)
            + state.notice.remove(where: predicate)
        if let waiting = state.status, predicate(waiting) {
            removed.append(waiting)
            state.status = nil
        }
        return removed
    }

    /// Under the lock: the next element (now in flight), or an expired one to report.
    private static func takeNext(_ state: inout State) -> (Element?, Element?) {
        let element: Element
        if !state.urgent.isEmpty {
            element = state.urgent.takeFirst()
        } else if !state.payment.isEmpty {
            element = state.payment.takeFirst()
        } else if !state.notice.isEmpty {
            element = state.notice.takeFirst()
        } else {
            element = state.status!
            state.status = nil
        }
        if let deadline = element.expiresAt, Monotonic.nanos >= deadline {
            return (nil, element)
        }
        state.inFlight[element.id] = false
        state.hinted = false
        return (element, nil)
    }
}
