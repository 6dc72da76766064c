import AnnounceClient
import AnnounceCore
import Foundation
import Subprocess
import Synchronization

#if canImport(System)
import System
#else
import SystemPackage
#endif

/// Paths of the checkout and the built binaries.
public enum Paths {
    /// The checkout: where this file was compiled, or `ANNOUNCE_ROOT` (the arm64 tests are compiled in the
    /// packaging chroot, where the checkout is /src, and run under qemu-user on the build machine).
    public static let root = ProcessInfo.processInfo.environment["ANNOUNCE_ROOT"]
        ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    /// Where the built multi-call executable `announce` is: `ANNOUNCE_BIN_DIR`, else the debug build.
    public static var build: String {
        ProcessInfo.processInfo.environment["ANNOUNCE_BIN_DIR"] ?? "\(root)/.build/debug"
    }
    /// A folder holding `announced`, `announce-ctl` and `announce-push` (and `announce`): the shipped executable
    /// under the three names it is installed as (links to it, as `make install` lays them out). `build` itself
    /// if it holds them already (an installed tree); else a folder of links made once per test process.
    public static let bin: String = programLinks()

    private static func programLinks() -> String {
        let programs = ["announced", "announce-ctl", "announce-push"]
        // Only links to `announce` count: an old build folder may still hold separate executables of those names.
        func isLink(_ name: String) -> Bool {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(build)/\(name)")).map {
                URL(fileURLWithPath: $0).lastPathComponent == "announce"
            } ?? false
        }
        if programs.allSatisfy(isLink) { return build }
        let executable = URL(fileURLWithPath: "\(build)/announce").standardizedFileURL.path
        let folder = "/tmp/ann-bin-\(getpid())"
        try? FileManager.default.removeItem(atPath: folder)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            for name in ["announce"] + programs {
                try FileManager.default.createSymbolicLink(atPath: "\(folder)/\(name)", withDestinationPath: executable)
            }
        } catch {
            fatalError("cannot make the program links in \(folder): \(error)")
        }
        atexit { try? FileManager.default.removeItem(atPath: "/tmp/ann-bin-\(getpid())") }
        return folder
    }
    public static var voices: String {
        ProcessInfo.processInfo.environment["ANNOUNCE_VOICES"] ?? "\(root)/out/voices"
    }
    public static func temporaryDirectory(_ name: String) throws -> String {
        // Short paths: Unix socket paths are limited to 107 bytes.
        let path = "/tmp/ann-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

public struct CommandResult: Sendable, CustomStringConvertible {
    /// Exit status, or 128 + signal number when killed by a signal (as a shell reports it).
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

extension TerminationStatus {
    /// The shell's view: the exit code, or 128 + the signal.
    var shellStatus: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }
}

/// Runs a program to completion and collects its output (swift-subprocess: unlike Foundation's `Process` on
/// Linux, it does not wait for grandchildren the program leaves running, such as the rig's sound server).
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:],
    platformOptions: PlatformOptions = PlatformOptions()
) async throws -> CommandResult {
    var overrides: [Environment.Key: String?] = [:]
    for (key, value) in environment { overrides[Environment.Key(stringLiteral: key)] = value }
    let result = try await Subprocess.run(
        .path(FilePath(executable)), arguments: Arguments(arguments), environment: .inherit.updating(overrides),
        platformOptions: platformOptions, output: .string(limit: 16 << 20), error: .string(limit: 16 << 20))
    return CommandResult(
        status: result.terminationStatus.shellStatus, stdout: result.standardOutput,
        stderr: result.standardError)
}

/// The host sound test rig (scripts/rig.sh): a private PulseAudio with a null sink whose monitor is captured.
/// Start one with ``withRig(_:)``, which always stops it.
public final class Rig: Sendable {
    public let directory: String
    /// Variables that point libasound's pulse plugin and pactl at this rig.
    public let environment: [String: String]

    init(directory: String, environment: [String: String]) {
        self.directory = directory
        self.environment = environment
    }

    public static func start() async throws -> Rig {
        let directory = try Paths.temporaryDirectory("rig")
        let started = try await run("\(Paths.root)/scripts/rig.sh", ["start", directory])
        guard started.status == 0 else { throw HarnessError("rig failed to start: \(started)") }
        return Rig(directory: directory, environment: try readEnvironment("\(directory)/env"))
    }

    public func stop() async {
        _ = try? await run("\(Paths.root)/scripts/rig.sh", ["stop", directory])
        try? FileManager.default.removeItem(atPath: directory)
    }

