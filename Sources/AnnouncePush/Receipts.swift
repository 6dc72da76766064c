import AnnounceCore
import AnnounceCrypto
import Logging
import Synchronization

/// The receipts of the payments this terminal handed to its daemon, or refused (docs/fleet.md, "Receipts"): what is
/// owed, matched with the daemon's final states as they reach its disk (``DaemonEvents``), signed, kept on disk until
/// the broker has acknowledged them (``ReceiptStore``), published through the ``Outbox``.
///
/// The life of an entry:
/// 1. **owed** — ``handedOver(order:reply:)`` on the MQTT thread, when the daemon answered for a payment and before
///    its message is acknowledged to the broker: written to disk first, so that a crash after the PUBACK cannot
///    forget it. (A duplicate of a job already final, or a refusal — ``refused(order:reason:message:)`` — becomes a
///    receipt at once.)
/// 2. **receipt** — the job's final state arrives (live, or replayed after a reconnection or a restart): the signed
///    receipt replaces the entry on disk, and only then is it queued for the broker.
/// 3. **gone** — the broker acknowledged it (PUBACK): the entry is removed from disk; nothing publishes it again.
///
/// A final state is matched to what is owed by job id and order id. None is missed: a subscription to the
/// daemon's final states asks for a replay from below the oldest job owed (``subscriptionSince``), and one that
/// arrives between the daemon's answer and the entry being noted is kept aside for it (``recentFinals``).
///
/// A disk that cannot be written (full) delays receipts and loses none: an entry that cannot be saved is kept in
/// memory and tried again every few seconds; a receipt is published only once it is on disk. Payments are never
/// held for it.
///
/// A corpus push lives the same life, its task in the entry (``corpusTask(_:message:)``): owed until the corpus
/// worker has run it (``CorpusWorker``, which a restart starts again on what is owed), then its receipt.
public final class Receipts: Sendable {
    public struct Settings: Sendable {
        public var device: String
        public var keyID: String
        /// The device key's bytes.
        public var key: [UInt8]
        /// How a receipt is published: by default our signed receipt (``Receipt/payload()``); under the Alibaba Cloud
        /// thing model, the platform's event or service reply (``AlinkThing``). Given the receipt, its entry's number
        /// and where the entry's receipt goes when it answers a request.
        public var encode: Encode?

        public typealias Encode = @Sendable (Receipt, UInt64, ReceiptEntry.ReplyAddress?) -> [UInt8]

        public init(device: String, keyID: String, key: [UInt8], encode: Encode? = nil) {
            self.device = device
            self.keyID = keyID
            self.key = key
            self.encode = encode
        }
    }

    private struct Entry {
        var stored: ReceiptEntry
        /// Bumped at every change; `savedVersion` is the one on disk (0: none).
        var version = 1
        var savedVersion = 0
        /// The job's final state, when it came while the entry was being written the first time.
        var pendingFinal: JobInfo?
        /// Being written for the first time (by the MQTT thread): a receipt waits for that write.
        var registering = false
        var queued = false
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var nextSeq: UInt64 = 1
        /// The highest job id noted in this run (a later subscription replays from it).
        var highestJob: UInt64?
        /// The last final states seen (job id → info), for an entry noted just after its job's final state passed.
        var recentFinals: [UInt64: JobInfo] = [:]
        var recentOrder: [UInt64] = []
        /// The repeats' ends seen lately (order → the repeat as it ended), for an entry noted just after.
        var recentRepeats: [String: RepeatInfo] = [:]
        /// The entries owed when the current subscription was asked for (seq → job): the ones its `live` line
        /// must account for.
        var owedAtSubscription: [UInt64: UInt64]?
        /// The signatures of the messages refused lately (and of those whose refusal waits on disk), and of the
        /// corpus pushes noted (their signature, or the platform's job code), so that a redelivery of one makes no
        /// second receipt; `refusedOrder` keeps the oldest first for trimming.
        var refusedMessages: Set<String> = []
        var refusedOrder: [String] = []
        /// Entries not on disk yet (a full disk), and why.
        var unsaved: Set<UInt64> = []
        var diskError: AnnounceError?
        var retryScheduled = false
    }

