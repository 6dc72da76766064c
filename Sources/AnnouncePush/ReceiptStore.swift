import AnnounceCore
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// One payment handed to the daemon (or refused), from the moment the daemon answered until the broker acknowledged
/// its receipt: first what is owed (the order and the daemon's job), then the signed receipt itself.
public struct ReceiptEntry: Sendable, Equatable, Codable {
    /// Unique in the store, growing: receipts are published in this order.
    public var seq: UInt64
    public var order: String
    /// The daemon's job: the one created, or for a duplicate the one that already held the order.
    public var job: UInt64
    /// The daemon answered `duplicate`: the receipt says so, with the original's state.
    public var duplicate: Bool
    /// When the daemon answered, Unix milliseconds.
    public var handedAt: Int64
    /// The signed receipt (its JSON payload), once the job's state is final; nil while owed.
    public var receipt: String?
    /// For a refusal: the refused message's own signature, so that a redelivery of that message after a restart
    /// makes no second receipt while this one waits for the broker (absent in entries written before it existed).
    /// For a corpus push: its signature, or the platform's job code.
    public var message: String?
    /// `corpus` for a corpus push (absent: a payment).
    public var kind: Receipt.Kind?
    /// A corpus push's task, to run while the entry is owed (``CorpusWorker``).
    public var task: CorpusTask?
    /// Where the receipt goes when it answers one request rather than going to the receipts topic: an Alibaba Cloud
    /// combination broadcast's service reply (absent: the receipts topic).
    public var replyTo: ReplyAddress?

    /// A request's own reply topic, and the id the reply must carry.
    public struct ReplyAddress: Sendable, Equatable, Codable {
        public var topic: String
        public var id: String

        public init(topic: String, id: String) {
            self.topic = topic
            self.id = id
        }
    }

    public init(
        seq: UInt64, order: String, job: UInt64, duplicate: Bool, handedAt: Int64, receipt: String? = nil,
        message: String? = nil, kind: Receipt.Kind? = nil, task: CorpusTask? = nil, replyTo: ReplyAddress? = nil
    ) {
        self.replyTo = replyTo
        self.kind = kind
        self.task = task
        self.seq = seq
        self.order = order
        self.job = job
        self.duplicate = duplicate
        self.handedAt = handedAt
        self.receipt = receipt
        self.message = message
    }
}

/// The pending receipts on disk, one small JSON file per entry in a folder of the state directory
/// (`<state_dir>/receipts/<seq>.json`), kept until the broker has acknowledged the receipt (docs/fleet.md).
///
/// Every change is atomic and durable before it returns: the new content goes to a temporary file that is
/// fsynced, renamed over the entry, and the folder is fsynced; a removal is an unlink and a folder fsync. So
/// after a crash or a power loss each entry is wholly its old or its new self, never torn. Files are written one
/// at a time (a lock), so that two writes of one entry cannot land in the wrong order.
public final class ReceiptStore: Sendable {
    public let directory: String
    /// Held while a file is written or removed.
    private let lock = Mutex(())

    /// The store in `directory`, created if needed (now if it can be, else at the first write). Leftover temporary
    /// files of a write that never finished are removed.
    public init(directory: String) {
        self.directory = directory
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasSuffix(".tmp")
        {
            unlink(Path.join(directory, name))
        }
    }

    /// Every entry on disk, oldest first (none if the folder does not exist yet). An unreadable file is skipped and
    /// reported in `damaged`.
    public func load() throws(AnnounceError) -> (entries: [ReceiptEntry], damaged: [String]) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            guard FileManager.default.fileExists(atPath: directory) else { return ([], []) }
            throw AnnounceError(.journal, "cannot read the receipt folder \(directory)", cause: errorReason(error))
        }
        var entries: [ReceiptEntry] = []
        var damaged: [String] = []
        for name in names where name.hasSuffix(".json") {
            let path = Path.join(directory, name)
            guard let data = FileManager.default.contents(atPath: path),
                let entry = try? JSONDecoder().decode(ReceiptEntry.self, from: data),
                name == Self.fileName(entry.seq)
            else {
                damaged.append(path)
                continue
            }
            entries.append(entry)
        }
        return (entries.sorted { $0.seq < $1.seq }, damaged)
    }

    /// Writes an entry (new, or replacing the one with its `seq`), durably.
    public func save(_ entry: ReceiptEntry) throws(AnnounceError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let bytes = Array((try? encoder.encode(entry)) ?? Data())
        let path = Path.join(directory, Self.fileName(entry.seq))
        try lock.withLock { _ throws(AnnounceError) in
            do throws(DurableFile.Failure) { try DurableFile.replace(path, with: bytes) } catch { throw Self.failure(error) }
        }
    }

    /// Removes an entry, durably (its receipt was acknowledged).
    public func remove(_ seq: UInt64) throws(AnnounceError) {
        let path = Path.join(directory, Self.fileName(seq))
        try lock.withLock { _ throws(AnnounceError) in
            do throws(DurableFile.Failure) { try DurableFile.remove(path) } catch { throw Self.failure(error) }
        }
    }

    private static func failure(_ failure: DurableFile.Failure) -> AnnounceError {
        AnnounceError(.journal, "cannot \(failure.call) \(failure.path)", cause: failure.reason)
    }

    static func fileName(_ seq: UInt64) -> String {
        let digits = String(seq)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits + ".json"
    }
}
