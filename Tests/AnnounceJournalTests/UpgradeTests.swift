import AnnounceCore
import Foundation
import Testing

@testable import AnnounceJournal

/// Journals as the GRDB versions of the daemon left them: the same tables made by the same statements, and the
/// migrations applied recorded in GRDB's `grdb_migrations`. Written here in raw SQL, independently of
/// JournalSchema, so that a change there cannot make these pass by itself.
enum OldJournal {
    /// What each GRDB migration did, as the statements GRDB ran.
    static let steps: [String: String] = [
        "v1": """
            CREATE TABLE "job" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "priority" TEXT NOT NULL, \
            "utterance" TEXT NOT NULL, "lang" TEXT, "style" TEXT, "liang" BOOLEAN, "order_id" TEXT, \
            "text" TEXT NOT NULL, "tokens" TEXT NOT NULL, "amount" TEXT, "channel" TEXT, "refund" BOOLEAN, \
            "prompt" TEXT, "replay_of" INTEGER, "accepted_at" INTEGER NOT NULL, "ttl_ms" INTEGER, \
            "state" TEXT NOT NULL, "started_at" INTEGER, "finished_at" INTEGER, "first_sample_ms" DOUBLE, \
            "finished_ms" DOUBLE, "error_code" TEXT, "error_message" TEXT);
            CREATE INDEX "job_unfinished" ON "job"("state") WHERE ("state" = 'queued') OR ("state" = 'playing');
            CREATE TABLE "dedup" ("order_id" TEXT PRIMARY KEY NOT NULL, \
            "job_id" INTEGER NOT NULL, "accepted_at" INTEGER NOT NULL);
            CREATE INDEX "dedup_accepted_at" ON "dedup"("accepted_at");
            CREATE TABLE "setting" ("name" TEXT PRIMARY KEY NOT NULL, "value" TEXT NOT NULL);
            """,
        "v2: order ids per kind of job": """
            CREATE TABLE dedup_v2 (
                kind TEXT NOT NULL, order_id TEXT NOT NULL, job_id INTEGER NOT NULL, accepted_at INTEGER NOT NULL,
                PRIMARY KEY (kind, order_id));
            INSERT INTO dedup_v2 (kind, order_id, job_id, accepted_at)
                SELECT CASE WHEN job.id IS NULL OR job.amount IS NOT NULL THEN 'payment'
                            WHEN job.prompt IS NOT NULL THEN 'prompt' ELSE 'text' END,
                       dedup.order_id, dedup.job_id, dedup.accepted_at
                FROM dedup LEFT JOIN job ON job.id = dedup.job_id;
            DROP TABLE dedup;
            ALTER TABLE dedup_v2 RENAME TO dedup;
            CREATE INDEX dedup_accepted_at ON dedup (accepted_at);
            """,
        "v2-attempts": #"ALTER TABLE "job" ADD COLUMN "attempts" INTEGER NOT NULL DEFAULT 0"#,
    ]

    /// Writes a journal at `path` with `migrations` applied in that order, then `rows`; WAL, as GRDB left it.
    static func write(
        at path: String, migrations: [String], rows: (SQLiteConnection) throws -> Void = { _ in }
    ) throws {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        try db.execute("PRAGMA journal_mode = WAL")
        try db.execute("CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        for identifier in migrations {
            try db.executeScript(try #require(steps[identifier], "no step \(identifier)"))
            try db.execute("INSERT INTO grdb_migrations (identifier) VALUES (?)", identifier)
        }
        try rows(db)
    }

    /// The migrations a journal file records as applied.
    static func applied(at path: String) throws -> [String] {
        let db = try SQLiteConnection(path: path, readOnly: true)
        defer { db.close() }
        return try db.rows("SELECT identifier FROM grdb_migrations ORDER BY identifier") { $0.text(0) ?? "" }
    }

    /// The file's schema: every table and index with the statement that made it (white space aside).
    static func schema(at path: String) throws -> [String] {
        let db = try SQLiteConnection(path: path, readOnly: true)
        defer { db.close() }
        return try db.rows("SELECT type, name, sql FROM sqlite_master ORDER BY name") {
            let sql = ($0.text(2) ?? "").split(whereSeparator: \.isWhitespace).joined(separator: " ")
            return "\($0.text(0) ?? "") \($0.text(1) ?? ""): \(sql)"
        }
    }
}

/// A journal written by an earlier (GRDB) version opens and is brought up to date exactly once.
struct UpgradeTests {
    let directory: String
    var path: String { "\(directory)/journal.sqlite" }
    static let all = [
        "v1", "v2-attempts", "v2: order ids per kind of job", "v3: boot clock", "v4: enforce", "v5: repeats",
    ]