    /// Told when a corpus task is owed (the corpus worker wakes).
    private let corpusHandler = Mutex<@Sendable () -> Void>({})

    static let recentLimit = 1024

    let settings: Settings
    let store: ReceiptStore
    /// How long an entry that could not be written waits before it is tried again.
    let retrySeconds: Double
    private let outbox: Outbox
    private let logger: Logger
    private let state = Mutex(State())
    /// Held while an entry is written, so that the content written is the latest.
    private let writing = Mutex(())
    /// Where the retries of unsaved entries and the removals of acknowledged ones run, in order, off the MQTT thread.
    private let background = SerialThread(name: "push-receipts")
    /// Told when something the status reports changed (pending receipts, a disk error).
    private let changeHandler = Mutex<@Sendable () -> Void>({})

    /// Loads what the store holds: receipts made and not acknowledged are queued at once; owed entries wait for
    /// their job's final state. A store that cannot be read is logged, and the listener starts all the same:
    /// payments never wait for receipts.
    public init(store: ReceiptStore, settings: Settings, outbox: Outbox, logger: Logger, retrySeconds: Double = 5) {
        self.store = store
        self.retrySeconds = retrySeconds
        self.settings = settings
        self.outbox = outbox
        self.logger = logger
        var entries: [ReceiptEntry] = []
        var damaged: [String] = []
        do throws(AnnounceError) {
            (entries, damaged) = try store.load()
        } catch {
            logger.error(
                "cannot read the pending receipts; starting without them",
                metadata: ["error": "\(error)", "path": "\(store.directory)"])
        }
        for path in damaged {
            logger.error("a pending receipt file cannot be read; left as it is", metadata: ["path": "\(path)"])
        }
        state.withLock { state in
            for stored in entries {
                state.entries[stored.seq] = Entry(
                    stored: stored, version: 1, savedVersion: 1, queued: stored.receipt != nil)
                state.nextSeq = max(state.nextSeq, stored.seq + 1)
                if let message = stored.message { Self.rememberRefusal(message, &state) }
            }
        }
        for stored in entries {
            if let receipt = stored.receipt {
                outbox.enqueueReceipt(stored.seq, payload: Array(receipt.utf8), topic: stored.replyTo?.topic)
            }
        }
        if !entries.isEmpty {
            logger.notice(
                "pending receipts found",
                metadata: [
                    "made": "\(entries.filter { $0.receipt != nil }.count)",
                    "owed": "\(entries.filter { $0.receipt == nil }.count)",
                ])
        }
    }

    /// Sets what is told when something the status reports changes (pending receipts, a disk error).
    public func onChange(_ handler: @escaping @Sendable () -> Void) { changeHandler.withLock { $0 = handler } }

    private func onChange() { changeHandler.withLock { $0 }() }

    // MARK: What the daemon answered (MQTT thread)

    /// What the daemon said about a payment it took (a refusal is ``refused(order:reason:message:)``).
    public enum Reply: Sendable, Equatable {
        case accepted(JobInfo)
        case duplicate(JobInfo)
    }

    /// Notes a payment handed to the daemon; returns once it is on disk (or the disk refused it: it is then kept in
    /// memory and tried again). Call before the payment's message is acknowledged to the broker. With `replyTo`, the
    /// receipt answers that request (an Alibaba Cloud combination broadcast) instead of going to the receipts topic.
    public func handedOver(order: String, reply: Reply, replyTo: ReceiptEntry.ReplyAddress? = nil) {
        let (info, duplicate) =
            switch reply {
            case .accepted(let info): (info, false)
            case .duplicate(let info): (info, true)
            }
        register(
            order: order, job: info.id, duplicate: duplicate,
            receipt: info.state.isFinal ? receipt(for: info, order: order, duplicate: duplicate) : nil,
            replyTo: replyTo)
    }

