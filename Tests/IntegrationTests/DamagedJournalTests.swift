import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// A damaged journal no longer keeps the speaker silent (issue 16, item 12): the daemon moves it aside as
    /// evidence, starts with an empty one, says so at error level and in `status`, and keeps speaking. What is not
    /// damage (a journal that cannot be opened) still stops it, and nothing is moved.
    @Suite
    struct DamagedJournalTests {
        /// The files of `state` whose name says they were moved aside as damaged.
        func movedAside(_ state: String) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.contains(".corrupt-") }.sorted()
        }

        /// Checks what a daemon that found its journal damaged says and does; returns the evidence's path.
        func expectRecovered(_ daemon: DaemonProcess, evidence expected: Data?) async throws -> String {
            let status = try #require(try await daemon.reply(Request(op: "status")).status)
            let evidence = try #require(status.journal.recoveredFromCorruption, "status says where the evidence is")
            #expect(evidence.hasPrefix("\(daemon.directory)/state/journal.sqlite.corrupt-"), "\(evidence)")
            if let expected { #expect(FileManager.default.contents(atPath: evidence) == expected, "kept as it was") }
            let line = try #require(daemon.log.split(separator: "\n").first { $0.contains("journal was damaged") })
            #expect(line.contains(" error announced: the journal was damaged: moved aside"), "\(line)")
            #expect(line.contains("moved_to=\(evidence)"), "\(line)")
            let ctl = try await daemon.ctl(["status"])
            #expect(ctl.stdout.contains("journal:  DAMAGED at start: moved to \(evidence)"), "\(ctl)")
            #expect(status.totals.accepted == 0 && status.journal.dedupOrders == 0, "an empty journal")
            let said = try await daemon.reply(Request(op: "say", amount: "1.23", order: "after", wait: true))
            #expect(said.ok && said.job?.state == .spoken && said.job?.id == 1, "it speaks again: \(said)")
            return evidence
        }

        @Test func aJournalOfGarbageIsMovedAsideAndTheDaemonSpeaks() async throws {
            let directory = try Paths.temporaryDirectory("garbage")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let state = "\(directory)/state"
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            var generator = SystemRandomNumberGenerator()
            let garbage = Data((0..<20_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
            try garbage.write(to: URL(fileURLWithPath: "\(state)/journal.sqlite"))

            let evidence = try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                try await expectRecovered(daemon, evidence: garbage)
            }
            // The next start finds a sound journal: nothing more is moved, and the job of the run before is there.
            try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.journal.recoveredFromCorruption == nil)
                #expect(try movedAside(state) == [String(evidence.split(separator: "/").last ?? "")])
                let again = try await daemon.reply(Request(op: "say", amount: "1.23", order: "after"))
                #expect(again.error?.code == "duplicate" && again.job?.id == 1, "\(again)")
            }
        }

        /// A journal whose file lost its second half (and its -wal): opening it works, reading all of it does not.
        @Test func aJournalCutShortIsMovedAsideAndTheDaemonSpeaks() async throws {
            let directory = try Paths.temporaryDirectory("cut")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let state = "\(directory)/state"
            let journal = "\(state)/journal.sqlite"
            // Room for all 200 in the queue: a busy machine's player may fall behind the requests.
            try await withDaemon(
                rig: nil, arguments: ["--queue-capacity", "256"], device: "null", directory: directory
            ) { daemon in
                let connection = try RawConnection(path: daemon.socket)
                for index in 1...200 {
                    connection.write(#"{"op":"say","fen":\#(index),"order":"C-\#(index)"}"# + "\n")
                    let reply = await connection.readResponse()
                    #expect(reply?.ok == true, "C-\(index): \(String(describing: reply))")
                }
                try await daemon.waitUntilIdle()
            }
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: journal + suffix) }
            let size = try #require(try FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int)
            try #require(size >= 8 * 4096, "the journal holds several pages: \(size) bytes")
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: journal))
            try handle.truncate(atOffset: UInt64(size / 2))
            try handle.close()
            let cut = try #require(FileManager.default.contents(atPath: journal))

            try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                _ = try await expectRecovered(daemon, evidence: cut)
                let resent = try await daemon.reply(Request(op: "say", fen: 7, order: "C-7"))
                #expect(resent.ok, "the order ids of the damaged journal are gone with it: \(resent)")
            }
        }

        /// A journal that cannot be opened is not damaged: here a folder where the file should be (the tests run
        /// as root, who ignores file permissions). Nothing is moved aside; the daemon starts and keeps its journal
        /// in memory, naming what is wrong (docs/deployment.md, "A state folder that cannot be used").
        @Test func aJournalThatCannotBeOpenedIsNotMovedAside() async throws {
            let directory = try Paths.temporaryDirectory("cannot")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let state = "\(directory)/state"
            try FileManager.default.createDirectory(
                atPath: "\(state)/journal.sqlite", withIntermediateDirectories: true)
            try await withDaemon(rig: nil, device: "null", directory: directory) { daemon in
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.journal.recoveredFromCorruption == nil)
                #expect(status.journal.problem?.message == "\(state)/journal.sqlite is a directory, not a journal file")
            }
            #expect(try movedAside(state).isEmpty)
            var isFolder: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: "\(state)/journal.sqlite", isDirectory: &isFolder))
            #expect(isFolder.boolValue)
        }
    }
}
