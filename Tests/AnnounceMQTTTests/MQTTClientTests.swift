import AnnounceMQTT
import AnnounceTestSupport
import Foundation
import Testing

/// Drives clients' loops until `done` or the timeout (the clients are used from this thread only).
private func pump(_ clients: [MQTTClient], timeout: Duration = .seconds(10), until done: () -> Bool) throws {
    let deadline = ContinuousClock.now + timeout
    while !done() {
        guard ContinuousClock.now < deadline else { throw HarnessError("timed out") }
        for client in clients { try? client.loop(timeoutMilliseconds: 20) }
    }
}

/// A subscriber with a persistent session that records what it receives.
private final class Subscriber {
    let client: MQTTClient
    var connected = false
    var subscribed = false
    var sessionPresent = false
    var received: [MQTTMessage] = []
    var handler: (MQTTMessage) -> Void = { _ in }

    init(id: String, broker: Broker, topic: String) throws {
        client = try MQTTClient(clientID: id, cleanSession: false)
        client.onConnect = { [unowned self] code, present in
            connected = code == 0
            sessionPresent = present
            _ = try? client.subscribe(topic, qos: 1)
        }
        client.onSubscribe = { [unowned self] _, _ in subscribed = true }
        client.onDisconnect = { [unowned self] _ in
            connected = false
            subscribed = false
        }
        client.onMessage = { [unowned self] message in
            received.append(message)
            handler(message)
        }
        try client.connect(host: "127.0.0.1", port: broker.port, keepalive: 30)
        try pump([client]) { subscribed }
    }

    func reconnect() throws {
        try client.reconnect()
        try pump([client]) { subscribed }
    }
}

private func publish(_ broker: Broker, _ topic: String, _ text: String) throws {
    let publisher = try MQTTClient(clientID: "pub-\(UInt32.random(in: 0...UInt32.max))", cleanSession: true)
    var connected = false
    var acknowledged: Set<Int32> = []
    publisher.onConnect = { code, _ in connected = code == 0 }
    publisher.onPublish = { acknowledged.insert($0) }
    try publisher.connect(host: "127.0.0.1", port: broker.port, keepalive: 30)
    try pump([publisher]) { connected }
    let mid = try publisher.publish(topic: topic, payload: Array(text.utf8), qos: 1)
    try pump([publisher]) { acknowledged.contains(mid) }
    try publisher.disconnect()
    try? publisher.loop(timeoutMilliseconds: 50)
}

@Suite(.serialized)
struct MQTTClientTests {
    @Test func messageRoundTripsThroughARealBroker() async throws {
        try await withBroker { broker in
            let subscriber = try Subscriber(id: "rt", broker: broker, topic: "t/rt")
            try publish(broker, "t/rt", "hello 到账")
            try pump([subscriber.client]) { !subscriber.received.isEmpty }
            #expect(subscriber.received.map(\.topic) == ["t/rt"])
            #expect(String(decoding: subscriber.received[0].payload, as: UTF8.self) == "hello 到账")
            #expect(subscriber.received[0].qos == 1)
        }
    }

