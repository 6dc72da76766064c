import AnnounceCore
import CTimex
#if canImport(Glibc)
import Glibc
#endif

extension ClockSync {
    /// Whether the wall clock can be trusted now (the daemon and the push listener ask before they record or judge
    /// a time; docs/protocol.md, "Time", and docs/push.md, "The clock").
    public var isSynchronized: Bool { read().synchronized }

    /// What the source says now, and in words (for the log).
    public func read() -> (synchronized: Bool, detail: String) {
        switch self {
        case .trust:
            return (true, "trusted as it is (clock_sync = \"trust\")")
        case .file(let path):
            return access(path, F_OK) == 0 ? (true, "\(path) exists") : (false, "no \(path) yet")
        case .kernel:
            // adjtimex with no modes only reads.
            var kernel = timex()
            guard adjtimex(&kernel) >= 0 else {
                let reason = String(cString: strerror(errno))
                let flag = access(Self.timesyncFlag, F_OK) == 0
                return (
                    flag,
                    "adjtimex refused (\(reason)); \(Self.timesyncFlag) \(flag ? "exists" : "does not exist")"
                )
            }
            let synchronized = kernel.maxerror < Self.kernelMaximumErrorMicros
            return (synchronized, "the kernel's maximum error is \(cFormat("%.3f", Double(kernel.maxerror) / 1e6)) s")
        }
    }

    /// The kernel's maximum error at and above which the clock counts as not synchronised (systemd's `ntp_synced`):
    /// the most it ever says, where it stays while nothing disciplines the clock.
    static let kernelMaximumErrorMicros = 16_000_000
}

extension ClockStamp {
    /// Now, by the system's clocks, trusted as `sync` says.
    public static func now(sync: ClockSync) -> ClockStamp { now(trusted: sync.isSynchronized) }
}
