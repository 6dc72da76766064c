import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// One accepted job as the journal keeps it (table `job`): enough to speak it again after a restart
/// (utterance, language, reading options), to answer `history`/`replay`/`duplicate`, and its outcome.
public struct JobRecord: Codable, Sendable, Equatable {
    /// Assigned by SQLite on insert (AUTOINCREMENT: never reused, even after old rows are purged).
    public var id: Int64?
    public var priority: String
    /// The utterance as JSON (`Utterance`'s Codable form).
    public var utterance: String
    public var lang: String?
    public var style: String?
    public var liang: Bool?
    public var orderId: String?
    public var text: String
    /// The clip tokens as JSON.
    public var tokens: String
    public var amount: String?
    public var channel: String?
    public var refund: Bool?
    public var prompt: String?
    public var replayOf: Int64?
    /// Wall-clock milliseconds since 1970.
    public var acceptedAt: Int64
    public var ttlMs: Int64?
    public var state: String
    public var startedAt: Int64?
    public var finishedAt: Int64?
    public var firstSampleMs: Double?
    public var finishedMs: Double?
    public var errorCode: String?
    public var errorMessage: String?
    /// Times playback began (see `Journal.Change.started`).
    public var attempts: Int = 0
    /// Each time on the boot clock too (``ClockStamp``): the boot and its milliseconds; nil in rows written before
    /// (aged by the wall clock), and for a start or an end in another boot than the acceptance's.
    public var acceptedBoot: String?
    public var acceptedBootMs: Int64?
    public var startedBoot: String?
    public var startedBootMs: Int64?
    public var finishedBoot: String?
    public var finishedBootMs: Int64?
    /// Asked to play through the owner's mute (`enforce`); nil: not asked.
    public var enforce: Bool?

    public init(
        priority: JobPriority, utterance: Utterance, lang: String?, style: ReadingStyle?, liang: Bool?,
        order: String?, announcement: Announcement, replayOf: UInt64? = nil, accepted: ClockStamp, ttlMs: Int64?,
        enforce: Bool = false
    ) {
        self.enforce = enforce ? true : nil
        self.priority = priority.rawValue
        self.utterance = String(decoding: (try? JSONEncoder().encode(utterance)) ?? Data(), as: UTF8.self)
        self.lang = lang
        self.style = style?.rawValue
        self.liang = liang
        self.orderId = order
        self.text = announcement.text
        self.tokens = String(decoding: (try? JSONEncoder().encode(announcement.tokens)) ?? Data(), as: UTF8.self)
        switch utterance {
        case let .payment(amount, channel, refund):
            self.amount = amount.description
            self.channel = channel
            self.refund = refund
        case let .prompt(name):
            self.prompt = name
        case .text, .summary, .combination:
            break  // the words are the announcement's text, kept in `text`; a summary is no payment (no amount)
        }
        self.replayOf = replayOf.map(Int64.init)
        self.acceptedAt = accepted.wallMs
        self.ttlMs = ttlMs
        self.state = JobState.queued.rawValue
        self.accepted = accepted
    }

    public var jobID: UInt64 { UInt64(id ?? 0) }
    public var jobState: JobState { JobState(rawValue: state) ?? .failed }
    public var jobPriority: JobPriority { JobPriority(rawValue: priority) ?? .payment }
    public var readingStyle: ReadingStyle? { style.flatMap(ReadingStyle.init(rawValue:)) }

    /// When it was accepted, on both clocks (a row from before the boot clock was kept: the wall clock only).
    public var accepted: ClockStamp {
        get { ClockStamp(wallMs: acceptedAt, boot: acceptedBoot ?? "", bootMs: acceptedBootMs ?? 0, trusted: true) }
        set {
            acceptedAt = newValue.wallMs
            acceptedBoot = newValue.bootColumn
            acceptedBootMs = newValue.bootMsColumn
        }
    }

    /// The utterance decoded back; nil if the row was damaged.
    public var decodedUtterance: Utterance? { try? JSONDecoder().decode(Utterance.self, from: Data(utterance.utf8)) }

    public var decodedTokens: [String]? { try? JSONDecoder().decode([String].self, from: Data(tokens.utf8)) }

