import Foundation
import Synchronization
import Testing

@testable import AnnounceCore

/// A queue element for the tests: a number with a priority class and an optional deadline.
struct Item: Schedulable, Equatable, CustomStringConvertible {
    var value: Int
    var priority: JobPriority = .payment
    var expiresAt: UInt64?
    var id: UInt64 { UInt64(value) }

    static func payment(_ value: Int) -> Item { Item(value: value) }
    static func urgent(_ value: Int) -> Item { Item(value: value, priority: .urgent) }
    static func status(_ value: Int) -> Item { Item(value: value, priority: .status) }
    static func notice(_ value: Int) -> Item { Item(value: value, priority: .notice) }
    var description: String { "\(priority.rawValue)(\(value))" }
}

/// Collects what a queue discards.
final class Discards: Sendable {
    private let items = Mutex<[Item]>([])
    var values: [Int] { items.withLock { $0.map(\.value) } }
    func record(_ item: Item) { items.withLock { $0.append(item) } }
}

extension JobQueue where Element == Item {
    func drain() -> [Int] {
        var values: [Int] = []
        while let item = tryDequeue() { values.append(item.value) }
        return values
    }
}

struct JobQueueTests {
    @Test func paymentsAreFirstInFirstOut() throws {
        let queue = JobQueue<Item>(capacity: 10)
        for value in 1...5 { try queue.enqueue(.payment(value)) }
        #expect((1...5).map { _ in queue.dequeue()?.value } == [1, 2, 3, 4, 5])
        #expect(queue.tryDequeue() == nil)
    }

    /// `next` returns at a hint, once; a hint lapses when an element is taken; plain `dequeue` ignores hints.
    @Test func aHintWakesTheConsumerOnceAndLapsesWithTheElement() throws {
        @Sendable func name(_ arrival: JobQueue<Item>.Arrival) -> String {
            switch arrival {
            case let .element(item): "element \(item.value)"
            case .hinted: "hinted"
            case .timedOut: "timed out"
            case .closed: "closed"
            }
        }
        let queue = JobQueue<Item>(capacity: 10)
        #expect(name(queue.next(until: 0)) == "timed out")
        queue.hint()
        #expect(queue.tryDequeue() == nil, "a hint is not an element")
        #expect(name(queue.next(until: 0)) == "hinted")
        #expect(name(queue.next(until: 0)) == "timed out", "once")
        queue.hint()
        try queue.enqueue(.payment(1))
        #expect(name(queue.next()) == "element 1")
        #expect(name(queue.next(until: 0)) == "timed out", "the hint lapsed with the element it announced")
        queue.hint()
        try queue.enqueue(.payment(2))
        #expect(queue.dequeue()?.value == 2)
        #expect(name(queue.next(until: 0)) == "timed out", "taken by dequeue: lapsed too")
        // A waiting consumer is woken by the hint from another thread.
        let woken = DispatchSemaphore(value: 0)
        let seen = Mutex("")
        Thread.detachNewThread {
            seen.withLock { $0 = name(queue.next()) }
            woken.signal()
        }
        queue.hint()
        #expect(woken.wait(timeout: .now() + 10) == .success)
        #expect(seen.withLock { $0 } == "hinted")
        queue.close()
        #expect(name(queue.next()) == "closed")
    }

    @Test func refusesWhenFullAndKeepsWhatItHas() throws {
        let queue = JobQueue<Item>(capacity: 2)
        try queue.enqueue(.payment(1))
        try queue.enqueue(.urgent(2))
        #expect(!queue.hasRoom(for: .payment))
        #expect(!queue.hasRoom(for: .urgent))
        #expect(queue.hasRoom(for: .status), "status prompts have their own slot")
        #expect { try queue.enqueue(.payment(3)) } throws: { ($0 as? AnnounceError)?.code == .queueFull }
        #expect { try queue.enqueue(.urgent(4)) } throws: { ($0 as? AnnounceError)?.code == .queueFull }
        #expect(queue.snapshot.map(\.value) == [2, 1], "nothing was dropped to make room")
        _ = queue.dequeue()
        try queue.enqueue(.payment(3))
        #expect(queue.snapshot.map(\.value) == [1, 3])
    }

