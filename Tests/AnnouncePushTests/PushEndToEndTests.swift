import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// The push path for real: the publisher tool → a real mosquitto broker on loopback → `announce-push`
/// (libmosquitto) → the daemon's socket → `announced`. What was spoken is read from the daemon's history (and,
/// once, heard on the sound rig); why something was refused is read from the listener's log.
@Suite(.serialized)
struct PushEndToEndTests {
    /// A signed payment is heard once, as the announcement it names.
    @Test func signedPaymentIsHeardOnce() async throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                try await withBroker { broker in
                    // No status prompts here: the tail of "server connected" could still be playing when the
                    // capture starts (connectionChangesBecomeStatusPrompts covers them).
                    try await withListener(broker: broker, socket: daemon.socket, extra: "enabled = false") {
                        setup, listener in
                        let captured = try await rig.capture {
                            try await setup.publish(["--order", "ORD-1", "--channel", "alipay", "100.00"])
                            try await daemon.waitUntilSpoken(["ORD-1"])
                        }
                        let jobs = try await daemon.jobs(order: "ORD-1")
                        #expect(jobs.count == 1, "\(jobs)")
                        #expect(jobs.first?.state == .spoken)
                        #expect(jobs.first?.text == "支付宝到账一百元", "\(jobs)")
                        #expect(
                            listener.logLines(containing: "payment forwarded", "order.id=ORD-1").count == 1,
                            "\(listener.log)")

                        let expected = try pack.render(
                            pack.composer.compose(
                                .payment(amount: Amount(parsing: "100.00"), channel: "alipay", refund: false)))
                        let wrong = try pack.render(
                            pack.composer.compose(
                                .payment(amount: Amount(parsing: "200.00"), channel: "alipay", refund: false)))
                        // Sample for sample 支付宝到账一百元, once: nothing after it.
                        let heard = AudioMatch.compareSamples(expected: expected, captured: captured, startTolerance: 320)
                        print("ORD-1: \(heard)")
                        #expect(heard.failures.isEmpty, "the capture is not 支付宝到账一百元 once: \(heard.failures)")
                        let other = AudioMatch.compareSamples(expected: wrong, captured: captured)
                        #expect(!other.failures.isEmpty, "二百元 matches as well")
                    }
                }
            }
        }
    }

    /// The same signed message delivered twice (a second channel, a republish, a QoS 1 redelivery) is spoken once;
    /// the second is acknowledged as a duplicate.
    @Test func sameMessageRedeliveredIsSpokenOnce() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                try await withListener(broker: broker, socket: daemon.socket) { setup, listener in
                    let payload = try await setup.sign(["--order", "ORD-DUP", "--fen", "1050"])
                    try await setup.publishRaw(payload)
                    try await daemon.waitUntilSpoken(["ORD-DUP"])
                    try await setup.publishRaw(payload)
                    try await listener.waitForLog("(duplicate)")
                    try await setup.publish(["--order", "ORD-AFTER", "1.00"])
                    try await daemon.waitUntilSpoken(["ORD-AFTER"])
                    let jobs = try await daemon.jobs(order: "ORD-DUP")
                    #expect(jobs.count == 1, "\(jobs)")
                    #expect(jobs.first?.amount == "10.50")
                    #expect(
                        listener.logLines(containing: "(duplicate)", "order.id=ORD-DUP").count == 1, "\(listener.log)")
                    #expect(listener.logLines(containing: "payment forwarded", "order.id=ORD-DUP").count == 1)
                }
            }
        }
    }

    /// A real QoS 1 redelivery: the daemon accepted the payment, but the listener's PUBACK is lost on the way to the
    /// broker (a proxy cuts the connection instead of passing it on). The broker redelivers the same message on the
    /// next connection, the daemon answers `duplicate`, and the payment is spoken once.
    @Test func lostAcknowledgementRedeliveryIsSpokenOnce() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                let proxy = try PubackDropper(brokerPort: broker.port)
                defer { proxy.close() }
                try await withListener(broker: broker, socket: daemon.socket, url: proxy.url) { setup, listener in
                    try await setup.publish(["--order", "LOST-ACK", "--channel", "wechat", "12.30"])
                    try await listener.waitForLog("(duplicate)")
                    try await daemon.waitUntilSpoken(["LOST-ACK"])
                    #expect(proxy.dropped == 1)
                    let jobs = try await daemon.jobs(order: "LOST-ACK")
                    #expect(jobs.count == 1, "\(jobs)")
                    #expect(listener.logLines(containing: "payment forwarded", "order.id=LOST-ACK").count == 1)
                    #expect(listener.logLines(containing: "(duplicate)", "order.id=LOST-ACK").count == 1)
                    #expect(listener.logLines(containing: "connected to the broker", "session_present=true").count >= 1)
                }
            }
        }
    }

    /// Forged, altered, stale, future, unknown-key, other-device and garbled messages are refused with their reason
    /// in the log, and none is spoken; a valid one after them still is.
    /// The listener's own metrics, scraped over HTTP, count them (`[metrics] listen`).
    @Test func forgedStaleAndGarbledAreRefusedWithReasonsInTheLog() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                let metrics = "\n[metrics]\nlisten = \"127.0.0.1:0\""
                try await withListener(broker: broker, socket: daemon.socket, extra: metrics) { setup, listener in
                    let now = Int64(Date().timeIntervalSince1970 * 1000)
                    try await setup.publish([
                        "--order", "FORGED", "--key", "hex:\(PushSetup.otherKeyHex)", "--kid", "k1", "500.00",
                    ])
                    try await setup.publish([
                        "--order", "UNKNOWN-KEY", "--key", "hex:\(PushSetup.keyHex)", "--kid", "k7", "500.00",
                    ])
                    try await setup.publish(["--order", "STALE", "--created-at", "\(now - 3_600_000)", "500.00"])
                    try await setup.publish(["--order", "FUTURE", "--created-at", "\(now + 3_600_000)", "500.00"])
                    try await setup.publish([
                        "--order", "ELSEWHERE", "--device", "T2", "--topic", "announce/T1/payments", "500.00",
                    ])
                    // Signed correctly, then altered in transit: the amount raised.
                    let signed = try await setup.sign(["--order", "ALTERED", "5.00"])
                    try await setup.publishRaw(signed.replacingOccurrences(of: "\"5.00\"", with: "\"5000.00\""))
                    try await setup.publishRaw("{\"v\":1,\"order\":\"GARBLED\",\"amount\":")
                    try await setup.publishRaw("\u{00}\u{ff}binary junk")
                    try await setup.publish(["--order", "VALID", "8.50"])
                    try await daemon.waitUntilSpoken(["VALID"])

                    let refused = listener.logLines(containing: "push message refused")
                    for (order, reason) in [
                        ("FORGED", "bad_signature"), ("ALTERED", "bad_signature"), ("UNKNOWN-KEY", "unknown_key"),
                        ("STALE", "stale"), ("FUTURE", "future"), ("ELSEWHERE", "wrong_device"),
                    ] {
                        #expect(
                            refused.contains { $0.contains("order.id=\(order)") && $0.contains("reason=\(reason)") },
                            "\(order) not refused as \(reason):\n\(listener.log)")
                    }
                    #expect(refused.filter { $0.contains("reason=malformed") }.count == 2, "\(listener.log)")
                    #expect(refused.count == 8, "\(refused)")
                    // Nothing but the valid payment (and the connection prompt) reached the daemon.
                    let orders = try await daemon.history().compactMap(\.order)
                    #expect(orders == ["VALID"], "\(orders)")

                    let scraped = try await listener.scrapeMetrics()
                    func sample(_ name: String) -> Double? { HTTP.sample(name, in: scraped) }
                    #expect(sample("announce_push_messages_received_total") == 9, "\(scraped)")
                    #expect(sample("announce_push_messages_refused_total{reason=\"bad_signature\"}") == 2)
                    #expect(sample("announce_push_messages_refused_total{reason=\"malformed\"}") == 2)
                    #expect(sample("announce_push_messages_refused_total{reason=\"stale\"}") == 1)
                    #expect(sample("announce_push_payments_total{outcome=\"accepted\"}") == 1)
                    #expect(sample("announce_push_broker_connected") == 1)
                    #expect(sample("announce_push_broker_reconnects_total") == 0)
                }
            }
        }
    }

    /// The broker restarts in the middle of a stream of payments: the listener reconnects (its persistent session
    /// survives in the broker's persistence) and every payment is spoken exactly once.
    @Test func brokerRestartMidStreamLosesNothing() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                let metrics = "\n[metrics]\nlisten = \"127.0.0.1:0\""
                try await withListener(broker: broker, socket: daemon.socket, extra: metrics) { setup, listener in
                    let first = (1...5).map { "BR-A\($0)" }
                    let second = (1...5).map { "BR-B\($0)" }
                    for order in first { try await setup.publish(["--order", order, "--fen", "\(100 + order.count)"]) }
                    try await broker.restart()
                    for order in second { try await setup.publish(["--order", order, "2.00"]) }
                    try await daemon.waitUntilSpoken(first + second)
                    for order in first + second {
                        let jobs = try await daemon.jobs(order: order)
                        #expect(jobs.count == 1, "\(order): \(jobs)")
                    }
                    #expect(listener.logLines(containing: "connected to the broker").count >= 2, "\(listener.log)")
                    let scraped = try await listener.scrapeMetrics()
                    #expect((HTTP.sample("announce_push_broker_reconnects_total", in: scraped) ?? 0) >= 1, "\(scraped)")
                    #expect(HTTP.sample("announce_push_payments_total{outcome=\"accepted\"}", in: scraped) == 10)
                }
            }
        }
    }

    /// The broker goes down and comes back: payments published for the listener's session before it has reconnected
    /// are queued by the broker and arrive after it reconnects.
    @Test func brokerDownThenBackDeliversWhatWasQueuedForTheSession() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                try await withListener(broker: broker, socket: daemon.socket) { setup, listener in
                    // Stop the listener's connection by stopping the broker, start it again, and publish at once,
                    // before the listener has reconnected (its backoff is at least 200 ms): the broker queues them.
                    await broker.stop()
                    try await listener.waitForLog("connection to the broker lost")
                    try await broker.start()
                    let orders = (1...3).map { "BD-\($0)" }
                    for order in orders { try await setup.publish(["--order", order, "3.00"]) }
                    try await daemon.waitUntilSpoken(orders)
                    for order in orders { #expect(try await daemon.jobs(order: order).count == 1) }
                }
            }
        }
    }

    /// The daemon stops while payments arrive: the listener holds the first, leaves it unacknowledged, waits for the
    /// daemon, and once it is back every payment is spoken exactly once (QoS 1 redelivery + the daemon's dedup).
    @Test func daemonRestartHeldMessagesAreDeliveredAfter() async throws {
        try await withDaemonSet { daemons, directory in
            let daemon = try await daemons.start(rig: nil, device: "null", directory: directory)
            try await withBroker { broker in
                try await withListener(broker: broker, socket: daemon.socket) { setup, listener in
                    try await setup.publish(["--order", "DR-0", "1.00"])
                    try await daemon.waitUntilSpoken(["DR-0"])
                    _ = try await daemon.stop()

                    let orders = (1...4).map { "DR-\($0)" }
                    for order in orders { try await setup.publish(["--order", order, "--fen", "250"]) }
                    try await listener.waitForLog("leaving it unacknowledged")
                    try await listener.waitForLog("waiting for the daemon")

                    let again = try await daemons.start(rig: nil, device: "null", directory: directory)
                    try await again.waitUntilSpoken(orders)
                    for order in ["DR-0"] + orders {
                        let jobs = try await again.jobs(order: order)
                        #expect(jobs.count == 1, "\(order): \(jobs)")
                    }
                    #expect(listener.logLines(containing: "payment forwarded").count == 5, "\(listener.log)")
                }
            }
        }
    }

    /// Connection state changes become status prompts spoken by the daemon: connected, then lost (the broker
    /// stops), then restored (it is back).
    @Test func connectionChangesBecomeStatusPrompts() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                try await withListener(broker: broker, socket: daemon.socket) { _, listener in
                    try await daemon.waitUntilPromptSpoken("server-connected")
                    await broker.stop()
                    try await daemon.waitUntilPromptSpoken("network-lost")
                    try await broker.start()
                    try await daemon.waitUntilPromptSpoken("network-restored")
                    let prompts = try await daemon.history().reversed().compactMap(\.prompt)
                    #expect(prompts == ["server-connected", "network-lost", "network-restored"], "\(prompts)")
                    #expect(listener.logLines(containing: "status prompt", "prompt=network-lost").count == 1)
                }
            }
        }
    }

    /// A listener whose user the daemon does not let speak (misconfigured access) is told so at start and loses
    /// nothing: the payment stays unacknowledged with the broker and is spoken once a permitted listener (same
    /// session) runs.
    @Test func listenerWithoutSubmitAccessHoldsPaymentsUntilAllowed() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                let setup = try PushSetup(broker: broker, socket: daemon.socket)
                defer { setup.remove() }
                let denied = try await setup.startListener(as: .nobody)
                do {
                    try await denied.waitForLog("does not let this user speak")
                    try await setup.publish(["--order", "ACL-1", "9.00"])
                    try await denied.waitForLog("leaving it unacknowledged")
                    _ = try await denied.stop()
                } catch {
                    _ = try? await denied.stop()
                    throw error
                }
                #expect(try await daemon.jobs(order: "ACL-1").isEmpty)
                #expect(denied.logLines(containing: "unauthorized").count >= 1, "\(denied.log)")

                let allowed = try await setup.startListener()
                do {
                    try await daemon.waitUntilSpoken(["ACL-1"])
                    _ = try await allowed.stop()
                } catch {
                    _ = try? await allowed.stop()
                    throw error
                }
                #expect(try await daemon.jobs(order: "ACL-1").count == 1)
            }
        }
    }

    /// The listener needs no more than the daemon's `submit` role (say, prompt, text; issue 16, item 13), which
    /// the shipped configuration gives it: with it, it does not complain at start, and a payment is spoken once.
    @Test func aListenerWithTheSubmitRoleSpeaks() async throws {
        let config = try Paths.temporaryDirectory("cfg")
        defer { try? FileManager.default.removeItem(atPath: config) }
        try "[access]\nsubmit_users = [\"nobody\"]\n".write(
            toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
        try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
            try await withBroker { broker in
                let setup = try PushSetup(broker: broker, socket: daemon.socket)
                defer { setup.remove() }
                let listener = try await setup.startListener(as: .nobody)
                do {
                    try await setup.publish(["--order", "SUB-1", "9.00"])
                    try await daemon.waitUntilSpoken(["SUB-1"])
                    _ = try await listener.stop()
                } catch {
                    _ = try? await listener.stop()
                    throw error
                }
                #expect(listener.logLines(containing: "does not let this user speak").isEmpty, "\(listener.log)")
                #expect(listener.logLines(containing: "unauthorized").isEmpty, "\(listener.log)")
                #expect(try await daemon.jobs(order: "SUB-1").count == 1)
            }
        }
    }

    /// A hung daemon (frozen, not dead: it still accepts connections but never answers): each request times out,
    /// the listener leaves the payment with the broker, and once the daemon runs again the payment is spoken once.
    @Test func hungDaemonTimesOutAndThePaymentIsSpokenOnceItRecovers() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker { broker in
                try await withListener(
                    broker: broker, socket: daemon.socket, daemon: "hold = \"1s\"\ntimeout = \"1s\""
                ) { setup, listener in
                    daemon.signal(SIGSTOP)
                    do {
                        try await setup.publish(["--order", "FROZEN-1", "7.00"])
                        try await listener.waitForLog("leaving it unacknowledged")
                    } catch {
                        daemon.signal(SIGCONT)
                        throw error
                    }
                    daemon.signal(SIGCONT)
                    try await daemon.waitUntilSpoken(["FROZEN-1"])
                    let jobs = try await daemon.jobs(order: "FROZEN-1")
                    #expect(jobs.count == 1, "\(jobs)")
                    #expect(listener.logLines(containing: "did not reply in time", "order.id=FROZEN-1").count == 1)
                    // Acknowledged once the daemon answered: as forwarded, or as a duplicate if the daemon had
                    // handled the timed-out request after thawing — then only when the broker redelivers it, which
                    // may come after the daemon spoke it: wait for the listener's answer, not the daemon's.
                    func answered() -> Int {
                        listener.logLines(containing: "payment forwarded", "order.id=FROZEN-1").count
                            + listener.logLines(containing: "(duplicate)", "order.id=FROZEN-1").count
                    }
                    _ = try await eventually(timeout: .seconds(30)) { answered() >= 1 }
                    #expect(answered() == 1, "\(listener.log)")
                }
            }
        }
    }
}
