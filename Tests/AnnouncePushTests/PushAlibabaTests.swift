import AnnounceClient
import AnnounceCore
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// `announce-push` in its `[alibaba]` mode against mosquitto standing in for the Alibaba Cloud IoT Platform: the
/// device signs in over TLS with the password the platform documents (checked by mosquitto against a password file
/// made here with openssl, not with the listener's code), and the platform's client invokes the thing model's
/// services and watches what the device answers and posts (docs/push.md, "Alibaba Cloud IoT Platform").
@Suite(.serialized)
struct PushAlibabaTests {
    static let productKey = "a1X2bEnP82z"
    static let deviceName = "T1"
    static let deviceSecret = "XZvZ1295n3mzGFYWHUnjy1xkdHb919C8"
    static var prefix: String { "/sys/\(productKey)/\(deviceName)/" }

    /// The password the platform expects, computed with openssl from the documented text.
    static func documentedPassword() async throws -> String {
        let content =
            "clientId\(productKey).\(deviceName)deviceName\(deviceName)productKey\(productKey)timestamp2524608000000"
        let result = try await run(
            "/bin/sh", ["-c", "printf '%s' '\(content)' | openssl dgst -sha256 -hmac '\(deviceSecret)' -r"])
        guard result.status == 0 else { throw HarnessError("openssl: \(result)") }
        return String(result.stdout.prefix(64))
    }

