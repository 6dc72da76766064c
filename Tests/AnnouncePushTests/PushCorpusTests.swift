import AnnounceClient
import AnnounceCore
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// A web server for the clips a test pushes, on a free loopback port, serving the files of a folder: over HTTPS
/// (`openssl s_server -WWW`, its certificate from ``TestCertificates``), or plain HTTP with a gate — each file is
/// sent half, then the rest only once the gate file exists (a download cut in the middle, on purpose).
final class ClipServer: Sendable {
    let directory: String
    let port: Int
    let https: Bool
    private let process: BackgroundProcess

    var gate: String { "\(directory)/.gate" }
    /// Made when a gated file has been half sent.
    var halfSent: String { "\(directory)/.half-sent" }

    private init(directory: String, port: Int, https: Bool, process: BackgroundProcess) {
        self.directory = directory
        self.port = port
        self.https = https
        self.process = process
    }

    static func https(_ certificates: TestCertificates) async throws -> ClipServer {
        let directory = try Paths.temporaryDirectory("www")
        let port = try Broker.freePort()
        let tls = certificates.directory
        let process = try await BackgroundProcess.start(
            "/bin/sh",
            ["-c", "cd '\(directory)' && exec openssl s_server -quiet -WWW -accept \(port) "
                + "-cert '\(tls)/server.pem' -key '\(tls)/server.key'"],
            logFile: "\(directory)/.server.log")
        return try await started(ClipServer(directory: directory, port: port, https: true, process: process))
    }

    /// Plain HTTP, gated: the gate starts open.
    static func gated() async throws -> ClipServer {
        let directory = try Paths.temporaryDirectory("www")
        let port = try Broker.freePort()
        let script = """
            import http.server, os, sys, time
            root, gate, half = sys.argv[1], sys.argv[1] + "/.gate", sys.argv[1] + "/.half-sent"
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    data = open(os.path.join(root, self.path.lstrip("/")), "rb").read()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[:len(data) // 2])
                    self.wfile.flush()
                    open(half, "w").close()
                    while not os.path.exists(gate):
                        time.sleep(0.02)
                    self.wfile.write(data[len(data) // 2:])
                def log_message(self, *args):
                    pass
            http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
            """
        try script.write(toFile: "\(directory)/.server.py", atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: "\(directory)/.gate", contents: Data())
        let process = try await BackgroundProcess.start(
            "/usr/bin/python3", ["\(directory)/.server.py", directory, "\(port)"],
            logFile: "\(directory)/.server.log")
        return try await started(ClipServer(directory: directory, port: port, https: false, process: process))
    }

    private static func started(_ server: ClipServer) async throws -> ClipServer {
        let listening = try await eventually(timeout: .seconds(20)) {
            guard let socket = try? HTTP.connect(port: server.port) else { return false }
            close(socket)
            return true
        }
        guard listening else { throw HarnessError("the clip server did not listen:\n\(server.process.log)") }
        return server
    }

    func url(_ name: String) -> String { "\(https ? "https" : "http")://127.0.0.1:\(port)/\(name)" }

