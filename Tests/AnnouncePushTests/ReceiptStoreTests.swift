import AnnounceCore
import AnnounceCrypto
import AnnounceTestSupport
import Foundation
import Logging
import Testing

@testable import AnnouncePush

/// The pending receipts on disk, the matching of the daemon's final states with what is owed, and the outbox's one
/// lane to the broker — without a broker or a daemon.
struct ReceiptStoreTests {
    static func folder() throws -> String { try Paths.temporaryDirectory("receipts") }

    static let logger = Logger(label: "test")

    // MARK: The store

    @Test func entriesAreWrittenReplacedAndRemoved() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = ReceiptStore(directory: directory)
        let owed = ReceiptEntry(seq: 2, order: "A", job: 7, duplicate: false, handedAt: 100)
        try store.save(owed)
        try store.save(ReceiptEntry(seq: 1, order: "B", job: 6, duplicate: true, handedAt: 90, receipt: "{}"))
        #expect(try store.load().entries.map(\.seq) == [1, 2])
        var made = owed
        made.receipt = "{\"state\":\"heard\"}"
        try store.save(made)
        #expect(try store.load().entries.last == made)
        try store.remove(1)
        try store.remove(1)  // already gone: fine
        #expect(try store.load().entries == [made])
        // Nothing but the entries themselves in the folder: the temporary files were renamed over them.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == ["0000000000000002.json"])
    }

    /// A write that never finished (its temporary file) is cleaned away; a file that cannot be read is reported,
    /// not taken for an entry.
    @Test func leftoversAndDamagedFiles() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "{\"seq\":3,".write(toFile: "\(directory)/0000000000000003.json.tmp", atomically: false, encoding: .utf8)
        try "garbage".write(toFile: "\(directory)/0000000000000004.json", atomically: false, encoding: .utf8)
        let store = ReceiptStore(directory: directory)
        let loaded = try store.load()
        #expect(loaded.entries.isEmpty)
        #expect(loaded.damaged == ["\(directory)/0000000000000004.json"])
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/0000000000000003.json.tmp"))
    }

    /// A full file system: the write fails and leaves nothing half-written behind.
    @Test func aFullDiskFailsCleanly() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", directory]).status == 0)
        defer { _ = directory.withCString { umount2($0, Int32(MNT_DETACH)) } }
        let store = ReceiptStore(directory: directory)
        _ = try await run("/bin/dd", ["if=/dev/zero", "of=\(directory)/filler", "bs=4k", "count=100"])
        let big = ReceiptEntry(
            seq: 1, order: "A", job: 1, duplicate: false, handedAt: 1, receipt: String(repeating: "x", count: 8192))
        #expect(throws: AnnounceError.self) { try store.save(big) }
        #expect(try store.load().entries.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["filler"])
        try FileManager.default.removeItem(atPath: "\(directory)/filler")
        try store.save(big)
        #expect(try store.load().entries == [big])
    }

    // MARK: Matching final states with what is owed

    static let settings = Receipts.Settings(
        device: "T1", keyID: "k1", key: PushVerifierBytes.hex(ReceiptTests.keyHex))

    static func engine(_ directory: String, retrySeconds: Double = 5) throws -> (Receipts, Outbox) {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: logger)
        let receipts = Receipts(
            store: ReceiptStore(directory: directory), settings: settings, outbox: outbox, logger: logger,
            retrySeconds: retrySeconds)
        return (receipts, outbox)
    }

    static func job(_ id: UInt64, _ state: JobState, order: String) -> JobInfo {
        var info = JobInfo(id: id, state: state, order: order)
        info.acceptedAt = WallClock.iso8601(ms: 1_000)
        if state.isFinal { info.finishedAt = WallClock.iso8601(ms: 2_000) }
        return info
    }

    /// The receipts the outbox would publish, in order (acknowledging each).
    static func drain(_ outbox: Outbox) -> [Receipt] {
        var receipts: [Receipt] = []
        var mid: Int32 = 1
        while let message = outbox.next() {
            outbox.sent(message.item, mid: mid)
            outbox.acknowledged(mid: mid)
            mid += 1
            if let receipt = try? Receipt(payload: message.payload) { receipts.append(receipt) }
        }
        return receipts
    }

    @Test func anOwedReceiptIsMadeWhenItsJobEnds() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine(directory)
        receipts.handedOver(order: "P-1", reply: .accepted(Self.job(5, .queued, order: "P-1")))
        #expect(outbox.next() == nil)
        #expect(try receipts.store.load().entries.map(\.order) == ["P-1"])
        // Another job's end, or this job's id with another order (a journal that started over), is not it.
        receipts.finalState(Self.job(4, .spoken, order: "P-0"))
        receipts.finalState(Self.job(5, .spoken, order: "OTHER"))
        #expect(outbox.next() == nil)
        receipts.finalState(Self.job(5, .spoken, order: "P-1"))
        let published = Self.drain(outbox)
        #expect(published.map(\.state) == [.heard] && published.first?.order == "P-1")
        #expect(published.first?.isValid(with: ReceiptTests.key) == true)
        #expect(published.first?.heardAt == 2_000 && published.first?.acceptedAt == 1_000)
        // The same final state again (a replay after a reconnection) makes no second receipt.
        receipts.finalState(Self.job(5, .spoken, order: "P-1"))
        #expect(outbox.next() == nil)
    }

    /// The final state can pass before the entry is noted (the daemon's answer and its end crossing): it is kept
    /// for it.
    @Test func aFinalStateThatCameFirstIsNotMissed() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine(directory)
        receipts.finalState(Self.job(8, .expired, order: "P-8"))
        receipts.handedOver(order: "P-8", reply: .accepted(Self.job(8, .queued, order: "P-8")))
        #expect(Self.drain(outbox).map(\.state) == [.expired])
    }

    @Test func duplicatesAndRefusalsGetTheirReceiptAtOnce() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine(directory)
        receipts.handedOver(order: "D-1", reply: .duplicate(Self.job(3, .spoken, order: "D-1")))
        #expect(receipts.refused(order: "R-1", reason: "unknown_channel", message: "sig-r1"))
        // A duplicate of a job not finished yet waits for its end.
        receipts.handedOver(order: "D-2", reply: .duplicate(Self.job(4, .playing, order: "D-2")))
        var published = Self.drain(outbox)
        #expect(published.map(\.state) == [.duplicate, .refused])
        #expect(published.first?.original == .heard && published.last?.error == "unknown_channel")
        #expect(published.last?.job == nil && published.last?.isValid(with: ReceiptTests.key) == true)
        receipts.finalState(Self.job(4, .cancelled, order: "D-2"))
        published = Self.drain(outbox)
        #expect(published.map(\.state) == [.duplicate] && published.first?.original == .cancelled)
    }

    /// A refused message gets one receipt: the same message again (the broker redelivering it, its PUBACK lost)
    /// gets none, within the run and — while the first receipt waits on disk for the broker — after a restart; the
    /// service resending the payment (a new message, another signature) gets one of its own.
    @Test func aRefusedMessageGetsOneReceiptHoweverOftenItComes() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let (receipts, outbox) = try Self.engine(directory)
            #expect(receipts.refused(order: "S-1", reason: "stale", message: "sig-1"))
            #expect(!receipts.refused(order: "S-1", reason: "stale", message: "sig-1"))
            let made = try #require(outbox.next())
            #expect((try Receipt(payload: made.payload)).state == .refused)
            #expect((try Receipt(payload: made.payload)).error == "stale")
            outbox.sent(made.item, mid: 1)
            if case .receipt(let seq) = outbox.acknowledged(mid: 1) { receipts.acknowledged(seq) }
            try await waitUntil { (try? receipts.store.load().entries.isEmpty) == true }
            #expect(outbox.next() == nil)
            #expect(receipts.refused(order: "S-2", reason: "invalid_amount", message: "sig-2"))
            #expect(outbox.pendingReceipts == 1)  // not acknowledged: the process dies
        }
        let (receipts, outbox) = try Self.engine(directory)
        #expect(!receipts.refused(order: "S-2", reason: "invalid_amount", message: "sig-2"))
        #expect(receipts.refused(order: "S-2", reason: "invalid_amount", message: "sig-2-resent"))
        #expect(Self.drain(outbox).map(\.order) == ["S-2", "S-2"])
        #expect(try receipts.store.load().entries.compactMap(\.message).sorted() == ["sig-2", "sig-2-resent"])
    }

    /// What to replay from: below the oldest job owed, else the highest job noted; nothing before anything.
    @Test func theSubscriptionReplaysFromBelowWhatIsOwed() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine(directory)
        #expect(receipts.subscriptionSince() == nil)
        receipts.handedOver(order: "A", reply: .accepted(Self.job(10, .queued, order: "A")))
        receipts.handedOver(order: "B", reply: .accepted(Self.job(12, .queued, order: "B")))
        #expect(receipts.subscriptionSince() == 9)
        receipts.finalState(Self.job(10, .spoken, order: "A"))
        #expect(receipts.subscriptionSince() == 11)
        receipts.finalState(Self.job(12, .spoken, order: "B"))
        #expect(receipts.subscriptionSince() == 12)
        _ = Self.drain(outbox)
    }

    /// A job owed that the daemon no longer knows (not replayed, not unfinished) gets an `unknown` receipt; one it
    /// lists as unfinished keeps waiting.
    @Test func aJobTheDaemonDoesNotKnowIsReportedUnknown() throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine(directory)
        receipts.handedOver(order: "GONE", reply: .accepted(Self.job(30, .queued, order: "GONE")))
        receipts.handedOver(order: "WAITS", reply: .accepted(Self.job(31, .queued, order: "WAITS")))
        _ = receipts.subscriptionSince()
        receipts.live(unfinished: [Self.job(31, .queued, order: "WAITS")])
        let published = Self.drain(outbox)
        #expect(published.map(\.state) == [.unknown] && published.first?.order == "GONE")
        let entries = try receipts.store.load().entries
        #expect(entries.map(\.order) == ["GONE", "WAITS"])
        #expect(entries.map { $0.receipt != nil } == [true, false])
    }

    /// After a restart, receipts made and not acknowledged are published again (the same bytes), and owed ones wait
    /// for their job; an acknowledged receipt is gone from the disk for good.
    @Test func aRestartKeepsWhatWasNotAcknowledged() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var first: [UInt8] = []
        do {
            let (receipts, outbox) = try Self.engine(directory)
            receipts.handedOver(order: "MADE", reply: .accepted(Self.job(1, .queued, order: "MADE")))
            receipts.handedOver(order: "OWED", reply: .accepted(Self.job(2, .queued, order: "OWED")))
            receipts.handedOver(order: "ACKED", reply: .accepted(Self.job(3, .queued, order: "ACKED")))
            receipts.finalState(Self.job(3, .spoken, order: "ACKED"))
            receipts.finalState(Self.job(1, .spoken, order: "MADE"))
            let acked = try #require(outbox.next())
            outbox.sent(acked.item, mid: 1)
            if case .receipt(let seq) = outbox.acknowledged(mid: 1) { receipts.acknowledged(seq) }
            let made = try #require(outbox.next())
            first = made.payload
            outbox.sent(made.item, mid: 2)  // in flight, never acknowledged: the process dies
            try await waitUntil { (try? receipts.store.load().entries.count) == 2 }
        }
        let (receipts, outbox) = try Self.engine(directory)
        let again = try #require(outbox.next())
        #expect(again.payload == first)
        #expect(receipts.subscriptionSince() == 1)
        outbox.sent(again.item, mid: 1)
        outbox.acknowledged(mid: 1)
        receipts.finalState(Self.job(2, .failed, order: "OWED"))
        #expect(Self.drain(outbox).map(\.order) == ["OWED"])
    }

    /// A receipt that answers a request (an Alibaba Cloud combination broadcast) goes to that request's reply topic,
    /// encoded with its address, once its job ends; owed across a restart, it still goes there.
    @Test func aReceiptThatAnswersARequestGoesToItsReplyTopic() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let settings = Receipts.Settings(device: "T1", keyID: "alibaba", key: []) { receipt, _, replyTo in
            Array("\(receipt.order) \(receipt.state.rawValue) \(replyTo?.id ?? "-")".utf8)
        }
        func engine() -> (Receipts, Outbox) {
            let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Self.logger)
            return (Receipts(store: ReceiptStore(directory: directory), settings: settings, outbox: outbox, logger: Self.logger), outbox)
        }
        let address = ReceiptEntry.ReplyAddress(topic: "t/SpeechBroadcast_reply", id: "102")
        do {
            let (receipts, outbox) = engine()
            receipts.handedOver(order: "S-1", reply: .accepted(Self.job(4, .queued, order: "S-1")), replyTo: address)
            receipts.handedOver(order: "P-1", reply: .accepted(Self.job(5, .queued, order: "P-1")))
            #expect(outbox.next() == nil)
        }
        let (receipts, outbox) = engine()
        #expect(try receipts.store.load().entries.map(\.replyTo) == [address, nil])
        receipts.finalState(Self.job(5, .spoken, order: "P-1"))
        receipts.finalState(Self.job(4, .spoken, order: "S-1"))
        var published: [(String, String)] = []
        var mid: Int32 = 1
        while let message = outbox.next() {
            published.append((message.topic, String(decoding: message.payload, as: UTF8.self)))
            outbox.sent(message.item, mid: mid)
            if case .receipt(let seq) = outbox.acknowledged(mid: mid) { receipts.acknowledged(seq) }
            mid += 1
        }
        #expect(published.map(\.0) == ["t/SpeechBroadcast_reply", "r"])
        #expect(published.map(\.1) == ["S-1 heard 102", "P-1 heard -"])
        try await waitUntil { (try? receipts.store.load().entries.isEmpty) == true }
    }

    /// A repeating notice's receipt comes when it ends, signed with how it ended and how often it was heard; owed across
    /// a restart; one that had ended before it was noted (its event came first) gets it at once; a start sent again is
    /// a `duplicate` with the end as `original`.
    @Test func aRepeatsReceiptComesWhenItEndsWithHowOftenItWasHeard() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func info(_ order: String, _ state: RepeatState, heard: Int = 0) -> RepeatInfo {
            RepeatInfo(order: order, state: state, every: 30, times: 10, played: heard, heard: heard)
        }
        do {
            let (receipts, outbox) = try Self.engine(directory)
            receipts.repeatHandedOver(info("T-1", .repeating), duplicate: false)
            #expect(outbox.next() == nil && receipts.owedRepeats == ["T-1"])
        }
        let (receipts, outbox) = try Self.engine(directory)
        #expect(receipts.owedRepeats == ["T-1"], "owed across a restart")
        receipts.repeatEnded(info("T-1", .acknowledged, heard: 3))
        receipts.repeatEnded(info("T-2", .done, heard: 2))
        receipts.repeatHandedOver(info("T-2", .repeating), duplicate: false)
        receipts.repeatHandedOver(info("T-1", .acknowledged, heard: 3), duplicate: true)
        let published = Self.drain(outbox)
        #expect(published.map(\.order) == ["T-1", "T-2", "T-1"])
        #expect(published.map(\.state) == [.acknowledged, .done, .duplicate])
        #expect(published.map(\.heard) == [3, 2, 3] && published[2].original == .acknowledged)
        #expect(published.allSatisfy { $0.kind == .repeatNotice && $0.isValid(with: HMACKey(Self.settings.key)) })
        #expect(published[0].canonical.contains("\nkind=repeat\n") && published[0].canonical.contains("\nheard=3\n"))
        #expect(receipts.owedRepeats.isEmpty)
    }

    /// An entry the disk refuses is kept in memory; its receipt is published only once it is written.
    @Test func anEntryTheDiskRefusesWaitsForTheDisk() async throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (receipts, outbox) = try Self.engine("\(directory)/r", retrySeconds: 0.05)
        try FileManager.default.removeItem(atPath: "\(directory)/r")
        try "not a folder".write(toFile: "\(directory)/r", atomically: false, encoding: .utf8)
        receipts.handedOver(order: "W", reply: .accepted(Self.job(1, .queued, order: "W")))
        receipts.finalState(Self.job(1, .spoken, order: "W"))
        #expect(outbox.next() == nil)
        #expect(receipts.summary.unsaved == 1 && receipts.summary.error != nil)
        try FileManager.default.removeItem(atPath: "\(directory)/r")
        try FileManager.default.createDirectory(atPath: "\(directory)/r", withIntermediateDirectories: false)
        try await waitUntil { outbox.pendingReceipts == 1 }
        #expect(Self.drain(outbox).map(\.order) == ["W"])
        #expect(receipts.summary.unsaved == 0)
    }

    // MARK: The outbox

    @Test func oneMessageInFlightStatusFirstThenReceiptsInOrder() throws {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Self.logger)
        outbox.enqueueReceipt(7, payload: [7])
        outbox.enqueueReceipt(3, payload: [3])
        outbox.setStatus([1], minimal: [0])
        let status = try #require(outbox.next())
        #expect(status.item == .status && status.retain && status.topic == "s")
        outbox.sent(status.item, mid: 10)
        #expect(outbox.next() == nil, "a second message while one is in flight")
        #expect(outbox.acknowledged(mid: 99) == nil)
        #expect(outbox.acknowledged(mid: 10) == .status)
        let receipt = try #require(outbox.next())
        #expect(receipt.item == .receipt(3) && !receipt.retain && receipt.topic == "r")
        // The connection ends (this listener's doing): sent again on the next one.
        outbox.sent(receipt.item, mid: 11)
        outbox.connectionEnded(byBroker: false)
        #expect(outbox.next()?.item == .receipt(3))
    }

    /// A message the broker answers by closing the connection, three times in a row: set aside, the rest goes on.
    /// The status falls back to its minimal form first.
    @Test func whatTheBrokerKeepsRefusingIsSetAside() throws {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Self.logger)
        outbox.enqueueReceipt(1, payload: [1])
        outbox.enqueueReceipt(2, payload: [2])
        for _ in 0..<Outbox.strikeLimit {
            let message = try #require(outbox.next())
            #expect(message.item == .receipt(1))
            outbox.sent(message.item, mid: 1)
            outbox.connectionEnded(byBroker: true)
        }
        #expect(outbox.next()?.item == .receipt(2))

        outbox.setStatus([9, 9], minimal: [9])
        for _ in 0..<Outbox.strikeLimit {
            let message = try #require(outbox.next())
            #expect(message.payload == [9, 9])
            outbox.sent(message.item, mid: 2)
            outbox.connectionEnded(byBroker: true)
            outbox.setStatus([9, 9], minimal: [9])
        }
        #expect(outbox.statusIsMinimal && !outbox.statusSetAside)
        for _ in 0..<Outbox.strikeLimit {
            let message = try #require(outbox.next())
            #expect(message.payload == [9])
            outbox.sent(message.item, mid: 3)
            outbox.connectionEnded(byBroker: true)
            outbox.setStatus([9, 9], minimal: [9])
        }
        #expect(outbox.statusSetAside)
        #expect(outbox.next()?.item == .receipt(2))
    }

    /// Closures that are not the broker's answer to a publish (far apart, or by this listener) reset the count.
    @Test func otherClosuresDoNotCount() throws {
        let outbox = Outbox(statusTopic: "s", receiptTopic: "r", logger: Self.logger)
        outbox.enqueueReceipt(1, payload: [1])
        for round in 0..<(Outbox.strikeLimit * 2) {
            let message = try #require(outbox.next())
            outbox.sent(message.item, mid: Int32(round))
            outbox.connectionEnded(byBroker: round % 2 == 0)
        }
        #expect(outbox.next()?.item == .receipt(1))
    }
}

/// Waits (polling briefly) until `condition` holds, or throws after 10 s.
func waitUntil(_ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw HarnessError("the condition never held") }
        try await Task.sleep(for: .milliseconds(10))
    }
}
