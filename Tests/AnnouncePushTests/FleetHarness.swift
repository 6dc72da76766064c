import AnnounceMQTT
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Synchronization

/// A broker as a fleet would run it: no anonymous clients, a password per device and for the payment service, and
/// the ACL of docs/fleet.md (each device reads its own payments and publishes only its own status and receipts;
/// the service publishes payments and reads statuses and receipts).
enum FleetBroker {
    static let users = ["T1": "pw-T1", "T2": "pw-T2", "payment-service": "pw-service"]

    /// The ACL exactly as docs/fleet.md gives it (the test `fleetDocumentsTheACLTheTestsUse` holds them equal).
    static let acl = """
        # each device (user name = device id) reads its own payments, publishes only its own status and receipts
        pattern read announce/%u/payments
        pattern write announce/%u/status
        pattern write announce/%u/receipts
        # the payment service publishes payments and reads every device's status and receipts
        user payment-service
        topic write announce/+/payments
        topic read announce/+/status
        topic read announce/+/receipts
        """

    /// Runs `body` with such a broker (persistence on). `extra` is more mosquitto configuration.
    static func with<T>(extra: String = "", _ body: (Broker, FleetFiles) async throws -> T) async throws -> T {
        let files = try await FleetFiles.make()
        defer { files.remove() }
        let listener = """
            listener PORT 127.0.0.1
            allow_anonymous false
            password_file \(files.passwords)
            acl_file \(files.aclFile)
            """
        return try await withBroker(listener: listener, extraConfiguration: extra) { broker in
            try await body(broker, files)
        }
    }
}

/// The password and ACL files of a ``FleetBroker``, and a password file per user for the tools.
final class FleetFiles: Sendable {
    let directory: String
    var passwords: String { "\(directory)/passwd" }
    var aclFile: String { "\(directory)/acl" }

    private init(directory: String) { self.directory = directory }

    static func make() async throws -> FleetFiles {
        let files = FleetFiles(directory: try Paths.temporaryDirectory("fleet"))
        try (FleetBroker.acl + "\n").write(toFile: files.aclFile, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: files.passwords, contents: Data())
        for (user, password) in FleetBroker.users {
            let made = try await run("/usr/bin/mosquitto_passwd", ["-b", files.passwords, user, password])
            guard made.status == 0 else { throw HarnessError("mosquitto_passwd failed for \(user): \(made)") }
            try password.write(toFile: files.passwordFile(user), atomically: true, encoding: .utf8)
        }
        return files
    }

    func passwordFile(_ user: String) -> String { "\(directory)/\(user).pw" }

    /// `[broker]` lines for a device's listener.
    func credentials(_ user: String) -> String {
        "username = \"\(user)\"\npassword_file = \"\(passwordFile(user))\""
    }