    @Test func urgentGoesBeforeWaitingPaymentsAndStatusComesLast() throws {
        let queue = JobQueue<Item>(capacity: 10)
        try queue.enqueue(.status(100))
        try queue.enqueue(.payment(1))
        try queue.enqueue(.payment(2))
        try queue.enqueue(.urgent(50))
        try queue.enqueue(.payment(3))
        try queue.enqueue(.urgent(51))
        #expect(queue.snapshot.map(\.value) == [50, 51, 1, 2, 3, 100])
        #expect(queue.drain() == [50, 51, 1, 2, 3, 100])
    }

    @Test func noticesComeAfterPaymentsAndBeforeStatusAndCountTowardTheBound() throws {
        let queue = JobQueue<Item>(capacity: 4)
        try queue.enqueue(.notice(1))
        try queue.enqueue(.status(2))
        try queue.enqueue(.payment(3))
        try queue.enqueue(.notice(4))
        try queue.enqueue(.urgent(5))
        #expect(queue.boundedCount == 4, "urgent, payment and both notices; the status prompt has its own slot")
        #expect(throws: AnnounceError.self) { try queue.enqueue(.notice(6)) }
        #expect(queue.drain() == [5, 3, 1, 4, 2])
    }

    @Test func aNoticeTakenIsPutBackFirstInItsLaneUnlessItsCancelWasAsked() throws {
        let queue = JobQueue<Item>(capacity: 8)
        try queue.enqueue(.notice(1))
        try queue.enqueue(.notice(2))
        let taken = try #require(queue.tryDequeue())
        #expect(!queue.hasWaiting(interrupting: .notice), "a notice never cuts a notice")
        try queue.enqueue(.payment(3))
        #expect(queue.hasWaiting(interrupting: .notice))
        #expect(!queue.hasWaiting(interrupting: .payment), "nothing cuts a payment")
        #expect(queue.requeue(taken))
        #expect(!queue.inFlight.contains(1))
        #expect(queue.drain() == [3, 1, 2], "the payment, then the notice cut, then the next")

        try queue.enqueue(.notice(4))
        let again = try #require(queue.tryDequeue())
        _ = queue.cancel { $0 == 4 }
        #expect(!queue.requeue(again), "a cancel asked for it wins: the consumer ends it cancelled")
        #expect(queue.inFlight.contains(4) && queue.isCancelRequested(4))
        #expect(queue.drain().isEmpty)
    }

    @Test func aNewerStatusPromptReplacesTheWaitingOne() throws {
        let queue = JobQueue<Item>(capacity: 1)
        #expect(try queue.enqueue(.status(1)) == nil)
        try queue.enqueue(.payment(7))
        let replaced = try queue.enqueue(.status(2))
        #expect(replaced?.value == 1, "the older prompt is handed back so that it can be reported superseded")
        #expect(queue.count == 2)
        #expect(queue.boundedCount == 1)
        #expect(queue.drain() == [7, 2])
    }

    @Test func anExpiredJobIsReportedAtItsTurnAndTheNextOnePlays() throws {
        let queue = JobQueue<Item>(capacity: 10)
        let discards = Discards()
        queue.onDiscard { item, reason in
            #expect(reason == .expired)
            discards.record(item)
        }
        let now = Monotonic.nanos
        try queue.enqueue(Item(value: 1, expiresAt: now + 60_000_000_000))
        try queue.enqueue(Item(value: 2, expiresAt: now))  // already past
        try queue.enqueue(.payment(3))
        #expect(queue.dequeue()?.value == 1)
        #expect(discards.values.isEmpty, "a ttl is checked when the job's turn comes, not before")
        #expect(queue.dequeue()?.value == 3)
        #expect(discards.values == [2])
    }

    @Test func closedQueueDrainsThenEnds() throws {
        let queue = JobQueue<Item>(capacity: 4)
        try queue.enqueue(.payment(1))
        queue.close()
        #expect { try queue.enqueue(.payment(2)) } throws: { ($0 as? AnnounceError)?.code == .shuttingDown }
        #expect(queue.dequeue()?.value == 1)
        #expect(queue.dequeue() == nil)
    }

    @Test func closeNowHandsBackWhatWaitsAndTheConsumerStops() throws {
        let queue = JobQueue<Item>(capacity: 4)
        try queue.enqueue(.payment(1))
        try queue.enqueue(.urgent(2))
        try queue.enqueue(.status(3))
        #expect(queue.closeNow().map(\.value) == [2, 1, 3])
        #expect(queue.dequeue() == nil)
        #expect { try queue.enqueue(.payment(4)) } throws: { ($0 as? AnnounceError)?.code == .shuttingDown }
    }

