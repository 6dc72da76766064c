import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// Every operation of the protocol and every error code, against the real `announced` on a temporary socket.
    /// Most play on ALSA's own `null` PCM (real libasound, sound discarded at once) so that jobs finish quickly;
    /// the codes that need a job to take time (queue_full, expired, superseded, cancelled) play on the rig.
    @Suite
    struct DaemonProtocolTests {
        @Test func everyOperationRoundTrips() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let ping = try await daemon.reply(Request(id: "p", op: "ping"))
                #expect(ping.ok && ping.id == "p" && ping.v == 1)

                // say, with wait: an acceptance reply, then the final one with timings.
                let said = try await daemon.request(
                    Request(id: "s1", op: "say", amount: "100.00", channel: "alipay", order: "O-1", wait: true))
                #expect(said.count == 2, "\(said)")
                #expect(said.first?.done == false && said.first?.job?.state == .queued)
                let spoken = try #require(said.last?.job)
                #expect(said.last?.ok == true && said.last?.id == "s1")
                #expect(spoken.state == .spoken)
                #expect(spoken.text == "支付宝到账一百元")
                #expect(spoken.order == "O-1" && spoken.channel == "alipay" && spoken.amount == "100.00")
                #expect(spoken.firstSampleMs != nil && spoken.finishedMs != nil && spoken.finishedAt != nil)

                // fen, refund, language, style
                let english = try await daemon.reply(
                    Request(op: "say", fen: 1234, refund: true, lang: "en", wait: true))
                #expect(english.job?.state == .spoken && english.job?.lang == "en", "\(english)")
                #expect(english.job?.text?.contains("twelve") == true)
                let units = try await daemon.reply(Request(op: "say", amount: "12.34", style: "units"))
                #expect(units.job?.text == "到账十二元三角四分", "\(units)")

                // prompt
                let prompt = try await daemon.reply(Request(op: "prompt", wait: true, prompt: "network-lost"))
                #expect(prompt.ok && prompt.job?.priority == .status && prompt.job?.state == .spoken, "\(prompt)")

                try await daemon.waitUntilIdle()
                // queue (empty now), history (newest first), status
                #expect(try await daemon.reply(Request(op: "queue")).jobs == [])
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 3)).jobs)
                #expect(history.map(\.id) == [4, 3, 2])
                #expect(history.allSatisfy { $0.state == .spoken })
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.state == "running" && status.v == 1)
                #expect(status.voices.map(\.lang) == ["en", "zh"])
                #expect(status.voices.first { $0.isDefault }?.lang == "zh")
                #expect(status.totals.accepted == 4 && status.totals.finished["spoken"] == 4)
                #expect(status.audio.device == "null")
                #expect(status.peer?.uid == 0 && status.peer?.access == .control)
                #expect(status.journal.path.hasSuffix("journal.sqlite"))

                // replay: the last payment spoken, as a new urgent job
                let replay = try await daemon.reply(Request(op: "replay", wait: true))
                #expect(replay.job?.replayOf == 3 && replay.job?.priority == .urgent, "\(replay)")
                #expect(replay.job?.text == units.job?.text && replay.job?.state == .spoken)
                let replayOne = try await daemon.reply(Request(op: "replay", job: 1))
                #expect(replayOne.job?.replayOf == 1 && replayOne.job?.text == "支付宝到账一百元")

                // cancel: nothing waiting
                try await daemon.waitUntilIdle()
                #expect(try await daemon.reply(Request(op: "cancel", all: true)).jobs == [])

                // volume: get, set (kept), reset
                let volume = try #require(try await daemon.reply(Request(op: "volume")).volume)
                #expect(volume.device == "null" && volume.threshold == nil)
                let set = try await daemon.reply(Request(op: "volume", threshold: 70))
                #expect(set.volume?.threshold == 70 && set.volume?.thresholdSource == "set")
                #expect(try await daemon.reply(Request(op: "status")).status?.audio.threshold == 70)
                let reset = try await daemon.reply(Request(op: "volume", reset: true))
                #expect(reset.ok && reset.volume?.threshold == nil)

                // metrics, in the Prometheus text format
                let metrics = try #require(try await daemon.reply(Request(op: "metrics")).metrics)
                #expect(metrics.contains("announce_jobs_accepted_total{priority=\"payment\"} 3"), "\(metrics)")
                #expect(metrics.contains("announce_jobs_finished_total{state=\"spoken\"}"))
            }
        }

        /// What a refusal looks like on the wire: ok false, a stable code, a message, the request id.
        func refused(_ daemon: DaemonProcess, _ request: Request) async throws -> ErrorInfo {
            let reply = try await daemon.reply(request)
            #expect(!reply.ok, "\(request.op) should have been refused: \(reply)")
            #expect(reply.id == request.id)
            return try #require(reply.error)
        }

        @Test func badRequestsGetStableCodes() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                func code(_ request: Request) async throws -> String { try await refused(daemon, request).code }
                #expect(try await code(Request(id: "a", op: "say", amount: "-5")) == "invalid_amount")
                #expect(try await code(Request(id: "b", op: "say", fen: 100_000_000_000_000)) == "invalid_amount")
                #expect(try await code(Request(id: "c", op: "say")) == "bad_request")
                #expect(try await code(Request(id: "d", op: "sing")) == "bad_request")
                #expect(try await code(Request(id: "e", v: 9, op: "ping")) == "bad_request")
                #expect(
                    try await code(Request(id: "f", op: "say", amount: "1", channel: "paypal")) == "unknown_channel")
                #expect(try await code(Request(id: "g", op: "say", amount: "1", lang: "fr")) == "unknown_language")
                #expect(try await code(Request(id: "h", op: "prompt", prompt: "no-such-prompt")) == "not_found")
                #expect(try await code(Request(id: "i", op: "cancel", job: 999)) == "not_found")
                #expect(try await code(Request(id: "j", op: "replay")) == "not_found", "nothing spoken yet")
                #expect(try await code(Request(id: "k", op: "history", limit: 0)) == "bad_request")
                #expect(try await code(Request(id: "l", op: "volume", threshold: 101)) == "bad_request")
                #expect(try await code(Request(id: "m", op: "cancel")) == "bad_request")

                // Not JSON, wrong types, not UTF-8: answered on the same connection, which stays usable.
                let raw = try RawConnection(path: daemon.socket)
                raw.write("hello\n")
                #expect(await raw.readResponse()?.error?.code == "bad_request")
                raw.write(#"{"id":"t","op":"say","amount":100}"# + "\n")
                let typed = await raw.readResponse()
                #expect(typed?.error?.code == "bad_request" && typed?.id == "t", "the id is echoed when it can be read")
                raw.write([0xFF, 0xFE, 0x7B, 0x0A])
                #expect(await raw.readResponse()?.error?.code == "bad_request")
                raw.write("\n\r\n")  // blank lines are ignored
                raw.write(#"{"id":42,"op":"ping"}"# + "\r\n")
                let ping = await raw.readResponse()
                #expect(ping?.ok == true && ping?.id == "42")
                // Nothing was accepted by any of it.
                #expect(try await daemon.reply(Request(op: "status")).status?.totals.accepted == 0)
            }
        }

        @Test func aDeviceThatCannotBeOpenedFailsTheJobWithItsCode() async throws {
            try await withDaemon(rig: nil, device: "no-such-pcm") { daemon in
                let reply = try await daemon.reply(Request(op: "say", amount: "1", wait: true))
                #expect(!reply.ok && reply.job?.state == .failed, "\(reply)")
                #expect(reply.error?.code == "audio_device" && reply.error?.message.contains("no-such-pcm") == true)
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.audio.lastError?.code == "audio_device")
                #expect(status.totals.finished["failed"] == 1)
            }
        }

        @Test func aDuplicateOrderAnswersWithTheOriginalJob() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let first = try await daemon.reply(Request(op: "say", amount: "8.50", order: "T-100", wait: true))
                #expect(first.job?.state == .spoken)
                let again = try await daemon.reply(Request(id: "dup", op: "say", amount: "8.50", order: "T-100"))
                #expect(!again.ok && again.error?.code == "duplicate", "\(again)")
                #expect(
                    again.job?.id == first.job?.id && again.job?.state == .spoken, "the original job and its outcome")
                // Another amount with the same order id is still the same order: refused.
                #expect(
                    try await daemon.reply(Request(op: "say", amount: "9", order: "T-100")).error?.code == "duplicate")
                let other = try await daemon.reply(Request(op: "say", amount: "8.50", order: "T-101"))
                #expect(other.ok)
                try await daemon.waitUntilIdle()
                let history = try #require(try await daemon.reply(Request(op: "history", limit: 10)).jobs)
                #expect(history.count == 2, "a duplicate is never journaled as a job")
            }
        }

        /// A status prompt or a text sent with order id X does not block payment X (issue 16, item 10); each kind
        /// still refuses its own duplicates, and keeps doing so after a restart.
        @Test func promptsAndTextsHaveTheirOwnOrderIDs() async throws {
            let directory = try Paths.temporaryDirectory("kinds")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let prompt = Request(op: "prompt", order: "X-1", prompt: "network-lost")
            let text = Request(op: "text", order: "X-1", text: "请到前台取货")
            let payment = Request(op: "say", amount: "8.50", order: "X-1")
            let ids = try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                let first = try await daemon.reply(prompt)
                #expect(first.ok, "\(first)")
                let paid = try await daemon.reply(payment)
                #expect(paid.ok && paid.job?.amount == "8.50", "payment X-1 after prompt X-1: \(paid)")
                let said = try await daemon.reply(text)
                #expect(said.ok, "text X-1 after payment X-1: \(said)")
                for (request, original) in [(prompt, first), (payment, paid), (text, said)] {
                    let again = try await daemon.reply(request)
                    #expect(again.error?.code == "duplicate" && again.job?.id == original.job?.id, "\(again)")
                }
                try await daemon.waitUntilIdle()
                return [first.job?.id, paid.job?.id, said.job?.id]
            }
            try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                for (request, id) in zip([prompt, payment, text], ids) {
                    let again = try await daemon.reply(request)
                    #expect(again.error?.code == "duplicate" && again.job?.id == id, "after a restart: \(again)")
                }
                #expect(try await daemon.reply(Request(op: "status")).status?.journal.dedupOrders == 3)
            }
        }

        @Test func orderIDsAreForgottenAfterTheWindow() async throws {
            try await withDaemon(rig: nil, arguments: ["--dedup-window", "1s"], device: "null") { daemon in
                #expect(try await daemon.reply(Request(op: "say", amount: "1", order: "W-1", wait: true)).ok)
                #expect(
                    try await daemon.reply(Request(op: "say", amount: "1", order: "W-1")).error?.code == "duplicate")
                try await Task.sleep(for: .milliseconds(1_200))
                let later = try await daemon.reply(Request(op: "say", amount: "1", order: "W-1", wait: true))
                #expect(later.ok && later.job?.state == .spoken, "outside the window the order is new: \(later)")
            }
        }

        @Test func codesThatNeedTimeOnTheRig() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig, arguments: ["--queue-capacity", "2"]) { daemon in
                    // A long announcement plays; two payments wait; the queue is full.
                    let playing = try await daemon.reply(Request(op: "say", amount: "987654321.99"))
                    try await daemon.waitForStatus { $0.queue.playing == playing.job?.id }
                    let second = try await daemon.reply(Request(op: "say", amount: "2", ttl: 0.2))
                    let third = try await daemon.reply(Request(op: "say", amount: "3"))
                    #expect(second.job?.position == 0 && third.job?.position == 1)
                    let full = try await refused(daemon, Request(id: "q", op: "say", amount: "4"))
                    #expect(full.code == "queue_full", "\(full)")
                    #expect(full.message.contains("nothing was dropped"))

                    // Status prompts have their own slot: accepted while payments fill the queue; the newer wins.
                    let statusA = try await daemon.reply(Request(op: "prompt", prompt: "network-lost"))
                    let statusB = try await daemon.reply(Request(op: "prompt", prompt: "network-restored"))
                    #expect(statusA.ok && statusB.ok)
                    let queue = try #require(try await daemon.reply(Request(op: "queue")).jobs)
                    #expect(
                        queue.map(\.id) == [1, 2, 3, 5], "playing, then payments, then the newest prompt: \(queue)")

                    // Cancel a waiting job.
                    let cancelled = try await daemon.reply(Request(op: "cancel", job: 3))
                    #expect(cancelled.jobs?.map(\.id) == [3] && cancelled.jobs?.map(\.state) == [.cancelled])
                    // A client waiting for a job that gets cancelled hears how it ended.
                    let waiter = Task.detached { try await daemon.request(Request(op: "say", amount: "6", wait: true)) }
                    try await daemon.waitForStatus { $0.queue.byPriority["payment"] == 2 }
                    #expect(try await daemon.reply(Request(op: "cancel", job: 6)).jobs?.first?.state == .cancelled)
                    let waited = try await waiter.value
                    #expect(waited.count == 2 && waited.last?.ok == false, "\(waited)")
                    #expect(waited.last?.job?.state == .cancelled && waited.last?.error?.code == "cancelled")

                    // The job with a 0.2 s ttl expires at its turn; the prompt replaced by a newer one is superseded.
                    try await daemon.waitUntilIdle()
                    let history = try #require(try await daemon.reply(Request(op: "history", limit: 20)).jobs)
                    func job(_ id: UInt64) throws -> JobInfo { try #require(history.first { $0.id == id }) }
                    #expect(try job(1).state == .spoken)
                    #expect(try job(2).state == .expired && job(2).error?.code == "expired", "\(history)")
                    #expect(try job(4).state == .cancelled && job(4).error?.code == "superseded", "\(history)")
                    #expect(try job(5).state == .spoken, "the newest status prompt plays after the payments")
                }
            }
        }

        @Test func cancellingTheJobPlayingStopsItAndItsWaiterHearsWhy() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig) { daemon in
                    var waited: [Response] = []
                    let captured = try await rig.capture {
                        let waiter = Task.detached {
                            try await daemon.request(Request(op: "say", amount: "987654321.99", wait: true))
                        }
                        try await daemon.waitForStatus { $0.queue.playing == 1 }
                        try await Task.sleep(for: .milliseconds(500))
                        let cancelled = try await daemon.reply(Request(op: "cancel", job: 1))
                        #expect(cancelled.jobs?.map(\.state) == [.cancelled], "\(cancelled)")
                        waited = try await waiter.value
                    }
                    #expect(waited.last?.ok == false && waited.last?.job?.state == .cancelled, "\(waited)")
                    #expect(waited.last?.error?.code == "cancelled", "\(waited)")
                    // It was cut: far less was heard than the whole announcement.
                    let heard = (AudioMatch.end(captured) ?? 0) - (AudioMatch.onset(captured) ?? 0)
                    #expect(heard > 0 && heard < 16_000 * 3, "heard \(heard) samples of a ~6 s announcement")
                    #expect(try await daemon.reply(Request(op: "say", amount: "1", wait: true)).job?.state == .spoken)
                }
            }
        }

        @Test func aWaitedJobThatDoesNotPlayExits5() async throws {
            try await withRig { rig in
                try await withDaemon(rig: rig) { daemon in
                    _ = try await daemon.reply(Request(op: "say", amount: "987654321.99"))
                    let result = try await daemon.ctl(["say", "--wait", "--ttl", "0.1", "1"])
                    #expect(result.status == 5, "\(result)")
                    #expect(result.stdout.contains("expired"), "\(result)")
                    _ = try await daemon.reply(Request(op: "cancel", all: true))
                }
            }
        }
    }
}