    /// Publisher-tool options for the payment service's account.
    var serviceOptions: [String] {
        ["--username", "payment-service", "--password-file", passwordFile("payment-service")]
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// The payment service's side: a client of its own (persistent session, QoS 1) subscribed to topics, recording
/// what arrives. Its libmosquitto client lives on a thread of its own; `onMessage` runs there as each message
/// arrives (before it is recorded).
final class TopicWatcher: Sendable {
    struct Message: Sendable {
        var topic: String
        var payload: [UInt8]
        var retain: Bool
        var text: String { String(decoding: payload, as: UTF8.self) }
    }

    private struct State {
        var messages: [Message] = []
        var subscribed = false
        var stopping = false
        var finished = false
        /// What the client last heard: the CONNACK code, or a failure.
        var trace: [String] = []
    }

    private let state = Mutex(State())

    init(
        broker: Broker, user: String, password: String, topics: [String],
        onMessage: @escaping @Sendable (Message) -> Void = { _ in }
    ) async throws {
        let id = "watcher-\(UInt32.random(in: 0...UInt32.max))"
        let port = broker.port
        Thread.detachNewThread { [self] in
            run(id: id, port: port, user: user, password: password, topics: topics, onMessage: onMessage)
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while !state.withLock({ $0.subscribed }) {
            guard ContinuousClock.now < deadline else {
                throw HarnessError("the watcher did not subscribe: \(state.withLock { $0.trace })\n\(broker.log)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The client's thread: connects, subscribes, reconnects after a broker restart, until stopped.
    private func run(
        id: String, port: Int, user: String, password: String, topics: [String],
        onMessage: @escaping @Sendable (Message) -> Void
    ) {
        defer { state.withLock { $0.finished = true } }
        guard let client = try? MQTTClient(clientID: id, cleanSession: false),
            (try? client.setCredentials(username: user, password: password)) != nil
        else { return }
        var connected = false
        client.onConnect = { [self] code, _ in
            state.withLock { $0.trace.append("CONNACK \(code)") }
            connected = code == 0
            guard connected else { return }
            for topic in topics { _ = try? client.subscribe(topic, qos: 1) }
        }
        client.onSubscribe = { [self] _, _ in state.withLock { $0.subscribed = true } }
        client.onMessage = { [self] message in
            let recorded = Message(topic: message.topic, payload: message.payload, retain: message.retain)
            onMessage(recorded)
            state.withLock { $0.messages.append(recorded) }
        }
        // Connecting: a connect or reconnect was started and neither its CONNACK nor a failure came yet.
        var connecting = false
        var started = false
        client.onDisconnect = { _ in
            connected = false
            connecting = false
        }
        while !state.withLock({ $0.stopping }) {
            if !connected && !connecting {
                if started {
                    connecting = (try? client.reconnect()) != nil
                } else {
                    started = (try? client.connect(host: "127.0.0.1", port: port, keepalive: 5)) != nil
                    connecting = started
                }
            }
            do {
                try client.loop(timeoutMilliseconds: 50)
                if connected { connecting = false }
            } catch {
                state.withLock { $0.trace.append("\(error)") }
                connected = false
                connecting = false
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        try? client.disconnect()
        try? client.loop(timeoutMilliseconds: 50)
    }

    func stop() {
        state.withLock { $0.stopping = true }
    }

    var messages: [Message] { state.withLock { $0.messages } }

    func messages(on topic: String) -> [Message] { messages.filter { $0.topic == topic } }

    /// The receipts received so far, in order.
    var receipts: [Receipt] {
        messages.filter { $0.topic.hasSuffix("/receipts") }.compactMap { try? Receipt(payload: $0.payload) }
    }

    /// The statuses received so far, in order.
    var statuses: [DeviceStatus] {
        messages.filter { $0.topic.hasSuffix("/status") }.compactMap {
            try? JSONDecoder().decode(DeviceStatus.self, from: Data($0.payload))
        }
    }

    /// Waits until `condition` holds for what was received; throws after `timeout` with what was received.
    @discardableResult
    func wait(
        for what: String, timeout: Duration = .seconds(30), _ condition: ([Message]) -> Bool
    ) async throws -> [Message] {
        let arrived = try await eventuallyValue(timeout: timeout) { () -> [Message]? in
            let messages = self.messages
            return condition(messages) ? messages : nil
        }
        if let arrived { return arrived }
        throw HarnessError(
            "\(what) did not arrive within \(timeout); received:\n\(messages.map(\.text).joined(separator: "\n"))")
    }

    /// Waits until receipts for `orders` (each in `state`, if given) have arrived; returns them.
    @discardableResult
    func waitForReceipts(
        _ orders: [String], state: Receipt.State? = nil, timeout: Duration = .seconds(30)
    ) async throws -> [Receipt] {
        try await wait(for: "receipts for \(orders)", timeout: timeout) { _ in
            let have = receipts.filter { state == nil || $0.state == state }.map(\.order)
            return orders.allSatisfy(have.contains)
        }
        return receipts
    }

    /// Waits for a status message with `online` as given (the newest one, after `after` messages on the topic).
    @discardableResult
    func waitForStatus(
        online: Bool, after count: Int = 0, timeout: Duration = .seconds(30)
    ) async throws -> DeviceStatus {
        try await wait(for: "a status with online=\(online)", timeout: timeout) { _ in
            statuses.dropFirst(count).contains { $0.online == online }
        }
        return statuses.dropFirst(count).last { $0.online == online }!
    }
}
