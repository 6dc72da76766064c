import AnnounceClient
import AnnounceCore
import Foundation
import Subprocess

#if canImport(Glibc)
import Glibc
#endif

/// Runs blocking work (socket I/O that waits for the daemon) on a thread of its own, so that it never holds one
/// of the few threads Swift concurrency runs every test on: tests run in parallel, and on a 2-core machine two
/// blocked threads would stall every other test.
public func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    // The result is handed over under a pthread lock, which ThreadSanitizer sees (it does not see a task resumed
    // through libdispatch on Linux): what `work` did happens before whatever the caller does next, such as a
    // second `blocking` call on the same connection from another thread.
    let handOver = HandOver<T>()
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            handOver.put(Result { try work() })
            continuation.resume()
        }
    }
    return try handOver.take().get()
}

private final class HandOver<T: Sendable>: @unchecked Sendable {  // `result` is only touched under `lock`
    private let lock = NSLock()
    private var result: Result<T, any Error>?

    func put(_ value: Result<T, any Error>) { lock.withLock { result = value } }
    func take() -> Result<T, any Error> { lock.withLock { result! } }
}

extension DaemonProcess {
    /// Sends one request with the real client library (a new connection) and returns the replies.
    public func request(_ request: Request) async throws -> [Response] {
        let socket = self.socket
        return try await blocking { try Client(path: socket).send(request) }
    }

    /// The last reply to `request` (the final one for `wait`).
    public func reply(_ request: Request) async throws -> Response {
        guard let last = try await self.request(request).last else { throw HarnessError("no reply to \(request.op)") }
        return last
    }

    /// Sends a signal without waiting for the daemon to exit (SIGHUP, or SIGTERM before `stop`).
    public func signal(_ signal: Int32) {
        _ = Glibc.kill(processID, signal)
    }

    /// Waits until the last burst is over: every job final, nothing playing, the volume no longer raised for an
    /// alert and no music ducked. Returns that status.
    @discardableResult
    public func waitUntilBurstEnded() async throws -> DaemonStatus {
        try await waitForStatus { status in
            guard status.queue.unfinished == 0, let engine = status.audio.engine else { return false }
            return engine.state != .playing && engine.volume?.raised != true
                && engine.ducking?.controls.contains(where: \.ducked) != true
        }
    }

    /// Polls `status` until `condition` holds (or `timeout` passes, which throws).
    @discardableResult
    public func waitForStatus(
        timeout: Duration = .seconds(30), _ condition: (DaemonStatus) -> Bool
    ) async throws -> DaemonStatus {
        var last: DaemonStatus?
        let reached = try await eventuallyValue(timeout: timeout) { () async -> DaemonStatus? in
            guard let status = try? await reply(Request(op: "status")).status else { return nil }
            last = status
            return condition(status) ? status : nil
        }
        if let reached { return reached }
        throw HarnessError("status did not reach the expected state; last: \(String(describing: last))\n\(log)")
    }

    /// Polls the daemon's log until it contains `text` (or `timeout` passes, which throws).
    public func waitForLog(_ text: String, timeout: Duration = .seconds(30)) async throws {
        if try await eventually(timeout: timeout, { log.contains(text) }) { return }
        throw HarnessError("the log never said \"\(text)\":\n\(log)")
    }

    /// Waits until job `id` is playing: its first samples were written to the device (they are heard up to a
    /// buffer later) and its start went to the journal (in the background; `journalGrace` covers that write). A job killed before that is, rightly, spoken again
    /// after a restart, so a test about what a restart does with an interrupted job must wait for this first.
    public func waitUntilStarted(
        _ id: UInt64, timeout: Duration = .seconds(30), journalGrace: Duration = .milliseconds(300)
    ) async throws {
        let playing = try await eventually(timeout: timeout) {
            let jobs = (try? await reply(Request(op: "queue")).jobs) ?? []
            return jobs.contains(where: { $0.id == id && $0.state == .playing })
        }
        if playing {
            try await Task.sleep(for: journalGrace)
            return
        }
        throw HarnessError("job \(id) never started playing:\n\(log)")
    }

