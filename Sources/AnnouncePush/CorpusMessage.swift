import AnnounceCore
import AnnounceCrypto
import AnnounceDownload
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a corpus push asks of the terminal, whichever channel it came on (our signed ``CorpusMessage``, or the
/// Alibaba Cloud thing model's `SpeechPost`/`DeleteSpeech`): install clips, delete some, or delete all. Kept on disk
/// with what is owed for it until its receipt is acknowledged (``ReceiptEntry/task``), so a restart loses none.
public struct CorpusTask: Codable, Sendable, Equatable {
    public enum Operation: String, Codable, Sendable {
        case put
        case delete
        case deleteAll = "delete_all"
    }

    /// One clip to install.
    public struct Clip: Codable, Sendable, Equatable {
        /// The corpus id it is stored and spoken under.
        public var id: String
        public var url: String
        /// `wav`, `mp3`, `flac`, `ogg`, `opus` or `amr` (``CorpusManifest/formats``).
        public var format: String
        /// Its size in bytes: a download of any other size is refused.
        public var size: Int
        /// Lowercase hex SHA-256 (our channel always gives one; the Alibaba platform gives none).
        public var sha256: String?

        public init(id: String, url: String, format: String, size: Int, sha256: String? = nil) {
            self.id = id
            self.url = url
            self.format = format
            self.size = size
            self.sha256 = sha256
        }
    }

    /// The task id (our `task`, Alibaba's `jobcode`): the same task twice is done once.
    public var task: String
    public var op: Operation
    /// `put`: the clips.
    public var clips: [Clip]
    /// `delete`: the corpus ids.
    public var ids: [String]
    /// Alibaba's `SpeechPost`: the URL of the JSON list of the clips (`audios`), fetched when the task runs.
    public var list: String?

    public init(task: String, op: Operation, clips: [Clip] = [], ids: [String] = [], list: String? = nil) {
        self.task = task
        self.op = op
        self.clips = clips
        self.ids = ids
        self.list = list
    }
}

/// A corpus push on our own channel (docs/push.md, "Corpus push"): a message of kind `corpus`, version 1, signed
/// like a payment (HMAC-SHA256 with the device's key named by `kid`) and published to the device's topic:
///
/// ```json
/// {"v":1,"kind":"corpus","device":"T1000123","kid":"k2026a","task":"C-20261123-1","op":"put",
///  "clips":[{"id":"new_order","format":"wav","size":23456,"sha256":"<64 hex digits>",
///            "url":"https://cdn.example.com/clips/new_order.wav"}],
///  "created_at":1795415589123,"sig":"<64 hex digits>"}
/// ```
///
/// `op` is `put` (with `clips`), `delete` (with `ids`) or `delete_all`. The signed text (``canonical``) is its fields
/// one per line in a fixed order, each clip's five on five lines; every field is restricted to characters that
/// cannot hold a line break, so two messages never share a text.
public struct CorpusMessage: Sendable, Equatable {
    public static let version = 1
    public static let kind = "corpus"
    /// Longest payload accepted, in bytes (a list of a few hundred clips).
    public static let maximumPayloadBytes = 64 * 1024

    public var device: String
    public var keyID: String
    public var task: CorpusTask
    /// Unix time in milliseconds when the service made the message.
    public var createdAt: Int64
    /// Lowercase hex HMAC-SHA256 of ``canonical``; nil before signing.
    public var signature: String?

    public init(device: String, keyID: String, task: CorpusTask, createdAt: Int64, signature: String? = nil) {
        self.device = device
        self.keyID = keyID
        self.task = task
        self.createdAt = createdAt
        self.signature = signature
    }

    /// The text the signature covers (UTF-8, lines joined by "\n", no final line break).
    public var canonical: String {
        var lines = [
            "announce-corpus/\(Self.version)", "device=\(device)", "kid=\(keyID)", "task=\(task.task)",
            "op=\(task.op.rawValue)",
        ]
        for clip in task.clips {
            lines += [
                "clip=\(clip.id)", "format=\(clip.format)", "size=\(clip.size)", "sha256=\(clip.sha256 ?? "")",
                "url=\(clip.url)",
            ]
        }
        for id in task.ids { lines.append("delete=\(id)") }
        lines.append("created_at=\(createdAt)")
        return lines.joined(separator: "\n")
    }

    // MARK: Wire form

    private struct WireClip: Codable {
        var id: String?
        var url: String?
        var format: String?
        var size: Int?
        var sha256: String?
    }

    private struct Wire: Codable {
        var v: Int?
        var kind: String?
        var device: String?
        var kid: String?
        var task: String?
        var op: String?
        var clips: [WireClip]?
        var ids: [String]?
        var created_at: Int64?
        var sig: String?
    }

    /// The JSON payload (keys sorted).
    public func payload() -> [UInt8] {
        let wire = Wire(
            v: Self.version, kind: Self.kind, device: device, kid: keyID, task: task.task, op: task.op.rawValue,
            clips: task.op == .put
                ? task.clips.map { WireClip(id: $0.id, url: $0.url, format: $0.format, size: $0.size, sha256: $0.sha256) }
                : nil,
            ids: task.op == .delete ? task.ids : nil, created_at: createdAt, sig: signature)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings and integers always encode.
        return Array((try? encoder.encode(wire)) ?? Data())
    }

    /// Reads and checks the shape of a payload: every field present with the right type, and no character that
    /// could break the signed text. What the values mean (ids, formats, sizes, URLs, the terminal's limits) is
    /// judged after the signature (``CorpusRules``), so that the service is told in a receipt.
    public init(payload: [UInt8]) throws(AnnounceError) {
        guard payload.count <= Self.maximumPayloadBytes else {
            throw AnnounceError(.malformed, "payload of \(payload.count) bytes is over \(Self.maximumPayloadBytes)")
        }
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(payload))
        } catch {
            throw AnnounceError(.malformed, "not a JSON object of the corpus format", cause: "\(error)")
        }
        guard wire.v == Self.version else {
            throw AnnounceError(.malformed, "unsupported format version \(wire.v.map(String.init) ?? "(none)")")
        }
        guard wire.kind == Self.kind else { throw AnnounceError(.malformed, "not a corpus message") }
        func required<T>(_ value: T?, _ name: String) throws(AnnounceError) -> T {
            guard let value else { throw AnnounceError(.malformed, "missing field \"\(name)\"") }
            return value
        }
        let identifiers = PushMessage.identifierCharacters
        device = try PushMessage.checked(required(wire.device, "device"), "device", identifiers, 64)
        keyID = try PushMessage.checked(required(wire.kid, "kid"), "kid", identifiers, 32)
        let taskID = try PushMessage.checked(required(wire.task, "task"), "task", identifiers, 64)
        createdAt = try required(wire.created_at, "created_at")
        guard createdAt >= 0 else { throw AnnounceError(.malformed, "field \"created_at\" is negative") }
        guard let op = CorpusTask.Operation(rawValue: try required(wire.op, "op")) else {
            throw AnnounceError(.malformed, "field \"op\" must be \"put\", \"delete\" or \"delete_all\"")
        }
        var task = CorpusTask(task: taskID, op: op)
        switch op {
        case .put:
            let clips = try required(wire.clips, "clips")
            guard !clips.isEmpty, wire.ids == nil else {
                throw AnnounceError(.malformed, "\"put\" needs a non-empty \"clips\" and no \"ids\"")
            }
            for (index, clip) in clips.enumerated() {
                let name = "clips[\(index)]"
                let sha256 = try required(clip.sha256, "\(name).sha256")
                guard sha256.utf8.count == 64, sha256.utf8.allSatisfy(PushMessage.isHexDigit) else {
                    throw AnnounceError(.malformed, "field \"\(name).sha256\" must be 64 hex digits (SHA-256)")
                }
                task.clips.append(
                    CorpusTask.Clip(
                        id: try Self.line(required(clip.id, "\(name).id"), "\(name).id", 256),
                        url: try Self.line(required(clip.url, "\(name).url"), "\(name).url", 4096),
                        format: try Self.line(required(clip.format, "\(name).format"), "\(name).format", 16),
                        size: try required(clip.size, "\(name).size"), sha256: sha256.lowercased()))
            }
        case .delete:
            let ids = try required(wire.ids, "ids")
            guard !ids.isEmpty, wire.clips == nil else {
                throw AnnounceError(.malformed, "\"delete\" needs a non-empty \"ids\" and no \"clips\"")
            }
            for (index, id) in ids.enumerated() { task.ids.append(try Self.line(id, "ids[\(index)]", 256)) }
        case .deleteAll:
            guard wire.clips == nil, wire.ids == nil else {
                throw AnnounceError(.malformed, "\"delete_all\" takes no \"clips\" or \"ids\"")
            }
        }
        self.task = task
        let sig = try required(wire.sig, "sig")
        guard sig.utf8.count == 64, sig.utf8.allSatisfy(PushMessage.isHexDigit) else {
            throw AnnounceError(.malformed, "field \"sig\" must be 64 hex digits (HMAC-SHA256)")
        }
        signature = sig.lowercased()
    }

    /// A field that goes on one line of the signed text: 1 to `maximum` bytes, no control character.
    private static func line(_ value: String, _ name: String, _ maximum: Int) throws(AnnounceError) -> String {
        guard !value.isEmpty, value.utf8.count <= maximum, !value.unicodeScalars.contains(where: PushMessage.isControl)
        else {
            throw AnnounceError(.malformed, "field \"\(name)\" must be 1 to \(maximum) bytes without control characters")
        }
        return value
    }

    /// The `kind` of a payload: nil for a payment (which has none), or a JSON that is not an object.
    public static func kind(of payload: [UInt8]) -> String? {
        struct Kind: Decodable { var kind: String? }
        return (try? JSONDecoder().decode(Kind.self, from: Data(payload)))?.kind
    }
}

