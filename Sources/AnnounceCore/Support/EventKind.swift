import Logging

/// The kinds of log entries an operator filters on. A log call names its kind in the metadata (`event`, see
/// ``metadata``); on standard error it shows as `event=spoken`, in the journal as the entry's `MESSAGE_ID`, a
/// 128-bit id that never changes (`journalctl MESSAGE_ID=…`; the table is in docs/deployment.md, "Logs").
/// New kinds get a new id (`systemd-id128 new`); an id is never reused for another kind.
public enum EventKind: String, Sendable, CaseIterable {
    // The daemon's life.
    case started
    case stopping
    case reloaded
    case reloadFailed = "reload-failed"
    // A job's life (the job's own fields: JOB_ID, ORDER_ID, CHANNEL, AMOUNT_FEN, STATE, ERROR_CODE).
    case accepted
    case duplicate
    case spoken
    case failed
    case expired
    case cancelled
    /// A request the peer may not make.
    case unauthorized
    // The audio.
    case volumeRaised = "volume-raised"
    case volumeRestored = "volume-restored"
    /// The owner changed the volume during an alert; their setting is kept.
    case volumeLeft = "volume-left"
    case deviceFailed = "device-failed"
    case deviceRecovered = "device-recovered"
    /// The device was given up on: every job waiting failed with it; jobs fail at once until it is back.
    case deviceMissing = "device-missing"
    // The journal (SQLite).
    case journalDamaged = "journal-damaged"
    case journalUnwritable = "journal-unwritable"
    /// The state folder or the journal file cannot be used: the journal is kept in memory.
    case journalInMemory = "journal-in-memory"
    /// Back on disk after being kept in memory.
    case journalOnDisk = "journal-on-disk"
    // The push listener.
    case pushForwarded = "push-forwarded"
    case pushRefused = "push-refused"
    case brokerConnected = "broker-connected"
    case brokerLost = "broker-lost"
    /// The system clock is not synchronised: payments it calls stale or future are held, or (after
    /// `security.clock_wait`) judged by it all the same.
    case clockUnsynchronized = "clock-unsynchronized"
    /// Another client uses the listener's MQTT client id (a cloned image).
    case identityConflict = "identity-conflict"
    // Either program.
    case metricsUnavailable = "metrics-unavailable"

    /// The journal's `MESSAGE_ID` for this kind (32 lowercase hex digits).
    public var messageID: String {
        switch self {
        case .started: "af6ec081f00240b0849a76e1085c5698"
        case .stopping: "e51f73d4eaec44daaf0e482c05f0a911"
        case .reloaded: "3c5936120fd044f592a682704107d33b"
        case .reloadFailed: "1b24bec38f7948ddb54276176f3a839d"
        case .accepted: "8d4847f24d684a26b0ca57922bf4c90f"
        case .duplicate: "09acbe75efa245bc8542e0dac3cd9e76"
        case .spoken: "6424a9c61a254be18e9f7d7a7bda3006"
        case .failed: "664f6ecd06fb45d6ace23a131858f79b"
        case .expired: "dc24c05709b0480bbdf051ad6635bba3"
        case .cancelled: "286f91bde2ef4c2f9e68a12742c2e220"
        case .unauthorized: "a30794e277fd43d0b824ab14ba275647"
        case .volumeRaised: "89eacdd8d6c84ed0ae34206ac6037539"
        case .volumeRestored: "9c03a80ff1e04389a1dd0db85f1987ec"
        case .volumeLeft: "075c8003388e4ed1a110c1fff9fee114"
        case .deviceFailed: "457cc7780aa9438da7e119518d42ce43"
        case .deviceRecovered: "26b4014c13d04f8da072fc9513819088"
        case .deviceMissing: "0414c1a246e54e3c8f2013332a4b2a41"
        case .journalDamaged: "b855a9cba2064d48aa7e69977dff050f"
        case .journalUnwritable: "d57e7062a5204e7abfe2ca97b77a937b"
        case .journalInMemory: "1c1701d2caa34d7181dcba2d7e2a051f"
        case .journalOnDisk: "d85ce03c77f84cdead51fe15df27d972"
        case .pushForwarded: "7d280f349e024e01bf289024bec4b661"
        case .pushRefused: "ba6e94aa6b6d4d839c2faea90da91fd1"
        case .brokerConnected: "82e0450e90a84f37a6f1c348e499dc44"
        case .brokerLost: "ec2a725945de4342ad50c6d3c27fa314"
        case .clockUnsynchronized: "50202b08d3c9478caf14cff3d313c484"
        case .identityConflict: "8146236296ab42aa859adf13d8ef7ccf"
        case .metricsUnavailable: "7f45611b96e0499e9364d2816311d6c4"
        }
    }

    /// The metadata key a log call names its kind with.
    public static let key = "event"

    /// `["event": "spoken"]`, to merge into a log call's metadata.
    public var metadata: Logger.Metadata { [Self.key: .string(rawValue)] }

    /// The event a job's final state is.
    public static func ended(_ state: JobState) -> EventKind {
        switch state {
        case .spoken: .spoken
        case .failed: .failed
        case .expired: .expired
        case .cancelled: .cancelled
        case .queued, .playing: .accepted
        }
    }
}

extension Logger.MetadataValue {
    /// The value of a log call's `event` key: `metadata: ["event": .event(.spoken), …]`.
    public static func event(_ kind: EventKind) -> Logger.MetadataValue { .string(kind.rawValue) }
}
