import AnnounceCore
import AnnounceCrypto
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// The message format, its canonical text, the signature and the time window: pure logic, no broker, no C.
struct SignatureTests {
    static let keyHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
    static let now: Int64 = 1_795_415_589_123

    let keyring: Keyring
    let verifier: PushVerifier

    init() throws {
        keyring = try Keyring(encoded: ["k1": "hex:\(Self.keyHex)"])
        verifier = PushVerifier(device: "T1", keyring: keyring, maximumAgeMs: 600_000, maximumFutureMs: 60_000)
    }

    func message(
        order: String = "A-0001", amount: PushAmount = .text("100.00"), channel: String = "alipay",
        refund: Bool = false, createdAt: Int64 = now, device: String = "T1", kid: String = "k1"
    ) -> PushMessage {
        PushMessage(
            device: device, order: order, amount: amount, currency: "CNY", channel: channel, refund: refund,
            createdAt: createdAt, keyID: kid)
    }

    func signed(_ message: PushMessage) throws -> PushMessage {
        PushSigner.sign(message, key: try #require(keyring.key(message.keyID)))
    }

    /// The canonical text is the documented one (docs/push.md): fixed order, defaults filled in.
    @Test func canonicalTextIsTheDocumentedOne() {
        #expect(
            message().canonical
                == "announce-push/1\ndevice=T1\nkid=k1\norder=A-0001\namount=100.00\ncurrency=CNY\nchannel=alipay\n"
                + "refund=false\ncreated_at=1795415589123")
        #expect(message(amount: .fen(10000), refund: true).canonical.contains("\nfen=10000\n"))
        #expect(message(amount: .fen(10000), refund: true).canonical.contains("\nrefund=true\n"))
    }