    init() throws {
        directory = "/tmp/ann-upgrade-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    /// A journal made by the last GRDB version (all three migrations) opens with nothing to do, its rows intact,
    /// and has exactly the schema of a journal made now: the tables are the same, statement for statement.
    @Test func aJournalOfTheLastGRDBVersionOpensAsItIs() throws {
        defer { cleanUp() }
        try OldJournal.write(at: path, migrations: ["v1", "v2: order ids per kind of job", "v2-attempts"]) { db in
            try db.executeScript(
                """
                INSERT INTO job (priority, utterance, order_id, text, tokens, amount, accepted_at, state, attempts)
                VALUES ('payment', '{}', 'A', '到账一元', '[]', '1.00', 1000, 'playing', 2);
                INSERT INTO dedup (kind, order_id, job_id, accepted_at) VALUES ('payment', 'A', 1, 1000);
                INSERT INTO setting (name, value) VALUES ('volume_threshold', '70');
                """)
        }
        do {
            let journal = try Journal(path: path)
            let recovery = try journal.recover()
            #expect(recovery.pending.map(\.jobID) == [1] && recovery.interrupted == 1)
            #expect(recovery.pending.first?.attempts == 2)
            #expect(try journal.setting("volume_threshold") == "70")
            #expect(
                try journal.dedupEntries(now: JournalTests.at10s, windowMs: 10_001) == [
                    DedupWindow.Entry(order: "A", kind: .payment, jobID: 1, acceptedAtMs: 1_000)
                ])
            #expect(try journal.insert(recordWithOrder("B")).jobID == 2)
        }
        #expect(try OldJournal.applied(at: path) == Self.all)
        let fresh = "\(directory)/fresh.sqlite"
        _ = try Journal(path: fresh)
        #expect(try OldJournal.schema(at: path) == OldJournal.schema(at: fresh))
    }

    /// The branch that added `attempts` merged before the one that split the order ids: some journals have
    /// "v2-attempts" without "v2: order ids per kind of job". Only the missing one runs, once.
    @Test func aJournalWithAttemptsButOneOrderIDSpaceGetsOnlyTheMissingMigration() throws {
        defer { cleanUp() }
        try OldJournal.write(at: path, migrations: ["v1", "v2-attempts"]) { db in
            try db.executeScript(
                """
                INSERT INTO job (priority, utterance, order_id, text, tokens, prompt, accepted_at, state, attempts)
                VALUES ('status', '{}', 'P', '网络断开', '[]', 'network-lost', 1000, 'spoken', 1);
                INSERT INTO dedup (order_id, job_id, accepted_at) VALUES ('P', 1, 1000), ('gone', 99, 1500);
                """)
        }
        for _ in 1...2 {
            let journal = try Journal(path: path)
            #expect(
                try journal.dedupEntries(now: JournalTests.at10s, windowMs: 10_001) == [
                    DedupWindow.Entry(order: "P", kind: .prompt, jobID: 1, acceptedAtMs: 1_000),
                    DedupWindow.Entry(order: "gone", kind: .payment, jobID: 99, acceptedAtMs: 1_500),
                ], "each order id under its job's kind; a payment's if the job is gone")
            #expect(try journal.job(1)?.attempts == 1)
        }
        #expect(try OldJournal.applied(at: path) == Self.all)
    }

    /// A migration from a newer version (downgraded daemon) is left alone, as GRDB did.
    @Test func aMigrationFromANewerVersionIsLeftAlone() throws {
        defer { cleanUp() }
        try OldJournal.write(at: path, migrations: ["v1", "v2: order ids per kind of job", "v2-attempts"]) { db in
            try db.execute("INSERT INTO grdb_migrations (identifier) VALUES ('v9-from-the-future')")
        }
        _ = try Journal(path: path).history(limit: 1)
        #expect(try OldJournal.applied(at: path) == (Self.all + ["v9-from-the-future"]).sorted())
    }

    /// A migration that fails changes nothing (its transaction rolls back, it is not recorded) and the journal does
    /// not open, with SQLite's reason and the statement; the file is not damage and stays where it is.
    @Test func aMigrationThatFailsChangesNothing() throws {
        defer { cleanUp() }
        try OldJournal.write(at: path, migrations: ["v1", "v2: order ids per kind of job"]) { db in
            // A column in the way of "v2-attempts".
            try db.execute(#"ALTER TABLE "job" ADD COLUMN "attempts" TEXT"#)
        }
        #expect {
            try Journal(path: path)
        } throws: { error in
            guard let error = error as? AnnounceError, error.code == .journal, let cause = error.cause else {
                return false
            }
            return cause.contains("duplicate column name: attempts") && cause.contains("ALTER TABLE \"job\"")
        }
        #expect(try OldJournal.applied(at: path) == ["v1", "v2: order ids per kind of job"])
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).allSatisfy { !$0.contains("corrupt") })
    }

    func recordWithOrder(_ order: String) throws -> JobRecord {
        let amount = try Amount(parsing: "1")
        return JobRecord(
            priority: .payment, utterance: .payment(amount: amount, channel: "plain", refund: false), lang: "zh",
            style: nil, liang: nil, order: order,
            announcement: Announcement(tokens: ["到账"], text: "到账", files: []), accepted: .wall(3_000), ttlMs: nil)
    }
}