    @Test func recoveredJobsMayExceedALoweredBound() throws {
        let queue = JobQueue<Item>(capacity: 1)
        try queue.enqueue(.payment(1), ignoringBound: true)
        try queue.enqueue(.payment(2), ignoringBound: true)
        #expect(queue.count == 2)
        queue.capacity = 5
        try queue.enqueue(.payment(3))
        #expect(queue.drain() == [1, 2, 3])
    }

    @Test func dequeueWaitsForAProducer() throws {
        let queue = JobQueue<Item>(capacity: 4)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { _ = try? queue.enqueue(.payment(7)) }
        #expect(queue.dequeue()?.value == 7)
    }

    @Test func dequeueGivesUpAtTheDeadline() {
        let queue = JobQueue<Item>(capacity: 4)
        #expect(queue.dequeue(until: Monotonic.nanos + 20_000_000) == nil)
    }

    @Test func removeTakesMatchingWaitingElementsFromEveryLane() throws {
        let queue = JobQueue<Item>(capacity: 8)
        for value in 1...6 { try queue.enqueue(.payment(value)) }
        try queue.enqueue(.urgent(8))
        try queue.enqueue(.status(10))
        _ = queue.dequeue()
        #expect(queue.remove { $0.value % 2 == 0 }.map(\.value) == [2, 4, 6, 10])
        #expect(queue.snapshot.map(\.value) == [1, 3, 5])
    }

    /// Many producers and one consumer at the same time (the consumer takes while the producers put): every
    /// accepted element comes out exactly once, and each producer's elements in the order it sent them.
    @Test func concurrentProducersAndAConsumerLoseNothing() throws {
        let queue = JobQueue<Item>(capacity: 100_000)
        let producers = 8
        let perProducer = 2_000
        let seen = Mutex<[Int]>([])
        let consumer = Thread {
            while let item = queue.dequeue() {
                seen.withLock { $0.append(item.value) }
                queue.release(item.id)
            }
        }
        let done = DispatchSemaphore(value: 0)
        let finished = Thread {
            DispatchQueue.concurrentPerform(iterations: producers) { producer in
                for index in 0..<perProducer { _ = try? queue.enqueue(.payment(producer * perProducer + index)) }
            }
            done.signal()
        }
        consumer.start()
        finished.start()
        done.wait()
        // Some elements were taken while producers were still putting (the consumer started first).
        queue.close()
        while !consumer.isFinished { Thread.sleep(forTimeInterval: 0.001) }
        let values = seen.withLock { $0 }
        #expect(values.count == producers * perProducer)
        #expect(Set(values).count == values.count)
        for producer in 0..<producers {
            let mine = values.filter { $0 / perProducer == producer }
            #expect(mine == mine.sorted())
        }
        #expect(queue.inFlight.isEmpty)
    }

    @Test func aTakenElementStaysInFlightWhereACancelFindsIt() throws {
        let queue = JobQueue<Item>(capacity: 8)
        for value in 1...3 { try queue.enqueue(.payment(value)) }
        let taken = try #require(queue.dequeue())
        #expect(taken.value == 1 && queue.inFlight == [1])
        #expect(!queue.isCancelRequested(1))
        let (removed, flagged) = queue.cancel { $0 == 1 || $0 == 3 }
        #expect(removed.map(\.value) == [3], "waiting: taken out")
        #expect(flagged == [1], "in flight: flagged for the consumer")
        #expect(queue.isCancelRequested(1))
        queue.release(1)
        #expect(queue.inFlight.isEmpty && !queue.isCancelRequested(1))
        #expect(queue.snapshot.map(\.value) == [2])
    }

    @Test func restoreUndoesACancelInIDOrder() throws {
        let queue = JobQueue<Item>(capacity: 8)
        for value in 1...5 { try queue.enqueue(.payment(value)) }
        try queue.enqueue(.urgent(6))
        try queue.enqueue(.status(7))
        let (removed, _) = queue.cancel { $0 % 2 == 0 || $0 == 7 }
        #expect(removed.map(\.value) == [6, 2, 4, 7])
        #expect(queue.restore(removed).isEmpty)
        #expect(queue.snapshot.map(\.value) == [6, 1, 2, 3, 4, 5, 7], "back where they were")
        // A status prompt whose slot a newer one took cannot go back: it is superseded.
        let (status, _) = queue.cancel { $0 == 7 }
        try queue.enqueue(.status(8))
        #expect(queue.restore(status).map(\.value) == [7])
        #expect(queue.snapshot.last?.value == 8)
    }
}