    /// Notes a correctly signed payment that will never be spoken — refused here (`stale`, `invalid_amount` …) or
    /// by the daemon (`unknown_channel` …) — with a `refused` receipt at once; returns once it is on disk, like
    /// ``handedOver(order:reply:)``. Call before the message is acknowledged to the broker.
    ///
    /// `message` is the refused message's signature. The same message again — the broker redelivering it because
    /// its PUBACK was lost — makes no second receipt: false is returned then. The service resending the payment
    /// is a new message (another `created_at`, another signature) and gets a receipt of its own, as a resend of a
    /// heard payment gets a `duplicate` one. Remembered for the last ``recentLimit`` refusals of this run, and
    /// across a restart for as long as the receipt waits on disk for the broker: a redelivery comes before that
    /// (it is read on the connection before the receipt is even published).
    @discardableResult
    public func refused(order: String, reason: String, message: String) -> Bool {
        let first = state.withLock { state in
            guard !state.refusedMessages.contains(message) else { return false }
            Self.rememberRefusal(message, &state)
            return true
        }
        guard first else { return false }
        let receipt = Receipt(
            device: settings.device, order: order, state: .refused, job: nil, error: reason,
            createdAt: WallClockMs.now, keyID: settings.keyID)
        register(order: order, job: nil, duplicate: false, receipt: receipt, message: message)
        return true
    }

    /// Notes a repeating notice the daemon started (or, `duplicate`, already had): its receipt is made when it ends
    /// (``repeatEnded(_:)``), at once if it has. Returns once on disk, like ``handedOver(order:reply:replyTo:)``.
    public func repeatHandedOver(_ info: RepeatInfo, duplicate: Bool) {
        let ended: RepeatInfo? = info.state.isFinal ? info : state.withLock { $0.recentRepeats[info.order] }
        register(
            order: info.order, job: nil, duplicate: duplicate,
            receipt: ended.flatMap { repeatReceipt($0, duplicate: duplicate) }, kind: .repeatNotice)
    }

    /// A repeating notice ended (the daemon's `repeat` event, or its look after a reconnection).
    public func repeatEnded(_ info: RepeatInfo) {
        guard info.state.isFinal else { return }
        let owed = state.withLock { state -> [(UInt64, Bool)] in
            state.recentRepeats[info.order] = info
            if state.recentRepeats.count > Self.recentLimit { state.recentRepeats = [info.order: info] }
            return state.entries.filter { _, entry in
                entry.stored.kind == .repeatNotice && entry.stored.receipt == nil && entry.stored.order == info.order
            }.map { ($0.key, $0.value.stored.duplicate) }.sorted { $0.0 < $1.0 }
        }
        for (seq, duplicate) in owed {
            if let receipt = repeatReceipt(info, duplicate: duplicate) { setReceipt(seq, receipt) }
        }
    }

    /// The repeats whose receipt is owed (their end not seen yet): asked of the daemon after a reconnection.
    public var owedRepeats: [String] {
        state.withLock { state in
            Array(Set(state.entries.values.filter { $0.stored.kind == .repeatNotice && $0.stored.receipt == nil }
                .map(\.stored.order))).sorted()
        }
    }

    private func repeatReceipt(_ info: RepeatInfo, duplicate: Bool) -> Receipt? {
        Receipt(repeat: info, duplicate: duplicate, device: settings.device, keyID: settings.keyID, createdAt: WallClockMs.now)
    }

    private static func rememberRefusal(_ message: String, _ state: inout State) {
        guard state.refusedMessages.insert(message).inserted else { return }
        state.refusedOrder.append(message)
        if state.refusedOrder.count > recentLimit { state.refusedMessages.remove(state.refusedOrder.removeFirst()) }
    }

    @discardableResult
    private func register(
        order: String, job: UInt64?, duplicate: Bool, receipt: Receipt?, message: String? = nil,
        task: CorpusTask? = nil, replyTo: ReceiptEntry.ReplyAddress? = nil, kind: Receipt.Kind? = nil
    ) -> UInt64 {
        let seq = state.withLock { state -> UInt64 in
            let seq = state.nextSeq
            state.nextSeq += 1
            var entry = Entry(
                stored: ReceiptEntry(
                    seq: seq, order: order, job: job ?? 0, duplicate: duplicate, handedAt: WallClockMs.now,
                    receipt: receipt.map { String(decoding: encode($0, seq, replyTo), as: UTF8.self) },
                    message: message, kind: task == nil ? kind : .corpus, task: task, replyTo: replyTo))
            entry.registering = receipt == nil && task == nil && kind == nil
            if let job { state.highestJob = max(state.highestJob ?? 0, job) }
            if let job, receipt == nil {
                if let final = state.recentFinals[job], final.order == order { entry.pendingFinal = final }
            }
            state.entries[seq] = entry
            return seq
        }
        persist(seq)
        let final = state.withLock { state -> JobInfo? in
            state.entries[seq]?.registering = false
            defer { state.entries[seq]?.pendingFinal = nil }
            return state.entries[seq]?.pendingFinal
        }
        if let final { makeReceipt(seq, final: final) }
        onChange()
        return seq
    }

