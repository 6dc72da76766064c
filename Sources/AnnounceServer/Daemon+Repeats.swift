import AnnounceCore
import Logging

/// Repeating notices (docs/protocol.md, "Repeating notices"): each repeat is driven by one task that says it as a
/// job of class `notice`, waits for that job's end, and pauses before the next time; its state is the job
/// lifecycle's (``JobLifecycle``), journaled there.
extension Daemon {
    /// Starts a repeat, or returns the one of its order id (`started` false). Refused before anything is recorded
    /// if what it says cannot be composed (a clip neither pushed nor in the pack: `missing_clip`).
    public func startRepeat(_ plan: RepeatPlan) async throws(AnnounceError) -> (RepeatInfo, started: Bool) {
        let (_, announcement) = try compose(plan.occurrence(1))
        let (info, started) = try await jobs.beginRepeat(plan, text: announcement.text)
        if started { drive(plan.order) }
        return (info, started)
    }

    /// Stops the repeat `order` (nil: every one running) as `state`; returns the repeats ended.
    public func stopRepeats(_ order: String?, state: RepeatState) async throws(AnnounceError) -> [RepeatInfo] {
        try await jobs.stopRepeats(order, state: state)
    }

    /// Drives every repeat the journal had running (at start: they go on where they were).
    func resumeRepeats() {
        Task {
            for info in await jobs.runningRepeats {
                logger.notice(
                    "repeat goes on after the restart",
                    metadata: ["repeat": "\(info.order)", "played": "\(info.played)", "times": "\(info.times)"])
                drive(info.order)
            }
        }
    }

    private func drive(_ order: String) {
        Task { await driveRepeat(order) }
    }

    /// Says the repeat time after time until it ends: each time a job (the same job again if it was queued before a
    /// restart: its order id names the time), its end counted, then the pause.
    private func driveRepeat(_ order: String) async {
        while let (time, plan) = await jobs.nextTime(of: order) {
            var request = plan.occurrence(time)
            limits.reading.apply(to: &request)
            let job: JobInfo
            do throws(AnnounceError) {
                switch try await submit(request) {
                case .accepted(let info), .duplicate(let info): job = info
                }
            } catch {
                // Stopping: the repeat stays running in the journal for the next start.
                if error.code == .shuttingDown { return }
                // A queue full of payments, a disk that is full for now: the same time again after the pause.
                if error.code == .queueFull || error.code == .journal {
                    logger.warning(
                        "repeat: its next time cannot be queued now; tried again after the pause",
                        metadata: ["repeat": "\(order)", "time": "\(time)", "error": "\(error)"])
                    guard await jobs.pauseBeforeNext(order, ms: plan.everyMs) else { return }
                    continue
                }
                logger.warning(
                    "repeat: its next time cannot be queued; it ends failed",
                    metadata: ["repeat": "\(order)", "time": "\(time)", "error": "\(error)"])
                await jobs.failRepeat(order, error)
                return
            }
            await jobs.bind(order, job: job.id)
            guard let ended = await waitUntilFinished(job.id), ended.state.isFinal else { return }
            switch await jobs.timeEnded(of: order, time: time, info: ended) {
            case .ended: return
            case .again(let afterMs):
                guard await jobs.pauseBeforeNext(order, ms: afterMs) else { return }
            }
        }
    }
}