extension AnnounceError.Code {
    /// A corpus id that is not a name (`/`, `..`, a leading dot, other characters), or a format not accepted.
    public static let badID = AnnounceError.Code(rawValue: "bad_id")
    public static let badFormat = AnnounceError.Code(rawValue: "bad_format")
    /// More pushed clips, or more bytes of them, than the terminal keeps (`corpus.max_clips`, `corpus.max_bytes`).
    public static let tooMany = AnnounceError.Code(rawValue: "too_many")
    /// A downloaded clip whose size or SHA-256 is not what the push said.
    public static let badSize = AnnounceError.Code(rawValue: "bad_size")
    public static let badHash = AnnounceError.Code(rawValue: "bad_hash")
    /// A downloaded clip the voice-pack loader refuses (not audio it can decode, stereo, empty, silent, too long).
    public static let badClip = AnnounceError.Code(rawValue: "bad_clip")
    /// The daemon could not load the clips installed (they were taken back).
    public static let daemonRefused = AnnounceError.Code(rawValue: "daemon_refused")
    /// This terminal takes no corpus pushes (`corpus.enabled = false`).
    public static let corpusDisabled = AnnounceError.Code(rawValue: "corpus_disabled")
}

/// The terminal's rules for pushed clips (`[corpus]` in push.toml), and the judgement of a task against them after
/// its signature is proven: a refusal here is about a push the service really sent, so it gets a receipt.
public struct CorpusRules: Sendable, Equatable {
    /// The most pushed clips kept at once.
    public var maximumClips = 200
    /// The most bytes of pushed clips kept at once.
    public var maximumBytes = 16 * 1024 * 1024
    /// The largest single clip.
    public var maximumClipBytes = 1024 * 1024
    /// Whether http:// URLs are downloaded (only https:// otherwise).
    public var allowPlainHTTP = false
    /// A CA file (PEM) for the downloads instead of the system's store.
    public var caFile: String?
    /// The longest one download may take, seconds.
    public var downloadTimeoutSeconds = 60.0
    /// Tries of a download that fails for the network before the task is reported `failed`.
    public var attempts = 3
    /// Oldest corpus message accepted (our channel), seconds: queued pushes may wait longer than payments.
    public var maximumAgeSeconds = 86_400.0