    /// Waits until every job accepted has finished and its end is recorded,
    /// and the audio engine has ended its burst (the mixer is the owner's again).
    public func waitUntilIdle(timeout: Duration = .seconds(60)) async throws {
        try await waitForStatus(timeout: timeout) {
            $0.queue.unfinished == 0 && $0.audio.engine.map { $0.state != .playing } ?? true
        }
    }
}

/// A raw connection to a Unix socket, for tests that must misbehave: partial lines, garbage, oversized
/// requests, pipelining, never reading. Blocking, with timeouts through poll(2). Used by one thread at a time,
/// except `shutdownBoth`, which may be called from another to unblock it.
public final class RawConnection: @unchecked Sendable {
    private var fd: Int32
    private var buffer: [UInt8] = []

    public init(path: String) throws {
        fd = try Client.connectedSocket(path: path)
    }

    /// Takes over a connected socket.
    init(descriptor: Int32) {
        fd = descriptor
    }

    /// Opens `count` connections to `path` as `identity`, as the daemon sees them: SO_PEERCRED records the
    /// credentials of the thread that connects, so the connections are made on a thread of their own that takes
    /// `identity` for itself alone. (glibc's setuid(2) and friends would change every thread of the test process;
    /// the raw system calls change the calling thread only.) The effective ids change, the real and saved ones
    /// stay root's, and the thread ends after connecting. The connections belong to the caller.
    public static func open(
        _ count: Int, to path: String, as identity: Identity
    ) async throws -> [RawConnection] {
        try await blocking {
            try ThreadCredentials.withIdentity(identity) {
                try (0..<count).map { _ in RawConnection(descriptor: try Client.connectedSocket(path: path)) }
            }
        }
    }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Writes all bytes (blocking). Returns false if the peer closed the connection.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }

    @discardableResult
    public func write(_ text: String) -> Bool { write(Array(text.utf8)) }

    /// Shuts down the writing side only (shutdown(SHUT_WR)), as `echo … | socat` does once its input ends: the
    /// peer reads end-of-file, and replies can still come back.
    public func shutdownWrite() {
        if fd >= 0 { _ = shutdown(fd, Int32(SHUT_WR)) }
    }

    /// Shuts the connection down both ways; safe while another thread is blocked on it.
    public func shutdownBoth() {
        if fd >= 0 { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Makes the socket's send buffer small (for tests that fill it).
    public func shrinkSendBuffer(_ bytes: Int32) {
        var size = bytes
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Reads one line (without the newline), or nil if the peer closed or `timeout` passed.
    public func readLine(timeout: Duration = .seconds(10)) async -> String? {
        (try? await blocking { self.readLineNow(timeout: timeout) }) ?? nil
    }

    private func readLineNow(timeout: Duration) -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return String(decoding: line, as: UTF8.self)
            }
            guard fill(until: deadline) else { return nil }
        }
    }

    /// Reads one reply line as a `Response`.
    public func readResponse(timeout: Duration = .seconds(10)) async -> Response? {
        guard let line = await readLine(timeout: timeout) else { return nil }
        return try? JSONDecoder().decode(Response.self, from: Data(line.utf8))
    }

    /// Whether the peer closes the connection (EOF or reset) within `timeout`, discarding what arrives.
    public func isClosedByPeer(within timeout: Duration) async -> Bool {
        (try? await blocking {
            let deadline = ContinuousClock.now + timeout
            while self.fill(until: deadline) { self.buffer.removeAll() }
            return self.closedFlag
        }) ?? false
    }

    private var closedFlag = false

    /// Reads what is available before `deadline`. False on EOF, error or timeout.
    private func fill(until deadline: ContinuousClock.Instant) -> Bool {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { return false }
        let (seconds, attoseconds) = remaining.components
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, Int32(seconds * 1000 + attoseconds / 1_000_000_000_000_000) + 1)
        guard ready > 0 else { return false }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if count <= 0 {
            closedFlag = true
            return false
        }
        buffer += chunk[..<count]
        return true
    }
}

