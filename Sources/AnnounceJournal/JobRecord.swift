import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import GRDB

/// One accepted job as the journal keeps it (table `job`): enough to speak it again after a restart
/// (utterance, language, reading options), to answer `history`/`replay`/`duplicate`, and its outcome.
public struct JobRecord: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "job"
    public static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    public static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

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

    public init(
        priority: JobPriority, utterance: Utterance, lang: String?, style: ReadingStyle?, liang: Bool?,
        order: String?, announcement: Announcement, replayOf: UInt64? = nil, acceptedAtMs: Int64, ttlMs: Int64?
    ) {
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
        case .text, .summary:
            break  // the words are the announcement's text, kept in `text`; a summary is no payment (no amount)
        }
        self.replayOf = replayOf.map(Int64.init)
        self.acceptedAt = acceptedAtMs
        self.ttlMs = ttlMs
        self.state = JobState.queued.rawValue
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }

    public var jobID: UInt64 { UInt64(id ?? 0) }
    public var jobState: JobState { JobState(rawValue: state) ?? .failed }
    public var jobPriority: JobPriority { JobPriority(rawValue: priority) ?? .payment }
    public var readingStyle: ReadingStyle? { style.flatMap(ReadingStyle.init(rawValue:)) }

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
            attempts: attempts > 0 ? attempts : nil)
    }
}

/// One remembered order id (table `dedup`), of one kind of job: payments, prompts and texts each have their own
/// order ids (``DedupWindow/Kind``).
struct DedupRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "dedup"
    static let databaseColumnDecodingStrategy = DatabaseColumnDecodingStrategy.convertFromSnakeCase
    static let databaseColumnEncodingStrategy = DatabaseColumnEncodingStrategy.convertToSnakeCase

    var kind: String
    var orderId: String
    var jobId: Int64
    var acceptedAt: Int64

    /// The order id of a job just inserted (nil if it has none).
    init?(_ record: JobRecord) {
        guard let order = record.orderId, let id = record.id else { return nil }
        kind = record.dedupKind.rawValue
        orderId = order
        jobId = id
        acceptedAt = record.acceptedAt
    }

    var entry: DedupWindow.Entry {
        DedupWindow.Entry(
            order: orderId, kind: DedupWindow.Kind(rawValue: kind) ?? .payment, jobID: UInt64(jobId),
            acceptedAtMs: acceptedAt)
    }

    /// Schema v2: the kind joins the order id in the key. Rows from v1 get the kind of the job they point to (a
    /// payment if that job is gone: it keeps blocking what it blocked).
    static func separateKinds(_ db: Database) throws {
        try db.execute(
            sql: """
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
        if amount != nil { return .payment }
        return prompt != nil ? .prompt : .text
    }
}
