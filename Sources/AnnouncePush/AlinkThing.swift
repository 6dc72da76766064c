import AnnounceCore
import AnnounceCrypto

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// How a device signs in to the Alibaba Cloud IoT Platform's MQTT broker with its "triple" — ProductKey,
/// DeviceName, DeviceSecret — as the platform documents it ("MQTT-TCP连接通信") and its device SDK computes it
/// (aliyun/iotkit-embedded, `IOT_Sign_MQTT`):
///
/// - client id: `<clientId>|securemode=2,signmethod=hmacsha256,timestamp=<ms>|` (`securemode=2`: TLS; `3`: plain
///   TCP), where `<clientId>` is any id of the device's (the SDK's: `ProductKey.DeviceName`);
/// - user name: `<DeviceName>&<ProductKey>`;
/// - password: hex HMAC (SHA-256, or SHA-1 for `signmethod=hmacsha1`) with the DeviceSecret as the key, of
///   `clientId<clientId>deviceName<DeviceName>productKey<ProductKey>timestamp<ms>` (the parameters sorted by
///   name, each name followed by its value).
///
/// The platform's own worked example (hmacsha1) is a test fixture (`AlibabaSignInTests`).
public struct AlibabaSignIn: Sendable, Equatable {
    public enum Method: String, Sendable {
        case hmacsha256, hmacsha1
    }

    public var clientID: String
    public var username: String
    public var password: String

    public init(
        productKey: String, deviceName: String, deviceSecret: String, clientID: String? = nil,
        method: Method = .hmacsha256, timestamp: String, secureMode: Int = 2
    ) {
        let id = clientID ?? "\(productKey).\(deviceName)"
        self.clientID = "\(id)|securemode=\(secureMode),signmethod=\(method.rawValue),timestamp=\(timestamp)|"
        username = "\(deviceName)&\(productKey)"
        let content = Self.content(clientID: id, deviceName: deviceName, productKey: productKey, timestamp: timestamp)
        let key = HMACKey(deviceSecret.utf8)
        let code =
            switch method {
            case .hmacsha256: HMAC.code(.sha256, key: key, message: content.utf8)
            case .hmacsha1: HMAC.code(.sha1, key: key, message: content.utf8)
            }
        password = code.map { cFormat("%02x", UInt32($0)) }.joined()
    }

    /// The text the password signs.
    public static func content(clientID: String, deviceName: String, productKey: String, timestamp: String) -> String {
        "clientId\(clientID)deviceName\(deviceName)productKey\(productKey)timestamp\(timestamp)"
    }
}

/// `[alibaba]` in push.toml: the device's triple and how the thing model is spoken (docs/push.md, "Alibaba Cloud IoT
/// Platform"). Topics are the platform's Alink topics under `/sys/<ProductKey>/<DeviceName>/`.
public struct AlibabaThingSettings: Sendable {
    public struct Options: Sendable {
        /// The `clientId` part of the MQTT client id (default `ProductKey.DeviceName`, as the SDK).
        public var clientID: String?
        public var method = AlibabaSignIn.Method.hmacsha256
        /// The sign-in's timestamp: fixed, as the platform's device SDK signs (`2524608000000`), or `now` (the time
        /// the listener starts).
        public var timestamp = "2524608000000"
        /// The identifier of the "delete all pushed corpus" service: the platform's documentation names the service
        /// but not its identifier (read it in the product's 功能定义 and set it here).
        public var deleteAllService = "DeleteAllSpeech"
        /// The identifier of "replay the last combination broadcast" (使设备重播上一次组合播报内容): not in the public
        /// pages either; the product's 功能定义 says it.
        public var replayService = "SpeechReplay"
        /// The identifiers of "start / stop repeat broadcast" (启动 / 停止重复播报): not in the public pages either.
        public var startRepeatService = "StartRepeatSpeech"
        public var stopRepeatService = "StopRepeatSpeech"
        /// Plain MQTT (`securemode=3`) instead of TLS: for a test bench only.
        public var allowPlainMQTT = false

        public init() {}
    }

    public var productKey: String
    public var deviceName: String
    public var options: Options
    public var signIn: AlibabaSignIn

