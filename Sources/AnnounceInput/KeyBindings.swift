/// A key as the kernel reports it: an `EV_KEY` code from `linux/input-event-codes.h` (115 is `KEY_VOLUMEUP`).
public struct KeyCode: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var value: UInt16

    public init(_ value: UInt16) { self.value = value }

    /// The largest key code (`KEY_MAX`).
    public static let maximum: UInt16 = 0x2ff

    /// A key by name: `KEY_VOLUMEUP`, `volumeup` (the `KEY_` prefix and case are optional; `0` is `KEY_0`),
    /// `BTN_LEFT`. Nil for anything else.
    public init?(name: String) {
        let upper = name.uppercased()
        guard let code = KeyNames.codes[upper] ?? KeyNames.codes["KEY_" + upper] else { return nil }
        self.init(code)
    }

    /// A key by its number, 1…767 (`KEY_MAX`); nil outside.
    public init?(code: Int) {
        guard code > 0, code <= Int(Self.maximum) else { return nil }
        self.init(UInt16(code))
    }

    /// The key's name (`KEY_VOLUMEUP`), or its number for a code without one.
    public var description: String { Self.names[value] ?? "key \(value)" }

    private static let names: [UInt16: String] = {
        var names: [UInt16: String] = [:]
        // Several names share a code (KEY_MUTE and KEY_MIN_INTERESTING …): keep the shortest, then the first.
        for (name, code) in KeyNames.codes.sorted(by: { $0.key < $1.key }) {
            if let known = names[code], known.count <= name.count { continue }
            names[code] = name
        }
        return names
    }()

    public static func < (lhs: KeyCode, rhs: KeyCode) -> Bool { lhs.value < rhs.value }
}

/// What a key does in the shop (docs/configuration.md, `[keys]`).
public enum KeyAction: String, Sendable, CaseIterable, CustomStringConvertible {
    /// The speaker's everyday volume one step up, the new level spoken.
    case volumeUp = "volume_up"
    /// One step down.
    case volumeDown = "volume_down"
    /// Mute, or unmute if muted.
    case mute
    /// Say the last payment again.
    case replay
    /// Speak the day's total (a long press).
    case today

    public var description: String { rawValue }
}

/// Which key does what, and the timing of presses. Volume keys repeat while held; `today` is a long press, and
/// may share its key with `mute` or `replay`, which then act on a short press (on release).
public struct KeyBindings: Sendable, Equatable {
    public var volumeUp: KeyCode? = KeyCode(115)  // KEY_VOLUMEUP
    public var volumeDown: KeyCode? = KeyCode(114)  // KEY_VOLUMEDOWN
    public var mute: KeyCode? = KeyCode(113)  // KEY_MUTE
    public var replay: KeyCode? = KeyCode(164)  // KEY_PLAYPAUSE
    /// Held for `longPressMs`: the day's total.
    public var today: KeyCode? = KeyCode(164)  // KEY_PLAYPAUSE, held
    /// How long a press must last to count as long, milliseconds.
    public var longPressMs = 1500
    /// A volume key held this long starts repeating, milliseconds…
    public var repeatDelayMs = 600
    /// …one step each this long.
    public var repeatIntervalMs = 300
    /// A press this soon after the same key's release is contact bounce, not a press, milliseconds.
    public var debounceMs = 30

    public init() {}

    /// The key of an action.
    public subscript(action: KeyAction) -> KeyCode? {
        get {
            switch action {
            case .volumeUp: volumeUp
            case .volumeDown: volumeDown
            case .mute: mute
            case .replay: replay
            case .today: today
            }
        }
        set {
            switch action {
            case .volumeUp: volumeUp = newValue
            case .volumeDown: volumeDown = newValue
            case .mute: mute = newValue
            case .replay: replay = newValue
            case .today: today = newValue
            }
        }
    }

    /// Every key bound to something.
    public var keys: Set<KeyCode> { Set(KeyAction.allCases.compactMap { self[$0] }) }

    /// Why the bindings cannot work together, one problem per line (config key names).
    public func problems() -> [String] {
        var problems: [String] = []
        let short: [KeyAction] = [.volumeUp, .volumeDown, .mute, .replay]
        for (index, first) in short.enumerated() {
            for second in short[(index + 1)...] {
                if let key = self[first], key == self[second] {
                    problems.append("keys.\(second): \(key) is already keys.\(first)")
                }
            }
        }
        if let today, today == volumeUp || today == volumeDown {
            problems.append(
                "keys.today: \(today) is a volume key, which repeats while held; give the long press another key")
        }
        // The timings' ranges are the configuration's (DaemonConfiguration.durationRanges), checked where it is read.
        return problems
    }
}
