import AnnounceCore
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// The Alibaba Cloud IoT Platform's side, without a broker: the documented sign-in, and the thing model's messages
/// read and answered as the platform's documentation and device SDK give them (docs/push.md, "Alibaba Cloud IoT
/// Platform"). The documentation's own examples are the fixtures.
struct AlibabaThingTests {
    static let settings: AlibabaThingSettings = {
        // swiftlint:disable:next force_try
        try! AlibabaThingSettings(
            productKey: "a1X2bEnP82z", deviceName: "example_zc", deviceSecret: "XZvZ1295n3mzGFYWHUnjy1xkdHb919C8",
            options: .init())
    }()

    /// The platform's worked example of the sign-in (its developer community's "三元组接入示例", hmacsha1): the same
    /// client id, user name and password, to the digit.
    @Test func theDocumentedSignInExample() {
        let signIn = AlibabaSignIn(
            productKey: "a14Xib5kdYd", deviceName: "light1983432", deviceSecret: "oLyaKqVxtRvjH284LdhqVgVUx1UPy6zq",
            clientID: "SN1928339", method: .hmacsha1, timestamp: "1539421321846", secureMode: 3)
        #expect(signIn.clientID == "SN1928339|securemode=3,signmethod=hmacsha1,timestamp=1539421321846|")
        #expect(signIn.username == "light1983432&a14Xib5kdYd")
        #expect(signIn.password == "b2488041f64f425016b467ee1c94959ebd592ad1")
        #expect(
            AlibabaSignIn.content(
                clientID: "SN1928339", deviceName: "light1983432", productKey: "a14Xib5kdYd",
                timestamp: "1539421321846")
                == "clientIdSN1928339deviceNamelight1983432productKeya14Xib5kdYdtimestamp1539421321846")
    }

    /// The default: HMAC-SHA256, TLS (`securemode=2`), the SDK's client id `ProductKey.DeviceName` and its fixed
    /// timestamp; the password agrees with openssl's HMAC of the documented text.
    @Test func theDefaultSignInIsHMACSHA256OverTLSAndAgreesWithOpenSSL() async throws {
        let signIn = Self.settings.signIn
        #expect(signIn.clientID == "a1X2bEnP82z.example_zc|securemode=2,signmethod=hmacsha256,timestamp=2524608000000|")
        #expect(signIn.username == "example_zc&a1X2bEnP82z")
        let content = "clientIda1X2bEnP82z.example_zcdeviceNameexample_zcproductKeya1X2bEnP82ztimestamp2524608000000"
        let result = try await run(
            "/bin/sh",
            ["-c", "printf '%s' '\(content)' | openssl dgst -sha256 -hmac XZvZ1295n3mzGFYWHUnjy1xkdHb919C8 -r"])
        #expect(signIn.password == String(result.stdout.prefix(64)), "\(result)")
        #expect(signIn.password.count == 64)
    }

    /// The documentation's SpeechPost, as the device receives it, becomes a corpus task under its `jobcode` with
    /// the list's URL, answered on the service's reply topic with code 200.
    @Test func theDocumentedSpeechPostBecomesACorpusTask() throws {
        var rules = CorpusRules()
        rules.allowPlainHTTP = true  // the documentation's example URL is http
        let thing = AlinkThing(settings: Self.settings, rules: rules)
        let topic = "/sys/a1X2bEnP82z/example_zc/thing/service/SpeechPost"
        let payload = """
            { "method":"thing.service.SpeechPost", "id":"6835*", "params":{ \
            "jobcode":"LJSdmPCIcG9js83R3IHc3GD6cbN*_16086091*", \
            "url":"http://speech-solution.oss-cn-shanghai.aliyuncs.com/speech_post_content/hL7****gu7Auup1TQUMy4gEcFyQ/LJSdmPCIcG9js8****Hc3GD6cbN.json?Expires=16086&OSSAccessKeyId=LTAIN******&Signature=ivvUslTdFHqeUCsa0yBv%2FD****" \
            }, "version":"1.0.0" }
            """
        guard case let .corpus(task, key, reply) = thing.read(topic: topic, payload: Array(payload.utf8)) else {
            Issue.record("not a corpus task")
            return
        }
        #expect(task.task == "LJSdmPCIcG9js83R3IHc3GD6cbN*_16086091*")
        #expect(task.op == .put)
        #expect(task.list?.hasPrefix("http://speech-solution.oss-cn-shanghai.aliyuncs.com/") == true)
        #expect(key == "jobcode:LJSdmPCIcG9js83R3IHc3GD6cbN*_16086091*")
        #expect(reply.topic == topic + "_reply")
        #expect(String(decoding: reply.payload, as: UTF8.self) == #"{"code":200,"data":{},"id":"6835*"}"#)
        // A device whose corpus pushes are off answers the same call "not supported".
        let off = thing.answer(reply, code: AlinkThing.notSupported, message: "off")
        #expect(off.topic == reply.topic)
        #expect(String(decoding: off.payload, as: UTF8.self) == #"{"code":100000,"data":{},"id":"6835*","message":"off"}"#)
        // With the default rules the same message is refused: its list is not https.
        guard case let .refused(_, _, refusal, error) = AlinkThing(settings: Self.settings).read(
            topic: topic, payload: Array(payload.utf8))
        else {
            Issue.record("plain http was taken")
            return
        }
        #expect(error.code == .insecureURL)
        #expect(String(decoding: refusal.payload, as: UTF8.self).hasPrefix(#"{"code":460,"#))
    }

    /// DeleteSpeech (the device SDK's `speechs: [{id, format}]`) and the delete-all service become deletions; an id
    /// that is a path is refused (460); a service this device does not offer is answered with the device code for
    /// "not supported".
    @Test func deletesAreTasksAndTheRestIsNotSupported() throws {
        let thing = AlinkThing(settings: Self.settings)
        let prefix = "/sys/a1X2bEnP82z/example_zc/"
        func read(_ path: String, _ json: String) -> AlinkThing.Invocation {
            thing.read(topic: prefix + path, payload: Array(json.utf8))
        }
        guard
            case let .corpus(delete, _, _) = read(
                "thing/service/DeleteSpeech",
                #"{"id":"7","method":"thing.service.DeleteSpeech","params":{"speechs":[{"id":"100wan","format":"wav"}]}}"#)
        else {
            Issue.record("DeleteSpeech is not a task")
            return
        }
        #expect(delete.op == .delete && delete.ids == ["100wan"])
        guard case .corpus(let all, _, _) = read("thing/service/DeleteAllSpeech", #"{"id":"8","params":{}}"#) else {
            Issue.record("the delete-all service is not a task")
            return
        }
        #expect(all.op == .deleteAll)
        guard
            case let .refused(_, _, bad, error) = read(
                "thing/service/DeleteSpeech", #"{"id":"9","params":{"speechs":[{"id":"../../etc","format":"wav"}]}}"#)
        else {
            Issue.record("a path was taken for an id")
            return
        }
        #expect(error.code == .badID)
        #expect(String(decoding: bad.payload, as: UTF8.self).hasPrefix(#"{"code":460,"#))
        let unknown = #"{"id":"10","method":"thing.service.RepeatSpeechStart","params":{}}"#
        guard case let .answer(unsupported, _) = read("thing/service/RepeatSpeechStart", unknown) else {
            Issue.record("an unknown service was not answered")
            return
        }
        #expect(unsupported.topic == prefix + "thing/service/RepeatSpeechStart_reply")
        let text = String(decoding: unsupported.payload, as: UTF8.self)
        #expect(text.hasPrefix(#"{"code":100000,"data":{},"id":"10","message":"not supported: RepeatSpeechStart"#), "\(text)")
        #expect(read("thing/event/property/post_reply", #"{"id":"1","code":200,"data":{}}"#) == .postReply(code: 200, message: nil))
        #expect(thing.read(topic: "/sys/other/device/thing/service/SpeechPost", payload: []) == .ignored("not this device's topic"))
    }

    /// SpeechBroadcast (as the device SDK reads it: `speechs` in order, the speech `id`, `format`) becomes the daemon's
    /// `combine` with the speech id as its order; SyncSpeechBroadcast by RRPC is the same, answered on the RRPC
    /// response topic as soon as the daemon has it. Unusable parameters are answered 460, not spoken.
    @Test func aBroadcastBecomesACombinationWithItsSpeechIDAsOrder() throws {
        let thing = AlinkThing(settings: Self.settings)
        let prefix = "/sys/a1X2bEnP82z/example_zc/"
        func read(_ path: String, _ json: String) -> AlinkThing.Invocation {
            thing.read(topic: prefix + path, payload: Array(json.utf8))
        }
        let async = read(
            "thing/service/SpeechBroadcast",
            #"{"id":"10","method":"thing.service.SpeechBroadcast","params":{"speechs":["ZFBDZ","{$100.00}","{#0423}"],"id":"S1","format":"wav"},"version":"1.0"}"#)
        guard case .broadcast(let broadcast) = async else {
            Issue.record("SpeechBroadcast is not a broadcast: \(async)")
            return
        }
        #expect(broadcast.speechID == "S1" && !broadcast.synchronous)
        #expect(broadcast.replyTo == ReceiptEntry.ReplyAddress(topic: prefix + "thing/service/SpeechBroadcast_reply", id: "10"))
        #expect(broadcast.request.op == "combine" && broadcast.request.order == "S1")
        #expect(broadcast.request.parts == [Request.Part(clip: "ZFBDZ"), Request.Part(amount: "100.00"), Request.Part(digits: "0423")])

        let sync = read(
            "rrpc/request/1234567",
            #"{"id":"11","method":"thing.service.SyncSpeechBroadcast","params":{"speechs":["ZFBDZ"],"id":"S2"}}"#)
        guard case .broadcast(let rrpc) = sync else {
            Issue.record("SyncSpeechBroadcast is not a broadcast: \(sync)")
            return
        }
        #expect(rrpc.synchronous && rrpc.speechID == "S2")
        #expect(broadcast.request.enforce == nil && rrpc.request.enforce == nil)
        for flag in ["true", "1"] {
            let enforced = read(
                "thing/service/SpeechBroadcast", #"{"id":"13","params":{"speechs":["ZFBDZ"],"id":"S4","enforce":"# + flag + "}}")
            guard case .broadcast(let loud) = enforced else {
                Issue.record("enforce \(flag): \(enforced)")
                continue
            }
            #expect(loud.request.enforce == true, "enforce \(flag)")
        }
        #expect(rrpc.replyTo == ReceiptEntry.ReplyAddress(topic: prefix + "rrpc/response/1234567", id: "11"))

        for params in [#"{"speechs":[],"id":"S3"}"#, #"{"speechs":["a"]}"#, #"{"speechs":[1],"id":"S3"}"#, #"{"speechs":["a"],"id":""}"#] {
            guard case let .answer(reply, _) = read(
                "thing/service/SpeechBroadcast", #"{"id":"12","method":"thing.service.SpeechBroadcast","params":"# + params + "}")
            else {
                Issue.record("\(params) was taken")
                continue
            }
            #expect(String(decoding: reply.payload, as: UTF8.self).hasPrefix(#"{"code":460,"data":{},"id":"12""#), "\(params)")
        }

        // The answers: the device SDK's shape, code 200 with the result in `data`.
        let address = broadcast.replyTo
        let answer = AlinkThing.broadcastReply(to: address, speechID: "S1", result: .notFound, message: "speechs file not found")
        #expect(answer.topic == prefix + "thing/service/SpeechBroadcast_reply")
        #expect(
            String(decoding: answer.payload, as: UTF8.self)
                == #"{"code":200,"data":{"error_message":"speechs file not found","result":2,"task_id":"S1"},"id":"10"}"#)
        func receipt(_ state: Receipt.State, error: String? = nil) -> String {
            let receipt = Receipt(device: "T1", order: "S1", state: state, job: 3, error: error, createdAt: 1, keyID: "alibaba")
            return String(decoding: AlinkThing.broadcastReply(receipt, to: address), as: UTF8.self)
        }
        #expect(receipt(.heard) == #"{"code":200,"data":{"error_message":"success","result":0,"task_id":"S1"},"id":"10"}"#)
        #expect(receipt(.failed, error: "muted").contains(#""error_message":"failed: muted","result":3"#))
    }

    /// The push result is the event `SpeechUpdateResponse` with the `jobcode` and `result` 0 or 255 (as the device
    /// SDK posts it); the properties carry `SpeechList` with sizes in KB, as the documentation's example.
    @Test func theEventAndThePropertiesAreThePlatformsShape() throws {
        let done = Receipt(device: "d", order: "J1", state: .installed, job: nil, createdAt: 1, keyID: "", kind: .corpus)
        #expect(
            String(decoding: AlinkThing.speechUpdateEvent(done, number: 4), as: UTF8.self)
                == #"{"id":"4","method":"thing.event.SpeechUpdateResponse.post","params":{"jobcode":"J1","result":0},"version":"1.0"}"#
        )
        var failed = done
        failed.state = .failed
        #expect(String(decoding: AlinkThing.speechUpdateEvent(failed, number: 5), as: UTF8.self).contains(#""result":255"#))
        var corpus = CorpusManifest(version: 3)
        corpus.clips["ZFBDZ"] = .init(file: "ZFBDZ.wav", format: "wav", size: 29164)
        var rules = CorpusRules()
        rules.maximumBytes = 1_048_576
        let properties = String(
            decoding: AlinkThing.properties(corpus, rules: rules, volumePercent: 64, number: 9), as: UTF8.self)
        #expect(
            properties
                == #"{"id":"9","method":"thing.event.property.post","params":{"SpeechList":[{"format":"wav","id":"ZFBDZ","size":28.48046875}],"StorageAvailableCapacity":995.51953125,"StorageTotalCapacity":1024,"Volume":6},"version":"1.0"}"#
        )
        #expect(Self.settings.subscriptions == [
            "/sys/a1X2bEnP82z/example_zc/thing/service/+", "/sys/a1X2bEnP82z/example_zc/rrpc/request/+",
            "/sys/a1X2bEnP82z/example_zc/thing/event/+/post_reply",
        ])
    }

    /// `[alibaba]` in push.toml: the sign-in and the platform's topics replace ours; TLS is required; no keys are.
    @Test func theConfigurationTakesTheTriple() throws {
        let text = """
            socket = "/tmp/s.sock"
            [broker]
            url = "mqtts://a1X2bEnP82z.iot-as-mqtt.cn-shanghai.aliyuncs.com:8883"
            [alibaba]
            product_key = "a1X2bEnP82z"
            device_name = "example_zc"
            device_secret = "XZvZ1295n3mzGFYWHUnjy1xkdHb919C8"
            """
        let configuration = try PushConfiguration.parse(text)
        #expect(configuration.device == "example_zc")
        #expect(configuration.clientID == Self.settings.signIn.clientID)
        #expect(configuration.username == "example_zc&a1X2bEnP82z")
        #expect(configuration.password == Self.settings.signIn.password)
        #expect(configuration.topics == Self.settings.subscriptions)
        #expect(!configuration.statusEnabled)
        #expect(configuration.receiptTopic == "/sys/a1X2bEnP82z/example_zc/thing/event/SpeechUpdateResponse/post")
        let plain = text.replacingOccurrences(of: "mqtts://", with: "mqtt://")
        #expect(throws: AnnounceError.self) { try PushConfiguration.parse(plain) }
        let badName = text.replacingOccurrences(of: "\"example_zc\"", with: "\"a/b\"")
        #expect(throws: AnnounceError.self) { try PushConfiguration.parse(badName) }
    }
}