    /// The record as the protocol reports it.
    public var info: JobInfo {
        JobInfo(
            id: jobID, state: jobState, priority: jobPriority, text: text, tokens: decodedTokens, amount: amount,
            channel: channel, refund: refund, prompt: prompt, lang: lang, order: orderId,
            replayOf: replayOf.map(UInt64.init), acceptedAt: WallClock.iso8601(ms: acceptedAt),
            startedAt: startedAt.map(WallClock.iso8601(ms:)), finishedAt: finishedAt.map(WallClock.iso8601(ms:)),
            ttl: ttlMs.map { Double($0) / 1000 }, firstSampleMs: firstSampleMs, finishedMs: finishedMs,
            error: errorCode.map { ErrorInfo(code: $0, message: errorMessage ?? "") },
            attempts: attempts > 0 ? attempts : nil, enforce: enforce == true ? true : nil)
    }
}

/// One remembered order id (table `dedup`), of one kind of job: payments, prompts and texts each have their own
/// order ids (``DedupWindow/Kind``).
struct DedupRecord {
    var kind: String
    var orderId: String
    var jobId: Int64
    /// When the order was accepted (or, for one stamped by an untrusted clock in an earlier boot, when a start
    /// took it over: ``Journal/reanchorUntrustedOrders(now:)``).
    var accepted: ClockStamp

    /// The order id of a job just inserted (nil if it has none).
    init?(_ record: JobRecord, trusted: Bool) {
        guard let order = record.orderId, let id = record.id else { return nil }
        kind = record.dedupKind.rawValue
        orderId = order
        jobId = id
        accepted = record.accepted
        accepted.trusted = trusted
    }

    init(kind: String, orderId: String, jobId: Int64, accepted: ClockStamp) {
        self.kind = kind
        self.orderId = orderId
        self.jobId = jobId
        self.accepted = accepted
    }

    /// The entry as the de-duplication window keeps it: its acceptance on `now`'s boot clock (``ClockStamp/age``).
    func entry(now: ClockStamp) -> DedupWindow.Entry {
        DedupWindow.Entry(
            order: orderId, kind: DedupWindow.Kind(rawValue: kind) ?? .payment, jobID: UInt64(jobId),
            acceptedAtMs: now.bootMs - accepted.age(at: now))
    }

    /// Remembers the order id, replacing what was remembered for the same kind and order id.
    func upsert(_ db: SQLiteConnection) throws(SQLiteError) {
        let boot: String? = accepted.boot.isEmpty ? nil : accepted.boot
        try db.execute(
            """
            INSERT INTO dedup (kind, order_id, job_id, accepted_at, boot, boot_ms, trusted) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (kind, order_id) DO UPDATE SET job_id = excluded.job_id, accepted_at = excluded.accepted_at,
                boot = excluded.boot, boot_ms = excluded.boot_ms, trusted = excluded.trusted
            """,
            kind, orderId, jobId, accepted.wallMs, boot, boot == nil ? nil : accepted.bootMs, accepted.trusted)
    }

    /// Every order id remembered, oldest first.
    static func fetchAll(_ db: SQLiteConnection) throws(SQLiteError) -> [DedupRecord] {
        try db.rows(
            "SELECT kind, order_id, job_id, accepted_at, boot, boot_ms, trusted FROM dedup ORDER BY accepted_at"
        ) { row in
            DedupRecord(
                kind: row.text(0) ?? "", orderId: row.text(1) ?? "", jobId: row.int64(2) ?? 0,
                accepted: ClockStamp(
                    wallMs: row.int64(3) ?? 0, boot: row.text(4) ?? "", bootMs: row.int64(5) ?? 0,
                    trusted: row.bool(6) ?? true))
        }
    }

    /// Schema v2: the kind joins the order id in the key. Rows from v1 get the kind of the job they point to (a
    /// payment if that job is gone: it keeps blocking what it blocked).
    static func separateKinds(_ db: SQLiteConnection) throws(SQLiteError) {
        try db.executeScript(
            """
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
                """)
    }
}

