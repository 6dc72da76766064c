import Logging
import ServiceLifecycle
import Synchronization

/// One part of the daemon the watchdog vouches for, asked before every ping. `check` must not block.
public struct LivenessProbe: Sendable {
    public let name: String
    let check: @Sendable () -> Bool

    public init(_ name: String, check: @escaping @Sendable () -> Bool) {
        self.name = name
        self.check = check
    }
}

/// Pings the service manager's watchdog (`WATCHDOG=1`) at half its timeout, but only while every probe says
/// its part is alive. A hung daemon therefore stops pinging, and systemd kills and restarts it
/// (`WatchdogSec=` with `Restart=on-failure`).
public final class WatchdogService: Service, Sendable {
    /// What one check did.
    public enum Outcome: Sendable, Equatable {
        case pinged
        /// No ping: these probes failed.
        case withheld([String])
    }

    public let interval: Duration
    let probes: [LivenessProbe]
    let logger: Logger
    let ping: @Sendable () throws -> Void
    /// The probes that failed at the previous check, to log changes only.
    private let failing = Mutex<[String]>([])

    /// - Parameters:
    ///   - timeout: the manager's watchdog timeout (`ServiceManager.watchdogTimeout()`); pings go at half.
    ///   - ping: sends one ping; the real one by default.
    public init(
        timeout: Duration, probes: [LivenessProbe], logger: Logger,
        ping: @escaping @Sendable () throws -> Void = { try ServiceManager.notify(.watchdog) }
    ) {
        self.interval = timeout / 2
        self.probes = probes
        self.logger = logger
        self.ping = ping
    }

    /// Pings every `interval` until graceful shutdown.
    public func run() async throws {
        logger.info("watchdog armed", metadata: ["interval_ms": "\(interval / .milliseconds(1))"])
        do {
            try await cancelWhenGracefulShutdown { [self] in
                while true {
                    _ = check()
                    try await Task.sleep(for: interval)
                }
            }
        } catch is CancellationError {
            // Graceful shutdown: the manager does not watch a stopping service.
        }
    }

    /// Asks every probe, and pings only if all are alive.
    @discardableResult
    public func check() -> Outcome {
        let dead = probes.filter { !$0.check() }.map(\.name)
        let previous = failing.withLock { state in
            defer { state = dead }
            return state
        }
        if dead != previous {
            if dead.isEmpty {
                logger.notice("watchdog pings resumed: every part responds again")
            } else {
                logger.error("watchdog pings withheld: not responding", metadata: ["parts": "\(dead)"])
            }
        }
        guard dead.isEmpty else { return .withheld(dead) }
        do {
            try ping()
        } catch {
            logger.warning("watchdog ping failed", metadata: ["error": "\(error)"])
        }
        return .pinged
    }
}
