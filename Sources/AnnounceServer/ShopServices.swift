import AnnounceCore
import AnnounceInput
import Logging
import Synchronization

/// What the shop touches and hears beside the socket (docs/configuration.md): the hardware keys, the day's total
/// spoken at its set time, and the everyday volume level kept across restarts. Started once the daemon serves its
/// socket and plays, stopped after the daemon has stopped.
///
/// Key presses become daemon operations here, on a thread of their own (`SerialThread`) (mixer and journal I/O block; they
/// must hold up neither the key reader's thread nor Swift's cooperative pool), one after another in the order
/// pressed. What a key says is a job like any other: the new volume level is a status prompt (after the payments
/// waiting; a newer one replaces one still waiting, so a held key does not queue ten prompts), a replay and the
/// day's total queue behind the payments waiting; while a notice repeats, the replay key acknowledges it (the
/// repeat stops) instead. No key interrupts a payment playing — except mute, which
/// follows `audio.mute_policy`.
final class ShopServices: Sendable {
    private let daemon: Daemon
    private let keys: KeysConfiguration
    private let monitor: InputMonitor?
    private let actions = SerialThread(name: "announce-action")
    private let schedule = Mutex<Task<Void, Never>?>(nil)

    init(daemon: Daemon) {
        self.daemon = daemon
        keys = daemon.configuration.keys
        guard keys.enabled else {
            monitor = nil
            return
        }
        let queue = actions
        let step = keys.volumeStep
        monitor = InputMonitor(specs: keys.devices, bindings: keys.bindings, logger: daemon.logger) { action in
            queue.submit { Self.perform(action, daemon: daemon, step: step) }
        }
    }

    func start() {
        let daemon = self.daemon
        actions.submit {
            daemon.restoreEverydayLevel()
            daemon.keepEverydayLevel()
        }
        monitor?.start()
        schedule.withLock { $0 = Task { await Self.speakDailyTotals(daemon) } }
    }

    /// Stops the keys and the schedule, and keeps the level the mixer holds now (threads join and the mixer is
    /// read off Swift's cooperative pool).
    func stop() async {
        schedule.withLock { $0?.cancel() }
        let (monitor, actions, daemon) = (self.monitor, self.actions, self.daemon)
        _ = try? await offThePool {
            monitor?.stop()
            actions.sync { daemon.recordEverydayLevel() }
        }
    }

    // MARK: Keys

    /// Does what a key asks; a failure is logged (a key has nobody to answer to) and changes nothing else. Every
    /// action ends with one `key done` line in the log (after the job it makes is queued).
    static func perform(_ action: KeyAction, daemon: Daemon, step: Int) {
        let logger = daemon.logger
        var metadata: Logger.Metadata = ["key": "\(action)"]
        do throws(AnnounceError) {
            switch action {
            case .volumeUp, .volumeDown:
                let level = try daemon.stepVolumeLevel(up: action == .volumeUp, step: step)
                metadata["level"] = "\(level)%"
                metadata["job.id"] = "\(try prompt(VolumeSteps.prompt(percent: level), daemon))"
            case .mute:
                let muted = try daemon.toggleMute()
                metadata["muted"] = "\(muted)"
                if !muted { metadata["job.id"] = "\(try prompt("unmuted", daemon))" }
            case .replay:
                // While a notice repeats, the key acknowledges it: the repeat stops (the fleet is told), nothing
                // is replayed.
                let acknowledged = try awaiting { () async throws(AnnounceError) in
                    await daemon.jobs.isRepeating ? try await daemon.stopRepeats(nil, state: .acknowledged) : []
                }
                if !acknowledged.isEmpty {
                    metadata["acknowledged"] = "\(acknowledged.map(\.order))"
                    break
                }
                let submission = try awaiting { () async throws(AnnounceError) in
                    try await daemon.replay(job: nil, priority: .payment, ttlMs: nil, wait: false)
                }
                if case .accepted(let job) = submission {
                    metadata["job.id"] = "\(job.id)"
                    metadata["replay_of"] = "\(job.replayOf ?? 0)"
                }
            case .today:
                let summary = try awaiting { () async throws(AnnounceError) in try await daemon.daySummary(.today) }
                let submission = try awaiting { () async throws(AnnounceError) in
                    try await daemon.sayDaySummary(
                        summary, template: JobRequest(utterance: .summary(DayTotals()), priority: .payment))
                }
                if case .accepted(let job) = submission {
                    metadata["job.id"] = "\(job.id)"
                    metadata["text"] = "\(job.text ?? "")"
                }
            }
            logger.notice("key done", metadata: metadata)
        } catch {
            metadata["error"] = "\(error)"
            logger.warning("key done, with nothing to show for it", metadata: metadata)
        }
    }

    /// Queues a status prompt in the default voice pack; returns its job id.
    private static func prompt(_ name: String, _ daemon: Daemon) throws(AnnounceError) -> UInt64 {
        let submission = try awaiting { () async throws(AnnounceError) in
            try await daemon.submit(JobRequest(utterance: .prompt(name: name), priority: .status))
        }
        switch submission {
        case .accepted(let job), .duplicate(let job): return job.id
        }
    }

    /// Runs async daemon work from the keys' actions thread and waits for it: that thread is its own (not one of
    /// Swift's cooperative threads), so waiting here blocks nothing else, and keeps the presses in order.
    private static func awaiting<T: Sendable>(
        _ work: @escaping @Sendable () async throws(AnnounceError) -> T
    ) throws(AnnounceError) -> T {
        let outcome = ConditionLock<Result<T, AnnounceError>?>(nil)
        Task {
            let result: Result<T, AnnounceError>
            do throws(AnnounceError) { result = .success(try await work()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            outcome.broadcast()
        }
        return try outcome.withLock(when: { $0 != nil }) { $0! }.get()
    }

    // MARK: The day's total at its time

    /// Speaks the day's total every day at `summary.say_at` (a reload changes the time from the next one on).
    /// Waits in steps of at most a minute: the wall clock may be set (NTP) or the time changed meanwhile.
    private static func speakDailyTotals(_ daemon: Daemon) async {
        var aimedAt: DailyTime?
        var target: Int64?
        while !Task.isCancelled {
            let time = daemon.limits.summaryTime
            let now = WallClock.nowMs
            if time != aimedAt {
                aimedAt = time
                target = time.map { LocalDay.next(hour: $0.hour, minute: $0.minute, after: now) }
            }
            guard let due = target else {
                try? await Task.sleep(for: .seconds(60))
                continue
            }
            if now < due {
                try? await Task.sleep(for: .milliseconds(min(due - now, 60_000)))
                continue
            }
            target = aimedAt.map { LocalDay.next(hour: $0.hour, minute: $0.minute, after: now) }
            // A terminal that slept through the time (suspended, clock set forward) says nothing stale.
            guard now - due < 10 * 60_000 else { continue }
            do throws(AnnounceError) {
                let day = LocalDay(containing: due)
                let summary = try await daemon.daySummary(day)
                let submission = try await daemon.sayDaySummary(
                    summary, template: JobRequest(utterance: .summary(DayTotals()), priority: .payment))
                if case .accepted(let job) = submission {
                    daemon.logger.notice(
                        "the day's total, at summary.say_at",
                        metadata: ["job.id": "\(job.id)", "date": "\(summary.date)", "text": "\(job.text ?? "")"])
                }
            } catch {
                daemon.logger.warning("cannot speak the day's total", metadata: ["error": "\(error)"])
            }
        }
    }
}