    /// The property the push listener is built on: returning from onMessage acknowledges; abandoning the connection
    /// inside onMessage does not, and the broker redelivers on the next connection of the session.
    @Test func abandoningInsideOnMessageLeavesTheMessageUnacknowledged() async throws {
        try await withBroker { broker in
            let subscriber = try Subscriber(id: "hold", broker: broker, topic: "t/hold")
            subscriber.handler = { _ in subscriber.client.abandonConnection() }
            try publish(broker, "t/hold", "first")
            try pump([subscriber.client]) { !subscriber.received.isEmpty && !subscriber.connected }
            #expect(subscriber.received.count == 1)

            // Reconnect, acknowledging this time: the broker sends "first" again.
            subscriber.handler = { _ in }
            try subscriber.reconnect()
            #expect(subscriber.sessionPresent, "the persistent session was not kept")
            try pump([subscriber.client]) { subscriber.received.count >= 2 }
            #expect(subscriber.received.map { String(decoding: $0.payload, as: UTF8.self) } == ["first", "first"])

            // Acknowledged now: another reconnection brings nothing more.
            try subscriber.client.disconnect()
            try pump([subscriber.client]) { !subscriber.connected }
            try subscriber.reconnect()
            try publish(broker, "t/hold", "second")
            try pump([subscriber.client]) { subscriber.received.count >= 3 }
            #expect(
                subscriber.received.map { String(decoding: $0.payload, as: UTF8.self) } == ["first", "first", "second"])
        }
    }

    /// While the subscriber is away, its persistent session collects QoS 1 messages; they arrive on reconnection.
    @Test func persistentSessionKeepsMessagesWhileAway() async throws {
        try await withBroker { broker in
            let subscriber = try Subscriber(id: "away", broker: broker, topic: "t/away")
            try subscriber.client.disconnect()
            try pump([subscriber.client]) { !subscriber.connected }
            try publish(broker, "t/away", "one")
            try publish(broker, "t/away", "two")
            try subscriber.reconnect()
            try pump([subscriber.client]) { subscriber.received.count >= 2 }
            #expect(subscriber.received.map { String(decoding: $0.payload, as: UTF8.self) } == ["one", "two"])
        }
    }

    @Test func connectionRefusedByTheBrokerIsReported() async throws {
        try await withBroker(listener: "listener PORT 127.0.0.1\nallow_anonymous false") { broker in
            let client = try MQTTClient(clientID: "anon", cleanSession: true)
            var code: Int32?
            client.onConnect = { rc, _ in code = rc }
            try client.connect(host: "127.0.0.1", port: broker.port, keepalive: 30)
            try pump([client]) { code != nil }
            #expect(code == 5, "expected CONNACK 5 (not authorised), got \(String(describing: code))")
            #expect(MQTTClient.connackText(5).contains("not authorised"))
        }
    }

    @Test func nothingListeningIsAConnectionError() async throws {
        let port = try Broker.freePort()
        let client = try MQTTClient(clientID: "nobody", cleanSession: true)
        var failure: MosquittoError?
        do {
            try client.connect(host: "127.0.0.1", port: port, keepalive: 30)
            let deadline = ContinuousClock.now + .seconds(10)
            while failure == nil, ContinuousClock.now < deadline {
                do { try client.loop(timeoutMilliseconds: 50) } catch { failure = error }
            }
        } catch {
            failure = error
        }
        let error = try #require(failure)
        #expect(error.isConnectionLost, "\(error)")
        #expect(error.function.hasPrefix("mosquitto_"))
    }

    @Test func brokerURLs() throws {
        #expect(
            try MQTTEndpoint(url: "mqtt://broker.example")
                == MQTTEndpoint(host: "broker.example", port: 1883, tls: false))
        #expect(
            try MQTTEndpoint(url: "mqtts://broker.example")
                == MQTTEndpoint(host: "broker.example", port: 8883, tls: true))
        #expect(
            try MQTTEndpoint(url: "mqtt://127.0.0.1:18830/") == MQTTEndpoint(host: "127.0.0.1", port: 18830, tls: false)
        )
        #expect(try MQTTEndpoint(url: "mqtts://[::1]:8884") == MQTTEndpoint(host: "::1", port: 8884, tls: true))
        #expect(try MQTTEndpoint(url: "mqtts://[::1]:8884").description == "mqtts://[::1]:8884")
        for bad in [
            "http://x", "mqtt://", "mqtt://h:0", "mqtt://h:99999", "mqtt://user:pw@h", "mqtt://h/topic", "mqtt://[::1",
        ] {
            #expect(throws: MQTTEndpointError.self, "\(bad)") { try MQTTEndpoint(url: bad) }
        }
    }
}
