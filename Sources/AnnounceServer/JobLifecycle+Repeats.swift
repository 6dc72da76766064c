import AnnounceCore
import AnnounceJournal
import Logging

/// A repeating notice in this run: its journal row, the job saying it now, and the pause before the next time.
struct RepeatRun {
    var record: RepeatRecord
    /// The job saying the current time (queued or playing), nil between two times.
    var job: UInt64?
    /// The driver waiting out the pause before the next time: resumed true when it is over, false when the repeat
    /// ended meanwhile (or the daemon stops).
    var pause: CheckedContinuation<Bool, Never>?
}

/// Repeating notices (docs/protocol.md, "Repeating notices"): their state is kept here with the jobs', on the job
/// executor, and journaled before it is reported. The driver (``Daemon/driveRepeat(_:)``) asks what to say next,
/// says it as a job, and reports how that job ended; a stop or the shop's key ends the repeat from here.
extension JobLifecycle {
    /// What comes after a time has ended.
    enum AfterTime: Equatable {
        /// Pause this long, then say it again.
        case again(afterMs: Int64)
        case ended
    }

    /// Starts a repeat: journaled before this returns. Returns it, and whether it is new (else it was known by its
    /// order id: a start sent again, answered with the repeat as it is, never started twice).
    func beginRepeat(_ plan: RepeatPlan, text: String?) throws(AnnounceError) -> (RepeatInfo, started: Bool) {
        guard !isClosed else { throw AnnounceError(.shuttingDown, "the daemon is shutting down; try again after it restarts") }
        if let running = repeats[plan.order] { return (info(of: running), false) }
        guard repeats.count < RepeatPlan.maximumRunning else {
            throw AnnounceError(
                .queueFull, "\(RepeatPlan.maximumRunning) repeats are running; stop one first (nothing was dropped)")
        }
        let record = RepeatRecord(plan: plan, text: text, startedAt: stamp().wallMs)
        if let known = try journal.beginRepeat(record) { return (known.info, false) }
        repeats[plan.order] = RepeatRun(record: record)
        logger.info(
            "repeat started",
            metadata: [
                "repeat": "\(plan.order)", "every_ms": "\(plan.everyMs)", "times": "\(plan.times)",
                "text": "\(text ?? "")",
            ])
        return (record.info, true)
    }

    /// The time to say next (1-based) and the plan, or nil if the repeat has ended (or the daemon is stopping).
    func nextTime(of order: String) -> (time: Int, plan: RepeatPlan)? {
        guard !isClosed, let run = repeats[order], run.record.state == .repeating else { return nil }
        return (run.record.played + 1, run.record.plan)
    }

    /// The job saying the current time.
    func bind(_ order: String, job: UInt64) {
        repeats[order]?.job = job
    }

    /// The job saying time `time` has ended as `info`: counted (once: a time already counted, found again after a
    /// restart, is not), journaled, and — after the last time — the repeat ends `done`.
    func timeEnded(of order: String, time: Int, info: JobInfo) -> AfterTime {
        guard var run = repeats[order] else { return .ended }
        run.job = nil
        if time == run.record.played + 1 {
            run.record.played = time
            if info.state == .spoken { run.record.heard += 1 }
        }
        repeats[order] = run
        guard run.record.state == .repeating else { return .ended }
        if run.record.played >= run.record.plan.times {
            end(order, as: .done)
            return .ended
        }
        keep(run.record)
        return .again(afterMs: run.record.plan.everyMs)
    }

    /// Waits out the pause before the next time: true once it is over, false if the repeat ended meanwhile (a stop,
    /// the key) or the daemon is stopping.
    func pauseBeforeNext(_ order: String, ms: Int64) async -> Bool {
        guard !isClosed, repeats[order]?.record.state == .repeating else { return false }
        executor.after(milliseconds: Int(ms)) { [weak self] in
            self?.assumeIsolated { lifecycle in
                let pause = lifecycle.repeats[order]?.pause
                lifecycle.repeats[order]?.pause = nil
                pause?.resume(returning: true)
            }
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            repeats[order]?.pause = continuation
        }
    }

    /// Ends the repeat `order` (nil: every one running) as `state` (`stopped`, `acknowledged`): journaled, the job
    /// saying it now cancelled (waiting or playing). Returns the repeats ended; a stop of one that has already ended
    /// returns it as it ended (a stop sent again), of one never started `not_found`.
    func stopRepeats(_ order: String?, state: RepeatState) async throws(AnnounceError) -> [RepeatInfo] {
        let matching = repeats.keys.filter { order == nil || $0 == order }.sorted()
        if let order, matching.isEmpty {
            if let known = try journal.repeatRecord(order) { return [known.info] }
            throw AnnounceError(.notFound, "no repeat \(order)")
        }
        var ended: [RepeatInfo] = []
        for name in matching {
            let job = repeats[name]?.job
            guard let info = end(name, as: state) else { continue }
            ended.append(info)
            if let job { _ = try? await cancel(job) }
        }
        return ended
    }

    /// The repeat of this order id as it is now, running or ended; `not_found` if it was never started (or forgotten
    /// after the history's retention).
    func repeatInfo(_ order: String) throws(AnnounceError) -> RepeatInfo {
        if let running = repeats[order] { return info(of: running) }
        if let known = try journal.repeatRecord(order) { return known.info }
        throw AnnounceError(.notFound, "no repeat \(order)")
    }

    /// Ends a repeat because its next time could not be queued.
    func failRepeat(_ order: String, _ error: AnnounceError) {
        end(order, as: .failed, error: error)
    }

    /// The repeats running now (`status`).
    var runningRepeats: [RepeatInfo] {
        repeats.values.sorted { $0.record.startedAt < $1.record.startedAt }.map(info(of:))
    }

    /// Whether any repeat is running (the replay key acknowledges it instead of replaying).
    var isRepeating: Bool { !repeats.isEmpty }

    /// The drivers' pauses end at a shutdown: the repeats stay running in the journal, and go on after the restart.
    func endPauses() {
        for (order, run) in repeats {
            repeats[order]?.pause = nil
            run.pause?.resume(returning: false)
        }
    }

    private func info(of run: RepeatRun) -> RepeatInfo {
        var info = run.record.info
        info.job = run.job
        return info
    }

    /// Records an end and tells the subscribers; the run is forgotten. Returns the repeat as it ended.
    @discardableResult
    private func end(_ order: String, as state: RepeatState, error: AnnounceError? = nil) -> RepeatInfo? {
        guard var run = repeats.removeValue(forKey: order) else { return nil }
        run.record.state = state
        run.record.endedAt = stamp().wallMs
        run.record.error = error
        keep(run.record)
        run.pause?.resume(returning: false)
        let info = run.record.info
        logger.info(
            "repeat ended",
            metadata: [
                "repeat": "\(order)", "state": "\(state.rawValue)", "played": "\(info.played)", "heard": "\(info.heard)",
                "error": "\(error.map { "\($0)" } ?? "")",
            ])
        events.publish(info)
        events.statusChanged()
        return info
    }

    /// Journals a repeat's row. A write that fails is said and not retried: the jobs carry what was heard, and after a
    /// restart a time found already spoken is counted then (its order id makes it the same job).
    private func keep(_ record: RepeatRecord) {
        do throws(AnnounceError) {
            try journal.updateRepeat(record)
        } catch {
            logger.error(
                "journal: cannot record a repeat's progress", metadata: ["repeat": "\(record.plan.order)", "error": "\(error)"])
        }
    }
}
