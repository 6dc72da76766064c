import AnnounceCore
import AnnounceJournal
import AnnounceVersion
import Prometheus
import Synchronization

/// The daemon's metrics, created once at setup in a swift-prometheus registry and read in the Prometheus text
/// format: over HTTP when `[metrics] listen` is set (``AnnounceTelemetry/MetricsEndpoint``), and with the
/// `metrics` operation (`announce-ctl metrics`). Every metric is listed in docs/configuration.md ("Metrics").
///
/// Jobs are counted as they end on disk (`JobLifecycle`'s `onFinal`); payments also from the journal at start, so
/// their totals survive restarts. The audio engine's counters are read when the text is built
/// (``Player/health()``: counts under short locks, no device or mixer I/O) and added as they grew.
/// The same job counts since start are kept for `status` (``DaemonStatus/Totals``).
final class DaemonMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let accepted: [JobPriority: Counter]
    private let finished: [JobState: Counter]
    private let refusedCounters = Mutex<[String: Counter]>([:])
    private let duplicates: Counter
    private let waiting: [JobPriority: Gauge]
    private let clients: Gauge
    private let firstSample: DurationHistogram
    private let journalCommit: DurationHistogram
    /// Last sample out of the device → the job on disk as spoken: the window in which a crash would replay it.
    private let heardRecord: DurationHistogram
    private let payments: [JobState: Counter]
    /// Fen announced as spoken payments, and as spoken refunds.
    private let paymentFen: Counter
    private let refundFen: Counter
    private let uptime: Gauge
    private let audio: AudioCounters
    private let totals = Mutex(DaemonStatus.Totals())

    /// First-sample latency buckets: a healthy terminal is in the first few, a loaded one in the tens of ms.
    static let firstSampleBuckets: [Duration] = [1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500].map {
        .milliseconds($0)
    }
    static let journalBuckets: [Duration] = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000].map {
        .microseconds(Int64($0 * 1000))
    }

    /// `paymentTotals`: what the journal holds from earlier runs (``Journal/paymentTotals()``).
    init(registry: PrometheusCollectorRegistry?, paymentTotals: Journal.PaymentTotals = .init()) {
        let registry = registry ?? PrometheusCollectorRegistry()
        self.registry = registry
        var accepted: [JobPriority: Counter] = [:]
        var waiting: [JobPriority: Gauge] = [:]
        for priority in JobPriority.allCases {
            accepted[priority] = registry.counter(
                "announce_jobs_accepted_total", [("priority", priority.rawValue)],
                help: "Jobs accepted (journaled) since start, by priority class.")
            waiting[priority] = registry.gauge(
                "announce_queue_waiting", [("priority", priority.rawValue)],
                help: "Jobs waiting in the queue now, by priority class.")
        }
        self.accepted = accepted
        self.waiting = waiting
        var finished: [JobState: Counter] = [:]
        var payments: [JobState: Counter] = [:]
        for state in JobState.allCases where state.isFinal {
            finished[state] = registry.counter(
                "announce_jobs_finished_total", [("state", state.rawValue)],
                help: "Jobs ended since start, by final state (on disk).")
            let counter = registry.counter(
                "announce_payments_total", [("state", state.rawValue)],
                help: "Payments (say jobs, not replays) ended, by final state, as far back as the journal goes "
                    + "(kept across restarts).")
            counter.increment(by: Int64(paymentTotals.byState[state.rawValue] ?? 0))
            payments[state] = counter
        }
        self.finished = finished
        self.payments = payments
        paymentFen = registry.counter(
                "announce_payments_spoken_fen_total", [("kind", "payment")],
                help: "The amounts of payments heard, in fen, as far back as the journal goes (kept across restarts).")
        refundFen = registry.counter(
                "announce_payments_spoken_fen_total", [("kind", "refund")],
                help: "The amounts of payments heard, in fen, as far back as the journal goes (kept across restarts).")
        paymentFen.increment(by: paymentTotals.spokenFen)
        refundFen.increment(by: paymentTotals.refundedFen)
        duplicates = registry.counter(
            "announce_duplicates_total", help: "Requests answered duplicate (an order id seen before).")
        clients = registry.gauge("announce_clients", help: "Socket connections open now.")
        firstSample = registry.histogram(
            "announce_first_sample_seconds", buckets: Self.firstSampleBuckets,
            help: "Request received to the announcement's first sample handed to ALSA (after any lead-in).")
        journalCommit = registry.histogram(
            "announce_journal_commit_seconds", buckets: Self.journalBuckets,
            help: "The journal commit (fsync) before each accepted reply.")
        heardRecord = registry.histogram(
            "announce_heard_record_seconds", buckets: Self.journalBuckets,
            help: "Last sample out of the device to the job recorded spoken: the window for a repeat after a crash.")
        uptime = registry.gauge("announce_uptime_seconds", help: "Seconds since the daemon started.")
        registry.gauge(
                "announce_build_info", [("version", BuildInfo.version), ("commit", BuildInfo.commit)],
                help: "The build running: always 1."
        ).set(to: 1)
        audio = AudioCounters(registry: registry)
    }

    func jobAccepted(_ priority: JobPriority, journalNanos: UInt64) {
        accepted[priority]?.increment()
        journalCommit.recordNanoseconds(Int64(journalNanos))
        totals.withLock { $0.accepted += 1 }
    }

    /// A job's final state is on disk.
    func jobFinished(_ info: JobInfo, firstSampleNanos: UInt64?) {
        finished[info.state]?.increment()
        if let firstSampleNanos { firstSample.recordNanoseconds(Int64(firstSampleNanos)) }
        if let amount = info.amount, info.replayOf == nil {
            payments[info.state]?.increment()
            if info.state == .spoken, let fen = try? Amount(parsing: amount).fen {
                (info.refund == true ? refundFen : paymentFen).increment(by: fen)
            }
        }
        totals.withLock { $0.finished[info.state.rawValue, default: 0] += 1 }
    }

    func heardRecorded(windowNanos: UInt64) {
        heardRecord.recordNanoseconds(Int64(windowNanos))
    }

    func refused(_ code: AnnounceError.Code) {
        if code == .duplicate { duplicates.increment() }
        let counter = refusedCounters.withLock { counters in
            if let counter = counters[code.rawValue] { return counter }
            let counter = registry.counter(
                "announce_requests_refused_total", [("code", code.rawValue)],
                help: "Requests refused since start, by error code.")
            counters[code.rawValue] = counter
            return counter
        }
        counter.increment()
        totals.withLock { $0.refused[code.rawValue, default: 0] += 1 }
    }

    /// The queue now: waiting jobs per priority class.
    func queueDepth(_ byPriority: [JobPriority: Int]) {
        for (priority, gauge) in waiting { gauge.set(to: Double(byPriority[priority] ?? 0)) }
    }

    func clientCount(_ count: Int) { clients.set(to: Double(count)) }

    var currentTotals: DaemonStatus.Totals { totals.withLock { $0 } }

    /// The Prometheus text exposition of every metric, the audio engine's counters and the uptime brought up to
    /// date first.
    func exposition(health: AudioHealth, uptimeSeconds: Double) -> String {
        audio.update(health)
        uptime.set(to: uptimeSeconds)
        return registry.emitToString()
    }
}

