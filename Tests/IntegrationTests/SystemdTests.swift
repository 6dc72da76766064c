import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

/// The daemon's systemd integration with the real daemon and real systemd tools on the host: socket
/// activation through `systemd-socket-activate`, and `sd_notify` messages (READY, STATUS, WATCHDOG, STOPPING)
/// received on a real notification socket. The same daemon under the real service manager, with the
/// project's unit files, is tested in the VM (Tests/SystemTests, scripts/vm/).
@Suite(.serialized)
struct SystemdTests {
    let pack: VoicePack

    init() throws {
        pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
    }

    @Test func socketActivatedDaemonServesTheSocketItWasHanded() async throws {
        try await withRig { rig in
            let directory = try Paths.temporaryDirectory("sa")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let socket = "\(directory)/s.sock"
            // systemd-socket-activate listens on the socket and execs announced (same PID) on the first
            // connection, passing the listener as fd 3. It passes on only the environment given with -E: the rig's,
            // and the sanitizers' settings of a sanitized run (scripts/test.sh: no leak report at exit).
            let sanitizers = ["ASAN_OPTIONS", "TSAN_OPTIONS", "SWIFT_BACKTRACE"].compactMap { name in
                ProcessInfo.processInfo.environment[name].map { (key: name, value: $0) }
            }
            let environment = rig.environment.map { (key: $0.key, value: $0.value) } + sanitizers
            let launcher =
                ["/usr/bin/systemd-socket-activate", "--listen=\(socket)"]
                + environment.sorted { $0.key < $1.key }.flatMap { ["-E", "\($0.key)=\($0.value)"] }
            try await withDaemon(rig: rig, directory: directory, launcher: launcher) { daemon in
                // The socket listening at the path is the one handed over as fd 3, not one the daemon bound.
                let listening = try #require(try listeningSocketInode(path: socket), "nothing listens on \(socket)")
                let fd3 = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(daemon.processID)/fd/3")
                #expect(fd3 == "socket:[\(listening)]", "fd 3 is \(fd3); the listener is socket \(listening)\n\(daemon.log)")

                var result: CommandResult?
                let captured = try await rig.capture { result = try await daemon.ctl(["say", "--wait", "100.00"]) }
                let reply = try #require(result)
                #expect(reply.status == 0, "\(reply)\n\(daemon.log)")
                #expect(reply.stdout.contains("job 1 spoken"), "\(reply.stdout)")
                let expected = try pack.render(pack.composer.compose(amount: Amount(parsing: "100.00")))
                let match = AudioMatch.correlation(expected: expected, captured: captured)
                #expect(match.value > 0.95, "captured audio does not match 到账一百元 (correlation \(match.value))")

                // The socket belongs to the service manager: the daemon leaves it in place when it stops.
                #expect(try await daemon.stop() == 0, "\(daemon.log)")
                #expect(FileManager.default.fileExists(atPath: socket), "the daemon removed systemd's socket")
            }
        }
    }

    @Test func tellsTheServiceManagerReadyStatusWatchdogAndStopping() async throws {
        let directory = try Paths.temporaryDirectory("nt")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let notify = try NotifySocket(path: "\(directory)/notify")
        defer { notify.close() }
        try await withRig { rig in
            let environment = ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"]
            let daemon = try await DaemonProcess.start(rig: rig, environment: environment)
            defer { try? FileManager.default.removeItem(atPath: daemon.directory) }

            // Ready once the socket is served (the harness's ping got an answer), with a status line.
            let ready = try #require(try await notify.wait { $0.contains("READY=1") }, "\(notify.received)")
            #expect(ready.contains("STATUS=listening on \(daemon.socket)"), "\(ready)")
            // Watchdog pings while healthy.
            let pinged = try await notify.wait { _ in notify.received.filter { $0 == "WATCHDOG=1" }.count >= 3 }
            #expect(pinged != nil, "fewer than 3 watchdog pings: \(notify.received)\n\(daemon.log)")
            // SIGTERM: STOPPING, then a clean exit.
            #expect(try await daemon.stop() == 0, "\(daemon.log)")
            #expect(notify.received.contains { $0.hasPrefix("STOPPING=1") }, "\(notify.received)")
            // Nothing comes after STOPPING but the last pings of the shutdown; READY came exactly once.
            #expect(notify.received.filter { $0.contains("READY=1") }.count == 1, "\(notify.received)")
        }
    }

