/// The one error type of the domain: a stable machine-readable `code` (returned on the socket protocol and
/// mapped to exit codes by `announce-ctl`), a human message, and an optional underlying cause.
public struct AnnounceError: Error, Sendable, CustomStringConvertible, Equatable {
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let invalidAmount = Code(rawValue: "invalid_amount")
        public static let badRequest = Code(rawValue: "bad_request")
        public static let queueFull = Code(rawValue: "queue_full")
        public static let duplicate = Code(rawValue: "duplicate")
        public static let expired = Code(rawValue: "expired")
        public static let unauthorized = Code(rawValue: "unauthorized")
        public static let notFound = Code(rawValue: "not_found")
        public static let unknownChannel = Code(rawValue: "unknown_channel")
        public static let unknownLanguage = Code(rawValue: "unknown_language")
        public static let missingClip = Code(rawValue: "missing_clip")
        public static let synthesisFailed = Code(rawValue: "synthesis_failed")
        public static let badVoicePack = Code(rawValue: "bad_voice_pack")
        public static let audioDevice = Code(rawValue: "audio_device")
        /// The mixer (volume/mute/duck controls) cannot be opened, read or set.
        public static let mixer = Code(rawValue: "mixer")
        /// The output is muted and the mute policy is `respect`: the announcement was not played.
        public static let muted = Code(rawValue: "muted")
        /// A setting (flag or config file) cannot be used.
        public static let badConfiguration = Code(rawValue: "bad_configuration")
        public static let cancelled = Code(rawValue: "cancelled")
        public static let shuttingDown = Code(rawValue: "shutting_down")
        /// A job that was playing when the daemon died; not spoken again (at most once), see docs/protocol.md.
        public static let interrupted = Code(rawValue: "interrupted")
        /// A waiting status prompt replaced by a newer one ("last one wins").
        public static let superseded = Code(rawValue: "superseded")
        /// The daemon has as many clients as it accepts; try again.
        public static let busy = Code(rawValue: "busy")
        /// A client that sent part of a request and then stalled, or did not read its replies.
        public static let timeout = Code(rawValue: "timeout")
        /// The journal (SQLite) could not record the job; nothing was accepted.
        public static let journal = Code(rawValue: "journal")
        public static let internalError = Code(rawValue: "internal")
    }

    public var code: Code
    public var message: String
    public var cause: String?

    public init(_ code: Code, _ message: String, cause: String? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    public var description: String {
        if let cause { return "\(code): \(message) (\(cause))" }
        return "\(code): \(message)"
    }
}