    /// Copies a clip of the default zh pack here as `name`; returns its path.
    @discardableResult
    func add(_ name: String, from clip: String) throws -> String {
        let path = "\(directory)/\(name)"
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: "\(Paths.voices)/zh/clips/\(clip)", toPath: path)
        return path
    }

    func stop() async {
        _ = try? await process.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs `body` with `server` and stops it (and removes its folder) afterwards, whatever happens.
    static func with<T>(_ server: ClipServer, _ body: (ClipServer) async throws -> T) async throws -> T {
        do {
            let result = try await body(server)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }
}

/// Corpus pushes end to end, on the parts the field has: a mosquitto with the fleet's passwords and ACL, the
/// service's watcher on the receipts, a real web server for the clips (HTTPS with a test CA, or HTTP), the real
/// `announce-push` and a real `announced` loading what it installs (docs/push.md, "Corpus push").
@Suite(.serialized)
struct PushCorpusTests {
    /// `[corpus]` for the listener: the clips kept in `directory` (the daemon's `--corpus`).
    static func corpusSection(_ directory: String, _ extra: String = "") -> String {
        "[corpus]\ndirectory = \"\(directory)\"\n\(extra)"
    }

    /// Publishes a corpus push as the payment service (`announce-push corpus`); returns the signed payload.
    @discardableResult
    static func push(_ setup: PushSetup, _ files: FleetFiles, _ arguments: [String]) async throws -> String {
        let result = try await run(
            "\(Paths.bin)/announce-push", ["corpus", "--config", setup.configPath] + arguments + files.serviceOptions)
        guard result.status == 0 else { throw HarnessError("corpus \(arguments): \(result)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func corpusStatus(_ daemon: DaemonProcess) async throws -> DaemonStatus.Corpus {
        try #require(try await daemon.reply(Request(op: "status")).status?.corpus)
    }

    static func receipts(_ watcher: TopicWatcher, _ task: String) -> [Receipt] {
        watcher.receipts.filter { $0.kind == .corpus && $0.order == task }
    }

    /// Clips pushed over HTTPS are downloaded, checked, installed and loaded by the daemon (its status lists them,
    /// decoded, by id), and the service gets one signed receipt per task: `installed` once, nothing for the same
    /// message again, `duplicate` for the task resent, `deleted` for a deletion by id and of all; a wrong hash or a
    /// plain http URL is `refused` and the corpus in force stays as it was.
    @Test func pushedClipsAreInstalledLoadedAndReceiptedOnce() async throws {
        let certificates = try await TestCertificates()
        defer { certificates.remove() }
        try await ClipServer.with(ClipServer.https(certificates)) { server in
            let corpus = try Paths.temporaryDirectory("corpus")
            defer { try? FileManager.default.removeItem(atPath: corpus) }
            let newOrder = try server.add("new_order.wav", from: "yuan.wav")
            let urged = try server.add("urged.wav", from: "bai.wav")
            try await withDaemon(rig: nil, arguments: ["--corpus", corpus], device: "null") { daemon in
                try await FleetBroker.with { broker, files in
                    let watcher = try await PushFleetTests.watcher(broker)
                    defer { watcher.stop() }
                    try await withListener(
                        broker: broker, socket: daemon.socket, extra: "enabled = false",
                        brokerExtra: files.credentials("T1"),
                        sections: Self.corpusSection(corpus, "ca_file = \"\(certificates.directory)/ca.pem\"")
                    ) { setup, listener in
                        let started = ContinuousClock.now
                        let first = try await Self.push(
                            setup, files,
                            ["--task", "C-1", "--clip", "new_order", newOrder, server.url("new_order.wav"),
                             "--clip", "urged", urged, server.url("urged.wav")])
                        try await watcher.waitForReceipts(["C-1"], state: .installed)
                        print("corpus push of 2 clips: receipt after \(ContinuousClock.now - started)")
                        var status = try await Self.corpusStatus(daemon)
                        #expect(status.version == 1)
                        #expect(status.clips.map(\.id) == ["new_order", "urged"])
                        #expect(status.clips.allSatisfy { $0.ms > 50 }, "\(status.clips)")
                        let installed = try #require(Self.receipts(watcher, "C-1").first)
                        #expect(installed.clips == 2 && installed.device == "T1")
                        #expect(installed.isValid(with: PushFleetTests.deviceKey))

                        // The same message again (a redelivery): acknowledged, nothing done, no receipt.
                        try await setup.publishRaw(first, options: files.serviceOptions)
                        try await listener.waitForLog("corpus push already noted (the same message again)")
                        // The task resent in a new message: a duplicate receipt naming what became of it.
                        try await Self.push(
                            setup, files, ["--task", "C-1", "--clip", "new_order", newOrder, server.url("new_order.wav")])
                        try await watcher.waitForReceipts(["C-1"], state: .duplicate)
                        #expect(Self.receipts(watcher, "C-1").map(\.state) == [.installed, .duplicate])
                        #expect(Self.receipts(watcher, "C-1").last?.original == .installed)

                        // A clip whose bytes are not those announced (the server now has another file under its name),
                        // and one over plain http: refused, nothing changed.
                        try server.add("urged.wav", from: "qian.wav")
                        let announced = "\(Paths.voices)/zh/clips/bai.wav"
                        try await Self.push(
                            setup, files, ["--task", "C-2", "--clip", "urged", announced, server.url("urged.wav")])
                        try await Self.push(
                            setup, files,
                            ["--task", "C-3", "--clip", "plain", newOrder,
                             "http://127.0.0.1:\(server.port)/new_order.wav"])
                        try await watcher.waitForReceipts(["C-2", "C-3"], state: .refused)
                        #expect(Self.receipts(watcher, "C-2").map(\.error) == ["bad_size"] || Self.receipts(watcher, "C-2").map(\.error) == ["bad_hash"])
                        #expect(Self.receipts(watcher, "C-3").map(\.error) == ["insecure_url"])
                        status = try await Self.corpusStatus(daemon)
                        #expect(status.version == 1 && status.clips.count == 2)

                        // Deleting one by id.
                        try await Self.push(setup, files, ["--task", "C-4", "--delete", "urged"])
                        try await watcher.waitForReceipts(["C-4"], state: .deleted)
                        status = try await Self.corpusStatus(daemon)
                        #expect(status.version == 2 && status.clips.map(\.id) == ["new_order"])
                        #expect(Self.receipts(watcher, "C-4").first?.clips == 1)
                        // And all of them.
                        try await Self.push(setup, files, ["--task", "C-5", "--delete-all"])
                        try await watcher.waitForReceipts(["C-5"], state: .deleted)
                        status = try await Self.corpusStatus(daemon)
                        #expect(status.version == 3 && status.clips.isEmpty)
                        try await PushFleetTests.waitUntilNothingPending(setup)
                        #expect(watcher.receipts.filter { $0.kind == .corpus }.count == 6)
                        // Only the version in force is left on disk.
                        let left = try FileManager.default.contentsOfDirectory(atPath: corpus).filter { $0.hasPrefix("v") }
                        #expect(left == ["v0000000000000003"])
                    }
                }
            }
        }
    }

    /// The listener killed (-9) in the middle of a download: the corpus in force stays whole and the daemon keeps
    /// it; after the restart the task runs again, is installed once and gets one receipt. A full disk fails a push
    /// (`no_space`) and leaves the corpus as it was; with room again, the next push is installed.
    @Test func aKillMidDownloadOrAFullDiskLeavesThePreviousCorpus() async throws {
        try await ClipServer.with(ClipServer.gated()) { server in
            let one = try server.add("one.wav", from: "yi1.wav")
            let two = try server.add("two.wav", from: "er.wav")
            try await SmallDisk.withStateFilesystem(megabytes: 2) { _, corpus in
                try await withDaemon(rig: nil, arguments: ["--corpus", corpus], device: "null") { daemon in
                    try await FleetBroker.with { broker, files in
                        let watcher = try await PushFleetTests.watcher(broker)
                        defer { watcher.stop() }
                        let setup = try PushSetup(
                            broker: broker, socket: daemon.socket, extra: "enabled = false",
                            brokerExtra: files.credentials("T1"),
                            sections: Self.corpusSection(corpus, "allow_http = true"))
                        defer { setup.remove() }
                        var listener = try await setup.startListener()
                        do {
                            try await Self.push(setup, files, ["--task", "K-1", "--clip", "one", one, server.url("one.wav")])
                            try await watcher.waitForReceipts(["K-1"], state: .installed)
                            // The next download stops half way; the listener dies there.
                            try FileManager.default.removeItem(atPath: server.gate)
                            try? FileManager.default.removeItem(atPath: server.halfSent)
                            try await Self.push(setup, files, ["--task", "K-2", "--clip", "two", two, server.url("two.wav")])
                            #expect(try await eventually(timeout: .seconds(20)) {
                                FileManager.default.fileExists(atPath: server.halfSent)
                            })
                            try await listener.stop(signal: SIGKILL)
                            let staged = try FileManager.default.contentsOfDirectory(atPath: corpus)
                            #expect(staged.contains { $0.hasPrefix(".staging-") }, "\(staged)")
                            var status = try await Self.corpusStatus(daemon)
                            #expect(status.version == 1 && status.clips.map(\.id) == ["one"])
                            // Restarted, it runs the task again; the gate opens once it is under way.
                            try? FileManager.default.removeItem(atPath: server.halfSent)
                            listener = try await setup.startListener()
                            #expect(try await eventually(timeout: .seconds(20)) {
                                FileManager.default.fileExists(atPath: server.halfSent)
                            })
                            _ = FileManager.default.createFile(atPath: server.gate, contents: Data())
                            try await watcher.waitForReceipts(["K-2"], state: .installed)
                            status = try await Self.corpusStatus(daemon)
                            #expect(status.version == 2 && status.clips.map(\.id) == ["one", "two"])
                            #expect(Self.receipts(watcher, "K-2").count == 1)
                            #expect(!(try FileManager.default.contentsOfDirectory(atPath: corpus)).contains {
                                $0.hasPrefix(".staging-")
                            })

                            // A full disk: the push fails, the corpus in force stays.
                            try SmallDisk.fill(corpus)
                            try await Self.push(setup, files, ["--task", "K-3", "--clip", "three", one, server.url("one.wav")])
                            try await watcher.waitForReceipts(["K-3"], state: .failed)
                            #expect(Self.receipts(watcher, "K-3").first?.error == "no_space")
                            status = try await Self.corpusStatus(daemon)
                            #expect(status.version == 2 && status.clips.count == 2)
                            SmallDisk.free(corpus)
                            try await Self.push(setup, files, ["--task", "K-4", "--clip", "three", one, server.url("one.wav")])
                            try await watcher.waitForReceipts(["K-4"], state: .installed)
                            #expect(try await Self.corpusStatus(daemon).clips.map(\.id) == ["one", "three", "two"])
                            try await PushFleetTests.waitUntilNothingPending(setup)
                            #expect(watcher.receipts.filter { $0.kind == .corpus }.map(\.order) == ["K-1", "K-2", "K-3", "K-4"])
                            // SIGTERM stops the listener: it closes its session and exits 0 (not killed by the signal).
                            #expect(try await listener.stop() == 0)
                        } catch {
                            _ = try? await listener.stop(signal: SIGKILL)
                            throw error
                        }
                    }
                }
            }
        }
    }
}
