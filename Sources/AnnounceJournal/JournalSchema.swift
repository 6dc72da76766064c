/// The journal's tables, and the migrations that bring a file of any earlier version up to date.
///
/// Applied migrations are recorded by identifier in `grdb_migrations`, the table the GRDB versions of the journal
/// kept (GRDB's `DatabaseMigrator`), with the same identifiers and the same statements: a file written by any
/// earlier version is brought up to date exactly once, whichever of them it has (a journal may have
/// "v2-attempts" without "v2: order ids per kind of job": the two were made on separate branches), and one made
/// here would still open with a GRDB version. Each migration runs in its own transaction with its record.
/// Identifiers not known here (from a newer version) are left alone, as GRDB did.
enum JournalSchema {
    struct Migration: Sendable {
        var identifier: String
        var apply: @Sendable (SQLiteConnection) throws(SQLiteError) -> Void
    }

    /// In the order they are applied. Never change one that has shipped: add another.
    static let migrations: [Migration] = [
        Migration(identifier: "v1") { (db) throws(SQLiteError) in
            // As GRDB's schema builder wrote it.
            try db.executeScript(
                """
                CREATE TABLE "job" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "priority" TEXT NOT NULL,
                    "utterance" TEXT NOT NULL, "lang" TEXT, "style" TEXT, "liang" BOOLEAN, "order_id" TEXT,
                    "text" TEXT NOT NULL, "tokens" TEXT NOT NULL, "amount" TEXT, "channel" TEXT, "refund" BOOLEAN,
                    "prompt" TEXT, "replay_of" INTEGER, "accepted_at" INTEGER NOT NULL, "ttl_ms" INTEGER,
                    "state" TEXT NOT NULL, "started_at" INTEGER, "finished_at" INTEGER, "first_sample_ms" DOUBLE,
                    "finished_ms" DOUBLE, "error_code" TEXT, "error_message" TEXT);
                CREATE INDEX "job_unfinished" ON "job"("state") WHERE ("state" = 'queued') OR ("state" = 'playing');
                CREATE TABLE "dedup" ("order_id" TEXT PRIMARY KEY NOT NULL, "job_id" INTEGER NOT NULL,
                    "accepted_at" INTEGER NOT NULL);
                CREATE INDEX "dedup_accepted_at" ON "dedup"("accepted_at");
                CREATE TABLE "setting" ("name" TEXT PRIMARY KEY NOT NULL, "value" TEXT NOT NULL);
                """)
        },
        Migration(identifier: "v2: order ids per kind of job") { (db) throws(SQLiteError) in
            try DedupRecord.separateKinds(db)
        },
        Migration(identifier: "v2-attempts") { (db) throws(SQLiteError) in
            // How many times playback of the job began: more than one means it was played again from its start
            // (after a device failure, or because the daemon stopped before its end was heard).
            try db.executeScript(#"ALTER TABLE "job" ADD COLUMN "attempts" INTEGER NOT NULL DEFAULT 0"#)
        },
        Migration(identifier: "v3: boot clock") { (db) throws(SQLiteError) in
            // Each time also on the kernel's boot clock, with the boot it belongs to (`ClockStamp`): durations
            // within a boot survive a wall-clock jump, and the wall times of a boot are corrected once its clock
            // is trusted. Rows from before have none and are aged by the wall clock; their order ids count as
            // stamped by a trusted clock.
            try db.executeScript(
                """
                ALTER TABLE job ADD COLUMN accepted_boot TEXT;
                ALTER TABLE job ADD COLUMN accepted_boot_ms INTEGER;
                ALTER TABLE job ADD COLUMN started_boot TEXT;
                ALTER TABLE job ADD COLUMN started_boot_ms INTEGER;
                ALTER TABLE job ADD COLUMN finished_boot TEXT;
                ALTER TABLE job ADD COLUMN finished_boot_ms INTEGER;
                ALTER TABLE dedup ADD COLUMN boot TEXT;
                ALTER TABLE dedup ADD COLUMN boot_ms INTEGER;
                ALTER TABLE dedup ADD COLUMN trusted INTEGER NOT NULL DEFAULT 1;
                """)
        },
        Migration(identifier: "v4: enforce") { (db) throws(SQLiteError) in
            // Whether the job asked to play through the owner's mute (`enforce`): a job recovered after a restart
            // asks it again. Rows from before have none (not asked).
            try db.executeScript(#"ALTER TABLE "job" ADD COLUMN "enforce" BOOLEAN"#)
        },
        Migration(identifier: "v5: repeats") { (db) throws(SQLiteError) in
            // Repeating notices (Journal+Repeats.swift): what each says and how often (`spec`, a RepeatPlan as
            // JSON), how far it got, and how it ended. Its times are jobs like any other.
            try db.executeScript(
                """
                CREATE TABLE "repeat" ("order_id" TEXT PRIMARY KEY NOT NULL, "spec" TEXT NOT NULL, "text" TEXT,
                    "state" TEXT NOT NULL, "played" INTEGER NOT NULL DEFAULT 0, "heard" INTEGER NOT NULL DEFAULT 0,
                    "started_at" INTEGER NOT NULL, "ended_at" INTEGER, "error_code" TEXT, "error_message" TEXT);
                """)
        },
    ]

    /// The identifiers of the migrations applied to the file.
    static func applied(_ db: SQLiteConnection) throws(SQLiteError) -> Set<String> {
        Set(try db.rows("SELECT identifier FROM grdb_migrations") { $0.text(0) ?? "" })
    }

    /// Applies, in order, each migration up to and including `last` (all of them if nil) that the file lacks.
    static func migrate(_ db: SQLiteConnection, upTo last: String? = nil) throws(SQLiteError) {
        try db.executeScript("CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        let done = try applied(db)
        for migration in migrations {
            if !done.contains(migration.identifier) {
                try db.transaction { () throws(SQLiteError) in
                    try migration.apply(db)
                    try db.execute("INSERT INTO grdb_migrations (identifier) VALUES (?)", migration.identifier)
                }
            }
            if migration.identifier == last { return }
        }
    }
}
