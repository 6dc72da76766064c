import AnnounceCore
import Foundation
import GRDB
import Testing

@testable import AnnounceJournal

/// The journal against real SQLite files (GRDB), in a temporary folder per test.
struct JournalTests {
    let directory: String
    var path: String { "\(directory)/journal.sqlite" }

    init() throws {
        directory = "/tmp/ann-journal-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    func record(_ amount: String, order: String? = nil, atMs: Int64 = 1_000, ttlMs: Int64? = nil) throws -> JobRecord {
        let amount = try Amount(parsing: amount)
        let utterance = Utterance.payment(amount: amount, channel: "plain", refund: false)
        return JobRecord(
            priority: .payment, utterance: utterance, lang: "zh", style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["到账", amount.description], text: "到账\(amount)", files: []),
            acceptedAtMs: atMs, ttlMs: ttlMs)
    }

    @Test func commitsAreDurable() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let settings = try journal.durabilitySettings()
        #expect(settings.journalMode == "wal")
        #expect(settings.synchronous == 2, "synchronous must be FULL (2): the WAL is fsynced at every commit")
    }

    @Test func insertNumbersJobsAndKeepsThemAcrossReopening() throws {
        defer { cleanUp() }
        var ids: [UInt64] = []
        do {
            let journal = try Journal(path: path)
            ids.append(try journal.insert(record("100")).jobID)
            ids.append(try journal.insert(record("8.50", order: "A1")).jobID)
        }
        #expect(ids == [1, 2])
        let reopened = try Journal(path: path)
        let recovery = try reopened.recover(nowMs: 2_000)
        #expect(recovery.pending.map(\.jobID) == [1, 2])
        #expect(recovery.pending[1].orderId == "A1")
        #expect(
            recovery.pending[1].decodedUtterance
                == .payment(amount: try Amount(parsing: "8.50"), channel: "plain", refund: false))
        #expect(
            try reopened.dedupEntries(sinceMs: 0)
                == [DedupWindow.Entry(order: "A1", kind: .payment, jobID: 2, acceptedAtMs: 1_000)])
        #expect(try reopened.insert(record("1")).jobID == 3)
    }

    @Test func recoveryRecordsPlayingJobsInterruptedAndDoesNotReturnThem() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let spoken = try journal.insert(record("1")).jobID
        let playing = try journal.insert(record("2")).jobID
        let queued = try journal.insert(record("3")).jobID
        journal.markStarted(spoken, atMs: 1_100)
        journal.finish(Journal.Outcome(id: spoken, state: .spoken, atMs: 1_200, firstSampleMs: 5, finishedMs: 900))
        journal.markStarted(playing, atMs: 1_300)
        journal.flush()
        let recovery = try journal.recover(nowMs: 5_000)
        #expect(recovery.pending.map(\.jobID) == [queued])
        #expect(recovery.interrupted.map(\.jobID) == [playing])
        let interrupted = try #require(try journal.job(playing))
        #expect(interrupted.jobState == .failed)
        #expect(interrupted.errorCode == "interrupted")
        #expect(try journal.job(spoken)?.jobState == .spoken)
        #expect(try journal.countByState() == ["spoken": 1, "failed": 1, "queued": 1])
    }

    @Test func historyIsNewestFirstAndLastSpokenPaymentIsFound() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        for (index, amount) in ["1", "2", "3"].enumerated() {
            let id = try journal.insert(record(amount, atMs: Int64(1_000 + index))).jobID
            if index < 2 { journal.finish(Journal.Outcome(id: id, state: .spoken, atMs: Int64(2_000 + index))) }
        }
        journal.flush()
        #expect(try journal.history(limit: 2).map(\.jobID) == [3, 2])
        #expect(try journal.lastSpokenPayment()?.amount == "2.00")
        let info = try #require(try journal.job(2)).info
        #expect(info.state == .spoken)
        #expect(info.amount == "2.00")
        #expect(info.finishedAt == WallClock.iso8601(ms: 2_001))
    }

    @Test func purgeKeepsWhatTheWindowsNeed() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let old = try journal.insert(record("1", order: "old", atMs: 1_000)).jobID
        let referenced = try journal.insert(record("2", order: "recent", atMs: 9_000)).jobID
        let unfinished = try journal.insert(record("3", atMs: 1_000)).jobID
        journal.finish(Journal.Outcome(id: old, state: .spoken, atMs: 1_500))
        journal.finish(Journal.Outcome(id: referenced, state: .spoken, atMs: 1_500))
        journal.flush()
        let purged = try journal.purge(jobsBeforeMs: 5_000, ordersBeforeMs: 5_000)
        #expect(purged.orders == 1)
        #expect(purged.jobs == 1)
        #expect(try journal.job(old) == nil)
        #expect(try journal.job(referenced) != nil, "a job whose order id is still remembered stays")
        #expect(try journal.job(unfinished) != nil, "an unfinished job is never purged")
    }

    @Test func settingsSurviveReopening() throws {
        defer { cleanUp() }
        do {
            let journal = try Journal(path: path)
            try journal.setSetting("volume_threshold", "70")
            try journal.setSetting("volume_threshold", "75")
            try journal.setSetting("other", "x")
            try journal.setSetting("other", nil)
        }
        let journal = try Journal(path: path)
        #expect(try journal.setting("volume_threshold") == "75")
        #expect(try journal.setting("other") == nil)
    }

    func record(_ utterance: Utterance, order: String, atMs: Int64) -> JobRecord {
        JobRecord(
            priority: .status, utterance: utterance, lang: "zh", style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["x"], text: "x", files: []), acceptedAtMs: atMs, ttlMs: nil)
    }

    /// A payment, a prompt and a text may carry the same order id: the journal remembers each, and none replaces
    /// another (issue 16, item 10).
    @Test func eachKindOfJobKeepsItsOwnOrderIDsAcrossReopening() throws {
        defer { cleanUp() }
        do {
            let journal = try Journal(path: path)
            _ = try journal.insert(record(.prompt(name: "network-lost"), order: "X", atMs: 1_000))
            _ = try journal.insert(record("8.50", order: "X", atMs: 2_000))
            _ = try journal.insert(record(.text("请到前台取货"), order: "X", atMs: 3_000))
        }
        let entries = try Journal(path: path).dedupEntries(sinceMs: 0)
        #expect(
            entries == [
                DedupWindow.Entry(order: "X", kind: .prompt, jobID: 1, acceptedAtMs: 1_000),
                DedupWindow.Entry(order: "X", kind: .payment, jobID: 2, acceptedAtMs: 2_000),
                DedupWindow.Entry(order: "X", kind: .text, jobID: 3, acceptedAtMs: 3_000),
            ])
    }

    /// A journal written by the previous schema (one order id space) keeps its order ids, each under the kind of
    /// the job it names.
    @Test func aVersion1JournalIsMigratedKindByKind() throws {
        defer { cleanUp() }
        do {
            let queue = try DatabaseQueue(path: path)
            try Journal.migrator.migrate(queue, upTo: "v1")
            try queue.write { db in
                var prompt = record(.prompt(name: "network-lost"), order: "P", atMs: 1_000)
                try prompt.insert(db)
                var payment = try record("1", order: "Q", atMs: 2_000)
                try payment.insert(db)
                try db.execute(
                    sql: "INSERT INTO dedup (order_id, job_id, accepted_at) VALUES ('P', 1, 1000), ('Q', 2, 2000)")
            }
        }
        let journal = try Journal(path: path)
        #expect(
            try journal.dedupEntries(sinceMs: 0) == [
                DedupWindow.Entry(order: "P", kind: .prompt, jobID: 1, acceptedAtMs: 1_000),
                DedupWindow.Entry(order: "Q", kind: .payment, jobID: 2, acceptedAtMs: 2_000),
            ])
        _ = try journal.insert(record("2", order: "P", atMs: 3_000))
        #expect(
            try journal.dedupEntries(sinceMs: 3_000) == [
                DedupWindow.Entry(order: "P", kind: .payment, jobID: 3, acceptedAtMs: 3_000)
            ], "payment P is not prompt P")
    }

    @Test func oneDaemonPerJournal() throws {
        defer { cleanUp() }
        let first = try Journal(path: path)
        #expect { try Journal(path: path) } throws: { ($0 as? AnnounceError)?.code == .journal }
        _ = first
    }
}
