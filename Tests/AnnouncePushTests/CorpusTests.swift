import AnnounceCore
import AnnouncePush
import AnnounceTestSupport
import Foundation
import Testing

/// Corpus pushes on our channel without a broker: the message and its signed text, what is refused and why, and
/// the store's atomic versions (docs/push.md, "Corpus push").
struct CorpusTests {
    static let keyHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
    static let now: Int64 = 1_795_415_589_123
    static let hash = String(repeating: "ab", count: 32)

    let verifier: PushVerifier

    init() throws {
        verifier = PushVerifier(
            device: "T1", keyring: try Keyring(encoded: ["k1": "hex:\(Self.keyHex)"]), maximumAgeMs: 600_000,
            maximumFutureMs: 60_000)
    }

    static func put(_ clips: [CorpusTask.Clip] = [clip()], task: String = "C-1") -> CorpusMessage {
        CorpusMessage(device: "T1", keyID: "k1", task: CorpusTask(task: task, op: .put, clips: clips), createdAt: now)
    }

    static func clip(
        _ id: String = "new_order", url: String = "https://cdn.example.com/c/new_order.wav", format: String = "wav",
        size: Int = 23456
    ) -> CorpusTask.Clip {
        CorpusTask.Clip(id: id, url: url, format: format, size: size, sha256: hash)
    }

    static func signed(_ message: CorpusMessage) -> CorpusMessage {
        CorpusSigner.sign(message, key: PushVerifierBytes.hex(keyHex))
    }

