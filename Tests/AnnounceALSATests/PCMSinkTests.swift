import AnnounceCore
import AnnounceTestSupport
import Foundation
import Synchronization
import Testing

@testable import AnnounceALSA

/// Real libasound against the host rig (scripts/rig.sh): PCM "pulse" → PulseAudio → null sink, whose monitor is
/// captured and compared with what was written. Every test of this target that talks to a rig lives in this
/// suite (here and in extensions in the other files): libasound's pulse plugin finds the rig through the
/// process environment, so these tests take turns.
@Suite(.serialized)
struct ALSAOnTheRig {
    /// A 440 Hz tone with a rising envelope, so a capture can only match it at one alignment.
    static func tone(seconds: Double, rate: Int = 16000, frequency: Double = 440) -> [Int16] {
        let count = Int(seconds * Double(rate))
        return (0..<count).map { index in
            let t = Double(index) / Double(rate)
            let envelope = 0.2 + 0.6 * Double(index) / Double(count)
            return Int16(envelope * 20000 * sin(2 * Double.pi * frequency * t + 3 * sin(2 * Double.pi * 3 * t)))
        }
    }

    /// Runs `body` with this process pointed at a fresh rig (libasound's pulse plugin reads the environment).
    func withRigEnvironment<T>(_ body: (Rig) async throws -> T) async throws -> T {
        try await withRig { rig in
            let saved = rig.environment.keys.map { ($0, ProcessInfo.processInfo.environment[$0]) }
            for (key, value) in rig.environment { setenv(key, value, 1) }
            defer {
                for (key, value) in saved {
                    if let value { setenv(key, value, 1) } else { unsetenv(key) }
                }
            }
            return try await body(rig)
        }
    }

    @Test func negotiatesALowLatencyPeriodAndPlaysWhatWasWritten() async throws {
        try await withRigEnvironment { rig in
            let samples = Self.tone(seconds: 0.6)
            var parameters: PCMParameters?
            let captured = try await rig.capture {
                let sink = AlsaSink(device: "pulse", periodMicroseconds: 10_000, periods: 16)
                try sink.open(sampleRate: 16000)
                parameters = sink.parameters
                let written = try sink.write(samples[...], stop: { false })
                #expect(written == samples.count)
                let finished = try sink.waitUntilPlayed(interrupt: { _ in false })
                #expect(finished)
                sink.drain()
                sink.close()
            }
            let granted = try #require(parameters)
            #expect(granted.sampleRate == 16000)
            #expect(granted.format == .s16 && granted.channels == 1)
            #expect(granted.periodFrames > 0 && granted.periodFrames <= 320, "period \(granted.periodFrames) frames")
            #expect(granted.bufferFrames >= 2 * granted.periodFrames)
            let match = AudioMatch.correlation(expected: samples, captured: captured)
            #expect(match.value > 0.99, "captured audio does not match what was written (\(match.value))")
        }
    }

