import AnnounceCore
@testable import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// The configuration of what the terminal publishes (docs/push.md), and the status it builds from the daemon's.
struct FleetConfigurationTests {
    static let base = "device = \"T9\"\n[broker]\nurl = \"mqtt://h\"\n[keys]\nk1 = \"hex:00112233445566778899aabbccddeeff\"\n"
        + "k2 = \"hex:00112233445566778899aabbccddeeff\"\n"

    @Test func defaultsPublishStatusAndReceiptsOnTheDevicesTopics() throws {
        let c = try PushConfiguration.parse(Self.base)
        #expect(c.stateDirectory == "/var/lib/announce-push")
        #expect(c.statusEnabled && c.receiptsEnabled)
        #expect(c.statusTopic == "announce/T9/status" && c.receiptTopic == "announce/T9/receipts")
        #expect(c.statusRefreshSeconds == 300)
        #expect(c.effectiveReceiptKeyID == "k2")
    }

    @Test func everySettingIsRead() throws {
        let c = try PushConfiguration.parse(
            """
            state_dir = "state"
            \(Self.base)
            [status]
            enabled = false
            topic = "fleet/T9/state"
            refresh = "1m"
            [receipts]
            topic = "fleet/T9/heard"
            kid = "k1"
            """, directory: "/etc/announce")
        #expect(c.stateDirectory == "/etc/announce/state")
        #expect(!c.statusEnabled && c.statusTopic == "fleet/T9/state" && c.statusRefreshSeconds == 60)
        #expect(c.receiptTopic == "fleet/T9/heard" && c.effectiveReceiptKeyID == "k1")
    }

    /// The ACL the tests give mosquitto is the one docs/fleet.md tells a fleet to use.
    @Test func fleetDocumentsTheACLTheTestsUse() throws {
        let document = try String(contentsOfFile: "\(Paths.root)/docs/fleet.md", encoding: .utf8)
        let documented = document.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for line in FleetBroker.acl.split(separator: "\n") {
            #expect(documented.contains(String(line)), "docs/fleet.md lacks: \(line)")
        }
    }

    @Test func mistakesNameTheKey() {
        let cases: [(String, String)] = [
            (Self.base + "[status]\ncolour = 1\n", "status.colour: unknown key"),
            (Self.base + "[receipts]\ntopic = \"announce/+/receipts\"\n", "receipts.topic: must be a topic name"),
            (Self.base + "[receipts]\nkid = \"k7\"\n", "receipts.kid: no key \"k7\""),
            (Self.base + "[status]\nrefresh = \"1s\"\n", "status.refresh"),
            ("state_dir = \"\"\n" + Self.base, "state_dir: must not be empty"),
        ]
        for (text, expected) in cases {
            let error = #expect(throws: AnnounceError.self, "\(expected)") { try PushConfiguration.parse(text) }
            #expect(error?.message.contains(expected) == true, "\(String(describing: error)) should say \(expected)")
        }
    }

