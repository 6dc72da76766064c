import AnnounceCore
import AnnounceSystemd
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// swift-log output for the daemon and the push listener.
///
/// - **Under systemd** (standard error is the journal: `$JOURNAL_STREAM` names it, systemd.exec(5)) each record
///   is one journal entry written natively (`sd_journal_sendv`): `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`,
///   `CODE_FILE`/`CODE_LINE`/`CODE_FUNC`, the kind of event as `MESSAGE_ID` (``EventKind``), and every metadata
///   key as a field of its own — `job.id` → `JOB_ID`, `order.id` → `ORDER_ID`, `error.code` → `ERROR_CODE` —
///   so that `journalctl ORDER_ID=A1` finds a payment. If the journal cannot be written (journald restarting),
///   the record goes to standard error as a line with its syslog priority (`<6>…`, sd-daemon(3)), which journald
///   still files at the right level.
/// - **Elsewhere**: one line per record on standard error, an ISO 8601 time, the level, then the message and
///   the metadata as `key=value`, sorted by key.
///
/// In both, the message text carries the metadata as `key=value` too, so `journalctl -u announced` reads as
/// the terminal did.
public struct AnnounceLogHandler: LogHandler {
    public enum Output: Sendable, Equatable {
        /// Native journal entries (with the priority-prefixed line on standard error as the fallback).
        case journal
        /// Time-stamped lines on standard error.
        case standardError
    }

    /// The level of every handler, changeable at run time (config reload).
    private static let sharedLevel = Atomic<UInt8>(2)
    private static let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]

    public static var level: Logger.Level {
        get { levels[Int(sharedLevel.load(ordering: .relaxed))] }
        set { sharedLevel.store(UInt8(levels.firstIndex(of: newValue) ?? 2), ordering: .relaxed) }
    }

    /// Where records go when `$JOURNAL_STREAM` says `journalStream` (its value; nil when unset).
    public static func output(journalStream: String?) -> Output {
        JournalSender.isStandardErrorTheJournal(journalStream: journalStream) ? .journal : .standardError
    }

    /// Installs the handler for the whole process (once). `program` is the journal's `SYSLOG_IDENTIFIER`.
    public static func bootstrap(program: String, level: Logger.Level) {
        self.level = level
        let output = output(journalStream: getenv("JOURNAL_STREAM").map { String(cString: $0) })
        LoggingSystem.bootstrap { label in AnnounceLogHandler(label: label, program: program, output: output) }
    }

    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level {
        get { Self.level }
        set { Self.level = newValue }
    }
    let label: String
    let program: String
    let output: Output
    private static let standardError = Mutex<Void>(())

    public init(label: String, program: String, output: Output) {
        self.label = label
        self.program = program
        self.output = output
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { $1 } }
        if let extra = event.metadata { all.merge(extra) { $1 } }
        let text = Self.text(label: label == program ? nil : label, message: "\(event.message)", metadata: all)
        if output == .journal {
            let fields = Self.journalFields(
                program: program, level: event.level, text: text, metadata: all, file: event.file,
                line: event.line, function: event.function)
            if JournalSender.send(fields) == 0 { return }
            Self.write("<\(Self.priority(event.level))>\(program): \(text)\n")
        } else {
            Self.write("\(Self.timestamp()) \(event.level) \(program): \(text)\n")
        }
    }

    private static func write(_ line: String) {
        standardError.withLock { _ in StandardError.write(line) }
    }

    // MARK: The record as text and as journal fields

    /// `[label: ]message key=value …`, the metadata sorted by key.
    static func text(label: String?, message: String, metadata: Logger.Metadata) -> String {
        var text = label.map { "\($0): " } ?? ""
        text += message
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            text += " \(key)=\(quoted("\(value)"))"
        }
        return text
    }

    /// The journal entry of a record: the standard fields, the event's message id, then the metadata.
    static func journalFields(
        program: String, level: Logger.Level, text: String, metadata: Logger.Metadata, file: String, line: UInt,
        function: String
    ) -> [(name: String, value: String)] {
        var fields: [(name: String, value: String)] = [
            ("MESSAGE", text), ("PRIORITY", "\(priority(level))"), ("SYSLOG_IDENTIFIER", program),
            ("CODE_FILE", file), ("CODE_LINE", "\(line)"), ("CODE_FUNC", function),
        ]
        if case .string(let name)? = metadata[EventKind.key],
            let kind = EventKind(rawValue: name)
        {
            fields.append(("MESSAGE_ID", kind.messageID))
        }
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            fields.append((fieldName(key), "\(value)"))
        }
        return fields
    }

    /// Fields journald or systemd give a meaning of their own: a metadata key that maps to one is prefixed.
    static let reservedFields: Set<String> = [
        "MESSAGE", "MESSAGE_ID", "PRIORITY", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "ERRNO", "INVOCATION_ID",
        "USER_INVOCATION_ID", "SYSLOG_FACILITY", "SYSLOG_IDENTIFIER", "SYSLOG_PID", "SYSLOG_TIMESTAMP",
        "SYSLOG_RAW", "DOCUMENTATION", "TID", "UNIT", "USER_UNIT", "COREDUMP_UNIT", "OBJECT_PID",
    ]

    /// The journal field for a metadata key: upper case, every character but a letter or digit made `_`
    /// (`job.id` → `JOB_ID`, `first_sample_ms` → `FIRST_SAMPLE_MS`); `ANNOUNCE_` before one that would start with a
    /// digit or `_` or mean something else to journald (`unit` → `ANNOUNCE_UNIT`); at most 64 characters.
    static func fieldName(_ key: String) -> String {
        var name = String(
            String.UnicodeScalarView(
                key.unicodeScalars.map { scalar -> Unicode.Scalar in
                    switch scalar {
                    case "a"..."z": Unicode.Scalar(scalar.value - 32)!
                    case "A"..."Z", "0"..."9": scalar
                    default: "_"
                    }
                }))
        if name.isEmpty || name.first == "_" || name.first!.isNumber || reservedFields.contains(name) {
            name = "ANNOUNCE_" + name
        }
        return String(name.prefix(64))
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
        guard value.isEmpty || value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline })
            || value.unicodeScalars.contains(where: { $0.value < 0x20 })
        else { return value }
        // As a JSON string, escapes a line break and any other control character (a raw one could fake the rest of
        // a journal line). Not String.replacing: that lives in _StringProcessing, which the daemon then ran (and
        // kept resident) for every log line.
        return JSONSyntax.quoted(value)
    }

    static func timestamp() -> String {
        Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