/// The audio engine's counters as Prometheus counters: the engine keeps running totals, which are added here
/// as they grew since the last look.
private final class AudioCounters: Sendable {
    private struct Seen {
        var xruns = 0, suspends = 0, opens = 0, failures = 0, recoveries = 0, givenUp = 0
        var raises = 0, restores = 0, overrides = 0
        var ducks: [String: (counter: Counter, seen: Int)] = [:]
    }

    private let registry: PrometheusCollectorRegistry
    private let xruns, suspends, opens, failures, recoveries, givenUp: Counter
    private let raises, restores, overrides: Counter
    private let states: [(AudioEngineStatus.DeviceState, Gauge)]
    private let seen = Mutex(Seen())

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        func counter(_ name: String, _ help: String) -> Counter { registry.counter(name, help: help) }
        xruns = counter("announce_audio_xruns_total", "ALSA underruns recovered in place since start.")
        suspends = counter("announce_audio_suspends_total", "ALSA suspends (system sleep) recovered since start.")
        opens = counter("announce_audio_pcm_opens_total", "Times the PCM was opened since start.")
        failures = counter(
            "announce_audio_device_failures_total", "Device failures (device closed and retried) since start.")
        recoveries = counter(
            "announce_audio_device_recoveries_total", "Times the device worked again after failing, since start.")
        givenUp = counter(
            "announce_audio_jobs_given_up_total", "Jobs failed because the device stayed away too long.")
        raises = counter("announce_volume_raises_total", "Alerts that raised the mixer to the threshold.")
        restores = counter("announce_volume_restores_total", "Raised volumes put back after the alert.")
        overrides = counter(
            "announce_volume_user_overrides_total", "Raised volumes the owner changed meanwhile (left as they set).")
        states = [.idle, .open, .playing, .recovering, .missing].map { state in
            (
                state,
                registry.gauge(
                "announce_audio_device_state", [("state", state.rawValue)],
                help: "The audio device's state now: 1 for the current one.")
            )
        }
    }

    func update(_ health: AudioHealth) {
        seen.withLock { seen in
            func add(_ counter: Counter, _ now: Int, _ before: inout Int) {
                if now > before { counter.increment(by: Int64(now - before)) }
                before = max(before, now)
            }
            add(xruns, health.xruns, &seen.xruns)
            add(suspends, health.suspends, &seen.suspends)
            add(opens, health.opens, &seen.opens)
            add(failures, health.deviceFailures, &seen.failures)
            add(recoveries, health.recoveries, &seen.recoveries)
            add(givenUp, health.jobsGivenUp, &seen.givenUp)
            add(raises, health.volumeRaises, &seen.raises)
            add(restores, health.volumeRestores, &seen.restores)
            add(overrides, health.volumeUserOverrides, &seen.overrides)
            for (control, count) in health.ducks {
                var entry =
                    seen.ducks[control]
                    ?? (
                        registry.counter(
                "announce_duck_engagements_total", [("control", control)],
                help: "Bursts that lowered this control (ducking) since start."), 0
                    )
                add(entry.counter, count, &entry.seen)
                seen.ducks[control] = entry
            }
        }
        for (state, gauge) in states { gauge.set(to: state == health.state ? 1 : 0) }
    }
}

extension PrometheusCollectorRegistry {
    /// Makes (or finds) the metric `name` (the whole name) with its help text.
    fileprivate func counter(_ name: String, _ labels: [(String, String)] = [], help: String) -> Counter {
        makeCounter(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }

    fileprivate func gauge(_ name: String, _ labels: [(String, String)] = [], help: String) -> Gauge {
        makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }

    fileprivate func histogram(_ name: String, buckets: [Duration], help: String) -> DurationHistogram {
        makeDurationHistogram(
            descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), buckets: buckets)
    }
}