    // MARK: The daemon's final states (subscription thread)

    /// The `since` to subscribe with: below the oldest job still owed, and at most the highest job noted in this
    /// run (nil: no replay needed). Notes which entries the subscription's `live` line must account for.
    public func subscriptionSince() -> UInt64? {
        state.withLock { state in
            var owed: [UInt64: UInt64] = [:]
            for (seq, entry) in state.entries
            where entry.stored.receipt == nil && entry.pendingFinal == nil && entry.stored.kind == nil {
                owed[seq] = entry.stored.job
            }
            state.owedAtSubscription = owed
            let lowest = owed.values.min().map { $0 - 1 }
            switch (lowest, state.highestJob) {
            case (let lowest?, let highest?): return min(lowest, highest)
            case (let lowest?, nil): return lowest
            case (nil, let highest?): return highest
            case (nil, nil): return nil
            }
        }
    }

    /// A job's final state is on the daemon's disk.
    public func finalState(_ info: JobInfo) {
        guard info.state.isFinal else { return }
        let ready = state.withLock { state -> [UInt64] in
            if state.recentFinals.updateValue(info, forKey: info.id) == nil {
                state.recentOrder.append(info.id)
                if state.recentOrder.count > Self.recentLimit {
                    state.recentFinals[state.recentOrder.removeFirst()] = nil
                }
            }
            var ready: [UInt64] = []
            for (seq, entry) in state.entries
            where entry.stored.receipt == nil && entry.stored.kind == nil && entry.stored.job == info.id
                && entry.stored.order == info.order
            {
                if entry.registering {
                    state.entries[seq]?.pendingFinal = info
                } else {
                    ready.append(seq)
                }
            }
            return ready.sorted()
        }
        for seq in ready { makeReceipt(seq, final: info) }
    }

    /// The subscription's replay is over: every job owed when it was asked for is now final (a receipt was made),
    /// or still unfinished in the daemon (listed in `unfinished`), or unknown to it — its journal was damaged and
    /// set aside, or the id now names another order. Those get an `unknown` receipt.
    public func live(unfinished: [JobInfo]) {
        let waiting = Set(unfinished.map(\.id))
        let lost = state.withLock { state -> [(UInt64, UInt64)] in
            defer { state.owedAtSubscription = nil }
            guard let owed = state.owedAtSubscription else { return [] }
            return owed.filter { seq, job in
                guard let entry = state.entries[seq] else { return false }
                return entry.stored.receipt == nil && entry.pendingFinal == nil && !waiting.contains(job)
            }.map { ($0.key, $0.value) }.sorted { $0.0 < $1.0 }
        }
        for (seq, job) in lost {
            logger.error(
                """
                the daemon does not know a job a receipt is owed for (its journal was replaced?); reporting it \
                unknown
                """,
                metadata: ["job.id": "\(job)", "receipt": "\(seq)"])
            let order = state.withLock { $0.entries[seq]?.stored.order } ?? ""
            let receipt = Receipt(
                device: settings.device, order: order, state: .unknown, job: job, createdAt: WallClockMs.now,
                keyID: settings.keyID)
            setReceipt(seq, receipt)
        }
    }

    // MARK: Receipts

    private var key: HMACKey { HMACKey(settings.key) }

    /// A receipt as it is published: signed (or as ``Settings/encode`` makes it).
    private func encode(_ receipt: Receipt, _ seq: UInt64, _ replyTo: ReceiptEntry.ReplyAddress?) -> [UInt8] {
        if let encode = settings.encode { return encode(receipt, seq, replyTo) }
        return receipt.signed(with: key).payload()
    }

    private func receipt(for info: JobInfo, order: String, duplicate: Bool) -> Receipt? {
        Receipt(
            job: info, order: order, duplicate: duplicate, device: settings.device, keyID: settings.keyID,
            createdAt: WallClockMs.now)
    }

