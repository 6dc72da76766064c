import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// `subscribe` (docs/protocol.md, "Subscribing to final states"): the final states on disk after `since`, then
    /// every final state as it reaches the disk; a subscriber that does not read is dropped without holding up
    /// anything else; the stream ends when the daemon stops.
    @Suite
    struct SubscribeTests {
        /// Reads replies until one satisfies `stop`; returns them all (throws if the stream ends or stalls first).
        static func read(
            _ connection: RawConnection, timeout: Duration = .seconds(20), until stop: (Response) -> Bool
        ) async throws -> [Response] {
            var replies: [Response] = []
            while true {
                guard let line = await connection.readLine(timeout: timeout) else {
                    throw HarnessError("the stream ended or stalled; so far: \(replies)")
                }
                guard let reply = try? JSONDecoder().decode(Response.self, from: Data(line.utf8)) else {
                    throw HarnessError("not a reply: \(line); so far: \(replies)")
                }
                replies.append(reply)
                if stop(reply) { return replies }
            }
        }

        /// Reads replies until a `final` and a `status` have come. The hint is coalesced and comes after the
        /// finals buffered with it (docs/protocol.md): when the subscriber's task was busy while a job was accepted
        /// and ended, it follows that job's final.
        static func readFinalAndStatus(_ connection: RawConnection) async throws -> [Response] {
            var replies = try await read(connection) { $0.event == "final" }
            if !replies.contains(where: { $0.event == "status" }) {
                replies += try await read(connection) { $0.event == "status" }
            }
            return replies
        }

        static func finals(_ replies: [Response]) -> [UInt64] {
            replies.filter { $0.event == SubscriptionEvent.final.rawValue }.compactMap { $0.job?.id }
        }

        @Test func replaysFromSinceThenStreamsEachFinalStateOnce() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                for order in ["S-1", "S-2", "S-3"] {
                    _ = try await daemon.reply(Request(op: "say", amount: "1.00", order: order, wait: true))
                }
                // From the start: the three, in id order, then `live` with nothing unfinished.
                let all = try RawConnection(path: daemon.socket)
                defer { all.close() }
                all.write("{\"id\":\"a\",\"op\":\"subscribe\",\"since\":0}\n")
                let replayed = try await Self.read(all) { $0.event == "live" }
                #expect(Self.finals(replayed) == [1, 2, 3], "\(replayed)")
                #expect(replayed.allSatisfy { $0.ok && !$0.done && $0.id == "a" })
                #expect(replayed.first?.job?.state == .spoken && replayed.first?.job?.order == "S-1")
                #expect(replayed.last?.jobs == [])

                // From job 2: only job 3. Without since: `live` at once.
                let after = try RawConnection(path: daemon.socket)
                defer { after.close() }
                after.write("{\"id\":\"b\",\"op\":\"subscribe\",\"since\":2}\n")
                #expect(Self.finals(try await Self.read(after) { $0.event == "live" }) == [3])
                let live = try RawConnection(path: daemon.socket)
                defer { live.close() }
                live.write("{\"id\":\"c\",\"op\":\"subscribe\"}\n")
                #expect((try await Self.read(live) { $0.event == "live" }).count == 1)

                // A new job: its acceptance is a `status` hint, its end a `final` — to every subscriber, once.
                let said = try await daemon.reply(Request(op: "say", amount: "2.00", order: "S-4", wait: true))
                let four = try #require(said.job?.id)
                for connection in [all, after, live] {
                    let replies = try await Self.readFinalAndStatus(connection)
                    let ended = replies.last(where: { $0.event == "final" })?.job
                    #expect(Self.finals(replies) == [four])
                    #expect(ended?.state == .spoken && ended?.order == "S-4")
                    #expect(replies.contains { $0.event == "status" }, "\(replies)")
                }
            }
        }

        @Test func unfinishedJobsAreListedAndTheirEndFollows() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig) { daemon in
                    let first = try #require(try await daemon.reply(Request(op: "say", amount: "8888.88")).job)
                    let second = try #require(try await daemon.reply(Request(op: "say", amount: "1.00")).job)
                    let stream = try RawConnection(path: daemon.socket)
                    defer { stream.close() }
                    stream.write("{\"id\":\"u\",\"op\":\"subscribe\",\"since\":0}\n")
                    let replies = try await Self.read(stream) { $0.event == "live" }
                    let unfinished = replies.last?.jobs?.map(\.id) ?? []
                    #expect(unfinished == [first.id, second.id], "\(replies)")
                    let rest = try await Self.read(stream, timeout: .seconds(30)) { reply in
                        reply.event == "final" && reply.job?.id == second.id
                    }
                    #expect(Self.finals(replies + rest) == [first.id, second.id])
                }
            }
        }

        /// A subscriber that stops reading fills its socket, then its buffer (`limits.subscriber_buffer`): it is
        /// dropped with `lagged` and said so in the log; payments meanwhile are accepted and spoken as ever.
        @Test func aSubscriberThatDoesNotReadIsDroppedAndNothingElseWaits() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[limits]\nsubscriber_buffer = 16\nwrite_timeout = \"5m\"\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                let stuck = try RawConnection(path: daemon.socket)
                defer { stuck.close() }
                stuck.write("{\"id\":\"stuck\",\"op\":\"subscribe\"}\n")
                // Final states, fast: status prompts replacing one another (each one replaced ends `superseded`).
                let client = try RawConnection(path: daemon.socket)
                defer { client.close() }
                var sent = 0
                while !daemon.log.contains("subscriber dropped") {
                    guard sent < 20_000 else { throw HarnessError("never dropped:\n\(daemon.log)") }
                    let batch = (0..<100).map { _ in "{\"op\":\"prompt\",\"prompt\":\"network-lost\"}\n" }.joined()
                    client.write(batch)
                    for _ in 0..<100 { _ = await client.readLine() }
                    sent += 100
                }
                print("dropped after \(sent) prompts")
                // Payments are not held up by the stuck subscriber.
                let paid = try await daemon.reply(Request(op: "say", amount: "3.00", order: "P-1", wait: true))
                #expect(paid.ok && paid.job?.state == .spoken, "\(paid)")
                // What it had buffered still comes, then why it ends.
                let rest = try await Self.read(stuck, timeout: .seconds(30)) { $0.done }
                let end = try #require(rest.last)
                #expect(!end.ok && end.error?.code == "lagged", "\(end)")
                #expect(daemon.log.contains("subscriber dropped: it did not read its events"))
            }
        }

        @Test func theStreamEndsWhenTheDaemonStops() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let stream = try RawConnection(path: daemon.socket)
                defer { stream.close() }
                stream.write("{\"id\":\"s\",\"op\":\"subscribe\"}\n")
                _ = try await Self.read(stream) { $0.event == "live" }
                daemon.signal(SIGTERM)
                let end = try await Self.read(stream) { $0.done }
                #expect(end.last?.error?.code == "shutting_down", "\(end)")
            }
        }

        /// `subscribe` needs read access (it shows what `history` shows); a peer without it is refused.
        @Test func subscribingNeedsReadAccess() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[access]\nread_anyone = false\n".write(toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                let connections = try await RawConnection.open(1, to: daemon.socket, as: .nobody)
                defer { connections.forEach { $0.close() } }
                connections[0].write("{\"id\":\"x\",\"op\":\"subscribe\",\"since\":0}\n")
                let reply = try #require(await connections[0].readResponse())
                #expect(!reply.ok && reply.error?.code == "unauthorized", "\(reply)")
            }
        }

        /// `status.lastHeard`: the payment heard last, kept across a restart (the journal's).
        @Test func statusNamesThePaymentHeardLastAcrossARestart() async throws {
            try await withDaemonSet { daemons, directory in
                let daemon = try await daemons.start(rig: nil, device: "null", directory: directory)
                #expect(try await daemon.reply(Request(op: "status")).status?.lastHeard == nil)
                _ = try await daemon.reply(Request(op: "say", amount: "5.00", order: "LH-1", wait: true))
                _ = try await daemon.reply(Request(op: "prompt", wait: true, prompt: "network-lost"))
                let heard = try #require(try await daemon.reply(Request(op: "status")).status?.lastHeard)
                #expect(heard.order == "LH-1" && heard.state == .spoken && heard.finishedAt != nil)
                _ = try await daemon.stop()
                let again = try await daemons.start(rig: nil, device: "null", directory: directory)
                #expect(try await again.reply(Request(op: "status")).status?.lastHeard?.order == "LH-1")
            }
        }
    }
}
