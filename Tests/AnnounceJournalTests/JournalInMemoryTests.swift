import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceJournal

/// The journal kept in memory while its file cannot be used, and its way back (issue 27, finding 5). Real SQLite
/// files; the daemon's user without write access is a thread with `nobody`'s effective credentials (the tests run
/// as root, whom no file mode stops).
struct JournalInMemoryTests {
    let directory: String
    var path: String { "\(directory)/state/journal.sqlite" }

    init() throws {
        directory = "/tmp/ann-journal-memory-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: "\(directory)/state", withIntermediateDirectories: true)
        chmod(directory, 0o755)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    static func payment(_ order: String, _ amount: String = "100") throws -> JobRecord {
        let amount = try Amount(parsing: amount)
        return JobRecord(
            priority: .payment, utterance: .payment(amount: amount, channel: "plain", refund: false), lang: "zh",
            style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["到账"], text: "到账", files: []), accepted: .wall(1_000), ttlMs: nil)
    }

    /// A folder the daemon's user may read but not write: the journal is a copy of the file, in memory, named for
    /// what is wrong; once the folder is the user's, what was done in memory goes to the file — a job the file had
    /// gets its end, the jobs accepted meanwhile keep their ids, order ids and settings come along.
    @Test func aFolderOfAnotherOwnerKeepsTheJournalInMemoryUntilItCanBeWritten() async throws {
        defer { cleanUp() }
        let path = self.path
        let directory = self.directory
        let heard: UInt64
        let waiting: UInt64
        do {
            let journal = try Journal(path: path)
            heard = try journal.insert(Self.payment("A")).jobID
            try journal.finishNow([Journal.Outcome(id: heard, state: .spoken, at: .wall(1_100))])
            waiting = try journal.insert(Self.payment("B")).jobID
        }
        let (memory, problem, added, before) = try await asIdentity(.nobody) {
            () throws -> (Journal, String?, UInt64, Journal.DiskReturn) in
            let journal = try Journal.openOrKeepInMemory(path: path)
            let problem = journal.problem?.message
            try journal.finishNow([Journal.Outcome(id: waiting, state: .spoken, at: .wall(1_200))])
            let added = try journal.insert(Self.payment("C")).jobID
            try journal.finishNow([Journal.Outcome(id: added, state: .spoken, at: .wall(1_300))])
            try journal.setSetting("volume_threshold", "70")
            return (journal, problem, added, journal.returnToDisk())
        }
        #expect(
            problem == "the state folder \(directory)/state (owner uid 0, mode 0755) cannot be written by this user (uid 65534)")
        #expect(added == 3, "ids go on from the file's")
        guard case .unusable = before else { Issue.record("went back too early: \(before)"); return }
        // The operator gives the folder to the daemon's user.
        chown("\(directory)/state", 65534, 65534)
        for suffix in ["", "-wal", "-shm", ".lock", ".reserve"] { chown(path + suffix, 65534, 65534) }
        let after = try await asIdentity(.nobody) { memory.returnToDisk() }
        #expect(after == .onDisk, "\(after)")
        // Read back through the file (the same object is on disk now).
        #expect(memory.isDurable)
        let journal = memory
        #expect(try journal.history(limit: 10).map { "\($0.jobID) \($0.orderId ?? "") \($0.state)" } == [
            "3 C spoken", "2 B spoken", "1 A spoken",
        ])
        #expect(heard == 1)
        #expect(try journal.dedupEntries(now: .wall(2_000), windowMs: 10_000).map(\.order).sorted() == ["A", "B", "C"])
        #expect(try journal.setting("volume_threshold") == "70")
    }

    /// A journal in memory that could not copy the file (its name was a directory), going back to a file that
    /// meanwhile holds other jobs: its jobs are renumbered after the file's (only history shows it), their order
    /// ids follow them, and the file's next id is above every id given in memory.
    @Test func jobsAcceptedInMemoryAreRenumberedAfterAFilesOwnJobs() throws {
        defer { cleanUp() }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let memory = try Journal.openOrKeepInMemory(path: path)
        #expect(memory.problem?.message == "\(path) is a directory, not a journal file")
        for order in ["M1", "M2"] {
            let id = try memory.insert(Self.payment(order)).jobID
            try memory.finishNow([Journal.Outcome(id: id, state: .spoken, at: .wall(1_100))])
        }
        #expect(memory.returnToDisk() != .onDisk)
        try FileManager.default.removeItem(atPath: path)
        do {
            let file = try Journal(path: path)
            for index in 1...5 { _ = try file.insert(Self.payment("F\(index)")) }
        }
        #expect(memory.returnToDisk() == .onDisk)
        #expect(memory.isDurable)
        let next = try memory.insert(Self.payment("N")).jobID
        #expect(next == 8, "above the file's 5 and the 2 renumbered")
        let rows = try memory.history(limit: 10).map { "\($0.jobID) \($0.orderId ?? "")" }
        #expect(rows == ["8 N", "7 M2", "6 M1", "5 F5", "4 F4", "3 F3", "2 F2", "1 F1"])
        let orders = try memory.dedupEntries(now: .wall(2_000), windowMs: 10_000)
        #expect(orders.first { $0.order == "M2" }?.jobID == 7)
    }

    /// Jobs accepted in memory and not finished keep the journal there: their ids must not change under them.
    @Test func theJournalGoesBackOnlyOnceTheJobsAcceptedInMemoryHaveFinished() throws {
        defer { cleanUp() }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let memory = try Journal.openOrKeepInMemory(path: path)
        let id = try memory.insert(Self.payment("W")).jobID
        try FileManager.default.removeItem(atPath: path)
        #expect(memory.returnToDisk() == .waitingFor(jobs: 1))
        #expect(!memory.isDurable)
        try memory.finishNow([Journal.Outcome(id: id, state: .spoken, at: .wall(1_100))])
        #expect(memory.returnToDisk() == .onDisk)
        #expect(try Journal.openOrKeepInMemory(path: path + "x").isDurable)
    }
}
