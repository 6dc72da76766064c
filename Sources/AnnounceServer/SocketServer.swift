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
import NIOCore
import NIOPosix
import Synchronization

/// The Unix stream socket: one JSON request per line in, one JSON reply per line out (docs/protocol.md).
/// Each connection is served by its own task; a connection that misbehaves (garbage, an oversized line,
/// stalling mid-request, not reading its replies, idling) is answered and/or closed, and nothing else notices.
public struct SocketServer: Sendable {
    /// Where to listen: a path the server binds itself, or a socket already bound and listening (systemd
    /// socket activation hands one over; the server then neither creates nor removes the file).
    public enum Listener: Sendable {
        case path(String)
        case descriptor(Int32)

        /// Refuses a path another process listens on: a second daemon started by mistake must not take over the
        /// first one's socket. Its setting cannot be used, so `bad_configuration` (not `internal`, which means a
        /// bug). Checked before the daemon loads anything (announced), and again at the bind.
        public func refuseIfTaken() throws(AnnounceError) {
            guard case .path(let path) = self, SocketServer.isAnswering(path) else { return }
            throw AnnounceError(
                .badConfiguration,
                "socket: another process is listening on \(path); not taking it over (stop that daemon first, or "
                    + "give this one another --socket)")
        }
    }

    let daemon: Daemon
    let listener: Listener
    let logger: Logger

    public init(daemon: Daemon, listener: Listener, logger: Logger) {
        self.daemon = daemon
        self.listener = listener
        self.logger = logger
    }

    /// Binds (or adopts) the socket and serves until cancelled. `onReady` runs once connections are accepted.
    public func run(onReady: @Sendable () -> Void = {}) async throws {
        let limits = daemon.limits
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Connection> = { channel in
            // The credentials first, while the socket is certainly open: a client may send its request and close
            // its side (or all of it) before the connection's task runs.
            PeerCredentials.of(channel).map { Result<PeerCredentials, any Error>.success($0) }.recover {
                .failure($0)
            }.flatMapThrowing { peer in
                let activity = ConnectionActivity()
                let current = daemon.limits
                try channel.pipeline.syncOperations.addHandler(
                    ConnectionGuard(
                        activity: activity, idleTimeout: .seconds(current.idleTimeoutSeconds),
                        requestTimeout: .seconds(current.requestTimeoutSeconds),
                        writeTimeout: .seconds(current.writeTimeoutSeconds)))
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(LineFrameDecoder(maximumLength: current.maxRequestBytes)))
                let async = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                return Connection(channel: async, activity: activity, peer: peer)
            }
        }
        // Half-closure allowed: a client that sends its request and shuts its side down (`echo … | socat`,
        // shutdown(SHUT_WR)) is still answered; the connection closes once its requests are served.
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
        let server: NIOAsyncChannel<Connection, Never>
        // The socket file this server created, removed when it stops (never one another process owns).
        var boundPath: String?
        defer { if let boundPath { try? FileManager.default.removeItem(atPath: boundPath) } }
        switch listener {
        case .path(let path):
            let directory = Path.directory(of: path)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            // A stale socket file is replaced; a live one belongs to another daemon and is left alone.
            try listener.refuseIfTaken()
            server = try await bootstrap.bind(
                unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
            boundPath = path
            try Self.setPermissions(path: path, mode: limits.socketMode, group: limits.socketGroup)
            logger.info(
                "listening",
                metadata: [
                    "socket": "\(path)", "mode": "\(String(limits.socketMode, radix: 8))",
                    "group": "\(limits.socketGroup ?? "(daemon's)")",
                ])
        case .descriptor(let descriptor):
            server = try await bootstrap.bind(descriptor, childChannelInitializer: initializer)
            logger.info("listening on an inherited socket", metadata: ["fd": "\(descriptor)"])
        }
        onReady()
        let handler = RequestHandler(daemon: daemon)
        let slots = ConnectionSlots()
        try await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { connections in
                for try await connection in connections {
                    group.addTask { await serve(connection, handler: handler, slots: slots) }
                }
            }
        }
    }

