import AnnounceCore
import Foundation
import Synchronization
import Testing

@testable import AnnounceServer

/// The one executor of the jobs' life: a thread of its own, first in first out, timers in deadline order, and an
/// actor on it running there.
struct JobExecutorTests {
    actor Probe {
        nonisolated let executor: JobExecutor
        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
        init(executor: JobExecutor) { self.executor = executor }
        func whereAmI() -> (onExecutor: Bool, name: String) { (executor.isCurrent, Self.threadName()) }
        static func threadName() -> String {
            let text = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Blocks until `condition` holds (10 s at most).
    func waitUntil(_ condition: () -> Bool) -> Bool {
        for _ in 0..<10_000 {
            if condition() { return true }
            usleep(1_000)
        }
        return condition()
    }

    @Test func workRunsInOrderOnItsOwnThread() async throws {
        let executor = JobExecutor(name: "test-jobs")
        let seen = Mutex<[Int]>([])
        let names = Mutex<Set<String>>([])
        for index in 0..<500 {
            executor.submit {
                seen.withLock { $0.append(index) }
                names.withLock { _ = $0.insert(Probe.threadName()) }
            }
        }
        #expect(waitUntil { seen.withLock { $0.count } == 500 })
        #expect(seen.withLock { $0 } == Array(0..<500), "first in, first out")
        #expect(names.withLock { $0 } == ["test-jobs"])
        #expect(!executor.isCurrent, "the test's own thread is not the executor's")
    }

    @Test func timersFireInDeadlineOrderAndAnEarlierOneAddedLaterIsNotHeldUp() async throws {
        let executor = JobExecutor(name: "test-timers")
        let fired = Mutex<[String]>([])
        let started = Monotonic.nanos
        executor.after(milliseconds: 3_000) { fired.withLock { $0.append("late") } }
        // The executor now waits for the late one; an earlier one must wake it.
        usleep(50_000)
        executor.after(milliseconds: 100) { fired.withLock { $0.append("early") } }
        #expect(waitUntil { fired.withLock { $0 } == ["early"] })
        #expect(Monotonic.nanos - started < 2_000_000_000, "the early timer waited for the late one")
        #expect(waitUntil { fired.withLock { $0 } == ["early", "late"] })
    }

    @Test func anActorOnItRunsThere() async throws {
        let probe = Probe(executor: JobExecutor(name: "test-actor"))
        let (onExecutor, name) = await probe.whereAmI()
        #expect(onExecutor && name == "test-actor")
    }
}