    /// The signed text is the documented one, and openssl's HMAC of it is the signature.
    @Test func theSignedTextIsTheDocumentedOneAndAgreesWithOpenSSL() async throws {
        let message = Self.put()
        #expect(
            message.canonical
                == """
                announce-corpus/1
                device=T1
                kid=k1
                task=C-1
                op=put
                clip=new_order
                format=wav
                size=23456
                sha256=\(Self.hash)
                url=https://cdn.example.com/c/new_order.wav
                created_at=1795415589123
                """)
        let deletion = CorpusMessage(
            device: "T1", keyID: "k1", task: CorpusTask(task: "C-2", op: .delete, ids: ["a", "b"]), createdAt: 5)
        #expect(deletion.canonical == "announce-corpus/1\ndevice=T1\nkid=k1\ntask=C-2\nop=delete\ndelete=a\ndelete=b\ncreated_at=5")
        let file = "/tmp/ann-corpus-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try message.canonical.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try await run(
            "/usr/bin/openssl", ["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(Self.keyHex)", "-r", file])
        #expect(Self.signed(message).signature == String(result.stdout.prefix(64)), "\(result)")
    }

    /// A signed message reads back as it was, passes the signature check, and any field changed after signing
    /// fails it.
    @Test func everyFieldIsSigned() throws {
        let signed = Self.signed(Self.put([Self.clip(), Self.clip("urged", size: 9)]))
        let read = try CorpusMessage(payload: signed.payload())
        #expect(read == signed)
        try verifier.authenticate(read)
        let changes: [(inout CorpusMessage) -> Void] = [
            { $0.device = "T2" }, { $0.task.task = "C-9" }, { $0.createdAt += 1 }, { $0.task.clips[0].id = "x" },
            { $0.task.clips[0].url += "?" }, { $0.task.clips[0].size += 1 }, { $0.task.clips[0].format = "mp3" },
            { $0.task.clips[0].sha256 = String(repeating: "cd", count: 32) }, { $0.task.clips.removeLast() },
            { $0.task.op = .deleteAll },
        ]
        for change in changes {
            var altered = signed
            change(&altered)
            #expect(throws: AnnounceError.self) { try verifier.authenticate(altered) }
        }
        #expect(CorpusMessage.kind(of: signed.payload()) == "corpus")
        #expect(CorpusMessage.kind(of: Array(#"{"v":1,"order":"A"}"#.utf8)) == nil)
    }

    /// What cannot be read as a corpus message is `malformed` before anything else: no receipt can be owed for it.
    @Test(arguments: [
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"put","created_at":1,"sig":"SIG"}"#,
        #"{"v":2,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"delete_all","created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"wipe","created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"delete","ids":[],"created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"delete_all","ids":["a"],"created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"delete","ids":["a\nurl=x"],"created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C/1","op":"delete_all","created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"put","clips":[{"id":"a","url":"https://x/a","format":"wav","size":1,"sha256":"00"}],"created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"put","clips":[{"id":"a","format":"wav","size":1,"sha256":"HASH"}],"created_at":1,"sig":"SIG"}"#,
        #"{"v":1,"kind":"corpus","device":"T1","kid":"k1","task":"C","op":"delete_all","created_at":1}"#,
        #"{"v":1,"device":"T1","kid":"k1","task":"C","op":"delete_all","created_at":1,"sig":"SIG"}"#,
    ])
    func malformedMessagesAreRefused(_ text: String) {
        let payload = text.replacingOccurrences(of: "SIG", with: String(repeating: "0", count: 64))
            .replacingOccurrences(of: "HASH", with: Self.hash)
        #expect(throws: AnnounceError.self) { try CorpusMessage(payload: Array(payload.utf8)) }
        do {
            _ = try CorpusMessage(payload: Array(payload.utf8))
        } catch {
            #expect(error.code == .malformed, "\(error)")
        }
    }

    /// A correctly signed push the terminal will not do is refused with the reason its receipt carries: a corpus id
    /// is a name, never a path; only https (unless allowed); known formats; sizes and counts within the limits.
    @Test func theRulesRefuseWithAReason() throws {
        var rules = CorpusRules()
        rules.maximumClips = 2
        rules.maximumClipBytes = 1000
        rules.maximumBytes = 1500
        func code(_ task: CorpusTask) -> String? {
            do {
                try rules.judge(task)
                return nil
            } catch {
                return error.code.rawValue
            }
        }
        func put(_ clips: CorpusTask.Clip...) -> CorpusTask { CorpusTask(task: "C", op: .put, clips: clips) }
        #expect(code(put(Self.clip(size: 900))) == nil)
        for id in ["../x", "a/b", "..", ".", ".hidden", "", "a b", "语料", String(repeating: "a", count: 65)] {
            #expect(code(put(Self.clip(id, size: 9))) == "bad_id", "\(id)")
            #expect(code(CorpusTask(task: "C", op: .delete, ids: [id])) == "bad_id", "\(id)")
        }
        #expect(code(put(Self.clip("a", size: 9), Self.clip("a", size: 9))) == "bad_id")
        #expect(code(put(Self.clip(format: "exe", size: 9))) == "bad_format")
        #expect(code(put(Self.clip(size: 0))) == "too_large")
        #expect(code(put(Self.clip(size: 1001))) == "too_large")
        #expect(code(put(Self.clip("a", size: 800), Self.clip("b", size: 800))) == "too_many")
        #expect(code(put(Self.clip("a", size: 1), Self.clip("b", size: 1), Self.clip("c", size: 1))) == "too_many")
        #expect(code(put(Self.clip(url: "http://cdn.example.com/a.wav", size: 9))) == "insecure_url")
        #expect(code(put(Self.clip(url: "ftp://cdn.example.com/a.wav", size: 9))) == "insecure_url")
        #expect(code(put(Self.clip(url: "file:///etc/shadow", size: 9))) == "insecure_url")
        rules.allowPlainHTTP = true
        #expect(code(put(Self.clip(url: "http://cdn.example.com/a.wav", size: 9))) == nil)
        #expect(code(CorpusTask(task: "C", op: .deleteAll)) == nil)
    }

    /// A corpus push's receipt is signed like a payment's, with its `kind` and `clips` lines; a payment's text is
    /// as it was.
    @Test func aCorpusReceiptIsSignedWithItsKind() throws {
        let receipt = Receipt(
            device: "T1", order: "C-1", state: .installed, job: nil, createdAt: 7, keyID: "k1", kind: .corpus, clips: 3)
        #expect(receipt.canonical.hasPrefix("announce-receipt/1\nkind=corpus\ndevice=T1\n"))
        #expect(receipt.canonical.hasSuffix("\nerror=\nclips=3\ncreated_at=7"))
        let back = try Receipt(payload: receipt.payload())
        #expect(back == receipt)
        let payment = Receipt(device: "T1", order: "A", state: .heard, job: 1, createdAt: 7, keyID: "k1")
        #expect(!payment.canonical.contains("kind=") && !payment.canonical.contains("clips="))
    }

    // MARK: The store

    /// Versions are whole or absent: a change is installed by turning `current` in one rename; what a dead run left
    /// half made is removed at the next start and the version in force is untouched; unchanged clips are linked,
    /// not copied; `previous` brings the version before back.
    @Test func theStoreInstallsWholeVersionsAndCleansUpAfterACrash() throws {
        let directory = try Paths.temporaryDirectory("corpus")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = "\(directory).tasks.json"
        defer { try? FileManager.default.removeItem(atPath: ledger) }
        var store = CorpusStore(directory: directory, ledger: ledger)
        #expect(try store.current() == CorpusManifest())
        // Version 1: two clips.
        var staging = try store.stage()
        try Data("AAAA".utf8).write(to: URL(fileURLWithPath: "\(staging)/a.wav"))
        try Data("BB".utf8).write(to: URL(fileURLWithPath: "\(staging)/b.wav"))
        var one = CorpusManifest(version: 1, tasks: ["T1"])
        one.clips = [
            "a": .init(file: "a.wav", format: "wav", size: 4), "b": .init(file: "b.wav", format: "wav", size: 2),
        ]
        try store.install(one, staging: staging)
        #expect(try store.current() == one)
        // Version 2: b replaced, a kept (linked: the same inode).
        staging = try store.stage()
        try Data("CCC".utf8).write(to: URL(fileURLWithPath: "\(staging)/b.wav"))
        var two = one
        two.version = 2
        two.clips["b"] = .init(file: "b.wav", format: "wav", size: 3)
        try store.install(two, staging: staging)
        let folder = try #require(store.currentFolder)
        #expect(folder.hasSuffix("/v0000000000000002"))
        var first = stat()
        var second = stat()
        stat("\(directory)/v0000000000000001/a.wav", &first)
        stat("\(folder)/a.wav", &second)
        #expect(first.st_ino == second.st_ino, "the clip kept was copied, not linked")
        #expect(try String(contentsOfFile: "\(folder)/b.wav", encoding: .utf8) == "CCC")
        // A run dies half way through version 3: a staging folder, a link being made, a version nothing names.
        let dead = try store.stage()
        try Data("half".utf8).write(to: URL(fileURLWithPath: "\(dead)/c.wav"))
        symlink("v0000000000000003", "\(directory)/current.tmp")
        try FileManager.default.createDirectory(atPath: "\(directory)/v0000000000000003", withIntermediateDirectories: true)
        store = CorpusStore(directory: directory, ledger: ledger)
        #expect(try store.current() == two)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(names == ["current", "previous", "v0000000000000001", "v0000000000000002"], "\(names)")
        // The daemon could not load version 2: the one before comes back.
        #expect(try store.rollback())
        #expect(try store.current() == one)
        store.prune()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == ["current", "v0000000000000001"])
        // Everything is readable by the daemon's user.
        var info = stat()
        stat("\(directory)/v0000000000000001/corpus.json", &info)
        #expect(info.st_mode & 0o004 != 0)
        // What became of a task is kept.
        try store.record("T1", .init(state: .installed, clips: 2, version: 1, message: "sig"))
        #expect(store.outcome(of: "T1")?.state == .installed)
        #expect(CorpusStore(directory: directory, ledger: ledger).outcome(of: "T1")?.message == "sig")
        #expect(store.outcome(of: "T2") == nil)
    }
}
