import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Why a push message was refused. One domain error (``AnnounceError``) with these stable codes, logged by the
/// listener as `reason=<code>` (docs/push.md).
extension AnnounceError.Code {
    /// Not a JSON object of the documented shape (missing or wrongly typed field, bad characters, too long).
    public static let malformed = AnnounceError.Code(rawValue: "malformed")
    /// Signed for another device.
    public static let wrongDevice = AnnounceError.Code(rawValue: "wrong_device")
    /// The key id is not in this terminal's key ring (never issued, or retired).
    public static let unknownKey = AnnounceError.Code(rawValue: "unknown_key")
    /// The HMAC does not match: forged or altered.
    public static let badSignature = AnnounceError.Code(rawValue: "bad_signature")
    /// Created longer ago than the window allows.
    public static let stale = AnnounceError.Code(rawValue: "stale")
    /// Created further in the future than the clock skew allowed.
    public static let future = AnnounceError.Code(rawValue: "future")
    /// Signed, but in a currency this terminal does not speak (`security.currencies`).
    public static let unsupportedCurrency = AnnounceError.Code(rawValue: "unsupported_currency")
}

/// The amount of a payment as sent: yuan as text, or integer fen.
public enum PushAmount: Sendable, Equatable {
    case text(String)
    case fen(Int64)
}

/// A payment notification as published to a terminal's topic (format version 1, docs/push.md):
///
/// ```json
/// {"v":1,"device":"T1000123","order":"2026112300001","amount":"100.00","currency":"CNY","channel":"alipay",
///  "refund":false,"created_at":1795415589123,"kid":"k2026a","sig":"<64 hex digits>"}
/// ```
///
/// `sig` is HMAC-SHA256, with the device's key named by `kid`, over ``canonical`` — the fields in a fixed order,
/// one per line, defaults filled in. Every field is restricted to characters that cannot contain a line break,
/// so the canonical text of two different messages is never the same.
public struct PushMessage: Sendable, Equatable {
    public static let version = 1
    /// Longest payload accepted, in bytes.
    public static let maximumPayloadBytes = 4096

    public var device: String
    public var order: String
    /// The amount of a payment; nil for a combination (``parts``).
    public var amount: PushAmount?
    /// A combination broadcast instead of a payment's template: what is spoken, in order, each part as Alibaba Cloud
    /// IoT's combination lists write one (a clip id, `{$12.50}`, `{#0423}`: ``Request/Part/init(listItem:)``).
    /// The message then has no `amount`, `fen`, `channel` or `refund`.
    public var parts: [String]?
    public var currency: String
    public var channel: String
    public var refund: Bool
    /// How to read the amount (optional; signed when present): `decimal` (十点五元) or `units` (十元五角), and 两.
    /// Absent: the listener's `[reading]`, else the daemon's defaults.
    public var style: ReadingStyle?
    public var liang: Bool?
    /// Play through the speaker's mute (optional; signed when present), if the terminal allows it
    /// (`audio.allow_enforce` of its daemon).
    public var enforce: Bool?
    /// A combination's class (optional; signed when present): `payment` (spoken in turn, the default) or `notice`
    /// (after the payments waiting, and cut by one that comes while it plays: docs/protocol.md, "Queue rules").
    public var noticeClass: NoticeClass?
    /// A repeating notice (optional, with `parts`; signed when present): the combination said again `every` seconds
    /// (1–3600) after the last time ended, `times` times at most (1–1000, default 10), until stopped; `order` is the
    /// repeat's id.
    public var every: Int?
    public var times: Int?
    /// Instead of an amount or parts: stop the repeating notice `order` (``stop``), or say the last combination
    /// again (``replay``, `combination`: the fleet's "replay last"; `order` makes it heard once however often it
    /// is delivered).
    public var stop: Bool?
    public var replay: ReplayKind?

    /// The classes a combination may have.
    public enum NoticeClass: String, Sendable, Equatable {
        case payment, notice
    }

    /// What the message asks, from the fields it has.
    public enum Kind: Sendable, Equatable {
        case payment, combination, repeatStart, repeatStop, replay
    }

