import AnnounceCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Serves the Prometheus text exposition over HTTP (`GET /metrics`), for the daemon and the push listener alike
/// (`[metrics] listen`, `--metrics-listen`; docs/configuration.md, docs/push.md).
///
/// - It runs on the program's NIO event loops (`MultiThreadedEventLoopGroup.singleton`, which the daemon's socket
///   shares): non-blocking, so a slow or hostile scraper holds up nothing, and never the audio thread. What
///   `render` reads must not block either (counters and snapshots under short locks, no I/O).
/// - A connection gets `exchangeTimeout` for the whole exchange — request in, response out — and is then closed,
///   whatever state it is in: a client that sends its request slowly, never finishes it, or does not read the
///   answer is cut off. One request per connection (`Connection: close`); at most `maximumConnections` at once,
///   more are closed on arrival.
/// - The address is checked when the configuration is read (``ListenAddress``). If it cannot be bound when the
///   program starts (the port is taken, the service may not use IP), that is logged once as an error
///   (`metrics-unavailable`) saying why and what to do, and binding is tried again every `retryInterval`: the
///   program itself runs on, because a speaker that stays silent for want of its monitoring would be the worse
///   failure; a scraper sees the target down meanwhile.
public final class MetricsEndpoint: Sendable {
    public struct Limits: Sendable {
        /// The longest a connection may last, request and response together.
        public var exchangeTimeout: TimeAmount = .seconds(5)
        public var maximumConnections = 8
        /// How often binding is tried again after it failed.
        public var retryInterval: TimeAmount = .seconds(30)
        public init() {}
    }

    /// What the endpoint does now (for `status`).
    public enum State: Sendable, Equatable, CustomStringConvertible {
        case starting
        /// Serving on this address (with the real port when port 0 was asked for).
        case serving(ListenAddress)
        /// Not serving: why, and what to do; binding is retried.
        case unavailable(String)
        case stopped

        public var description: String {
            switch self {
            case .starting: "starting"
            case .serving(let address): "serving on \(address)"
            case .unavailable(let reason): "not serving: \(reason)"
            case .stopped: "stopped"
            }
        }
    }

    private struct Shared {
        var state = State.starting
        var channel: (any Channel)?
        var retry: Scheduled<Void>?
        var failures = 0
        /// The connections open now, closed by a stop.
        var open: [ObjectIdentifier: any Channel] = [:]
        var stopped = false
    }

    public let address: ListenAddress
    private let program: String
    private let limits: Limits
    private let logger: Logger
    private let render: @Sendable () -> String
    private let group = MultiThreadedEventLoopGroup.singleton
    private let shared = Mutex(Shared())

    /// `render` builds the exposition text; it runs on an event loop for each scrape, and must not block.
    public init(
        address: ListenAddress, program: String, logger: Logger, limits: Limits = Limits(),
        render: @escaping @Sendable () -> String
    ) {
        self.address = address
        self.program = program
        self.limits = limits
        self.logger = logger
        self.render = render
    }

    public var state: State { shared.withLock { $0.state } }

    /// Binds (the first attempt); the returned future completes when that attempt has succeeded or failed — it
    /// never fails itself: a failure is logged and retried.
    @discardableResult
    public func start() -> EventLoopFuture<Void> {
        attempt()
    }

    /// Closes the listener and every connection.
    public func stop() async {
        let channels = prepareStop()
        for channel in channels { try? await channel.close() }
    }

    /// ``stop()`` for a program without Swift concurrency (the push listener's thread).
    public func stopNow() {
        for channel in prepareStop() { try? channel.close().wait() }
    }

    /// The listener and the connections open, to close.
    private func prepareStop() -> [any Channel] {
        shared.withLock { shared in
            shared.stopped = true
            shared.state = .stopped
            shared.retry?.cancel()
            shared.retry = nil
            defer { shared.channel = nil }
            return (shared.channel.map { [$0] } ?? []) + Array(shared.open.values)
        }
    }

    // MARK: Binding