    public var allowPlainMQTT: Bool { options.allowPlainMQTT }

    public init(productKey: String, deviceName: String, deviceSecret: String, options: Options) throws(AnnounceError) {
        // They become topic levels: no '/', '+', '#', and none of what the sign-in joins with.
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.@:".unicodeScalars)
        for (name, value) in [("product_key", productKey), ("device_name", deviceName)] {
            guard !value.isEmpty, value.unicodeScalars.count <= 64, value.unicodeScalars.allSatisfy(allowed.contains)
            else {
                throw AnnounceError(.badRequest, "alibaba.\(name) must be 1 to 64 of A-Za-z0-9_-.@:")
            }
        }
        guard !deviceSecret.isEmpty else { throw AnnounceError(.badRequest, "alibaba.device_secret is empty") }
        self.productKey = productKey
        self.deviceName = deviceName
        self.options = options
        let timestamp = options.timestamp == "now" ? String(WallClockMs.now) : options.timestamp
        signIn = AlibabaSignIn(
            productKey: productKey, deviceName: deviceName, deviceSecret: deviceSecret, clientID: options.clientID,
            method: options.method, timestamp: timestamp, secureMode: options.allowPlainMQTT ? 3 : 2)
    }

    /// `/sys/<ProductKey>/<DeviceName>/`.
    public var prefix: String { "/sys/\(productKey)/\(deviceName)/" }

    /// What the listener subscribes to: the services the platform invokes, its synchronous calls (RRPC), and its
    /// replies to what the device posts.
    public var subscriptions: [String] {
        [prefix + "thing/service/+", prefix + "rrpc/request/+", prefix + "thing/event/+/post_reply"]
    }

    public func eventTopic(_ identifier: String) -> String { prefix + "thing/event/\(identifier)/post" }
    public var propertyTopic: String { prefix + "thing/event/property/post" }
}

/// The Alibaba Cloud IoT Platform's voice broadcast thing model (千里传音), as a device speaks it over Alink
/// (docs/push.md, "Alibaba Cloud IoT Platform"): service invocations read, and answered on `<topic>_reply` (or an
/// RRPC's response topic) with `{"id","code","data"}`; the push result posted as the event `SpeechUpdateResponse`;
/// properties posted on `thing/event/property/post`.
///
/// What maps onto the corpus push (``CorpusTask``): `SpeechPost` (its `jobcode` is the task id, its `url` the list
/// of clips, fetched when the task runs), `DeleteSpeech` (`speechs: [{id, format}]`) and the delete-all service.
/// What maps onto the daemon's combination (`combine`): `SpeechBroadcast` and its synchronous form
/// `SyncSpeechBroadcast` (RRPC), whose `params` the platform's device SDK reads as `speechs` (corpus ids and `{$…}`
/// amounts, in order), `id` (the speech id: a retry carries the same one) and `format`; and `enforce` (the cloud
/// API's `EnforceFlag`: play through the mute, if the terminal's daemon allows it). The replay service, and start /
/// stop repeat (the daemon's `repeat`: `speechs`, `id`, `interval` seconds, `times`; a stop's `id`, or none for
/// every one). Every other service is answered with code ``notSupported``.
public struct AlinkThing: Sendable {
    public static let speechUpdateEvent = "SpeechUpdateResponse"
    public static let speechPost = "SpeechPost"
    public static let deleteSpeech = "DeleteSpeech"
    public static let speechBroadcast = "SpeechBroadcast"
    public static let syncSpeechBroadcast = "SyncSpeechBroadcast"
    /// The device-defined code (100000–110000, the platform's range for device errors) for a service this device
    /// does not offer yet.
    public static let notSupported = 100_000
    /// The platform's code for parameters the device cannot use.
    public static let badParameters = 460
    /// The `result` of `SpeechUpdateResponse`: done, or not (as the platform's device SDK reports it).
    public static let resultDone = 0
    public static let resultFailed = 255

    public let settings: AlibabaThingSettings
    public let rules: CorpusRules

    public init(settings: AlibabaThingSettings, rules: CorpusRules = CorpusRules()) {
        self.settings = settings
        self.rules = rules
    }

