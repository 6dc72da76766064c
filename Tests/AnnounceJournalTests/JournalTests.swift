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

    /// Files in the journal's folder whose name says they were moved aside as damaged.
    func movedAside() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.contains(".corrupt-") }.sorted()
    }

    /// A journal that is not an SQLite file at all (garbage bytes) is moved aside, with its -wal and -shm, and an
    /// empty one is started; the evidence keeps every byte (issue 16, item 12).
    @Test func aJournalOfGarbageIsMovedAsideAndAnEmptyOneStarted() throws {
        defer { cleanUp() }
        var generator = SystemRandomNumberGenerator()
        let garbage = Data((0..<8192).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try garbage.write(to: URL(fileURLWithPath: path))
        try Data("not a wal".utf8).write(to: URL(fileURLWithPath: path + "-wal"))
        let journal = try Journal(path: path)
        let evidence = try #require(journal.recoveredFromCorruption)
        #expect(evidence.wholeMatch(of: /.*\/journal\.sqlite\.corrupt-\d{8}T\d{6}Z/) != nil, "\(evidence)")
        let name = String(evidence.split(separator: "/").last ?? "")
        let moved = try movedAside()
        #expect(
            moved == [name, name + "-wal"] || moved == [name, name + "-shm", name + "-wal"],
            "the journal and its -wal (and the -shm SQLite made for it): \(moved)")
        #expect(FileManager.default.contents(atPath: evidence + "-wal") == Data("not a wal".utf8))
        #expect(FileManager.default.contents(atPath: evidence) == garbage, "the evidence is the damaged file as it was")
        #expect(try journal.history(limit: 10).isEmpty)
        #expect(try journal.insert(record("1")).jobID == 1, "the new journal works")
    }

    /// A journal cut short (a power cut on cheap flash, a disk that lost its tail) opens, but a full read finds
    /// the damage (`PRAGMA quick_check`): moved aside at start, not at the first write of a payment.
    @Test func aJournalCutShortIsMovedAside() throws {
        defer { cleanUp() }
        do {
            let journal = try Journal(path: path)
            for index in 1...400 { _ = try journal.insert(record("\(index)", order: "O-\(index)")) }
        }
        // Everything in the file itself (no -wal), so that cutting the file loses pages.
        try DatabaseQueue(path: path).writeWithoutTransaction { try $0.execute(sql: "PRAGMA journal_mode = DELETE") }
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        #expect(size > 40_000 && !FileManager.default.fileExists(atPath: path + "-wal"))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: UInt64(size / 2))
        try handle.close()
        let cut = FileManager.default.contents(atPath: path)

        do {
            let journal = try Journal(path: path)
            let evidence = try #require(journal.recoveredFromCorruption)
            #expect(FileManager.default.contents(atPath: evidence) == cut)
            #expect(try journal.dedupEntries(sinceMs: 0).isEmpty && journal.history(limit: 1).isEmpty)
            _ = try journal.insert(record("1"))
        }
        let reopened = try Journal(path: path)
        #expect(reopened.recoveredFromCorruption == nil, "the new journal is sound: nothing is moved at the next start")
        #expect(try movedAside().count == 1 && reopened.history(limit: 5).count == 1)
    }

    /// What is not damage is not moved: a journal that cannot be opened (here a folder where the file should be:
    /// root ignores permissions) or is held by another daemon stays where it is, and the open fails as before.
    @Test func aJournalThatCannotBeOpenedIsNotMovedAside() throws {
        defer { cleanUp() }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect { try Journal(path: path) } throws: { ($0 as? AnnounceError)?.code == .journal }
        var isFolder: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) && isFolder.boolValue)
        #expect(try movedAside().isEmpty)

        let held = "\(directory)/held.sqlite"
        let first = try Journal(path: held)
        #expect { try Journal(path: held) } throws: { ($0 as? AnnounceError)?.code == .journal }
        #expect(try movedAside().isEmpty && first.recoveredFromCorruption == nil)
    }

    @Test func oneDaemonPerJournal() throws {
        defer { cleanUp() }
        let first = try Journal(path: path)
        #expect { try Journal(path: path) } throws: { ($0 as? AnnounceError)?.code == .journal }
        _ = first
    }
}