    @Test func waitUntilPlayedReturnsOnlyOnceTheSoundWasHeard() async throws {
        // If the wait returned early, dropping right after it would cut the tail off.
        try await withRigEnvironment { rig in
            let samples = Self.tone(seconds: 0.5)
            let sink = AlsaSink(device: "pulse")
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                _ = try sink.write(samples[...], stop: { false })
                let finished = try sink.waitUntilPlayed(interrupt: { _ in false })
                #expect(finished)
                sink.drop()
                sink.close()
            }
            let heard = (AudioMatch.end(captured) ?? 0) - (AudioMatch.onset(captured) ?? 0)
            let expected = (AudioMatch.end(samples) ?? 0) - (AudioMatch.onset(samples) ?? 0)
            // Within two periods: ALSA's pulse plugin reports the delay from the server's latency estimate, which
            // reached 0 up to about 14 ms early here (with any buffer size). The daemon drains after this wait
            // (snd_pcm_drain plays the rest), so nothing is cut in use; a drop right after it, as here, may.
            #expect(abs(heard - expected) < 320, "heard \(heard) of \(expected) samples")
            let tail = Array(samples.suffix(1600))
            let match = AudioMatch.correlationAtEnd(expected: tail, captured: captured).value
            #expect(match > 0.99, "the last 100 ms are missing or changed (\(match))")
        }
    }

    @Test func aWriteReturnsOnceTheMarkedEndWasPlayedAndTheStreamGoesOnWhole() async throws {
        // The player marks the end of the oldest job not yet heard; the writer must hand control back when the
        // device has played it, not when the next job is all written (a whole announcement later).
        try await withRigEnvironment { rig in
            let first = Self.tone(seconds: 0.5)
            let second = Self.tone(seconds: 1, frequency: 660)
            let sink = AlsaSink(device: "pulse")
            var early = 0
            var pendingThen = 0
            var period = 0
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                period = try #require(sink.parameters).periodFrames
                #expect(try sink.write(first[...], stop: { false }) == first.count)
                // The mark: the end of `first`, which is followed by nothing written yet.
                early = try sink.write(second[...], stop: { false }, mark: { 0 })
                pendingThen = try sink.pendingFrames()
                var offset = early
                while offset < second.count { offset += try sink.write(second[offset...], stop: { false }) }
                #expect(try sink.waitUntilPlayed(interrupt: { _ in false }))
                sink.drain()
                sink.close()
            }
            // Returned before `second` was all written (it needs `first` and most of itself played first) …
            #expect(early < second.count, "wrote all \(early) frames of the next sound before returning")
            // … once `first` had been played (what is pending is part of `second`), and promptly: within two periods.
            #expect(pendingThen <= early, "\(pendingThen) frames pending, only \(early) of them the next sound's")
            #expect(early - pendingThen < 2 * period, "returned \(early - pendingThen) frames after the mark")
            // And the stream was not disturbed by the early return: both sounds, back to back, no gap.
            let match = AudioMatch.compareSamples(expected: first + second, captured: captured, startTolerance: 320)
            #expect(match.failures.isEmpty, "\(match.failures)")
        }
    }

    @Test func aSoundShorterThanAPeriodIsPendingThenStartedAndHeardWhole() async throws {
        // Less than the start threshold (one 80 ms period) written: the stream has not started, and the player
        // still asks how much is pending after the write (the pulse plugin's delay fails before a start).
        try await withRigEnvironment { rig in
            let blip = Self.tone(seconds: 0.04)
            let sink = AlsaSink(device: "pulse")
            var pending = -1
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                try #require(try #require(sink.parameters).periodFrames > blip.count)
                #expect(try sink.write(blip[...], stop: { false }) == blip.count)
                pending = try sink.pendingFrames()
                #expect(try sink.waitUntilPlayed(interrupt: { _ in false }))
                sink.drain()
                sink.close()
            }
            #expect(pending == blip.count, "nothing is played before the start: \(pending) pending")
            // Heard to its end (a fresh stream on this rig may lose up to ~14 ms of its start, as aplay's does).
            let heard = (AudioMatch.end(captured) ?? 0) - (AudioMatch.onset(captured) ?? 0)
            #expect(heard > blip.count - 320, "heard \(heard) of \(blip.count) samples")
            let end = AudioMatch.correlationAtEnd(expected: Array(blip.suffix(320)), captured: captured).value
            #expect(end > 0.99, "the last 20 ms are missing or changed (\(end))")
        }
    }

    @Test func waitUntilPlayedWakesAtTheMarkedEndNotAtTheNextPeriod() async throws {
        // Long periods (250 ms): waking once a period, the end of the first sound (the oldest job's) would be
        // noticed about 150 ms late here; waking for the mark, within a few ms.
        try await withRigEnvironment { rig in
            let first = Self.tone(seconds: 0.1)
            let second = Self.tone(seconds: 0.35, frequency: 660)
            let sink = AlsaSink(device: "pulse", periodMicroseconds: 250_000, periods: 2)
            var firstSeen: Int?
            var parameters: PCMParameters?
            _ = try await rig.capture {
                try sink.open(sampleRate: 16000)
                parameters = sink.parameters
                #expect(try sink.write((first + second)[...], stop: { false }) == first.count + second.count)
                let finished = try sink.waitUntilPlayed(mark: { firstSeen == nil ? second.count : nil }) { pending in
                    if firstSeen == nil, pending <= second.count { firstSeen = pending }
                    return false
                }
                #expect(finished)
                sink.drain()
                sink.close()
            }
            let granted = try #require(parameters)
            // The premise: all written at once, and periods long enough that a period's lateness would show.
            try #require(granted.bufferFrames > first.count + second.count && granted.periodFrames >= 3200, "\(granted)")
            let seen = try #require(firstSeen)
            // 50 ms of slack: the pulse plugin's delay is an estimate (up to ~14 ms early here), and a loaded machine
            // wakes a thread late.
            #expect(second.count - seen < 800, "the first sound's end was noticed \(second.count - seen) frames late")
        }
    }

    @Test func waitUntilPlayedEndsEarlyWhenInterruptedAndLeavesTheRestPlaying() async throws {
        try await withRigEnvironment { rig in
            let samples = Self.tone(seconds: 0.5)
            let sink = AlsaSink(device: "pulse")
            defer { sink.close() }
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                _ = try sink.write(samples[...], stop: { false })
                let finished = try sink.waitUntilPlayed(interrupt: { _ in true })
                #expect(!finished)
                // Not dropped: the buffered rest plays out.
                _ = try sink.waitUntilPlayed { _ in false }
            }
            let match = AudioMatch.correlation(expected: samples, captured: captured).value
            #expect(match > 0.99, "(\(match))")
        }
    }

    @Test func aStopRequestEndsTheWriteWithinAPeriod() async throws {
        try await withRigEnvironment { _ in
            let samples = Self.tone(seconds: 2)
            let sink = AlsaSink(device: "pulse", periodMicroseconds: 10_000, periods: 16)
            try sink.open(sampleRate: 16000)
            defer { sink.close() }
            let parameters = try #require(sink.parameters)
            var checks = 0
            let started = ContinuousClock.now
            var stoppedAfter: Duration?
            let written = try sink.write(samples[...], stop: {
                checks += 1
                guard checks > 10 else { return false }
                if stoppedAfter == nil { stoppedAfter = ContinuousClock.now - started }
                return true
            })
            // Nothing is written once the stop is asked for: at most the buffer plus what the device had played by
            // then (a loaded machine makes the writer late, so each write may add more than a period).
            let played = try #require(stoppedAfter) / .seconds(1) * Double(parameters.sampleRate)
            #expect(
                Double(written) <= Double(parameters.bufferFrames + parameters.periodFrames) + played,
                "wrote \(written) frames, \(played) played when stopped")
            #expect(written < samples.count / 2)
            sink.drop()
        }
    }

    @Test func aCancelFromAnotherThreadWakesTheWriterAndTheSoundStops() async throws {
        try await withRigEnvironment { rig in
            let samples = Self.tone(seconds: 3)
            let sink = AlsaSink(device: "pulse")
            let cancel = Atomic<Bool>(false)
            let result = Mutex<Int?>(nil)
            var bufferFrames = 0
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                bufferFrames = sink.parameters?.bufferFrames ?? 0
                let writer = Thread {
                    let frames = (try? sink.write(samples[...], stop: { cancel.load(ordering: .acquiring) })) ?? -1
                    sink.drop()
                    result.withLock { $0 = frames }
                }
                writer.start()
                try await Task.sleep(for: .milliseconds(500))
                cancel.store(true, ordering: .releasing)
                sink.wake()
                while result.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
                sink.close()
                try await Task.sleep(for: .milliseconds(500))
            }
            let frames = try #require(result.withLock { $0 })
            #expect(frames > 0 && frames < samples.count / 2, "wrote \(frames) of \(samples.count) frames")
            // Dropped at once: what was heard ends within a buffer of what was written.
            let heard = (AudioMatch.end(captured) ?? 0) - (AudioMatch.onset(captured) ?? 0)
            #expect(heard <= frames, "heard \(heard) samples, more than the \(frames) written")
            #expect(heard > frames - bufferFrames - 640, "heard \(heard) samples of \(frames) written")
        }
    }

    @Test func aDeviceThatRefusesS16GetsItsOwnFormatAndSoundsTheSame() async throws {
        try await withRigEnvironment { rig in
            let samples = Self.tone(seconds: 0.6)
            var parameters: PCMParameters?
            let captured = try await rig.capture {
                let sink = AlsaSink(device: "float_only")
                try sink.open(sampleRate: 16000)
                parameters = sink.parameters
                _ = try sink.write(samples[...], stop: { false })
                _ = try sink.waitUntilPlayed { _ in false }
                sink.drain()
                sink.close()
            }
            #expect(parameters?.format == .float32)
            let match = AudioMatch.correlation(expected: samples, captured: captured)
            #expect(match.value > 0.99, "float conversion changed the sound (\(match.value))")
        }
    }

    @Test func anUnderrunIsRecoveredInPlaceAndCounted() async throws {
        try await withRigEnvironment { rig in
            let first = Self.tone(seconds: 0.3)
            let second = Self.tone(seconds: 0.3, frequency: 660)
            let sink = AlsaSink(device: "pulse")
            defer { sink.close() }
            let captured = try await rig.capture {
                try sink.open(sampleRate: 16000)
                _ = try sink.write(first[...], stop: { false })
                // The writer is late: the buffer runs dry (the stream underruns) before the next write.
                try await Task.sleep(for: .milliseconds(400))
                _ = try sink.write(second[...], stop: { false })
                _ = try sink.waitUntilPlayed { _ in false }
            }
            #expect(sink.status.xruns >= 1, "the underrun was not seen: \(sink.status)")
            #expect(AudioMatch.correlation(expected: first, captured: captured).value > 0.95)
            let after = AudioMatch.correlationAtEnd(expected: second, captured: captured).value
            #expect(after > 0.95, "lost after the xrun (\(after))")
        }
    }

    @Test func aMissingDeviceIsATypedErrorNamingIt() throws {
        let sink = AlsaSink(device: "hw:CARD=NoSuchCard", periodMicroseconds: 10_000, periods: 4)
        do {
            try sink.open(sampleRate: 16000)
            Issue.record("opening a card that does not exist succeeded")
        } catch {
            #expect(error.code == .audioDevice)
            #expect(error.message.contains("hw:CARD=NoSuchCard"), "\(error)")
            #expect(error.cause?.contains("snd_pcm_open") == true, "\(error)")
        }
    }

    @Test func alsaErrorCarriesTheFunctionAndStrerror() {
        let error = AlsaError(function: "snd_pcm_writei", code: -32)
        #expect(error.description == "snd_pcm_writei: Broken pipe (-32)")
        #expect(error.kind == .underrun)
    }

    @Test func sampleFormatsEncodeS16Exactly() {
        let samples: [Int16] = [0, 1, -1, 32767, -32768, 12345]
        for format in SampleFormat.allCases {
            let bytes = UnsafeMutableRawPointer.allocate(byteCount: samples.count * 2 * format.bytes, alignment: 4)
            defer { bytes.deallocate() }
            samples.withUnsafeBufferPointer { format.encode($0, channels: 2, into: bytes) }
            for (index, sample) in samples.enumerated() {
                for channel in 0..<2 {
                    let offset = (index * 2 + channel) * format.bytes
                    let decoded: Int16
                    switch format {
                    case .s16: decoded = Int16(littleEndian: bytes.load(fromByteOffset: offset, as: Int16.self))
                    case .s32: decoded = Int16(Int32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)) >> 16)
                    case .s24: decoded = Int16(Int32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)) >> 8)
                    case .s24Packed:
                        let b = (0..<3).map { UInt32(bytes.load(fromByteOffset: offset + $0, as: UInt8.self)) }
                        decoded = Int16(truncatingIfNeeded: Int32(bitPattern: (b[0] | b[1] << 8 | b[2] << 16) << 8) >> 16)
                    case .float32:
                        let bits = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
                        decoded = Int16(Float(bitPattern: bits) * 32768)
                    }
                    #expect(decoded == sample, "\(format) channel \(channel): \(sample) → \(decoded)")
                }
            }
        }
    }
}