    @Test func theThingModelPushesClipsBroadcastsThemAndDeletesThem() async throws {
        let certificates = try await TestCertificates()
        defer { certificates.remove() }
        try await ClipServer.with(ClipServer.https(certificates)) { server in
            let clip = try server.add("100wan.wav", from: "wan.wav")
            let size = try FileManager.default.attributesOfItem(atPath: clip)[.size] as? Int ?? 0
            let list = """
                {"audios":[{"format":"wav","id":"100wan","size":\(size),"type":"custom","url":"\(server.url("100wan.wav"))"}]}
                """
            try list.write(toFile: "\(server.directory)/J-1.json", atomically: true, encoding: .utf8)
            let corpus = try Paths.temporaryDirectory("corpus")
            defer { try? FileManager.default.removeItem(atPath: corpus) }
            let files = try Paths.temporaryDirectory("ali")
            defer { try? FileManager.default.removeItem(atPath: files) }
            let device = "\(Self.deviceName)&\(Self.productKey)"
            _ = FileManager.default.createFile(atPath: "\(files)/passwd", contents: Data())
            for (user, password) in [(device, try await Self.documentedPassword()), ("platform", "pw-platform")] {
                let made = try await run("/usr/bin/mosquitto_passwd", ["-b", "\(files)/passwd", user, password])
                guard made.status == 0 else { throw HarnessError("mosquitto_passwd: \(made)") }
            }
            try "pw-platform".write(toFile: "\(files)/platform.pw", atomically: true, encoding: .utf8)
            let tlsPort = try Broker.freePort()
            // The platform's side connects plainly (the broker's first listener); the device over TLS.
            let listener = """
                listener PORT 127.0.0.1
                allow_anonymous false
                password_file \(files)/passwd
                """
            let tls = """
                listener \(tlsPort) 127.0.0.1
                cafile \(certificates.directory)/ca.pem
                certfile \(certificates.directory)/server.pem
                keyfile \(certificates.directory)/server.key
                """
            try await withDaemon(rig: nil, arguments: ["--corpus", corpus], device: "null") { daemon in
                try await withBroker(listener: listener, extraConfiguration: tls) { broker in
                    let platform = try await TopicWatcher(
                        broker: broker, user: "platform", password: "pw-platform", topics: [Self.prefix + "#"])
                    defer { platform.stop() }
                    try await withListener(
                        broker: broker, socket: daemon.socket, url: "mqtts://localhost:\(tlsPort)",
                        extra: "enabled = false",
                        tls: "[broker.tls]\nca_file = \"\(certificates.directory)/ca.pem\"",
                        sections: """
                            [corpus]
                            directory = "\(corpus)"
                            ca_file = "\(certificates.directory)/ca.pem"

                            [alibaba]
                            product_key = "\(Self.productKey)"
                            device_name = "\(Self.deviceName)"
                            device_secret = "\(Self.deviceSecret)"
                            """
                    ) { _, push in
                        func invoke(_ topic: String, _ json: String) async throws {
                            let file = "\(files)/call-\(UInt32.random(in: 0...UInt32.max)).json"
                            try json.write(toFile: file, atomically: true, encoding: .utf8)
                            let result = try await run(
                                "\(Paths.bin)/announce-push",
                                ["publish", "--raw", file, "--broker", broker.url, "--username", "platform", "--password-file",
                                 "\(files)/platform.pw", "--topic", Self.prefix + topic])
                            guard result.status == 0 else { throw HarnessError("publish: \(result)") }
                        }
                        func texts(_ topic: String) -> [String] { platform.messages(on: Self.prefix + topic).map(\.text) }

                        // Signed in (mosquitto took the documented password); its properties posted: no clip yet.
                        try await platform.wait(for: "the first property post") { _ in
                            texts("thing/event/property/post").contains { $0.contains(#""SpeechList":[]"#) }
                        }
                        #expect(push.logLines(containing: "connected to the broker").count == 1)

                        // SpeechPost: answered 200, the clips fetched from the list, installed, loaded; the result event.
                        let post =
                            #"{"method":"thing.service.SpeechPost","id":"101","params":{"jobcode":"J-1","url":"URL"},"version":"1.0.0"}"#
                            .replacingOccurrences(of: "URL", with: server.url("J-1.json"))
                        try await invoke("thing/service/SpeechPost", post)
                        try await platform.wait(for: "the push result") { _ in
                            !texts("thing/event/SpeechUpdateResponse/post").isEmpty
                        }
                        #expect(texts("thing/service/SpeechPost_reply") == [#"{"code":200,"data":{},"id":"101"}"#])
                        let event = try #require(texts("thing/event/SpeechUpdateResponse/post").first)
                        #expect(event.contains(#""method":"thing.event.SpeechUpdateResponse.post","params":{"jobcode":"J-1","result":0}"#), "\(event)")
                        try await platform.wait(for: "the clip in the properties") { _ in
                            texts("thing/event/property/post").contains { $0.contains(#""id":"100wan""#) }
                        }
                        var status = try #require(try await daemon.reply(Request(op: "status")).status?.corpus)
                        #expect(status.clips.map(\.id) == ["100wan"])

                        // The same invocation again (redelivered): answered again, not done again, no second event.
                        try await invoke("thing/service/SpeechPost", post)
                        try await platform.wait(for: "the second reply") { _ in texts("thing/service/SpeechPost_reply").count == 2 }
                        try await push.waitForLog("corpus push already noted")

                        // SpeechBroadcast with the pushed clip and an amount: spoken once, answered once heard (result 0,
                        // the device SDK's shape); the same speech id again (the platform's retry): not spoken again,
                        // answered duplicate (1); a corpus id nowhere: answered not found (2), nothing queued.
                        func broadcast(_ id: String, _ speechID: String, _ speechs: String) async throws {
                            try await invoke(
                                "thing/service/SpeechBroadcast",
                                #"{"id":"\#(id)","method":"thing.service.SpeechBroadcast","params":{"speechs":\#(speechs),"id":"\#(speechID)","format":"wav"}}"#)
                        }
                        let replies = "thing/service/SpeechBroadcast_reply"
                        // Nothing to replay yet: answered so (100001), nothing spoken.
                        let replay = #"{"id":"ID","method":"thing.service.SpeechReplay","params":{}}"#
                        try await invoke("thing/service/SpeechReplay", replay.replacingOccurrences(of: "ID", with: "100"))
                        try await platform.wait(for: "the first replay's answer") { _ in
                            !texts("thing/service/SpeechReplay_reply").isEmpty
                        }
                        #expect(texts("thing/service/SpeechReplay_reply").first?.hasPrefix(#"{"code":100001,"data":{},"id":"100","message":"no combination broadcast"#) == true, "\(texts("thing/service/SpeechReplay_reply"))")
                        try await broadcast("102", "S-1", #"["100wan","{$12.50}"]"#)
                        try await platform.wait(for: "the broadcast's answer") { _ in texts(replies).count == 1 }
                        #expect(texts(replies) == [#"{"code":200,"data":{"error_message":"success","result":0,"task_id":"S-1"},"id":"102"}"#])
                        let heard = try await daemon.jobs(order: "S-1")
                        #expect(heard.map(\.text) == ["100wan十二点五元"] && heard.map(\.state) == [.spoken], "\(heard)")
                        try await broadcast("103", "S-1", #"["100wan","{$12.50}"]"#)
                        try await broadcast("104", "S-3", #"["no-such-clip"]"#)
                        try await platform.wait(for: "two more answers") { _ in texts(replies).count == 3 }
                        #expect(texts(replies)[1].hasPrefix(#"{"code":200,"data":{"error_message":"duplicate speech id"#), "\(texts(replies))")
                        #expect(texts(replies)[1].hasSuffix(#""result":1,"task_id":"S-1"},"id":"103"}"#), "\(texts(replies))")
                        #expect(texts(replies)[2].contains(#""result":2,"task_id":"S-3"},"id":"104"}"#), "\(texts(replies))")
                        #expect(try await daemon.jobs(order: "S-1").count == 1, "heard once")
                        #expect(try await daemon.jobs(order: "S-3").isEmpty, "nothing queued")

                        // SyncSpeechBroadcast by RRPC: answered on the RRPC response topic as soon as the daemon has it.
                        try await invoke(
                            "rrpc/request/77",
                            #"{"id":"105","method":"thing.service.SyncSpeechBroadcast","params":{"speechs":["{$3}"],"id":"S-2","format":"wav"}}"#)
                        try await platform.wait(for: "the RRPC answer") { _ in !texts("rrpc/response/77").isEmpty }
                        #expect(texts("rrpc/response/77") == [#"{"code":200,"data":{"error_message":"success","result":0,"task_id":"S-2"},"id":"105"}"#])
                        let synchronous = try #require(try await daemon.waitUntilSpoken(["S-2"]).first { $0.order == "S-2" })
                        #expect(synchronous.text == "三元", "\(synchronous)")
                        #expect(texts(replies).count == 3, "no SpeechBroadcast answer for the RRPC one")

                        // Replay the last combination broadcast: S-2's again, once however often the call comes.
                        let before = try await daemon.history().count
                        try await invoke("thing/service/SpeechReplay", replay.replacingOccurrences(of: "ID", with: "106"))
                        try await invoke("thing/service/SpeechReplay", replay.replacingOccurrences(of: "ID", with: "106"))
                        try await platform.wait(for: "both replay answers") { _ in
                            texts("thing/service/SpeechReplay_reply").count == 3
                        }
                        #expect(Array(texts("thing/service/SpeechReplay_reply").dropFirst()) == [#"{"code":200,"data":{},"id":"106"}"#, #"{"code":200,"data":{},"id":"106"}"#])
                        let replayed = try #require(try await daemon.waitUntilSpoken(["alink-replay:106"]).first { $0.order == "alink-replay:106" })
                        #expect(replayed.text == "三元" && replayed.replayOf == synchronous.id, "\(replayed)")
                        #expect(try await daemon.history().count == before + 1, "replayed once")

                        // Start repeat: the daemon's repeat (answered 200 once it has it), said as notices; stop repeat
                        // ends it (answered 200); a start without an interval is refused (460).
                        try await invoke(
                            "thing/service/StartRepeatSpeech",
                            #"{"id":"108","method":"thing.service.StartRepeatSpeech","params":{"speechs":["new-order","{#0423}"],"id":"AR-1","interval":3600,"times":5}}"#)
                        try await platform.wait(for: "the start's answer") { _ in !texts("thing/service/StartRepeatSpeech_reply").isEmpty }
                        #expect(texts("thing/service/StartRepeatSpeech_reply") == [#"{"code":200,"data":{},"id":"108"}"#])
                        let repeating = try #require(try await daemon.reply(Request(op: "status")).status?.repeats?.first)
                        #expect(repeating.order == "AR-1" && repeating.times == 5 && repeating.every == 3600, "\(repeating)")
                        _ = try await daemon.waitUntilSpoken(["AR-1#1"])
                        try await invoke("thing/service/StopRepeatSpeech", #"{"id":"109","method":"thing.service.StopRepeatSpeech","params":{"id":"AR-1"}}"#)
                        try await platform.wait(for: "the stop's answer") { _ in !texts("thing/service/StopRepeatSpeech_reply").isEmpty }
                        #expect(texts("thing/service/StopRepeatSpeech_reply") == [#"{"code":200,"data":{},"id":"109"}"#])
                        #expect(try await daemon.reply(Request(op: "repeat", order: "AR-1")).repeat?.state == .stopped)
                        try await invoke(
                            "thing/service/StartRepeatSpeech",
                            #"{"id":"110","method":"thing.service.StartRepeatSpeech","params":{"speechs":["new-order"],"id":"AR-2"}}"#)
                        try await platform.wait(for: "the refusal") { _ in texts("thing/service/StartRepeatSpeech_reply").count == 2 }
                        #expect(texts("thing/service/StartRepeatSpeech_reply").last?.hasPrefix(#"{"code":460,"#) == true)

                        // A service this device does not offer: answered "not supported" (code 100000).
                        try await invoke("thing/service/SpeechExtension", #"{"id":"107","method":"thing.service.SpeechExtension","params":{}}"#)
                        try await platform.wait(for: "the not-supported answer") { _ in !texts("thing/service/SpeechExtension_reply").isEmpty }
                        #expect(texts("thing/service/SpeechExtension_reply").first?.hasPrefix(#"{"code":100000,"data":{},"id":"107","message":"not supported: SpeechExtension"#) == true)

                        // DeleteSpeech: answered 200; the clip goes, and the properties say so.
                        try await invoke(
                            "thing/service/DeleteSpeech",
                            #"{"id":"104","method":"thing.service.DeleteSpeech","params":{"speechs":[{"id":"100wan","format":"wav"}]}}"#)
                        try await platform.wait(for: "the empty list again") { _ in
                            texts("thing/event/property/post").filter { $0.contains(#""SpeechList":[]"#) }.count >= 2
                        }
                        #expect(texts("thing/service/DeleteSpeech_reply") == [#"{"code":200,"data":{},"id":"104"}"#])
                        status = try #require(try await daemon.reply(Request(op: "status")).status?.corpus)
                        #expect(status.clips.isEmpty)
                        #expect(texts("thing/event/SpeechUpdateResponse/post").count == 1)
                    }
                }
            }
        }
    }
}
