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

/// The push listener: keeps an MQTT session with the broker, verifies every payment message and hands it to the
/// daemon, acknowledging it only once the daemon has answered for it.
///
/// Delivery, end to end (docs/push.md):
/// - persistent session (clean_session false) + QoS 1: the broker keeps every message until this client
///   acknowledges it, across disconnections of either side;
/// - a message is acknowledged (PUBACK) only after `onMessage` returns, see ``MQTTClient``; it returns after the
///   daemon accepted the payment, recognised it as a duplicate, or refused it for good — or after the message was
///   refused here (forged, stale, malformed: it can never become valid); a correctly signed payment refused here or
///   by the daemon has its `refused` receipt on disk first;
/// - if the daemon cannot take it, the message is retried for `holdSeconds`; then the connection is dropped
///   without the PUBACK, the listener waits until the daemon answers again, reconnects, and the broker redelivers;
/// - the same for a payment the clock calls stale or future while the clock cannot be trusted (``ClockWatch``): it
///   is left with the broker until the clock can be trusted, then judged;
/// - another client taking the session over (the same client id: a cloned image) is recognised and given way to
///   (``TakeoverWatch``);
/// - a message handled but whose PUBACK was lost is redelivered and the daemon answers `duplicate` (dedup by order
///   id), so it is spoken once.
///
/// `run()` blocks its thread (libmosquitto is driven from it); `stop()` may be called from any thread.
public final class PushListener: Sendable {
    public let configuration: PushConfiguration
    let logger: Logger
    let daemon: DaemonLink
    let metrics: PushMetrics
    /// This run's instance id, the clock and what else the status says of the listener itself.
    public let report: ListenerReport
    /// Set by ``stop()``, which wakes the listener's waits at once (``waitForStop(until:)``).
    private let stopping = ConditionLock(false)

