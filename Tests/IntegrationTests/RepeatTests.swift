import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// Repeating notices (docs/protocol.md, "Repeating notices") against a real daemon on ALSA's null PCM: said
    /// their times, stopped, refused when they cannot be said, and carried over a `kill -9` where they were.
    @Suite
    struct RepeatTests {
        typealias Subscribe = SubscribeTests

        static func start(_ daemon: DaemonProcess, _ order: String, every: Double = 1, times: Int) async throws
            -> Response
        {
            var request = Request(op: "repeat", order: order, parts: [.init(clip: "new-order"), .init(digits: "17")])
            request.every = every
            request.times = times
            return try await daemon.reply(request)
        }

        static func subscribe(_ daemon: DaemonProcess) async throws -> RawConnection {
            let connection = try RawConnection(path: daemon.socket)
            connection.write("{\"id\":\"e\",\"op\":\"subscribe\"}\n")
            _ = try await Subscribe.read(connection) { $0.event == "live" }
            return connection
        }

        /// The history's jobs saying repeat `order`, by time (`order#time`).
        static func times(of order: String, _ daemon: DaemonProcess) async throws -> [String: [JobInfo]] {
            let jobs = try await daemon.reply(Request(op: "history", limit: 100)).jobs ?? []
            return Dictionary(grouping: jobs.filter { $0.order?.hasPrefix("\(order)#") == true }) { $0.order ?? "" }
        }

        @Test func aRepeatIsSaidItsTimesAsNoticesThenEndsDoneAndIsNeverStartedTwice() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let events = try await Self.subscribe(daemon)
                defer { events.close() }
                let started = try await Self.start(daemon, "R-1", times: 3)
                #expect(started.ok && started.repeat?.state == .repeating, "\(started)")
                #expect(started.repeat?.text == "您有新的外卖订单，请及时处理一七", "\(started)")
                let running = try await daemon.reply(Request(op: "status")).status?.repeats
                #expect(running?.map(\.order) == ["R-1"], "\(String(describing: running))")

                let replies = try await Subscribe.read(events) { $0.event == "repeat" }
                let ended = try #require(replies.last?.repeat)
                #expect(ended.state == .done && ended.played == 3 && ended.heard == 3, "\(ended)")
                let finals = replies.filter { $0.event == "final" }.compactMap(\.job)
                #expect(finals.map(\.order) == ["R-1#1", "R-1#2", "R-1#3"], "\(finals)")
                #expect(finals.allSatisfy { $0.state == .spoken && $0.priority == .notice }, "\(finals)")
                #expect(try await daemon.reply(Request(op: "status")).status?.repeats == nil)

                // Sent again (a redelivery): not started again, answered with the repeat as it ended.
                let again = try await Self.start(daemon, "R-1", times: 3)
                #expect(again.error?.code == "duplicate" && again.repeat?.state == .done, "\(again)")
                #expect(try await Self.times(of: "R-1", daemon).count == 3, "three times, none more")
            }
        }

        @Test func aStopEndsTheRepeatAndCancelsTheTimeWaitingAndBadRepeatsAreRefused() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                let events = try await Self.subscribe(daemon)
                defer { events.close() }
                #expect(try await Self.start(daemon, "R-2", every: 3600, times: 5).ok)
                _ = try await Subscribe.read(events) { $0.event == "final" }
                // In its hour-long pause: the stop ends it at once, with one time said.
                var stop = Request(op: "repeat", order: "R-2")
                stop.stop = true
                let stopped = try await daemon.reply(stop)
                #expect(stopped.ok && stopped.repeats?.map(\.state) == [.stopped], "\(stopped)")
                #expect(stopped.repeats?.first?.played == 1 && stopped.repeats?.first?.heard == 1, "\(stopped)")
                let event = try await Subscribe.read(events) { $0.event == "repeat" }.last?.repeat
                #expect(event?.order == "R-2" && event?.state == .stopped, "\(String(describing: event))")
                // A stop sent again: the repeat as it ended; one never started: not_found.
                #expect(try await daemon.reply(stop).repeats?.first?.state == .stopped)
                #expect(try await daemon.reply(Request(op: "repeat", order: "R-2")).repeat?.state == .stopped, "a look")
                stop.order = "R-none"
                #expect(try await daemon.reply(stop).error?.code == "not_found")
                #expect(try await daemon.reply(Request(op: "repeat", order: "R-none")).error?.code == "not_found")

                let ctl = try await daemon.ctl(["repeat", "-o", "R-3", "--every", "0.2", "new-order"])
                #expect(ctl.status == 2 && ctl.stdout.contains("bad_request") && ctl.stdout.contains("every"), "\(ctl)")
                let missing = try await daemon.ctl(["repeat", "-o", "R-4", "--every", "5", "no-such-clip"])
                #expect(missing.status == 2 && missing.stdout.contains("\"no-such-clip\""), "\(missing)")
                var noOrder = Request(op: "repeat", parts: [.init(clip: "new-order")])
                noOrder.every = 5
                #expect(try await daemon.reply(noOrder).error?.code == "bad_request")
                #expect(try await daemon.reply(Request(op: "status")).status?.repeats == nil, "nothing started")
            }
        }

        /// A repeat whose pushed clip is deleted while it runs ends `failed` at its next time, saying why — not silence
        /// forever, nor a time said without its clip.
        @Test func aRepeatWhosePushedClipIsDeletedEndsFailed() async throws {
            let folder = try CorpusFolder.make(["urged_1": "bai.wav"])
            defer { try? FileManager.default.removeItem(atPath: folder) }
            try await withDaemon(rig: nil, arguments: ["--corpus", folder], device: "null") { daemon in
                let events = try await Self.subscribe(daemon)
                defer { events.close() }
                var request = Request(op: "repeat", order: "R-6", parts: [.init(clip: "urged_1")])
                request.every = 1
                request.times = 5
                #expect(try await daemon.reply(request).ok)
                _ = try await Subscribe.read(events) { $0.event == "final" }
                try CorpusFolder.make(["other": "yuan.wav"], version: 2, in: folder)
                #expect(try await daemon.reply(Request(op: "corpus")).corpus?.version == 2)
                let ended = try await Subscribe.read(events) { $0.event == "repeat" }.last?.repeat
                #expect(ended?.state == .failed && ended?.played == 1 && ended?.heard == 1, "\(String(describing: ended))")
                #expect(ended?.error?.code == "not_found" && ended?.error?.message.contains("urged_1") == true)
            }
        }

        /// Killed (`kill -9`) between two times: after the restart the repeat goes on where it was, each time said
        /// once — the time the journal had is not said again, and the count goes on from it.
        @Test func aRepeatGoesOnAfterAKillWhereItWasSayingEachTimeOnce() async throws {
            try await withDaemonSet { daemons, directory in
                let killed = try await daemons.start(rig: nil, device: "null", directory: directory)
                let events = try await Self.subscribe(killed)
                #expect(try await Self.start(killed, "R-5", every: 1, times: 3).ok)
                _ = try await Subscribe.read(events) { $0.event == "final" }
                events.close()
                #expect(try await killed.stop(signal: SIGKILL) == 128 + SIGKILL)
                try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                    let events = try await Self.subscribe(daemon)
                    defer { events.close() }
                    let status = try await daemon.reply(Request(op: "status")).status
                    let carried = try #require(status?.repeats?.first, "\(String(describing: status))")
                    #expect(carried.order == "R-5" && carried.played >= 1, "\(carried)")
                    let ended = try await Subscribe.read(events, timeout: .seconds(30)) { $0.event == "repeat" }
                        .last?.repeat
                    #expect(ended?.state == .done && ended?.played == 3 && ended?.heard == 3, "\(String(describing: ended))")
                    let times = try await Self.times(of: "R-5", daemon)
                    #expect(times.keys.sorted() == ["R-5#1", "R-5#2", "R-5#3"], "\(times.keys)")
                    #expect(times.values.allSatisfy { $0.count == 1 && $0[0].state == .spoken }, "each once: \(times)")
                }
            }
        }

        /// On the rig, what is heard: a notice playing when a payment comes is cut, the payment is heard whole at once,
        /// then the notice whole from its start — never one over the other, and the payment never behind it.
        @Test func aPaymentCutsANoticePlayingAndTheNoticeIsHeardWholeAfterIt() async throws {
            let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
            let notice = try pack.render(pack.composer.compose(.combination([.clip("new-order")]), corpus: []))
            let payment = try pack.render(pack.composer.compose(amount: Amount(parsing: "1")))
            try await withRig { rig in
                try await withDaemon(rig: rig) { daemon in
                    let captured = try await rig.capture {
                        let sent = try await daemon.reply(
                            Request(op: "combine", priority: "notice", parts: [.init(clip: "new-order")]))
                        #expect(sent.ok && sent.job?.priority == .notice, "\(sent)")
                        // Well into the notice: heard starting, a second and more before its end.
                        let started = try await eventually(timeout: .seconds(20)) {
                            let heard = AudioMatch.hearings(of: [notice, payment], in: rig.capturedSoFar())
                            return heard.first.map { $0.best == 0 && $0.matched[0] > pack.sampleRate / 2 } ?? false
                        }
                        try #require(started, "the notice was never heard starting")
                        let paid = try await daemon.reply(Request(op: "say", amount: "1", wait: true))
                        #expect(paid.ok, "\(paid)")
                        try await daemon.waitUntilIdle()
                    }
                    let heard = AudioMatch.hearings(of: [notice, payment], in: captured)
                    #expect(heard.map(\.best) == [0, 1, 0], "\(heard)")
                    #expect(heard.map(\.complete) == [false, true, true], "cut, whole, whole: \(heard)")
                    let jobs = try #require(try await daemon.reply(Request(op: "history", limit: 10)).jobs)
                    let cut = try #require(jobs.first { $0.priority == .notice })
                    #expect(cut.state == .spoken && cut.attempts == 2, "\(cut)")
                    #expect(daemon.log.contains("notice cut by a payment"), "\(daemon.log)")
                }
            }
        }
    }
}
