import AnnounceClient
import AnnounceCore
import AnnounceCrypto
import AnnouncePush
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Synchronization
import Testing

/// What the fleet sees of a terminal, for real: a mosquitto broker with passwords and the ACL of docs/fleet.md, the
/// payment service's own client watching the device's status and receipts, the real `announce-push` with the
/// device's credentials, and a real `announced`.
@Suite(.serialized)
struct PushFleetTests {
    static let statusTopic = "announce/T1/status"
    static let receiptTopic = "announce/T1/receipts"

    static var deviceKey: HMACKey {
        // swiftlint:disable:next force_try
        try! Keyring(encoded: ["k1": "hex:\(PushSetup.keyHex)"]).key("k1")!
    }

    /// The service's watcher on T1's status and receipts.
    static func watcher(
        _ broker: Broker, onMessage: @escaping @Sendable (TopicWatcher.Message) -> Void = { _ in }
    ) async throws -> TopicWatcher {
        try await TopicWatcher(
            broker: broker, user: "payment-service", password: FleetBroker.users["payment-service"]!,
            topics: [statusTopic, receiptTopic], onMessage: onMessage)
    }

    /// The entries `announce-push` keeps on disk until the broker acknowledged their receipt.
    static func pending(_ setup: PushSetup) -> [ReceiptEntry] {
        let folder = "\(setup.stateDirectory)/receipts"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted().compactMap { name in
            FileManager.default.contents(atPath: "\(folder)/\(name)").flatMap {
                try? JSONDecoder().decode(ReceiptEntry.self, from: $0)
            }
        }
    }

