import CMosquitto

#if canImport(Glibc)
    import Glibc
#endif

/// A message received from the broker.
public struct MQTTMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: Int32
    public var retain: Bool
    /// The packet id (QoS > 0), as the broker numbered it on this connection.
    public var mid: Int32

    public init(topic: String, payload: [UInt8], qos: Int32, retain: Bool, mid: Int32) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.mid = mid
    }
}

/// TLS settings: the CA that signs the broker's certificate (a file, else a folder, else the system's store)
/// and an optional client certificate with its key.
public struct MQTTTLS: Sendable, Equatable {
    public var caFile: String?
    public var caPath: String?
    public var certFile: String?
    public var keyFile: String?

    public init(caFile: String? = nil, caPath: String? = nil, certFile: String? = nil, keyFile: String? = nil) {
        self.caFile = caFile
        self.caPath = caPath
        self.certFile = certFile
        self.keyFile = keyFile
    }
}

/// One libmosquitto client (`struct mosquitto`), driven by the thread that owns it: that thread calls
/// ``loop(timeoutMilliseconds:)`` and the callbacks (`onConnect`, `onMessage` …) run inside it.
///
/// Acknowledgement: the client is put in libmosquitto's threaded mode (`mosquitto_threaded_set`). In its
/// default mode libmosquitto 2.0.11 writes a QoS 1 PUBACK to the socket *before* it calls `on_message`, so a
/// message the application never handled could already be acknowledged. In threaded mode the PUBACK is only
/// queued, and the next ``loop(timeoutMilliseconds:)`` writes it, after `onMessage` has returned. So
/// `onMessage` returning means "acknowledge", and ``abandonConnection()`` called inside `onMessage` means "do
/// not": the connection drops before the PUBACK is written and the broker redelivers the message (and every
/// later unacknowledged one) on the next connection of the same persistent session.
public final class MQTTClient {
    private let handle: OpaquePointer
    public let clientID: String

    /// CONNACK: the return code (0 accepted, see ``connackText(_:)``) and whether the broker still had the session.
    public var onConnect: (_ code: Int32, _ sessionPresent: Bool) -> Void = { _, _ in }
    /// The connection ended: 0 after ``disconnect()``, anything else when it was lost.
    public var onDisconnect: (_ code: Int32) -> Void = { _ in }
    /// A message arrived. For QoS 1 its PUBACK is written after this returns (see the type's documentation).
    public var onMessage: (MQTTMessage) -> Void = { _ in }
    /// The broker acknowledged a message this client published (QoS 1: PUBACK received).
    public var onPublish: (_ mid: Int32) -> Void = { _ in }
    /// SUBACK: the QoS granted for each topic of the request (128 means refused).
    public var onSubscribe: (_ mid: Int32, _ granted: [Int32]) -> Void = { _, _ in }
    /// libmosquitto's own log lines (`MOSQ_LOG_*` level).
    public var onLog: (_ level: Int32, _ text: String) -> Void = { _, _ in }

    private static let initialised: Bool = {
        mosquitto_lib_init()
        return true
    }()

