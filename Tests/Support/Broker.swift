import Foundation
import Subprocess
import Synchronization

#if canImport(System)
    import System
#else
    import SystemPackage
#endif

/// A program running in the background with its output in a log file, stopped by PID (swift-subprocess, never
/// Foundation's `Process`). Used for the MQTT broker and the push listener.
public final class BackgroundProcess: Sendable {
    public let logFile: String
    public let processID: Int32
    private let exit: Task<Int32, any Error>

    private init(logFile: String, processID: Int32, exit: Task<Int32, any Error>) {
        self.logFile = logFile
        self.processID = processID
        self.exit = exit
    }

    /// Starts `executable` with `arguments`, as `identity` if given; standard output and error are appended to
    /// `logFile`.
    public static func start(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:], identity: Identity? = nil,
        logFile: String
    ) async throws -> BackgroundProcess {
        var overrides: [Environment.Key: String?] = [:]
        for (key, value) in environment { overrides[Environment.Key(stringLiteral: key)] = value }
        var options = PlatformOptions()
        if let identity {
            options.userID = identity.uid
            options.groupID = identity.gid
            options.supplementaryGroups = identity.groups
        }
        let configuration = Configuration(
            executable: .path(FilePath(executable)), arguments: Arguments(arguments),
            environment: .inherit.updating(overrides), platformOptions: options)
        let (pid, exitTask) = try await launch(configuration, logFile: logFile, name: executable)
        return BackgroundProcess(logFile: logFile, processID: pid, exit: exitTask)
    }

    /// Starts `configuration` with standard output and error appended to `logFile`; returns its PID once it runs
    /// and the task that ends with its exit status. Shared by every background program the tests start.
    static func launch(
        _ configuration: Configuration, logFile: String, name: String
    ) async throws -> (pid: Int32, exit: Task<Int32, any Error>) {
        let log = try FileDescriptor.open(
            FilePath(logFile), .writeOnly, options: [.create, .append], permissions: [.ownerReadWrite])
        let started = AsyncStream<Int32>.makeStream()
        let exitTask = Task<Int32, any Error> {
            let result = try await Subprocess.run(
                configuration, input: .none, output: .fileDescriptor(log, closeAfterSpawningProcess: true),
                error: .combinedWithOutput
            ) { execution in
                started.continuation.yield(execution.processIdentifier.value)
                started.continuation.finish()
            }
            return result.terminationStatus.shellStatus
        }
        var iterator = started.stream.makeAsyncIterator()
        guard let pid = await iterator.next() else {
            let status = try await exitTask.value
            throw HarnessError("\(name) did not start (status \(status))")
        }
        return (pid, exitTask)
    }

    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    public var isRunning: Bool { Glibc.kill(processID, 0) == 0 && !exit.isCancelled }

    /// Sends `signal` and returns the exit status (128 + signal if it died of it). Under a launcher that forks
    /// (faketime: it waits for its child and does not pass signals on), the signal goes to the launcher's child,
    /// the program itself, and the status is the launcher's; a launcher signalled instead would leave the program
    /// running after the test.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) async throws -> Int32 {
        _ = Glibc.kill(programID, signal)
        return try await exit.value
    }

    /// The program's own process: the launcher's one child if it forked one, else the process started.
    public var programID: Int32 {
        let children = (try? String(contentsOfFile: "/proc/\(processID)/task/\(processID)/children", encoding: .utf8)) ?? ""
        let pids = children.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        return pids.count == 1 ? pids[0] : processID
    }

    /// Waits until the log contains `text` `count` times; throws after `timeout` with the log.
    public func waitForLog(_ text: String, count: Int = 1, timeout: Duration = .seconds(30)) async throws {
        let appeared = try await eventually(timeout: timeout, every: .milliseconds(50)) {
            log.components(separatedBy: text).count - 1 >= count
        }
        if appeared { return }
        throw HarnessError("\"\(text)\" × \(count) did not appear in \(logFile) within \(timeout):\n\(log)")
    }
}

/// A real mosquitto broker on loopback, on a free port, with its configuration, persistence database and log in a
/// temporary folder. ``restart()`` stops it (SIGTERM: it saves its persistence database) and starts it again on
/// the same port and folder, as a broker restart in production would.
public final class Broker: Sendable {
    public let directory: String
    public let port: Int
    public let extraConfiguration: String
    /// The listener it was started with (nil: the default), used again by ``restart(listener:downFor:)`` and
    /// ``start(listener:)`` unless they are given another.
    public let listenerConfiguration: String?
    private let process: Mutex<BackgroundProcess>

