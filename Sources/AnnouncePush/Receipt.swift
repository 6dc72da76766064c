import AnnounceCore
import AnnounceCrypto

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What became of one payment message signed for this terminal — handed to its daemon, or refused — published on
/// `announce/<device>/receipts` once the job's state is final and on disk (docs/fleet.md, "Receipts"):
///
/// ```json
/// {"accepted_at":1795415589372,"created_at":1795415590871,"device":"T1000123","first_sample_us":7400,
///  "heard_at":1795415590870,"job":57,"kid":"k2026a","order":"2026112300001","sig":"…","state":"heard","v":1}
/// ```
///
/// `sig` is HMAC-SHA256 with the device's key named by `kid` over ``canonical``, in the style of the payment
/// messages: the fields in a fixed order, one per line, a field without a value written with nothing after `=`.
/// Every value is a number or restricted to characters that cannot hold a line break.
///
/// A corpus push (``CorpusMessage``) gets a receipt of the same form with `"kind":"corpus"`: `order` is its task id,
/// the state `installed`, `deleted`, `refused`, `failed` or `duplicate`, and `clips` the number of pushed clips in
/// force after it. Their lines (`kind=`, `clips=`) are in the signed text only when the receipt has them, so a
/// payment's receipt is signed exactly as before they existed.
public struct Receipt: Sendable, Equatable {
    public static let version = 1

    /// What the receipt is about: absent, a payment; `corpus`, a corpus push (pushed clips).
    public enum Kind: String, Sendable, Codable {
        case corpus
        /// A repeating notice: its receipt comes when it ends (`done`, `stopped`, `acknowledged`, `failed`).
        case repeatNotice = "repeat"
    }

    /// The outcome reported.
    public enum State: String, Sendable, Codable, CaseIterable {
        /// Its last sample left the speaker (the daemon's `spoken`).
        case heard
        /// Not played: the audio device stayed away, the output was muted (policy `respect`), no speech.
        case failed
        /// Its ttl passed before its turn.
        case expired
        /// Cancelled on the terminal.
        case cancelled
        /// The daemon already had this order: not spoken again; `original` says what became of the first.
        case duplicate
        /// The daemon no longer knows the job (its journal was damaged and set aside): whether it was heard is
        /// not known.
        case unknown
        /// A correctly signed payment that will never be spoken: refused here (`stale`, `future`,
        /// `unsupported_currency`, `invalid_amount`) or by the daemon (`unknown_channel` …); `error` says why. Not
        /// `failed`, which is a payment the daemon took and could not play.
        case refused
        /// A corpus push's clips are installed and the daemon has loaded them.
        case installed
        /// A corpus push's deletion is done and the daemon has loaded what is left.
        case deleted
        /// A repeating notice was said its times; `heard` of them to their end.
        case done
        /// A repeating notice was stopped by a stop message (or on the terminal).
        case stopped
        /// A repeating notice was stopped by the shop: the replay key pressed while it repeated.
        case acknowledged

        /// The receipt state of a repeat's end (nil: still repeating).
        public init?(repeat state: RepeatState) {
            switch state {
            case .repeating: return nil
            case .done: self = .done
            case .stopped: self = .stopped
            case .acknowledged: self = .acknowledged
            case .failed: self = .failed
            }
        }

        /// The receipt state of a daemon job's final state (nil: not final).
        public init?(job: JobState) {
            switch job {
            case .spoken: self = .heard
            case .failed: self = .failed
            case .expired: self = .expired
            case .cancelled: self = .cancelled
            case .queued, .playing: return nil
            }
        }
    }

