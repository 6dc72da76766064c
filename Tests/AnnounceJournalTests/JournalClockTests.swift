import AnnounceCore
import Foundation
import Testing

@testable import AnnounceJournal

/// The journal's times when the wall clock jumps (issue 27, finding 3): durations on the boot clock within a boot,
/// this boot's wall times corrected once the clock is trusted, order ids stamped by an untrusted clock in an
/// earlier boot kept a whole window. Real SQLite files; the clocks are given, not read.
struct JournalClockTests {
    let directory: String
    var path: String { "\(directory)/journal.sqlite" }

    init() throws {
        directory = "/tmp/ann-journal-clock-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    static let y2000: Int64 = 946_684_800_000
    static let y2026: Int64 = 1_795_812_910_000
    static let day: Int64 = 86_400_000

    func payment(_ order: String, at stamp: ClockStamp) throws -> JobRecord {
        let amount = try Amount(parsing: "100")
        return JobRecord(
            priority: .payment, utterance: .payment(amount: amount, channel: "plain", refund: false), lang: "zh",
            style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["到账"], text: "到账一百元", files: []), accepted: stamp, ttlMs: nil)
    }

    /// Accepted and heard with the clock at 2000-01-01, four seconds before the clock was set to 2026 (same boot):
    /// nothing is purged, the order id is still remembered, and only 4 s of its window have passed.
    @Test func aJumpForwardWithinABootPurgesNothingAndForgetsNoOrder() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let accepted = ClockStamp(wallMs: Self.y2000, boot: "B", bootMs: 1_000, trusted: false)
        let id = try journal.insert(payment("A1", at: accepted), clockTrusted: false).jobID
        let heard = ClockStamp(wallMs: Self.y2000 + 2_000, boot: "B", bootMs: 3_000, trusted: false)
        try journal.finishNow([Journal.Outcome(id: id, state: .spoken, at: heard)])

