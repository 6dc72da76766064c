import AnnounceClient
import AnnounceCore
import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The daemon's event stream (`subscribe`, docs/protocol.md) on a thread of its own: final states as they reach the
/// daemon's disk, and "status changed" hints. Reconnects whenever the stream ends (the daemon restarted or stopped,
/// or dropped this subscriber for falling behind), asking each time for a replay from `since()`, so that nothing
/// is missed in between. Never polls: it blocks reading the socket.
public final class DaemonEvents: Sendable {
    public struct Handlers: Sendable {
        /// Where to replay from on each (re)subscription (nil: live events only).
        public var since: @Sendable () -> UInt64?
        public var final: @Sendable (JobInfo) -> Void
        /// The replay is over; `unfinished` lists the jobs above `since` not final yet.
        public var live: @Sendable (_ unfinished: [JobInfo]) -> Void
        public var statusChanged: @Sendable () -> Void
        /// The stream ended (and will be tried again).
        public var ended: @Sendable () -> Void
        /// A repeating notice ended (live only: a repeat that ends while the stream is down is not replayed).
        public var repeatEnded: @Sendable (RepeatInfo) -> Void = { _ in }

        public init(
            since: @escaping @Sendable () -> UInt64?, final: @escaping @Sendable (JobInfo) -> Void,
            live: @escaping @Sendable ([JobInfo]) -> Void, statusChanged: @escaping @Sendable () -> Void,
            ended: @escaping @Sendable () -> Void
        ) {
            self.since = since
            self.final = final
            self.live = live
            self.statusChanged = statusChanged
            self.ended = ended
        }
    }

    private struct State {
        var stopping = false
        var descriptor: Int32 = -1
        var isLive = false
    }

    let socketPath: String
    private let logger: Logger
    private let handlers: Handlers
    /// Its condition wakes ``waitUntilLive(timeout:)`` when the stream is live, and the wait between two
    /// subscriptions when ``stop()`` comes.
    private let state = ConditionLock(State())

    public init(socketPath: String, logger: Logger, handlers: Handlers) {
        self.socketPath = socketPath
        self.logger = logger
        self.handlers = handlers
    }

    public func start() {
        SystemThread.detach(name: "push-events") { self.run() }
    }

    /// Ends the stream (from any thread); the thread finishes soon after.
    public func stop() {
        let descriptor = state.withLock { state -> Int32 in
            state.stopping = true
            return state.descriptor
        }
        state.broadcast()
        if descriptor >= 0 { _ = shutdown(descriptor, Int32(SHUT_RDWR)) }
    }

    /// Waits until a subscription has been set up and its replay is over, or `timeout` seconds. True if live.
    public func waitUntilLive(timeout: Double) -> Bool {
        state.withLock(when: { $0.isLive }, until: Monotonic.nanos(afterSeconds: timeout)) { $0.isLive }
    }

    private var isStopping: Bool { state.withLock { $0.stopping } }

    private func run() {
        var backoff = Backoff(Backoff.Policy(initialSeconds: 0.1, maximumSeconds: 2))
        var failures = 0
        while !isStopping {
            let reason = subscribeOnce(onLive: {
                backoff.reset()
                failures = 0
            })
            state.withLock { $0.isLive = false }
            handlers.ended()
            if isStopping { break }
            failures += 1
            if failures == 1 {
                logger.info("the daemon's event stream ended; subscribing again", metadata: ["reason": "\(reason)"])
            } else {
                logger.debug("cannot subscribe to the daemon's events", metadata: ["reason": "\(reason)"])
            }
            // The pause before the next try, cut short by `stop()`.
            state.withLock(when: { $0.stopping }, until: Monotonic.nanos(afterSeconds: backoff.next())) { _ in }
        }
    }

    /// One subscription, until it ends; returns why.
    private func subscribeOnce(onLive: () -> Void) -> String {
        let descriptor: Int32
        do {
            descriptor = try Client.connectedSocket(path: socketPath)
        } catch {
            return error.message
        }
        let proceed = state.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.descriptor = descriptor
            return true
        }
        defer {
            state.withLock { $0.descriptor = -1 }
            close(descriptor)
        }
        guard proceed else { return "stopping" }
        let since = handlers.since()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard var line = try? encoder.encode(Request(id: "events", op: "subscribe", since: since)) else {
            return "cannot encode the request"
        }
        line.append(UInt8(ascii: "\n"))
        guard writeAll(descriptor, Array(line)) else { return "cannot send: \(String(cString: strerror(errno)))" }
        logger.debug("subscribed to the daemon's events", metadata: ["since": "\(since.map(String.init) ?? "-")"])
        var reader = LineReader(descriptor: descriptor)
        while true {
            guard let bytes = reader.next() else { return "the daemon closed the stream" }
            guard let reply = try? JSONDecoder().decode(Response.self, from: Data(bytes)) else {
                return "an unreadable line: \(String(decoding: bytes.prefix(200), as: UTF8.self))"
            }
            guard reply.ok else {
                return reply.error.map { "\($0.code): \($0.message)" } ?? "refused"
            }
            switch reply.event.flatMap(SubscriptionEvent.init(rawValue:)) {
            case .final:
                if let job = reply.job { handlers.final(job) }
            case .live:
                handlers.live(reply.jobs ?? [])
                state.withLock { $0.isLive = true }
                state.broadcast()
                onLive()
            case .status:
                handlers.statusChanged()
            case .repeatEnded:
                if let info = reply.repeat { handlers.repeatEnded(info) }
            case nil:
                break  // an event this version does not know
            }
            if reply.done { return "the daemon ended the stream" }
        }
    }

    private func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }
}

/// Lines from a blocking socket, without a limit on how long the stream runs (a `Client` collects every reply).
struct LineReader {
    let descriptor: Int32
    private var buffer: [UInt8] = []
    private var start = 0

    init(descriptor: Int32) { self.descriptor = descriptor }

    /// The next line without its newline; nil at the end of the stream or on an error.
    mutating func next() -> [UInt8]? {
        while true {
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[start..<newline])
                start = newline + 1
                if start == buffer.count {
                    buffer.removeAll(keepingCapacity: true)
                    start = 0
                }
                return line
            }
            if start > 0 {
                buffer.removeFirst(start)
                start = 0
            }
            var chunk = [UInt8](repeating: 0, count: 16_384)
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
    }
}
