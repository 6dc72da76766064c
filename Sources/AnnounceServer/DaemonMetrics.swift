import AnnounceCore
import CoreMetrics
import Metrics
import Prometheus
import Synchronization

/// The daemon's metrics (swift-metrics), created once at setup. With the Prometheus backend that `announced`
/// bootstraps they are read with the `metrics` operation (`announce-ctl metrics`), in the Prometheus text
/// format — ready for node_exporter's textfile collector or a scrape through a small bridge.
/// The same counts are kept for `status` (``DaemonStatus/Totals``) whatever the backend.
final class DaemonMetrics: Sendable {
    private let accepted: [JobPriority: CoreMetrics.Counter]
    private let finished: [JobState: CoreMetrics.Counter]
    private let refusedCounters = Mutex<[String: CoreMetrics.Counter]>([:])
    private let duplicates = CoreMetrics.Counter(label: "announce_duplicates_total")
    private let queueWaiting = CoreMetrics.Gauge(label: "announce_queue_waiting")
    private let clients = CoreMetrics.Gauge(label: "announce_clients")
    private let firstSample = Metrics.Timer(label: "announce_first_sample_seconds")
    private let journalCommit = Metrics.Timer(label: "announce_journal_commit_seconds")
    /// Last sample out of the device → the job on disk as spoken: the window in which a crash would replay it.
    private let heardRecord = Metrics.Timer(label: "announce_heard_record_seconds")
    private let totals = Mutex(DaemonStatus.Totals())
    /// The registry `metrics` reads, if the Prometheus backend is in use.
    let registry: PrometheusCollectorRegistry?

    init(registry: PrometheusCollectorRegistry?) {
        self.registry = registry
        var accepted: [JobPriority: CoreMetrics.Counter] = [:]
        for priority in JobPriority.allCases {
            accepted[priority] = CoreMetrics.Counter(
                label: "announce_jobs_accepted_total", dimensions: [("priority", priority.rawValue)])
        }
        self.accepted = accepted
        var finished: [JobState: CoreMetrics.Counter] = [:]
        for state in JobState.allCases where state.isFinal {
            finished[state] = CoreMetrics.Counter(
                label: "announce_jobs_finished_total", dimensions: [("state", state.rawValue)])
        }
        self.finished = finished
    }

    func jobAccepted(_ priority: JobPriority, journalNanos: UInt64) {
        accepted[priority]?.increment()
        journalCommit.recordNanoseconds(Int64(journalNanos))
        totals.withLock { $0.accepted += 1 }
    }

    func jobFinished(_ state: JobState, firstSampleNanos: UInt64?) {
        finished[state]?.increment()
        if let firstSampleNanos { firstSample.recordNanoseconds(Int64(firstSampleNanos)) }
        totals.withLock { $0.finished[state.rawValue, default: 0] += 1 }
    }

    func heardRecorded(windowNanos: UInt64) {
        heardRecord.recordNanoseconds(Int64(windowNanos))
    }

    func refused(_ code: AnnounceError.Code) {
        if code == .duplicate { duplicates.increment() }
        let counter = refusedCounters.withLock { counters in
            if let counter = counters[code.rawValue] { return counter }
            let counter = CoreMetrics.Counter(
                label: "announce_requests_refused_total", dimensions: [("code", code.rawValue)])
            counters[code.rawValue] = counter
            return counter
        }
        counter.increment()
        totals.withLock { $0.refused[code.rawValue, default: 0] += 1 }
    }

    func queueDepth(_ waiting: Int) { queueWaiting.record(waiting) }
    func clientCount(_ count: Int) { clients.record(count) }

    var currentTotals: DaemonStatus.Totals { totals.withLock { $0 } }

    /// The Prometheus text exposition of every metric, or nil without the Prometheus backend.
    func exposition() -> String? {
        registry?.emitToString()
    }
}
