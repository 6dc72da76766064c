import AnnounceCore
import Foundation
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
            try reopened.dedupEntries(sinceMs: 0) == [DedupWindow.Entry(order: "A1", jobID: 2, acceptedAtMs: 1_000)])
        #expect(try reopened.insert(record("1")).jobID == 3)
    }

    @Test func recoveryReturnsEveryJobNotHeardInFullThePlayingOnesToo() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let spoken = try journal.insert(record("1")).jobID
        let playing = try journal.insert(record("2")).jobID
        let queued = try journal.insert(record("3")).jobID
        try journal.record([
            .started(id: spoken, atMs: 1_100, attempt: 1),
            .finished(Journal.Outcome(id: spoken, state: .spoken, atMs: 1_200, firstSampleMs: 5, finishedMs: 900)),
            .started(id: playing, atMs: 1_300, attempt: 1),
        ])
        let recovery = try journal.recover(nowMs: 5_000)
        #expect(recovery.pending.map(\.jobID) == [playing, queued], "cut off while playing: spoken again")
        #expect(recovery.interrupted == 1)
        #expect(recovery.pending[0].attempts == 1 && recovery.pending[1].attempts == 0)
        #expect(try journal.job(spoken)?.jobState == .spoken)
        #expect(try journal.countByState() == ["spoken": 1, "playing": 1, "queued": 1], "recovery changes nothing")
    }

    @Test func aFinalStateIsNeverOverwritten() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let id = try journal.insert(record("1")).jobID
        try journal.record([.finished(Journal.Outcome(id: id, state: .cancelled, atMs: 1_100))])
        try journal.record([
            .started(id: id, atMs: 1_200, attempt: 1), .finished(Journal.Outcome(id: id, state: .spoken, atMs: 1_300)),
        ])
        #expect(try journal.job(id)?.jobState == .cancelled)
        #expect(try journal.job(id)?.attempts == 0)
    }

    @Test func aFullDiskSpendsTheReserveOnOutcomesAndRefusesNewJobsUntilSpaceIsBack() async throws {
        // A real full file system: a 2 MiB tmpfs (the tests run as root).
        let mount = "\(directory)/small"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        #expect(system("mount -t tmpfs -o size=2m tmpfs \(mount)") == 0)
        defer {
            _ = system("umount -l \(mount)")
            cleanUp()
        }
        let journal = try Journal(path: "\(mount)/journal.sqlite")
        #expect(journal.hasReserve)
        let ids = try (1...20).map { try journal.insert(record("\($0)")).jobID }
        // Fill the disk to the last byte.
        let filler = fopen("\(mount)/filler", "w")
        let block = [UInt8](repeating: 0xA5, count: 4096)
        while fwrite(block, 1, block.count, filler) == block.count {}
        var byte: UInt8 = 1
        while fwrite(&byte, 1, 1, filler) == 1 && fflush(filler) == 0 {}
        fclose(filler)
        // New jobs are refused …
        #expect { try journal.insert(record("99")) } throws: { ($0 as? AnnounceError)?.code == .journal }
        // … but the outcomes of those accepted are recorded, on the reserve.
        for id in ids {
            try journal.record([.finished(Journal.Outcome(id: id, state: .spoken, atMs: 2_000))])
        }
        #expect(try journal.countByState() == ["spoken": 20])
        #expect(!journal.hasReserve)
        #expect { try journal.insert(record("99")) } throws: { ($0 as? AnnounceError)?.message.contains("full") == true }
        // Space again: the reserve is made again and jobs are accepted.
        try FileManager.default.removeItem(atPath: "\(mount)/filler")
        #expect(try journal.insert(record("100")).jobID == 21)
        #expect(journal.hasReserve)
    }

    @Test func historyIsNewestFirstAndLastSpokenPaymentIsFound() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        for (index, amount) in ["1", "2", "3"].enumerated() {
            let id = try journal.insert(record(amount, atMs: Int64(1_000 + index))).jobID
            if index < 2 { try journal.finishNow([Journal.Outcome(id: id, state: .spoken, atMs: Int64(2_000 + index))]) }
        }
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
        try journal.finishNow([
            Journal.Outcome(id: old, state: .spoken, atMs: 1_500),
            Journal.Outcome(id: referenced, state: .spoken, atMs: 1_500),
        ])
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

    @Test func oneDaemonPerJournal() throws {
        defer { cleanUp() }
        let first = try Journal(path: path)
        #expect { try Journal(path: path) } throws: { ($0 as? AnnounceError)?.code == .journal }
        _ = first
    }
}