/// Credentials for the calling thread only, through the raw system calls (see ``RawConnection/open(_:to:as:)``).
enum ThreadCredentials {
    // The system call numbers (Linux, <asm/unistd.h>).
    #if arch(x86_64)
    static let setgroups = 116, setresuid = 117, setresgid = 119
    #elseif arch(arm64)
    static let setgroups = 159, setresuid = 147, setresgid = 149
    #endif

    /// syscall(2), which Swift cannot call (it is variadic): glibc's is an assembly trampoline that takes its
    /// arguments in the registers a non-variadic call uses.
    typealias SystemCall = @convention(c) (Int, Int, Int, Int) -> Int

    /// Runs `body` on this thread with `identity` as its effective credentials. Call it only on a thread that ends
    /// afterwards (a `blocking` one): the thread is not given root's back.
    static func withIdentity<T>(_ identity: Identity, _ body: () throws -> T) throws -> T {
        guard let symbol = dlsym(nil, "syscall") else { throw HarnessError("no syscall symbol") }
        let call = unsafeBitCast(symbol, to: SystemCall.self)
        let unchanged = -1
        var groups = identity.groups.map { gid_t($0) }
        let grouped = groups.withUnsafeMutableBufferPointer { buffer in
            call(setgroups, buffer.count, Int(bitPattern: buffer.baseAddress), 0)
        }
        guard grouped == 0, call(setresgid, unchanged, Int(identity.gid), unchanged) == 0,
            call(setresuid, unchanged, Int(identity.uid), unchanged) == 0
        else { throw HarnessError("cannot take uid \(identity.uid) on this thread: \(String(cString: strerror(errno)))") }
        return try body()
    }
}

/// Runs `body` on a thread of its own whose effective credentials are `identity` (the file system then checks them,
/// as it would for a daemon running as that user); the thread ends afterwards.
public func asIdentity<T: Sendable>(_ identity: Identity, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await blocking { try ThreadCredentials.withIdentity(identity, body) }
}

/// A Unix identity to run a program as (the tests run as root).
public struct Identity: Sendable {
    public var uid: UInt32
    public var gid: UInt32
    public var groups: [UInt32]

    public init(uid: UInt32, gid: UInt32, groups: [UInt32] = []) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// `nobody`/`nogroup` on Debian.
    public static let nobody = Identity(uid: 65534, gid: 65534)
}

extension DaemonProcess {
    /// Runs `announce-ctl` against this daemon as another user (swift-subprocess sets the ids after fork).
    public func ctl(_ arguments: [String], as identity: Identity) async throws -> CommandResult {
        var options = PlatformOptions()
        options.userID = identity.uid
        options.groupID = identity.gid
        options.supplementaryGroups = identity.groups
        return try await run(
            "\(Paths.bin)/announce-ctl", arguments, environment: ["ANNOUNCE_SOCKET": socket], platformOptions: options)
    }
}

/// Daemons a test starts and restarts by hand (crash and restart tests); all are stopped at the end.
public final class DaemonSet: @unchecked Sendable {
    private var daemons: [DaemonProcess] = []

    /// Starts a daemon (as ``DaemonProcess/start(rig:arguments:device:directory:)``) and remembers it.
    public func start(
        rig: Rig?, arguments: [String] = [], device: String = "pulse", directory: String,
        environment: [String: String] = [:], launcher: [String] = []
    ) async throws -> DaemonProcess {
        let daemon = try await DaemonProcess.start(
            rig: rig, arguments: arguments, device: device, directory: directory, environment: environment,
            launcher: launcher)
        daemons.append(daemon)
        return daemon
    }

    /// Stops every daemon still running (``DaemonProcess/stopCleanly()``); once all are stopped, throws the first
    /// that did not exit 0.
    func stopAll() async throws {
        var failure: (any Error)?
        for daemon in daemons {
            do { try await daemon.stopCleanly() } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
    }
}

/// Runs `body` with a fresh state folder and a ``DaemonSet``; stops every daemon and removes the folder after.
public func withDaemonSet<T>(_ body: (DaemonSet, String) async throws -> T) async throws -> T {
    let directory = try Paths.temporaryDirectory("set")
    let set = DaemonSet()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    do {
        let result = try await body(set, directory)
        try await set.stopAll()
        return result
    } catch {
        try? await set.stopAll()
        throw error
    }
}
