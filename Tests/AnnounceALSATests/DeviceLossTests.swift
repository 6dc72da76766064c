import AnnounceCore
import AnnounceSound
import AnnounceTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import AnnounceALSA

/// A device that disappears for real: the rig's sound server killed (-9) while the sink plays, then restarted.
extension ALSAOnTheRig {
    @Test func theSoundServerDyingIsADeviceErrorAndTheSinkWorksAgainAfterItsRestart() async throws {
        try await withRigEnvironment { rig in
            let sink = AlsaSink(device: "pulse")
            defer { sink.close() }
            let outcome = Mutex<AnnounceError?>(nil)
            let done = Atomic<Bool>(false)
            try sink.open(sampleRate: 16000)
            let writer = Thread {
                do throws(AnnounceError) {
                    _ = try sink.write(Self.tone(seconds: 4)[...], stop: { false })
                } catch {
                    outcome.withLock { $0 = error }
                }
                done.store(true, ordering: .releasing)
            }
            writer.start()
            try await Task.sleep(for: .milliseconds(300))
            try await rig.restartServer()
            while !done.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(10)) }
            let error = try #require(outcome.withLock { $0 }, "the write went on as if nothing happened")
            #expect(error.code == .audioDevice)
            #expect(error.cause != nil, "\(error)")

            sink.close()
            let again = Self.tone(seconds: 0.4)
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                _ = try sink.write(again[...], stop: { false })
                _ = try sink.waitUntilPlayed { _ in false }
            }
            #expect(AudioMatch.correlation(expected: again, captured: captured).value > 0.99)
        }
    }

    @Test func thePlayerReplaysTheInterruptedJobAndKeepsTheQueueAcrossASoundServerRestart() async throws {
        try await withRigEnvironment { rig in
            let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
            let amounts = ["12345.67", "8.50", "1005"]
            let renders = try amounts.map { try pack.render(pack.composer.compose(amount: Amount(parsing: $0))) }
            let queue = JobQueue<Job>(capacity: 8)
            let results = Mutex<[JobResult]>([])
            let failures = Atomic<Int>(0)
            var settings = Player.Settings()
            settings.recovery = RecoverySettings(initialBackoffMs: 50, maximumBackoffMs: 200, giveUpAfterMs: 30_000)
            let sink = AlsaSink(device: "pulse")
            let player = Player(queue: queue, pack: pack, sink: sink, settings: settings, logger: Logger(label: "test")) {
                event in
                switch event {
                case let .finished(result): results.withLock { $0.append(result) }
                case .deviceError: failures.add(1, ordering: .relaxed)
                default: break
                }
            }
            let captured = try await rig.capture {
                for (index, amount) in amounts.enumerated() {
                    let parsed = try Amount(parsing: amount)
                    try queue.enqueue(
                        Job(id: UInt64(index + 1), utterance: .payment(amount: parsed, channel: "plain", refund: false),
                            announcement: try pack.composer.compose(amount: parsed), acceptedAt: Monotonic.nanos))
                }
                player.start()
                try await Task.sleep(for: .milliseconds(600))  // the first job is playing
                try await rig.restartServer()
                while results.withLock({ $0.count }) < 3 { try await Task.sleep(for: .milliseconds(20)) }
                queue.close()
                player.join()
            }
            let finished = results.withLock { $0 }
            #expect(finished.map(\.id) == [1, 2, 3])
            #expect(finished.allSatisfy { $0.state == .spoken }, "\(finished)")
            #expect(failures.load(ordering: .relaxed) >= 1, "the restart was not noticed")
            #expect(player.status().recoveries >= 1)
            // The capture is what played before the crash, then everything since: the part of job 1 the crash cut,
            // then job 1 from its start, 2 and 3, each whole, once, in order.
            let heard = AudioMatch.hearings(of: renders, in: captured)
            #expect(heard.filter(\.complete).map(\.best) == [0, 1, 2], "\(heard)")
            #expect(heard.filter { !$0.complete }.allSatisfy { $0.best == 0 }, "only job 1 was cut: \(heard)")
        }
    }
}