    public var url: String { "mqtt://127.0.0.1:\(port)" }
    public var logFile: String { "\(directory)/mosquitto.log" }
    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    private init(
        directory: String, port: Int, listener: String?, extraConfiguration: String, process: BackgroundProcess
    ) {
        self.directory = directory
        self.port = port
        self.listenerConfiguration = listener
        self.extraConfiguration = extraConfiguration
        self.process = Mutex(process)
    }

    /// Starts a broker. `listener` replaces the default plain loopback listener (e.g. a TLS one);
    /// `PORT` in it is replaced by the port.
    public static func start(listener: String? = nil, extraConfiguration: String = "") async throws -> Broker {
        let directory = try Paths.temporaryDirectory("mq")
        let port = try freePort()
        let process = try await launch(directory: directory, port: port, listener: listener, extra: extraConfiguration)
        return Broker(
            directory: directory, port: port, listener: listener, extraConfiguration: extraConfiguration,
            process: process)
    }

    private static func launch(directory: String, port: Int, listener: String?, extra: String) async throws
        -> BackgroundProcess
    {
        let listenerText = (listener ?? "listener PORT 127.0.0.1\nallow_anonymous true")
            .replacingOccurrences(of: "PORT", with: "\(port)")
        let configuration = """
            \(listenerText)
            # Stay root when started as root (the test folders are root's); no effect otherwise.
            user root
            persistence true
            persistence_location \(directory)/
            log_dest file \(directory)/mosquitto.log
            log_type all
            log_timestamp_format %H:%M:%S
            \(extra)

            """
        try configuration.write(toFile: "\(directory)/mosquitto.conf", atomically: true, encoding: .utf8)
        let process = try await BackgroundProcess.start(
            "/usr/sbin/mosquitto", ["-c", "\(directory)/mosquitto.conf"], logFile: "\(directory)/stderr.log")
        let listening = try await eventuallyValue(timeout: .seconds(20)) { () -> Bool? in
            if canConnect(port: port) { return true }
            return process.isRunning ? nil : false
        }
        if listening == true { return process }
        _ = try? await process.stop(signal: SIGKILL)
        let log = (try? String(contentsOfFile: "\(directory)/mosquitto.log", encoding: .utf8)) ?? ""
        throw HarnessError("mosquitto did not listen on \(port):\n\(process.log)\n\(log)")
    }

    /// Stops the broker and starts it again with the same configuration, port and persistence.
    public func restart(listener: String? = nil, downFor: Duration = .zero) async throws {
        let old = process.withLock { $0 }
        _ = try await old.stop()
        if downFor > .zero { try await Task.sleep(for: downFor) }
        let new = try await Self.launch(
            directory: directory, port: port, listener: listener ?? listenerConfiguration, extra: extraConfiguration)
        process.withLock { $0 = new }
    }

    /// Stops the broker (SIGTERM) without removing its folder.
    public func stop() async {
        let current = process.withLock { $0 }
        _ = try? await current.stop()
    }

    /// Starts it again after ``stop()``.
    public func start(listener: String? = nil) async throws {
        let new = try await Self.launch(
            directory: directory, port: port, listener: listener ?? listenerConfiguration, extra: extraConfiguration)
        process.withLock { $0 = new }
    }

    /// A TCP port on 127.0.0.1 that nothing listens on right now.
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket(): \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                bind(fd, sockaddr, length) == 0 && getsockname(fd, sockaddr, &length) == 0
            }
        }
        guard bound else { throw HarnessError("cannot find a free port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

/// Runs `body` with a fresh broker and stops and removes it afterwards, whatever happens.
public func withBroker<T>(
    listener: String? = nil, extraConfiguration: String = "", _ body: (Broker) async throws -> T
) async throws -> T {
    let broker = try await Broker.start(listener: listener, extraConfiguration: extraConfiguration)
    defer { try? FileManager.default.removeItem(atPath: broker.directory) }
    do {
        let result = try await body(broker)
        await broker.stop()
        return result
    } catch {
        await broker.stop()
        throw error
    }
}
