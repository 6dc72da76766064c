import Foundation
import Logging
import Synchronization
import Testing

@testable import AnnounceCore

/// Collects player events; lets a test wait for N results.
final class EventLog: Sendable {
    private let results = Mutex<[JobResult]>([])
    private let events = Mutex<[Player.Event]>([])
    private let semaphore = DispatchSemaphore(value: 0)

    func record(_ event: Player.Event) {
        events.withLock { $0.append(event) }
        if case let .finished(result) = event {
            results.withLock { $0.append(result) }
            semaphore.signal()
        }
    }

    /// Waits (up to 10 s per result) until `count` results in all have come.
    func waitFor(_ count: Int) -> [JobResult] {
        while results.withLock({ $0.count }) < count {
            guard semaphore.wait(timeout: .now() + 10) == .success else { break }
        }
        return results.withLock { $0 }
    }

    var all: [Player.Event] { events.withLock { $0 } }

    var deviceErrors: [DeviceRecovery.Decision] {
        all.compactMap { event in
            if case let .deviceError(_, _, decision) = event { return decision }
            return nil
        }
    }
}

/// Polls `condition` (state another thread reaches right after an event) for up to 10 s.
func waitUntil(_ condition: () -> Bool) -> Bool {
    for _ in 0..<10_000 {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.001)
    }
    return condition()
}

struct PlayerTests {
    let pack: VoicePack
    let stateFile: MixerStateFile

    init() throws {
        pack = try Fixtures.pack()
        let directory = NSTemporaryDirectory() + "player-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        stateFile = MixerStateFile(path: "\(directory)/mixer-state.json")
    }

    /// Settings with no pause between announcements (most tests compare the device's samples with the renders
    /// back to back; the pause has its own tests).
    static var gapless: Player.Settings {
        var settings = Player.Settings()
        settings.pauseMs = 0
        settings.leadInMs = 0
        return settings
    }

    func start(
        _ sink: RecordingSink, settings: Player.Settings = PlayerTests.gapless, volume: VolumeGuard? = nil,
        ducker: Ducker? = nil
    ) -> (JobQueue<Job>, Player, EventLog) {
        let queue = JobQueue<Job>(capacity: 16)
        let events = EventLog()
        let player = Player(
            queue: queue, pack: pack, sink: sink, settings: settings, volume: volume, ducker: ducker,
            logger: Logger(label: "test")
        ) { events.record($0) }
        return (queue, player, events)
    }

    /// Cancels a job as the daemon does: flagged in the queue (or taken out of it), then the player woken.
    @discardableResult
    func cancel(_ id: UInt64, _ queue: JobQueue<Job>, _ player: Player) -> Bool {
        let (removed, flagged) = queue.cancel { $0 == id }
        if !flagged.isEmpty { player.wake() }
        return !removed.isEmpty || !flagged.isEmpty
    }

    /// The silence the player writes after the last announcement of a burst: two of the device's periods, so
    /// that a device that moves audio in whole periods plays the announcement's last one out whole.
    func tail(_ sink: RecordingSink) -> [Int16] { [Int16](repeating: 0, count: 2 * sink.period) }

    func quickRetries(giveUpAfterMs: Int = 10_000) -> Player.Settings {
        var settings = PlayerTests.gapless
        settings.recovery = RecoverySettings(initialBackoffMs: 1, maximumBackoffMs: 4, giveUpAfterMs: giveUpAfterMs)
        return settings
    }

