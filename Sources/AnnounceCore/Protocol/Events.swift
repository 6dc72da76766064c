/// The events of a `subscribe` (docs/protocol.md, "Subscribing to final states"): each is a reply line with
/// `done: false` and `event` set to one of these.
public enum SubscriptionEvent: String, Sendable, Codable, CaseIterable {
    /// A job's final state is on disk (`job`): spoken, failed, expired or cancelled. Once per job, live or replayed.
    case final
    /// The replay asked for with `since` is over and live events follow; `jobs` lists the jobs above `since`
    /// that are not final yet (their `final` comes later). Sent first when there is no `since`.
    case live
    /// Something `status` reports has changed (a job accepted, the audio device failed or came back, the volume
    /// threshold set): ask `status` if it matters. Coalesced: one stands for any number of changes.
    case status
    /// A repeating notice ended (`repeat`): said its times, stopped, acknowledged by the shop, or failed. Live only:
    /// `since` replays jobs, not repeats.
    case repeatEnded = "repeat"
}

extension AnnounceError.Code {
    /// A subscriber that did not read its events fast enough: its buffer overflowed and the subscription ended.
    /// Nothing was lost for a subscriber that resubscribes with `since`.
    public static let lagged = AnnounceError.Code(rawValue: "lagged")
}