extension JobRecord {
    /// The space of order ids this job's order id belongs to.
    var dedupKind: DedupWindow.Kind {
        if let utterance = decodedUtterance { return utterance.dedupKind }
        if amount != nil { return .payment }
        return prompt != nil ? .prompt : .text
    }
}

// MARK: Rows

extension JobRecord {
    /// The columns of table `job`, in the order `init(row:)` reads them and `insert` writes them (after `id`).
    static let columns = [
        "id", "priority", "utterance", "lang", "style", "liang", "order_id", "text", "tokens", "amount", "channel",
        "refund", "prompt", "replay_of", "accepted_at", "ttl_ms", "state", "started_at", "finished_at",
        "first_sample_ms", "finished_ms", "error_code", "error_message", "attempts", "accepted_boot",
        "accepted_boot_ms", "started_boot", "started_boot_ms", "finished_boot", "finished_boot_ms", "enforce",
    ]

    /// A row of `SELECT <columns> FROM job`.
    init(row: SQLiteRow) {
        id = row.int64(0)
        priority = row.text(1) ?? ""
        utterance = row.text(2) ?? ""
        lang = row.text(3)
        style = row.text(4)
        liang = row.bool(5)
        orderId = row.text(6)
        text = row.text(7) ?? ""
        tokens = row.text(8) ?? ""
        amount = row.text(9)
        channel = row.text(10)
        refund = row.bool(11)
        prompt = row.text(12)
        replayOf = row.int64(13)
        acceptedAt = row.int64(14) ?? 0
        ttlMs = row.int64(15)
        state = row.text(16) ?? ""
        startedAt = row.int64(17)
        finishedAt = row.int64(18)
        firstSampleMs = row.double(19)
        finishedMs = row.double(20)
        errorCode = row.text(21)
        errorMessage = row.text(22)
        attempts = row.int(23) ?? 0
        acceptedBoot = row.text(24)
        acceptedBootMs = row.int64(25)
        startedBoot = row.text(26)
        startedBootMs = row.int64(27)
        finishedBoot = row.text(28)
        finishedBootMs = row.int64(29)
        enforce = row.bool(30)
    }

    private static let select = "SELECT \(columns.joined(separator: ", ")) FROM job WHERE "

    /// The jobs matching `condition` (SQL after WHERE, ordering and limit included), with its `arguments`.
    static func fetchAll(
        _ db: SQLiteConnection, where condition: String, _ arguments: any SQLiteBindable...
    ) throws(SQLiteError) -> [JobRecord] {
        try db.rows(select + condition, arguments: arguments, read: JobRecord.init(row:))
    }

    private static let insertSQL =
        "INSERT INTO job (\(columns.dropFirst().joined(separator: ", "))) VALUES ("
        + Array(repeating: "?", count: columns.count - 1).joined(separator: ", ") + ")"
    private static let replaceSQL =
        "INSERT OR REPLACE INTO job (\(columns.joined(separator: ", "))) VALUES ("
        + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"

    /// The values of every column but `id`, in `columns` order.
    private var values: [any SQLiteBindable] {
        [
            priority, utterance, lang, style, liang, orderId, text, tokens, amount, channel, refund, prompt, replayOf,
            acceptedAt, ttlMs, state, startedAt, finishedAt, firstSampleMs, finishedMs, errorCode, errorMessage,
            attempts, acceptedBoot, acceptedBootMs, startedBoot, startedBootMs, finishedBoot, finishedBootMs,
            enforce,
        ]
    }

    /// Inserts the record as a new row (its `id`, if any, is ignored) and sets `id` to the row's.
    mutating func insert(_ db: SQLiteConnection) throws(SQLiteError) {
        try db.execute(Self.insertSQL, arguments: values)
        id = db.lastInsertRowID
    }

    /// Writes the record as the row with its own `id`, replacing the row there if any.
    func insertOrReplace(_ db: SQLiteConnection) throws(SQLiteError) {
        try db.execute(Self.replaceSQL, arguments: [id] + values)
    }
}

extension ClockStamp {
    /// The boot as a column: NULL for a moment known by the wall clock only.
    var bootColumn: String? { boot.isEmpty ? nil : boot }
    var bootMsColumn: Int64? { boot.isEmpty ? nil : bootMs }
}
