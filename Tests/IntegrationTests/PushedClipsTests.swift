import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

/// The daemon and the pushed clips (docs/voice-packs.md, "Pushed clips"; docs/protocol.md, `corpus`): loaded beside
/// the packs at start; a version that cannot be loaded keeps nothing from working and leaves what was loaded in
/// force, at a `corpus` request and at SIGHUP alike.
extension DaemonIntegration {
    @Suite struct PushedClipsTests {
        static func corpus(_ daemon: DaemonProcess) async throws -> DaemonStatus.Corpus {
            try #require(try await daemon.reply(Request(op: "status")).status?.corpus)
        }

        /// A combination's id (`order`) is remembered in the journal like a payment's, in a space of its own: sent
        /// again after a restart it is a duplicate of the job first accepted, and payment `X` is not blocked by it.
        @Test func aCombinationsIDOutlivesARestartInItsOwnSpace() async throws {
            let folder = try CorpusFolder.make(["new_order": "bai.wav"])
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let state = try Paths.temporaryDirectory("combine-state")
            defer { try? FileManager.default.removeItem(atPath: state) }
            let arguments = ["--corpus", folder]
            let first = try await withDaemon(rig: nil, arguments: arguments, device: "null", directory: state) { daemon in
                let said = try await daemon.reply(
                    Request(op: "combine", order: "SP-7", wait: true, parts: [.init(clip: "new_order"), .init(digits: "7")]))
                #expect(said.ok && said.job?.state == .spoken && said.job?.text == "new_order七", "\(said)")
                return try #require(said.job?.id)
            }
            try await withDaemon(rig: nil, arguments: arguments, device: "null", directory: state) { daemon in
                let again = try await daemon.reply(
                    Request(op: "combine", order: "SP-7", parts: [.init(clip: "new_order"), .init(digits: "7")]))
                #expect(!again.ok && again.error?.code == "duplicate", "\(again)")
                #expect(again.job?.id == first && again.job?.state == .spoken, "the original job, as it ended: \(again)")
                let payment = try await daemon.ctl(["say", "-w", "-o", "SP-7", "1.00"])
                #expect(payment.status == 0, "a payment's id space is its own: \(payment)")
            }
        }

        @Test func aBrokenVersionLeavesTheOneLoadedInForce() async throws {
            let folder = try CorpusFolder.make(["new_order": "yuan.wav"])
            defer { try? FileManager.default.removeItem(atPath: folder) }
            try await withDaemon(rig: nil, arguments: ["--corpus", folder], device: "null") { daemon in
                var status = try await Self.corpus(daemon)
                #expect(status.version == 1 && status.clips.map(\.id) == ["new_order"] && status.error == nil)
                #expect(status.clips.first.map { $0.ms > 100 } == true, "\(status)")
                // Version 2 is broken: `corpus` keeps version 1 and says why.
                try CorpusFolder.make(["new_order": "yuan.wav", "urged": "bai.wav"], version: 2, in: folder)
                try Data("not audio".utf8).write(to: URL(fileURLWithPath: "\(folder)/v2/urged.wav"))
                let reply = try await daemon.reply(Request(op: "corpus"))
                #expect(reply.ok)
                status = try #require(reply.corpus)
                #expect(status.version == 1 && status.clips.map(\.id) == ["new_order"])
                #expect(status.error?.code == "bad_voice_pack" && status.error?.message.contains("urged.wav") == true)
                // So does SIGHUP; payments are spoken all along.
                daemon.signal(SIGHUP)
                try await daemon.waitForLog("configuration reloaded")
                status = try await Self.corpus(daemon)
                #expect(status.version == 1 && status.error != nil)
                let said = try await daemon.ctl(["say", "-w", "1.00"])
                #expect(said.status == 0, "\(said)")
                // Version 3 is sound: loaded.
                try CorpusFolder.make(["urged": "bai.wav"], version: 3, in: folder)
                status = try #require(try await daemon.reply(Request(op: "corpus")).corpus)
                #expect(status.version == 3 && status.clips.map(\.id) == ["urged"] && status.error == nil)
                #expect(try await daemon.ctl(["status"]).stdout.contains("pushed:   1 clips (version 3)"))
            }
        }
    }
}