    @Test func playsJobsInOrderBackToBackAndDrainsOnlyWhenEmpty() throws {
        let sink = RecordingSink()
        let (queue, player, events) = start(sink)
        let jobs = try ["100", "8.5", "1005"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let results = events.waitFor(3)
        queue.close()
        player.join()

        #expect(results.map(\.id) == [1, 2, 3])
        #expect(results.allSatisfy { $0.state == .spoken })
        let expected = try jobs.flatMap { try pack.render($0.announcement) }
        #expect(sink.samples == expected + tail(sink), "the device got exactly the three renders, in order, nothing between, then the tail")
        #expect(sink.heard == expected + tail(sink), "and played all of them")
        #expect(sink.calls == ["open(8000)", "played", "drain", "close"], "one open, one drain, at the end")
        #expect(results.map(\.frames) == (try jobs.map { try pack.render($0.announcement).count }))
    }

    @Test func theAudioThreadIsNamedAndRunsAtTheNiceValueItAskedFor() throws {
        var settings = PlayerTests.gapless
        settings.threadNice = 5  // lowering one's own priority needs no privilege; −10 works the same way as root
        let (queue, player, _) = start(RecordingSink(), settings: settings)
        player.start()
        defer {
            queue.close()
            player.join()
        }
        // What `ps -L -o comm,nice` and `top -H` show an operator: /proc/self/task/TID/{comm,stat}.
        func audioThreads() -> [(comm: String, nice: Int)] {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.compactMap { tid in
                guard let comm = try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8),
                    comm == "announce-audio\n",
                    let stat = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
                    let afterName = stat.range(of: ") ")
                else { return nil }
                // Fields after "(comm) ": state is field 3, nice is field 19.
                let fields = stat[afterName.upperBound...].split(separator: " ")
                return ("announce-audio", Int(fields[16]) ?? Int.min)
            }
        }
        // (Other tests' players run in this process too, at the default priority.)
        #expect(
            waitUntil { audioThreads().contains { $0.nice == 5 } }, "threads named announce-audio: \(audioThreads())")
    }

    @Test func keepOpenHoldsTheDeviceBetweenBursts() throws {
        let sink = RecordingSink()
        var settings = PlayerTests.gapless
        settings.keepOpen = true
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        _ = events.waitFor(1)
        #expect(waitUntil { player.status().state != .playing })
        #expect(player.status().state == .open)
        try queue.enqueue(Fixtures.job(2, "2", pack: pack))
        _ = events.waitFor(2)
        queue.close()
        player.join()
        #expect(sink.calls.filter { $0.hasPrefix("open") }.count == 1)
        #expect(sink.calls.filter { $0 == "close" }.count == 1, "closed only at shutdown: \(sink.calls)")
    }

    @Test func withoutKeepOpenEachBurstReleasesTheDevice() throws {
        let sink = RecordingSink()
        let (queue, player, events) = start(sink)
        player.start()
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        _ = events.waitFor(1)
        #expect(waitUntil { player.status().state == .idle }, "the burst ended and released the device")
        try queue.enqueue(Fixtures.job(2, "2", pack: pack))
        _ = events.waitFor(2)
        queue.close()
        player.join()
        #expect(sink.calls.filter { $0.hasPrefix("open") }.count == 2, "\(sink.calls)")
        #expect(sink.calls.filter { $0 == "close" }.count == 2, "\(sink.calls)")
        #expect(player.status().state == .idle)
    }

    /// While a job is being journaled (the queue's hint), the idle player opens the device, so that the job's
    /// first sample follows the commit without the open; the job then plays on that open device, lead-in first.
    @Test func theDeviceOpensWhileAJobIsJournaled() throws {
        let sink = RecordingSink()
        var settings = PlayerTests.gapless
        settings.leadInMs = 10
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        queue.hint()
        #expect(waitUntil { sink.status.isOpen }, "not opened at the hint: \(sink.calls)")
        #expect(sink.samples.isEmpty && player.status().state == .idle, "nothing written before the job")
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.spoken])
        #expect(sink.calls.filter { $0.hasPrefix("open") }.count == 1, "opened once: \(sink.calls)")
        let expected = try pack.render(Fixtures.job(1, "1", pack: pack).announcement, leadInMs: 10)
        #expect(sink.samples == expected + tail(sink), "the lead-in still comes first on a device opened ahead")
    }

    /// A hint whose job never comes (the journal refused it) leaves the device open only `openAheadMs`; kept open,
    /// it stays open as always.
    @Test(arguments: [false, true])
    func aDeviceOpenedForAJobThatNeverCameIsReleased(keepOpen: Bool) throws {
        let sink = RecordingSink()
        var settings = PlayerTests.gapless
        settings.openAheadMs = 20
        settings.keepOpen = keepOpen
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        queue.hint()
        if keepOpen {
            #expect(waitUntil { sink.status.isOpen })
            queue.hint()  // open already: nothing to do
        } else {
            #expect(waitUntil { sink.calls.contains("close") }, "not released: \(sink.calls)")
            #expect(sink.calls.filter { $0.hasPrefix("open") }.count == 1 && !sink.status.isOpen)
        }
        // Then a job plays as ever.
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        #expect(events.waitFor(1).map(\.state) == [.spoken])
        queue.close()
        player.join()
        #expect(sink.calls.filter { $0.hasPrefix("open") }.count == (keepOpen ? 1 : 2), "\(sink.calls)")
    }

    @Test func leadInOnlyBeforeTheFirstJobOfABurst() throws {
        let sink = RecordingSink()
        var settings = PlayerTests.gapless
        settings.leadInMs = 10
        let (queue, player, events) = start(sink, settings: settings)
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        try queue.enqueue(Fixtures.job(2, "2", pack: pack))
        player.start()
        _ = events.waitFor(2)
        queue.close()
        player.join()
        let first = try pack.render(Fixtures.job(1, "1", pack: pack).announcement, leadInMs: 10)
        let second = try pack.render(Fixtures.job(2, "2", pack: pack).announcement)
        #expect(sink.samples == first + second + tail(sink))
        #expect(first.prefix(80).allSatisfy { $0 == 0 })
        let results = events.waitFor(2)
        #expect(results[0].leadInMs == 10 && results[1].leadInMs == nil)
        let leadIn = try #require(results[0].leadInStartNanos)
        #expect(try #require(results[0].firstSampleNanos) >= leadIn, "speech onset reported apart from the lead-in's")
    }

    /// A longer tail (`tailMs`: PipeWire drops what its graph still holds when the last stream ends) is written
    /// whole and played before the device is released; a job that comes while it is being written follows at once,
    /// not behind it.
    @Test func aLongerTailIsPlayedBeforeTheDeviceIsReleasedButHoldsNoJobUp() throws {
        let sink = RecordingSink()
        var settings = PlayerTests.gapless
        settings.tailMs = 100  // 800 frames at the fixtures' 8 kHz: 50 of the fake's 16-frame periods
        let (queue, player, events) = start(sink, settings: settings)
        let jobs = try ["100", "2"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        let renders = try jobs.map { try pack.render($0.announcement) }
        // The second job comes once ten periods of the first one's tail are written (two are always written).
        var sent = false
        sink.afterPeriod = {
            if !sent && sink.samples.count >= renders[0].count + 10 * sink.period {
                sent = true
                _ = try? queue.enqueue(jobs[1])
            }
        }
        try queue.enqueue(jobs[0])
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.spoken, .spoken])
        let longTail = [Int16](repeating: 0, count: 800)
        let between = sink.samples.count - renders[0].count - renders[1].count - longTail.count
        #expect(between >= 10 * sink.period && between <= 11 * sink.period, "\(between) frames between the two")
        let silence = [Int16](repeating: 0, count: max(0, between))
        #expect(sink.samples == renders[0] + silence + renders[1] + longTail, "the long tail after the last job only")
        #expect(sink.heard == sink.samples, "all of it played before the device was released")
        #expect(sink.calls.suffix(2) == ["drain", "close"])
    }

    @Test func aPauseSeparatesTheAnnouncementsOfABurstButNeverPrecedesTheFirst() throws {
        let sink = RecordingSink()
        var settings = Player.Settings()
        settings.pauseMs = 250
        settings.leadInMs = 20
        let (queue, player, events) = start(sink, settings: settings)
        let jobs = try ["1", "22", "333"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        for job in jobs { try queue.enqueue(job) }
        player.start()
        _ = events.waitFor(3)
        queue.close()
        player.join()
        let renders = try jobs.map { try pack.render($0.announcement) }
        let pause = [Int16](repeating: 0, count: 250 * 8)
        let leadIn = [Int16](repeating: 0, count: 20 * 8)
        #expect(sink.samples == leadIn + renders[0] + pause + renders[1] + pause + renders[2] + tail(sink))
        #expect(sink.heard == sink.samples, "all of it played, silence included (no underrun between)")
    }

    @Test func aJobSoonAfterTheLastSoundStillGetsItsPauseOneLaterOnlyTheLeadIn() throws {
        let sink = RecordingSink()
        var settings = Player.Settings()
        settings.pauseMs = 10_000
        settings.leadInMs = 20
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        let jobs = try ["1", "2"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        let renders = try jobs.map { try pack.render($0.announcement) }
        try queue.enqueue(jobs[0])
        _ = events.waitFor(1)
        #expect(waitUntil { player.status().state == .idle }, "the burst ended")
        try queue.enqueue(jobs[1])
        _ = events.waitFor(2)
        queue.close()
        player.join()
        let leadIn = 20 * 8
        #expect(sink.samples.prefix(leadIn + renders[0].count) == (Array(repeating: 0, count: leadIn) + renders[0])[...])
        // The second came within a second of the first's end: the rest of the 10 s pause, not just the lead-in
        // (the first burst's tail, then the rest of the pause; the second burst's tail after it).
        let tail = tail(sink)
        let between = sink.samples.count - leadIn - renders[0].count - renders[1].count - tail.count
        #expect(between > 9 * 8_000 && between <= 10 * 8_000 + tail.count, "\(between) frames of silence between")
        #expect(sink.samples.dropFirst(leadIn + renders[0].count).prefix(between).allSatisfy { $0 == 0 })
        #expect(Array(sink.samples.suffix(renders[1].count + tail.count)) == renders[1] + tail)
    }

    @Test func aJobLongAfterTheLastSoundGetsOnlyTheLeadIn() throws {
        let sink = RecordingSink()
        var settings = Player.Settings()
        settings.pauseMs = 50
        settings.leadInMs = 20
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        let jobs = try ["1", "2"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        try queue.enqueue(jobs[0])
        _ = events.waitFor(1)
        #expect(waitUntil { player.status().state == .idle })
        Thread.sleep(forTimeInterval: 0.2)  // longer than the pause: only time has to pass, nothing to wait for
        try queue.enqueue(jobs[1])
        _ = events.waitFor(2)
        queue.close()
        player.join()
        let leadIn = [Int16](repeating: 0, count: 20 * 8)
        let renders = try jobs.map { try pack.render($0.announcement) }
        #expect(sink.samples == leadIn + renders[0] + tail(sink) + leadIn + renders[1] + tail(sink))
    }

    @Test func aJobIsSpokenOnlyOnceItsLastSampleHasLeftTheDevice() throws {
        let sink = RecordingSink(period: 16, bufferPeriods: 8)
        let mayPlay = Atomic<Bool>(false)
        sink.playOut = { mayPlay.load(ordering: .relaxed) }
        let (queue, player, events) = start(sink)
        let job = try Fixtures.job(1, "100", pack: pack)
        try queue.enqueue(job)
        player.start()
        let render = try pack.render(job.announcement)
        #expect(waitUntil { sink.samples.count == render.count + tail(sink).count }, "all written, the tail too")
        // Written, but the device still holds its last 128 frames: not heard yet, so not spoken.
        #expect(waitUntil { sink.calls.isEmpty == false })
        Thread.sleep(forTimeInterval: 0.05)
        #expect(events.all.filter { if case .finished = $0 { true } else { false } }.isEmpty, "\(events.all)")
        #expect(sink.pending == 128)
        mayPlay.store(true, ordering: .relaxed)
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .spoken)
        #expect(sink.heard == render + tail(sink))
        #expect(results.first?.heardAt != nil)
    }

    @Test func aJobIsConfirmedHeardWhileTheNextIsWrittenNotWhenTheBurstEnds() throws {
        // Job 1's end leaves the 64-frame buffer while job 2 is being written: it is reported then.
        let sink = RecordingSink(period: 16, bufferPeriods: 4)
        let queue = JobQueue<Job>(capacity: 4)
        let writtenAtFirstEnd = Mutex<Int?>(nil)
        let events = EventLog()
        let player = Player(queue: queue, pack: pack, sink: sink, settings: PlayerTests.gapless) { event in
            if case let .finished(result) = event, result.id == 1 {
                writtenAtFirstEnd.withLock { $0 = sink.samples.count }
            }
            events.record(event)
        }
        let jobs = try ["1", "987654321.99"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let ended = events.waitFor(2)
        queue.close()
        player.join()
        #expect(ended.map(\.id) == [1, 2])
        let first = try pack.render(jobs[0].announcement).count
        let total = sink.samples.count
        let written = try #require(writtenAtFirstEnd.withLock { $0 })
        #expect(written >= first + 64 && written <= first + 64 + 64, "heard once pushed out of the buffer: \(written)")
        #expect(written < total, "while job 2 was still being written")
    }

    /// On a ring other clients share (dmix), a job's end is never more than `endAheadMs` ahead of the speaker: from
    /// the write that puts a job's last sample in, until that sample has been heard, the device holds at most that
    /// much — so a daemon killed then leaves little of it to play on. Elsewhere the whole buffer is used.
    @Test(arguments: [true, false])
    func onASharedRingAJobsEndIsWrittenAtMostEndAheadBeforeItIsHeard(sharedRing: Bool) throws {
        let sink = RecordingSink(period: 16, bufferPeriods: 8, sharedRing: sharedRing)
        var settings = PlayerTests.gapless
        settings.endAheadMs = 3  // 24 frames at the fixtures' 8 kHz, of a 128-frame buffer
        let (queue, player, events) = start(sink, settings: settings)
        let jobs = try ["12.5", "3", "987654321.99"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let results = events.waitFor(3)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.spoken, .spoken, .spoken], "\(results)")
        let renders = try jobs.map { try pack.render($0.announcement) }
        #expect(sink.heard == renders.joined() + tail(sink), "every sample heard once, in order, no gap")
        // Each job's end: the frame after its last sample. Ahead of the speaker: written but not heard.
        var end = 0
        for render in renders {
            end += render.count
            let ahead = sink.fills.filter { $0.written >= end && $0.heard < end }.map { $0.written - $0.heard }
            #expect(!ahead.isEmpty, "the end at \(end) was written while still to be heard")
            if sharedRing {
                #expect(ahead.allSatisfy { $0 <= 24 }, "the end at \(end) up to \(ahead.max() ?? 0) frames ahead")
            } else {
                #expect(ahead.contains { $0 > 24 }, "without a shared ring the buffer fills: \(ahead.max() ?? 0)")
            }
        }
    }

    @Test func aDeviceFailureReplaysEveryJobNotHeardYetInOrder() throws {
        // Job 1 is all written but its end is still in the 128-frame buffer when the device vanishes in job 2.
        let sink = RecordingSink(period: 16, bufferPeriods: 8)
        let jobs = try ["1", "22"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        let renders = try jobs.map { try pack.render($0.announcement) }
        sink.failWriteAtFrame = renders[0].count + 48
        let (queue, player, events) = start(sink, settings: quickRetries())
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.id) == [1, 2] && results.allSatisfy { $0.state == .spoken }, "\(results)")
        #expect(results.map(\.attempts) == [2, 2], "both played again from their start")
        let again = renders[0] + renders[1] + tail(sink)
        #expect(Array(sink.heard.suffix(again.count)) == again)
        #expect(sink.heard.count < renders[0].count + again.count, "job 1 was heard only in part before")
    }

    @Test func cancellingAJobPlayingOutDropsTheBufferAndReplaysTheNextOne() throws {
        let sink = RecordingSink(period: 16, bufferPeriods: 8)
        let (queue, player, events) = start(sink)
        let jobs = try ["1", "22"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        let renders = try jobs.map { try pack.render($0.announcement) }
        let once = Atomic<Bool>(false)
        sink.afterPeriod = {
            // Job 2 has begun; job 1's last 96 frames are still in the device.
            if sink.samples.count >= renders[0].count + 32, !once.exchange(true, ordering: .relaxed) {
                self.cancel(1, queue, player)
            }
        }
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.cancelled, .spoken])
        #expect(results[1].attempts == 2)
        #expect(Array(sink.heard.suffix(renders[1].count + 2 * sink.period)) == renders[1] + tail(sink), "job 2 heard whole")
        #expect(!sink.heard.starts(with: renders[0]), "job 1 was cut: its end never played")
    }

    @Test func abortLeavesTheJobsInHandUnfinished() throws {
        let sink = RecordingSink(period: 16)
        sink.periodWait = .seconds(30)
        let (queue, player, events) = start(sink)
        try queue.enqueue(Fixtures.job(1, "987654321.99", pack: pack))
        try queue.enqueue(Fixtures.job(2, "1", pack: pack))
        player.start()
        #expect(waitUntil { queue.inFlight == [1] })
        _ = queue.closeNow()
        player.abort()
        player.join()
        #expect(events.all.allSatisfy { if case .finished = $0 { false } else { true } }, "no end reported")
        #expect(queue.inFlight.isEmpty, "given back")
        #expect(sink.heard.isEmpty && sink.calls.contains("drop"))
    }

    @Test func progressGrowsWithEveryPeriodAndIsNilWhenIdle() throws {
        let sink = RecordingSink(period: 16)
        let seen = Mutex<[UInt64]>([])
        let (queue, player, events) = start(sink)
        sink.afterPeriod = { if let progress = player.progress { seen.withLock { $0.append(progress) } } }
        #expect(player.progress == nil)
        try queue.enqueue(Fixtures.job(1, "100", pack: pack))
        player.start()
        _ = events.waitFor(1)
        #expect(waitUntil { player.progress == nil }, "idle again")
        queue.close()
        player.join()
        let values = seen.withLock { $0 }
        // Read after every 16-frame period; the player adds what it wrote after each write of a few periods.
        #expect(values.count > 10 && values == values.sorted(), "\(values)")
        #expect(Set(values).count >= values.count / 8, "it grows as the job is written: \(values)")
    }

    func nextSamples(_ job: Job) -> [Int16] { (try? pack.render(job.announcement)) ?? [] }

    @Test func aPaymentCutsANoticePlayingAndTheNoticeIsHeardWholeAfterIt() throws {
        let sink = RecordingSink(period: 16)
        let (queue, player, events) = start(sink)
        var notice = try Fixtures.job(1, "987654321.99", pack: pack)
        notice.priority = .notice
        let payment = try Fixtures.job(2, "1", pack: pack)
        let sent = Atomic<Bool>(false)
        let cutAt = Atomic<Int>(0)
        sink.afterPeriod = {
            if sink.samples.count >= 64, !sent.exchange(true, ordering: .relaxed) {
                cutAt.store(sink.samples.count, ordering: .relaxed)
                _ = try? queue.enqueue(payment)
            }
        }
        try queue.enqueue(notice)
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.id) == [2, 1], "the payment ends first")
        #expect(results.map(\.state) == [.spoken, .spoken])
        #expect(results[1].attempts == 2, "the notice played again from its start")
        #expect(events.all.contains { if case .requeued(id: 1) = $0 { true } else { false } })
        #expect(sink.calls.contains("drop"))
        let after = nextSamples(payment) + nextSamples(notice) + tail(sink)
        #expect(sink.samples.count - after.count <= cutAt.load(ordering: .relaxed) + 16, "cut within a period")
        #expect(Array(sink.heard.suffix(after.count)) == after, "the payment, then the notice whole")
    }

    @Test func aNoticeWholeInTheBufferIsNotCut() throws {
        let sink = RecordingSink(period: 16, bufferPeriods: 64)
        let (queue, player, events) = start(sink)
        var notice = try Fixtures.job(1, "1", pack: pack)
        notice.priority = .notice
        let payment = try Fixtures.job(2, "22", pack: pack)
        let sent = Atomic<Bool>(false)
        let noticeFrames = nextSamples(notice).count
        sink.afterPeriod = {
            // The notice is all written (its end in the buffer, not yet played): it plays out.
            if sink.samples.count >= noticeFrames, !sent.exchange(true, ordering: .relaxed) { _ = try? queue.enqueue(payment) }
        }
        try queue.enqueue(notice)
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.id) == [1, 2])
        #expect(results.allSatisfy { $0.state == .spoken && $0.attempts == 1 })
        #expect(!sink.calls.contains("drop"))
    }

    @Test func cancelStopsWithinAPeriodAndTheNextJobPlays() throws {
        let sink = RecordingSink(period: 16)
        let (queue, player, events) = start(sink)
        let long = try Fixtures.job(1, "987654321.99", pack: pack)
        let next = try Fixtures.job(2, "1", pack: pack)
        let cancelled = Atomic<Bool>(false)
        sink.afterPeriod = {
            if sink.samples.count >= 64, !cancelled.exchange(true, ordering: .relaxed) { cancel(1, queue, player) }
        }
        try queue.enqueue(long)
        try queue.enqueue(next)
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.cancelled, .spoken])
        let played = nextSamples(next) + tail(sink)
        #expect(sink.samples.count - played.count <= 64 + 16, "stopped within one period of the cancel")
        #expect(sink.calls.contains("drop"))
        #expect(Array(sink.samples.suffix(played.count)) == played)
        #expect(Array(sink.heard.suffix(played.count)) == played, "the next one heard whole")
    }

    @Test func aCancelFromAnotherThreadWakesABlockedWrite() throws {
        // Each period "waits for the device" for a long time, as a real PCM does in poll; only wake() ends it.
        let sink = RecordingSink(period: 16)
        sink.periodWait = .seconds(30)
        let (queue, player, events) = start(sink)
        try queue.enqueue(Fixtures.job(1, "987654321.99", pack: pack))
        player.start()
        #expect(waitUntil { sink.calls.contains("open(8000)") }, "the job is being written")
        #expect(waitUntil { queue.inFlight == [1] })
        #expect(cancel(1, queue, player))
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .cancelled)
        #expect(sink.wakes >= 1)
        #expect(sink.samples.isEmpty, "nothing written after the cancel")
        #expect(sink.calls.contains("drop"))
    }

    @Test func cancellingAnotherJobIDDoesNothing() throws {
        let sink = RecordingSink()
        let (queue, player, events) = start(sink)
        sink.afterPeriod = { _ = self.cancel(99, queue, player) }
        try queue.enqueue(Fixtures.job(1, "100", pack: pack))
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .spoken)
    }

    // MARK: - Recovery

    @Test func aDeviceThatFailsToOpenIsRetriedAndTheJobStillPlays() throws {
        let sink = RecordingSink()
        sink.openFailures = 2
        let (queue, player, events) = start(sink, settings: quickRetries())
        let job = try Fixtures.job(1, "100", pack: pack)
        try queue.enqueue(job)
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .spoken)
        #expect(sink.samples == (try pack.render(job.announcement)) + tail(sink))
        #expect(sink.calls.filter { $0.hasPrefix("open") }.count == 3)
        #expect(events.deviceErrors == [.retry(afterMs: 1), .retry(afterMs: 2)])
        let status = player.status()
        #expect(status.deviceFailures == 2 && status.recoveries == 1)
        #expect(status.lastError?.code == "audio_device")
    }

    @Test func aDeviceThatVanishesMidJobReplaysTheJobFromItsStart() throws {
        let sink = RecordingSink()
        sink.failWriteAtFrame = 100
        let (queue, player, events) = start(sink, settings: quickRetries())
        let job = try Fixtures.job(1, "100", pack: pack)
        try queue.enqueue(job)
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        let render = try pack.render(job.announcement)
        #expect(results.first?.state == .spoken)
        #expect(results.first?.frames == render.count)
        // The interrupted start, then the whole job again.
        #expect(Array(sink.samples.suffix(render.count + 2 * sink.period)) == render + tail(sink))
        #expect(Array(sink.heard.suffix(render.count + 2 * sink.period)) == render + tail(sink), "heard whole after the fragment")
        #expect(results.first?.attempts == 2)
        #expect(sink.calls.contains("vanished"))
    }

    @Test func aDeviceThatDiesWhileTheTailPlaysReplaysTheJob() throws {
        let sink = RecordingSink()
        sink.waitFailures = 1
        let (queue, player, events) = start(sink, settings: quickRetries())
        let job = try Fixtures.job(1, "8", pack: pack)
        try queue.enqueue(job)
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        let render = try pack.render(job.announcement)
        #expect(results.first?.state == .spoken)
        #expect(sink.samples == render + tail(sink) + render + tail(sink),
                "written once, then again after the device died while it played out")
        #expect(Array(sink.heard.suffix(render.count + 2 * sink.period)) == render + tail(sink))
    }

    @Test func aDeviceAwayForAWhileKeepsTheQueueAndEveryJobPlaysInOrder() throws {
        // The sound server restarts during job 2 of 4: open fails for a while, then works again.
        let sink = RecordingSink()
        let attempts = Atomic<Int>(0)
        let jobs = try ["1", "22", "333", "4444"].enumerated().map { try Fixtures.job(UInt64($0 + 1), $1, pack: pack) }
        let firstLength = try pack.render(jobs[0].announcement).count
        sink.failWriteAtFrame = firstLength + 50
        // After vanishing, the device refuses six reopen attempts, then is back.
        sink.deviceAway = { [unowned sink] in
            sink.calls.contains("vanished") && attempts.add(1, ordering: .relaxed).newValue <= 6
        }
        let (queue, player, events) = start(sink, settings: quickRetries())
        for job in jobs { try queue.enqueue(job) }
        player.start()
        let results = events.waitFor(4)
        queue.close()
        player.join()
        #expect(results.map(\.id) == [1, 2, 3, 4])
        #expect(results.allSatisfy { $0.state == .spoken }, "\(results)")
        let renders = try jobs.map { try pack.render($0.announcement) }
        let rest = renders[1] + renders[2] + renders[3] + tail(sink)
        #expect(Array(sink.samples.suffix(rest.count)) == rest, "job 2 replayed whole, then 3 and 4")
        #expect(events.deviceErrors.count == 7)
        #expect(player.status().recoveries == 1)
    }

    /// Issue 27, finding 6: once the device has failed for `giveUpAfterMs`, the job in hand and every job waiting
    /// fail together (not one more every `giveUpAfterMs`), and the device is missing.
    @Test func aDeviceThatNeverComesBackFailsEveryWaitingJobTogether() throws {
        let sink = RecordingSink()
        sink.openFailures = 1_000
        let (queue, player, events) = start(sink, settings: quickRetries(giveUpAfterMs: 30))
        for (index, amount) in ["100", "200", "300"].enumerated() {
            try queue.enqueue(Fixtures.job(UInt64(index + 1), amount, pack: pack))
        }
        player.start()
        let results = events.waitFor(3)
        #expect(results.map(\.id) == [1, 2, 3])
        #expect(results.map(\.state) == [.failed, .failed, .failed])
        #expect(results.allSatisfy { $0.error?.code == .audioDevice })
        #expect(results.dropFirst().allSatisfy { $0.error?.message.hasPrefix("the audio device is missing") == true })
        #expect(events.deviceErrors.filter { $0 == .giveUp }.count == 1, "given up once, for all three")
        #expect(player.status().jobsGivenUp == 3)
        #expect(waitUntil { player.status().state == .missing }, "missing while nothing plays: \(player.status().state)")
        queue.close()
        player.join()
        #expect(player.status().state == .missing, "still missing after the audio thread ends")
    }

    /// A device away at start is said missing from the start, but the first job still gets its retries; once it
    /// is given up on, the next job tries it once and fails at once; a probe finds it back; the next job plays.
    @Test func aMissingDeviceIsSaidFromTheStartFailsJobsAtOnceOnceGivenUpAndIsProbedUntilBack() throws {
        let sink = RecordingSink()
        let away = Atomic<Bool>(true)
        sink.deviceAway = { away.load(ordering: .relaxed) }
        var settings = quickRetries(giveUpAfterMs: 40)
        settings.probeAtStart = true
        let (queue, player, events) = start(sink, settings: settings)
        player.start()
        #expect(waitUntil { events.all.contains { if case .deviceMissing = $0 { true } else { false } } })
        #expect(player.status().state == .missing)
        try queue.enqueue(Fixtures.job(1, "100", pack: pack))
        #expect(events.waitFor(1).map(\.state) == [.failed])
        #expect(events.deviceErrors.count > 1 && events.deviceErrors.last == .giveUp, "retried, then given up")
        let before = events.deviceErrors.count
        try queue.enqueue(Fixtures.job(2, "200", pack: pack))
        #expect(events.waitFor(2).map(\.state) == [.failed, .failed])
        #expect(events.deviceErrors.count == before + 1, "job 2: one attempt, given up at once")
        away.store(false, ordering: .relaxed)
        #expect(
            waitUntil { player.status().state == .idle }, "the probe (every 2 s) finds it: \(player.status().state)")
        #expect(events.all.contains { if case .deviceRecovered = $0 { true } else { false } })
        let job = try Fixtures.job(3, "8", pack: pack)
        try queue.enqueue(job)
        let results = events.waitFor(3)
        queue.close()
        player.join()
        #expect(results.last?.state == .spoken)
        let render = try pack.render(job.announcement)
        #expect(Array(sink.heard.suffix(render.count + 2 * sink.period)) == render + tail(sink))
    }

    @Test func aCancelDuringTheBackoffEndsTheWaitAndTheJob() throws {
        let sink = RecordingSink()
        sink.openFailures = 1_000
        var settings = Player.Settings()
        settings.recovery = RecoverySettings(initialBackoffMs: 60_000, maximumBackoffMs: 60_000, giveUpAfterMs: 600_000)
        let (queue, player, events) = start(sink, settings: settings)
        try queue.enqueue(Fixtures.job(1, "100", pack: pack))
        player.start()
        #expect(waitUntil { player.status().state == .recovering })
        let retryInMs = player.status().retryInMs ?? 0
        #expect(retryInMs > 1_000)
        cancel(1, queue, player)
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .cancelled)
    }

    @Test func xrunsRecoveredByTheSinkShowInTheStatus() throws {
        let sink = RecordingSink()
        sink.xrunAtFrames = [40, 200]
        let (queue, player, events) = start(sink)
        let job = try Fixtures.job(1, "12345", pack: pack)
        try queue.enqueue(job)
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .spoken)
        #expect(player.status().sink.xruns == 2)
        #expect(sink.samples == (try pack.render(job.announcement)) + tail(sink), "nothing lost or repeated around an xrun")
    }

    @Test func anAnnouncementThatCannotBeBuiltPlaysTheChime() throws {
        let sink = RecordingSink()
        let (queue, player, events) = start(sink)
        var job = try Fixtures.job(1, "100", pack: pack)
        job.announcement.files[1] = "clips/missing.wav"
        try queue.enqueue(job)
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .failed)
        #expect(results.first?.error?.code == .missingClip)
        #expect(sink.samples == (try pack.renderChime()) + tail(sink))
    }

    // MARK: - Volume and ducking

    @Test func theVolumeIsRaisedBeforeTheFirstSampleAndRestoredOnlyWhenTheQueueIsEmpty() throws {
        let control = FakeVolumeControl(raw: [20])
        let volume = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .respect, stateFile: stateFile,
            logger: Logger(label: "test"))
        let sink = RecordingSink()
        let seenWhilePlaying = Mutex<[Int]>([])
        sink.afterPeriod = { seenWhilePlaying.withLock { $0.append(control.value.raw[0]) } }
        let (queue, player, events) = start(sink, volume: volume)
        for (index, amount) in ["1", "2", "3"].enumerated() {
            try queue.enqueue(Fixtures.job(UInt64(index + 1), amount, pack: pack))
        }
        player.start()
        _ = events.waitFor(3)
        queue.close()
        player.join()
        let levels = Set(seenWhilePlaying.withLock { $0 })
        #expect(levels == [60], "every period of all three jobs played at 60")
        #expect(control.writes == ["write raw [60]", "write raw [20]"], "raised once, restored once")
        #expect(control.value.raw == [20])
    }

    /// A job followed only by jobs whose ttl passed while it played: it is confirmed heard and the burst ends
    /// (volume back) at once, not when the next job comes. (Found in CI: the player took the expired job out
    /// of the queue and then waited for another with job 1 still unconfirmed and the volume still raised.)
    @Test func aJobFollowedOnlyByExpiredOnesIsHeardAndTheBurstEnds() throws {
        let control = FakeVolumeControl(raw: [20])
        let volume = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .respect, stateFile: stateFile,
            logger: Logger(label: "test"))
        let sink = RecordingSink()
        let discarded = Mutex<[UInt64]>([])
        let (queue, player, events) = start(sink, volume: volume)
        queue.onDiscard { job, _ in discarded.withLock { $0.append(job.id) } }
        try queue.enqueue(Fixtures.job(1, "987654321.99", pack: pack))
        var late = try Fixtures.job(2, "1", pack: pack)
        late.expiresAt = Monotonic.nanos  // its ttl passes while job 1 plays
        try queue.enqueue(late)
        player.start()
        let results = events.waitFor(1)
        #expect(results.map(\.id) == [1] && results.first?.state == .spoken, "\(results)")
        #expect(waitUntil { control.value.raw == [20] }, "the burst never ended: volume \(control.value.raw)")
        #expect(discarded.withLock { $0 } == [2])
        #expect(waitUntil { player.status().state == .idle }, "\(player.status().state)")
        queue.close()
        player.join()
    }

    @Test func mutedWithRespectFailsEveryJobWithMutedAndPlaysNothing() throws {
        let control = FakeVolumeControl(raw: [80], switches: [false])
        let volume = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .respect, stateFile: stateFile,
            logger: Logger(label: "test"))
        let sink = RecordingSink()
        let (queue, player, events) = start(sink, volume: volume)
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        try queue.enqueue(Fixtures.job(2, "2", pack: pack))
        player.start()
        let results = events.waitFor(2)
        queue.close()
        player.join()
        #expect(results.map(\.state) == [.failed, .failed])
        #expect(results.allSatisfy { $0.error?.code == .muted })
        #expect(sink.samples.isEmpty)
        #expect(control.writes.isEmpty)
    }

    @Test func mutedWithOverridePlaysUnmutedAndMutesAgainAfter() throws {
        let control = FakeVolumeControl(raw: [80], switches: [false])
        let volume = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .override, stateFile: stateFile,
            logger: Logger(label: "test"))
        let sink = RecordingSink()
        let switchWhilePlaying = Mutex<Set<Bool>>([])
        sink.afterPeriod = { switchWhilePlaying.withLock { _ = $0.insert(control.value.switches![0]) } }
        let (queue, player, events) = start(sink, volume: volume)
        try queue.enqueue(Fixtures.job(1, "1", pack: pack))
        player.start()
        let results = events.waitFor(1)
        queue.close()
        player.join()
        #expect(results.first?.state == .spoken)
        let switches = switchWhilePlaying.withLock { $0 }
        #expect(switches == [true])
        #expect(control.value.switches == [false])
    }

    @Test func otherStreamsAreDuckedDuringTheBurstAndRestoredAfter() throws {
        let music = FakeVolumeControl("hw:0/Music", raw: [255], range: 0...255, centidBPerStep: 20)
        let ducker = Ducker(
            controls: [music], settings: DuckSettings(decibels: 20, rampMs: 0), stateFile: stateFile,
            logger: Logger(label: "test"), sleep: { _ in })
        let sink = RecordingSink()
        let (queue, player, events) = start(sink, ducker: ducker)
        let musicWhilePlaying = Mutex<Set<Int>>([])
        sink.afterPeriod = {
            // The ramp runs on the ducker's thread, concurrently with the first period; look from the second on.
            if sink.samples.count == 32 { ducker.waitUntilIdle() }
            if sink.samples.count >= 32 { musicWhilePlaying.withLock { _ = $0.insert(music.value.raw[0]) } }
        }
        try queue.enqueue(Fixtures.job(1, "100", pack: pack))
        try queue.enqueue(Fixtures.job(2, "200", pack: pack))
        player.start()
        _ = events.waitFor(2)
        queue.close()
        player.join()
        let musicLevels = musicWhilePlaying.withLock { $0 }
        #expect(musicLevels == [155], "music 20 dB down for both jobs")
        #expect(music.value.raw == [255])
        #expect(music.writes == ["write raw [155]", "write raw [255]"], "one duck, one restore for the burst")
    }

    @Test func statusCarriesDeviceVolumeAndDucking() throws {
        let control = FakeVolumeControl(raw: [20])
        let volume = VolumeGuard(
            control: control, threshold: .percent(60), mutePolicy: .override, stateFile: stateFile,
            logger: Logger(label: "test"))
        let music = FakeVolumeControl("pulse:music/Master", raw: [65536], range: 0...65536)
        let ducker = Ducker(
            controls: [music], settings: DuckSettings(decibels: 20), stateFile: stateFile,
            logger: Logger(label: "test"), sleep: { _ in })
        let sink = RecordingSink()
        let (_, player, _) = start(sink, volume: volume, ducker: ducker)
        let status = player.status()
        #expect(status.state == .idle)
        #expect(status.volume?.element == "fake/Master")
        #expect(status.volume?.raw == [20])
        #expect(abs((status.volume?.percent?.first ?? 0) - 20) < 1e-9)
        #expect(status.volume?.threshold == "60%")
        #expect(status.volume?.thresholdRaw == 60)
        #expect(status.volume?.mutePolicy == .override)
        #expect(status.ducking?.decibels == 20)
        #expect(status.ducking?.controls.map(\.element) == ["pulse:music/Master"])
        let encoded = try JSONEncoder().encode(status)
        #expect(try JSONDecoder().decode(AudioEngineStatus.self, from: encoded) == status)
    }
}