struct DedupWindowTests {
    @Test func anOrderIsRememberedForTheWindowThenForgotten() {
        var window = DedupWindow(windowMs: 1_000)
        window.insert(.init(order: "A", kind: .payment, jobID: 1, acceptedAtMs: 10_000))
        #expect(window.lookup("A", kind: .payment, nowMs: 10_000)?.jobID == 1)
        #expect(window.lookup("A", kind: .payment, nowMs: 10_999)?.jobID == 1)
        #expect(window.lookup("B", kind: .payment, nowMs: 10_500) == nil)
        #expect(
            window.lookup("A", kind: .payment, nowMs: 11_000) == nil, "the window is [accepted, accepted + window)")
        #expect(window.count == 0)
    }

    @Test func aReacceptedOrderIsNotForgottenWithItsOldEntry() {
        var window = DedupWindow(windowMs: 1_000)
        window.insert(.init(order: "A", kind: .payment, jobID: 1, acceptedAtMs: 0))
        #expect(window.lookup("A", kind: .payment, nowMs: 1_500) == nil)
        window.insert(.init(order: "A", kind: .payment, jobID: 2, acceptedAtMs: 1_500))
        #expect(window.lookup("A", kind: .payment, nowMs: 2_000)?.jobID == 2)
        #expect(window.lookup("A", kind: .payment, nowMs: 2_499)?.jobID == 2)
    }

    @Test func entriesLoadedFromTheJournalCountFromTheirOwnAcceptance() {
        var window = DedupWindow(
            windowMs: 86_400_000,
            entries: [
                .init(order: "old", kind: .payment, jobID: 1, acceptedAtMs: 0),
                .init(order: "new", kind: .payment, jobID: 2, acceptedAtMs: 86_000_000),
            ])
        #expect(window.lookup("old", kind: .payment, nowMs: 86_400_000) == nil)
        #expect(window.lookup("new", kind: .payment, nowMs: 86_400_000)?.jobID == 2)
    }

    /// A prompt or a text with order id X does not block payment X, nor the other way round (issue 16, item 10).
    @Test func eachKindOfJobHasItsOwnOrderIDs() {
        var window = DedupWindow(windowMs: 1_000)
        window.insert(.init(order: "X", kind: .prompt, jobID: 1, acceptedAtMs: 0))
        #expect(window.lookup("X", kind: .payment, nowMs: 10) == nil)
        #expect(window.lookup("X", kind: .text, nowMs: 10) == nil)
        #expect(window.lookup("X", kind: .prompt, nowMs: 10)?.jobID == 1)
        window.insert(.init(order: "X", kind: .payment, jobID: 2, acceptedAtMs: 20))
        #expect(window.lookup("X", kind: .payment, nowMs: 30)?.jobID == 2)
        #expect(window.lookup("X", kind: .prompt, nowMs: 30)?.jobID == 1, "the prompt's entry is still its own")
        #expect(window.count == 2)
        // Each expires on its own clock.
        #expect(window.lookup("X", kind: .prompt, nowMs: 1_000) == nil)
        #expect(window.lookup("X", kind: .payment, nowMs: 1_000)?.jobID == 2)
        #expect(Utterance.prompt(name: "network-lost").dedupKind == .prompt)
        #expect(Utterance.text("hi").dedupKind == .text)
    }

    @Test func aClockThatWentBackwardsForgetsNothingEarly() {
        var window = DedupWindow(windowMs: 1_000)
        window.insert(.init(order: "A", kind: .payment, jobID: 1, acceptedAtMs: 5_000))
        window.insert(.init(order: "B", kind: .payment, jobID: 2, acceptedAtMs: 4_000))
        #expect(window.lookup("B", kind: .payment, nowMs: 4_900)?.jobID == 2)
        #expect(window.lookup("A", kind: .payment, nowMs: 5_500)?.jobID == 1)
    }
}
