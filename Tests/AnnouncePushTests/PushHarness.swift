import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation

/// A push listener set up for a test: its config (pointing at a test broker and a test daemon), the real
/// `announce-push` process, and the real publisher tool.
final class PushSetup: Sendable {
    static let keyHex = "8f3a9c0d5b7e21466f0a1c3e5d7b9f218f3a9c0d5b7e21466f0a1c3e5d7b9f21"
    static let otherKeyHex = "0000000000000000000000000000000000000000000000000000000000000001"

    let directory: String
    let configPath: String
    let device = "T1"

    /// The receipts waiting for the broker's acknowledgement (`state_dir`).
    var stateDirectory: String { "\(directory)/state" }

    /// `broker` is extra lines for `[broker]` (credentials); `sections` whole tables after the rest (`[status]`…).
    /// `security` is `[security]`: by default the clock is trusted as it is — the tests' machines have no NTP, so
    /// the kernel calls their clock unsynchronised, and a test of the time window is about the window; the tests
    /// of an unsynchronised clock name their own source (a file). `clientID`: the session's (default: one of its
    /// own per setup).
    init(
        broker: Broker, socket: String, url: String? = nil, extra: String = "", tls: String = "",
        daemon: String = "hold = \"1s\"", keepalive: String = "10s", brokerExtra: String = "", sections: String = "",
        security: String = "clock_sync = \"trust\"", clientID: String? = nil,
        reconnect: (min: String, max: String) = ("200ms", "1s")
    ) throws {
        directory = try Paths.temporaryDirectory("push")
        configPath = "\(directory)/push.toml"
        let config = """
            device = "\(device)"
            socket = "\(socket)"
            log_level = "debug"
            state_dir = "\(directory)/state"

            [broker]
            url = "\(url ?? broker.url)"
            client_id = "\(clientID ?? "announce-T1-\(UInt32.random(in: 0...UInt32.max))")"
            keepalive = "\(keepalive)"
            connect_timeout = "5s"
            reconnect_min = "\(reconnect.min)"
            reconnect_max = "\(reconnect.max)"
            \(brokerExtra)
            \(tls)

            [daemon]
            \(daemon)

            [security]
            \(security)

            [keys]
            k1 = "hex:\(Self.keyHex)"

            [prompts]
            lost_after = "1s"
            min_interval = "2s"
            \(extra)

            \(sections)
            """
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// Starts `announce-push run`, by default waiting until it has subscribed to its topics at the broker (not merely
    /// to the daemon's events, logged "subscribed to the daemon's events" before it even connects).
    func startListener(
        waitForSubscription: Bool = true, as identity: Identity? = nil, launcher: [String] = [],
        environment: [String: String] = [:]
    ) async throws -> BackgroundProcess {
        if let identity {
            // Its own state folder, as systemd's StateDirectory= gives the service's user.
            try FileManager.default.createDirectory(atPath: stateDirectory, withIntermediateDirectories: true)
            guard chown(stateDirectory, identity.uid, identity.gid) == 0 else {
                throw HarnessError("cannot give \(stateDirectory) to uid \(identity.uid)")
            }
        }
        let command = launcher + ["\(Paths.bin)/announce-push", "run", "--config", configPath]
        let listener = try await BackgroundProcess.start(
            command[0], Array(command.dropFirst()), environment: environment, identity: identity,
            logFile: "\(directory)/push.log")
        if waitForSubscription { try await listener.waitForLog("subscribed topics=") }
        return listener
    }

    /// Runs the real publisher tool with this config (`announce-push publish --config … ARGS`).
    @discardableResult
    func publish(_ arguments: [String]) async throws -> CommandResult {
        let result = try await run("\(Paths.bin)/announce-push", ["publish", "--config", configPath] + arguments)
        guard result.status == 0 else { throw HarnessError("publish \(arguments) failed: \(result)") }
        return result
    }

    /// `announce-push sign --config … ARGS`: the signed payload.
    func sign(_ arguments: [String]) async throws -> String {
        let result = try await run("\(Paths.bin)/announce-push", ["sign", "--config", configPath] + arguments)
        guard result.status == 0 else { throw HarnessError("sign \(arguments) failed: \(result)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Publishes raw bytes (unsigned, as given) with the publisher tool.
    func publishRaw(_ payload: String) async throws {
        let file = "\(directory)/raw-\(UInt32.random(in: 0...UInt32.max)).json"
        try payload.write(toFile: file, atomically: true, encoding: .utf8)
        try await publish(["--raw", file])
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// Runs `body` with a listener for `broker` and `daemon`; stops it and removes its folder afterwards.
func withListener<T>(
    broker: Broker, socket: String, url: String? = nil, extra: String = "", tls: String = "",
    daemon: String = "hold = \"1s\"", brokerExtra: String = "", sections: String = "",
    waitForSubscription: Bool = true, _ body: (PushSetup, BackgroundProcess) async throws -> T
) async throws -> T {
    let setup = try PushSetup(
        broker: broker, socket: socket, url: url, extra: extra, tls: tls, daemon: daemon, brokerExtra: brokerExtra,
        sections: sections)
    defer { setup.remove() }
    let listener = try await setup.startListener(waitForSubscription: waitForSubscription)
    do {
        let result = try await body(setup, listener)
        _ = try? await listener.stop()
        return result
    } catch {
        _ = try? await listener.stop()
        throw error
    }
}

extension DaemonProcess {
    /// Every job the daemon remembers (`history`), newest first.
    func history() async throws -> [JobInfo] {
        try await reply(Request(op: "history", limit: 1000)).jobs ?? []
    }

    /// The jobs for each order id.
    func jobs(order: String) async throws -> [JobInfo] {
        try await history().filter { $0.order == order }
    }

    /// Waits until every order has a job that has been spoken; returns the history then.
    @discardableResult
    func waitUntilSpoken(_ orders: [String], timeout: Duration = .seconds(60)) async throws -> [JobInfo] {
        var jobs: [JobInfo] = []
        let spoken = try await eventually(timeout: timeout, every: .milliseconds(100)) {
            jobs = (try? await history()) ?? []
            let spoken = Set(jobs.filter { $0.state == .spoken }.compactMap(\.order))
            return orders.allSatisfy(spoken.contains)
        }
        if spoken { return jobs }
        throw HarnessError(
            "not all of \(orders) were spoken; history: \(jobs.map { "\($0.order ?? "-"):\($0.state)" })")
    }

    /// Waits until a status prompt named `name` has been spoken `count` times.
    func waitUntilPromptSpoken(_ name: String, count: Int = 1, timeout: Duration = .seconds(30)) async throws {
        let spoken = try await eventually(timeout: timeout, every: .milliseconds(100)) { () async -> Bool in
            let jobs: [JobInfo] = (try? await self.history()) ?? []
            return jobs.filter { $0.prompt == name && $0.state == .spoken }.count >= count
        }
        if spoken { return }
        let history = (try? await history()) ?? []
        throw HarnessError("prompt \(name) was not spoken \(count) time(s); history: \(history)")
    }
}

extension BackgroundProcess {
    /// The push listener's metrics over HTTP (its config has `[metrics] listen = "127.0.0.1:0"`: the port it got
    /// is in its log).
    func scrapeMetrics() async throws -> String {
        guard let served = logLines(containing: "metrics served over HTTP").first?.split(separator: " ")
            .first(where: { $0.hasPrefix("listen=") }),
            let port = served.split(separator: ":").last.flatMap({ Int($0) })
        else { throw HarnessError("the listener serves no metrics:\n\(log)") }
        let reply = try await HTTP.request(port: port, path: "/metrics")
        guard reply.status == 200 else { throw HarnessError("scrape: \(reply)") }
        return reply.body
    }

    /// How many log lines contain all of `parts`.
    func logLines(containing parts: String...) -> [Substring] {
        log.split(separator: "\n").filter { line in parts.allSatisfy { line.contains($0) } }
    }
}
