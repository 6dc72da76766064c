import AnnounceSystemd
import Dispatch
import NIOPosix
import Testing

/// The event-loop probe against real NIO event loops, one of them really blocked.
struct EventLoopProbeTests {
    @Test func aBlockedEventLoopFailsTheProbeUntilItRunsAgain() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        do {
            try await checkProbe(group)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    func checkProbe(_ group: MultiThreadedEventLoopGroup) async throws {
        let probe = EventLoopProbe(group)

        // Both loops idle: the probe's no-op runs on each.
        #expect(probe.check())
        try await waitUntilEveryLoopRan(group)
        #expect(probe.check())
        try await waitUntilEveryLoopRan(group)

        // Block one loop: the no-op scheduled at the next check cannot run, so the check after it fails.
        let blocked = group.next()
        let release = DispatchSemaphore(value: 0)
        let isBlocked = DispatchSemaphore(value: 0)
        blocked.execute {
            isBlocked.signal()
            release.wait()
        }
        isBlocked.wait()
        #expect(probe.check())
        #expect(!probe.check())
        #expect(!probe.check())

        // Unblocked, the loop runs the pending no-op and the probe passes again.
        release.signal()
        try await waitUntilEveryLoopRan(group)
        #expect(probe.check())
    }

    /// Returns once every loop has run everything scheduled on it so far (loops run tasks in order).
    func waitUntilEveryLoopRan(_ group: MultiThreadedEventLoopGroup) async throws {
        for loop in group.makeIterator() { try await loop.submit {}.get() }
    }
}
