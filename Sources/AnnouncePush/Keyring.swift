import AnnounceCore
import AnnounceCrypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The device's HMAC keys by key id. Several at once during a rotation: the new key is added, the payment service
/// switches to it, then the old one is removed (docs/fleet.md).
public struct Keyring: Sendable {
    /// Shortest key accepted, in bytes (128 bits).
    public static let minimumKeyBytes = 16

    /// Raw key bytes by key id.
    private var keys: [String: [UInt8]]

    public init() { keys = [:] }

    /// Keys written as in the config file: `"hex:<digits>"` or `"base64:<text>"`.
    public init(encoded: [String: String]) throws(AnnounceError) {
        keys = [:]
        for (id, text) in encoded.sorted(by: { $0.key < $1.key }) {
            try add(id: id, bytes: Self.decode(text, id: id))
        }
    }

    public mutating func add(id: String, bytes: [UInt8]) throws(AnnounceError) {
        guard !id.isEmpty, id.unicodeScalars.count <= 32,
            id.unicodeScalars.allSatisfy(PushMessage.identifierCharacters.contains)
        else {
            throw AnnounceError(.badRequest, "key id \"\(id)\" must be 1 to 32 characters of A-Za-z0-9._:-")
        }
        guard bytes.count >= Self.minimumKeyBytes else {
            throw AnnounceError(
                .badRequest, "key \"\(id)\" has \(bytes.count) bytes; at least \(Self.minimumKeyBytes) are needed")
        }
        keys[id] = bytes
    }

    public var ids: [String] { keys.keys.sorted() }

    public func key(_ id: String) -> HMACKey? { keys[id].map { HMACKey($0) } }

    /// The key's bytes.
    public func bytes(_ id: String) -> [UInt8]? { keys[id] }

    static func decode(_ text: String, id: String) throws(AnnounceError) -> [UInt8] {
        if text.hasPrefix("hex:") {
            guard let bytes = PushVerifier.bytes(hex: String(text.dropFirst(4))) else {
                throw AnnounceError(.badRequest, "key \"\(id)\": \"hex:\" must be followed by pairs of hex digits")
            }
            return bytes
        }
        if text.hasPrefix("base64:") {
            guard let data = Data(base64Encoded: String(text.dropFirst(7))) else {
                throw AnnounceError(.badRequest, "key \"\(id)\": \"base64:\" must be followed by base64 text")
            }
            return Array(data)
        }
        throw AnnounceError(.badRequest, "key \"\(id)\" must start with \"hex:\" or \"base64:\"")
    }
}

/// Signs push messages (the publisher tool and the payment service's side of the format).
public enum PushSigner {
    public static func signature(of message: PushMessage, key: HMACKey) -> String {
        signature(of: message.canonical, key: key)
    }

    /// Lowercase hex HMAC-SHA256 of a message's canonical text (any kind of message).
    public static func signature(of canonical: String, key: [UInt8]) -> String {
        signature(of: canonical, key: HMACKey(key))
    }

    /// The same with a key.
    public static func signature(of canonical: String, key: HMACKey) -> String {
        HMAC.code(.sha256, key: key, message: canonical.utf8).map { cFormat("%02x", UInt32($0)) }.joined()
    }

    public static func sign(_ message: PushMessage, key: HMACKey) -> PushMessage {
        var signed = message
        signed.signature = signature(of: signed, key: key)
        return signed
    }

    /// The same with the key's bytes.
    public static func sign(_ message: PushMessage, key: [UInt8]) -> PushMessage {
        var signed = message
        signed.signature = signature(of: message.canonical, key: key)
        return signed
    }
}

/// A message that passed every check, ready for the daemon.
public struct VerifiedPayment: Sendable, Equatable {
    public var message: PushMessage
    /// The payment's amount; nil for a combination (``PushMessage/parts``).
    public var amount: Amount?
    /// How to read it: the message's choice, else the listener's `[reading]`; nil: the daemon's defaults.
    public var style: ReadingStyle?
    public var liang: Bool?

    public init(message: PushMessage, amount: Amount?, style: ReadingStyle? = nil, liang: Bool? = nil) {
        self.message = message
        self.amount = amount
        self.style = style ?? message.style
        self.liang = liang ?? message.liang
    }

    /// The daemon request: `say` (a combination: `combine`) with the order id, so the daemon de-duplicates
    /// redeliveries.
    public var request: Request {
        switch message.kind {
        case .repeatStop:
            var request = Request(id: message.order, op: "repeat", order: message.order)
            request.stop = true
            return request
        case .replay:
            // Heard once per order id, however often it is delivered.
            return Request(
                id: message.order, op: "replay", order: message.order, priority: JobPriority.payment.rawValue,
                kind: message.replay?.rawValue)
        case .repeatStart:
            var request = Request(
                id: message.order, op: "repeat", style: style?.rawValue, liang: liang, order: message.order,
                parts: message.parts?.map(Request.Part.init(listItem:)), enforce: message.enforce)
            request.every = message.every.map(Double.init)
            request.times = message.times
            return request
        case .combination:
            return Request(
                id: message.order, op: "combine", style: style?.rawValue, liang: liang, order: message.order,
                priority: message.noticeClass == .notice ? JobPriority.notice.rawValue : nil,
                parts: message.parts?.map(Request.Part.init(listItem:)), enforce: message.enforce)
        case .payment:
            break
        }
        return Request(
            id: message.order, op: "say", fen: amount?.fen, channel: message.channel, refund: message.refund,
            style: style?.rawValue, liang: liang, order: message.order, enforce: message.enforce)
    }
}