    public init(configuration: PushConfiguration, logger: Logger, metrics: PushMetrics = PushMetrics()) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        daemon = DaemonLink(socketPath: configuration.socketPath, timeoutSeconds: configuration.daemonTimeoutSeconds)
        report = ListenerReport(
            clock: ClockWatch(source: configuration.clockSync, waitSeconds: configuration.clockWaitSeconds))
    }

    /// Asks `run()` to finish: a message being held stays unacknowledged, the session is closed with DISCONNECT.
    public func stop() {
        stopping.withLock { $0 = true }
        stopping.broadcast()
    }

    var isStopping: Bool { stopping.withLock { $0 } }

    /// Waits until `deadline` (``Monotonic/nanos``), or less if ``stop()`` comes first. True if stopping.
    @discardableResult
    func waitForStop(until deadline: UInt64) -> Bool {
        stopping.withLock(when: { $0 }, until: deadline) { $0 }
    }

    /// Runs until ``stop()``. Throws only when the MQTT client or the receipt store cannot be set up (a
    /// configuration problem).
    public func run() throws(AnnounceError) {
        // A write to a connection the broker (or this listener) closed must fail, not kill the process.
        signal(SIGPIPE, SIG_IGN)
        let fleet = try FleetLink(configuration: configuration, daemon: daemon, report: report, logger: logger)
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
        /// Why the last connection ended, which decides the wait before the next.
        enum DropReason: Equatable {
            /// Lost, refused or never made: the reconnect backoff, and the status prompts.
            case network
            /// Left for the broker to redeliver: reconnect as soon as the daemon answers.
            case daemonUnavailable
            /// Left for the broker to redeliver: reconnect as soon as the clock can judge the payment.
            case clockUntrusted
            /// Taken over by another client with this client id: give way for `seconds`.
            case takenOver(seconds: Double)
        }

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
        /// When the broker accepted the current connection (nil: none accepted).
        var connectedAt: ContinuousClock.Instant?
        /// The broker itself closed the current connection, and nothing published explains it.
        var closedByBroker = false
        var backoff: Backoff
        var takeover: TakeoverWatch
        /// The clock's state when last looked at (nil: not yet), to log each change once.
        var clockState: ClockWatch.State?
        var prompter: StatusPrompter
        let started = ContinuousClock.now
        /// The Alibaba Cloud thing model, when `[alibaba]` is set: its messages instead of ours.
        let thing: AlinkThing?
        /// The number of the next message posted to the platform (its `id`).
        var postNumber: UInt64 = 1

        init(listener: PushListener, fleet: FleetLink) throws(MosquittoError) {
            self.listener = listener
            self.fleet = fleet
            configuration = listener.configuration
            logger = listener.logger
            verifier = configuration.verifier
            backoff = Backoff(configuration.reconnect)
            takeover = TakeoverWatch(configuration.takeover)
            prompter = StatusPrompter(policy: configuration.prompts, now: 0)
            let rules = listener.configuration.corpusRules
            thing = listener.configuration.alibaba.map { AlinkThing(settings: $0, rules: rules) }
            client = try Self.makeClient(listener.configuration)
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
                    "socket": "\(configuration.socketPath)", "instance": "\(listener.report.instance)",
                    "clock_sync": "\(configuration.clockSync)",
                ])
            _ = watchClock()
            while !listener.isStopping {
                guard waitForDaemon() else { break }
                connectAndServe()
                if listener.isStopping { break }
                let reason = dropReason
                dropReason = .network
                switch reason {
                case .daemonUnavailable:
                    // Not a network problem: no prompt, no backoff; reconnect as soon as the daemon answers.
                    break
                case .clockUntrusted:
                    // Nor this: reconnect as soon as the payment can be judged.
                    waitForClock()
                case .network:
                    prompter.disconnected(now: now)
                    let delay = backoff.next()
                    logger.debug("reconnecting", metadata: ["in_s": "\(cFormat("%.1f", delay))"])
                    pause(seconds: delay)
                case .takenOver(let seconds):
                    // Disconnected all the same, as far as the shop can tell: the prompts say so.
                    prompter.disconnected(now: now)
                    pause(seconds: seconds)
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
                connectedAt = nil
                closedByBroker = false
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
                    if state == .connected { lost(reason: error.description, code: error.code) }
                    if state == .connecting { failedAttempt(reason: error.description) }
                    break
                }
                if state == .closed { break }
                if state == .connected {
                    publishFromOutbox()
                    watchIdentity()
                    if thing != nil, listener.report.takePropertiesDue() { postProperties() }
                }
                _ = watchClock()
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
            judgeConnectionEnd()
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
            connectedAt = .now
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
            if thing != nil { listener.report.propertiesDueAgain() }
            publishFromOutbox()
        }

        func disconnected(code: Int32) {
            if state == .connected || state == .abandoned { listener.metrics.brokerDisconnected() }
            switch state {
            case .connected where code == 0:
                logger.info("disconnected from the broker")
                fleet.outbox.connectionEnded(byBroker: false)
            case .connected: lost(reason: "\(MosquittoError.text(code)) (\(code))", code: code)
            case .connecting: failedAttempt(reason: "\(MosquittoError.text(code)) (\(code))")
            case .abandoned: fleet.outbox.connectionEnded(byBroker: false)
            default: break
            }
            if state != .abandoned { state = .closed }
        }

        func lost(reason: String, code: Int32) {
            var metadata: Logger.Metadata = [
                "event": .event(.brokerLost), "broker": "\(configuration.broker)", "error": "\(reason)",
            ]
            if let connectedAt {
                metadata["held_s"] = "\(cFormat("%.1f", (ContinuousClock.now - connectedAt).inSeconds))"
            }
            logger.warning("connection to the broker lost", metadata: metadata)
            let explained = fleet.outbox.connectionEnded(byBroker: true)
            closedByBroker = MosquittoError.isClosedByBroker(code) && explained == nil
            state = .closed
        }

        // MARK: Identity

        /// The connection accepted last has ended: was it taken over by another client with this client id?
        func judgeConnectionEnd() {
            guard let since = connectedAt else { return }
            connectedAt = nil
            let held = (ContinuousClock.now - since).inSeconds
            switch takeover.ended(heldSeconds: held, closedByBroker: closedByBroker) {
            case .ordinary:
                break
            case .takenOver:
                listener.metrics.takenOver()
            case .conflict(let detected, let seconds):
                listener.metrics.takenOver()
                conflict(detected: detected, wait: seconds)
            }
        }

        /// Another client uses this client id: say so, and give way for `wait` seconds rather than take the session
        /// back at once (which would only make the two terminals take turns at the pace of the reconnect backoff).
        func conflict(detected: Bool, wait: Double) {
            dropReason = .takenOver(seconds: wait)
            let metadata: Logger.Metadata = [
                "event": .event(.identityConflict), "client_id": "\(configuration.clientID)",
                "instance": "\(listener.report.instance)", "takeovers": "\(takeover.inARow)",
                "wait_s": "\(cFormat("%.0f", wait))",
            ]
            guard detected else {
                logger.warning(
                    "taken over again by the other client with this client id; giving way", metadata: metadata)
                return
            }
            listener.metrics.identityConflict(true)
            listener.report.identityConflict(true)
            logger.error(
                """
                another client is using client id \(configuration.clientID): a cloned image? see docs/deployment.md \
                ("A cloned image"); giving way to it instead of taking the session back
                """,
                metadata: metadata)
        }

        /// Ends a conflict once a connection has lasted long enough without a takeover.
        func watchIdentity() {
            guard let connectedAt else { return }
            let held = (ContinuousClock.now - connectedAt).inSeconds
            guard takeover.held(seconds: held) else { return }
            listener.metrics.identityConflict(false)
            listener.report.identityConflict(false)
            fleet.reporter?.changed()
            logger.notice(
                "no other client has taken this client id's session for a while: the conflict is over",
                metadata: [
                    "event": .event(.identityConflict), "client_id": "\(configuration.clientID)",
                    "held_s": "\(cFormat("%.0f", held))",
                ])
        }

        // MARK: The clock

        /// The clock's state now; logs a change (and tells the status).
        @discardableResult
        func watchClock() -> ClockWatch.State {
            let clock = listener.report.clock
            let (now, detail) = clock.state(now: .now)
            guard now != clockState else { return now }
            let first = clockState == nil
            clockState = now
            listener.metrics.clock(now)
            if !first { fleet.reporter?.changed() }
            var metadata: Logger.Metadata = ["clock_sync": "\(configuration.clockSync)"]
            if let detail { metadata["detail"] = "\(detail)" }
            switch now {
            case .trusted:
                break
            case .synchronized:
                logger.info(
                    first ? "the system clock is synchronised" : "the system clock is synchronised now",
                    metadata: metadata)
            case .waiting:
                metadata["event"] = .event(.clockUnsynchronized)
                metadata["wait_s"] = "\(cFormat("%.0f", clock.waitLeft()))"
                logger.warning(
                    """
                    the system clock is not synchronised: a payment it calls stale or future is left with the broker \
                    until it is (at most security.clock_wait)
                    """,
                    metadata: metadata)
            case .unsynchronized:
                metadata["event"] = .event(.clockUnsynchronized)
                metadata["clock_wait_s"] = "\(cFormat("%.0f", clock.waitSeconds))"
                logger.error(
                    """
                    the system clock is still not synchronised after security.clock_wait: judging payments by it all \
                    the same; one it calls stale or future is refused although the clock may be wrong (check NTP)
                    """,
                    metadata: metadata)
            }
            return now
        }

        /// A payment was left with the broker because the clock cannot judge it: waits until it can (synchronised,
        /// or `security.clock_wait` over), without prompts (the network is fine) or backoff.
        func waitForClock() {
            while !listener.isStopping, !watchClock().isFinal {
                pause(seconds: 0.2, prompts: false)
            }
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
            takeover.attemptFailed()
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
            if let thing { return receivedFromPlatform(message, thing) }
            if CorpusMessage.kind(of: message.payload) == CorpusMessage.kind { return receivedCorpus(message) }
            var metadata: Logger.Metadata = ["topic": "\(message.topic)", "mid": "\(message.mid)"]
            let payment: VerifiedPayment
            var parsed: PushMessage?
            var signed = false
            do throws(AnnounceError) {
                if message.retain {
                    throw AnnounceError(.malformed, "a retained message is not a payment notification")
                }
                let readable = try PushMessage(payload: message.payload)
                parsed = readable
                try verifier.authenticate(readable)
                signed = true
                payment = try verifier.judge(readable, nowMs: WallClockMs.now)
            } catch {
                if let parsed {
                    metadata["order.id"] = "\(parsed.order)"
                    metadata["kid"] = "\(parsed.keyID)"
                }
                if heldForClock(error, signed: signed, &metadata) { return }
                refuse(error, &metadata) { metadata in
                    if signed, let parsed { noteRefusal(parsed, reason: error.code.rawValue, &metadata) }
                }
                return
            }
            metadata["order.id"] = "\(payment.message.order)"
            if let amount = payment.amount {
                metadata["amount"] = "\(amount)"
                metadata["amount_fen"] = "\(amount.fen)"
                metadata["channel"] = "\(payment.message.channel)"
            }
            if let parts = payment.message.parts { metadata["parts"] = "\(parts.joined(separator: " "))" }
            let clock = watchClock()
            if !clock.isTrusted { metadata["clock"] = "\(clock.rawValue)" }
            let deadline = ContinuousClock.now + .seconds(configuration.holdSeconds)
            guard let outcome = handOver(payment.request, until: deadline, &metadata) else { return }
            switch outcome {
            case .accepted(let job) where job.durable == false, .duplicate(let job?) where job.durable == false:
                // The daemon keeps its journal in memory (its state folder cannot be used): "accepted" is not on
                // its disk, and a crash would lose it. Acknowledged only once heard; until then the broker keeps
                // it (redelivered, it is a duplicate the daemon answers once the job has finished).
                metadata["job.id"] = "\(job.id)"
                metadata["durable"] = "false"
                guard let final = finalOrLeave(job, payment.request, until: deadline, &metadata) else { return }
                metadata["event"] = .event(.pushForwarded)
                metadata["state"] = "\(final.state.rawValue)"
                noteForReceipt(order: payment.message.order, reply: .accepted(final), &metadata)
                logger.info("payment forwarded and ended (the daemon's journal is in memory)", metadata: metadata)
            case .accepted(let job):
                metadata["event"] = .event(.pushForwarded)
                metadata["job.id"] = "\(job.id)"
                noteForReceipt(order: payment.message.order, reply: .accepted(job), &metadata)
                logger.info("payment forwarded", metadata: metadata)
            case .duplicate(let job):
                metadata["event"] = .event(.duplicate)
                metadata["job.id"] = "\(job.map { String($0.id) } ?? "?")"
                if let job { noteForReceipt(order: payment.message.order, reply: .duplicate(job), &metadata) }
                logger.notice("payment already with the daemon (duplicate); not spoken again", metadata: metadata)
            case .refused(let error):
                metadata["event"] = .event(.pushRefused)
                metadata["code"] = "\(error.code)"
                metadata["error.code"] = "\(error.code)"
                metadata["detail"] = "\(error.message)"
                noteRefusal(payment.message, reason: error.code, &metadata)
                logger.error("the daemon refused the payment", metadata: metadata)
            case .repeatNotice(let info, let started):
                metadata["event"] = .event(started ? .pushForwarded : .duplicate)
                metadata["repeat"] = "\(info.state.rawValue)"
                fleet.receipts?.repeatHandedOver(info, duplicate: !started)
                logger.info(started ? "repeat forwarded" : "repeat already with the daemon (duplicate)", metadata: metadata)
            case .stopped(let ended):
                metadata["event"] = .event(.pushForwarded)
                metadata["stopped"] = "\(ended.map(\.order))"
                logger.info("repeat stop forwarded (each repeat's receipt says it ended)", metadata: metadata)
            case .unavailable:
                break  // handOver left it with the broker
            }
        }

        /// Hands a job's request to the daemon, trying again while it cannot take it (down, busy, queue full) until
        /// `deadline`, then leaves the message with the broker (unacknowledged, redelivered on the next connection)
        /// and returns nil. Counted in the payment metrics by outcome.
        func handOver(
            _ request: Request, until deadline: ContinuousClock.Instant, _ metadata: inout Logger.Metadata
        ) -> ForwardOutcome? {
            var retry = Backoff(Backoff.Policy(initialSeconds: 0.1, maximumSeconds: 1))
            while true {
                let outcome = listener.daemon.forward(request)
                switch outcome {
                case .accepted: listener.metrics.payment(.accepted)
                case .duplicate: listener.metrics.payment(.duplicate)
                case .refused: listener.metrics.payment(.refused)
                case .repeatNotice, .stopped: listener.metrics.payment(.accepted)
                case .unavailable(let reason):
                    guard listener.isStopping || ContinuousClock.now >= deadline else {
                        listener.waitForStop(until: Monotonic.nanos(afterSeconds: retry.next()))
                        continue
                    }
                    listener.metrics.payment(.unavailable)
                    metadata["error"] = "\(reason)"
                    logger.warning(
                        "the daemon cannot take the message; leaving it unacknowledged for the broker to redeliver",
                        metadata: metadata)
                    leaveWithBroker(.daemonUnavailable)
                    return nil
                }
                return outcome
            }
        }

        /// A job the daemon took while its journal is in memory, once final (waiting until `deadline`); nil, and the
        /// message left with the broker, if it is not final by then.
        func finalOrLeave(
            _ job: JobInfo, _ request: Request, until deadline: ContinuousClock.Instant,
            _ metadata: inout Logger.Metadata
        ) -> JobInfo? {
            let left = max(0, (deadline - ContinuousClock.now).inSeconds)
            if let final = job.state.isFinal ? job : listener.daemon.final(of: request, timeout: left) { return final }
            logger.warning(
                "the daemon keeps its journal in memory: leaving the message with the broker until it is heard",
                metadata: metadata)
            leaveWithBroker(.daemonUnavailable)
            return nil
        }

        // MARK: Corpus pushes

        /// A corpus push on our channel: checked like a payment (shape, device, key, signature, then the time window
        /// — `corpus.max_age` — and the terminal's rules), then noted with its task on disk before it is
        /// acknowledged; the corpus worker runs it and its receipt follows. The same message again (its PUBACK lost)
        /// is acknowledged with nothing more; the same task in a new message (the service resent it) gets a
        /// `duplicate` receipt. Correctly signed and refused: a `refused` receipt.
        func receivedCorpus(_ message: MQTTMessage) {
            var metadata: Logger.Metadata = [
                "topic": "\(message.topic)", "mid": "\(message.mid)", "kind": "\(CorpusMessage.kind)",
            ]
            let push: CorpusMessage
            var parsed: CorpusMessage?
            var signed = false
            do throws(AnnounceError) {
                if message.retain {
                    throw AnnounceError(.malformed, "a retained message is not a corpus push")
                }
                let readable = try CorpusMessage(payload: message.payload)
                parsed = readable
                try verifier.authenticate(readable)
                signed = true
                try verifier.checkWindow(
                    createdAt: readable.createdAt, nowMs: WallClockMs.now,
                    maximumAgeMs: Int64(configuration.corpusRules.maximumAgeSeconds * 1000))
                guard fleet.corpus != nil else {
                    throw AnnounceError(.corpusDisabled, "this terminal takes no corpus pushes (corpus.enabled)")
                }
                try configuration.corpusRules.judge(readable.task)
                push = readable
            } catch {
                if let parsed {
                    metadata["task"] = "\(parsed.task.task)"
                    metadata["kid"] = "\(parsed.keyID)"
                }
                if heldForClock(error, signed: signed, &metadata) { return }
                refuse(error, &metadata) { metadata in
                    guard signed, let parsed, let receipts = fleet.receipts, let signature = parsed.signature else {
                        return
                    }
                    let receipt = receipts.corpusReceiptFor(
                        task: parsed.task.task, state: .refused, error: error.code.rawValue,
                        clips: try? fleet.corpus?.current().clips.count)
                    if !receipts.corpusReceipt(receipt, message: signature) {
                        metadata["receipt"] = "made before (the same message again)"
                    }
                }
                return
            }
            metadata["task"] = "\(push.task.task)"
            metadata["op"] = "\(push.task.op.rawValue)"
            guard let receipts = fleet.receipts, let corpus = fleet.corpus, let signature = push.signature else { return }
            note(push.task, key: signature, receipts: receipts, corpus: corpus, duplicateReceipt: true, &metadata)
        }

        /// Notes a corpus task for the worker, unless it is known: the same message (`key`) again is acknowledged
        /// with nothing more; the same task in another message gets, with `duplicateReceipt`, a `duplicate` receipt
        /// (with the first one's outcome as `original` once it has one). True when noted.
        @discardableResult
        func note(
            _ task: CorpusTask, key: String, receipts: Receipts, corpus: CorpusStore, duplicateReceipt: Bool,
            _ metadata: inout Logger.Metadata
        ) -> Bool {
            let done = corpus.outcome(of: task.task)
            if receipts.knows(message: key) || done?.message == key {
                logger.notice("corpus push already noted (the same message again)", metadata: metadata)
                return false
            }
            if done != nil || receipts.isOwed(task: task.task) {
                if duplicateReceipt {
                    let receipt = receipts.corpusReceiptFor(
                        task: task.task, state: .duplicate, original: done?.state, clips: done?.clips)
                    receipts.corpusReceipt(receipt, message: key)
                }
                metadata["original"] = "\(done?.state.rawValue ?? "pending")"
                logger.notice("corpus push for a task already noted (a resend); not done again", metadata: metadata)
                return false
            }
            let started = ContinuousClock.now
            receipts.corpusTask(task, message: key)
            metadata["receipt_ms"] = "\(cFormat("%.2f", (ContinuousClock.now - started).inSeconds * 1000))"
            logger.info("corpus push noted", metadata: metadata)
            return true
        }

        // MARK: The Alibaba Cloud thing model

        /// A message from the Alibaba Cloud IoT Platform (``AlinkThing``): a corpus push or a deletion is noted for the
        /// corpus worker (on disk before the reply and the acknowledgement), then answered; a service not offered
        /// is answered `not supported`; the platform's replies to what this device posted are logged.
        func receivedFromPlatform(_ message: MQTTMessage, _ thing: AlinkThing) {
            var metadata: Logger.Metadata = ["topic": "\(message.topic)", "mid": "\(message.mid)"]
            switch thing.read(topic: message.topic, payload: message.payload) {
            case .ignored(let why):
                metadata["detail"] = "\(why)"
                logger.warning("platform message ignored", metadata: metadata)
            case .postReply(let code, let text):
                metadata["code"] = "\(code)"
                if code == 200 {
                    logger.debug("the platform took a post", metadata: metadata)
                } else {
                    metadata["detail"] = "\(text ?? "")"
                    logger.warning("the platform refused a post", metadata: metadata)
                }
            case .answer(let reply, let reason):
                metadata["detail"] = "\(reason)"
                logger.notice("platform service answered without effect", metadata: metadata)
                publish(reply)
            case .refused(let task, let key, let reply, let error):
                metadata["task"] = "\(task.task)"
                refuse(error, &metadata) { _ in
                    // SpeechPost's result is its event (result 255); a deletion has only the reply.
                    guard task.op == .put, let receipts = fleet.receipts else { return }
                    receipts.corpusReceipt(
                        receipts.corpusReceiptFor(task: task.task, state: .refused, error: error.code.rawValue, clips: nil),
                        message: key)
                }
                publish(reply)
            case .corpus(let task, let key, let reply):
                metadata["task"] = "\(task.task)"
                metadata["op"] = "\(task.op.rawValue)"
                guard let receipts = fleet.receipts, let corpus = fleet.corpus else {
                    // `corpus.enabled = false`: say so rather than take the call.
                    let message = "not supported: corpus pushes are off on this device (corpus.enabled)"
                    logger.notice("platform service answered without effect", metadata: metadata)
                    publish(thing.answer(reply, code: AlinkThing.notSupported, message: message))
                    return
                }
                note(task, key: key, receipts: receipts, corpus: corpus, duplicateReceipt: false, &metadata)
                publish(reply)
            case .broadcast(let broadcast):
                receivedBroadcast(broadcast, &metadata)
            case .replay(let request, let replyTo):
                let deadline = ContinuousClock.now + .seconds(configuration.holdSeconds)
                guard let outcome = handOver(request, until: deadline, &metadata) else { return }
                switch outcome {
                case .accepted(let job), .duplicate(let job?):
                    metadata["job.id"] = "\(job.id)"
                    metadata["replay_of"] = "\(job.replayOf.map(String.init) ?? "?")"
                    logger.info("the last combination broadcast replayed", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .duplicate(nil):
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .refused(let error) where error.code == AnnounceError.Code.notFound.rawValue:
                    logger.notice("nothing to replay", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: AlinkThing.nothingToReplay, message: error.message))
                case .refused(let error):
                    metadata["error.code"] = "\(error.code)"
                    logger.error("the daemon refused the replay", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: AlinkThing.badParameters, message: error.message))
                case .repeatNotice, .stopped:
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .unavailable:
                    break  // handOver left it with the broker
                }
            case .repeatCall(let request, let replyTo):
                let deadline = ContinuousClock.now + .seconds(configuration.holdSeconds)
                guard let outcome = handOver(request, until: deadline, &metadata) else { return }
                switch outcome {
                case .repeatNotice(let info, let started):
                    metadata["repeat"] = "\(info.order)"
                    logger.info(started ? "repeat started" : "repeat already with the daemon", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .stopped(let ended):
                    metadata["stopped"] = "\(ended.map(\.order))"
                    logger.info("repeat stopped", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .refused(let error):
                    metadata["error.code"] = "\(error.code)"
                    logger.error("the daemon refused the repeat call", metadata: metadata)
                    publish(AlinkThing.reply(to: replyTo, code: AlinkThing.badParameters, message: error.message))
                case .accepted, .duplicate:
                    publish(AlinkThing.reply(to: replyTo, code: 200))
                case .unavailable:
                    break  // handOver left it with the broker
                }
            }
        }

        /// A combination broadcast from the platform, handed to the daemon as a payment is (left with the broker while
        /// the daemon cannot take it), its speech id the order id. Answered: a synchronous one as soon as the daemon
        /// has the job; an asynchronous one once heard, through the receipts (on disk until the broker has the
        /// answer, so a restart loses none); a duplicate, a clip not found or another refusal at once.
        func receivedBroadcast(_ broadcast: AlinkThing.Broadcast, _ metadata: inout Logger.Metadata) {
            metadata["order.id"] = "\(broadcast.speechID)"
            metadata["parts"] = "\((broadcast.request.parts ?? []).count)"
            func answer(_ result: AlinkThing.BroadcastResult, _ message: String) {
                publish(
                    AlinkThing.broadcastReply(
                        to: broadcast.replyTo, speechID: broadcast.speechID, result: result, message: message))
            }
            let deadline = ContinuousClock.now + .seconds(configuration.holdSeconds)
            guard let outcome = handOver(broadcast.request, until: deadline, &metadata) else { return }
            switch outcome {
            case .accepted(let job):
                metadata["event"] = .event(.pushForwarded)
                metadata["job.id"] = "\(job.id)"
                if broadcast.synchronous {
                    answer(.success, "success")
                } else if job.durable == false {
                    // The journal in memory: answered once heard, acknowledged only then (as a payment).
                    guard let final = finalOrLeave(job, broadcast.request, until: deadline, &metadata),
                        let receipt = Receipt(
                            job: final, order: broadcast.speechID, duplicate: false, device: configuration.device,
                            keyID: "alibaba", createdAt: WallClockMs.now)
                    else { return }
                    publish(
                        AlinkThing.Reply(
                            topic: broadcast.replyTo.topic,
                            payload: AlinkThing.broadcastReply(receipt, to: broadcast.replyTo)))
                } else if let receipts = fleet.receipts {
                    let started = ContinuousClock.now
                    receipts.handedOver(order: broadcast.speechID, reply: .accepted(job), replyTo: broadcast.replyTo)
                    metadata["receipt_ms"] = "\(cFormat("%.2f", (ContinuousClock.now - started).inSeconds * 1000))"
                } else {
                    answer(.success, "accepted (receipts are off on this device: not told when heard)")
                }
                logger.info("combination broadcast forwarded", metadata: metadata)
            case .duplicate(let job):
                metadata["event"] = .event(.duplicate)
                metadata["job.id"] = "\(job.map { String($0.id) } ?? "?")"
                answer(.duplicate, "duplicate speech id (broadcast before: \(job?.state.rawValue ?? "?"))")
                logger.notice("combination broadcast already with the daemon (duplicate); not spoken again", metadata: metadata)
            case .refused(let error):
                metadata["event"] = .event(.pushRefused)
                metadata["error.code"] = "\(error.code)"
                metadata["detail"] = "\(error.message)"
                if error.code == AnnounceError.Code.notFound.rawValue {
                    answer(.notFound, "speechs file not found: \(error.message)")
                } else {
                    answer(.notHeard, "refused: \(error.code): \(error.message)")
                }
                logger.error("the daemon refused the combination broadcast", metadata: metadata)
            case .repeatNotice, .stopped:
                answer(.notHeard, "the daemon answered a broadcast as a repeat")
            case .unavailable:
                break  // handOver left it with the broker
            }
        }

        /// Publishes a reply to the platform at once (QoS 1; not kept: the platform times an unanswered call out).
        func publish(_ reply: AlinkThing.Reply) {
            do {
                _ = try client.publish(topic: reply.topic, payload: reply.payload, qos: 1)
            } catch {
                logger.warning("cannot answer the platform", metadata: ["topic": "\(reply.topic)", "error": "\(error)"])
            }
        }

        /// Posts the thing model's properties (the pushed clips, the storage, the volume).
        func postProperties() {
            guard let thing else { return }
            let manifest = (try? fleet.corpus?.current()) ?? CorpusManifest()
            let volume = listener.daemon.status()?.audio.level
            let payload = AlinkThing.properties(
                manifest, rules: thing.rules, volumePercent: volume, number: postNumber)
            postNumber += 1
            publish(AlinkThing.Reply(topic: thing.settings.propertyTopic, payload: payload))
            logger.debug("properties posted", metadata: ["clips": "\(manifest.clips.count)"])
        }

        /// Drops the connection inside `onMessage`, so that the message being handled (and every later one) stays
        /// unacknowledged with the broker, which redelivers it on the next connection.
        func leaveWithBroker(_ reason: DropReason) {
            state = .abandoned
            dropReason = reason
            client.abandonConnection()
        }

        /// A correctly signed payment the clock calls stale or future while the clock cannot be trusted: the verdict
        /// may be the clock's fault (a terminal booted without a battery-backed clock, NTP not through yet), and a
        /// refusal would be final — the broker forgets an acknowledged message. So it is not judged yet: left with the
        /// broker until the clock can be trusted (``waitForClock()``), then judged again on redelivery.
        func holdForClock(_ verdict: AnnounceError, _ metadata: inout Logger.Metadata) {
            listener.metrics.payment(.heldForClock)
            metadata["event"] = .event(.clockUnsynchronized)
            metadata["verdict"] = "\(verdict.code)"
            metadata["detail"] = "\(verdict.message)"
            metadata["clock_sync"] = "\(configuration.clockSync)"
            metadata["wait_s"] = "\(cFormat("%.0f", listener.report.clock.waitLeft()))"
            logger.warning(
                """
                the system clock is not synchronised, so it cannot tell whether this payment is \(verdict.code); \
                leaving it unacknowledged until it is
                """,
                metadata: metadata)
            leaveWithBroker(.clockUntrusted)
        }

        /// A message refused here: logged, counted (metrics and status), and — when it is correctly signed for this
        /// device, a payment (or corpus push) the service really sent — given a `refused` receipt before it is
        /// acknowledged (`receipt` makes it, and notes in the log what it did). A forged or unreadable one gets none:
        /// there is nothing this device could vouch for.
        func refuse(
            _ error: AnnounceError, _ metadata: inout Logger.Metadata, receipt: (inout Logger.Metadata) -> Void
        ) {
            listener.metrics.messageRefused(reason: error.code)
            listener.report.refused(error.code)
            fleet.reporter?.changed()
            metadata["event"] = .event(.pushRefused)
            metadata["reason"] = "\(error.code)"
            metadata["error.code"] = "\(error.code)"
            metadata["detail"] = "\(error.message)"
            receipt(&metadata)
            logger.warning("push message refused", metadata: metadata)
        }

        /// A correctly signed message the clock calls stale or future: left with the broker (true; the caller
        /// returns without acknowledging it) while the clock cannot be trusted (``holdForClock(_:_:)``); else
        /// false, the verdict final, with `clock` noted in the log when the clock was never synchronised.
        func heldForClock(_ error: AnnounceError, signed: Bool, _ metadata: inout Logger.Metadata) -> Bool {
            guard signed, PushVerifier.isTimeWindow(error.code) else { return false }
            let clock = watchClock()
            guard clock.isFinal else {
                holdForClock(error, &metadata)
                return true
            }
            if clock == .unsynchronized { metadata["clock"] = "\(clock.rawValue)" }
            return false
        }

        /// The `refused` receipt of a correctly signed payment, on disk before its message is acknowledged; none for a
        /// redelivery of a message already refused (``Receipts/refused(order:reason:message:)``).
        func noteRefusal(_ message: PushMessage, reason: String, _ metadata: inout Logger.Metadata) {
            guard let receipts = fleet.receipts, let signature = message.signature else { return }
            let started = ContinuousClock.now
            if !receipts.refused(order: message.order, reason: reason, message: signature) {
                metadata["receipt"] = "made before (the same message again)"
            }
            metadata["receipt_ms"] = "\(cFormat("%.2f", (ContinuousClock.now - started).inSeconds * 1000))"
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

        /// Waits `seconds`, waking to speak the prompts as they fall due (unless `prompts` is false: the daemon is
        /// known to be down); `stop()` ends it at once.
        func pause(seconds: Double, prompts: Bool = true) {
            let end = Monotonic.nanos(afterSeconds: seconds)
            while !listener.isStopping, Monotonic.nanos < end {
                var until = end
                if prompts {
                    speakPrompts()
                    let current = now
                    if let due = prompter.nextDue(now: current) {
                        until = min(end, Monotonic.nanos(afterSeconds: due - current))
                    }
                }
                listener.waitForStop(until: until)
            }
        }
    }
}

extension Duration {
    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

extension Monotonic {
    /// The monotonic time `seconds` from now, rounded up to the nanosecond (a deadline for a ``ConditionLock``
    /// wait); a negative wait is none, and one longer than a century is a century.
    static func nanos(afterSeconds seconds: Double) -> UInt64 {
        nanos + UInt64((min(max(0, seconds), 3.2e9) * 1e9).rounded(.up))
    }
}

/// Wall-clock Unix time in milliseconds (message timestamps are compared with it).
enum WallClockMs {
    static var now: Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
}
