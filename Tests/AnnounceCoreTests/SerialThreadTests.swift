import AnnounceCore
import Foundation
import Synchronization
import Testing

/// A thread of our own: first in first out, timers in deadline order, an actor on it running there, a caller
/// waiting for a result, and its end once released.
struct SerialThreadTests {
    actor Probe {
        nonisolated let executor: SerialThread
        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
        init(executor: SerialThread) { self.executor = executor }
        func whereAmI() -> (onExecutor: Bool, name: String) { (executor.isCurrent, Self.threadName()) }
        static func threadName() -> String {
            let text = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Waits until `condition` holds (10 s at most), woken by every change another thread announces.
    func waitUntil<Value>(_ box: ConditionLock<Value>, _ condition: @escaping (Value) -> Bool) -> Bool {
        box.withLock(when: condition, until: Monotonic.nanos + 10_000_000_000) { condition($0) }
    }

    @Test func workRunsInOrderOnItsOwnThread() async throws {
        let executor = SerialThread(name: "test-jobs")
        let seen = ConditionLock<(order: [Int], names: Set<String>)>(([], []))
        for index in 0..<500 {
            executor.submit {
                seen.withLock {
                    $0.order.append(index)
                    $0.names.insert(Probe.threadName())
                }
                seen.broadcast()
            }
        }
        #expect(waitUntil(seen) { $0.order.count == 500 })
        #expect(seen.withLock { $0.order } == Array(0..<500), "first in, first out")
        #expect(seen.withLock { $0.names } == ["test-jobs"])
        #expect(!executor.isCurrent, "the test's own thread is not the executor's")
    }

    @Test func timersFireInDeadlineOrderAndAnEarlierOneAddedLaterIsNotHeldUp() async throws {
        let executor = SerialThread(name: "test-timers")
        let fired = ConditionLock<[String]>([])
        let note = { @Sendable (name: String) in
            fired.withLock { $0.append(name) }
            fired.broadcast()
        }
        let started = Monotonic.nanos
        executor.after(milliseconds: 3_000) { note("late") }
        // The thread now waits for the late one; an earlier one must wake it.
        executor.sync { () -> Void in }
        executor.after(milliseconds: 100) { note("early") }
        #expect(waitUntil(fired) { $0 == ["early"] })
        #expect(Monotonic.nanos - started < 2_000_000_000, "the early timer waited for the late one")
        #expect(waitUntil(fired) { $0 == ["early", "late"] })
    }

    @Test func anActorOnItRunsThere() async throws {
        let probe = Probe(executor: SerialThread(name: "test-actor"))
        let (onExecutor, name) = await probe.whereAmI()
        #expect(onExecutor && name == "test-actor")
    }

    @Test func syncWaitsForWhatWasSubmittedBeforeAndHandsBackTheResultOrTheError() throws {
        struct Refused: Error, Equatable { let code: Int }
        let executor = SerialThread(name: "test-sync")
        let log = Mutex<[String]>([])
        executor.submit { log.withLock { $0.append("first") } }
        let value = executor.sync { () -> String in
            log.withLock { $0.append("sync") }
            return SerialThreadTests.Probe.threadName()
        }
        #expect(value == "test-sync")
        #expect(log.withLock { $0 } == ["first", "sync"])
        #expect(throws: Refused(code: 7)) { try executor.sync { () throws(Refused) -> Int in throw Refused(code: 7) } }
        // On the thread itself it runs at once (no deadlock).
        let nested = executor.sync { () -> Bool in executor.sync { () -> Bool in executor.isCurrent } }
        #expect(nested)
    }

    @Test func releasedItRunsWhatWasSubmittedDropsTimersNotDueAndEnds() throws {
        let ran = ConditionLock<[String]>([])
        let threads = { () -> Int in
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).filter { task in
                let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
                return comm.hasPrefix("test-release")
            }.count
        }
        do {
            let executor = SerialThread(name: "test-release")
            executor.after(milliseconds: 60_000) {
                ran.withLock { $0.append("timer") }
                ran.broadcast()
            }
            executor.submit {
                ran.withLock { $0.append("work") }
                ran.broadcast()
            }
            // The work has run, so the thread has its name.
            #expect(waitUntil(ran) { $0 == ["work"] })
            #expect(threads() == 1)
        }
        // The thread ends once released: gone from /proc within 10 s, the minute's timer never run.
        let gone = ConditionLock(0)
        let deadline = Monotonic.nanos + 10_000_000_000
        while threads() > 0 && Monotonic.nanos < deadline {
            _ = gone.withLock(when: { _ in false }, until: Monotonic.nanos + 10_000_000) { $0 }
        }
        #expect(threads() == 0, "the released thread is still there")
        #expect(ran.withLock { $0 } == ["work"])
    }
}