/// Checks a payload: shape, device, key id, signature (``authenticate(_:)``), then creation time against the window,
/// the currency and the amount (``judge(_:nowMs:)``).
public struct PushVerifier: Sendable {
    public var device: String
    public var keyring: Keyring
    /// Oldest message accepted, milliseconds before now.
    public var maximumAgeMs: Int64
    /// Newest message accepted, milliseconds after now (clock skew between the service and the terminal).
    public var maximumFutureMs: Int64
    public var currencies: Set<String>
    /// The listener's reading defaults (`[reading]` in push.toml), for messages that do not choose.
    public var reading: ReadingDefaults.Choice

    public init(
        device: String, keyring: Keyring, maximumAgeMs: Int64, maximumFutureMs: Int64,
        currencies: Set<String> = ["CNY"], reading: ReadingDefaults.Choice = .init()
    ) {
        self.device = device
        self.keyring = keyring
        self.maximumAgeMs = maximumAgeMs
        self.maximumFutureMs = maximumFutureMs
        self.currencies = currencies
        self.reading = reading
    }

    public func verify(_ payload: [UInt8], nowMs: Int64) throws(AnnounceError) -> VerifiedPayment {
        try verify(PushMessage(payload: payload), nowMs: nowMs)
    }

    public func verify(_ message: PushMessage, nowMs: Int64) throws(AnnounceError) -> VerifiedPayment {
        try authenticate(message)
        return try judge(message, nowMs: nowMs)
    }

    /// The first half of ``verify(_:nowMs:)``: the message is for this device and was signed with one of its keys.
    /// A message that fails here (`wrong_device`, `unknown_key`, `bad_signature`) may be anyone's: nothing about
    /// it can be reported back to the service as this device's word (no receipt).
    public func authenticate(_ message: PushMessage) throws(AnnounceError) {
        try authenticate(
            device: message.device, keyID: message.keyID, canonical: message.canonical, signature: message.signature)
    }

    /// The same for a corpus push (``CorpusMessage``): the same keys, the same rules.
    public func authenticate(_ message: CorpusMessage) throws(AnnounceError) {
        try authenticate(
            device: message.device, keyID: message.keyID, canonical: message.canonical, signature: message.signature)
    }

    /// Any kind of message: signed for this device, with one of its keys, over exactly this canonical text.
    func authenticate(device signedFor: String, keyID: String, canonical: String, signature: String?)
        throws(AnnounceError)
    {
        guard signedFor == device else {
            throw AnnounceError(.wrongDevice, "signed for device \"\(signedFor)\", this is \"\(device)\"")
        }
        guard let key = keyring.key(keyID) else {
            throw AnnounceError(
                .unknownKey, "key id \"\(keyID)\" is not in the key ring (\(keyring.ids.joined(separator: ", ")))")
        }
        guard let hex = signature, let given = Self.bytes(hex: hex),
            HMAC.isValid(given, .sha256, key: key, message: canonical.utf8)
        else {
            throw AnnounceError(.badSignature, "the signature does not match (key \"\(keyID)\")")
        }
    }

    /// A message's creation time against a window of `maximumAgeMs` back and ``maximumFutureMs`` ahead (`stale`,
    /// `future`).
    public func checkWindow(createdAt: Int64, nowMs: Int64, maximumAgeMs: Int64) throws(AnnounceError) {
        let age = nowMs - createdAt
        if age > maximumAgeMs {
            throw AnnounceError(
                .stale, "created \(Self.seconds(age)) s ago; the window is \(Self.seconds(maximumAgeMs)) s")
        }
        if -age > maximumFutureMs {
            throw AnnounceError(
                .future,
                "created \(Self.seconds(-age)) s in the future; "
                    + "at most \(Self.seconds(maximumFutureMs)) s of clock skew is allowed"
            )
        }
    }

    /// The second half of ``verify(_:nowMs:)``, for a message ``authenticate(_:)`` passed: its creation time against
    /// the window (`stale`, `future`: ``isTimeWindow(_:)``), then whether it can be spoken here
    /// (`unsupported_currency`, `invalid_amount`). A refusal here is about a payment the service really sent this
    /// device, so the service is told (a `refused` receipt).
    public func judge(_ message: PushMessage, nowMs: Int64) throws(AnnounceError) -> VerifiedPayment {
        try checkWindow(createdAt: message.createdAt, nowMs: nowMs, maximumAgeMs: maximumAgeMs)
        if message.kind == .repeatStop || message.kind == .replay { return VerifiedPayment(message: message, amount: nil) }
        guard currencies.contains(message.currency) else {
            throw AnnounceError(
                .unsupportedCurrency,
                "currency \(message.currency) is not spoken here (\(currencies.sorted().joined(separator: ", ")))")
        }
        let amount: Amount?
        do {
            switch message.amount {
            case .text(let text): amount = try Amount(parsing: text)
            case .fen(let fen): amount = try Amount(fen: fen)
            case nil: amount = nil  // a combination: its amounts are parts, read (and refused) by the daemon
            }
        } catch {
            throw AnnounceError(.invalidAmount, error.description)
        }
        return VerifiedPayment(
            message: message, amount: amount, style: message.style ?? reading.style,
            liang: message.liang ?? reading.liang)
    }

    /// Whether a refusal is the time window's (`stale`, `future`): a judgement of the terminal's clock, which is only
    /// final if that clock can be trusted (``ClockWatch``).
    public static func isTimeWindow(_ code: AnnounceError.Code) -> Bool { code == .stale || code == .future }

    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0, digits.allSatisfy(PushMessage.isHexDigit) else { return nil }
        return stride(from: 0, to: digits.count, by: 2).compactMap { index in
            UInt8(String(decoding: digits[index...index + 1], as: UTF8.self), radix: 16)
        }
    }

    private static func seconds(_ ms: Int64) -> String {
        cFormat("%.3f", Double(ms) / 1000)
    }
}
