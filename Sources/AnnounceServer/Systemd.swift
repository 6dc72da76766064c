import AnnounceCore
import AnnounceSystemd
import Logging
import NIOCore

/// The daemon under systemd: socket activation, readiness and status (`Type=notify`), and the watchdog's
/// probes. Every call is harmless when the daemon was not started by systemd.
public enum SystemdIntegration {
    /// Where to listen: the socket systemd passed (socket activation), else `configuredPath` to bind.
    public static func listener(configuredPath: String, logger: Logger) -> SocketServer.Listener {
        let passed: [PassedSocket]
        do {
            passed = try ServiceManager.passedSockets()
        } catch {
            logger.error("cannot read the sockets systemd passed; binding the socket instead",
                         metadata: ["error": "\(error)"])
            return .path(configuredPath)
        }
        guard !passed.isEmpty else { return .path(configuredPath) }
        guard let listener = passed.first(where: \.isUnixStreamListener) else {
            logger.error("systemd passed no listening Unix stream socket; binding the socket instead",
                         metadata: ["passed": "\(passed.map(\.descriptor))"])
            return .path(configuredPath)
        }
        if passed.count > 1 {
            logger.warning("systemd passed several sockets; serving the first Unix stream listener",
                           metadata: ["passed": "\(passed.map(\.descriptor))", "served": "\(listener.descriptor)"])
        }
        if let path = listener.path, path != configuredPath {
            logger.notice("serving the socket systemd passed instead of the configured one",
                          metadata: ["socket": "\(path)", "configured": "\(configuredPath)"])
        }
        return .descriptor(listener.descriptor)
    }

    /// `READY=1` and a status naming the socket, once it accepts connections.
    static func ready(listener: SocketServer.Listener, logger: Logger) {
        let socket: String
        switch listener {
        case .path(let path): socket = path
        case .descriptor(let descriptor): socket = ServiceManager.boundPath(of: descriptor) ?? "fd \(descriptor)"
        }
        notify([.ready, .status("listening on \(socket)")], logger: logger)
    }

    /// `STOPPING=1` when a graceful shutdown begins.
    static func stopping(logger: Logger) {
        notify([.stopping, .status("finishing the announcement playing")], logger: logger)
    }

    /// Tells systemd about a state change; a failure is logged, never fatal.
    static func notify(_ states: [ServiceState], logger: Logger) {
        do {
            try ServiceManager.notify(states)
        } catch {
            logger.warning("cannot notify systemd", metadata: ["error": "\(error)"])
        }
    }

    /// The watchdog if systemd expects pings (`WatchdogSec=`): it pings only while the audio thread makes
    /// progress — frames written, or device retries — and every event loop runs.
    static func watchdog(daemon: Daemon, loops: EventLoopGroup, logger: Logger) -> WatchdogService? {
        let timeout: Duration?
        do {
            timeout = try ServiceManager.watchdogTimeout()
        } catch {
            logger.error("cannot read the watchdog setting", metadata: ["error": "\(error)"])
            return nil
        }
        guard let timeout else { return nil }
        let audio = ProgressWatch<UInt64>(limit: .seconds(daemon.configuration.audioStallLimitSeconds))
        let eventLoops = EventLoopProbe(loops)
        return WatchdogService(
            timeout: timeout,
            probes: [
                LivenessProbe("audio thread") { audio.isAlive(working: daemon.audioProgress) },
                LivenessProbe("event loop") { eventLoops.check() },
            ],
            logger: logger)
    }
}

extension Daemon {
    /// What the watchdog watches: nil while the audio thread has nothing to do; else a number that grows with
    /// every frame it writes and every device retry. The same number for `audio.stall_limit` means it is hung —
    /// however long the announcement (free text may last minutes).
    var audioProgress: UInt64? {
        if let progress = player.progress { return progress }
        // Jobs wait but the audio thread holds none: it is between jobs (or stuck before taking one).
        return jobs.queue.count > 0 ? 0 : nil
    }
}