    private func makeReceipt(_ seq: UInt64, final info: JobInfo) {
        let made = state.withLock { state -> (order: String, duplicate: Bool)? in
            guard let entry = state.entries[seq], entry.stored.receipt == nil else { return nil }
            return (entry.stored.order, entry.stored.duplicate)
        }
        guard let made, let receipt = receipt(for: info, order: made.order, duplicate: made.duplicate) else { return }
        setReceipt(seq, receipt)
    }

    private func setReceipt(_ seq: UInt64, _ receipt: Receipt) {
        let replyTo = state.withLock { $0.entries[seq]?.stored.replyTo }
        let payload = String(decoding: encode(receipt, seq, replyTo), as: UTF8.self)
        let changed = state.withLock { state -> Bool in
            guard var entry = state.entries[seq], entry.stored.receipt == nil else { return false }
            entry.stored.receipt = payload
            entry.version += 1
            state.entries[seq] = entry
            return true
        }
        guard changed else { return }
        logger.debug(
            "receipt made",
            metadata: ["order.id": "\(receipt.order)", "state": "\(receipt.state.rawValue)", "receipt": "\(seq)"])
        persist(seq)
    }

    /// Writes the entry as it is now; queues its receipt once that is on disk. On failure, keeps it for a retry.
    private func persist(_ seq: UInt64) {
        writing.withLock { _ in
            guard
                let (stored, version) = state.withLock({ state in state.entries[seq].map { ($0.stored, $0.version) } })
            else { return }
            do throws(AnnounceError) {
                try store.save(stored)
            } catch {
                let first = state.withLock { state -> Bool in
                    state.unsaved.insert(seq)
                    defer { state.diskError = error }
                    return state.diskError == nil
                }
                if first {
                    logger.error(
                        """
                        cannot write a pending receipt; kept in memory and tried again (receipts wait, payments \
                        do not)
                        """,
                        metadata: ["error": "\(error)", "receipt": "\(seq)"])
                }
                scheduleRetry()
                return
            }
            let queue = state.withLock { state -> (bytes: [UInt8], topic: String?)? in
                guard var entry = state.entries[seq] else { return nil }
                entry.savedVersion = max(entry.savedVersion, version)
                var payload: (bytes: [UInt8], topic: String?)?
                if entry.savedVersion == entry.version, !entry.queued, let receipt = entry.stored.receipt {
                    entry.queued = true
                    payload = (Array(receipt.utf8), entry.stored.replyTo?.topic)
                }
                if entry.savedVersion == entry.version { state.unsaved.remove(seq) }
                state.entries[seq] = entry
                return payload
            }
            if let queue { outbox.enqueueReceipt(seq, payload: queue.bytes, topic: queue.topic) }
        }
    }

    private func scheduleRetry() {
        let schedule = state.withLock { state -> Bool in
            guard !state.retryScheduled else { return false }
            state.retryScheduled = true
            return true
        }
        guard schedule else { return }
        onChange()
        background.after(seconds: retrySeconds) { self.retryUnsaved() }
    }

    private func retryUnsaved() {
        let seqs = state.withLock { state -> [UInt64] in
            state.retryScheduled = false
            return state.unsaved.sorted()
        }
        for seq in seqs { persist(seq) }
        let recovered = state.withLock { state -> AnnounceError? in
            guard state.unsaved.isEmpty, let error = state.diskError else { return nil }
            state.diskError = nil
            return error
        }
        if recovered != nil {
            logger.notice("pending receipts are written again", metadata: ["receipts": "\(seqs.count)"])
            onChange()
        }
    }

    // MARK: Corpus pushes (the MQTT thread notes them, the corpus worker runs them)

    /// Sets what is told when a corpus task is owed (the corpus worker wakes).
    public func onCorpusTask(_ handler: @escaping @Sendable () -> Void) { corpusHandler.withLock { $0 = handler } }

    /// Whether this message was noted before (a corpus push, or a refusal): `message` is its signature, or the
    /// platform's job code. Remembered as ``refused(order:reason:message:)`` remembers.
    public func knows(message: String) -> Bool { state.withLock { $0.refusedMessages.contains(message) } }

