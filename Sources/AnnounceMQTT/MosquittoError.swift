import CMosquitto

#if canImport(Glibc)
    import Glibc
#endif

/// A libmosquitto call that failed: the function, its `MOSQ_ERR_*` code and the library's text for it
/// (`strerror(errno)` when the code is `MOSQ_ERR_ERRNO`).
public struct MosquittoError: Error, Sendable, Equatable, CustomStringConvertible {
    public var function: String
    public var code: Int32
    public var message: String

    public init(function: String, code: Int32, message: String) {
        self.function = function
        self.code = code
        self.message = message
    }

    /// The error for a `MOSQ_ERR_*` return code; `errno` must still be the call's.
    init(function: String, code: Int32) {
        let savedErrno = errno
        var text = String(cString: mosquitto_strerror(code))
        if code == Int32(MOSQ_ERR_ERRNO.rawValue) {
            text = String(cString: strerror(savedErrno))
        }
        self.init(function: function, code: code, message: text)
    }

    public var description: String { "\(function): \(message) (\(code))" }

    /// libmosquitto's text for a `MOSQ_ERR_*` code (e.g. the code `onDisconnect` reports).
    public static func text(_ code: Int32) -> String { String(cString: mosquitto_strerror(code)) }

    /// Whether a code `onDisconnect` (or a failed loop) reports says the broker closed the connection: the stream
    /// ended (`MOSQ_ERR_CONN_LOST`), rather than a network error or a keepalive running out. Over MQTT 3.1.1 it is
    /// all a client sees when another client takes its session over (its client id), as when the broker shuts
    /// down or refuses what was published.
    public static func isClosedByBroker(_ code: Int32) -> Bool { code == Int32(MOSQ_ERR_CONN_LOST.rawValue) }

    /// Whether the code says the connection is gone (as opposed to a misuse or a resource problem).
    public var isConnectionLost: Bool {
        [MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST, MOSQ_ERR_ERRNO, MOSQ_ERR_KEEPALIVE, MOSQ_ERR_TLS, MOSQ_ERR_PROTOCOL]
            .map { Int32($0.rawValue) }.contains(code)
    }
}

/// Turns a libmosquitto return code into a thrown ``MosquittoError`` (`MOSQ_ERR_SUCCESS` returns).
@inline(__always)
func check(_ code: Int32, _ function: String) throws(MosquittoError) {
    guard code == Int32(MOSQ_ERR_SUCCESS.rawValue) else { throw MosquittoError(function: function, code: code) }
}
