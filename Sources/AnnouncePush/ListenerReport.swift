import AnnounceCore
import Synchronization

/// What the listener knows of itself that the fleet should see (docs/fleet.md, "Status"): which run of it this is,
/// whether its clock is trusted, whether another client uses its client id, and the messages it refused. Changed on
/// the MQTT thread; read by the status reporter's thread and for the last will.
public final class ListenerReport: Sendable {
    /// What goes into the status.
    public struct Facts: Sendable, Equatable {
        public var instance: String
        public var conflict: Bool
        public var clock: ClockWatch.State
        public var clockSource: String
        public var refused: [String: Int]
    }

    private struct State {
        var conflict = false
        var refused: [String: Int] = [:]
        /// The pushed clips changed since the platform's properties were last posted (true at start: post once).
        var propertiesDue = true
    }

    /// A random id drawn when announce-push starts (16 hex digits): two of them alternating on one device's status
    /// topic are two terminals with its identity.
    public let instance: String
    public let clock: ClockWatch
    private let state = Mutex(State())

    public init(clock: ClockWatch, instance: String = ListenerReport.newInstance()) {
        self.clock = clock
        self.instance = instance
    }

    public static func newInstance() -> String {
        let digits = String(UInt64.random(in: .min ... .max), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// Another client uses this client id (true), or no longer (false).
    func identityConflict(_ conflict: Bool) { state.withLock { $0.conflict = conflict } }

    /// A message refused, for `reason`.
    func refused(_ reason: AnnounceError.Code) { state.withLock { $0.refused[reason.rawValue, default: 0] += 1 } }

    /// A corpus push finished: what the pushed clips are changed (the platform's properties are posted again).
    func corpusChanged() { state.withLock { $0.propertiesDue = true } }

    /// Whether the properties are to be posted; a true answer is given once per change.
    func takePropertiesDue() -> Bool {
        state.withLock { state in
            defer { state.propertiesDue = false }
            return state.propertiesDue
        }
    }

    /// The next connection posts the properties again (the platform keeps none across a connection it lost).
    func propertiesDueAgain() { state.withLock { $0.propertiesDue = true } }

    public var facts: Facts {
        let (conflict, refused) = state.withLock { ($0.conflict, $0.refused) }
        return Facts(
            instance: instance, conflict: conflict, clock: clock.state, clockSource: clock.source.name,
            refused: refused)
    }
}