    /// A reply to publish: its topic and bytes.
    public struct Reply: Sendable, Equatable {
        public var topic: String
        public var payload: [UInt8]
    }

    /// A combination broadcast the platform asked for.
    public struct Broadcast: Sendable, Equatable {
        /// `params.id`, the platform's speech id: the order id the daemon de-duplicates on.
        public var speechID: String
        /// What the daemon is asked: `combine`, the parts in the platform's order.
        public var request: Request
        /// `SyncSpeechBroadcast` (or any broadcast by RRPC): answered as soon as the daemon has the job on its disk,
        /// as the platform's device SDK answers it. `SpeechBroadcast`: answered once the broadcast was heard.
        public var synchronous: Bool
        /// Where the answer goes, and the id it carries.
        public var replyTo: ReceiptEntry.ReplyAddress
    }

    /// The `result` of a combination broadcast's answer (in its `data`, with `error_message` and `task_id`): 0, 1 and
    /// 2 as the platform's device SDK answers; 3 is ours.
    public enum BroadcastResult: Int, Sendable {
        /// Heard (`SpeechBroadcast`), or taken (`SyncSpeechBroadcast`).
        case success = 0
        /// The speech id was broadcast before: not spoken again.
        case duplicate = 1
        /// A corpus id that neither the pushed clips nor the voice pack have.
        case notFound = 2
        /// Taken and not heard (failed, expired, cancelled), or refused for another reason (an amount that cannot be
        /// read): `error_message` says which.
        case notHeard = 3
    }

    /// What a message from the platform asks.
    public enum Invocation: Sendable, Equatable {
        /// A corpus push: run `task` (noted under `key`: the same key again is the same invocation), then `reply`.
        case corpus(CorpusTask, key: String, reply: Reply)
        /// A corpus push the terminal's rules refuse (``CorpusRules/judge(_:)``): answered with `reply` (460), and a
        /// `SpeechPost` also gets its result event.
        case refused(CorpusTask, key: String, reply: Reply, error: AnnounceError)
        /// A combination broadcast: handed to the daemon, then answered (``broadcastReply(to:speechID:result:message:)``).
        case broadcast(Broadcast)
        /// "Replay the last combination broadcast": `request` (the daemon's `replay`) handed over, then answered at
        /// `replyTo`.
        case replay(Request, replyTo: ReceiptEntry.ReplyAddress)
        /// Start or stop a repeating notice: `request` (the daemon's `repeat`) handed over, then answered at `replyTo`.
        case repeatCall(Request, replyTo: ReceiptEntry.ReplyAddress)
        /// Answered with `reply` and nothing else: a service not offered, or parameters that cannot be used.
        case answer(Reply, reason: String)
        /// The platform's answer to something the device posted.
        case postReply(code: Int, message: String?)
        /// Nothing to answer (unreadable, or no id to answer to).
        case ignored(String)
    }

    /// What every request has; its `params` are read for the service it invokes (their shapes differ).
    private struct Invoked: Decodable {
        var id: String?
        var method: String?
    }

    private struct WithParams<Params: Decodable>: Decodable {
        var params: Params?
    }

    private struct PostParams: Decodable {
        var jobcode: String?
        var url: String?
    }

    private struct DeleteParams: Decodable {
        var speechs: [Speech]?
    }

    private struct Speech: Decodable {
        var id: String?
        var format: String?
    }

    private struct BroadcastParams: Decodable {
        var speechs: [String]?
        var id: String?
        var format: String?
        var enforce: Flag?
        /// Start repeat: seconds between two times, and how many times at most.
        var interval: Int?
        var times: Int?
    }

