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

/// Publishes one message with QoS 1 and waits for the broker's PUBACK: the publisher tool (`announce-push
/// publish`) for installers and tests. A clean session with a client id of its own, so it never takes over the
/// listener's session.
public struct Publisher {
    public var broker: MQTTEndpoint
    public var clientID: String
    public var username: String?
    public var password: String?
    public var tls: MQTTTLS
    public var timeoutSeconds: Double

    public init(
        broker: MQTTEndpoint, clientID: String = "announce-publish-\(getpid())", username: String? = nil,
        password: String? = nil, tls: MQTTTLS = MQTTTLS(), timeoutSeconds: Double = 10
    ) {
        self.broker = broker
        self.clientID = clientID
        self.username = username
        self.password = password
        self.tls = tls
        self.timeoutSeconds = timeoutSeconds
    }

    /// Uses the broker settings of a listener's configuration (same broker, same credentials and TLS files).
    public init(configuration: PushConfiguration, timeoutSeconds: Double = 10) {
        self.init(
            broker: configuration.broker, username: configuration.username, password: configuration.password,
            tls: configuration.tls, timeoutSeconds: timeoutSeconds)
    }

    public func publish(topic: String, payload: [UInt8]) throws(AnnounceError) {
        signal(SIGPIPE, SIG_IGN)
        enum Step {
            case connecting, connected, published
            case failed(String)
        }
        final class Progress {
            var step = Step.connecting
            var mid: Int32 = -1
        }
        let progress = Progress()
        do {
            let client = try MQTTClient(clientID: clientID, cleanSession: true)
            if let username { try client.setCredentials(username: username, password: password) }
            if broker.tls { try client.setTLS(tls) }
            client.onConnect = { code, _ in
                progress.step = code == 0 ? .connected : .failed("the broker refused: \(MQTTClient.connackText(code))")
            }
            client.onPublish = { mid in if mid == progress.mid { progress.step = .published } }
            try client.connect(host: broker.host, port: broker.port, keepalive: 30)
            let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
            while ContinuousClock.now < deadline {
                try client.loop(timeoutMilliseconds: 100)
                switch progress.step {
                case .connecting: continue
                case .connected where progress.mid < 0:
                    progress.mid = try client.publish(topic: topic, payload: payload, qos: 1)
                case .connected: continue
                case .published:
                    try client.disconnect()
                    try? client.loop(timeoutMilliseconds: 100)
                    return
                case .failed(let reason):
                    throw AnnounceError(.unavailable, reason)
                }
            }
            throw AnnounceError(.unavailable, "no PUBACK from \(broker) within \(timeoutSeconds) s")
        } catch let error as AnnounceError {
            throw error
        } catch {
            throw AnnounceError(.unavailable, "cannot publish to \(broker)", cause: "\(error)")
        }
    }
}

extension AnnounceError.Code {
    /// The broker could not be reached or did not acknowledge (publisher tool).
    public static let unavailable = AnnounceError.Code(rawValue: "unavailable")
}
