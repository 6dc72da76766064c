import AnnounceSystemd
import Logging
import Synchronization
import Testing

/// The watchdog's decision: ping only while every part is alive. The real pings to a real notify socket are
/// tested with the real daemon in IntegrationTests/SystemdTests.swift.
struct WatchdogTests {
    final class Switch: Sendable {
        let on = Atomic<Bool>(true)
        func set(_ value: Bool) { on.store(value, ordering: .relaxed) }
        var value: Bool { on.load(ordering: .relaxed) }
    }

    final class Counter: Sendable {
        let count = Atomic<Int>(0)
        func increment() { count.add(1, ordering: .relaxed) }
        var value: Int { count.load(ordering: .relaxed) }
    }

    @Test func pingsOnlyWhileEveryPartIsAlive() {
        let audio = Switch()
        let loop = Switch()
        let pings = Counter()
        let watchdog = WatchdogService(
            timeout: .seconds(10),
            probes: [LivenessProbe("audio thread") { audio.value }, LivenessProbe("event loop") { loop.value }],
            logger: Logger(label: "test"), ping: { pings.increment() })
        #expect(watchdog.interval == .seconds(5))

        #expect(watchdog.check() == .pinged)
        #expect(pings.value == 1)
        audio.set(false)
        #expect(watchdog.check() == .withheld(["audio thread"]))
        loop.set(false)
        #expect(watchdog.check() == .withheld(["audio thread", "event loop"]))
        #expect(pings.value == 1)
        audio.set(true)
        loop.set(true)
        #expect(watchdog.check() == .pinged)
        #expect(pings.value == 2)
    }

    @Test func aFailedPingDoesNotStopTheWatchdog() {
        struct Refused: Error {}
        let attempts = Counter()
        let watchdog = WatchdogService(
            timeout: .seconds(2), probes: [], logger: Logger(label: "test"),
            ping: {
                attempts.increment()
                throw Refused()
            })
        #expect(watchdog.check() == .pinged)
        #expect(watchdog.check() == .pinged)
        #expect(attempts.value == 2)
    }

    @Test func progressWatchTellsAStuckWorkerFromABusyOne() {
        let start = ContinuousClock.now
        let watch = ProgressWatch<Int>(limit: .seconds(30), now: start)
        // Idle for any time is alive.
        #expect(watch.isAlive(working: nil, now: start + .seconds(100)))
        // Job 1 for 29 s: alive; for 30 s: stuck.
        #expect(watch.isAlive(working: 1, now: start + .seconds(100)))
        #expect(watch.isAlive(working: 1, now: start + .seconds(129)))
        #expect(!watch.isAlive(working: 1, now: start + .seconds(130)))
        // Moving on to job 2 is progress: the clock starts again.
        #expect(watch.isAlive(working: 2, now: start + .seconds(131)))
        #expect(watch.isAlive(working: 2, now: start + .seconds(160)))
        #expect(!watch.isAlive(working: 2, now: start + .seconds(161)))
        // Idle again, then job 2 again (a new burst): a fresh start.
        #expect(watch.isAlive(working: nil, now: start + .seconds(162)))
        #expect(watch.isAlive(working: 2, now: start + .seconds(190)))
    }
}