    public var kind: Kind {
        if stop == true { return .repeatStop }
        if replay != nil { return .replay }
        guard parts != nil else { return .payment }
        return every == nil ? .combination : .repeatStart
    }
    /// Unix time in milliseconds when the payment service created the message.
    public var createdAt: Int64
    public var keyID: String
    /// Lowercase hex HMAC-SHA256 of ``canonical``; nil before signing.
    public var signature: String?

    public init(
        device: String, order: String, amount: PushAmount?, currency: String = "CNY", channel: String = "plain",
        refund: Bool = false, createdAt: Int64, keyID: String, signature: String? = nil, style: ReadingStyle? = nil,
        liang: Bool? = nil, parts: [String]? = nil, enforce: Bool? = nil
    ) {
        self.enforce = enforce
        self.device = device
        self.order = order
        self.amount = amount
        self.parts = parts
        self.currency = currency
        self.channel = channel
        self.refund = refund
        self.createdAt = createdAt
        self.keyID = keyID
        self.signature = signature
        self.style = style
        self.liang = liang
    }

    /// The text the signature covers (UTF-8, lines joined by "\n", no final line break). `style`, `liang`, `enforce`
    /// and `parts` have a line only when the message carries them, so a message without them is signed as before they existed; a
    /// combination has its `parts` line (the parts joined by `|`, which no part may hold) instead of the amount line,
    /// and no `channel` or `refund` line.
    public var canonical: String {
        var lines = ["announce-push/\(Self.version)", "device=\(device)", "kid=\(keyID)", "order=\(order)"]
        // A stop or a replay says only what it asks, when, of which order.
        if stop == true {
            return (lines + ["stop=true", "created_at=\(createdAt)"]).joined(separator: "\n")
        }
        if let replay {
            return (lines + ["replay=\(replay.rawValue)", "created_at=\(createdAt)"]).joined(separator: "\n")
        }
        if let parts {
            lines += ["parts=\(parts.joined(separator: Self.partSeparator))", "currency=\(currency)"]
        } else {
            switch amount {
            case .text(let text): lines.append("amount=\(text)")
            case .fen(let fen): lines.append("fen=\(fen)")
            case nil: break
            }
            lines += ["currency=\(currency)", "channel=\(channel)", "refund=\(refund)"]
        }
        if let style { lines.append("style=\(style.rawValue)") }
        if let liang { lines.append("liang=\(liang)") }
        if let enforce { lines.append("enforce=\(enforce)") }
        if let noticeClass { lines.append("class=\(noticeClass.rawValue)") }
        if let every { lines.append("every=\(every)") }
        if let times { lines.append("times=\(times)") }
        lines.append("created_at=\(createdAt)")
        return lines.joined(separator: "\n")
    }

    // MARK: Wire form

    private struct Wire: Codable {
        var v: Int?
        var device: String?
        var order: String?
        var amount: String?
        var fen: Int64?
        var currency: String?
        var channel: String?
        var refund: Bool?
        var style: String?
        var liang: Bool?
        var created_at: Int64?
        var kid: String?
        var sig: String?
        var parts: [String]?
        var enforce: Bool?
        var `class`: String?
        var every: Int?
        var times: Int?
        var stop: Bool?
        var replay: String?
    }

    /// Joins the parts in the canonical text; no part may contain it.
    static let partSeparator = "|"

