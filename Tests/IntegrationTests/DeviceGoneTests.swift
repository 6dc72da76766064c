import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// The sound device gone for 10 s (issue 8): the rig's sound server dies (-9) while the daemon speaks and
    /// comes back 10 s later, while payments keep arriving.
    @Suite
    struct DeviceGoneTests {
        /// The interrupted payment is spoken again from its start once the device is back, then every payment
        /// queued before and during the outage, in order, each once; all are recorded spoken, none failed, and
        /// after the return nothing else is heard (no payment doubled).
        @Test func theSoundDeviceGoneForTenSecondsLosesNothingAndDoublesNothing() async throws {
            let before = ["12345.67", "8.50"]
            let arriving = ["1005", "66.60"]
            try await withRig { rig in
                try await withDaemon(rig: rig, arguments: ["--metrics-listen", "127.0.0.1:0"]) { daemon in
                    var ids: [UInt64] = []
                    var boundary = 0
                    var outage: DaemonStatus?
                    let captured = try await rig.capture {
                        for (index, amount) in before.enumerated() {
                            let reply = try await daemon.reply(Request(op: "say", amount: amount, order: "G-b\(index)"))
                            ids.append(try #require(reply.job?.id, "\(reply)"))
                        }
                        try await daemon.waitForStatus { $0.queue.playing == ids[0] }
                        try await Task.sleep(for: .milliseconds(500))  // the first payment is being heard
                        let down = Task { try await rig.restartServer(down: .seconds(10)) }
                        try await Task.sleep(for: .seconds(2))
                        // The device is gone: payments are still accepted, and wait behind the interrupted one.
                        for (index, amount) in arriving.enumerated() {
                            let reply = try await daemon.reply(Request(op: "say", amount: amount, order: "G-d\(index)"))
                            ids.append(try #require(reply.job?.id, "\(reply)"))
                        }
                        outage = try await daemon.reply(Request(op: "status")).status
                        // Scraped while the audio thread retries the device: the endpoint answers, and says so.
                        let scraped = try await daemon.scrape()
                        #expect(
                            HTTP.sample("announce_audio_device_state{state=\"recovering\"}", in: scraped) == 1,
                            "\(scraped)")
                        try await down.value
                        // The capture goes on into the same file from here: what is beyond this point was played
                        // after the device came back.
                        let file = try String(contentsOfFile: "\(rig.directory)/capture.file", encoding: .utf8)
                        let attributes = try FileManager.default.attributesOfItem(
                            atPath: file.trimmingCharacters(in: .whitespacesAndNewlines))
                        boundary = ((attributes[.size] as? Int) ?? 0) / 2
                        try await daemon.waitUntilIdle(timeout: .seconds(120))
                    }

                    let gone = try #require(outage)
                    #expect(gone.queue.unfinished == 4, "queue during the outage: \(gone.queue)")
                    #expect(gone.queue.waiting == 3, "queue during the outage: \(gone.queue)")
                    #expect(gone.audio.engine?.state == .recovering, "\(String(describing: gone.audio.engine))")

                    let history = try #require(try await daemon.reply(Request(op: "history", limit: 100)).jobs)
                    #expect(history.count == 4, "\(history)")
                    for id in ids {
                        let job = history.first { $0.id == id }
                        #expect(job?.state == .spoken, "job \(id): \(String(describing: job))\n\(daemon.log)")
                    }
                    let status = try #require(try await daemon.reply(Request(op: "status")).status)
                    #expect((status.audio.engine?.recoveries ?? 0) >= 1, "\(String(describing: status.audio.engine))")
                    #expect(status.audio.engine?.jobsGivenUp == 0)
                    let metrics = try await daemon.scrape()
                    #expect((HTTP.sample("announce_audio_device_failures_total", in: metrics) ?? 0) >= 1, "\(metrics)")
                    #expect((HTTP.sample("announce_audio_device_recoveries_total", in: metrics) ?? 0) >= 1)
                    #expect((HTTP.sample("announce_audio_pcm_opens_total", in: metrics) ?? 0) >= 2, "again after")
                    #expect(HTTP.sample("announce_audio_jobs_given_up_total", in: metrics) == 0)
                    #expect(HTTP.sample("announce_payments_total{state=\"spoken\"}", in: metrics) == 4)

                    // After the return: the four payments one after the other, each whole, then nothing more.
                    // Each is looked for from the end of the one before, aligned by its onset, so anything
                    // heard in between (a payment doubled, a fragment) takes its place and fails the match.
                    let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
                    let amounts = before + arriving
                    var position = min(boundary, captured.count)
                    for amount in amounts {
                        let render = try pack.render(pack.composer.compose(amount: Amount(parsing: amount)))
                        let rest = Array(captured[position...])
                        let match = AudioMatch.correlation(expected: render, captured: rest)
                        #expect(match.value > 0.9, "\(amount) not next or not whole after the return (\(match.value))")
                        position = min(captured.count, position + max(0, match.lag) + render.count)
                    }
                    #expect(
                        AudioMatch.onset(Array(captured[position...])) == nil,
                        "more was heard after the four payments: one doubled")
                }
            }
        }
    }
}
