import AnnounceCore
import AnnounceMQTT
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// The push listener: keeps an MQTT session with the broker, verifies every payment message and hands it to the
/// daemon, acknowledging it only once the daemon has answered for it.
///
/// Delivery, end to end (docs/push.md):
/// - persistent session (clean_session false) + QoS 1: the broker keeps every message until this client
///   acknowledges it, across disconnections of either side;
/// - a message is acknowledged (PUBACK) only after `onMessage` returns, see ``MQTTClient``; it returns after the
///   daemon accepted the payment, recognised it as a duplicate, or refused it for good — or after the message was
///   refused here (forged, stale, malformed: it can never become valid);
/// - if the daemon cannot take it, the message is retried for `holdSeconds`; then the connection is dropped
///   without the PUBACK, the listener waits until the daemon answers again, reconnects, and the broker redelivers;
/// - a message handled but whose PUBACK was lost is redelivered and the daemon answers `duplicate` (dedup by order
///   id), so it is spoken once.
///
/// `run()` blocks its thread (libmosquitto is driven from it); `stop()` may be called from any thread.
public final class PushListener: Sendable {
    public let configuration: PushConfiguration
    let logger: Logger
    let daemon: DaemonLink
    let metrics: PushMetrics
    private let stopping = Mutex(false)