    /// The JSON payload (keys sorted, so equal messages give equal bytes).
    public func payload() -> [UInt8] {
        var wire = Wire(
            v: Self.version, device: device, order: order, currency: currency, channel: channel, refund: refund,
            style: style?.rawValue, liang: liang, created_at: createdAt, kid: keyID, sig: signature, parts: parts,
            enforce: enforce)
        switch amount {
        case .text(let text): wire.amount = text
        case .fen(let fen): wire.fen = fen
        case nil: break
        }
        if parts != nil {
            // A combination: its parts say what is spoken.
            wire.channel = nil
            wire.refund = nil
        }
        wire.class = noticeClass?.rawValue
        wire.every = every
        wire.times = times
        if stop == true || replay != nil {
            // A stop or a replay: nothing but what it asks.
            wire = Wire(
                v: Self.version, device: device, order: order, created_at: createdAt, kid: keyID, sig: signature,
                stop: stop, replay: replay?.rawValue)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a struct of strings, integers and booleans cannot fail.
        return Array((try? encoder.encode(wire)) ?? Data())
    }

    /// Reads and checks the shape of a payload: every field present with the right type and characters.
    /// Does not check the signature, the device, the time or whether the amount can be read.
    public init(payload: [UInt8]) throws(AnnounceError) {
        guard payload.count <= Self.maximumPayloadBytes else {
            throw AnnounceError(.malformed, "payload of \(payload.count) bytes is over \(Self.maximumPayloadBytes)")
        }
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(payload))
        } catch {
            throw AnnounceError(.malformed, "not a JSON object of the push format", cause: Self.describe(error))
        }
        guard let v = wire.v else { throw AnnounceError(.malformed, "missing field \"v\"") }
        guard v == Self.version else { throw AnnounceError(.malformed, "unsupported format version \(v)") }
        func required<T>(_ value: T?, _ name: String) throws(AnnounceError) -> T {
            guard let value else { throw AnnounceError(.malformed, "missing field \"\(name)\"") }
            return value
        }
        device = try Self.checked(required(wire.device, "device"), "device", Self.identifierCharacters, 64)
        order = try Self.checked(required(wire.order, "order"), "order", Self.identifierCharacters, 64)
        keyID = try Self.checked(required(wire.kid, "kid"), "kid", Self.identifierCharacters, 32)
        createdAt = try required(wire.created_at, "created_at")
        guard createdAt >= 0 else { throw AnnounceError(.malformed, "field \"created_at\" is negative") }
        let sig = try required(wire.sig, "sig")
        guard sig.utf8.count == 64, sig.utf8.allSatisfy(Self.isHexDigit) else {
            throw AnnounceError(.malformed, "field \"sig\" must be 64 hex digits (HMAC-SHA256)")
        }
        signature = sig.lowercased()
        if wire.stop != nil || wire.replay != nil {
            // A stop or a replay: `order` and the time, nothing that would say what to speak.
            guard wire.stop == nil || wire.replay == nil else {
                throw AnnounceError(.malformed, "give \"stop\" or \"replay\", not both")
            }
            let others: [Any?] = [
                wire.amount, wire.fen, wire.parts, wire.currency, wire.channel, wire.refund, wire.style, wire.liang,
                wire.enforce, wire.class, wire.every, wire.times,
            ]
            guard others.allSatisfy({ $0 == nil }) else {
                throw AnnounceError(.malformed, "a \"stop\" or a \"replay\" has only v, device, order, created_at, kid, sig")
            }
            if let stop = wire.stop {
                guard stop else { throw AnnounceError(.malformed, "field \"stop\" must be true") }
                self.stop = true
            }
            if let replay = wire.replay {
                guard replay == ReplayKind.combination.rawValue else {
                    throw AnnounceError(
                        .malformed, "field \"replay\" must be \"combination\" (the last combination broadcast)")
                }
                self.replay = .combination
            }
            currency = "CNY"
            channel = "plain"
            refund = false
            return
        }
        currency = try Self.checked(required(wire.currency, "currency"), "currency", Self.currencyCharacters, 3)
        guard currency.count == 3 else {
            throw AnnounceError(.malformed, "field \"currency\" must be a 3-letter ISO 4217 code such as CNY")
        }
        channel = try Self.checked(wire.channel ?? "plain", "channel", Self.channelCharacters, 32)
        refund = wire.refund ?? false
        if let text = wire.style {
            guard let parsed = ReadingStyle(rawValue: text) else {
                throw AnnounceError(.malformed, "field \"style\" must be \"decimal\" or \"units\"")
            }
            style = parsed
        }
        liang = wire.liang
        enforce = wire.enforce
        switch (wire.amount, wire.fen, wire.parts) {
        case (let text?, nil, nil):
            guard !text.isEmpty, text.count <= 32, !text.unicodeScalars.contains(where: Self.isControl) else {
                throw AnnounceError(.malformed, "field \"amount\" must be 1 to 32 printable characters")
            }
            amount = .text(text)
        case (nil, let fen?, nil):
            amount = .fen(fen)
        case (nil, nil, let list?):
            guard wire.channel == nil, wire.refund == nil else {
                throw AnnounceError(
                    .malformed, "a combination (\"parts\") has no \"channel\" or \"refund\": its parts say what is spoken")
            }
            guard (1...CombinationPart.maximumCount).contains(list.count) else {
                throw AnnounceError(.malformed, "field \"parts\" must hold 1 to \(CombinationPart.maximumCount) parts")
            }
            for part in list {
                guard !part.isEmpty, part.count <= 64, !part.unicodeScalars.contains("|"),
                    !part.unicodeScalars.contains(where: Self.isControl)
                else {
                    throw AnnounceError(
                        .malformed, "each of \"parts\" must be 1 to 64 printable characters without \"|\"")
                }
            }
            amount = nil
            parts = list
        case (nil, nil, nil):
            throw AnnounceError(
                .malformed, "give \"amount\" (yuan as text), \"fen\" (integer) or \"parts\" (a combination)")
        default:
            throw AnnounceError(.malformed, "give one of \"amount\", \"fen\" and \"parts\", not more")
        }
        if wire.class != nil || wire.every != nil || wire.times != nil {
            guard parts != nil else {
                throw AnnounceError(.malformed, "\"class\", \"every\" and \"times\" belong to a combination (\"parts\")")
            }
        }
        if let text = wire.class {
            guard let parsed = NoticeClass(rawValue: text) else {
                throw AnnounceError(.malformed, "field \"class\" must be \"payment\" or \"notice\"")
            }
            noticeClass = parsed
        }
        if let every = wire.every {
            guard RepeatPlan.everyRange.contains(Double(every)) else {
                throw AnnounceError(.malformed, "field \"every\" must be 1 to 3600 seconds")
            }
            guard noticeClass != .payment else {
                throw AnnounceError(.malformed, "a repeating notice (\"every\") is a notice, not class payment")
            }
            self.every = every
        }
        if let times = wire.times {
            guard every != nil else { throw AnnounceError(.malformed, "\"times\" belongs to a repeat (\"every\")") }
            guard (1...RepeatPlan.maximumTimes).contains(times) else {
                throw AnnounceError(.malformed, "field \"times\" must be 1 to \(RepeatPlan.maximumTimes)")
            }
            self.times = times
        }
    }

    // MARK: Character rules

    /// Order ids, device ids, key ids: letters, digits and . _ : -
    static let identifierCharacters = Set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-".unicodeScalars)
    static let channelCharacters = Set("abcdefghijklmnopqrstuvwxyz0123456789_-".unicodeScalars)
    static let currencyCharacters = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZ".unicodeScalars)

    static func checked(_ value: String, _ name: String, _ allowed: Set<Unicode.Scalar>, _ maximum: Int)
        throws(AnnounceError) -> String
    {
        guard !value.isEmpty, value.unicodeScalars.count <= maximum,
            value.unicodeScalars.allSatisfy(allowed.contains)
        else {
            throw AnnounceError(
                .malformed, "field \"\(name)\" must be 1 to \(maximum) characters of [\(Self.describe(allowed))]")
        }
        return value
    }

    private static func describe(_ allowed: Set<Unicode.Scalar>) -> String {
        if allowed == identifierCharacters { return "A-Za-z0-9._:-" }
        if allowed == channelCharacters { return "a-z0-9_-" }
        return "A-Z"
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control || scalar == "\u{2028}" || scalar == "\u{2029}"
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context): context.debugDescription
        case DecodingError.typeMismatch(_, let context):
            "field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" has the wrong type"
        case DecodingError.valueNotFound(_, let context):
            "field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" is null"
        default: "\(error)"
        }
    }
}
