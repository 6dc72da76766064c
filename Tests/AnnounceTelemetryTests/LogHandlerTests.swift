import AnnounceCore
import AnnounceSystemd
import AnnounceTestSupport
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import AnnounceTelemetry

/// What a log record becomes in the journal: its fields (the real journald is the VM's test; the wire format the
/// daemon sends is checked in IntegrationTests/ObservabilityTests).
struct LogHandlerTests {
    @Test func metadataKeysBecomeJournalFieldNames() {
        #expect(AnnounceLogHandler.fieldName("job.id") == "JOB_ID")
        #expect(AnnounceLogHandler.fieldName("order.id") == "ORDER_ID")
        #expect(AnnounceLogHandler.fieldName("error.code") == "ERROR_CODE")
        #expect(AnnounceLogHandler.fieldName("amount_fen") == "AMOUNT_FEN")
        #expect(AnnounceLogHandler.fieldName("first_sample_ms") == "FIRST_SAMPLE_MS")
        // Names journald or systemd give a meaning of their own, or could not accept, are prefixed.
        #expect(AnnounceLogHandler.fieldName("unit") == "ANNOUNCE_UNIT")
        #expect(AnnounceLogHandler.fieldName("message") == "ANNOUNCE_MESSAGE")
        #expect(AnnounceLogHandler.fieldName("_pid") == "ANNOUNCE__PID")
        #expect(AnnounceLogHandler.fieldName("1st") == "ANNOUNCE_1ST")
        #expect(AnnounceLogHandler.fieldName("") == "ANNOUNCE_")
        #expect(AnnounceLogHandler.fieldName("ключ") == "ANNOUNCE_____")
        #expect(AnnounceLogHandler.fieldName(String(repeating: "a", count: 100)).count == 64)
        for key in ["job.id", "unit", "_pid", "1st", "ключ", "a-b c", String(repeating: "x", count: 80)] {
            let name = AnnounceLogHandler.fieldName(key)
            #expect(JournalSender.isValidFieldName(name), "\(key) → \(name)")
        }
    }

    /// A value a reader could take for more fields (a space, `=`, a quote, a line break: a client's error text, a
    /// file name) is written quoted, with what would end it or the line escaped; a plain value as it is.
    @Test func valuesThatCouldBreakALineAreQuotedAndEscaped() {
        #expect(AnnounceLogHandler.quoted("alipay") == "alipay")
        #expect(AnnounceLogHandler.quoted("") == "\"\"")
        #expect(AnnounceLogHandler.quoted("no such file") == "\"no such file\"")
        #expect(AnnounceLogHandler.quoted("a=b") == "\"a=b\"")
        #expect(AnnounceLogHandler.quoted(#"say "hi" C:\tmp"#) == #""say \"hi\" C:\\tmp""#)
        #expect(AnnounceLogHandler.quoted("one\ntwo\rthree\r\nfour") == #""one\ntwo\rthree\r\nfour""#)
        #expect(AnnounceLogHandler.quoted("到账 100 元") == "\"到账 100 元\"")
        #expect(AnnounceLogHandler.quoted("a\tb") == #""a\tb""#, "a control character alone is reason to quote")
        #expect(AnnounceLogHandler.quoted("\u{1B}[31mred") == #""\u001b[31mred""#)
        let text = AnnounceLogHandler.text(label: nil, message: "bad request", metadata: ["error": "line 1\nfake=1"])
        #expect(text == #"bad request error="line 1\nfake=1""#)
    }

    @Test func aJobsEndIsAnEntryWithItsMessageIDAndFields() {
        let metadata: Logger.Metadata = [
            "event": .event(.spoken), "job.id": "7", "order.id": "A1", "channel": "alipay", "amount_fen": "10000",
            "state": "spoken",
        ]
        let text = AnnounceLogHandler.text(label: nil, message: "job finished", metadata: metadata)
        #expect(text == "job finished amount_fen=10000 channel=alipay event=spoken job.id=7 order.id=A1 state=spoken")
        let fields = AnnounceLogHandler.journalFields(
            program: "announced", level: .info, text: text, metadata: metadata, file: "Daemon.swift", line: 12,
            function: "ended(_:result:)")
        let byName = Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        #expect(byName.count == fields.count, "each field once: \(fields)")
        #expect(byName["MESSAGE"] == text)
        #expect(byName["PRIORITY"] == "6")
        #expect(byName["SYSLOG_IDENTIFIER"] == "announced")
        #expect(byName["MESSAGE_ID"] == EventKind.spoken.messageID)
        #expect(byName["ORDER_ID"] == "A1" && byName["JOB_ID"] == "7" && byName["CHANNEL"] == "alipay")
        #expect(byName["AMOUNT_FEN"] == "10000" && byName["STATE"] == "spoken" && byName["EVENT"] == "spoken")
        #expect(byName["CODE_FILE"] == "Daemon.swift" && byName["CODE_LINE"] == "12")
        #expect(fields.allSatisfy { JournalSender.isValidFieldName($0.name) }, "\(fields.map(\.name))")

        let plain = AnnounceLogHandler.journalFields(
            program: "announce-push", level: .warning, text: "x", metadata: ["event": "no-such-kind"], file: "f",
            line: 1, function: "g")
        #expect(!plain.contains { $0.name == "MESSAGE_ID" }, "an unknown kind has no message id")
        #expect(plain.contains { $0 == ("PRIORITY", "4") })
    }

    /// The ids are documented (docs/configuration.md, "Logs and metrics": one row per event) and must never change or
    /// repeat.
    @Test func everyEventKindHasItsOwnStableMessageID() throws {
        let docs = try String(contentsOfFile: "\(Paths.root)/docs/configuration.md", encoding: .utf8)
        for kind in EventKind.allCases {
            #expect(docs.contains("| `\(kind.rawValue)`") && docs.contains("| `\(kind.messageID)` |"), "\(kind) undocumented")
        }
        let ids = EventKind.allCases.map(\.messageID)
        #expect(Set(ids).count == ids.count)
        for id in ids {
            #expect(id.count == 32 && id.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "\(id)")
        }
        #expect(EventKind.spoken.messageID == "6424a9c61a254be18e9f7d7a7bda3006")
        #expect(EventKind.accepted.messageID == "8d4847f24d684a26b0ca57922bf4c90f")
        #expect(EventKind.ended(.failed) == .failed && EventKind.ended(.cancelled) == .cancelled)
    }

    @Test func standardErrorIsTheJournalOnlyWhenJournalStreamNamesIt() throws {
        var info = stat()
        #expect(fstat(2, &info) == 0)
        let mine = "\(info.st_dev):\(info.st_ino)"
        #expect(JournalSender.isStandardErrorTheJournal(journalStream: mine))
        #expect(AnnounceLogHandler.output(journalStream: mine) == .journal)
        #expect(!JournalSender.isStandardErrorTheJournal(journalStream: "\(info.st_dev):\(info.st_ino + 1)"))
        #expect(!JournalSender.isStandardErrorTheJournal(journalStream: nil))
        #expect(!JournalSender.isStandardErrorTheJournal(journalStream: "garbage"))
        #expect(AnnounceLogHandler.output(journalStream: nil) == .standardError)
    }
}