    private func attempt() -> EventLoopFuture<Void> {
        let loop = group.next()
        guard !shared.withLock({ $0.stopped }) else { return loop.makeSucceededVoidFuture() }
        let socketAddress: SocketAddress
        do {
            socketAddress = try SocketAddress(ipAddress: address.host, port: address.port)
        } catch {
            failed(reason: "\(address) is not an address to listen on (\(error))", retry: false)
            return loop.makeSucceededVoidFuture()
        }
        let limits = self.limits
        let render = self.render
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 16)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [self] channel in
                guard admit(channel) else {
                    return channel.eventLoop.makeFailedFuture(ChannelError.inputClosed)
                }
                // The whole exchange within the limit, whatever the client does.
                let deadline = channel.eventLoop.scheduleTask(in: limits.exchangeTimeout) {
                    channel.close(promise: nil)
                }
                channel.closeFuture.whenComplete { _ in deadline.cancel() }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: false, withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(MetricsRequestHandler(render: render))
                }
            }
        return bootstrap.bind(to: socketAddress).map { [self] channel in
            let bound = channel.localAddress?.port.map { ListenAddress(host: address.host, port: $0) } ?? address
            let (keep, earlierFailures) = shared.withLock { shared -> (Bool, Int) in
                guard !shared.stopped else { return (false, 0) }
                shared.channel = channel
                shared.state = .serving(bound)
                defer { shared.failures = 0 }
                return (true, shared.failures)
            }
            guard keep else {
                channel.close(promise: nil)
                return
            }
            var metadata: Logger.Metadata = ["listen": "\(bound)", "path": "/metrics"]
            if earlierFailures > 0 { metadata["failures"] = "\(earlierFailures)" }
            if !bound.isLoopback {
                metadata["note"] = "not a loopback address: anyone who can reach it reads the metrics"
            }
            logger.notice("metrics served over HTTP", metadata: metadata)
        }.recover { [self] error in
            failed(reason: Self.explain(error, address: address, program: program), retry: true)
        }
    }

    private func failed(reason: String, retry: Bool) {
        let first = shared.withLock { shared -> Bool? in
            guard !shared.stopped else { return nil }
            shared.failures += 1
            shared.state = .unavailable(reason)
            if retry {
                shared.retry = group.next().scheduleTask(in: limits.retryInterval) { [self] in _ = attempt() }
            }
            return shared.failures == 1
        }
        guard let first else { return }
        let metadata: Logger.Metadata = [
            "event": .event(.metricsUnavailable), "listen": "\(address)", "error": "\(reason)",
            "retry_s": "\(retry ? limits.retryInterval.nanoseconds / 1_000_000_000 : 0)",
        ]
        if first {
            logger.error(
                "metrics endpoint off: cannot listen; \(program) runs on without it and tries again",
                metadata: metadata)
        } else {
            logger.debug("metrics endpoint still off", metadata: metadata)
        }
    }

    /// Counts a new connection in, or refuses it when there are enough.
    private func admit(_ channel: any Channel) -> Bool {
        let key = ObjectIdentifier(channel)
        let admitted = shared.withLock { shared in
            guard !shared.stopped, shared.open.count < limits.maximumConnections else { return false }
            shared.open[key] = channel
            return true
        }
        if admitted {
            channel.closeFuture.whenComplete { [self] _ in shared.withLock { _ = $0.open.removeValue(forKey: key) } }
        }
        return admitted
    }

    /// Why binding failed, and what to do, in one sentence.
    static func explain(_ error: any Error, address: ListenAddress, program: String) -> String {
        guard let error = error as? IOError else { return "\(error)" }
        let text = String(cString: strerror(error.errnoCode))
        switch error.errnoCode {
        case EADDRINUSE:
            return "\(address) is in use by another program (ss -ltnp shows which); choose another port"
        case EAFNOSUPPORT, EPERM:
            return "\(text): the service may not use IP sockets (systemd RestrictAddressFamilies=, "
                + "PrivateNetwork=); add the metrics drop-in from docs/deployment.md"
        case EACCES:
            return "\(text): ports below 1024 need privileges; choose a port above 1023"
        case EADDRNOTAVAIL:
            return "\(text): no interface of this machine has the address \(address.host)"
        default:
            return "\(text) (errno \(error.errnoCode))"
        }
    }
}

/// One request per connection: `GET /metrics` answers the exposition; `/` a pointer to it; other paths 404,
/// other methods 405. The connection closes once the answer is written.
final class MetricsRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    private let render: @Sendable () -> String
    private var head: HTTPRequestHead?
    private var answered = false

    init(render: @escaping @Sendable () -> String) {
        self.render = render
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head, !answered else { return }
            answered = true
            respond(context: context, head: head)
        }
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead) {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let status: HTTPResponseStatus
        let body: String
        var headers = HTTPHeaders()
        if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            body = "only GET\n"
            headers.add(name: "Allow", value: "GET, HEAD")
        } else if path == "/metrics" {
            status = .ok
            body = render()
        } else if path == "/" {
            status = .ok
            body = "Prometheus metrics: /metrics\n"
        } else {
            status = .notFound
            body = "not found; the metrics are at /metrics\n"
        }
        let exposition = status == .ok && path == "/metrics"
        headers.add(name: "Content-Type", value: exposition ? Self.contentType : "text/plain; charset=utf-8")
        let buffer = context.channel.allocator.buffer(string: body)
        headers.add(name: "Content-Length", value: "\(buffer.readableBytes)")
        headers.add(name: "Connection", value: "close")
        let responseHead = HTTPResponseHead(version: head.version, status: status, headers: headers)
        context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
        if head.method != .HEAD { context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil) }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}