    /// The status a terminal publishes, from the daemon's `status`: what the fleet needs, and nothing unknown made
    /// up (a daemon that does not answer is `unreachable`, with no audio or queue).
    @Test func theStatusComesFromTheDaemons() throws {
        var audio = AudioStatus(device: "announce", mixer: "default/Master", volume: 35, threshold: 60, muted: false)
        audio.lastError = ErrorInfo(code: "audio_device", message: "gone")
        var journal = DaemonStatus.Journal(
            path: "/j", recoveredAtStart: 0, interruptedAtStart: 0, dedupOrders: 3, dedupWindowSeconds: 86400)
        journal.unrecorded = 0
        journal.reserve = true
        var daemon = DaemonStatus(
            state: "running", v: 1, pid: 1, uptimeSeconds: 3600.7, socket: "/s", clients: 1,
            queue: DaemonStatus.Queue(waiting: 2, capacity: 64, byPriority: [:], unfinished: 3), voices: [],
            journal: journal, totals: DaemonStatus.Totals(), audio: audio, peer: nil)
        var heard = JobInfo(id: 9, state: .spoken, order: "O-9")
        heard.finishedAt = WallClock.iso8601(ms: 1_795_415_590_870)
        daemon.lastHeard = heard
        let status = DeviceStatus.online(
            device: "T9", daemon: daemon, receipts: DeviceStatus.Receipts(pending: 1), uptimeSeconds: 12, atMs: 5)
        #expect(status.online && status.device == "T9" && status.version == AnnounceVersion.current)
        #expect(status.daemon == DeviceStatus.Daemon(state: "running", uptime_s: 3600))
        #expect(status.audio == DeviceStatus.Audio(device: "announce", state: nil, error: "audio_device: gone"))
        #expect(status.volume == DeviceStatus.Volume(level: 35, threshold: 60, muted: false))
        // During an alert the mixer reads the threshold; the fleet still sees the owner's everyday level.
        var alert = daemon
        alert.audio.volume = 60
        alert.audio.level = 35
        #expect(
            DeviceStatus.online(device: "T9", daemon: alert, receipts: nil, uptimeSeconds: 1, atMs: 1).volume
                == DeviceStatus.Volume(level: 35, threshold: 60, muted: false))
        #expect(status.queue == DeviceStatus.Queue(depth: 2, unfinished: 3))
        #expect(status.last_heard == DeviceStatus.Heard(order: "O-9", at: 1_795_415_590_870))
        #expect(status.journal?.ok == true)
        #expect(status.receipts?.pending == 1)
        // A job's end on its way to disk is not a fault; one held because the disk cannot be written is.
        journal.unrecorded = 2
        daemon.journal = journal
        #expect(
            DeviceStatus.online(device: "T9", daemon: daemon, receipts: nil, uptimeSeconds: 1, atMs: 1).journal
                == DeviceStatus.Journal(ok: true, unrecorded: 2, reserve: true))
        journal.lastError = ErrorInfo(code: "journal", message: "disk full")
        daemon.journal = journal
        #expect(
            DeviceStatus.online(device: "T9", daemon: daemon, receipts: nil, uptimeSeconds: 1, atMs: 1).journal
                == DeviceStatus.Journal(ok: false, unrecorded: 2, reserve: true, error: "journal: disk full"))
        journal.lastError = nil
        journal.unrecorded = 0
        journal.reserve = false
        daemon.journal = journal
        #expect(
            DeviceStatus.online(device: "T9", daemon: daemon, receipts: nil, uptimeSeconds: 1, atMs: 1).journal?.ok
                == false)
        // Kept in memory (the state folder cannot be used): not ok, said why, and not durable.
        journal.reserve = true
        journal.durable = false
        journal.problem = ErrorInfo(code: "journal", message: "the state folder /var/lib/announce is on a read-only file system")
        daemon.journal = journal
        #expect(
            DeviceStatus.online(device: "T9", daemon: daemon, receipts: nil, uptimeSeconds: 1, atMs: 1).journal
                == DeviceStatus.Journal(
                    ok: false, unrecorded: 0, reserve: true,
                    error: "journal: the state folder /var/lib/announce is on a read-only file system", durable: false))

        let unreachable = DeviceStatus.online(device: "T9", daemon: nil, receipts: nil, uptimeSeconds: 1, atMs: 1)
        #expect(unreachable.online && unreachable.daemon?.state == "unreachable")
        #expect(unreachable.audio == nil && unreachable.queue == nil && unreachable.journal == nil)

        let offline = String(decoding: DeviceStatus.offline(device: "T9", reason: "connection_lost").payload(), as: UTF8.self)
        #expect(offline == "{\"device\":\"T9\",\"online\":false,\"reason\":\"connection_lost\",\"v\":1,\"version\":\"\(AnnounceVersion.current)\"}")
    }
}
