import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing

extension DaemonIntegration {
    /// Many clients, misbehaving clients, and who may do what — against the real daemon on ALSA's `null` PCM.
    @Suite
    struct DaemonConnectionTests {
        /// 10 clients × 100 payments at once, each client on its own connection: nothing lost, nothing doubled,
        /// each client's payments accepted and spoken in the order it sent them.
        @Test func tenClientsTimesAHundredLoseNothingAndKeepOrder() async throws {
            let clients = 10
            let perClient = 100
            try await withDaemon(rig: nil, arguments: ["--queue-capacity", "2000"], device: "null") { daemon in
                let accepted = Mutex<[Int: [(id: UInt64, amount: String)]]>([:])
                let failures = Mutex<[String]>([])
                try await blocking {
                    DispatchQueue.concurrentPerform(iterations: clients) { client in
                        do {
                            let connection = try Client(path: daemon.socket)
                            var mine: [(UInt64, String)] = []
                            for index in 0..<perClient {
                                let fen = Int64(client * 1000 + index + 1)
                                let replies = try connection.send(
                                    Request(id: "\(client)-\(index)", op: "say", fen: fen, order: "C\(client)-\(index)")
                                )
                                guard let reply = replies.last, reply.ok, reply.id == "\(client)-\(index)",
                                    let job = reply.job
                                else {
                                    failures.withLock { $0.append("client \(client) #\(index): \(replies)") }
                                    continue
                                }
                                mine.append((job.id, job.amount ?? ""))
                            }
                            accepted.withLock { $0[client] = mine }
                        } catch {
                            failures.withLock { $0.append("client \(client): \(error)") }
                        }
                    }
                }
                #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
                let perClientJobs = accepted.withLock { $0 }
                let ids = perClientJobs.values.flatMap { $0.map(\.id) }
                #expect(ids.count == clients * perClient)
                #expect(Set(ids).count == ids.count, "every job got its own id")
                for (client, jobs) in perClientJobs {
                    #expect(jobs.map(\.id) == jobs.map(\.id).sorted(), "client \(client)'s jobs are numbered in order")
                    let expected = (0..<perClient).map { try! Amount(fen: Int64(client * 1000 + $0 + 1)).description }
                    #expect(jobs.map(\.amount) == expected, "client \(client)'s amounts, in the order sent")
                }

                try await daemon.waitUntilIdle()
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 1000)).jobs)
                #expect(history.count == clients * perClient)
                #expect(history.allSatisfy { $0.state == .spoken }, "every accepted job was spoken")
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.totals.accepted == clients * perClient)
                #expect(status.totals.finished["spoken"] == clients * perClient)
                // The daemon's log records each job's end as it happens: in job order, each once.
                let finished = daemon.log.split(separator: "\n").filter { $0.contains("job finished") }.compactMap {
                    line in
                    line.split(separator: " ").first { $0.hasPrefix("job.id=") }.flatMap { UInt64($0.dropFirst(7)) }
                }
                #expect(finished.count == clients * perClient)
                #expect(
                    finished == finished.sorted() && Set(finished).count == finished.count, "spoken first in, first out"
                )
            }
        }

        @Test func garbageAndOversizedRequestsAffectOnlyTheirOwnConnection() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[limits]\nmax_request_bytes = 1024\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                let bystander = try Client(path: daemon.socket)
                #expect(try bystander.send(Request(op: "ping")).last?.ok == true)

                let oversized = try RawConnection(path: daemon.socket)
                oversized.write(#"{"op":"say","amount":""# + String(repeating: "9", count: 2000))
                let reply = await oversized.readResponse()
                #expect(
                    reply?.error?.code == "bad_request" && reply?.error?.message.contains("1024") == true,
                    "\(String(describing: reply))")
                #expect(await oversized.isClosedByPeer(within: .seconds(5)))

                let garbage = try RawConnection(path: daemon.socket)
                garbage.write(String(repeating: "\u{1}{[", count: 300) + "\n")
                #expect(await garbage.readResponse()?.error?.code == "bad_request")
                garbage.write(#"{"op":"ping"}"# + "\n")
                #expect(await garbage.readResponse()?.ok == true, "garbage is answered; the connection stays usable")

                // The bystander's connection was never disturbed.
                let said = try bystander.send(Request(op: "say", amount: "1", wait: true))
                #expect(said.last?.job?.state == .spoken)
            }
        }

        @Test func slowAndIdleClientsAreDisconnectedWhileOthersAreServed() async throws {
            try await withDaemon(
                rig: nil, arguments: ["--request-timeout", "0.5", "--idle-timeout", "1"], device: "null"
            ) { daemon in
                let slow = try RawConnection(path: daemon.socket)
                slow.write(#"{"op":"pi"#)  // and nothing more (slowloris)
                let idle = try RawConnection(path: daemon.socket)
                // Meanwhile another client is served as usual.
                #expect(try await daemon.reply(Request(op: "say", amount: "2", wait: true)).job?.state == .spoken)
                let timeout = await slow.readResponse(timeout: .seconds(10))
                #expect(timeout?.error?.code == "timeout", "\(String(describing: timeout))")
                #expect(await slow.isClosedByPeer(within: .seconds(10)))
                #expect(await idle.isClosedByPeer(within: .seconds(10)), "a connection that sends nothing is closed")
                // A connection that keeps sending complete requests is not idle.
                let busy = try RawConnection(path: daemon.socket)
                for _ in 0..<4 {
                    try await Task.sleep(for: .milliseconds(400))
                    busy.write(#"{"op":"ping"}"# + "\n")
                    #expect(await busy.readResponse()?.ok == true)
                }
            }
        }

        @Test func aClientThatNeverReadsIsCutOffAndNobodyElseNotices() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[limits]\nwrite_timeout = \"1s\"\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                let deaf = try RawConnection(path: daemon.socket)
                let requests = Array(String(repeating: #"{"op":"ping"}"# + "\n", count: 1000).utf8)
                // Writes pings and never reads: the replies pile up until the daemon gives up on it.
                let writer = Task {
                    try await blocking {
                        var sent = 0
                        while deaf.write(requests) && sent < 2_000 { sent += 1 }
                        return sent
                    }
                }
                try await Task.sleep(for: .milliseconds(300))
                #expect(try await daemon.reply(Request(op: "say", amount: "3", wait: true)).job?.state == .spoken)
                // Only so that a daemon that never cuts it off fails the test instead of hanging it.
                let gaveUp = Mutex(false)
                let watchdog = Task {
                    try await Task.sleep(for: .seconds(30))
                    gaveUp.withLock { $0 = true }
                    deaf.shutdownBoth()
                }
                let sent = try await writer.value
                watchdog.cancel()
                #expect(!gaveUp.withLock { $0 }, "the daemon did not close the deaf connection within 30 s")
                #expect(sent < 2_000, "the daemon closed the connection of a client that does not read")
                #expect(try await daemon.reply(Request(op: "ping")).ok)
            }
        }

        /// A client that sends its request and shuts its writing side down (shutdown(SHUT_WR), what `echo … |
        /// socat` does) is answered for every operation; one that closes completely has its request carried out
        /// all the same (issue 16, item 7).
        @Test func aClientThatShutsItsWritingSideIsAnsweredAndOneThatClosesIsServed() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                for request in [
                    Request(id: "p", op: "ping"), Request(id: "s", op: "status"),
                    Request(id: "q", op: "say", amount: "1.50", order: "half-1"),
                ] {
                    let connection = try RawConnection(path: daemon.socket)
                    connection.write(String(decoding: try JSONEncoder().encode(request), as: UTF8.self) + "\n")
                    connection.shutdownWrite()
                    let reply = await connection.readResponse()
                    #expect(
                        reply?.ok == true && reply?.id == request.id,
                        "\(request.op) after shutdown(SHUT_WR): \(String(describing: reply))")
                    #expect(
                        await connection.isClosedByPeer(within: .seconds(10)), "\(request.op): closed once answered")
                }
                let said = try #require(try await daemon.reply(Request(op: "history", limit: 1)).jobs?.first)
                #expect(said.order == "half-1" && said.amount == "1.50")

                // Closed completely before the daemon read a byte: the payment is still taken, once.
                let gone = try RawConnection(path: daemon.socket)
                gone.write(#"{"id":"g","op":"say","amount":"2.50","order":"gone-1"}"# + "\n")
                gone.close()
                let status = try await daemon.waitForStatus { $0.totals.accepted == 2 }
                #expect(status.totals.accepted == 2)
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 5)).jobs)
                #expect(history.map(\.order) == ["gone-1", "half-1"])
                #expect(!daemon.log.contains("cannot read the peer's credentials"), "\(daemon.log)")
            }
        }

        /// The example at the top of docs/protocol.md, run as written (only the socket path differs) with the real
        /// socat: the acceptance reply, then the final one.
        @Test func theDocumentedSocatExampleWorks() async throws {
            let socat = "/usr/bin/socat"
            try #require(FileManager.default.isExecutableFile(atPath: socat), "socat is installed by scripts/setup.sh")
            let document = try String(contentsOfFile: "\(Paths.root)/docs/protocol.md", encoding: .utf8)
            let example = try #require(
                document.split(separator: "\n").first { $0.hasPrefix("$ echo") && $0.contains("| socat") })
            try await withDaemon(rig: nil, device: "null") { daemon in
                let command = example.dropFirst(2).replacingOccurrences(
                    of: "/run/announce/announce.sock", with: daemon.socket)
                let result = try await run("/bin/sh", ["-c", command])
                #expect(result.status == 0, "\(command): \(result)")
                let replies = result.stdout.split(separator: "\n").map {
                    try? JSONDecoder().decode(Response.self, from: Data($0.utf8))
                }
                #expect(replies.count == 2, "\(command): \(result)")
                let accepted = replies.first ?? nil
                let final = replies.last ?? nil
                #expect(accepted?.ok == true && accepted?.done == false && accepted?.job?.state == .queued, "\(result)")
                #expect(accepted?.id == "1" && accepted?.job?.order == "A1", "\(result)")
                #expect(final?.ok == true && final?.done == true && final?.job?.state == .spoken, "\(result)")
            }
        }

        /// Connections are kept for peers that may speak (issue 16, item 9): a read-only peer (another uid) that
        /// takes every connection it can get is refused before the kept ones, and a control peer's `say` and a
        /// submit peer's (the push listener's role) are answered at once while it holds them.
        @Test func aReadOnlyPeerCannotTakeTheConnectionsKeptForSpeakers() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            // 8 connections, of which a quarter (2, the default) are kept.
            try "[access]\nsubmit_users = [\"4242\"]\n[limits]\nmax_clients = 8\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                // The start-up probe's connection is gone: only this status request's own is counted.
                try await daemon.waitForStatus { $0.clients == 1 }
                let reader = try await RawConnection.open(8, to: daemon.socket, as: .nobody)
                var held: [RawConnection] = []
                var refusals: [String] = []
                for connection in reader {
                    connection.write(#"{"op":"status"}"# + "\n")
                    let reply = await connection.readResponse()
                    if reply?.ok == true {
                        #expect(reply?.status?.peer?.uid == 65534 && reply?.status?.peer?.access == .read)
                        held.append(connection)
                    } else {
                        refusals.append("\(reply?.error?.code ?? "none"): \(reply?.error?.message ?? "")")
                    }
                }
                #expect(held.count == 6, "the reader holds max_clients − reserved_clients connections")
                let busy =
                    "busy: the daemon serves 6 connections at once to peers that may only read; 2 of its 8 are kept "
                    + "for peers that may speak (limits.reserved_clients); try again"
                #expect(refusals == [busy, busy], "\(refusals)")

                let control = try RawConnection(path: daemon.socket)
                control.write(#"{"id":"c","op":"say","amount":"1","order":"RES-1"}"# + "\n")
                let controlReply = await control.readResponse()
                #expect(
                    controlReply?.ok == true && controlReply?.job?.order == "RES-1", "\(String(describing: controlReply))")
                let submitter = try #require(
                    try await RawConnection.open(1, to: daemon.socket, as: Identity(uid: 4242, gid: 4242)).first)
                submitter.write(#"{"id":"s","op":"say","amount":"2","order":"RES-2"}"# + "\n")
                let submitted = await submitter.readResponse()
                #expect(submitted?.ok == true && submitted?.job?.order == "RES-2", "\(String(describing: submitted))")

                // Every connection is in use now: even a peer that may speak waits for one.
                let ninth = try RawConnection(path: daemon.socket)
                ninth.write(#"{"op":"ping"}"# + "\n")
                #expect(
                    await ninth.readResponse()?.error?.message
                        == "the daemon serves 8 connections at once (limits.max_clients); try again")
                for connection in held + [control, submitter] { connection.close() }
                try await daemon.waitForStatus { $0.clients == 1 && $0.queue.unfinished == 0 }
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 5)).jobs)
                #expect(history.map(\.order) == ["RES-2", "RES-1"] && history.allSatisfy { $0.state == .spoken })
            }
        }

        @Test func tooManyClientsAreAnsweredBusy() async throws {
            try await withDaemon(rig: nil, arguments: ["--max-clients", "3"], device: "null") { daemon in
                // A connection just closed (the start-up probe's) may hold its slot until the daemon reaps it:
                // a `busy` while filling the slots is retried, anything else is a failure.
                var held: [RawConnection] = []
                for _ in 0..<200 where held.count < 3 {
                    let connection = try RawConnection(path: daemon.socket)
                    connection.write(#"{"op":"ping"}"# + "\n")
                    let response = await connection.readResponse()
                    if response?.error?.code == "busy" {
                        connection.close()
                        try await Task.sleep(for: .milliseconds(20))
                        continue
                    }
                    #expect(response?.ok == true)
                    held.append(connection)
                }
                try #require(held.count == 3)
                let extra = try RawConnection(path: daemon.socket)
                #expect(await extra.readResponse()?.error?.code == "busy")
                #expect(await extra.isClosedByPeer(within: .seconds(5)))
                held[0].close()
                try await Task.sleep(for: .milliseconds(200))
                #expect(try await daemon.reply(Request(op: "ping")).ok, "a slot freed is a slot for the next client")
            }
        }
    }

    /// SO_PEERCRED: `say` only from trusted peers. The tests run as root and run announce-ctl as other users.
    @Suite
    struct DaemonAccessTests {
        @Test func anUnauthorizedPeerMayLookButNotSpeak() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let status = try await daemon.ctl(["status"], as: .nobody)
                #expect(status.status == 0, "\(status)")
                #expect(status.stdout.contains("uid 65534, gid 65534: read"), "\(status)")
                for arguments in [
                    ["say", "100"], ["prompt", "network-lost"], ["cancel", "--all"], ["replay"], ["volume", "50"],
                ] {
                    let refused = try await daemon.ctl(arguments, as: .nobody)
                    #expect(refused.status == 3, "\(arguments): \(refused)")
                    #expect(refused.stdout.contains("error: unauthorized"), "\(arguments): \(refused)")
                }
                #expect(try await daemon.ctl(["history"], as: .nobody).status == 0)
                #expect(try await daemon.ctl(["volume"], as: .nobody).status == 0)
                #expect(try await daemon.reply(Request(op: "status")).status?.totals.accepted == 0, "nothing was said")
                #expect(daemon.log.contains("request refused: unauthorized"))
            }
        }

        /// The push listener's role (issue 16, item 13): a `submit` user makes the speaker speak (say, prompt,
        /// text) but may not cancel, replay or change the volume.
        @Test func aSubmitUserMaySpeakButNotCancelReplayOrSetTheVolume() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[access]\nsubmit_users = [\"nobody\"]\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            let options = ["--config", "\(config)/a.toml"]
            try await withDaemon(rig: nil, arguments: options, device: "null") { daemon in
                let status = try await daemon.ctl(["status"], as: .nobody)
                #expect(status.stdout.contains("uid 65534, gid 65534: submit"), "\(status)")
                for arguments in [
                    ["say", "--wait", "--order", "S-1", "100"], ["prompt", "network-lost"], ["text", "请到前台取货"],
                ] {
                    let allowed = try await daemon.ctl(arguments, as: .nobody)
                    #expect(allowed.status == 0, "\(arguments): \(allowed)")
                }
                for arguments in [["cancel", "--all"], ["replay"], ["volume", "50"], ["volume", "--reset"]] {
                    let refused = try await daemon.ctl(arguments, as: .nobody)
                    #expect(refused.status == 3, "\(arguments): \(refused)")
                    #expect(refused.stdout.contains("error: unauthorized"), "\(arguments): \(refused)")
                    #expect(refused.stdout.contains("needs control access"), "\(arguments): \(refused)")
                }
                try await daemon.waitUntilIdle()
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 10)).jobs)
                #expect(history.count == 3, "say, prompt and text; no replay: \(history)")
                #expect(history.allSatisfy { $0.state == .spoken && $0.replayOf == nil }, "\(history)")
                #expect(try await daemon.reply(Request(op: "volume")).volume?.thresholdSource != "set")
            }
        }

        @Test func theConfigurationDecidesWhoMaySpeakAndWhoMayConnect() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try """
            socket_mode = "0660"
            socket_group = "4242"
            [access]
            control_users = ["nobody"]
            control_groups = ["4343"]
            read_anyone = false
            read_groups = ["4242"]
            """.write(toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                var info = stat()
                #expect(stat(daemon.socket, &info) == 0)
                #expect(info.st_mode & 0o777 == 0o660 && info.st_gid == 4242, "socket mode and group from the config")

                // A listed user may speak even without the socket's group… (nobody gets in as the group member here)
                let listed = try await daemon.ctl(
                    ["say", "--wait", "1"], as: Identity(uid: 65534, gid: 65534, groups: [4242]))
                #expect(listed.status == 0, "\(listed)")
                // …a member of a control group too, and through a supplementary group (SO_PEERGROUPS).
                let member = try await daemon.ctl(
                    ["say", "2"], as: Identity(uid: 5000, gid: 5000, groups: [4242, 4343]))
                #expect(member.status == 0, "\(member)")
                // A member of the read group only may look, not speak.
                let reader = Identity(uid: 5001, gid: 5001, groups: [4242])
                #expect(try await daemon.ctl(["status"], as: reader).status == 0)
                #expect(try await daemon.ctl(["say", "3"], as: reader).status == 3)
                // Outside the socket's group, the file mode keeps a stranger from even connecting.
                let stranger = try await daemon.ctl(["status"], as: Identity(uid: 5002, gid: 5002))
                #expect(stranger.status == 4, "\(stranger)")
                #expect(stranger.stderr.contains("Permission denied"), "\(stranger)")
            }
        }
    }
}
