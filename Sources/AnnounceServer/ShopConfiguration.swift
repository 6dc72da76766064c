import AnnounceCore
import AnnounceInput

/// The hardware keys (`[keys]` in announced.toml, docs/configuration.md): which input devices, which key does
/// what, the timing of presses, and the volume step.
public struct KeysConfiguration: Sendable, Equatable {
    /// Off unless asked for: reading input devices needs group `input` (docs/deployment.md).
    public var enabled = false
    /// Paths or `name:` specs; empty: every device that has one of the keys.
    public var devices: [InputDeviceSpec] = []
    public var bindings = KeyBindings()
    /// One press of a volume key, percent on alsamixer's scale.
    public var volumeStep = 10

    public init() {}

    public func problems() -> [String] {
        var problems = bindings.problems()
        if !(1...50).contains(volumeStep) { problems.append("keys.volume_step: must be 1…50 (percent)") }
        if enabled && bindings.keys.isEmpty { problems.append("keys: enabled, but no key does anything") }
        return problems
    }

    /// The `[keys]` lines of `announced --check-config`.
    public var summary: String {
        func key(_ action: KeyAction) -> String { bindings[action].map { "\"\($0)\"" } ?? "\"\" (none)" }
        func ms(_ value: Int) -> String { "\"\(value)ms\"" }
        let listed = devices.map { "\"\($0)\"" }.joined(separator: ", ")
        return """
            enabled = \(enabled)
            devices = [\(listed)]\(devices.isEmpty ? " (every device with these keys)" : "")
            volume_up = \(key(.volumeUp))
            volume_down = \(key(.volumeDown))
            mute = \(key(.mute))
            replay = \(key(.replay))
            today = \(key(.today)) (held)
            long_press = \(ms(bindings.longPressMs))
            repeat_delay = \(ms(bindings.repeatDelayMs))
            repeat_interval = \(ms(bindings.repeatIntervalMs))
            debounce = \(ms(bindings.debounceMs))
            volume_step = \(volumeStep)
            """
    }
}

/// A time of day on the terminal's clock, `21:30`.
public struct DailyTime: Sendable, Equatable, CustomStringConvertible {
    public var hour: Int
    public var minute: Int

    /// `H:MM` or `HH:MM`, 00:00…23:59.
    public init?(parsing text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...2).contains(parts[0].count), parts[1].count == 2,
            parts.allSatisfy({ $0.utf8.allSatisfy { (48...57).contains($0) } }),
            let hour = Int(parts[0]), let minute = Int(parts[1]), (0...23).contains(hour), (0...59).contains(minute)
        else { return nil }
        self.hour = hour
        self.minute = minute
    }

    public var description: String { "\(hour < 10 ? "0" : "")\(hour):\(minute < 10 ? "0" : "")\(minute)" }
}

extension ReadingDefaults {
    /// The `[reading]` lines of `announced --check-config`.
    var summary: String {
        func line(_ choice: Choice) -> String {
            "style = \(choice.style.map { "\"\($0.rawValue)\"" } ?? "(the language's own)"), "
                + "liang = \(choice.liang.map(String.init) ?? "(false)")"
        }
        var lines = [line(all)]
        for (channel, choice) in channels.sorted(by: { $0.key < $1.key }) {
            lines.append("[reading.channels.\(channel)] " + line(choice))
        }
        return lines.joined(separator: "\n")
    }
}
