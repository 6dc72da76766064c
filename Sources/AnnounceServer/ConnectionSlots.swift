import AnnounceCore
import Synchronization

/// The daemon's connections at once, `limits.max_clients`, of which `limits.reserved_clients` are kept for peers
/// that may speak (`submit` or `control` access): peers that may only read hold at most the rest. With the socket
/// open to everyone (mode 0666), a local user holding every connection idle would otherwise delay every payment
/// (and the push listener) for as long as it held them. Admission is one step under a lock, so a burst of
/// refused connections never takes a slot, even for a moment.
final class ConnectionSlots: Sendable {
    private let counts = Mutex<(all: Int, readers: Int)>((0, 0))

    /// Why a connection was refused.
    enum Refusal: Error {
        /// Every connection is in use.
        case full(maximum: Int)
        /// The connections readers may use are in use; the rest are kept for peers that may speak.
        case readersFull(maximum: Int, reserved: Int)

        var error: AnnounceError {
            switch self {
            case let .full(maximum):
                AnnounceError(
                    .busy, "the daemon serves \(maximum) connections at once (limits.max_clients); try again")
            case let .readersFull(maximum, reserved):
                AnnounceError(
                    .busy,
                    "the daemon serves \(maximum - reserved) connections at once to peers that may only read; "
                        + "\(reserved) of its \(maximum) are kept for peers that may speak "
                        + "(limits.reserved_clients); try again")
            }
        }
    }

    /// Takes a slot for a peer that may speak (`speaker`) or only read, or says why not. Returns the connections
    /// in use with it.
    func admit(speaker: Bool, maximum: Int, reserved: Int) throws(Refusal) -> Int {
        try counts.withLock { (counts: inout (all: Int, readers: Int)) throws(Refusal) -> Int in
            guard counts.all < maximum else { throw .full(maximum: maximum) }
            if !speaker {
                guard counts.readers < maximum - reserved else {
                    throw .readersFull(maximum: maximum, reserved: reserved)
                }
                counts.readers += 1
            }
            counts.all += 1
            return counts.all
        }
    }

    /// Gives back the slot `admit` gave. Returns the connections still in use.
    func release(speaker: Bool) -> Int {
        counts.withLock { counts in
            if !speaker { counts.readers -= 1 }
            counts.all -= 1
            return counts.all
        }
    }
}