    /// A flag given as a boolean or as 0/1.
    private struct Flag: Decodable {
        var value: Bool

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let flag = try? container.decode(Bool.self) {
                value = flag
            } else {
                value = try container.decode(Int.self) != 0
            }
        }
    }

    private struct Response: Decodable {
        var code: Int?
        var message: String?
    }

    /// Reads a message that came on `topic`.
    public func read(topic: String, payload: [UInt8]) -> Invocation {
        let prefix = settings.prefix
        guard topic.hasPrefix(prefix) else { return .ignored("not this device's topic") }
        let path = String(topic.dropFirst(prefix.utf8.count))
        if path.hasPrefix("thing/event/"), path.hasSuffix("/post_reply") {
            guard let response = try? JSONDecoder().decode(Response.self, from: Data(payload)) else {
                return .ignored("an unreadable reply")
            }
            return .postReply(code: response.code ?? 0, message: response.message)
        }
        let replyTopic: String
        let service: String
        if path.hasPrefix("rrpc/request/") {
            replyTopic = prefix + "rrpc/response/" + path.dropFirst("rrpc/request/".utf8.count)
            service = ""
        } else if path.hasPrefix("thing/service/") {
            service = String(path.dropFirst("thing/service/".utf8.count))
            replyTopic = topic + "_reply"
        } else {
            return .ignored("not a service topic")
        }
        guard let invoked = try? JSONDecoder().decode(Invoked.self, from: Data(payload)), let id = invoked.id else {
            return .ignored("not an Alink request with an id")
        }
        // The identifier is the topic's last level, or (RRPC) the method's `thing.service.<identifier>`.
        let identifier =
            service.isEmpty
            ? String((invoked.method ?? "").split(separator: ".").last ?? "") : service
        func reply(_ code: Int, _ message: String? = nil) -> Reply {
            Reply(topic: replyTopic, payload: Self.response(id: id, code: code, message: message))
        }
        func refuse(_ message: String) -> Invocation {
            .answer(reply(Self.badParameters, message), reason: message)
        }
        func corpus(_ task: CorpusTask, key: String) -> Invocation {
            do {
                try rules.judge(task)
            } catch {
                return .refused(task, key: key, reply: reply(Self.badParameters, error.message), error: error)
            }
            return .corpus(task, key: key, reply: reply(200))
        }
        switch identifier {
        case Self.speechPost where !service.isEmpty:
            let params = (try? JSONDecoder().decode(WithParams<PostParams>.self, from: Data(payload)))?.params
            guard let jobcode = params?.jobcode, let url = params?.url else {
                return refuse("SpeechPost needs params.jobcode and params.url")
            }
            guard !jobcode.isEmpty, jobcode.utf8.count <= 128,
                !jobcode.unicodeScalars.contains(where: PushMessage.isControl)
            else { return refuse("params.jobcode must be 1 to 128 printable characters") }
            return corpus(CorpusTask(task: jobcode, op: .put, list: url), key: "jobcode:\(jobcode)")
        case Self.deleteSpeech where !service.isEmpty:
            let params = (try? JSONDecoder().decode(WithParams<DeleteParams>.self, from: Data(payload)))?.params
            guard let speechs = params?.speechs, !speechs.isEmpty else {
                return refuse("DeleteSpeech needs params.speechs: [{\"id\", \"format\"}]")
            }
            let ids = speechs.compactMap(\.id)
            guard ids.count == speechs.count else { return refuse("every params.speechs entry needs an id") }
            return corpus(CorpusTask(task: "alink-\(id)", op: .delete, ids: ids), key: "alink:\(id)")
        case settings.options.deleteAllService where !service.isEmpty:
            return corpus(CorpusTask(task: "alink-\(id)", op: .deleteAll), key: "alink:\(id)")
        case Self.speechBroadcast, Self.syncSpeechBroadcast:
            let usage = "\(identifier) needs params.speechs (corpus ids and {$amount}s, in order) and params.id"
            guard let params = (try? JSONDecoder().decode(WithParams<BroadcastParams>.self, from: Data(payload)))?.params,
                let speechs = params.speechs, let speechID = params.id
            else { return refuse(usage) }
            guard !speechID.isEmpty, speechID.utf8.count <= 128,
                !speechID.unicodeScalars.contains(where: PushMessage.isControl)
            else { return refuse("params.id must be 1 to 128 printable characters") }
            guard (1...CombinationPart.maximumCount).contains(speechs.count),
                speechs.allSatisfy({
                    !$0.isEmpty && $0.count <= 64 && !$0.unicodeScalars.contains(where: PushMessage.isControl)
                })
            else {
                return refuse(
                    "params.speechs must hold 1 to \(CombinationPart.maximumCount) items of 1 to 64 printable characters")
            }
            let request = Request(
                id: "alink-\(id)", op: "combine", order: speechID, parts: speechs.map(Request.Part.init(listItem:)),
                enforce: params.enforce?.value == true ? true : nil)
            return .broadcast(
                Broadcast(
                    speechID: speechID, request: request,
                    synchronous: identifier == Self.syncSpeechBroadcast || service.isEmpty,
                    replyTo: ReceiptEntry.ReplyAddress(topic: replyTopic, id: id)))
        case settings.options.startRepeatService where !service.isEmpty:
            let usage = "\(identifier) needs params.speechs (corpus ids and {$amount}s), params.id and params.interval"
            guard let params = (try? JSONDecoder().decode(WithParams<BroadcastParams>.self, from: Data(payload)))?.params,
                let speechs = params.speechs, let speechID = params.id, let interval = params.interval
            else { return refuse(usage) }
            guard !speechID.isEmpty, speechID.utf8.count <= 120,
                !speechID.unicodeScalars.contains(where: PushMessage.isControl),
                (1...CombinationPart.maximumCount).contains(speechs.count),
                speechs.allSatisfy({
                    !$0.isEmpty && $0.count <= 64 && !$0.unicodeScalars.contains(where: PushMessage.isControl)
                })
            else { return refuse(usage + " (an id of 1 to 120 printable characters, 1 to 32 speechs)") }
            // The daemon checks interval and times, and answers what it cannot use (460 with its message).
            var request = Request(
                id: "alink-\(id)", op: "repeat", order: speechID, parts: speechs.map(Request.Part.init(listItem:)),
                enforce: params.enforce?.value == true ? true : nil)
            request.every = Double(interval)
            request.times = params.times
            return .repeatCall(request, replyTo: ReceiptEntry.ReplyAddress(topic: replyTopic, id: id))
        case settings.options.stopRepeatService where !service.isEmpty:
            let params = (try? JSONDecoder().decode(WithParams<BroadcastParams>.self, from: Data(payload)))?.params
            var request = Request(id: "alink-\(id)", op: "repeat", order: params?.id)
            request.stop = true
            if params?.id == nil { request.all = true }
            return .repeatCall(request, replyTo: ReceiptEntry.ReplyAddress(topic: replyTopic, id: id))
        case settings.options.replayService:
            // Spoken in turn like a payment (never before one); once per call (its id is the order).
            let request = Request(
                id: "alink-\(id)", op: "replay", order: "alink-replay:\(id)", priority: JobPriority.payment.rawValue,
                kind: ReplayKind.combination.rawValue)
            return .replay(request, replyTo: ReceiptEntry.ReplyAddress(topic: replyTopic, id: id))
        default:
            let name = identifier.isEmpty ? (invoked.method ?? "?") : identifier
            let message =
                "not supported: \(name) (this device takes SpeechPost, SpeechBroadcast, SyncSpeechBroadcast, "
                + "DeleteSpeech, \(settings.options.deleteAllService), \(settings.options.replayService), "
                + "\(settings.options.startRepeatService) and \(settings.options.stopRepeatService))"
            return .answer(reply(Self.notSupported, message), reason: message)
        }
    }

    /// A combination broadcast's answer: code 200, and in its `data` the `result`, an `error_message` ("success" when
    /// it is one) and the speech id as `task_id` — the shape of the platform's device SDK.
    public static func broadcastReply(
        to address: ReceiptEntry.ReplyAddress, speechID: String, result: BroadcastResult, message: String
    ) -> Reply {
        struct Wire: Encodable {
            struct Outcome: Encodable {
                var error_message: String
                var result: Int
                var task_id: String
            }
            var code = 200
            var data: Outcome
            var id: String
        }
        let wire = Wire(data: Wire.Outcome(error_message: message, result: result.rawValue, task_id: speechID), id: address.id)
        return Reply(topic: address.topic, payload: encode(wire))
    }

    /// The answer to a `SpeechBroadcast` once its job's receipt is made: `success` when heard, `duplicate`, or
    /// `notHeard` with the state (and the daemon's reason).
    public static func broadcastReply(_ receipt: Receipt, to address: ReceiptEntry.ReplyAddress) -> [UInt8] {
        let (result, message): (BroadcastResult, String) =
            switch receipt.state {
            case .heard: (.success, "success")
            case .duplicate: (.duplicate, "duplicate speech id (broadcast before: \(receipt.original?.rawValue ?? "?"))")
            default: (.notHeard, receipt.error.map { "\(receipt.state.rawValue): \($0)" } ?? receipt.state.rawValue)
            }
        return broadcastReply(to: address, speechID: receipt.order, result: result, message: message).payload
    }

    /// A reply at `address`: `code` 200 (and `{}`), or another code with its message.
    public static func reply(to address: ReceiptEntry.ReplyAddress, code: Int, message: String? = nil) -> Reply {
        Reply(topic: address.topic, payload: response(id: address.id, code: code, message: message))
    }

    /// The device-defined code for "there is nothing to replay" (no combination broadcast spoken yet).
    public static let nothingToReplay = 100_001

    /// The same reply (topic, id) with another code and message.
    public func answer(_ reply: Reply, code: Int, message: String) -> Reply {
        struct Identified: Decodable { var id: String }
        let id = (try? JSONDecoder().decode(Identified.self, from: Data(reply.payload)))?.id ?? ""
        return Reply(topic: reply.topic, payload: Self.response(id: id, code: code, message: message))
    }

    /// `{"code":…,"data":{},"id":"…"}`, with `message` when it is not a success.
    static func response(id: String, code: Int, message: String?) -> [UInt8] {
        struct Wire: Encodable {
            struct Empty: Encodable {}
            var code: Int
            var data = Empty()
            var id: String
            var message: String?
        }
        return encode(Wire(code: code, id: id, message: message))
    }

    /// A corpus push's receipt as the platform wants it: the event `SpeechUpdateResponse` with the task's `jobcode`
    /// and `result` 0 (done) or 255 (not). `number` is the event's `id`.
    public static func speechUpdateEvent(_ receipt: Receipt, number: UInt64) -> [UInt8] {
        struct Params: Encodable {
            var jobcode: String
            var result: Int
        }
        let done = receipt.state == .installed || receipt.state == .deleted
        return post(
            method: "thing.event.\(speechUpdateEvent).post", number: number,
            params: Params(jobcode: receipt.order, result: done ? resultDone : resultFailed))
    }

    /// The properties the voice broadcast model defines that this device knows: `SpeechList` (every pushed clip:
    /// `id`, `format`, `size` in KB), `StorageTotalCapacity` and `StorageAvailableCapacity` (KB, the pushed clips'
    /// allowance and what is left of it), and `Volume` (0–10) when the daemon says.
    public static func properties(
        _ corpus: CorpusManifest, rules: CorpusRules, volumePercent: Int?, number: UInt64
    ) -> [UInt8] {
        struct Speech: Encodable {
            var format: String
            var id: String
            var size: Double
        }
        struct Params: Encodable {
            var SpeechList: [Speech]
            var StorageAvailableCapacity: Double
            var StorageTotalCapacity: Double
            var Volume: Int?
        }
        let list = corpus.clips.sorted { $0.key < $1.key }.map {
            Speech(format: $0.value.format, id: $0.key, size: Double($0.value.size) / 1024)
        }
        let params = Params(
            SpeechList: list, StorageAvailableCapacity: Double(max(0, rules.maximumBytes - corpus.bytes)) / 1024,
            StorageTotalCapacity: Double(rules.maximumBytes) / 1024,
            Volume: volumePercent.map { min(10, max(0, Int((Double($0) / 10).rounded()))) })
        return post(method: "thing.event.property.post", number: number, params: params)
    }

    /// `{"id","method","params","version":"1.0"}`: what a device posts.
    private struct Post<Params: Encodable>: Encodable {
        var id: String
        var method: String
        var params: Params
        var version = "1.0"
    }

    private static func post<P: Encodable>(method: String, number: UInt64, params: P) -> [UInt8] {
        encode(Post(id: String(number), method: method, params: params))
    }

    private static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data())
    }
}