    /// Our HMAC agrees with an independent implementation (openssl), so a payment service in any language that
    /// follows docs/push.md produces signatures the listener accepts.
    @Test func signatureAgreesWithOpenSSL() async throws {
        let text = message().canonical
        let file = "/tmp/ann-canonical-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try await run(
            "/usr/bin/openssl", ["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(Self.keyHex)", "-r", file])
        #expect(result.status == 0, "\(result)")
        let openssl = String(result.stdout.prefix(64))
        #expect(try signed(message()).signature == openssl)
    }

    @Test func signedMessageIsAcceptedAndBecomesASayWithTheOrder() throws {
        let payment = try verifier.verify(signed(message()).payload(), nowMs: Self.now + 1000)
        #expect(payment.amount == (try Amount(parsing: "100.00")))
        #expect(payment.request.op == "say")
        #expect(payment.request.order == "A-0001")
        #expect(payment.request.fen == 10000)
        #expect(payment.request.channel == "alipay")
        #expect(payment.request.refund == false)
        let fen = try verifier.verify(signed(message(amount: .fen(850), refund: true)).payload(), nowMs: Self.now)
        #expect(fen.amount?.fen == 850)
        #expect(fen.request.refund == true)
    }

    /// A combination (docs/push.md, "Combination broadcast"): `parts` instead of an amount, signed in a `parts` line of
    /// its own (no channel or refund line), forwarded as the daemon's `combine` with the order as its id.
    /// `enforce` (play through the mute) is signed when present, and asked of the daemon; a message without it is
    /// signed as before it existed.
    @Test func enforceIsSignedAndAskedOfTheDaemon() throws {
        var payment = message(order: "E-1")
        #expect(!payment.canonical.contains("enforce"))
        payment.enforce = true
        #expect(payment.canonical.hasSuffix("\nenforce=true\ncreated_at=1795415589123"), "\(payment.canonical)")
        let original = try signed(payment)
        let verified = try verifier.verify(original.payload(), nowMs: Self.now)
        #expect(verified.request.enforce == true && verified.request.op == "say")
        var stripped = original
        stripped.enforce = nil
        let error = #expect(throws: AnnounceError.self) { try verifier.verify(stripped.payload(), nowMs: Self.now) }
        #expect(error?.code == .badSignature)
    }

    /// A combination's class, a repeat's `every` and `times`: signed lines when present, asked of the daemon as the
    /// notice class and its `repeat`; a stop and a replay sign only what they ask.
    @Test func classRepeatsStopsAndReplaysAreSignedAndAskedOfTheDaemon() throws {
        var notice = message(order: "N-1")
        notice.amount = nil
        notice.parts = ["new-order"]
        notice.noticeClass = .notice
        #expect(notice.canonical.hasSuffix("\ncurrency=CNY\nclass=notice\ncreated_at=1795415589123"), "\(notice.canonical)")
        var verified = try verifier.verify(try signed(notice).payload(), nowMs: Self.now)
        #expect(verified.request.op == "combine" && verified.request.priority == "notice")

        var repeating = notice
        repeating.order = "T-17"
        repeating.noticeClass = nil
        repeating.every = 30
        repeating.times = 4
        #expect(repeating.canonical.hasSuffix("\nevery=30\ntimes=4\ncreated_at=1795415589123"), "\(repeating.canonical)")
        let original = try signed(repeating)
        verified = try verifier.verify(original.payload(), nowMs: Self.now)
        #expect(verified.message.kind == .repeatStart)
        #expect(verified.request.op == "repeat" && verified.request.order == "T-17")
        #expect(verified.request.every == 30 && verified.request.times == 4 && verified.request.parts?.count == 1)
        for change in [{ (m: inout PushMessage) in m.every = 31 }, { $0.times = nil }, { $0.every = nil }] {
            var copy = original
            change(&copy)
            let error = #expect(throws: AnnounceError.self) { try verifier.verify(copy.payload(), nowMs: Self.now) }
            #expect(error?.code == .badSignature || error?.code == .malformed, "\(copy.canonical)")
        }

        var stop = PushMessage(device: "T1", order: "T-17", amount: nil, createdAt: Self.now, keyID: "k1")
        stop.stop = true
        #expect(stop.canonical == "announce-push/1\ndevice=T1\nkid=k1\norder=T-17\nstop=true\ncreated_at=\(Self.now)")
        let stopPayload = try signed(stop).payload()
        #expect(String(decoding: stopPayload, as: UTF8.self).contains(#""stop":true"#))
        verified = try verifier.verify(stopPayload, nowMs: Self.now)
        #expect(verified.request.op == "repeat" && verified.request.stop == true && verified.request.order == "T-17")

        var replay = PushMessage(device: "T1", order: "RL-1", amount: nil, createdAt: Self.now, keyID: "k1")
        replay.replay = .combination
        verified = try verifier.verify(try signed(replay).payload(), nowMs: Self.now)
        #expect(verified.request.op == "replay" && verified.request.kind == "combination")
        #expect(verified.request.order == "RL-1", "heard once per order id")

        // Bad shapes: refused as malformed before the signature is looked at.
        for (text, reason) in [
            (#""stop":false"#, "must be true"), (#""stop":true,"amount":"1.00""#, "only v, device"),
            (#""replay":"payment""#, "\"combination\""), (#""parts":["a"],"every":0,"currency":"CNY""#, "1 to 3600"),
            (#""parts":["a"],"every":5,"class":"payment","currency":"CNY""#, "is a notice"),
            (#""amount":"1.00","class":"notice","currency":"CNY""#, "belong to a combination"),
            (#""parts":["a"],"times":3,"currency":"CNY""#, "belongs to a repeat"),
        ] {
            let payload = #"{"v":1,"device":"T1","order":"X","created_at":1,"kid":"k1","sig":""# + String(repeating: "a", count: 64)
                + #"","# + text + "}"
            let error = #expect(throws: AnnounceError.self) { try PushMessage(payload: Array(payload.utf8)) }
            #expect(error?.code == .malformed && error?.message.contains(reason) == true, "\(text): \(String(describing: error))")
        }
    }

    @Test func aSignedCombinationBecomesACombineWithItsParts() throws {
        var combination = message(order: "SP-1")
        combination.amount = nil
        combination.parts = ["new-order", "{#0423}", "{$12.50}"]
        #expect(
            combination.canonical
                == "announce-push/1\ndevice=T1\nkid=k1\norder=SP-1\nparts=new-order|{#0423}|{$12.50}\ncurrency=CNY\n"
                + "created_at=1795415589123")
        let payload = try signed(combination).payload()
        let text = String(decoding: payload, as: UTF8.self)
        #expect(!text.contains("channel") && !text.contains("refund") && !text.contains("amount"), "\(text)")
        let verified = try verifier.verify(payload, nowMs: Self.now)
        #expect(verified.amount == nil)
        #expect(verified.request.op == "combine" && verified.request.order == "SP-1")
        #expect(
            verified.request.parts == [.init(clip: "new-order"), .init(digits: "0423"), .init(amount: "12.50")])
        // Each part is signed: another part, another order of parts, one part fewer: a bad signature.
        let original = try signed(combination)
        for change in [
            { (m: inout PushMessage) in m.parts = ["new-order", "{#0424}", "{$12.50}"] },
            { $0.parts = ["{#0423}", "new-order", "{$12.50}"] }, { $0.parts = ["new-order", "{#0423}"] },
            { $0.parts = ["new-order|{#0423}", "{$12.50}"] },
        ] {
            var copy = original
            change(&copy)
            let error = #expect(throws: AnnounceError.self) { try verifier.verify(copy.payload(), nowMs: Self.now) }
            #expect(error?.code == .badSignature || error?.code == .malformed, "\(copy.canonical)")
        }
        // Shapes refused before the signature is looked at.
        func variant(_ transform: (inout [String: Any]) -> Void) throws -> [UInt8] {
            var object = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
            transform(&object)
            return Array(try JSONSerialization.data(withJSONObject: object))
        }
        let cases: [(String, [UInt8])] = [
            ("parts and amount", try variant { $0["amount"] = "1.00" }),
            ("parts and a channel", try variant { $0["channel"] = "alipay" }),
            ("parts and refund", try variant { $0["refund"] = false }),
            ("no parts", try variant { $0["parts"] = [String]() }),
            ("a part with |", try variant { $0["parts"] = ["a|b"] }),
            ("a part with a newline", try variant { $0["parts"] = ["a\nb"] }),
            ("an empty part", try variant { $0["parts"] = [""] }),
            ("too many parts", try variant { $0["parts"] = Array(repeating: "a", count: 33) }),
        ]
        for (name, bytes) in cases {
            let error = #expect(throws: AnnounceError.self, "\(name)") { try verifier.verify(bytes, nowMs: Self.now) }
            #expect(error?.code == .malformed, "\(name): \(String(describing: error))")
        }
    }

    /// Changing any signed field after signing breaks the signature.
    @Test func everyFieldIsCoveredBySignature() throws {
        let original = try signed(message())
        var tampered: [PushMessage] = []
        for change in [
            { (m: inout PushMessage) in m.order = "A-0002" }, { $0.amount = .text("1000.00") },
            { $0.amount = .fen(10000) }, { $0.currency = "USD" }, { $0.channel = "wechat" }, { $0.refund = true },
            { $0.createdAt += 1 },
        ] {
            var copy = original
            change(&copy)
            tampered.append(copy)
        }
        let wide = PushVerifier(
            device: "T1", keyring: keyring, maximumAgeMs: 600_000, maximumFutureMs: 60_000, currencies: ["CNY", "USD"])
        for message in tampered {
            let error = #expect(throws: AnnounceError.self) { try wide.verify(message.payload(), nowMs: Self.now) }
            #expect(error?.code == .badSignature, "\(message.canonical)")
        }
    }

    @Test func forgedUnknownKeyAndWrongDeviceAreRefusedWithTheirReasons() throws {
        var forged = try signed(message())
        forged.signature = String(repeating: "ab", count: 32)
        #expect(code { try verifier.verify(forged.payload(), nowMs: Self.now) } == .badSignature)

        // Signed with another key under the right id.
        let other = PushSigner.sign(message(), key: HMACKey(Array(repeating: UInt8(7), count: 32)))
        #expect(code { try verifier.verify(other.payload(), nowMs: Self.now) } == .badSignature)

        let unknown = PushSigner.sign(message(kid: "k9"), key: try #require(keyring.key("k1")))
        #expect(code { try verifier.verify(unknown.payload(), nowMs: Self.now) } == .unknownKey)

        // Properly signed with this key, but for another device.
        let elsewhere = try signed(message(device: "T2"))
        #expect(code { try verifier.verify(elsewhere.payload(), nowMs: Self.now) } == .wrongDevice)
    }

    /// The window: exactly max age old and exactly max skew ahead are accepted, one millisecond more is not.
    @Test func timestampWindowEdges() throws {
        let payload = try signed(message()).payload()
        #expect(throws: Never.self) { try verifier.verify(payload, nowMs: Self.now + 600_000) }
        #expect(code { try verifier.verify(payload, nowMs: Self.now + 600_001) } == .stale)
        #expect(throws: Never.self) { try verifier.verify(payload, nowMs: Self.now - 60_000) }
        #expect(code { try verifier.verify(payload, nowMs: Self.now - 60_001) } == .future)
        #expect(code { try verifier.verify(payload, nowMs: Self.now + 86_400_000) } == .stale)
    }

    /// A key ring with two keys accepts both during a rotation; once the old one is removed, its messages are refused.
    @Test func keyRotation() throws {
        let rotating = try Keyring(encoded: [
            "k1": "hex:\(Self.keyHex)", "k2": "base64:\(Data(repeating: 9, count: 32).base64EncodedString())",
        ])
        let during = PushVerifier(device: "T1", keyring: rotating, maximumAgeMs: 600_000, maximumFutureMs: 60_000)
        let old = PushSigner.sign(message(kid: "k1"), key: try #require(rotating.key("k1")))
        let new = PushSigner.sign(message(kid: "k2"), key: try #require(rotating.key("k2")))
        #expect(throws: Never.self) { try during.verify(old.payload(), nowMs: Self.now) }
        #expect(throws: Never.self) { try during.verify(new.payload(), nowMs: Self.now) }
        let after = PushVerifier(
            device: "T1",
            keyring: try Keyring(encoded: ["k2": "base64:\(Data(repeating: 9, count: 32).base64EncodedString())"]),
            maximumAgeMs: 600_000, maximumFutureMs: 60_000)
        #expect(code { try after.verify(old.payload(), nowMs: Self.now) } == .unknownKey)
        #expect(throws: Never.self) { try after.verify(new.payload(), nowMs: Self.now) }
    }

    @Test func malformedPayloadsAreRefusedWithAReason() throws {
        let good = String(decoding: try signed(message()).payload(), as: UTF8.self)
        func variant(_ transform: (inout [String: Any]) -> Void) -> [UInt8] {
            var object = (try? JSONSerialization.jsonObject(with: Data(good.utf8))) as? [String: Any] ?? [:]
            transform(&object)
            return Array((try? JSONSerialization.data(withJSONObject: object)) ?? Data())
        }
        let cases: [(String, [UInt8])] = [
            ("not JSON", Array("garbage \u{1}\u{2}".utf8)),
            ("a JSON array", Array("[1,2]".utf8)),
            ("empty", []),
            ("too long", Array(repeating: UInt8(ascii: " "), count: PushMessage.maximumPayloadBytes + 1)),
            ("no order", variant { $0["order"] = nil }),
            ("no signature", variant { $0["sig"] = nil }),
            ("no created_at", variant { $0["created_at"] = nil }),
            ("no amount", variant { $0["amount"] = nil }),
            ("amount and fen", variant { $0["fen"] = 10000 }),
            ("amount a number", variant { $0["amount"] = 100 }),
            ("refund a string", variant { $0["refund"] = "yes" }),
            ("created_at a string", variant { $0["created_at"] = "yesterday" }),
            ("newline in order", variant { $0["order"] = "A\ndevice=T2" }),
            ("newline in amount", variant { $0["amount"] = "100.00\nchannel=x" }),
            ("order too long", variant { $0["order"] = String(repeating: "9", count: 65) }),
            ("bad channel", variant { $0["channel"] = "Ali Pay" }),
            ("bad currency", variant { $0["currency"] = "yuan" }),
            ("short signature", variant { $0["sig"] = "abcd" }),
            ("version 2", variant { $0["v"] = 2 }),
        ]
        for (name, payload) in cases {
            let error = #expect(throws: AnnounceError.self, "\(name)") { try verifier.verify(payload, nowMs: Self.now) }
            #expect(error?.code == .malformed, "\(name): \(String(describing: error))")
            #expect(error?.message.isEmpty == false)
        }
    }

    /// Signed, but the amount cannot be spoken: refused here with the amount reader's own reason.
    @Test func unreadableAmountsAreRefused() throws {
        for amount in ["abc", "0", "-5", "1.234", "1e5"] {
            let payload = try signed(message(amount: .text(amount))).payload()
            #expect(code { try verifier.verify(payload, nowMs: Self.now) } == .invalidAmount, "\(amount)")
        }
        #expect(
            code { try verifier.verify(try signed(message(amount: .fen(0))).payload(), nowMs: Self.now) }
                == .invalidAmount)
    }

    /// Signed, in a currency not spoken here: refused with a code of its own (after the signature: a `refused`
    /// receipt tells the service), not as `malformed` (which is refused before it, and gets none).
    @Test func unsupportedCurrencyIsRefused() throws {
        var usd = message()
        usd.currency = "USD"
        #expect(code { try verifier.verify(try signed(usd).payload(), nowMs: Self.now) } == .unsupportedCurrency)
    }

    /// ``PushVerifier/verify(_:nowMs:)`` is ``PushVerifier/authenticate(_:)`` (who sent it: no receipt when that
    /// fails) then ``PushVerifier/judge(_:nowMs:)`` (whether it can be spoken: a `refused` receipt when not); only
    /// the window's codes wait for a trusted clock.
    @Test func authenticatingComesBeforeJudging() throws {
        var stale = message()
        stale.createdAt = Self.now - 3_600_000
        let forged = PushSigner.sign(stale, key: HMACKey([UInt8](repeating: 0xab, count: 32)))
        #expect(code { try verifier.verify(forged, nowMs: Self.now) } == .badSignature)
        let signed = try signed(stale)
        #expect(throws: Never.self) { try verifier.authenticate(signed) }
        #expect(code { try verifier.judge(signed, nowMs: Self.now) } == .stale)
        #expect(PushVerifier.isTimeWindow(.stale) && PushVerifier.isTimeWindow(.future))
        #expect(!PushVerifier.isTimeWindow(.invalidAmount) && !PushVerifier.isTimeWindow(.unsupportedCurrency))
    }

    @Test func keysMustBeLongEnoughAndWellFormed() {
        #expect(throws: AnnounceError.self) { try Keyring(encoded: ["k1": "hex:0011"]) }
        #expect(throws: AnnounceError.self) { try Keyring(encoded: ["k1": "hex:xyz"]) }
        #expect(throws: AnnounceError.self) { try Keyring(encoded: ["k1": "plain-text-secret-of-some-length"]) }
        #expect(throws: AnnounceError.self) { try Keyring(encoded: ["bad id": "hex:\(Self.keyHex)"]) }
    }

    private func code(_ body: () throws -> VerifiedPayment) -> AnnounceError.Code? {
        do {
            _ = try body()
            return nil
        } catch let error as AnnounceError {
            return error.code
        } catch {
            return nil
        }
    }
}