    public var kind: Kind?
    public var device: String
    /// The payment's order id; for a corpus push, its task id.
    public var order: String
    public var state: State
    /// For `duplicate`: the state of the job that holds the order.
    public var original: State?
    /// The daemon's job id (of the original, for `duplicate`); none for a refused payment.
    public var job: UInt64?
    /// When the daemon accepted the job (for `duplicate`: the original), Unix milliseconds.
    public var acceptedAt: Int64?
    /// When its last sample had left the device, Unix milliseconds (heard, or a duplicate of a heard one).
    public var heardAt: Int64?
    /// Request received → first sample handed to the device, microseconds.
    public var firstSampleMicros: Int64?
    /// Why it was not heard: the daemon's error code (`audio_device`, `muted`, `expired`, `cancelled` …), or for
    /// `refused` the reason (`stale`, `invalid_amount`, `unknown_channel` …).
    public var error: String?
    /// For a corpus push: how many pushed clips are in force after it.
    public var clips: Int?
    /// For a repeating notice: how many times it was heard to its end.
    public var heard: Int?
    /// When this receipt was made, Unix milliseconds.
    public var createdAt: Int64
    public var keyID: String
    /// Lowercase hex HMAC-SHA256 of ``canonical``; nil before signing.
    public var signature: String?

    public init(
        device: String, order: String, state: State, original: State? = nil, job: UInt64?, acceptedAt: Int64? = nil,
        heardAt: Int64? = nil, firstSampleMicros: Int64? = nil, error: String? = nil, createdAt: Int64,
        keyID: String, signature: String? = nil, kind: Kind? = nil, clips: Int? = nil
    ) {
        self.kind = kind
        self.clips = clips
        self.device = device
        self.order = order
        self.state = state
        self.original = original
        self.job = job
        self.acceptedAt = acceptedAt
        self.heardAt = heardAt
        self.firstSampleMicros = firstSampleMicros
        self.error = error.map(Self.errorCode)
        self.createdAt = createdAt
        self.keyID = keyID
        self.signature = signature
    }

    /// The receipt for a job in its final state (`duplicate`: handed over again, the daemon answered with `job`).
    public init?(
        job info: JobInfo, order: String, duplicate: Bool, device: String, keyID: String, createdAt: Int64
    ) {
        guard let final = State(job: info.state) else { return nil }
        self.init(
            device: device, order: order, state: duplicate ? .duplicate : final, original: duplicate ? final : nil,
            job: info.id, acceptedAt: info.acceptedAt.flatMap(ISO8601Milliseconds.parse),
            heardAt: info.state == .spoken ? info.finishedAt.flatMap(ISO8601Milliseconds.parse) : nil,
            firstSampleMicros: info.firstSampleMs.map { Int64(($0 * 1000).rounded()) },
            error: info.state == .spoken ? nil : info.error?.code, createdAt: createdAt, keyID: keyID)
    }

    /// The receipt of a repeating notice that has ended (`duplicate`: a start sent again, the repeat it names).
    public init?(repeat info: RepeatInfo, duplicate: Bool, device: String, keyID: String, createdAt: Int64) {
        guard let final = State(repeat: info.state) else { return nil }
        self.init(
            device: device, order: info.order, state: duplicate ? .duplicate : final,
            original: duplicate ? final : nil, job: nil, error: info.error?.code, createdAt: createdAt, keyID: keyID,
            kind: .repeatNotice)
        heard = info.heard
    }

    /// The text the signature covers (UTF-8, lines joined by "\n", no final line break). `kind`, `clips` and `heard`
    /// have a line only when the receipt has them (corpus pushes, repeats), so a payment's receipt reads as it always
    /// did.
    public var canonical: String {
        func text<T>(_ value: T?) -> String { value.map { "\($0)" } ?? "" }
        var lines = ["announce-receipt/\(Self.version)"]
        if let kind { lines.append("kind=\(kind.rawValue)") }
        lines += [
            "device=\(device)", "kid=\(keyID)", "order=\(order)",
            "state=\(state.rawValue)", "original=\(text(original?.rawValue))", "job=\(text(job))",
            "accepted_at=\(text(acceptedAt))", "heard_at=\(text(heardAt))",
            "first_sample_us=\(text(firstSampleMicros))", "error=\(text(error))",
        ]
        if let clips { lines.append("clips=\(clips)") }
        if let heard { lines.append("heard=\(heard)") }
        lines.append("created_at=\(createdAt)")
        return lines.joined(separator: "\n")
    }