    /// Whether a corpus task with this id is owed now (noted, not run yet).
    public func isOwed(task: String) -> Bool {
        state.withLock { state in
            state.entries.values.contains { $0.stored.task?.task == task && $0.stored.receipt == nil }
        }
    }

    /// Notes a corpus push to run, with its task, on disk before its message is acknowledged to the broker (like
    /// ``handedOver(order:reply:)``), so that a restart runs it; wakes the corpus worker. Nil, and nothing noted,
    /// for the same message again (`message`: see ``knows(message:)``).
    @discardableResult
    public func corpusTask(_ task: CorpusTask, message: String) -> UInt64? {
        let first = state.withLock { state -> Bool in
            guard !state.refusedMessages.contains(message) else { return false }
            Self.rememberRefusal(message, &state)
            return true
        }
        guard first else { return nil }
        let seq = register(order: task.task, job: nil, duplicate: false, receipt: nil, message: message, task: task)
        corpusHandler.withLock { $0 }()
        return seq
    }

    /// A corpus push answered at once (refused, a duplicate of a task done): its receipt, on disk before the
    /// message is acknowledged. False, and nothing made, for the same message again.
    @discardableResult
    public func corpusReceipt(_ receipt: Receipt, message: String) -> Bool {
        let first = state.withLock { state -> Bool in
            guard !state.refusedMessages.contains(message) else { return false }
            Self.rememberRefusal(message, &state)
            return true
        }
        guard first else { return false }
        register(order: receipt.order, job: nil, duplicate: false, receipt: receipt, message: message)
        return true
    }

    /// The corpus tasks owed, oldest first, with the message each came in (see ``knows(message:)``).
    public func owedCorpusTasks() -> [(seq: UInt64, task: CorpusTask, message: String?)] {
        state.withLock { state in
            state.entries.values.compactMap { entry in
                guard entry.stored.receipt == nil, let task = entry.stored.task else { return nil }
                return (entry.stored.seq, task, entry.stored.message)
            }.sorted { $0.seq < $1.seq }
        }
    }

    /// The corpus worker has run task `seq`: its receipt replaces the entry, on disk, then goes to the broker. Nil:
    /// there is nothing to publish for it (the platform's deletes are answered at once) — the entry goes.
    public func corpusDone(_ seq: UInt64, receipt: Receipt?) {
        guard let receipt else {
            do throws(AnnounceError) {
                try store.remove(seq)
            } catch {
                logger.error("cannot remove a corpus task done", metadata: ["receipt": "\(seq)", "error": "\(error)"])
            }
            state.withLock { _ = $0.entries.removeValue(forKey: seq) }
            onChange()
            return
        }
        setReceipt(seq, receipt)
        onChange()
    }

    /// A receipt of this terminal, for a corpus push (made with this device's id and key).
    public func corpusReceiptFor(
        task: String, state: Receipt.State, original: Receipt.State? = nil, error: String? = nil, clips: Int?
    ) -> Receipt {
        Receipt(
            device: settings.device, order: task, state: state, original: original, job: nil, error: error,
            createdAt: WallClockMs.now, keyID: settings.keyID, kind: .corpus, clips: clips)
    }

    // MARK: The broker acknowledged

    /// The broker acknowledged receipt `seq`: its entry goes (off the MQTT thread).
    public func acknowledged(_ seq: UInt64) {
        background.submit {
            do throws(AnnounceError) {
                try self.store.remove(seq)
            } catch {
                // Still on disk: after a restart it would be published again (the service de-duplicates).
                self.logger.error(
                    "cannot remove an acknowledged receipt", metadata: ["receipt": "\(seq)", "error": "\(error)"])
            }
            self.state.withLock { _ = $0.entries.removeValue(forKey: seq) }
            self.onChange()
        }
    }

    // MARK: For the status

    public struct Summary: Sendable, Equatable {
        /// Entries not acknowledged yet: owed, or receipts waiting for the broker.
        public var pending: Int
        /// Entries not on disk (the disk cannot be written).
        public var unsaved: Int
        public var error: String?
    }

    public var summary: Summary {
        state.withLock { state in
            Summary(pending: state.entries.count, unsaved: state.unsaved.count, error: state.diskError?.description)
        }
    }
}
