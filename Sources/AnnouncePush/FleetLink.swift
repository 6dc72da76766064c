import AnnounceCore
import Logging

/// What the terminal tells the fleet through the broker (docs/fleet.md): its status (retained, with a last will)
/// and a signed receipt for every signed payment, handed to the daemon or refused. Wires the parts together: the
/// daemon's event stream feeds the receipts and the status; both go out through the outbox, which the MQTT thread
/// empties.
///
/// Threads: the event stream has its own (it blocks reading the daemon's socket and writes receipts to disk); the
/// status has its own (it asks the daemon for `status`), as have the corpus pushes (downloads) and the receipts'
/// retries and removals (the disk); the MQTT thread only notes payments handed over (one small durable write,
/// before the payment's PUBACK) and publishes what the outbox holds. Nothing here runs on the path of a payment to
/// the speaker: the daemon has accepted a payment before anything here hears of it.
public final class FleetLink: Sendable {
    public let outbox: Outbox
    public let receipts: Receipts?
    public let reporter: StatusReporter?
    public let events: DaemonEvents?
    /// The pushed clips and the worker that installs them (nil: `corpus.enabled = false`).
    public let corpus: CorpusStore?
    public let corpusWorker: CorpusWorker?
    /// The listener's own account (instance, identity, clock, refusals), in the status and the last will.
    public let report: ListenerReport
    let configuration: PushConfiguration

    public init(
        configuration: PushConfiguration, daemon: DaemonLink, report: ListenerReport, logger: Logger
    ) throws(AnnounceError) {
        self.configuration = configuration
        self.report = report
        outbox = Outbox(
            statusTopic: configuration.statusTopic, receiptTopic: configuration.receiptTopic, logger: logger)
        let receipts = try Self.makeReceipts(configuration, outbox: outbox, logger: logger)
        self.receipts = receipts

        let reporter: StatusReporter? =
            configuration.statusEnabled
            ? StatusReporter(
                device: configuration.device, refreshSeconds: configuration.statusRefreshSeconds, outbox: outbox,
                fetch: { daemon.status() },
                receipts: { receipts.map { DeviceStatus.Receipts(summary: $0.summary) } },
                listener: { report.facts })
            : nil
        self.reporter = reporter
        if configuration.corpusEnabled, let receipts {
            let store = CorpusStore(
                directory: configuration.corpusDirectory,
                ledger: Path.join(configuration.stateDirectory, "corpus-tasks.json"))
            corpus = store
            corpusWorker = CorpusWorker(
                store: store, rules: configuration.corpusRules, receipts: receipts, daemon: daemon, logger: logger,
                receiptForDeletes: configuration.alibaba == nil,
                changed: {
                    report.corpusChanged()
                    reporter?.changed()
                })
        } else {
            corpus = nil
            corpusWorker = nil
        }
        if receipts != nil || reporter != nil {
            var handlers = DaemonEvents.Handlers(
                since: { receipts?.subscriptionSince() },
                final: { info in
                    receipts?.finalState(info)
                    reporter?.changed()
                },
                live: { unfinished in
                    receipts?.live(unfinished: unfinished)
                    // A repeat that ended while the stream was down (or the listener away) has no event coming:
                    // its end is asked of the daemon.
                    for order in receipts?.owedRepeats ?? [] {
                        if let info = daemon.repeatInfo(order), info.state.isFinal { receipts?.repeatEnded(info) }
                    }
                    reporter?.changed()
                },
                statusChanged: { reporter?.changed() },
                ended: { reporter?.changed() })
            handlers.repeatEnded = { info in
                receipts?.repeatEnded(info)
                reporter?.changed()
            }
            events = DaemonEvents(socketPath: configuration.socketPath, logger: logger, handlers: handlers)
        } else {
            events = nil
        }
        receipts?.onChange { reporter?.changed() }
    }

    private static func makeReceipts(
        _ configuration: PushConfiguration, outbox: Outbox, logger: Logger
    ) throws(AnnounceError) -> Receipts? {
        guard configuration.receiptsEnabled else { return nil }
        let store = ReceiptStore(directory: Path.join(configuration.stateDirectory, "receipts"))
        if configuration.alibaba != nil {
            // The platform's event or service reply, not a signed receipt: its own connection is what it trusts.
            let settings = Receipts.Settings(
                device: configuration.device, keyID: "alibaba", key: [],
                encode: { receipt, number, replyTo in
                    guard let replyTo else { return AlinkThing.speechUpdateEvent(receipt, number: number) }
                    return AlinkThing.broadcastReply(receipt, to: replyTo)
                })
            return Receipts(store: store, settings: settings, outbox: outbox, logger: logger)
        }
        guard let keyID = configuration.effectiveReceiptKeyID, let key = configuration.keyring.bytes(keyID) else {
            throw AnnounceError(.badRequest, "no key to sign receipts with ([keys], receipts.kid)")
        }
        return Receipts(
            store: store, settings: Receipts.Settings(device: configuration.device, keyID: keyID, key: key),
            outbox: outbox, logger: logger)
    }

    public func start() {
        events?.start()
        reporter?.start()
        corpusWorker?.start()
    }

    public func stop() {
        events?.stop()
        reporter?.stop()
        corpusWorker?.stop()
    }

    /// The payload of the status this terminal leaves when its connection dies (the MQTT last will), or publishes
    /// itself when it stops cleanly.
    func offlineStatus(reason: String, atMs: Int64? = nil) -> [UInt8] {
        var status = DeviceStatus.offline(device: configuration.device, reason: reason, atMs: atMs)
        status.add(report.facts, brief: true)
        return status.payload()
    }
}

extension DeviceStatus.Receipts {
    init(summary: Receipts.Summary) {
        self.init(
            pending: summary.pending, unsaved: summary.unsaved == 0 ? nil : summary.unsaved, error: summary.error)
    }
}
