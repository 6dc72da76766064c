import AnnounceCore
@testable import AnnouncePush
import AnnounceTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// The status's pace (docs/fleet.md, "Status"): at most one a second however often something changes, and again
/// every `refresh` when nothing does — read off the outbox the MQTT thread publishes from.
struct StatusReporterTests {
    /// A daemon's status whose alert threshold is `threshold` (a change that matters to the fleet).
    static func daemon(threshold: Int) -> DaemonStatus {
        let journal = DaemonStatus.Journal(
            path: "/j", recoveredAtStart: 0, interruptedAtStart: 0, dedupOrders: 0, dedupWindowSeconds: 86400)
        return DaemonStatus(
            state: "running", v: 1, pid: 1, uptimeSeconds: 1, socket: "/s", clients: 1,
            queue: DaemonStatus.Queue(waiting: 0, capacity: 64, byPriority: [:], unfinished: 0), voices: [],
            journal: journal, totals: DaemonStatus.Totals(),
            audio: AudioStatus(device: "announce", mixer: "default/Master", volume: 40, threshold: threshold, muted: false),
            peer: nil)
    }

    /// Takes what the outbox has to publish (acknowledging it at once, as a broker would), with when it was taken.
    final class Collector: Sendable {
        let published = Mutex<[(seenAt: ContinuousClock.Instant, status: DeviceStatus)]>([])
        let outbox: Outbox
        init(_ outbox: Outbox) { self.outbox = outbox }

        func poll() throws {
            var mid: Int32 = 1
            while let message = outbox.next() {
                outbox.sent(message.item, mid: mid)
                _ = outbox.acknowledged(mid: mid)
                mid += 1
                let status = try JSONDecoder().decode(DeviceStatus.self, from: Data(message.payload))
                published.withLock { $0.append((.now, status)) }
            }
        }

        /// Polls every 10 ms until `condition` holds on what was published, or `timeout` passes.
        func wait(timeout: Duration = .seconds(15), _ condition: ([DeviceStatus]) -> Bool) async throws -> Bool {
            try await eventually(timeout: timeout, every: .milliseconds(10)) {
                try poll()
                return condition(published.withLock { $0.map(\.status) })
            }
        }
    }

    @Test func atMostOneStatusASecondHoweverOftenItChangesAndARefreshWhenNothingDoes() async throws {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Logger(label: "test"))
        let threshold = Atomic<Int>(50)
        let reporter = StatusReporter(
            device: "T1", refreshSeconds: 2, outbox: outbox,
            fetch: { Self.daemon(threshold: threshold.load(ordering: .relaxed)) }, receipts: { nil })
        let collector = Collector(outbox)
        reporter.start()
        defer { reporter.stop() }
        reporter.connection(true)
        #expect(try await collector.wait { $0.count == 1 }, "nothing published at connect")

        // Twenty changes in two seconds: each is published, but never two within a second.
        for step in 1...20 {
            threshold.store(50 + step, ordering: .relaxed)
            reporter.changed()
            try collector.poll()
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await collector.wait { $0.last?.volume?.threshold == 70 }, "the last change was not published")
        let published = collector.published.withLock { $0 }
        // Changes go out as they come, a second apart (how many depends on how fast this machine ran the loop:
        // the pace is judged by the statuses' own timestamps below, not by a count).
        #expect(published.count >= 3, "\(published.count) statuses for 20 changes in 2 s")
        for (earlier, later) in zip(published, published.dropFirst()) {
            // `at`: the wall clock when the reporter made the status, in ms (what a service reads).
            let gap = (later.status.at ?? 0) - (earlier.status.at ?? 0)
            #expect(gap >= 995, "two statuses \(gap) ms apart")
        }

        // Nothing changes now: the refresh publishes the same status again.
        let before = published.count
        #expect(try await collector.wait { $0.count > before }, "no refresh")
        let refreshed = collector.published.withLock { $0 }
        #expect(refreshed.last?.status.volume?.threshold == 70 && refreshed.last?.status.online == true)
    }

    @Test func nothingIsPublishedWhileDisconnected() async throws {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Logger(label: "test"))
        let reporter = StatusReporter(
            device: "T1", refreshSeconds: 0.2, outbox: outbox, fetch: { Self.daemon(threshold: 60) }, receipts: { nil })
        let collector = Collector(outbox)
        reporter.start()
        defer { reporter.stop() }
        reporter.changed()
        // Several refresh periods go by: the broker would publish the last will, not us.
        try await Task.sleep(for: .milliseconds(700))
        try collector.poll()
        #expect(collector.published.withLock { $0.isEmpty })
        reporter.connection(true)
        #expect(try await collector.wait { $0.count == 1 }, "published at connect")
    }

    /// The listener's own account is in the status — this run's instance, the identity, the clock, the messages
    /// refused — and a change of it is published like any other; the last will carries the instance, and the identity
    /// and the clock only when something is wrong with them.
    @Test func theListenersOwnAccountIsPublishedAndFollowed() async throws {
        let folder = try Paths.temporaryDirectory("clock")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let report = ListenerReport(
            clock: ClockWatch(source: .file("\(folder)/synchronized"), waitSeconds: 3600), instance: "00000000000000ab")
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Logger(label: "test"))
        let reporter = StatusReporter(
            device: "T1", refreshSeconds: 60, outbox: outbox, fetch: { Self.daemon(threshold: 60) }, receipts: { nil },
            listener: { report.facts })
        let collector = Collector(outbox)
        reporter.start()
        defer { reporter.stop() }
        reporter.connection(true)
        #expect(try await collector.wait { $0.count == 1 })
        let first = try #require(collector.published.withLock { $0.last?.status })
        #expect(first.instance == "00000000000000ab" && first.identity == "ok" && first.refused == nil)
        #expect(first.clock == DeviceStatus.Clock(state: "waiting", source: "file"))

        var will = DeviceStatus.offline(device: "T1", reason: "connection_lost")
        will.add(report.facts, brief: true)
        #expect(will.instance == "00000000000000ab" && will.identity == nil && will.clock?.state == "waiting")

        report.refused(.badSignature)
        report.refused(.badSignature)
        report.identityConflict(true)
        #expect(FileManager.default.createFile(atPath: "\(folder)/synchronized", contents: Data()))
        reporter.changed()
        #expect(try await collector.wait { $0.last?.clock?.state == "synchronized" })
        let last = try #require(collector.published.withLock { $0.last?.status })
        #expect(last.identity == "conflict" && last.refused == ["bad_signature": 2])

        will = DeviceStatus.offline(device: "T1", reason: "connection_lost")
        will.add(report.facts, brief: true)
        #expect(will.identity == "conflict" && will.clock == nil && will.refused == nil)
    }
}