    public init() {}

    /// Refuses what can never be done: ids that are not names, unknown formats, sizes out of bounds, URLs that are
    /// not https://, more clips than are kept. (Whether the clips fit with those installed already is judged when
    /// the task runs.)
    public func judge(_ task: CorpusTask) throws(AnnounceError) {
        switch task.op {
        case .put:
            guard task.clips.count <= maximumClips else {
                throw AnnounceError(.tooMany, "\(task.clips.count) clips; at most \(maximumClips) are kept")
            }
            var seen: Set<String> = []
            for clip in task.clips {
                if let problem = CorpusManifest.problem(id: clip.id) { throw AnnounceError(.badID, problem) }
                guard seen.insert(clip.id).inserted else {
                    throw AnnounceError(.badID, "corpus id \"\(clip.id)\" is given twice")
                }
                guard CorpusManifest.formats.contains(clip.format) else {
                    throw AnnounceError(
                        .badFormat,
                        "clip \"\(clip.id)\": format \"\(clip.format)\" is not one of "
                            + CorpusManifest.formats.sorted().joined(separator: ", "))
                }
                guard (1...maximumClipBytes).contains(clip.size) else {
                    throw AnnounceError(
                        .tooLarge, "clip \"\(clip.id)\": \(clip.size) bytes; 1 to \(maximumClipBytes) are accepted")
                }
                if let problem = Downloader.problem(url: clip.url, allowPlainHTTP: allowPlainHTTP) {
                    throw AnnounceError(.insecureURL, "clip \"\(clip.id)\": \(problem)")
                }
            }
            let total = task.clips.reduce(0) { $0 + $1.size }
            guard total <= maximumBytes else {
                throw AnnounceError(.tooMany, "\(total) bytes of clips; at most \(maximumBytes) are kept")
            }
        case .delete:
            for id in task.ids {
                if let problem = CorpusManifest.problem(id: id) { throw AnnounceError(.badID, problem) }
            }
        case .deleteAll:
            break
        }
        if let list = task.list, let problem = Downloader.problem(url: list, allowPlainHTTP: allowPlainHTTP) {
            throw AnnounceError(.insecureURL, "the list of clips: \(problem)")
        }
    }

    /// The download limits for one clip of `size` bytes.
    func downloadLimits(maximumBytes: Int) -> Downloader.Limits {
        Downloader.Limits(
            maximumBytes: maximumBytes, timeoutSeconds: downloadTimeoutSeconds, allowPlainHTTP: allowPlainHTTP,
            caFile: caFile)
    }
}

/// SHA-256 as the corpus messages write it (lowercase hex): the publisher tool's, and the tests'.
public enum CorpusDigest {
    public static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(bytes).map { cFormat("%02x", UInt32($0)) }.joined()
    }
}

/// Signs corpus messages (the publisher tool, and the payment service's side of the format).
public enum CorpusSigner {
    public static func sign(_ message: CorpusMessage, key: [UInt8]) -> CorpusMessage {
        var signed = message
        signed.signature = PushSigner.signature(of: message.canonical, key: key)
        return signed
    }
}
