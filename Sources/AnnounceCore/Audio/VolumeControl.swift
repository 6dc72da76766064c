#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// One playback volume element of a mixer: the ALSA simple mixer element in the daemon, a fault-injecting fake
/// in tests. Raw values are the element's own integer steps; decibels are in hundredths of a dB, as ALSA has them.
/// Not thread-safe: its owner (`VolumeGuard`, `Ducker`) serialises every call.
public protocol VolumeControl: AnyObject {
    /// Where the element lives, e.g. `pulse/Master` or `hw:0/Music`.
    var address: MixerElementAddress { get }
    /// Raw steps and, when the element has them, decibel conversions.
    func scale() throws(AnnounceError) -> VolumeScale
    /// The volume and playback switch of every channel, as they are now (changes by others included).
    func read() throws(AnnounceError) -> VolumeReading
    /// Sets every channel's raw volume (one value per channel, as `read` returned them).
    func write(raw: [Int]) throws(AnnounceError)
    /// Sets every channel's playback switch (true: sounding). Only for elements that have one.
    func write(switches: [Bool]) throws(AnnounceError)
}

/// The volume of an element's channels at one moment.
public struct VolumeReading: Sendable, Equatable, Codable {
    /// Raw volume per channel.
    public var raw: [Int]
    /// Playback switch per channel (true: sounding); nil when the element has no switch.
    public var switches: [Bool]?

    public init(raw: [Int], switches: [Bool]? = nil) {
        self.raw = raw
        self.switches = switches
    }

    /// Whether any channel's playback switch is off.
    public var isMuted: Bool { switches?.contains(false) ?? false }
}

/// An element's raw range and, when it has decibel information, conversions (hundredths of a dB) both ways.
public struct VolumeScale: Sendable {
    public var raw: ClosedRange<Int>
    public var decibels: Decibels?

    public struct Decibels: Sendable {
        /// Range in hundredths of a dB. A lower bound of `VolumeScale.muteDecibels` means "minimum is silence".
        public var range: ClosedRange<Int>
        /// Raw → hundredths of a dB.
        public var fromRaw: @Sendable (Int) -> Int?
        /// Hundredths of a dB → raw; `roundUp`: the nearest step at or above (else at or below).
        public var toRaw: @Sendable (_ centidB: Int, _ roundUp: Bool) -> Int?

        public init(
            range: ClosedRange<Int>, fromRaw: @escaping @Sendable (Int) -> Int?,
            toRaw: @escaping @Sendable (Int, Bool) -> Int?
        ) {
            self.range = range
            self.fromRaw = fromRaw
            self.toRaw = toRaw
        }
    }

    /// ALSA's "this dB value is silence" (`SND_CTL_TLV_DB_GAIN_MUTE`).
    public static let muteDecibels = -9_999_999

    public init(raw: ClosedRange<Int>, decibels: Decibels? = nil) {
        self.raw = raw
        self.decibels = decibels
    }
}

/// Which mixer element: a control device (`default`, `hw:0`, `pulse:music`) and a simple element name with its
/// index. Written `CTL/NAME` or `CTL/NAME,INDEX` (e.g. `hw:0/Music`, `pulse:music/Master`, `hw:0/PCM,1`).
public struct MixerElementAddress: Sendable, Hashable, Codable, CustomStringConvertible {
    public var control: String
    public var element: String
    public var index: Int

    public init(control: String, element: String, index: Int = 0) {
        self.control = control
        self.element = element
        self.index = index
    }

    /// Parses `CTL/NAME[,INDEX]`; a bare `CTL` means its `defaultElement`.
    public init(parsing text: String, defaultElement: String = "Master") throws(AnnounceError) {
        let control: Substring
        var element = Substring(defaultElement)
        if let slash = text.lastIndex(of: "/") {
            control = text[..<slash]
            element = text[text.index(after: slash)...]
        } else {
            control = Substring(text)
        }
        var index = 0
        if let comma = element.lastIndex(of: ","), let number = Int(element[element.index(after: comma)...]) {
            index = number
            element = element[..<comma]
        }
        guard !control.isEmpty, !element.isEmpty, index >= 0 else {
            throw AnnounceError(
                .badConfiguration, "mixer element \"\(text)\" is not CTL/NAME or CTL/NAME,INDEX (e.g. hw:0/Master)")
        }
        self.init(control: String(control), element: String(element), index: index)
    }

    public var description: String { index == 0 ? "\(control)/\(element)" : "\(control)/\(element),\(index)" }
}

/// A loudness given by the user: a percentage on alsamixer's scale, or decibels.
public enum VolumeLevel: Sendable, Equatable, Codable, CustomStringConvertible {
    /// 0…100, mapped like alsamixer: on the element's dB scale when it has one, else on its raw range.
    case percent(Double)
    /// Decibels (0 is the element's 0 dB, usually full scale); needs an element with dB information.
    case decibels(Double)

    /// Parses `60%`, `60`, `-20dB`, `-20 dB`.
    public init(parsing text: String) throws(AnnounceError) {
        let trimmed = text.trimmingSpaces()
        let lower = trimmed.lowercased()
        if lower.hasSuffix("db"), let value = Double(lower.dropLast(2).trimmingSpaces()),
            value.isFinite
        {
            self = .decibels(value)
            return
        }
        let number = lower.hasSuffix("%") ? String(lower.dropLast()) : lower
        guard let value = Double(number.trimmingSpaces()), (0...100).contains(value) else {
            throw AnnounceError(.badConfiguration, "volume \"\(text)\" is neither N% (0…100) nor N dB")
        }
        self = .percent(value)
    }

