#if canImport(Glibc)
import Glibc
#endif

/// A TCP address to listen on, written `HOST:PORT`: `127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`. The host is
/// an IP address (no name is looked up: a start must not wait for DNS); `localhost` and a bare `:PORT` or `PORT`
/// mean the IPv4 loopback, which is the default because the metrics carry no authentication. Port 0 asks the
/// kernel for a free port (tests).
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public static let loopback = "127.0.0.1"

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Reads `text`; an unusable address is a `bad_configuration` error saying how to write one.
    public init(parsing text: String) throws(AnnounceError) {
        func refuse(_ problem: String) -> AnnounceError {
            AnnounceError(
                .badConfiguration,
                "\"\(text)\" \(problem); write HOST:PORT with an IP address, such as 127.0.0.1:9464 or [::1]:9464")
        }
        var hostPart: Substring
        var portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw refuse("has no closing ]") }
            hostPart = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw refuse("has no :PORT after the address") }
            portPart = rest.dropFirst()
            guard hostPart.contains(":") else { throw refuse("has an IPv4 address in brackets") }
        } else if let colon = text.lastIndex(of: ":") {
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
            if hostPart.contains(":") { throw refuse("is an IPv6 address without brackets") }
        } else {
            hostPart = ""
            portPart = Substring(text)
        }
        if hostPart.isEmpty || hostPart == "localhost" { hostPart = Substring(Self.loopback) }
        guard let port = Int(portPart), (0...65_535).contains(port) else {
            throw refuse("has no port 0…65535")
        }
        guard Self.isIPAddress(String(hostPart)) else {
            throw refuse("does not name an IP address (host names are not looked up)")
        }
        self.host = String(hostPart)
        self.port = port
    }

    /// Whether the host is a loopback address (127.0.0.0/8 or ::1): reachable from this machine only.
    public var isLoopback: Bool { host.hasPrefix("127.") || host == "::1" }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    static func isIPAddress(_ text: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
    }
}