    /// Waits until no receipt is pending on the listener's disk (every one acknowledged by the broker).
    static func waitUntilNothingPending(_ setup: PushSetup, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while !pending(setup).isEmpty {
            guard ContinuousClock.now < deadline else { throw HarnessError("still pending: \(pending(setup))") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    // MARK: Receipts

    /// A payment's receipt says `heard` and comes only once its last sample has been played: the moment it
    /// arrives at the service, the rig's recording already holds the whole announcement.
    @Test func aReceiptArrivesOnlyOnceItsLastSampleWasPlayed() async throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        try await withRig { rig in
            try await withDaemon(rig: rig) { daemon in
                try await FleetBroker.with { broker, files in
                    // How much the rig had recorded when the receipt arrived (samples).
                    let recordedAtReceipt = Mutex<Int?>(nil)
                    let watcher = try await Self.watcher(broker) { message in
                        guard message.topic == Self.receiptTopic,
                            let path = try? String(contentsOfFile: "\(rig.directory)/capture.file", encoding: .utf8)
                        else { return }
                        var info = stat()
                        guard stat(path.trimmingCharacters(in: .whitespacesAndNewlines), &info) == 0 else { return }
                        recordedAtReceipt.withLock { $0 = $0 ?? Int(info.st_size) / 2 }
                    }
                    defer { watcher.stop() }
                    try await withListener(
                        broker: broker, socket: daemon.socket, extra: "enabled = false",
                        brokerExtra: files.credentials("T1")
                    ) { setup, _ in
                        let captured = try await rig.capture {
                            try await setup.publish(
                                ["--order", "HEARD-1", "--channel", "alipay", "100.00"] + files.serviceOptions)
                            try await watcher.waitForReceipts(["HEARD-1"])
                        }
                        let receipts = watcher.receipts.filter { $0.order == "HEARD-1" }
                        #expect(receipts.count == 1, "\(receipts)")
                        let receipt = try #require(receipts.first)
                        #expect(receipt.state == .heard)
                        #expect(receipt.device == "T1")
                        #expect(receipt.isValid(with: Self.deviceKey), "the signature does not verify")
                        #expect(receipt.heardAt != nil && receipt.acceptedAt != nil && receipt.firstSampleMicros != nil)
                        if let heard = receipt.heardAt, let accepted = receipt.acceptedAt { #expect(heard > accepted) }

                        let expected = try pack.render(
                            pack.composer.compose(
                                .payment(amount: Amount(parsing: "100.00"), channel: "alipay", refund: false)))
                        let heard = AudioMatch.compareSamples(
                            expected: expected, captured: captured, startTolerance: 320)
                        #expect(heard.failures.isEmpty, "not 支付宝到账一百元 once: \(heard.failures)")
                        let atReceipt = try #require(recordedAtReceipt.withLock { $0 })
                        // The recording itself trails the sink by its own buffer (parec --latency-msec=20): one
                        // such buffer, 20 ms = 320 samples at 16 kHz, and one more for the pipe.
                        let recorderLatency = 640
                        print(
                            "receipt arrived with \(atReceipt) samples recorded; the announcement ends at \(heard.end)")
                        #expect(
                            heard.end <= atReceipt + recorderLatency,
                            "the receipt came \(heard.end - atReceipt) samples before the end was recorded"
                        )
                    }
                }
            }
        }
    }

    /// The same signed payment delivered twice: the first is `heard`, the second gets a `duplicate` receipt that
    /// names the original's state. Both are signed; nothing is spoken twice.
    @Test func aDuplicateResendGetsADuplicateReceipt() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    let payload = try await setup.sign(["--order", "DUP-1", "--fen", "1050"])
                    try await setup.publishRaw(payload, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["DUP-1"], state: .heard)
                    try await setup.publishRaw(payload, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["DUP-1"], state: .duplicate)
                    let receipts = watcher.receipts.filter { $0.order == "DUP-1" }
                    #expect(receipts.map(\.state) == [.heard, .duplicate], "\(receipts)")
                    #expect(receipts.last?.original == .heard)
                    #expect(receipts.first?.job == receipts.last?.job)
                    #expect(receipts.last?.heardAt == receipts.first?.heardAt)
                    #expect(receipts.allSatisfy { $0.isValid(with: Self.deviceKey) })
                    #expect(try await daemon.jobs(order: "DUP-1").count == 1)
                    try await Self.waitUntilNothingPending(setup)
                    #expect(listener.logLines(containing: "(duplicate)", "order.id=DUP-1").count == 1)
                }
            }
        }
    }

    /// A signed combination (`--part`): spoken as its parts say, the pack's notice and the digits; one `heard` receipt;
    /// the same message again is a `duplicate`; one naming a clip nowhere is refused by the daemon, and the service
    /// gets a `refused` receipt saying `not_found`, nothing spoken.
    @Test func aCombinationIsSpokenOnceWithAReceiptLikeAPayments() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    let payload = try await setup.sign(["--order", "SP-1", "--part", "new-order", "--part", "{#0423}"])
                    try await setup.publishRaw(payload, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["SP-1"], state: .heard)
                    let jobs = try await daemon.jobs(order: "SP-1")
                    #expect(jobs.map(\.text) == ["您有新的外卖订单，请及时处理零四二三"], "\(jobs)")
                    try await setup.publishRaw(payload, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["SP-1"], state: .duplicate)
                    #expect(try await daemon.jobs(order: "SP-1").count == 1, "heard once")

                    try await setup.publish(["--order", "SP-2", "--part", "urged"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["SP-2"], state: .refused)
                    let refused = try #require(watcher.receipts.first { $0.order == "SP-2" })
                    #expect(refused.error == "not_found", "\(refused)")
                    #expect(try await daemon.jobs(order: "SP-2").isEmpty, "nothing queued")
                    let receipts = watcher.receipts.filter { $0.order.hasPrefix("SP-") }
                    #expect(receipts.map(\.state) == [.heard, .duplicate, .refused], "\(receipts)")
                    #expect(receipts.allSatisfy { $0.isValid(with: Self.deviceKey) })
                    #expect(listener.logLines(containing: "payment forwarded", "order.id=SP-1", "new-order").count == 1, "\(listener.log)")
                    try await Self.waitUntilNothingPending(setup)
                }
            }
        }
    }

    /// From the fleet, on our signed channel: a notice-class combination, a repeating notice said its times (its
    /// receipt `done` with how often it was heard), one stopped by a stop message (`stopped`), and "replay last", heard
    /// once however often it is delivered; a stop of a repeat never started is `refused`.
    @Test func repeatsStopsAndReplayLastFromTheFleetEachEndInASignedReceipt() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    try await setup.publish(["--order", "N-1", "--class", "notice", "--part", "coupon-used"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["N-1"], state: .heard)
                    #expect(try await daemon.jobs(order: "N-1").map(\.priority) == [.notice])

                    let options = ["--part", "new-order", "--part", "{#17}"]
                    try await setup.publish(["--order", "R-1", "--every", "1", "--times", "2"] + options + files.serviceOptions)
                    try await watcher.waitForReceipts(["R-1"], state: .done)
                    let done = try #require(watcher.receipts.first { $0.order == "R-1" })
                    #expect(done.kind == .repeatNotice && done.heard == 2, "\(done)")
                    let times = try await daemon.jobs(order: "R-1#1") + daemon.jobs(order: "R-1#2")
                    #expect(times.count == 2 && times.allSatisfy { $0.state == .spoken }, "each time once: \(times)")

                    try await setup.publish(["--order", "R-2", "--every", "3600"] + options + files.serviceOptions)
                    _ = try await daemon.waitUntilSpoken(["R-2#1"])
                    try await setup.publish(["--order", "R-2", "--stop"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["R-2"], state: .stopped)
                    #expect(watcher.receipts.first { $0.order == "R-2" }?.heard == 1)

                    try await setup.publish(["--order", "R-none", "--stop"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["R-none"], state: .refused)
                    #expect(watcher.receipts.first { $0.order == "R-none" }?.error == "not_found")

                    let replay = try await setup.sign(["--order", "RL-1", "--replay-last"])
                    try await setup.publishRaw(replay, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["RL-1"], state: .heard)
                    try await setup.publishRaw(replay, options: files.serviceOptions)
                    try await watcher.waitForReceipts(["RL-1"], state: .duplicate)
                    let replayed = try await daemon.jobs(order: "RL-1")
                    #expect(replayed.count == 1 && replayed.first?.text == "您有新的外卖订单，请及时处理一七", "\(replayed)")
                    let receipts = watcher.receipts.filter { ["N-1", "R-1", "R-2", "R-none", "RL-1"].contains($0.order) }
                    #expect(receipts.count == 6 && receipts.allSatisfy { $0.isValid(with: Self.deviceKey) }, "\(receipts)")
                    #expect(listener.logLines(containing: "repeat forwarded", "order.id=R-1").count == 1, "\(listener.log)")
                    try await Self.waitUntilNothingPending(setup)
                }
            }
        }
    }

    /// A repeat that ends while the listener is down (stopped on the terminal meanwhile) still gets its receipt: owed
    /// on disk, and its end asked of the daemon when the listener is back.
    @Test func aRepeatThatEndsWhileTheListenerIsDownStillGetsItsReceipt() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                let setup = try PushSetup(broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1"))
                defer { setup.remove() }
                let first = try await setup.startListener()
                do {
                    try await setup.publish(
                        ["--order", "R-9", "--every", "3600", "--part", "order-urged"] + files.serviceOptions)
                    _ = try await daemon.waitUntilSpoken(["R-9#1"])
                    #expect(Self.pending(setup).map(\.order) == ["R-9"], "owed on disk")
                    _ = try await first.stop()
                } catch {
                    _ = try? await first.stop()
                    throw error
                }
                var stop = Request(op: "repeat", order: "R-9")
                stop.stop = true
                #expect(try await daemon.reply(stop).repeats?.first?.state == .stopped)
                let second = try await setup.startListener()
                do {
                    try await watcher.waitForReceipts(["R-9"], state: .stopped)
                    try await Self.waitUntilNothingPending(setup)
                    _ = try await second.stop()
                } catch {
                    _ = try? await second.stop()
                    throw error
                }
                let receipts = watcher.receipts.filter { $0.order == "R-9" }
                #expect(receipts.count == 1 && receipts[0].heard == 1 && receipts[0].isValid(with: Self.deviceKey), "\(receipts)")
            }
        }
    }

    /// A burst: every payment gets exactly one receipt, `heard`, each signed. Prints how long after its last sample
    /// left the device each receipt reached the service (heard_at → arrival, one machine's clock).
    @Test func aBurstGetsOneReceiptPerPayment() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let arrivals = Mutex<[String: Int64]>([:])
                let watcher = try await Self.watcher(broker) { message in
                    guard message.topic == Self.receiptTopic, let receipt = try? Receipt(payload: message.payload)
                    else { return }
                    let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
                    arrivals.withLock { $0[receipt.order] = now }
                }
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, extra: "enabled = false",
                    brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    let orders = (1...20).map { "BURST-\($0)" }
                    for order in orders { try await setup.publish(["--order", order, "--fen", "123"] + files.serviceOptions) }
                    try await watcher.waitForReceipts(orders, timeout: .seconds(60))
                    try await Self.waitUntilNothingPending(setup)
                    let receipts = watcher.receipts
                    #expect(receipts.count == orders.count, "\(receipts.map(\.order))")
                    #expect(Set(receipts.map(\.order)) == Set(orders))
                    #expect(receipts.allSatisfy { $0.state == .heard && $0.isValid(with: Self.deviceKey) })
                    let latencies = receipts.compactMap { receipt in
                        arrivals.withLock { $0[receipt.order] }.flatMap { arrived in receipt.heardAt.map { arrived - $0 } }
                    }.sorted()
                    let writes = listener.logLines(containing: "payment forwarded").compactMap { line in
                        line.split(separator: " ").first { $0.hasPrefix("receipt_ms=") }.flatMap {
                            Double($0.dropFirst("receipt_ms=".count))
                        }
                    }.sorted()
                    print(
                        "heard → receipt at the service, ms: median \(latencies[latencies.count / 2]), max "
                            + "\(latencies.last!); receipt entry written before the PUBACK, ms: median "
                            + "\(writes[writes.count / 2]), max \(writes.last!)")
                }
            }
        }
    }

    /// The broker's PUBACK for a receipt is lost and the connection cut just then (a dying link): the listener
    /// publishes the same receipt again on the next connection — the service may see it twice, byte for byte the
    /// same, which is why it de-duplicates — and once acknowledged it is never published again, not even after a
    /// restart.
    @Test func aReceiptWhosePubackIsLostIsSentAgainAndNeverAfterItsPuback() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let proxy = try PubackDropper(
                    brokerPort: broker.port, target: .brokerAcks(topicContaining: "/receipts"), action: .cut)
                defer { proxy.close() }
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                let setup = try PushSetup(
                    broker: broker, socket: daemon.socket, url: proxy.url, brokerExtra: files.credentials("T1"))
                defer { setup.remove() }
                let listener = try await setup.startListener()
                do {
                    try await setup.publish(["--order", "LOSTACK-1", "3.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["LOSTACK-1"])
                    try await Self.waitUntilNothingPending(setup)
                    #expect(proxy.dropped == 1)
                    _ = try await listener.stop()
                } catch {
                    _ = try? await listener.stop()
                    throw error
                }
                let copies = watcher.messages(on: Self.receiptTopic).filter { $0.text.contains("\"LOSTACK-1\"") }
                #expect(copies.count >= 1 && copies.count <= 2, "\(copies.map(\.text))")
                #expect(Set(copies.map(\.text)).count == 1, "two different receipts for one final state")

                // After the PUBACK: a restart publishes nothing more for it.
                let again = try await setup.startListener()
                do {
                    try await setup.publish(["--order", "LOSTACK-2", "4.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["LOSTACK-2"])
                    _ = try await again.stop()
                } catch {
                    _ = try? await again.stop()
                    throw error
                }
                let after = watcher.messages(on: Self.receiptTopic).filter { $0.text.contains("\"LOSTACK-1\"") }
                #expect(after.count == copies.count, "published again after its PUBACK")
            }
        }
    }

    /// The listener is killed (-9) after the broker took a receipt and before the PUBACK reached it: the receipt is
    /// still on disk, the restarted listener publishes it again (the same bytes), and then it is gone.
    @Test func aListenerKilledBetweenHeardAndPubackPublishesTheReceiptAgainOnce() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let proxy = try PubackDropper(
                    brokerPort: broker.port, target: .brokerAcks(topicContaining: "/receipts"), action: .hold)
                defer { proxy.close() }
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                let setup = try PushSetup(
                    broker: broker, socket: daemon.socket, url: proxy.url, brokerExtra: files.credentials("T1"))
                defer { setup.remove() }
                let first = try await setup.startListener()
                do {
                    try await setup.publish(["--order", "KILLED-1", "6.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["KILLED-1"])
                    #expect(proxy.dropped == 1)
                    _ = try await first.stop(signal: SIGKILL)
                } catch {
                    _ = try? await first.stop(signal: SIGKILL)
                    throw error
                }
                let kept = Self.pending(setup)
                #expect(kept.count == 1 && kept.first?.order == "KILLED-1" && kept.first?.receipt != nil, "\(kept)")

                let second = try await setup.startListener()
                do {
                    try await watcher.wait(for: "the receipt again") { messages in
                        messages.filter { $0.topic == Self.receiptTopic && $0.text.contains("\"KILLED-1\"") }.count == 2
                    }
                    try await Self.waitUntilNothingPending(setup)
                    _ = try await second.stop()
                } catch {
                    _ = try? await second.stop()
                    throw error
                }
                let copies = watcher.messages(on: Self.receiptTopic).filter { $0.text.contains("\"KILLED-1\"") }
                #expect(copies.count == 2)
                #expect(Set(copies.map(\.text)).count == 1, "two different receipts for one final state")
                #expect(try await daemon.jobs(order: "KILLED-1").count == 1)
            }
        }
    }

    /// The broker restarts (persistence on) while a receipt waits for its PUBACK: nothing is lost — the service's
    /// persistent session gets the receipt — and what it gets is one receipt, perhaps twice.
    @Test func aBrokerRestartBetweenHeardAndPubackLosesNoReceipt() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let proxy = try PubackDropper(
                    brokerPort: broker.port, target: .brokerAcks(topicContaining: "/receipts"), action: .hold)
                defer { proxy.close() }
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, url: proxy.url, brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    try await setup.publish(["--order", "BRESTART-1", "7.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["BRESTART-1"])
                    #expect(Self.pending(setup).count == 1)
                    try await broker.restart()
                    try await Self.waitUntilNothingPending(setup)
                    try await setup.publish(["--order", "BRESTART-2", "8.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["BRESTART-2"])
                    try await Self.waitUntilNothingPending(setup)
                    let copies = watcher.messages(on: Self.receiptTopic).filter { $0.text.contains("\"BRESTART-1\"") }
                    #expect(copies.count >= 1 && copies.count <= 2, "\(copies.map(\.text))")
                    #expect(Set(copies.map(\.text)).count == 1, "two different receipts for one final state")
                    #expect(listener.logLines(containing: "connected to the broker").count >= 2)
                }
            }
        }
    }

    /// The terminal loses power in the middle of an announcement: the listener and the daemon die (-9), the
    /// payment had been handed over and not yet heard. After the restart the daemon speaks it again in full, and the
    /// listener — which owed its receipt on disk — publishes one receipt, `heard`.
    @Test func aReceiptOwedAcrossAPowerLossIsPublishedOnceItIsHeard() async throws {
        try await withRig { rig in
            try await withDaemonSet { daemons, directory in
                let daemon = try await daemons.start(rig: rig, device: "pulse", directory: directory)
                try await FleetBroker.with { broker, files in
                    let watcher = try await Self.watcher(broker)
                    defer { watcher.stop() }
                    let setup = try PushSetup(
                        broker: broker, socket: daemon.socket, extra: "enabled = false",
                        brokerExtra: files.credentials("T1"))
                    defer { setup.remove() }
                    let listener = try await setup.startListener()
                    do {
                        // A long announcement, so that the payment is still waiting or playing at the cut.
                        try await setup.publish(
                            ["--order", "POWER-1", "--channel", "alipay", "98765432.10"] + files.serviceOptions)
                        try await listener.waitForLog("payment forwarded")
                        _ = try await listener.stop(signal: SIGKILL)
                    } catch {
                        _ = try? await listener.stop(signal: SIGKILL)
                        throw error
                    }
                    let owed = Self.pending(setup)
                    #expect(owed.count == 1 && owed.first?.receipt == nil, "\(owed)")
                    let cut = try await daemon.jobs(order: "POWER-1")
                    _ = try await daemon.stop(signal: SIGKILL)
                    #expect(cut.first?.state != .spoken, "heard before the cut: \(cut)")

                    let again = try await daemons.start(rig: rig, device: "pulse", directory: directory)
                    let restarted = try await setup.startListener()
                    do {
                        try await watcher.waitForReceipts(["POWER-1"], timeout: .seconds(60))
                        try await Self.waitUntilNothingPending(setup)
                        _ = try await restarted.stop()
                    } catch {
                        _ = try? await restarted.stop()
                        throw error
                    }
                    let receipts = watcher.receipts.filter { $0.order == "POWER-1" }
                    #expect(receipts.map(\.state) == [.heard], "\(receipts)")
                    let jobs = try await again.jobs(order: "POWER-1")
                    #expect(jobs.count == 1 && jobs.first?.state == .spoken, "\(jobs)")
                    #expect((jobs.first?.attempts ?? 0) >= 1)
                }
            }
        }
    }

    /// A full disk on the listener's side delays receipts and loses none: the payment is spoken at once, its
    /// receipt waits in memory, and is published once there is room again.
    @Test func aFullDiskDelaysReceiptsAndLosesNone() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                let setup = try PushSetup(broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1"))
                defer { setup.remove() }
                try FileManager.default.createDirectory(atPath: setup.stateDirectory, withIntermediateDirectories: true)
                let mounted = try await run(
                    "/bin/mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", setup.stateDirectory])
                guard mounted.status == 0 else { throw HarnessError("cannot mount a tmpfs: \(mounted)") }
                defer { _ = try? Self.unmount(setup.stateDirectory) }
                let listener = try await setup.startListener()
                do {
                    try await setup.publish(["--order", "FULL-0", "1.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["FULL-0"])
                    // Fill the disk.
                    let filler = "\(setup.stateDirectory)/filler"
                    _ = try await run("/bin/dd", ["if=/dev/zero", "of=\(filler)", "bs=4k", "count=1000"])
                    try await setup.publish(["--order", "FULL-1", "2.00"] + files.serviceOptions)
                    try await daemon.waitUntilSpoken(["FULL-1"])
                    try await listener.waitForLog("cannot write a pending receipt")
                    #expect(watcher.receipts.filter { $0.order == "FULL-1" }.isEmpty, "published before it was on disk")
                    try FileManager.default.removeItem(atPath: filler)
                    try await watcher.waitForReceipts(["FULL-1"])
                    try await listener.waitForLog("pending receipts are written again")
                    try await Self.waitUntilNothingPending(setup)
                    _ = try await listener.stop()
                } catch {
                    _ = try? await listener.stop()
                    throw error
                }
                #expect(watcher.receipts.filter { $0.order == "FULL-1" }.map(\.state) == [.heard])
            }
        }
    }

    static func unmount(_ path: String) throws {
        _ = path.withCString { umount2($0, Int32(MNT_DETACH)) }
    }

    /// Another device's credentials cannot publish this device's receipts (or its status): the broker's ACL drops
    /// them, and the service only ever sees the device's own.
    @Test func anotherDevicesCredentialsCannotPublishThisDevicesReceipts() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, _ in
                    try await watcher.waitForStatus(online: true)
                    // T2, with its own valid credentials, tries to publish a receipt and a status for T1.
                    let forged = Receipt(
                        device: "T1", order: "FORGED-1", state: .heard, job: 1, createdAt: 1, keyID: "k1"
                    ).signed(with: Self.deviceKey)
                    let file = "\(setup.directory)/forged.json"
                    try Data(forged.payload()).write(to: URL(fileURLWithPath: file))
                    let t2 = ["--username", "T2", "--password-file", files.passwordFile("T2")]
                    try await setup.publish(["--raw", file, "--topic", Self.receiptTopic] + t2)
                    let offline = "\(setup.directory)/offline.json"
                    try Data(#"{"device":"T1","online":false,"v":1}"#.utf8).write(to: URL(fileURLWithPath: offline))
                    try await setup.publish(["--raw", offline, "--topic", Self.statusTopic] + t2)
                    // The device's own receipt after them: had the broker passed T2's on, they would be there first.
                    try await setup.publish(["--order", "REAL-1", "1.00"] + files.serviceOptions)
                    try await watcher.waitForReceipts(["REAL-1"])
                    #expect(watcher.receipts.map(\.order) == ["REAL-1"])
                    let statuses = watcher.statuses
                    #expect(statuses.allSatisfy { $0.online }, "\(statuses)")
                    #expect(broker.log.contains("Denied PUBLISH from"), "the broker did not refuse it")
                }
            }
        }
    }

    // MARK: Status

    /// The retained status says what the fleet needs: online, version, the daemon, the audio device, the volume
    /// threshold, the queue, the last payment heard, the journal; it follows changes (a threshold set, a payment
    /// heard), and a service that subscribes later gets it at once (retained).
    @Test func theStatusSaysWhatTheFleetNeedsAndFollowsChanges() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, _ in
                    let first = try await watcher.waitForStatus(online: true)
                    #expect(first.device == "T1")
                    #expect(first.version == AnnounceVersion.current)
                    #expect(first.daemon?.state == "running")
                    #expect(first.audio?.device == "null")
                    #expect(first.queue?.depth == 0)
                    #expect(first.journal?.ok == true)
                    #expect(first.receipts?.pending == 0)

                    _ = try await daemon.reply(Request(op: "volume", threshold: 63))
                    try await watcher.wait(for: "the new threshold") { _ in
                        watcher.statuses.contains { $0.volume?.threshold == 63 }
                    }
                    try await setup.publish(["--order", "STATUS-1", "1.00"] + files.serviceOptions)
                    try await watcher.wait(for: "the last payment heard") { _ in
                        watcher.statuses.contains { $0.last_heard?.order == "STATUS-1" && $0.last_heard?.at != nil }
                    }
                    // Retained: a service that subscribes now gets the latest at once.
                    let late = try await Self.watcher(broker)
                    defer { late.stop() }
                    try await late.wait(for: "the retained status") { messages in
                        messages.contains { $0.topic == Self.statusTopic && $0.retain }
                    }
                    #expect(late.statuses.last?.last_heard?.order == "STATUS-1")
                }
            }
        }
    }

    /// The last will: the listener killed (-9) is `offline` on its status topic at once (the broker sees the
    /// connection close), and `online` again after its restart; one frozen (SIGSTOP, its connection silent) is
    /// `offline` within 1.5 keepalives; a clean stop says `offline` itself.
    @Test func offlineWhenKilledOrFrozenOnlineAgainWhenBack() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                let keepalive = 5.0
                let setup = try PushSetup(
                    broker: broker, socket: daemon.socket, daemon: "hold = \"1s\"\ntimeout = \"2s\"", keepalive: "5s",
                    brokerExtra: files.credentials("T1"))
                defer { setup.remove() }
                let listener = try await setup.startListener()
                try await watcher.waitForStatus(online: true)

                var seen = watcher.statuses.count
                let killed = ContinuousClock.now
                _ = try await listener.stop(signal: SIGKILL)
                let will = try await watcher.waitForStatus(
                    online: false, after: seen, timeout: .seconds(keepalive * 1.5))
                print("killed: offline after \(ContinuousClock.now - killed)")
                #expect(will.reason == "connection_lost")

                seen = watcher.statuses.count
                let restarted = try await setup.startListener()
                do {
                    try await watcher.waitForStatus(online: true, after: seen)

                    seen = watcher.statuses.count
                    let frozen = ContinuousClock.now
                    restarted.signal(SIGSTOP)
                    let silent: DeviceStatus
                    do {
                        // mosquitto 2.0 looks for silent clients every 5 s (more than 5 s after its last look), so
                        // up to 6 s more than 1.5 keepalives (docs/fleet.md).
                        silent = try await watcher.waitForStatus(
                            online: false, after: seen, timeout: .seconds(keepalive * 1.5 + 6 + 1))
                    } catch {
                        restarted.signal(SIGCONT)
                        throw error
                    }
                    let waited = ContinuousClock.now - frozen
                    print("frozen: offline after \(waited) (keepalive \(keepalive) s)")
                    #expect(silent.reason == "connection_lost")
                    restarted.signal(SIGCONT)
                    seen = watcher.statuses.count
                    try await watcher.waitForStatus(online: true, after: seen)

                    seen = watcher.statuses.count
                    _ = try await restarted.stop()
                } catch {
                    _ = try? await restarted.stop(signal: SIGKILL)
                    throw error
                }
                let stopped = try await watcher.waitForStatus(online: false, after: seen)
                #expect(stopped.reason == "stopped")
            }
        }
    }

    /// A status the broker refuses by closing the connection (here mosquitto's `max_packet_size`, which a status
    /// exceeds and receipts and payments do not) is logged once and set aside; payments and their receipts go on.
    @Test func aStatusTheBrokerRefusesIsLoggedOnceAndPaymentsGoOn() async throws {
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await FleetBroker.with(extra: "max_packet_size 280") { broker, files in
                let watcher = try await Self.watcher(broker)
                defer { watcher.stop() }
                try await withListener(
                    broker: broker, socket: daemon.socket, brokerExtra: files.credentials("T1")
                ) { setup, listener in
                    try await listener.waitForLog("the broker refuses the status")
                    // Then the minimal status (online, version), which fits.
                    let minimal = try await watcher.waitForStatus(online: true)
                    #expect(minimal.reason == "status_refused" && minimal.version == AnnounceVersion.current)
                    try await setup.publish(["--order", "BIG-1", "1.00"] + files.serviceOptions)
                    try await daemon.waitUntilSpoken(["BIG-1"])
                    try await watcher.waitForReceipts(["BIG-1"])
                    #expect(listener.logLines(containing: "the broker refuses").count == 1, "\(listener.log)")
                    // The broker disconnected the listener three times, so it said offline (the will) three times.
                    #expect(watcher.statuses.filter { !$0.online }.count == Outbox.strikeLimit)
                    #expect(watcher.statuses.filter { $0.online }.allSatisfy { $0.reason == "status_refused" })
                }
            }
        }
    }
}

extension PushSetup {
    /// Publishes raw bytes with extra publisher options (another account).
    func publishRaw(_ payload: String, options: [String]) async throws {
        let file = "\(directory)/raw-\(UInt32.random(in: 0...UInt32.max)).json"
        try payload.write(toFile: file, atomically: true, encoding: .utf8)
        try await publish(["--raw", file] + options)
    }
}

extension BackgroundProcess {
    func signal(_ signal: Int32) { _ = Glibc.kill(processID, signal) }
}