        let now = ClockStamp(wallMs: Self.y2026, boot: "B", bootMs: 5_000, trusted: true)
        let purged = try journal.purge(now: now, keepMs: 30 * Self.day, windowMs: Self.day)
        #expect(purged.jobs == 0 && purged.orders == 0)
        #expect(
            try journal.dedupEntries(now: now, windowMs: Self.day)
                == [DedupWindow.Entry(order: "A1", kind: .payment, jobID: id, acceptedAtMs: 1_000)],
            "accepted at 1 s on the boot clock: 4 s old, not 26 years")
        // Its window ends a day after its acceptance on the boot clock, not earlier, not later.
        let dayLater = ClockStamp(wallMs: Self.y2026, boot: "B", bootMs: 1_000 + Self.day, trusted: true)
        #expect(try journal.dedupEntries(now: dayLater, windowMs: Self.day).isEmpty)
        #expect(try journal.purge(now: dayLater, keepMs: 30 * Self.day, windowMs: Self.day).orders == 1)
    }

    /// A jump back (the clock set a day behind) within a boot: ages still come from the boot clock.
    @Test func aJumpBackWithinABootStretchesNothing() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let accepted = ClockStamp(wallMs: Self.y2026, boot: "B", bootMs: 1_000, trusted: true)
        let id = try journal.insert(payment("A1", at: accepted)).jobID
        let back = ClockStamp(wallMs: Self.y2026 - Self.day, boot: "B", bootMs: 1_000 + Self.day, trusted: true)
        #expect(try journal.dedupEntries(now: back, windowMs: Self.day).isEmpty, "a day on the boot clock has passed")
        #expect(try journal.purge(now: back, keepMs: Self.day, windowMs: Self.day).orders == 1)
        #expect(try journal.job(id) != nil, "still unfinished: never purged")
    }

    /// Times stamped before the clock was set are corrected once it is trusted: to the offset between the wall and
    /// boot clocks the trusted clock has. Another boot's rows, and rows already at that offset, are left as they are.
    @Test func aTrustedClockCorrectsTheTimesOfItsBoot() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let wrong = ClockStamp(wallMs: Self.y2000 + 1_000, boot: "B", bootMs: 1_000, trusted: false)
        let id = try journal.insert(payment("A1", at: wrong), clockTrusted: false).jobID
        try journal.record([
            .started(id: id, at: ClockStamp(wallMs: Self.y2000 + 1_500, boot: "B", bootMs: 1_500, trusted: false), attempt: 1)
        ])
        // The clock is set between the start and the end.
        let offset = Self.y2026 - 10_000
        let right = ClockStamp(wallMs: offset + 4_000, boot: "B", bootMs: 4_000, trusted: true)
        try journal.finishNow([Journal.Outcome(id: id, state: .spoken, at: right, firstSampleMs: 5)])
        let other = ClockStamp(wallMs: Self.y2000, boot: "A", bootMs: 7, trusted: false)
        let otherID = try journal.insert(payment("Z9", at: other), clockTrusted: false).jobID

        try journal.record([.clockSet(ClockStamp(wallMs: offset + 9_000, boot: "B", bootMs: 9_000, trusted: true))])
        let job = try #require(try journal.job(id))
        #expect(job.acceptedAt == offset + 1_000)
        #expect(job.startedAt == offset + 1_500)
        #expect(job.finishedAt == offset + 4_000)
        #expect(try journal.job(otherID)?.acceptedAt == Self.y2000, "another boot's times cannot be corrected")
        // The day's totals count it on the day it really was.
        let totals = try journal.dayTotals(fromMs: offset, toMs: offset + Self.day)
        #expect(totals.payments.count == 1)
        // Its order id is trusted now: a later boot ages it by the wall clock it was corrected to.
        let nextBoot = ClockStamp(wallMs: offset + Self.day + 9_000, boot: "C", bootMs: 5, trusted: true)
        #expect(try journal.reanchorUntrustedOrders(now: nextBoot) == 1, "only Z9, from boot A, is still untrusted")
        #expect(try journal.purge(now: nextBoot, keepMs: 30 * Self.day, windowMs: Self.day).orders == 1)
        #expect(try journal.dedupEntries(now: nextBoot, windowMs: Self.day).map(\.order) == ["Z9"])
    }

    /// Order ids of an earlier boot stamped by an untrusted clock (1970, 2000: a terminal without a battery-backed
    /// clock) cannot be aged: each is kept a whole window from the start that takes it over. Trusted ones are aged
    /// by the wall clock, never below zero.
    @Test func untrustedOrdersOfAnEarlierBootAreKeptAWholeWindow() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let untrusted = ClockStamp(wallMs: Self.y2000, boot: "A", bootMs: 5_000, trusted: false)
        _ = try journal.insert(payment("U", at: untrusted), clockTrusted: false)
        let trustedOld = ClockStamp(wallMs: Self.y2026 - 2 * Self.day, boot: "A", bootMs: 6_000, trusted: true)
        _ = try journal.insert(payment("T", at: trustedOld))
        let ahead = ClockStamp(wallMs: Self.y2026 + Self.day, boot: "A", bootMs: 7_000, trusted: true)
        _ = try journal.insert(payment("F", at: ahead))

        let start = ClockStamp(wallMs: Self.y2026, boot: "B", bootMs: 2_000, trusted: true)
        #expect(try journal.reanchorUntrustedOrders(now: start) == 1)
        #expect(try journal.purge(now: start, keepMs: 30 * Self.day, windowMs: Self.day).orders == 1)
        #expect(
            try journal.dedupEntries(now: start, windowMs: Self.day).map(\.order).sorted() == ["F", "U"],
            "U is kept from this start, F (stamped ahead of now) counts as just accepted, T is two days old")
        let later = ClockStamp(wallMs: Self.y2026 + Self.day, boot: "B", bootMs: 2_000 + Self.day, trusted: true)
        #expect(
            try journal.dedupEntries(now: later, windowMs: Self.day).map(\.order) == ["F"],
            "U's window ends a day after this start; F's a day after the time it was stamped with")
    }
}
