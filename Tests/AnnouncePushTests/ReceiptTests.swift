import AnnounceCore
import AnnounceCrypto
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// The receipt format (docs/fleet.md, "Receipts"), without a broker: the canonical text, the signature against
/// openssl and against the documented script, what each field covers, and receipts made from the daemon's jobs.
struct ReceiptTests {
    static let keyHex = "8f3a9c0d5b7e21466f0a1c3e5d7b9f218f3a9c0d5b7e21466f0a1c3e5d7b9f21"
    static var key: HMACKey { HMACKey(PushVerifierBytes.hex(keyHex)) }

    static let heard = Receipt(
        device: "T1000123", order: "2026112300001", state: .heard, job: 57, acceptedAt: 1_795_415_589_372,
        heardAt: 1_795_415_590_870, firstSampleMicros: 7400, createdAt: 1_795_415_590_871, keyID: "k2026a")

    @Test func theCanonicalTextIsTheFieldsInTheirOrder() {
        #expect(
            Self.heard.canonical == """
                announce-receipt/1
                device=T1000123
                kid=k2026a
                order=2026112300001
                state=heard
                original=
                job=57
                accepted_at=1795415589372
                heard_at=1795415590870
                first_sample_us=7400
                error=
                created_at=1795415590871
                """)
        let duplicate = Receipt(
            device: "T1", order: "A", state: .duplicate, original: .failed, job: 3, error: "audio_device",
            createdAt: 5, keyID: "k1")
        #expect(duplicate.canonical.contains("\nstate=duplicate\noriginal=failed\njob=3\naccepted_at=\nheard_at=\n"))
        #expect(duplicate.canonical.hasSuffix("\nerror=audio_device\ncreated_at=5"))
        let refused = Receipt(
            device: "T1", order: "B", state: .refused, job: nil, error: "unknown_channel", createdAt: 5, keyID: "k1")
        #expect(refused.canonical.contains("\nstate=refused\noriginal=\njob=\n"))
        #expect(refused.canonical.hasSuffix("\nerror=unknown_channel\ncreated_at=5"))
        // A code that is not a plain code cannot smuggle a line break into the text.
        #expect(Receipt(device: "T1", order: "B", state: .failed, job: 1, error: "x\ny", createdAt: 1, keyID: "k")
            .error == "other")
    }

    @Test func theSignatureAgreesWithOpenSSL() async throws {
        let file = "/tmp/ann-receipt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try Self.heard.canonical.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try await run(
            "/usr/bin/openssl", ["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(Self.keyHex)", "-r", file])
        #expect(result.status == 0, "\(result)")
        #expect(Self.heard.signed(with: Self.key).signature == String(result.stdout.prefix(64)))
    }

    /// The script docs/fleet.md gives a payment service (examples/verify-receipt.sh, with jq and openssl) accepts a
    /// receipt as published and refuses one altered in any field; docs/fleet.md shows that very script.
    @Test func theDocumentedScriptVerifiesReceipts() async throws {
        let script = "\(Paths.root)/examples/verify-receipt.sh"
        func verify(_ payload: [UInt8]) async throws -> CommandResult {
            let file = "/tmp/ann-receipt-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).json"
            try Data(payload).write(to: URL(fileURLWithPath: file))
            defer { try? FileManager.default.removeItem(atPath: file) }
            return try await run("/bin/sh", ["-c", "\(script) \(Self.keyHex) < \(file)"])
        }
        for receipt in [
            Self.heard,
            Receipt(
                device: "T1", order: "A-1", state: .duplicate, original: .heard, job: 9, acceptedAt: 1, heardAt: 2,
                createdAt: 3, keyID: "k1"),
            Receipt(device: "T1", order: "A-2", state: .failed, job: 4, error: "audio_device", createdAt: 3, keyID: "k1"),
            Receipt(device: "T1", order: "A-3", state: .refused, job: nil, error: "stale", createdAt: 3, keyID: "k1"),
            Receipt(device: "T1", order: "C-1", state: .installed, job: nil, createdAt: 3, keyID: "k1", kind: .corpus, clips: 2),
            Receipt(
                device: "T1", order: "C-2", state: .refused, job: nil, error: "bad_hash", createdAt: 3, keyID: "k1",
                kind: .corpus, clips: 0),
            Receipt(
                repeat: RepeatInfo(order: "R-1", state: .acknowledged, every: 30, times: 10, played: 3, heard: 2),
                duplicate: false, device: "T1", keyID: "k1", createdAt: 3)!,
        ] {
            let signed = receipt.signed(with: Self.key)
            let good = try await verify(signed.payload())
            #expect(good.status == 0 && good.stdout.contains("ok"), "\(good)")
            var altered = signed
            altered.state = .failed
            if receipt.state == .failed { altered.state = .heard }
            #expect(try await verify(altered.payload()).status == 1)
        }
        let document = try String(contentsOfFile: "\(Paths.root)/docs/fleet.md", encoding: .utf8)
        let text = try String(contentsOfFile: script, encoding: .utf8)
        let body = text.split(separator: "\n").drop { $0.hasPrefix("#") }.joined(separator: "\n")
        #expect(document.contains(body), "docs/fleet.md does not show examples/verify-receipt.sh as it is")
    }

    /// Changing any field after signing breaks the signature.
    @Test func everyFieldIsSigned() {
        let signed = Self.heard.signed(with: Self.key)
        #expect(signed.isValid(with: Self.key))
        let changes: [(inout Receipt) -> Void] = [
            { $0.device = "T2" }, { $0.order = "2026112300002" }, { $0.state = .failed }, { $0.original = .heard },
            { $0.job = 58 }, { $0.job = nil }, { $0.acceptedAt = nil }, { $0.heardAt! += 1 },
            { $0.firstSampleMicros = 7401 }, { $0.error = "muted" }, { $0.createdAt += 1 }, { $0.keyID = "k2026b" },
        ]
        for change in changes {
            var copy = signed
            change(&copy)
            #expect(!copy.isValid(with: Self.key), "\(copy.canonical)")
        }
        #expect(!signed.isValid(with: HMACKey([UInt8](repeating: 1, count: 32))))
    }

    @Test func thePayloadReadsBack() throws {
        let signed = Self.heard.signed(with: Self.key)
        let text = String(decoding: signed.payload(), as: UTF8.self)
        #expect(text.hasPrefix("{\"accepted_at\":1795415589372,\"created_at\":1795415590871,\"device\":\"T1000123\""))
        #expect(!text.contains("original") && !text.contains("error"))
        #expect(try Receipt(payload: signed.payload()) == signed)
        #expect(throws: AnnounceError.self) { try Receipt(payload: Array("{\"v\":2}".utf8)) }
    }

    /// A receipt from the daemon's job: its state, its times (ISO 8601 from the daemon, Unix ms here), and for a
    /// duplicate the original's state.
    @Test func receiptsFromJobs() throws {
        var job = JobInfo(id: 12, state: .spoken, order: "O-1")
        job.acceptedAt = WallClock.iso8601(ms: 1_795_415_589_372)
        job.finishedAt = WallClock.iso8601(ms: 1_795_415_590_870)
        job.firstSampleMs = 7.4
        let heard = try #require(
            Receipt(job: job, order: "O-1", duplicate: false, device: "T1", keyID: "k1", createdAt: 9))
        #expect(heard.state == .heard && heard.job == 12 && heard.original == nil && heard.error == nil)
        #expect(heard.acceptedAt == 1_795_415_589_372 && heard.heardAt == 1_795_415_590_870)
        #expect(heard.firstSampleMicros == 7400)

        let again = try #require(Receipt(job: job, order: "O-1", duplicate: true, device: "T1", keyID: "k1", createdAt: 9))
        #expect(again.state == .duplicate && again.original == .heard && again.heardAt == heard.heardAt)

        var failed = job
        failed.state = .failed
        failed.firstSampleMs = nil
        failed.error = ErrorInfo(code: "audio_device", message: "gone")
        let notHeard = try #require(
            Receipt(job: failed, order: "O-1", duplicate: false, device: "T1", keyID: "k1", createdAt: 9))
        #expect(notHeard.state == .failed && notHeard.heardAt == nil && notHeard.error == "audio_device")

        var queued = job
        queued.state = .queued
        #expect(Receipt(job: queued, order: "O-1", duplicate: false, device: "T1", keyID: "k1", createdAt: 9) == nil)
    }

    @Test func theDaemonsTimestampsAreRead() {
        for ms: Int64 in [0, 1, 999, 1_795_415_589_372, 951_782_400_000, 4_102_444_799_999] {
            #expect(ISO8601Milliseconds.parse(WallClock.iso8601(ms: ms)) == ms, "\(WallClock.iso8601(ms: ms))")
        }
        #expect(ISO8601Milliseconds.parse("2026-11-23T06:31:59Z") == 1_795_415_519_000)
        #expect(ISO8601Milliseconds.parse("2026-11-23T06:31:59.5Z") == 1_795_415_519_500)
        for bad in ["", "2026-11-23", "2026-11-23T06:31:59.372", "2026-13-23T06:31:59Z", "2026-11-23 06:31:59Z"] {
            #expect(ISO8601Milliseconds.parse(bad) == nil, "\(bad)")
        }
    }
}

/// Hex text to bytes, for the tests' keys.
enum PushVerifierBytes {
    static func hex(_ text: String) -> [UInt8] {
        let digits = Array(text.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)!
        }
    }
}