    /// Whether something accepts connections on the Unix socket at `path`.
    static func isAnswering(_ path: String) -> Bool {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    /// Socket file mode and group, from the configuration.
    static func setPermissions(path: String, mode: UInt32, group: String?) throws {
        if let group {
            guard let gid = AccessPolicy.groupID(group) else {
                throw AnnounceError(.badRequest, "socket_group: no group \"\(group)\"")
            }
            guard chown(path, uid_t.max, gid) == 0 else {
                throw AnnounceError(
                    .internalError, "cannot give \(path) to group \(group)",
                    cause: String(cString: strerror(errno)))
            }
        }
        guard chmod(path, mode_t(mode)) == 0 else {
            throw AnnounceError(.internalError, "cannot chmod \(path)", cause: String(cString: strerror(errno)))
        }
    }

    struct Connection: Sendable {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        let activity: ConnectionActivity
        /// Read when the connection was accepted.
        let peer: Result<PeerCredentials, any Error>
    }

    private func serve(_ connection: Connection, handler: RequestHandler, slots: ConnectionSlots) async {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            try await connection.channel.executeThenClose { inbound, outbound in
                func send(_ response: Response) async throws {
                    var data = try encoder.encode(response)
                    data.append(UInt8(ascii: "\n"))
                    try await outbound.write(ByteBuffer(bytes: data))
                }
                let peer: PeerCredentials
                switch connection.peer {
                case .success(let credentials):
                    peer = credentials
                case .failure(let error):
                    logger.error("cannot read the peer's credentials", metadata: ["error": "\(error)"])
                    try await send(
                        .failure(id: nil, AnnounceError(.unauthorized, "the peer's credentials are unknown")))
                    return
                }
                // A slot: peers that may only read never take the ones kept for peers that may speak.
                let limits = daemon.limits
                let speaker = daemon.access(for: peer) >= .submit
                do throws(ConnectionSlots.Refusal) {
                    _ = try slots.admit(
                        speaker: speaker, maximum: limits.maxClients, reserved: limits.effectiveReservedClients)
                } catch {
                    daemon.metrics.refused(.busy)
                    try await send(.failure(id: nil, error.error))
                    return
                }
                daemon.metrics.clientCount(daemon.clients.add(1, ordering: .relaxed).newValue)
                defer {
                    _ = slots.release(speaker: speaker)
                    daemon.metrics.clientCount(daemon.clients.subtract(1, ordering: .relaxed).newValue)
                }
                do {
                    for try await frame in inbound {
                        connection.activity.begin()
                        defer { connection.activity.end() }
                        try await handler.handle(line: Array(frame.readableBytesView), peer: peer, reply: send)
                    }
                } catch let error as LineFrameDecoder.LineTooLong {
                    daemon.metrics.refused(.badRequest)
                    try await send(.failure(id: nil, AnnounceError(.badRequest, "\(error)")))
                    logger.notice("connection closed: request too long", metadata: ["peer.pid": "\(peer.pid)"])
                }
            }
        } catch {
            logger.debug("connection closed with error", metadata: ["error": "\(error)"])
        }
    }
}

/// Whether a connection has a request in progress (a `wait` may take minutes and is not idling).
final class ConnectionActivity: Sendable {
    private let inFlight = Atomic<Int>(0)
    func begin() { inFlight.add(1, ordering: .relaxed) }
    func end() { inFlight.subtract(1, ordering: .relaxed) }
    var isBusy: Bool { inFlight.load(ordering: .relaxed) > 0 }
}

/// Closes connections that idle, stall in the middle of a request line (slowloris), or stop reading their
/// replies. Sits in front of the line decoder and sees raw bytes; checks its clocks a few times a second.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let activity: ConnectionActivity
    private let idleTimeout: TimeAmount
    private let requestTimeout: TimeAmount
    private let writeTimeout: TimeAmount
    private var lastActivity = NIODeadline.now()
    /// When the first byte of a still-incomplete request line arrived.
    private var partialSince: NIODeadline?
    private var unwritableSince: NIODeadline?
    private var check: RepeatedTask?

    init(activity: ConnectionActivity, idleTimeout: TimeAmount, requestTimeout: TimeAmount, writeTimeout: TimeAmount) {
        self.activity = activity
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.writeTimeout = writeTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let shortest = min(idleTimeout, requestTimeout, writeTimeout)
        let tick = TimeAmount.nanoseconds(min(1_000_000_000, max(20_000_000, shortest.nanoseconds / 4)))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleRepeatedTask(initialDelay: tick, delay: tick) { _ in
            let (handler, context) = loopBound.value
            handler.inspect(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let now = NIODeadline.now()
        lastActivity = now
        let bytes = buffer.readableBytesView
        if let newline = bytes.lastIndex(of: UInt8(ascii: "\n")) {
            partialSince = newline == bytes.index(before: bytes.endIndex) ? nil : now
        } else if partialSince == nil && !bytes.isEmpty {
            partialSince = now
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        lastActivity = .now()
        context.write(data, promise: promise)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        unwritableSince = context.channel.isWritable ? nil : .now()
        context.fireChannelWritabilityChanged()
    }

    private func inspect(context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        let now = NIODeadline.now()
        if let partialSince, now - partialSince > requestTimeout {
            refuse(
                context: context, "request line not completed within \(Self.seconds(requestTimeout)); connection closed"
            )
        } else if let unwritableSince, now - unwritableSince > writeTimeout {
            context.close(promise: nil)  // it does not read: nothing more can be said to it
        } else if partialSince == nil, !activity.isBusy, now - lastActivity > idleTimeout {
            context.close(promise: nil)
        }
    }

    private func refuse(context: ChannelHandlerContext, _ message: String) {
        check?.cancel()
        check = nil
        let response = Response.failure(id: nil, AnnounceError(.timeout, message))
        var data = (try? JSONEncoder().encode(response)) ?? Data()
        data.append(UInt8(ascii: "\n"))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: data))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    private static func seconds(_ amount: TimeAmount) -> String {
        cFormat("%g s", Double(amount.nanoseconds) / 1e9)
    }
}

extension TimeAmount {
    static func seconds(_ value: Double) -> TimeAmount { .nanoseconds(Int64(value * 1e9)) }
}

/// Splits the byte stream at newlines, refusing lines longer than `maximumLength` bytes.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    struct LineTooLong: Error, CustomStringConvertible {
        var limit: Int
        var description: String { "request line longer than \(limit) bytes; connection closed" }
    }

    let maximumLength: Int

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > maximumLength { throw LineTooLong(limit: maximumLength) }
            return .needMoreData
        }
        let length = newline - buffer.readerIndex
        if length > maximumLength { throw LineTooLong(limit: maximumLength) }
        var line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        // Tolerate CRLF from hand-typed clients (socat, nc).
        if line.readableBytesView.last == UInt8(ascii: "\r") {
            line = line.getSlice(at: line.readerIndex, length: line.readableBytes - 1)!
        }
        context.fireChannelRead(wrapInboundOut(line))
        return .continue
    }

    mutating func decodeLast(
        context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool
    ) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}
