/// Remembers which job each order id was accepted as, for `window` milliseconds after its acceptance, so that
/// the same payment delivered twice (two channels, MQTT QoS 1 redelivery, a retry after a lost reply) is
/// announced once. The daemon keeps the durable copy in the journal and loads it back at start.
///
/// Payments, status prompts and free texts each have their own order ids (``Kind``): a prompt or a text sent
/// with order id X never blocks payment X, nor the other way round.
///
/// Not thread-safe on its own: the daemon touches it only from its serial acceptor.
/// Times are wall-clock milliseconds since 1970, because the window must survive restarts.
public struct DedupWindow: Sendable {
    /// What an order id identifies: each kind of job has its own space of ids.
    public enum Kind: String, Sendable, Codable, CaseIterable {
        case payment, prompt, text, combination
    }

    public struct Entry: Sendable, Equatable {
        public var order: String
        public var kind: Kind
        public var jobID: UInt64
        public var acceptedAtMs: Int64

        public init(order: String, kind: Kind, jobID: UInt64, acceptedAtMs: Int64) {
            self.order = order
            self.kind = kind
            self.jobID = jobID
            self.acceptedAtMs = acceptedAtMs
        }

        var key: Key { Key(kind: kind, order: order) }
    }

    struct Key: Hashable, Sendable {
        var kind: Kind
        var order: String
    }

    /// How long an order id is remembered, milliseconds.
    public var windowMs: Int64
    private var byOrder: [Key: Entry] = [:]
    /// Acceptance order, oldest first, for expiring entries cheaply.
    private var timeline: [Entry] = []
    private var timelineHead = 0

    public init(windowMs: Int64, entries: [Entry] = []) {
        self.windowMs = windowMs
        for entry in entries.sorted(by: { $0.acceptedAtMs < $1.acceptedAtMs }) { insert(entry) }
    }

    /// Order ids remembered now (expired ones are forgotten on the next `lookup`/`insert`).
    public var count: Int { byOrder.count }

    /// The job an order id of `kind` was accepted as, if that was less than `windowMs` before `nowMs`.
    public mutating func lookup(_ order: String, kind: Kind, nowMs: Int64) -> Entry? {
        expire(nowMs: nowMs)
        guard let entry = byOrder[Key(kind: kind, order: order)], nowMs - entry.acceptedAtMs < windowMs else {
            return nil
        }
        return entry
    }

    /// Remembers an accepted order. An entry for the same order id and kind (only possible once the old one has
    /// left the window) is replaced.
    public mutating func insert(_ entry: Entry) {
        byOrder[entry.key] = entry
        timeline.append(entry)
    }

    /// Forgets entries older than the window. Returns how many were forgotten.
    @discardableResult
    public mutating func expire(nowMs: Int64) -> Int {
        var forgotten = 0
        while timelineHead < timeline.count, nowMs - timeline[timelineHead].acceptedAtMs >= windowMs {
            let old = timeline[timelineHead]
            // Only forget the order if this timeline entry is still the current one for it.
            if byOrder[old.key] == old {
                byOrder[old.key] = nil
                forgotten += 1
            }
            timelineHead += 1
        }
        if timelineHead > 256 && timelineHead * 2 > timeline.count {
            timeline.removeFirst(timelineHead)
            timelineHead = 0
        }
        return forgotten
    }
}

extension Utterance {
    /// The space of order ids this job's order id belongs to.
    public var dedupKind: DedupWindow.Kind {
        switch self {
        case .payment: .payment
        case .prompt: .prompt
        case .text: .text
        case .summary: .prompt  // the day's total carries no payment's order id
        case .combination: .combination
        }
    }
}
