/// Where a broker is: `mqtt://host[:port]` (plain TCP, default port 1883) or `mqtts://host[:port]` (TLS, 8883).
/// IPv6 literals go in brackets: `mqtt://[::1]:1883`.
public struct MQTTEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var tls: Bool

    public init(host: String, port: Int, tls: Bool) {
        self.host = host
        self.port = port
        self.tls = tls
    }

    /// Parses a broker URL; the error message says what is wrong with it.
    public init(url: String) throws(MQTTEndpointError) {
        let rest: Substring
        if url.hasPrefix("mqtt://") {
            tls = false
            rest = url.dropFirst("mqtt://".count)
        } else if url.hasPrefix("mqtts://") {
            tls = true
            rest = url.dropFirst("mqtts://".count)
        } else {
            throw MQTTEndpointError("broker URL \"\(url)\" must start with mqtt:// or mqtts://")
        }
        var authority = rest
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@"), !authority.contains("?") else {
            throw MQTTEndpointError("broker URL \"\(url)\" must be scheme://host[:port] (credentials go in the config)")
        }
        var hostPart = authority
        var portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else {
                throw MQTTEndpointError("broker URL \"\(url)\" has an unclosed [ in its host")
            }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") {
                portPart = after.dropFirst()
            } else if !after.isEmpty {
                throw MQTTEndpointError("broker URL \"\(url)\" has junk after its host")
            }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
        }
        guard !hostPart.isEmpty else { throw MQTTEndpointError("broker URL \"\(url)\" has no host") }
        host = String(hostPart)
        if let portPart {
            guard let number = Int(portPart), (1...65535).contains(number) else {
                throw MQTTEndpointError("broker URL \"\(url)\" has an invalid port \"\(portPart)\"")
            }
            port = number
        } else {
            port = tls ? 8883 : 1883
        }
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(tls ? "mqtts" : "mqtt")://\(shownHost):\(port)"
    }
}

public struct MQTTEndpointError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