    static func readEnvironment(_ path: String) throws -> [String: String] {
        var result: [String: String] = [:]
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            var text = line.trimmingCharacters(in: .whitespaces)
            guard text.hasPrefix("export ") else { continue }
            text.removeFirst("export ".count)
            guard let equals = text.firstIndex(of: "=") else { continue }
            var value = String(text[text.index(after: equals)...])
            if value.count >= 2, let first = value.first, first == "'" || first == "\"", value.last == first {
                value = String(value.dropFirst().dropLast())
            }
            result[String(text[..<equals])] = value
        }
        return result
    }

    /// Records what the sink plays while `body` runs, then returns it as 16 kHz mono samples.
    public func capture(_ body: () async throws -> Void) async throws -> [Int16] {
        let file = "\(directory)/capture-\(UInt32.random(in: 0...UInt32.max)).raw"
        try await run("\(Paths.root)/scripts/rig.sh", ["capture-start", directory, file])
        var bodyError: (any Error)?
        do { try await body() } catch { bodyError = error }
        // Let the tail of the sound reach the monitor before stopping.
        try await Task.sleep(for: .milliseconds(300))
        try await run("\(Paths.root)/scripts/rig.sh", ["capture-stop", directory])
        if let bodyError { throw bodyError }
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        // ANNOUNCE_KEEP_CAPTURES=DIR keeps every capture for a look with sox or numpy when a test fails.
        if let keep = ProcessInfo.processInfo.environment["ANNOUNCE_KEEP_CAPTURES"] {
            try? data.write(to: URL(fileURLWithPath: "\(keep)/capture-\(Monotonic.nanos).raw"))
        }
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }

    /// How many frames the capture running now holds: the present moment in the capture's own timeline (as of
    /// parec's last 20 ms fragment). 0 when no capture runs.
    public func capturedFrames() -> Int {
        guard let file = runningCaptureFile(),
            let size = try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int
        else { return 0 }
        return size / 2
    }

    /// What the capture running now holds so far (as of parec's last 20 ms fragment), as 16 kHz mono samples:
    /// for a test that must wait until something was heard. Empty when no capture runs.
    public func capturedSoFar() -> [Int16] {
        guard let file = runningCaptureFile(), let data = FileManager.default.contents(atPath: file) else { return [] }
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self).prefix(data.count / 2)) }
    }

    /// The file the running capture writes (scripts/rig.sh capture-start names it in capture.file).
    private func runningCaptureFile() -> String? {
        (try? String(contentsOfFile: "\(directory)/capture.file", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs a command with this rig's environment (pactl, amixer -D pulse …).
    public func command(_ executable: String, _ arguments: [String]) async throws -> CommandResult {
        try await run(executable, arguments, environment: environment)
    }
}

/// Runs `body` with a fresh rig and stops the rig afterwards, whatever happens.
public func withRig<T>(_ body: (Rig) async throws -> T) async throws -> T {
    let rig = try await Rig.start()
    do {
        let result = try await body(rig)
        await rig.stop()
        return result
    } catch {
        await rig.stop()
        throw error
    }
}

/// A real `announced` process on a temporary socket, playing on the rig. Start one with
/// ``withDaemon(rig:arguments:directory:_:)``; a test may kill it and start another on the same directory
/// (same state) to test restarts.
public final class DaemonProcess: Sendable {
    public let socket: String
    public let directory: String
    public let logFile: String
    /// The process started: the daemon, or its launcher.
    private let pid: Int32
    /// The daemon's own process: `pid`, unless a launcher forked it (faketime does), then the pid its `status` says.
    private let daemonPID: Atomic<Int32>
    private let exit: Task<Int32, any Error>

    private init(socket: String, directory: String, logFile: String, pid: Int32, exit: Task<Int32, any Error>) {
        self.socket = socket
        self.directory = directory
        self.logFile = logFile
        self.pid = pid
        self.daemonPID = Atomic(pid)
        self.exit = exit
    }

    /// Starts `announced` with `--socket DIR/s.sock --state-dir DIR/state --voices …` plus `arguments`, and
    /// returns once it answers `ping`. `environment` is added to the rig's; `launcher` (a program and its
    /// arguments, such as `systemd-socket-activate -l …`) runs announced instead of starting it directly.
    public static func start(
        rig: Rig?, arguments: [String] = [], device: String = "pulse", directory: String? = nil,
        environment: [String: String] = [:], launcher: [String] = []
    ) async throws -> DaemonProcess {
        let directory = try directory ?? Paths.temporaryDirectory("d")
        let socket = "\(directory)/s.sock"
        let logFile = "\(directory)/announced.log"
        var overrides: [Environment.Key: String?] = [:]
        for (key, value) in rig?.environment ?? [:] { overrides[Environment.Key(stringLiteral: key)] = value }
        for (key, value) in environment { overrides[Environment.Key(stringLiteral: key)] = value }
        let daemonCommand =
            ["\(Paths.bin)/announced", "--socket", socket, "--device", device, "--state-dir", "\(directory)/state",
             "--voices", Paths.voices] + arguments
        let command = launcher + daemonCommand
        let configuration = Configuration(
            executable: .path(FilePath(command[0])),
            arguments: Arguments(Array(command.dropFirst())),
            environment: .inherit.updating(overrides))
        let (pid, exitTask) = try await BackgroundProcess.launch(configuration, logFile: logFile, name: "announced")
        let daemon = DaemonProcess(socket: socket, directory: directory, logFile: logFile, pid: pid, exit: exitTask)
        // Under a launcher the socket is the launcher's, made before it runs announced: not checked.
        try await daemon.waitUntilReady(checkingListener: launcher.isEmpty)
        return daemon
    }

    /// Waits until the daemon answers `status`. `checkingListener`: the process answering must be this one, not a
    /// daemon an earlier step of the test left running on the same socket (which would answer for it).
    private func waitUntilReady(checkingListener: Bool) async throws {
        let ready = try await eventually(timeout: .seconds(20), every: .milliseconds(50)) {
            if !isRunning { throw HarnessError("announced exited early:\n\(log)") }
            // A bounded read: a socket held by a process that does not answer (a crashed daemon under a
            // backtracer) must fail this wait, not block it.
            guard let client = try? Client(path: socket, timeout: 2),
                let status = (try? client.send(Request(op: "status")))?.first?.status
            else { return false }
            if checkingListener, status.pid != pid {
                throw HarnessError("another announced (pid \(status.pid)) answers on \(socket), not this one (\(pid))")
            }
            daemonPID.store(status.pid, ordering: .relaxed)
            return true
        }
        if ready { return }
        throw HarnessError("announced did not answer within 20 s:\n\(log)")
    }

    public var processID: Int32 { daemonPID.load(ordering: .relaxed) }

    /// Whether the process is still there (it has not exited, or been stopped, and been reaped).
    public var isRunning: Bool { Glibc.kill(pid, 0) == 0 }

    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    /// Runs `announce-ctl` against this daemon.
    public func ctl(_ arguments: [String]) async throws -> CommandResult {
        try await run("\(Paths.bin)/announce-ctl", arguments, environment: ["ANNOUNCE_SOCKET": socket])
    }

    /// Waits for the daemon to exit by itself (after a signal sent with `signal(_:)`); returns its status.
    public func waitForExit() async throws -> Int32 {
        try await exit.value
    }

    /// Stops the daemon, if it is still running, with SIGTERM and requires what SIGTERM promises: exit 0. A crash
    /// on the way out (a sanitizer's report) fails the test that ran it, instead of going unseen.
    public func stopCleanly() async throws {
        guard isRunning else { return }
        let status = try await stop()
        if status != 0 { throw HarnessError("announced exited with \(status) on SIGTERM:\n\(log)") }
    }

    /// Sends `signal` and returns the exit status (128 + signal if it died of it).
    @discardableResult
    /// (Under a launcher that forks — faketime — the signal goes to the daemon, and the status is the launcher's:
    /// the daemon's own exit status, 1 if a signal killed it.)
    public func stop(signal: Int32 = SIGTERM) async throws -> Int32 {
        _ = Glibc.kill(processID, signal)
        return try await exit.value
    }
}

/// Runs `body` with a daemon on the rig and stops it afterwards (SIGTERM), whatever happens.
/// The daemon's directory is removed unless `directory` was given.
public func withDaemon<T>(
    rig: Rig?, arguments: [String] = [], device: String = "pulse", directory: String? = nil,
    environment: [String: String] = [:], launcher: [String] = [],
    _ body: (DaemonProcess) async throws -> T
) async throws -> T {
    let daemon = try await DaemonProcess.start(
        rig: rig, arguments: arguments, device: device, directory: directory, environment: environment,
        launcher: launcher)
    defer { if directory == nil { try? FileManager.default.removeItem(atPath: daemon.directory) } }
    do {
        let result = try await body(daemon)
        try await daemon.stopCleanly()
        return result
    } catch {
        _ = try? await daemon.stop()
        throw error
    }
}

public struct HarnessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