    public init(configuration: PushConfiguration, logger: Logger, metrics: PushMetrics = PushMetrics()) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        daemon = DaemonLink(socketPath: configuration.socketPath, timeoutSeconds: configuration.daemonTimeoutSeconds)
    }

    /// Asks `run()` to finish: a message being held stays unacknowledged, the session is closed with DISCONNECT.
    public func stop() { stopping.withLock { $0 = true } }

    var isStopping: Bool { stopping.withLock { $0 } }

    /// Runs until ``stop()``. Throws only when the MQTT client or the receipt store cannot be set up (a
    /// configuration problem).
    public func run() throws(AnnounceError) {
        // A write to a connection the broker (or this listener) closed must fail, not kill the process.
        signal(SIGPIPE, SIG_IGN)
        let fleet = try FleetLink(configuration: configuration, daemon: daemon, logger: logger)
        let session: Session
        do {
            session = try Session(listener: self, fleet: fleet)
        } catch {
            throw AnnounceError(.badRequest, "cannot set up the MQTT client", cause: error.description)
        }
        fleet.start()
        session.run()
        fleet.stop()
    }

    // MARK: - Session

    /// The state of one run, touched only by the thread in `run()` (libmosquitto's callbacks run there too).
    private final class Session {
        enum State { case idle, connecting, connected, abandoned, closed }
        enum DropReason { case network, daemonUnavailable }

        let listener: PushListener
        let configuration: PushConfiguration
        let logger: Logger
        let verifier: PushVerifier
        let fleet: FleetLink
        /// A new client for every connection: nothing libmosquitto held for the last one (a message in flight)
        /// is sent again behind the outbox's back.
        var client: MQTTClient
        var connections = 0
        /// The broker refused a connection carrying the last will (an ACL on the status topic): connect without.
        var willRefused = false
        /// The clean stop's offline status, until the broker acknowledges it.
        var offlineMid: Int32?
        var state = State.idle
        var dropReason = DropReason.network
        var attemptStarted = ContinuousClock.now
        var backoff: Backoff
        var prompter: StatusPrompter
        let started = ContinuousClock.now

        init(listener: PushListener, fleet: FleetLink) throws(MosquittoError) {
            self.listener = listener
            self.fleet = fleet
            configuration = listener.configuration
            logger = listener.logger
            verifier = configuration.verifier
            backoff = Backoff(configuration.reconnect)
            prompter = StatusPrompter(policy: configuration.prompts, now: 0)
            client = try Self.makeClient(configuration)
            installCallbacks()
        }

        /// A client with this configuration's session, credentials and TLS (callbacks not yet set).
        static func makeClient(_ configuration: PushConfiguration) throws(MosquittoError) -> MQTTClient {
            let client = try MQTTClient(clientID: configuration.clientID, cleanSession: configuration.cleanSession)
            if let username = configuration.username {
                try client.setCredentials(username: username, password: configuration.password)
            }
            if configuration.broker.tls { try client.setTLS(configuration.tls) }
            return client
        }

        func installCallbacks() {
            client.onConnect = { [unowned self] code, sessionPresent in
                connected(code: code, sessionPresent: sessionPresent)
            }
            client.onDisconnect = { [unowned self] code in disconnected(code: code) }
            client.onSubscribe = { [unowned self] mid, granted in subscribed(mid: mid, granted: granted) }
            client.onMessage = { [unowned self] message in received(message) }
            client.onPublish = { [unowned self] mid in acknowledged(mid: mid) }
            client.onLog = { [unowned self] level, text in
                logger.trace("libmosquitto", metadata: ["level": "\(level)", "text": "\(text)"])
            }
        }

        /// Seconds since the run started (the prompter's clock).
        var now: Double { (ContinuousClock.now - started).inSeconds }

        func run() {
            logger.info(
                "push listener starting",
                metadata: [
                    "broker": "\(configuration.broker)", "client_id": "\(configuration.clientID)",
                    "topics": "\(configuration.topics.joined(separator: ","))", "device": "\(configuration.device)",
                    "keys": "\(configuration.keyring.ids.joined(separator: ","))",
                    "socket": "\(configuration.socketPath)",
                ])
            while !listener.isStopping {
                guard waitForDaemon() else { break }
                connectAndServe()
                if listener.isStopping { break }
                switch dropReason {
                case .daemonUnavailable:
                    // Not a network problem: no prompt, no backoff; reconnect as soon as the daemon answers.
                    dropReason = .network
                case .network:
                    prompter.disconnected(now: now)
                    let delay = backoff.next()
                    logger.debug("reconnecting", metadata: ["in_s": "\(cFormat("%.1f", delay))"])
                    pause(seconds: delay)
                }
            }
            close()
            logger.info("push listener stopped")
        }

        /// Waits until the daemon answers `ping` (and the stream of its final states is set up, so that the receipt
        /// of a payment forwarded from now on cannot miss its job's end). False if asked to stop meanwhile.
        func waitForDaemon() -> Bool {
            var wait = Backoff(Backoff.Policy(initialSeconds: 0.2, maximumSeconds: 5))
            var logged = false
            while !listener.isStopping {
                if listener.daemon.ping() {
                    if logged {
                        logger.info("the daemon answers again", metadata: ["socket": "\(configuration.socketPath)"])
                    }
                    checkDaemon()
                    if let events = fleet.events, !events.waitUntilLive(timeout: configuration.daemonTimeoutSeconds) {
                        logger.warning(
                            "the daemon's event stream is not set up yet; connecting anyway",
                            metadata: ["socket": "\(configuration.socketPath)"])
                    }
                    return true
                }
                if !logged {
                    logger.warning(
                        "waiting for the daemon; messages stay with the broker meanwhile",
                        metadata: ["socket": "\(configuration.socketPath)"])
                    logged = true
                }
                pause(seconds: wait.next(), prompts: false)
            }
            return false
        }

        /// Warns about a daemon that would refuse every payment (no `submit` access for this user) or forget order
        /// ids sooner than this listener accepts old messages (a replay inside max_age would be spoken again).
        func checkDaemon() {
            guard let status = listener.daemon.status() else { return }
            if let peer = status.peer, peer.access < .submit {
                logger.error(
                    """
                    the daemon does not let this user speak; payments stay with the broker until it does \
                    (announced.toml: [access] submit_users = ["<this user>"])
                    """,
                    metadata: ["uid": "\(peer.uid)", "access": "\(peer.access.rawValue)"])
            }
            if status.journal.dedupWindowSeconds < configuration.maximumAgeSeconds {
                logger.warning(
                    "the daemon's dedup window is shorter than security.max_age: a replay could be spoken twice",
                    metadata: [
                        "dedup_window_s": "\(status.journal.dedupWindowSeconds)",
                        "max_age_s": "\(configuration.maximumAgeSeconds)",
                    ])
            }
        }

        /// One connection: from the attempt until it ends (or the listener stops).
        func connectAndServe() {
            state = .connecting
            attemptStarted = .now
            do {
                if connections > 0 {
                    client = try Self.makeClient(configuration)
                    installCallbacks()
                }
                connections += 1
                if configuration.statusEnabled, !willRefused {
                    try client.setWill(
                        topic: configuration.statusTopic, payload: fleet.offlineStatus(reason: "connection_lost"),
                        qos: 1, retain: true)
                }
                try client.connect(
                    host: configuration.broker.host, port: configuration.broker.port,
                    keepalive: configuration.keepaliveSeconds)
            } catch {
                failedAttempt(reason: error.description)
                state = .closed
                return
            }
            while !listener.isStopping {
                do {
                    try client.loop(timeoutMilliseconds: 200)
                } catch {
                    // Usually onDisconnect has already told; if not, tell here.
                    if state == .connected { lost(reason: error.description) }
                    if state == .connecting { failedAttempt(reason: error.description) }
                    break
                }
                if state == .closed { break }
                if state == .connected { publishFromOutbox() }
                if state == .connecting,
                    ContinuousClock.now - attemptStarted > .seconds(configuration.connectTimeoutSeconds)
                {
                    logger.warning(
                        "the broker did not accept the connection in time",
                        metadata: [
                            "broker": "\(configuration.broker)", "timeout_s": "\(configuration.connectTimeoutSeconds)",
                        ])
                    client.abandonConnection()
                    state = .closed
                    break
                }
                speakPrompts()
            }
            if listener.isStopping, state == .connected {
                publishOffline()
                // DISCONNECT: the broker keeps the session (and any unacknowledged message) for the next start.
                try? client.disconnect()
                let deadline = ContinuousClock.now + .seconds(2)
                while state == .connected, ContinuousClock.now < deadline {
                    do { try client.loop(timeoutMilliseconds: 100) } catch { break }
                }
            }
            state = .closed
            fleet.reporter?.connection(false)
        }

        func close() {
            if state == .connected { try? client.disconnect() }
        }

        // MARK: Callbacks (inside client.loop)

        func connected(code: Int32, sessionPresent: Bool) {
            guard code == 0 else {
                logger.error(
                    "the broker refused the connection",
                    metadata: [
                        "broker": "\(configuration.broker)", "code": "\(code)",
                        "reason": "\(MQTTClient.connackText(code))",
                    ])
                // 5, not authorised: perhaps only the last will's topic (an ACL without the status topic). The
                // next attempt goes without it; payments matter more than the will.
                if code == 5, configuration.statusEnabled, !willRefused {
                    willRefused = true
                    logger.error(
                        """
                        connecting without the last will from now on (check that the broker lets this device \
                        publish its status)
                        """,
                        metadata: ["topic": "\(configuration.statusTopic)"])
                }
                state = .closed
                return
            }
            state = .connected
            backoff.reset()
            prompter.connected(now: now)
            listener.metrics.brokerConnected()
            logger.info(
                "connected to the broker",
                metadata: [
                    "event": .event(.brokerConnected), "broker": "\(configuration.broker)",
                    "session_present": "\(sessionPresent)",
                ])
            for topic in configuration.topics {
                do {
                    try client.subscribe(topic, qos: 1)
                } catch {
                    logger.error("cannot subscribe", metadata: ["topic": "\(topic)", "error": "\(error)"])
                }
            }
            fleet.reporter?.connection(true)
            publishFromOutbox()
        }

        func disconnected(code: Int32) {
            if state == .connected || state == .abandoned { listener.metrics.brokerDisconnected() }
            switch state {
            case .connected where code == 0:
                logger.info("disconnected from the broker")
                fleet.outbox.connectionEnded(byBroker: false)
            case .connected: lost(reason: "\(MosquittoError.text(code)) (\(code))")
            case .connecting: failedAttempt(reason: "\(MosquittoError.text(code)) (\(code))")
            case .abandoned: fleet.outbox.connectionEnded(byBroker: false)
            default: break
            }
            if state != .abandoned { state = .closed }
        }

        func lost(reason: String) {
            logger.warning(
                "connection to the broker lost",
                metadata: ["event": .event(.brokerLost), "broker": "\(configuration.broker)", "error": "\(reason)"])
            fleet.outbox.connectionEnded(byBroker: true)
            state = .closed
        }

        // MARK: Status and receipts

        /// Publishes what the outbox holds next, if nothing is in flight.
        func publishFromOutbox() {
            guard state == .connected, let message = fleet.outbox.next() else { return }
            do {
                let mid = try client.publish(
                    topic: message.topic, payload: message.payload, qos: 1, retain: message.retain)
                fleet.outbox.sent(message.item, mid: mid)
            } catch let error where error.isConnectionLost {
                return  // sent again once connected
            } catch {
                fleet.outbox.refused(message.item, reason: error.description)
            }
        }

        /// The broker acknowledged one of this client's messages.
        func acknowledged(mid: Int32) {
            if mid == offlineMid {
                offlineMid = nil
                return
            }
            if case .receipt(let seq) = fleet.outbox.acknowledged(mid: mid) {
                fleet.receipts?.acknowledged(seq)
            }
            publishFromOutbox()
        }

        /// A clean stop: `online: false` on the status topic (the broker drops the last will at DISCONNECT), waiting
        /// a moment for the broker to take it.
        func publishOffline() {
            guard configuration.statusEnabled, !fleet.outbox.statusSetAside else { return }
            do {
                offlineMid = try client.publish(
                    topic: configuration.statusTopic,
                    payload: fleet.offlineStatus(reason: "stopped", atMs: WallClockMs.now), qos: 1, retain: true)
            } catch {
                logger.warning("cannot publish the offline status", metadata: ["error": "\(error)"])
                return
            }
            let deadline = ContinuousClock.now + .seconds(2)
            while offlineMid != nil, state == .connected, ContinuousClock.now < deadline {
                do { try client.loop(timeoutMilliseconds: 100) } catch { break }
            }
        }

        /// The first failed attempt after a connection is a warning; the following ones (every backoff step of an
        /// outage) are debug, so a long outage does not flood the journal.
        func failedAttempt(reason: String) {
            let metadata: Logger.Metadata = [
                "broker": "\(configuration.broker)", "error": "\(reason)", "attempt": "\(backoff.attempts + 1)",
            ]
            if backoff.attempts == 0 {
                logger.warning("cannot connect to the broker", metadata: metadata)
            } else {
                logger.debug("cannot connect to the broker", metadata: metadata)
            }
            state = .closed
        }

        func subscribed(mid: Int32, granted: [Int32]) {
            for qos in granted where qos != 1 {
                if qos == 128 {
                    logger.error(
                        "the broker refused a subscription (check its ACL)",
                        metadata: ["topics": "\(configuration.topics)"])
                } else {
                    logger.warning(
                        "the broker granted QoS \(qos) instead of 1", metadata: ["topics": "\(configuration.topics)"])
                }
            }
            logger.debug("subscribed", metadata: ["topics": "\(configuration.topics.joined(separator: ","))"])
        }

        /// Handles one message. Returning acknowledges it; ``MQTTClient/abandonConnection()`` before returning
        /// leaves it to the broker to redeliver.
        func received(_ message: MQTTMessage) {
            // After an abandon, the rest of what was already read must not be acknowledged either.
            guard state == .connected else { return }
            listener.metrics.messageReceived()
            var metadata: Logger.Metadata = ["topic": "\(message.topic)", "mid": "\(message.mid)"]
            let payment: VerifiedPayment
            do throws(AnnounceError) {
                if message.retain {
                    throw AnnounceError(.malformed, "a retained message is not a payment notification")
                }
                payment = try verifier.verify(message.payload, nowMs: WallClockMs.now)
            } catch {
                listener.metrics.messageRefused(reason: error.code)
                metadata["event"] = .event(.pushRefused)
                metadata["reason"] = "\(error.code)"
                metadata["error.code"] = "\(error.code)"
                metadata["detail"] = "\(error.message)"
                if let order = try? PushMessage(payload: message.payload) {
                    metadata["order.id"] = "\(order.order)"
                    metadata["kid"] = "\(order.keyID)"
                }
                logger.warning("push message refused", metadata: metadata)
                return
            }
            metadata["order.id"] = "\(payment.message.order)"
            metadata["amount"] = "\(payment.amount)"
            metadata["amount_fen"] = "\(payment.amount.fen)"
            metadata["channel"] = "\(payment.message.channel)"
            let deadline = ContinuousClock.now + .seconds(configuration.holdSeconds)
            var retry = Backoff(Backoff.Policy(initialSeconds: 0.1, maximumSeconds: 1))
            while true {
                switch listener.daemon.forward(payment) {
                case .accepted(let job):
                    listener.metrics.payment(.accepted)
                    metadata["event"] = .event(.pushForwarded)
                    metadata["job.id"] = "\(job.id)"
                    noteForReceipt(order: payment.message.order, reply: .accepted(job), &metadata)
                    logger.info("payment forwarded", metadata: metadata)
                    return
                case .duplicate(let job):
                    listener.metrics.payment(.duplicate)
                    metadata["event"] = .event(.duplicate)
                    metadata["job.id"] = "\(job.map { String($0.id) } ?? "?")"
                    if let job { noteForReceipt(order: payment.message.order, reply: .duplicate(job), &metadata) }
                    logger.notice("payment already with the daemon (duplicate); not spoken again", metadata: metadata)
                    return
                case .refused(let error):
                    listener.metrics.payment(.refused)
                    metadata["event"] = .event(.pushRefused)
                    metadata["code"] = "\(error.code)"
                    metadata["error.code"] = "\(error.code)"
                    metadata["detail"] = "\(error.message)"
                    noteForReceipt(order: payment.message.order, reply: .refused(error), &metadata)
                    logger.error("the daemon refused the payment", metadata: metadata)
                    return
                case .unavailable(let reason):
                    if listener.isStopping || ContinuousClock.now >= deadline {
                        listener.metrics.payment(.unavailable)
                        metadata["error"] = "\(reason)"
                        logger.warning(
                            "the daemon cannot take the payment; leaving it unacknowledged for the broker to redeliver",
                            metadata: metadata)
                        state = .abandoned
                        dropReason = .daemonUnavailable
                        client.abandonConnection()
                        return
                    }
                    SystemThread.sleep(seconds: retry.next())
                }
            }
        }

        /// Notes what the daemon said about a payment, for its receipt: on disk before the message is acknowledged
        /// (one small write and fsync; the daemon already has the payment, so it is not held up by this).
        func noteForReceipt(order: String, reply: Receipts.Reply, _ metadata: inout Logger.Metadata) {
            guard let receipts = fleet.receipts else { return }
            let started = ContinuousClock.now
            receipts.handedOver(order: order, reply: reply)
            metadata["receipt_ms"] = "\(cFormat("%.2f", (ContinuousClock.now - started).inSeconds * 1000))"
        }

        // MARK: Status prompts

        func speakPrompts() {
            while let name = prompter.poll(now: now) {
                if let failure = listener.daemon.prompt(name) {
                    logger.warning("status prompt not spoken", metadata: ["prompt": "\(name)", "error": "\(failure)"])
                } else {
                    logger.info("status prompt", metadata: ["prompt": "\(name)"])
                }
            }
        }

        /// Sleeps, waking to speak due prompts (unless the daemon is known to be down) and to notice `stop()`.
        func pause(seconds: Double, prompts: Bool = true) {
            let end = ContinuousClock.now + .seconds(seconds)
            while !listener.isStopping, ContinuousClock.now < end {
                if prompts { speakPrompts() }
                SystemThread.sleep(seconds: min(0.1, max(0, (end - .now).inSeconds)))
            }
        }
    }
}

extension Duration {
    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Wall-clock Unix time in milliseconds (message timestamps are compared with it).
enum WallClockMs {
    static var now: Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
}