    /// A client with a persistent session unless `cleanSession` (the broker keeps its subscriptions and the QoS 1
    /// messages that arrive while it is away, keyed by `clientID`).
    public init(clientID: String, cleanSession: Bool) throws(MosquittoError) {
        precondition(Self.initialised)
        guard let handle = mosquitto_new(clientID, cleanSession, nil) else {
            throw MosquittoError(function: "mosquitto_new", code: Int32(MOSQ_ERR_ERRNO.rawValue))
        }
        self.handle = handle
        self.clientID = clientID
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        // Threaded mode although one thread drives the client: PUBACK after on_message (see above).
        try check(mosquitto_threaded_set(handle, true), "mosquitto_threaded_set")
        try check(
            mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311),
            "mosquitto_int_option(PROTOCOL_VERSION)")
        installCallbacks()
    }

    deinit { mosquitto_destroy(handle) }

    private static func client(_ userdata: UnsafeMutableRawPointer?) -> MQTTClient? {
        userdata.map { Unmanaged<MQTTClient>.fromOpaque($0).takeUnretainedValue() }
    }

    private func installCallbacks() {
        mosquitto_connect_with_flags_callback_set(handle) { _, userdata, code, flags in
            MQTTClient.client(userdata)?.onConnect(code, flags & 1 == 1)
        }
        mosquitto_disconnect_callback_set(handle) { _, userdata, code in
            MQTTClient.client(userdata)?.onDisconnect(code)
        }
        mosquitto_message_callback_set(handle) { _, userdata, message in
            guard let client = MQTTClient.client(userdata), let message else { return }
            let m = message.pointee
            let payload: [UInt8] =
                if let bytes = m.payload, m.payloadlen > 0 {
                    Array(UnsafeRawBufferPointer(start: bytes, count: Int(m.payloadlen)))
                } else {
                    []
                }
            let topic = m.topic.map { String(cString: $0) } ?? ""
            client.onMessage(MQTTMessage(topic: topic, payload: payload, qos: m.qos, retain: m.retain, mid: m.mid))
        }
        mosquitto_publish_callback_set(handle) { _, userdata, mid in
            MQTTClient.client(userdata)?.onPublish(mid)
        }
        mosquitto_subscribe_callback_set(handle) { _, userdata, mid, count, granted in
            let list = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(count))) } ?? []
            MQTTClient.client(userdata)?.onSubscribe(mid, list)
        }
        mosquitto_log_callback_set(handle) { _, userdata, level, text in
            MQTTClient.client(userdata)?.onLog(level, text.map { String(cString: $0) } ?? "")
        }
    }

    public func setCredentials(username: String, password: String?) throws(MosquittoError) {
        try check(mosquitto_username_pw_set(handle, username, password), "mosquitto_username_pw_set")
    }

    /// Enables TLS with certificate verification of the broker (hostname included). Without a CA file or
    /// folder, the system's CA store (/etc/ssl/certs) is used.
    public func setTLS(_ tls: MQTTTLS) throws(MosquittoError) {
        let caPath = tls.caFile == nil && tls.caPath == nil ? "/etc/ssl/certs" : tls.caPath
        try check(
            mosquitto_tls_set(handle, tls.caFile, caPath, tls.certFile, tls.keyFile, nil), "mosquitto_tls_set")
        // 1 = SSL_VERIFY_PEER; TLS 1.2 or later.
        try check(mosquitto_tls_opts_set(handle, 1, "tlsv1.2", nil), "mosquitto_tls_opts_set")
    }

    /// The last will: a message the broker publishes for this client when its connection ends without a
    /// DISCONNECT (a crash, kill -9, a dead link noticed after 1.5 keepalives). Set before connecting; kept for
    /// later connections of this client.
    public func setWill(topic: String, payload: [UInt8], qos: Int32, retain: Bool) throws(MosquittoError) {
        let code = payload.withUnsafeBytes { bytes in
            mosquitto_will_set(handle, topic, Int32(bytes.count), bytes.baseAddress, qos, retain)
        }
        try check(code, "mosquitto_will_set")
    }

    /// Starts connecting without waiting for the TCP connection: ``loop(timeoutMilliseconds:)`` completes it and
    /// `onConnect` reports the broker's answer.
    public func connect(host: String, port: Int, keepalive: Int) throws(MosquittoError) {
        try check(mosquitto_connect_async(handle, host, Int32(port), Int32(keepalive)), "mosquitto_connect_async")
    }

    /// Starts a new connection to the same broker with the same settings (and session).
    public func reconnect() throws(MosquittoError) {
        try check(mosquitto_reconnect_async(handle), "mosquitto_reconnect_async")
    }

    /// Waits up to `timeoutMilliseconds` for network traffic and handles it (callbacks run here), sends what is
    /// queued, and keeps the connection alive (PINGREQ). Throws when the connection is gone.
    public func loop(timeoutMilliseconds: Int) throws(MosquittoError) {
        try check(mosquitto_loop(handle, Int32(timeoutMilliseconds), 1), "mosquitto_loop")
    }

    /// Subscribes to a topic filter; `onSubscribe` reports the granted QoS. Returns the request's mid.
    @discardableResult
    public func subscribe(_ topic: String, qos: Int32) throws(MosquittoError) -> Int32 {
        var mid: Int32 = 0
        try check(mosquitto_subscribe(handle, &mid, topic, qos), "mosquitto_subscribe")
        return mid
    }

    /// Queues a message for the broker; with QoS 1, `onPublish` reports its PUBACK. Returns its mid.
    @discardableResult
    public func publish(topic: String, payload: [UInt8], qos: Int32, retain: Bool = false) throws(MosquittoError)
        -> Int32
    {
        var mid: Int32 = 0
        let code = payload.withUnsafeBytes { bytes in
            mosquitto_publish(handle, &mid, topic, Int32(bytes.count), bytes.baseAddress, qos, retain)
        }
        try check(code, "mosquitto_publish")
        return mid
    }

    /// Sends DISCONNECT (the broker keeps a persistent session) and closes the connection; the following loops
    /// send it and then report `onDisconnect(0)`.
    public func disconnect() throws(MosquittoError) {
        try check(mosquitto_disconnect(handle), "mosquitto_disconnect")
    }

    /// Drops the connection at once without sending anything more, so nothing queued (in particular the PUBACK
    /// of the message being handled) reaches the broker. The next loop reports the connection lost.
    public func abandonConnection() {
        let socket = mosquitto_socket(handle)
        if socket >= 0 { _ = shutdown(socket, Int32(SHUT_RDWR)) }
    }

    /// The broker's text for a CONNACK code (e.g. 5: "Connection Refused: not authorised.").
    public static func connackText(_ code: Int32) -> String {
        String(cString: mosquitto_connack_string(code))
    }
}