    public func signed(with key: HMACKey) -> Receipt {
        var signed = self
        signed.signature = PushSigner.signature(of: canonical, key: key)
        return signed
    }

    /// Whether `signature` is the HMAC of ``canonical`` with `key` (the service's check, and the tests').
    public func isValid(with key: HMACKey) -> Bool {
        guard let hex = signature, let given = PushVerifier.bytes(hex: hex), given.count == 32 else { return false }
        return HMAC.isValid(given, .sha256, key: key, message: canonical.utf8)
    }

    /// Error codes as the daemon gives them are `a-z0-9_`; anything else is reported as `other`.
    static func errorCode(_ code: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789_".unicodeScalars)
        guard !code.isEmpty, code.unicodeScalars.count <= 32, code.unicodeScalars.allSatisfy(allowed.contains) else {
            return "other"
        }
        return code
    }

    // MARK: Wire form

    private struct Wire: Codable {
        var v: Int
        var kind: Kind?
        var device: String
        var order: String
        var state: State
        var original: State?
        var job: UInt64?
        var accepted_at: Int64?
        var heard_at: Int64?
        var first_sample_us: Int64?
        var error: String?
        var clips: Int?
        var heard: Int?
        var created_at: Int64
        var kid: String
        var sig: String?
    }

    /// The JSON payload (keys sorted; absent values left out).
    public func payload() -> [UInt8] {
        let wire = Wire(
            v: Self.version, kind: kind, device: device, order: order, state: state, original: original, job: job,
            accepted_at: acceptedAt, heard_at: heardAt, first_sample_us: firstSampleMicros, error: error,
            clips: clips, heard: heard, created_at: createdAt, kid: keyID, sig: signature)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A struct of strings and integers always encodes.
        return Array((try? encoder.encode(wire)) ?? Data())
    }

    /// Reads a receipt payload (the service's side, and the tests').
    public init(payload: [UInt8]) throws(AnnounceError) {
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(payload))
        } catch {
            throw AnnounceError(.malformed, "not a receipt (JSON)", cause: "\(error)")
        }
        guard wire.v == Self.version else { throw AnnounceError(.malformed, "unsupported receipt version \(wire.v)") }
        self.init(
            device: wire.device, order: wire.order, state: wire.state, original: wire.original, job: wire.job,
            acceptedAt: wire.accepted_at, heardAt: wire.heard_at, firstSampleMicros: wire.first_sample_us,
            error: wire.error, createdAt: wire.created_at, keyID: wire.kid, signature: wire.sig, kind: wire.kind,
            clips: wire.clips)
        heard = wire.heard
    }
}

/// Reads the daemon's timestamps, `2026-11-23T06:31:59.372Z` (ISO 8601, UTC, milliseconds; `JobInfo`), as Unix
/// milliseconds. Only that form: it is the only one the daemon writes.
public enum ISO8601Milliseconds {
    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        // YYYY-MM-DDTHH:MM:SS[.fff…]Z
        guard bytes.count >= 20, bytes.last == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for index in range {
                let byte = bytes[index]
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        let separators: [(Int, Character)] = [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":")]
        guard separators.allSatisfy({ bytes[$0.0] == UInt8(ascii: $0.1.unicodeScalars.first!) }),
            let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var millis: Int64 = 0
        if bytes[19] == UInt8(ascii: ".") {
            let digits = 20..<(bytes.count - 1)
            guard !digits.isEmpty, let fraction = number(digits) else { return nil }
            // The first three digits are milliseconds.
            var scaled = fraction
            var count = digits.count
            while count > 3 {
                scaled /= 10
                count -= 1
            }
            while count < 3 {
                scaled *= 10
                count += 1
            }
            millis = scaled
        } else if bytes.count != 20 {
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