    public var description: String {
        switch self {
        case let .percent(value): "\(Self.format(value))%"
        case let .decibels(value): "\(Self.format(value)) dB"
        }
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : cFormat("%.2f", value)
    }
}

/// Volume arithmetic the way alsamixer presents it (its `volume_mapping.c` idea, written here from the
/// description): a percentage is linear in dB when the element spans at most 24 dB, otherwise it follows
/// 10^((dB − max)/60 dB), a cubic curve that matches perceived loudness (and PulseAudio's own volume curve).
/// Elements without dB information are taken as linear in raw steps.
public enum VolumeMapping {
    /// Up to this span (hundredths of a dB) a percentage is linear in dB.
    public static let maximumLinearSpan = 2_400

    /// The element's loudness as alsamixer would show it, 0…1.
    public static func normalized(raw: Int, scale: VolumeScale) -> Double {
        if let db = scale.decibels, db.range.lowerBound < db.range.upperBound, let value = db.fromRaw(raw) {
            let (low, high) = (db.range.lowerBound, db.range.upperBound)
            if high - low <= maximumLinearSpan { return clamp(Double(value - low) / Double(high - low)) }
            if value <= VolumeScale.muteDecibels { return 0 }
            var normalized = pow(10, Double(value - high) / 6000)
            if low != VolumeScale.muteDecibels {
                let floor = pow(10, Double(low - high) / 6000)
                normalized = (normalized - floor) / (1 - floor)
            }
            return clamp(normalized)
        }
        let span = scale.raw.upperBound - scale.raw.lowerBound
        guard span > 0 else { return 0 }
        return clamp(Double(raw - scale.raw.lowerBound) / Double(span))
    }

    /// The raw value for a normalized loudness; `roundUp` picks the step at or above it.
    public static func raw(normalized: Double, scale: VolumeScale, roundUp: Bool) -> Int {
        let volume = clamp(normalized)
        if let db = scale.decibels, db.range.lowerBound < db.range.upperBound {
            let (low, high) = (db.range.lowerBound, db.range.upperBound)
            let target: Double
            if high - low <= maximumLinearSpan {
                target = volume * Double(high - low) + Double(low)
            } else if volume <= 0 && low == VolumeScale.muteDecibels {
                return scale.raw.lowerBound
            } else {
                var linear = volume
                if low != VolumeScale.muteDecibels {
                    let floor = pow(10, Double(low - high) / 6000)
                    linear = volume * (1 - floor) + floor
                }
                target = 6000 * log10(linear) + Double(high)
            }
            let centidB = Int(roundUp ? target.rounded(.up) : target.rounded(.down))
            if let value = db.toRaw(centidB, roundUp) { return clampRaw(value, scale) }
        }
        let span = Double(scale.raw.upperBound - scale.raw.lowerBound)
        let steps = volume * span
        return clampRaw(scale.raw.lowerBound + Int(roundUp ? steps.rounded(.up) : steps.rounded(.down)), scale)
    }

    /// The smallest raw value at least as loud as `level`. Throws for a dB level on an element without dB.
    public static func raw(for level: VolumeLevel, scale: VolumeScale, element: String) throws(AnnounceError) -> Int {
        switch level {
        case let .percent(value):
            return raw(normalized: value / 100, scale: scale, roundUp: true)
        case let .decibels(value):
            guard let db = scale.decibels else {
                throw AnnounceError(
                    .badConfiguration,
                    "mixer element \(element) has no dB information; give the volume in percent (e.g. 60%)")
            }
            let centidB = Int((value * 100).rounded(.up))
            if centidB > db.range.upperBound { return scale.raw.upperBound }
            if centidB <= db.range.lowerBound { return scale.raw.lowerBound }
            return clampRaw(db.toRaw(centidB, true) ?? scale.raw.upperBound, scale)
        }
    }

    /// `raw` lowered by `decibels` (positive: quieter). With dB information exactly, per the element's own
    /// table; without, on alsamixer's perceptual scale (normalized × 10^(−dB/60)), which for a PulseAudio
    /// volume is exact.
    public static func attenuated(raw: Int, by decibels: Double, scale: VolumeScale) -> Int {
        guard decibels > 0 else { return raw }
        if let db = scale.decibels, let current = db.fromRaw(raw) {
            if current <= db.range.lowerBound { return raw }
            let target = Double(current) - decibels * 100
            if target <= Double(db.range.lowerBound) { return scale.raw.lowerBound }
            return min(raw, clampRaw(db.toRaw(Int(target.rounded(.down)), false) ?? scale.raw.lowerBound, scale))
        }
        let span = scale.raw.upperBound - scale.raw.lowerBound
        guard span > 0 else { return raw }
        let normalized = Double(raw - scale.raw.lowerBound) / Double(span)
        let lowered = normalized * pow(10, -decibels / 60)
        return min(raw, clampRaw(scale.raw.lowerBound + Int((lowered * Double(span)).rounded()), scale))
    }

    private static func clamp(_ value: Double) -> Double { min(1, max(0, value)) }

    private static func clampRaw(_ value: Int, _ scale: VolumeScale) -> Int {
        min(scale.raw.upperBound, max(scale.raw.lowerBound, value))
    }
}
