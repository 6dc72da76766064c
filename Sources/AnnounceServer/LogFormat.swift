#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import AnnounceCore
import Logging
import Synchronization

/// swift-log output for a daemon: one line per record on standard error, `key=value` metadata sorted by key.
/// Under systemd (stderr is the journal: `$JOURNAL_STREAM` names it) each line starts with the syslog
/// priority as `<N>` (sd-daemon(3)), which journald turns into the entry's priority, and carries no
/// timestamp (journald adds its own). Elsewhere lines start with an ISO 8601 time and the level.
public struct DaemonLogHandler: LogHandler {
    /// The level of every handler, changeable at run time (config reload).
    private static let sharedLevel = Atomic<UInt8>(2)
    private static let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]

    public static var level: Logger.Level {
        get { levels[Int(sharedLevel.load(ordering: .relaxed))] }
        set { sharedLevel.store(UInt8(levels.firstIndex(of: newValue) ?? 2), ordering: .relaxed) }
    }

    /// Installs the handler for the whole process (once).
    public static func bootstrap(
        level: Logger.Level, environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        self.level = level
        let journal = isJournal(environment["JOURNAL_STREAM"])
        LoggingSystem.bootstrap { label in DaemonLogHandler(label: label, journal: journal) }
    }

    /// Whether standard error is the journal stream systemd described in `$JOURNAL_STREAM` ("device:inode").
    static func isJournal(_ value: String?) -> Bool {
        guard let value else { return false }
        let parts = value.split(separator: ":")
        var info = stat()
        guard parts.count == 2, fstat(2, &info) == 0 else { return false }
        return UInt64(parts[0]) == UInt64(info.st_dev) && UInt64(parts[1]) == UInt64(info.st_ino)
    }

    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level {
        get { Self.level }
        set { Self.level = newValue }
    }
    let label: String
    let journal: Bool
    private static let output = Mutex<Void>(())

    public init(label: String, journal: Bool) {
        self.label = label
        self.journal = journal
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { $1 } }
        if let extra = event.metadata { all.merge(extra) { $1 } }
        var line = journal ? "<\(Self.priority(event.level))>" : "\(Self.timestamp()) \(event.level) "
        line += "\(label): \(event.message)"
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            line += " \(key)=\(Self.quoted("\(value)"))"
        }
        line += "\n"
        Self.output.withLock { _ in StandardError.write(line) }
    }

    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    static func quoted(_ value: String) -> String {
        guard value.isEmpty || value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline }) else {
            return value
        }
        let escaped = value.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"")
            .replacing("\n", with: "\\n")
        return "\"\(escaped)\""
    }

    static func timestamp() -> String {
        Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
