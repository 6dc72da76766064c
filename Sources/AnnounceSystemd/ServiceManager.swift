import CSystemd
import Glibc

/// A state change told to the service manager (one `KEY=VALUE` line of `sd_notify`).
public enum ServiceState: Sendable, Equatable {
    /// Start-up finished: the socket is served (`READY=1`). A `Type=notify` unit is "active" from here.
    case ready
    /// Re-reading configuration (`RELOADING=1`); send `.ready` when done.
    case reloading
    /// Shutting down (`STOPPING=1`).
    case stopping
    /// Still alive (`WATCHDOG=1`).
    case watchdog
    /// Free-form status shown by `systemctl status` (`STATUS=…`), one line.
    case status(String)

    var assignment: String {
        switch self {
        case .ready: "READY=1"
        case .reloading: "RELOADING=1"
        case .stopping: "STOPPING=1"
        case .watchdog: "WATCHDOG=1"
        case .status(let text):
            // A newline would start a new assignment: keep the status on one line.
            "STATUS=" + String(text.map { $0.isNewline ? " " : $0 })
        }
    }
}

/// A socket handed over by socket activation (`sd_listen_fds`).
public struct PassedSocket: Sendable, Equatable {
    /// The descriptor (3, 4, …); close-on-exec is set.
    public let descriptor: Int32
    /// A listening `AF_UNIX` stream socket: what a Unix socket server can adopt.
    public let isUnixStreamListener: Bool
    /// The path it is bound to, `@name` for an abstract socket, nil if unnamed or not `AF_UNIX`.
    public let path: String?
}

/// The daemon's side of the service manager protocol, through libsystemd. Every call is harmless when the
/// process was not started by systemd: nothing is sent and nothing was passed.
public enum ServiceManager {
    /// Tells the service manager about state changes. Returns false when no manager listens
    /// (`$NOTIFY_SOCKET` unset): nothing was sent.
    @discardableResult
    public static func notify(_ states: [ServiceState]) throws(SystemdError) -> Bool {
        let message = states.map(\.assignment).joined(separator: "\n")
        return try systemdCheck("sd_notify") { sd_notify(0, message) } > 0
    }

    @discardableResult
    public static func notify(_ states: ServiceState...) throws(SystemdError) -> Bool {
        try notify(states)
    }

    /// The watchdog timeout set for this process (`WatchdogSec=`), or nil when the manager expects no pings.
    /// Ping at least twice per timeout.
    public static func watchdogTimeout() throws(SystemdError) -> Duration? {
        var microseconds: UInt64 = 0
        let enabled = try systemdCheck("sd_watchdog_enabled") { sd_watchdog_enabled(0, &microseconds) }
        return enabled > 0 ? .microseconds(microseconds) : nil
    }

    /// The sockets passed by socket activation, in the order of the socket unit's `Listen…=` lines; empty
    /// when none were. Unsets `$LISTEN_FDS`/`$LISTEN_PID` so that children do not take them for theirs.
    public static func passedSockets() throws(SystemdError) -> [PassedSocket] {
        let count = try systemdCheck("sd_listen_fds") { sd_listen_fds(1) }
        return (0..<count).map { offset in
            let descriptor = SD_LISTEN_FDS_START + offset
            let listener = sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0
            return PassedSocket(descriptor: descriptor, isUnixStreamListener: listener, path: boundPath(of: descriptor))
        }
    }

    /// The path an `AF_UNIX` socket is bound to (`getsockname`), `@name` if abstract, nil otherwise.
    public static func boundPath(of descriptor: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let pathLength = Int(length) - MemoryLayout.offset(of: \sockaddr_un.sun_path)!
        guard pathLength > 0 else { return nil }
        return withUnsafeBytes(of: address.sun_path) { raw in
            let bytes = raw.prefix(pathLength)
            if bytes.first == 0 { return "@" + String(decoding: bytes.dropFirst(), as: UTF8.self) }
            return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}
