import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOPosix
import ServiceLifecycle
import UnixSignals

/// Runs the daemon as a service group (swift-service-lifecycle):
/// - SIGTERM/SIGINT: graceful stop — new jobs are refused (`shutting_down`), the announcement playing finishes
///   (cut after `limits.shutdown_timeout`), waiting jobs stay queued in the journal for the next start,
///   waiting clients get a final reply, then the socket closes and the process exits 0.
/// - SIGHUP: reloads the configuration and the voice packs (``Daemon/reload(_:)``) without touching the queue.
/// - Every hour: forgets history and order ids older than their retention.
public struct DaemonRunner: Service {
    let daemon: Daemon
    let listener: SocketServer.Listener
    let logger: Logger
    /// Reads the configuration again (file + flags) for SIGHUP.
    let reloadConfiguration: @Sendable () throws -> DaemonConfiguration
    /// Runs once the socket accepts connections (the deploy side may notify systemd here).
    let onReady: @Sendable () -> Void

    public init(
        daemon: Daemon, listener: SocketServer.Listener, logger: Logger,
        reloadConfiguration: @escaping @Sendable () throws -> DaemonConfiguration,
        onReady: @escaping @Sendable () -> Void = {}
    ) {
        self.daemon = daemon
        self.listener = listener
        self.logger = logger
        self.reloadConfiguration = reloadConfiguration
        self.onReady = onReady
    }

    /// Starts the group and returns when it has shut down. Under a systemd watchdog (`WatchdogSec=`) the
    /// watchdog runs too, first in the group so that it is shut down last.
    public func runGroup() async throws {
        var services: [any Service] = [self]
        if let watchdog = SystemdIntegration.watchdog(
            daemon: daemon, loops: MultiThreadedEventLoopGroup.singleton, logger: logger)
        {
            services.insert(watchdog, at: 0)
        }
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }

    public func run() async throws {
        // Trap SIGHUP before the socket is ready, so that no reload request can kill the process.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let (shutdown, trigger) = AsyncStream<Void>.makeStream()
        let server = SocketServer(daemon: daemon, listener: listener, logger: logger)
        // The metrics endpoint first (its own thread; a failure to bind is logged and retried, never fatal), so
        // that it serves once the daemon is ready.
        try? await daemon.metricsEndpoint?.start().get()
        // The keys, the day's total at its time, the everyday volume level: beside the socket, with the player.
        let shop = ShopServices(daemon: daemon)
        var failure: (any Error)?
        await withGracefulShutdownHandler {
            await withTaskGroup(of: (any Error)?.self) { group in
                group.addTask {
                    // The audio thread starts once the socket is ours: a daemon that cannot listen speaks nothing.
                    let ready = onReady
                    do {
                        try await server.run {
                            daemon.start()
                            shop.start()
                            SystemdIntegration.ready(listener: listener, logger: logger)
                            ready()
                        }
                    } catch {
                        return error
                    }
                    return nil
                }
                group.addTask {
                    for await _ in hangups { await reload() }
                    return nil
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(3600))
                        if !Task.isCancelled { await daemon.housekeeping() }
                    }
                    return nil
                }
                group.addTask {
                    // A journal kept in memory (its file cannot be used) tries the file again; nothing to do while on
                    // disk. Until the shutdown: a task that ends is taken for one.
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(Daemon.journalRetrySeconds))
                        if !Task.isCancelled { await daemon.retryJournal() }
                    }
                    return nil
                }
                group.addTask {
                    for await _ in shutdown {}
                    return nil
                }
                // The first to finish is the shutdown request, or a server failure (cannot bind, …).
                if let first = await group.next(), let error = first {
                    failure = error
                    logger.critical("socket server failed", metadata: ["error": "\(error)"])
                }
                await daemon.stop()
                await shop.stop()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            SystemdIntegration.stopping(logger: logger)
            trigger.finish()
        }
        await daemon.metricsEndpoint?.stop()
        logger.notice("stopped")
        if let failure { throw failure }
    }

    private func reload() async {
        logger.notice("SIGHUP: reloading the configuration and voice packs")
        do {
            let configuration = try reloadConfiguration()
            let needRestart = try await daemon.reload(configuration)
            if !needRestart.isEmpty {
                logger.warning(
                    "changed settings that take effect only after a restart",
                    metadata: ["settings": "\(needRestart.joined(separator: ", "))"])
            }
        } catch {
            logger.error(
                "reload failed; the previous configuration stays in force",
                metadata: ["event": .event(.reloadFailed), "error": "\(error)"])
        }
    }
}
