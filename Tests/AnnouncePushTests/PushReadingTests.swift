import AnnounceCore
import AnnouncePush
import Foundation
import Testing

/// A push message may say how its amount is read (style, 两); the listener's config may say it for all of them.
struct PushReadingTests {
    static let now: Int64 = 1_795_415_589_123
    let keyring: Keyring

    init() throws {
        keyring = try Keyring(encoded: ["k1": "hex:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"])
    }

    func signed(style: ReadingStyle? = nil, liang: Bool? = nil) throws -> PushMessage {
        let message = PushMessage(
            device: "T1", order: "A-1", amount: .text("12.34"), channel: "alipay", createdAt: Self.now, keyID: "k1",
            style: style, liang: liang)
        return PushSigner.sign(message, key: try #require(keyring.key("k1")))
    }

    func verifier(_ reading: ReadingDefaults.Choice = .init()) -> PushVerifier {
        PushVerifier(device: "T1", keyring: keyring, maximumAgeMs: 600_000, maximumFutureMs: 60_000, reading: reading)
    }

    @Test func styleAndLiangAreSignedLinesOnlyWhenPresent() throws {
        let plain = try signed()
        #expect(!plain.canonical.contains("style=") && !plain.canonical.contains("liang="), "signed as before")
        let chosen = try signed(style: .units, liang: true)
        #expect(chosen.canonical.hasSuffix("refund=false\nstyle=units\nliang=true\ncreated_at=1795415589123"))
        #expect(String(decoding: chosen.payload(), as: UTF8.self).contains("\"style\":\"units\""))
        // Added, changed or removed after signing: the signature no longer matches.
        for change in [
            { (m: inout PushMessage) in m.style = .decimal }, { $0.liang = false }, { $0.style = nil },
        ] {
            var tampered = chosen
            change(&tampered)
            let error = #expect(throws: AnnounceError.self) {
                try verifier().verify(tampered.payload(), nowMs: Self.now)
            }
            #expect(error?.code == .badSignature, "\(tampered.canonical)")
        }
        var added = plain
        added.liang = true
        #expect(throws: AnnounceError.self) { try verifier().verify(added.payload(), nowMs: Self.now) }
    }

    @Test func theMessagesChoiceThenTheListenersGoesToTheDaemon() throws {
        let config = ReadingDefaults.Choice(style: .units, liang: true)
        let own = try verifier(config).verify(signed(style: .decimal, liang: false).payload(), nowMs: Self.now)
        #expect(own.request.style == "decimal" && own.request.liang == false, "the message's own choice")
        let open = try verifier(config).verify(signed().payload(), nowMs: Self.now)
        #expect(open.request.style == "units" && open.request.liang == true, "the listener's [reading]")
        let none = try verifier().verify(signed().payload(), nowMs: Self.now)
        #expect(none.request.style == nil && none.request.liang == nil, "left to the daemon's defaults")
    }

    @Test func aStyleThatIsNotOneIsMalformed() throws {
        var text = String(decoding: try signed().payload(), as: UTF8.self)
        text = text.replacingOccurrences(of: "\"refund\":false", with: "\"refund\":false,\"style\":\"fancy\"")
        let error = #expect(throws: AnnounceError.self) { try verifier().verify(Array(text.utf8), nowMs: Self.now) }
        #expect(error?.code == .malformed && error?.message.contains("style") == true, "\(String(describing: error))")
    }

    @Test func theListenersReadingConfigurationIsChecked() throws {
        let base = """
            device = "T1"
            [broker]
            url = "mqtt://127.0.0.1"
            [keys]
            k1 = "hex:00112233445566778899aabbccddeeff"

            """
        let c = try PushConfiguration.parse(base + "[reading]\nstyle = \"units\"\nliang = true\n")
        #expect(c.reading == ReadingDefaults.Choice(style: .units, liang: true))
        #expect(c.verifier.reading == c.reading)
        for (bad, expected) in [
            ("[reading]\nstyle = \"fancy\"\n", "reading.style"), ("[reading]\nliang = \"yes\"\n", "reading.liang"),
            ("[reading]\ntone = 1\n", "reading.tone: unknown key"),
        ] {
            let error = #expect(throws: AnnounceError.self) { try PushConfiguration.parse(base + bad) }
            #expect(error?.message.contains(expected) == true, "\(String(describing: error))")
        }
    }
}
