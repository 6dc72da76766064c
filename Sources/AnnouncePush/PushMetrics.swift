import AnnounceCore
import AnnounceVersion
import Prometheus
import Synchronization

/// The push listener's metrics, created once in a swift-prometheus registry. `announce-push run` serves them over
/// HTTP when `[metrics] listen` (or `--metrics-listen`) asks for it; every metric is listed in docs/push.md.
public final class PushMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    /// Every message read from the broker, payment or not.
    private let received: Counter
    private let refusedCounters = Mutex<[String: Counter]>([:])
    private let payments: [Outcome: Counter]
    /// Connections made to the broker after the first (it went away, or the listener let go while the daemon was
    /// away).
    private let reconnects: Counter
    private let connected: Gauge
    private let connections = Mutex(0)
    /// Connections the broker closed soon after accepting them (``TakeoverWatch``).
    private let takeovers: Counter
    private let conflict: Gauge
    private let clockTrusted: Gauge

    /// What became of a verified payment.
    public enum Outcome: String, Sendable, CaseIterable {
        case accepted, duplicate, refused, unavailable
        /// Left with the broker: the clock called it stale or future and cannot be trusted yet (``ClockWatch``).
        case heldForClock = "held_for_clock"
    }

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        received = registry.counter(
            "announce_push_messages_received_total", help: "Messages received from the broker since start.")
        var payments: [Outcome: Counter] = [:]
        for outcome in Outcome.allCases {
            payments[outcome] = registry.counter(
                "announce_push_payments_total", [("outcome", outcome.rawValue)],
                help: "Verified payments handed to the daemon, by its answer (unavailable, held_for_clock: left for "
                    + "redelivery).")
        }
        self.payments = payments
        reconnects = registry.counter(
            "announce_push_broker_reconnects_total", help: "Connections to the broker after the first.")
        connected = registry.gauge(
            "announce_push_broker_connected", help: "1 while connected to the broker, else 0.")
        takeovers = registry.counter(
            "announce_push_broker_takeovers_total",
            help: "Connections the broker closed soon after accepting them (another client with this client id?).")
        conflict = registry.gauge(
            "announce_push_identity_conflict", help: "1 while another client is believed to use this client id.")
        clockTrusted = registry.gauge(
            "announce_push_clock_trusted",
            help: "1 while the system clock is trusted to judge a payment's age (synchronised, or trusted as it is).")
        registry.gauge(
                "announce_build_info", [("version", BuildInfo.version), ("commit", BuildInfo.commit)],
                help: "The build running: always 1."
        ).set(to: 1)
    }

    func messageReceived() { received.increment() }

    /// A message refused before reaching the daemon: `reason` is the error code (`bad_signature`, `stale`,
    /// `malformed`, …).
    func messageRefused(reason: AnnounceError.Code) {
        let counter = refusedCounters.withLock { counters in
            if let counter = counters[reason.rawValue] { return counter }
            let counter = registry.counter(
                "announce_push_messages_refused_total", [("reason", reason.rawValue)],
                help: "Messages refused (never spoken), by reason.")
            counters[reason.rawValue] = counter
            return counter
        }
        counter.increment()
    }

    func payment(_ outcome: Outcome) { payments[outcome]?.increment() }

    func brokerConnected() {
        let again = connections.withLock { count in
            count += 1
            return count > 1
        }
        if again { reconnects.increment() }
        connected.set(to: 1)
    }

    func brokerDisconnected() { connected.set(to: 0) }

    func takenOver() { takeovers.increment() }

    func identityConflict(_ present: Bool) { conflict.set(to: present ? 1 : 0) }

    func clock(_ state: ClockWatch.State) {
        clockTrusted.set(to: state.isTrusted ? 1 : 0)
    }

    /// The Prometheus text exposition.
    public func exposition() -> String { registry.emitToString() }
}

extension PrometheusCollectorRegistry {
    /// Makes (or finds) the metric `name` (the whole name) with its help text.
    fileprivate func counter(_ name: String, _ labels: [(String, String)] = [], help: String) -> Counter {
        makeCounter(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }

    fileprivate func gauge(_ name: String, _ labels: [(String, String)] = [], help: String) -> Gauge {
        makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }
}