    @Test func watchdogPingsStopWhileTheAudioThreadIsStuck() async throws {
        try await withWatchdog("wd") { rig, daemon, notify in
            _ = try await notify.wait { $0 == "WATCHDOG=1" }
            // A suspended sink blocks the ALSA write: the audio thread is stuck inside the job.
            let suspended = try await rig.command("/usr/bin/pactl", ["suspend-sink", "speaker", "1"])
            #expect(suspended.status == 0, "\(suspended)")
            let said = try await daemon.ctl(["say", "12345.67"])
            #expect(said.status == 0, "\(said)")

            // The daemon notices and stops pinging, so systemd would kill and restart it.
            let withheld = try await waitForLog(daemon, containing: "watchdog pings withheld")
            #expect(withheld, "no 'pings withheld' in the log:\n\(daemon.log)")
            #expect(daemon.log.contains("audio thread"), "\(daemon.log)")
            let pingsWhenStuck = notify.received.filter { $0 == "WATCHDOG=1" }.count
            // Two and a half ping intervals; well inside the ALSA write's own no-progress limit (2 s and a
            // buffer), after which the device counts as failed, its retries as progress, and pings resume.
            try await Task.sleep(for: .milliseconds(500))
            #expect(notify.received.filter { $0 == "WATCHDOG=1" }.count == pingsWhenStuck,
                    "pinged while the audio thread was stuck\n\(daemon.log)")

            // Unstuck, the job plays on and the pings resume.
            let resumed = try await rig.command("/usr/bin/pactl", ["suspend-sink", "speaker", "0"])
            #expect(resumed.status == 0, "\(resumed)")
            let again = try await notify.wait { _ in
                notify.received.filter { $0 == "WATCHDOG=1" }.count > pingsWhenStuck
            }
            #expect(again != nil, "pings did not resume:\n\(daemon.log)")
            #expect(try await waitForLog(daemon, containing: "watchdog pings resumed"), "\(daemon.log)")
        }
    }

    /// An announcement far longer than the stall limit is progress, not a hang: the watchdog judges the audio
    /// thread by the frames it writes, not by how long one job lasts (free text may take minutes).
    @Test func aLongAnnouncementIsNotMistakenForAHang() async throws {
        try await withWatchdog("wdl") { rig, daemon, notify in
            _ = try await notify.wait { $0 == "WATCHDOG=1" }
            // 到账九亿八千七百六十五万四千三百二十一点九九元: about 6 s, ten times the stall limit.
            let said = try await daemon.ctl(["say", "--wait", "987654321.99"])
            #expect(said.status == 0 && said.stdout.contains("spoken"), "\(said)")
            #expect(!daemon.log.contains("watchdog pings withheld"), "a healthy daemon looked hung:\n\(daemon.log)")
            let job = try #require(try await daemon.reply(Request(op: "history", limit: 1)).jobs?.first)
            #expect((job.finishedMs ?? 0) > 3_000, "the announcement was long: \(job)")
        }
    }

    /// A daemon on a rig under a 200 ms systemd watchdog (a notify socket of the test's own) and a 600 ms audio
    /// stall limit.
    func withWatchdog(
        _ name: String, _ body: (Rig, DaemonProcess, NotifySocket) async throws -> Void
    ) async throws {
        let directory = try Paths.temporaryDirectory(name)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let notify = try NotifySocket(path: "\(directory)/notify")
        defer { notify.close() }
        try await withRig { rig in
            let environment = ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"]
            try await withDaemon(rig: rig, arguments: ["--audio-stall-limit", "600ms"], environment: environment) {
                try await body(rig, $0, notify)
            }
        }
    }

    func waitForLog(_ daemon: DaemonProcess, containing text: String) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if daemon.log.contains(text) { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return daemon.log.contains(text)
    }
}

/// The inode of the listening socket bound to `path`, from the kernel's table of Unix sockets.
func listeningSocketInode(path: String) throws -> String? {
    // Columns: Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 (__SO_ACCEPTCON) marks listeners.
    // procfs hands the table out a page per read: read to the end, not one read's worth.
    guard let file = FileHandle(forReadingAtPath: "/proc/net/unix") else { return nil }
    defer { try? file.close() }
    let table = String(decoding: try file.readToEnd() ?? Data(), as: UTF8.self)
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 8, fields[7] == path, let flags = Int(fields[3], radix: 16), flags & 0x10000 != 0
        else { continue }
        return String(fields[6])
    }
    return nil
}
