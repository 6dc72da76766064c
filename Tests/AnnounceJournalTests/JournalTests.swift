import AnnounceCore
import Foundation
import Testing

@testable import AnnounceJournal

/// The journal against real SQLite files, in a temporary folder per test.
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
            accepted: .wall(atMs), ttlMs: ttlMs)
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
        let recovery = try reopened.recover()
        #expect(recovery.pending.map(\.jobID) == [1, 2])
        #expect(recovery.pending[1].orderId == "A1")
        #expect(
            recovery.pending[1].decodedUtterance
                == .payment(amount: try Amount(parsing: "8.50"), channel: "plain", refund: false))
        #expect(
            try reopened.dedupEntries(now: Self.at10s, windowMs: 10_001)
                == [DedupWindow.Entry(order: "A1", kind: .payment, jobID: 2, acceptedAtMs: 1_000)])
        #expect(try reopened.insert(record("1")).jobID == 3)
    }

    @Test func recoveryReturnsEveryJobNotHeardInFullThePlayingOnesToo() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let spoken = try journal.insert(record("1")).jobID
        let playing = try journal.insert(record("2")).jobID
        let queued = try journal.insert(record("3")).jobID
        try journal.record([
            .started(id: spoken, at: .wall(1_100), attempt: 1),
            .finished(Journal.Outcome(id: spoken, state: .spoken, at: .wall(1_200), firstSampleMs: 5, finishedMs: 900)),
            .started(id: playing, at: .wall(1_300), attempt: 1),
        ])
        let recovery = try journal.recover()
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
        try journal.record([.finished(Journal.Outcome(id: id, state: .cancelled, at: .wall(1_100)))])
        try journal.record([
            .started(id: id, at: .wall(1_200), attempt: 1), .finished(Journal.Outcome(id: id, state: .spoken, at: .wall(1_300))),
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
        // Unwrapped: newer glibc headers (trixie's) mark fwrite's stream nonnull.
        let filler = try #require(fopen("\(mount)/filler", "w"))
        let block = [UInt8](repeating: 0xA5, count: 4096)
        while fwrite(block, 1, block.count, filler) == block.count {}
        var byte: UInt8 = 1
        while fwrite(&byte, 1, 1, filler) == 1 && fflush(filler) == 0 {}
        fclose(filler)
        // New jobs are refused …
        #expect { try journal.insert(record("99")) } throws: { ($0 as? AnnounceError)?.code == .journal }
        // … but the outcomes of those accepted are recorded, on the reserve.
        for id in ids {
            try journal.record([.finished(Journal.Outcome(id: id, state: .spoken, at: .wall(2_000)))])
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
            if index < 2 { try journal.finishNow([Journal.Outcome(id: id, state: .spoken, at: .wall(Int64(2_000 + index)))]) }
        }
        #expect(try journal.history(limit: 2).map(\.jobID) == [3, 2])
        #expect(try journal.lastSpokenPayment()?.amount == "2.00")
        let info = try #require(try journal.job(2)).info
        #expect(info.state == .spoken)
        #expect(info.amount == "2.00")
        #expect(info.finishedAt == WallClock.iso8601(ms: 2_001))
    }

    /// `replay` with no id repeats the last payment: a replay of it is not "the last payment" (issue 19).
    @Test func theLastSpokenPaymentIsNeverAReplay() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let payment = try journal.insert(record("5", atMs: 1_000)).jobID
        try journal.finishNow([Journal.Outcome(id: payment, state: .spoken, at: .wall(1_100))])
        let older = try journal.insert(record("7", atMs: 1_200)).jobID
        try journal.finishNow([Journal.Outcome(id: older, state: .spoken, at: .wall(1_300))])
        var replay = try record("5", atMs: 2_000)
        replay.replayOf = Int64(payment)
        let replayed = try journal.insert(replay).jobID
        try journal.finishNow([Journal.Outcome(id: replayed, state: .spoken, at: .wall(2_100))])
        #expect(try journal.lastSpokenPayment()?.jobID == older, "the replay (job \(replayed)) is not a payment")
    }

    /// The payment totals (metrics) count finished payments, not replays nor unfinished jobs, with the fen heard;
    /// housekeeping that forgets old jobs keeps them in the totals.
    @Test func paymentTotalsCountWhatWasHeardAndSurvivePurging() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let spoken = try journal.insert(record("100", atMs: 1_000)).jobID
        let failed = try journal.insert(record("8.50", atMs: 1_000)).jobID
        var refund = try record("2.05", atMs: 1_000)
        refund.refund = true
        let refunded = try journal.insert(refund).jobID
        var replay = try record("100", atMs: 1_000)
        replay.replayOf = Int64(spoken)
        let replayed = try journal.insert(replay).jobID
        _ = try journal.insert(record("3", atMs: 1_000))  // still queued
        try journal.finishNow([
            Journal.Outcome(id: spoken, state: .spoken, at: .wall(1_500)),
            Journal.Outcome(id: failed, state: .failed, at: .wall(1_500)),
            Journal.Outcome(id: refunded, state: .spoken, at: .wall(1_500)),
            Journal.Outcome(id: replayed, state: .spoken, at: .wall(1_500)),
        ])
        var expected = Journal.PaymentTotals()
        expected.byState = ["spoken": 2, "failed": 1]
        expected.spokenFen = 10_000
        expected.refundedFen = 205
        #expect(try journal.paymentTotals() == expected)
        #expect(try journal.purge(now: .wall(5_000), keepMs: 1, windowMs: 1).jobs == 4)
        #expect(try journal.paymentTotals() == expected, "purged payments still count")
        let later = try journal.insert(record("1", atMs: 6_000)).jobID
        try journal.finishNow([Journal.Outcome(id: later, state: .spoken, at: .wall(6_500))])
        expected.byState["spoken"] = 3
        expected.spokenFen += 100
        #expect(try journal.paymentTotals() == expected)
        #expect(try journal.purge(now: .wall(7_000), keepMs: 1, windowMs: 1).jobs == 1)
        #expect(try Journal(path: path + "2").paymentTotals() == Journal.PaymentTotals(), "a new journal starts at 0")
        #expect(try journal.paymentTotals() == expected, "purged twice, added up")
    }

    @Test func purgeKeepsWhatTheWindowsNeed() throws {
        defer { cleanUp() }
        let journal = try Journal(path: path)
        let old = try journal.insert(record("1", order: "old", atMs: 1_000)).jobID
        let referenced = try journal.insert(record("2", order: "recent", atMs: 9_000)).jobID
        let unfinished = try journal.insert(record("3", atMs: 1_000)).jobID
        try journal.finishNow([
            Journal.Outcome(id: old, state: .spoken, at: .wall(1_500)),
            Journal.Outcome(id: referenced, state: .spoken, at: .wall(1_500)),
        ])
        let purged = try journal.purge(now: .wall(5_000), keepMs: 1, windowMs: 1)
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

    /// 10 s after the epoch, on a boot whose clock reads the same: the entries' acceptance times come back as they
    /// were written, ages on the wall clock (the rows of these tests carry no boot).
    static let at10s = ClockStamp(wallMs: 10_000, boot: "test", bootMs: 10_000, trusted: true)

    func record(_ utterance: Utterance, order: String, atMs: Int64) -> JobRecord {
        JobRecord(
            priority: .status, utterance: utterance, lang: "zh", style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["x"], text: "x", files: []), accepted: .wall(atMs), ttlMs: nil)
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
        let entries = try Journal(path: path).dedupEntries(now: Self.at10s, windowMs: 10_001)
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
        try OldJournal.write(at: path, migrations: ["v1"]) { db in
            // The rows as version 1 wrote them (its own columns only).
            try db.executeScript(
                """
                INSERT INTO job (priority, utterance, order_id, text, tokens, prompt, accepted_at, state)
                VALUES ('status', '{}', 'P', '网络断开', '[]', 'network-lost', 1000, 'spoken');
                INSERT INTO job (priority, utterance, order_id, text, tokens, amount, accepted_at, state)
                VALUES ('payment', '{}', 'Q', '到账一元', '[]', '1.00', 2000, 'spoken');
                INSERT INTO dedup (order_id, job_id, accepted_at) VALUES ('P', 1, 1000), ('Q', 2, 2000);
                """)
        }
        let journal = try Journal(path: path)
        #expect(
            try journal.dedupEntries(now: Self.at10s, windowMs: 10_001) == [
                DedupWindow.Entry(order: "P", kind: .prompt, jobID: 1, acceptedAtMs: 1_000),
                DedupWindow.Entry(order: "Q", kind: .payment, jobID: 2, acceptedAtMs: 2_000),
            ])
        #expect(try journal.job(1)?.attempts == 0, "v2-attempts added the column, 0 for the jobs already there")
        _ = try journal.insert(record("2", order: "P", atMs: 3_000))
        #expect(
            try journal.dedupEntries(now: Self.at10s, windowMs: 7_001) == [
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
        try SQLiteConnection(path: path).execute("PRAGMA journal_mode = DELETE")
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
            #expect(try journal.dedupEntries(now: Self.at10s, windowMs: 10_001).isEmpty && journal.history(limit: 1).isEmpty)
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

    /// A lock let go of within the wait is waited for, not refused: a daemon on its way out, or a child forked by
    /// this process (a test's, a daemon's), which shares the open lock file until its exec closes it.
    @Test func aLockLetGoOfWithinTheWaitIsTaken() throws {
        defer { cleanUp() }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let holder = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        let waiter = open(path + ".lock", O_RDWR | O_CLOEXEC)
        defer { close(waiter) }
        #expect(holder >= 0 && waiter >= 0 && flock(holder, LOCK_EX | LOCK_NB) == 0)
        #expect(Journal.lock(waiter, waitMs: 0) == EWOULDBLOCK, "held: refused at once without a wait")
        SystemThread.detach {
            usleep(100_000)
            close(holder)
        }
        #expect(Journal.lock(waiter, waitMs: 60_000) == nil, "let go of: taken")
    }

    @Test func oneDaemonPerJournal() throws {
        defer { cleanUp() }
        let first = try Journal(path: path)
        #expect { try Journal(path: path) } throws: { ($0 as? AnnounceError)?.code == .journal }
        _ = first
    }
}
