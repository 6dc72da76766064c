import AnnounceCore
import Dispatch
import Foundation
import Testing

@testable import AnnounceJournal

/// The journal's SQLite layer (Sources/AnnounceJournal/SQLite.swift) at its edges, against real files.
struct SQLiteTests {
    let directory: String
    var path: String { "\(directory)/test.sqlite" }

    init() throws {
        directory = "/tmp/ann-sqlite-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    func sqliteError(_ body: () throws -> Void) -> SQLiteError? {
        do {
            try body()
            return nil
        } catch {
            return error as? SQLiteError
        }
    }

    /// What is bound comes back as it went in: NULL, the extremes of Int64, doubles, text with any character.
    @Test func valuesRoundTrip() throws {
        defer { cleanUp() }
        let db = try SQLiteConnection(path: path)
        try db.execute("CREATE TABLE t (v)")
        let values: [SQLiteValue] = [
            .null, .integer(0), .integer(Int64.max), .integer(Int64.min), .integer(-1), .real(0.1), .real(-2.5e300),
            .real(Double.leastNonzeroMagnitude), .real(Double.infinity), .text(""), .text("到账 123.45 元"),
            .text("a\u{0}b"), .text("🔊 'quoted' \"double\""), .text(String(repeating: "x", count: 100_000)),
        ]
        for value in values { try db.execute("INSERT INTO t (v) VALUES (?)", value) }
        let back = try db.rows("SELECT v FROM t ORDER BY rowid") { $0.value(0) }
        #expect(back == values)
        // Swift types bind as the journal stores them: Bool as 0/1, nil as NULL.
        let optional: Int64? = nil
        let row = try #require(
            try db.firstRow(
                "SELECT ?, ?, ?, ?, ?, ?, typeof(?)", arguments: [true, false, 42, 1.5, "text", Int64(7), optional]
            ) { row in
                (row.bool(0), row.bool(1), row.int(2), row.double(3), row.text(4), row.int64(5), row.text(6))
            })
        #expect(row.0 == true && row.1 == false && row.2 == 42 && row.3 == 1.5 && row.4 == "text" && row.5 == 7)
        #expect(row.6 == "null")
        // A NULL reads as nil whatever it is read as.
        let nulls = try #require(
            try db.firstRow("SELECT NULL") { ($0.int64(0), $0.double(0), $0.text(0), $0.bool(0)) })
        #expect(nulls.0 == nil && nulls.1 == nil && nulls.2 == nil && nulls.3 == nil)
    }

    /// A failing statement's error names the function, SQLite's own message and code, and the statement.
    @Test func aStatementErrorNamesTheStatement() throws {
        defer { cleanUp() }
        let db = try SQLiteConnection(path: path)
        try db.execute("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        try db.execute("INSERT INTO t (k, n) VALUES (?, ?)", "a", 1)

        let duplicate = try #require(sqliteError { try db.execute("INSERT INTO t (k, n) VALUES (?, ?)", "a", 2) })
        #expect(duplicate.function == "sqlite3_step")
        #expect(duplicate.message == "UNIQUE constraint failed: t.k")
        #expect(duplicate.primaryCode == 19 && duplicate.code == 1555, "SQLITE_CONSTRAINT_PRIMARYKEY")
        #expect(duplicate.sql == "INSERT INTO t (k, n) VALUES (?, ?)")
        #expect(
            "\(duplicate)" == "sqlite3_step: UNIQUE constraint failed: t.k (SQLITE_CONSTRAINT 1555) "
                + #"in "INSERT INTO t (k, n) VALUES (?, ?)""#)

        let syntax = try #require(sqliteError { try db.execute("SELEKT 1") })
        #expect(syntax.function == "sqlite3_prepare_v3" && syntax.primaryCode == 1 && syntax.sql == "SELEKT 1")
        #expect(syntax.message.contains("syntax error"))

        let missing = try #require(sqliteError { _ = try db.rows("SELECT x FROM nowhere") { $0.int(0) } })
        #expect(
            "\(missing)" == #"sqlite3_prepare_v3: no such table: nowhere (SQLITE_ERROR) in "SELECT x FROM nowhere""#)

        // In a script, the statement that failed, not the whole script.
        let script = try #require(
            sqliteError {
                try db.executeScript("INSERT INTO t (k, n) VALUES ('b', 2);\nINSERT INTO t (k) VALUES ('c');")
            })
        #expect(script.sql == "INSERT INTO t (k) VALUES ('c');" || script.sql == "INSERT INTO t (k) VALUES ('c')")
        #expect(script.message == "NOT NULL constraint failed: t.n")

        let count = try #require(sqliteError { try db.execute("INSERT INTO t (k, n) VALUES (?, ?)", "z") })
        #expect(count.function == "bind" && count.message == "1 arguments for 2 parameters")

        let two = try #require(sqliteError { try db.execute("DELETE FROM t; DROP TABLE t") })
        #expect(two.message == "more than one statement")
        #expect(try db.rows("SELECT k FROM t ORDER BY k") { $0.text(0) } == ["a", "b"], "neither ran")
    }

    /// The journal reports SQLite's text and the statement in its error's cause.
    @Test func theJournalsErrorsCarrySQLitesText() throws {
        defer { cleanUp() }
        let journalPath = "\(directory)/journal.sqlite"
        let journal = try Journal(path: journalPath)
        // Behind the journal's back (its lock keeps out other daemons, not other SQLite connections).
        try SQLiteConnection(path: journalPath).execute("DROP TABLE setting")
        #expect {
            try journal.setSetting("volume_threshold", "70")
        } throws: { error in
            guard let error = error as? AnnounceError, let cause = error.cause else { return false }
            // Found when the statement is prepared, or (a schema changed under a prepared one) when it runs.
            return error.code == .journal && error.message == "the journal could not record the setting"
                && cause.contains("no such table: setting (SQLITE_ERROR) in \"INSERT INTO setting (name, value)")
        }
    }

    /// A transaction whose body fails leaves nothing behind, and the connection can go on.
    @Test func aTransactionRollsBackOnError() throws {
        defer { cleanUp() }
        let db = try SQLiteConnection(path: path)
        try db.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
        let error = sqliteError {
            try db.transaction { () throws(SQLiteError) in
                try db.execute("INSERT INTO t (k) VALUES ('a')")
                try db.execute("INSERT INTO t (k) VALUES ('b')")
                try db.execute("INSERT INTO t (k) VALUES ('a')")
            }
        }
        #expect(error?.primaryCode == 19)
        #expect(!db.isInTransaction)
        #expect(try db.rows("SELECT k FROM t") { $0.text(0) }.isEmpty)
        try db.transaction { () throws(SQLiteError) in try db.execute("INSERT INTO t (k) VALUES ('c')") }
        #expect(try db.rows("SELECT k FROM t") { $0.text(0) } == ["c"])
        // A statement left half-read does not keep the next transaction from committing.
        _ = try db.firstRow("SELECT k FROM t") { $0.text(0) }
        try db.transaction { () throws(SQLiteError) in try db.execute("DELETE FROM t") }
        let other = try SQLiteConnection(path: path, readOnly: true)
        #expect(try other.rows("SELECT k FROM t") { $0.text(0) }.isEmpty, "committed, seen by another connection")
    }

    /// Another connection holding the write lock: a write waits for it up to the busy timeout, then fails with
    /// SQLITE_BUSY and nothing written; once the lock is free the same connection writes.
    @Test func aLockedDatabaseIsWaitedForThenReported() throws {
        defer { cleanUp() }
        let holder = try SQLiteConnection(path: path)
        try holder.execute("PRAGMA journal_mode = WAL")
        try holder.execute("CREATE TABLE t (n INTEGER)")
        let writer = try SQLiteConnection(path: path, busyTimeoutMs: 50)
        try holder.execute("BEGIN IMMEDIATE")
        let busy = try #require(sqliteError { try writer.execute("INSERT INTO t (n) VALUES (1)") })
        #expect(busy.isBusy && busy.message == "database is locked" && busy.primaryCode == 5)
        let inTransaction = try #require(
            sqliteError { try writer.transaction { () throws(SQLiteError) in try writer.execute("DELETE FROM t") } })
        #expect(inTransaction.isBusy && inTransaction.sql == "BEGIN IMMEDIATE" && !writer.isInTransaction)
        try holder.execute("COMMIT")
        try writer.execute("INSERT INTO t (n) VALUES (1)")
        #expect(try holder.rows("SELECT n FROM t") { $0.int(0) } == [1])
    }

    /// The journal waits out a short lock held by another process's connection (a `sqlite3` shell, a backup)
    /// instead of failing the payment.
    @Test func theJournalWaitsForAShortLock() throws {
        defer { cleanUp() }
        let journalPath = "\(directory)/journal.sqlite"
        let journal = try Journal(path: journalPath)
        // Used by this thread, then by the one that commits, never by both at once.
        nonisolated(unsafe) let holder = try SQLiteConnection(path: journalPath)
        try holder.execute("BEGIN IMMEDIATE")
        let released = DispatchSemaphore(value: 0)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(300)) {
            try? holder.execute("COMMIT")
            released.signal()
        }
        let amount = try Amount(parsing: "1")
        let record = JobRecord(
            priority: .payment, utterance: .payment(amount: amount, channel: "plain", refund: false), lang: "zh",
            style: nil, liang: nil, order: nil,
            announcement: Announcement(tokens: ["到账"], text: "到账", files: []), accepted: .wall(1_000), ttlMs: nil)
        #expect(try journal.insert(record).jobID == 1)
        released.wait()
        #expect(try journal.countByState() == ["queued": 1])
    }

    /// Statements are prepared once per SQL text and reused.
    @Test func statementsAreCached() throws {
        defer { cleanUp() }
        let db = try SQLiteConnection(path: path)
        try db.execute("CREATE TABLE t (n INTEGER)")
        for n in 1...100 { try db.execute("INSERT INTO t (n) VALUES (?)", n) }
        #expect(db.cachedStatements == 2)
        #expect(try db.firstRow("SELECT sum(n) FROM t") { $0.int(0) } == 5050)
        #expect(db.cachedStatements == 3)
        db.close()
        #expect(db.cachedStatements == 0)
        #expect(sqliteError { try db.execute("SELECT 1") }?.message == "the connection is closed")
    }

    /// A file that is not a database says so with SQLITE_NOTADB (what the journal moves aside).
    @Test func aFileThatIsNotADatabaseIsReportedAsSuch() throws {
        defer { cleanUp() }
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: path))
        let db = try SQLiteConnection(path: path, readOnly: true)
        let error = try #require(sqliteError { _ = try db.rows("PRAGMA quick_check") { $0.text(0) } })
        #expect(error.isCorruption && error.primaryCode == 26)
        let folder = try #require(sqliteError { _ = try SQLiteConnection(path: directory + "/no/such/folder/x") })
        #expect(folder.function == "sqlite3_open_v2" && folder.primaryCode == 14 && !folder.isCorruption)
    }
}
