/// Turns key events into shop actions: pure, driven by the caller's clock, so every rule is unit-tested.
///
/// - A volume key acts when pressed and, held, repeats: once after `repeatDelayMs`, then every
///   `repeatIntervalMs`, until released. The kernel's own auto-repeat (value 2, about 30 a second on a keyboard)
///   is ignored: ten volume steps in a third of a second is not "sensible".
/// - `mute` and `replay` act when pressed — unless their key is also the `today` key: then a press shorter than
///   `longPressMs` does its short action on release, and a press held `longPressMs` speaks the day's total, once,
///   while still held (the owner hears that it worked) and nothing on release.
/// - Contact bounce: a release followed within `debounceMs` by a press of the same key is no release at all (the
///   key was held throughout), so a release counts only once `debounceMs` have passed without a new press.
/// - Every device's keys are their own: two keypads do not share a press. A device that goes away mid-press ends
///   its presses without acting (pulling a keypad out is not a key press).
public struct KeyInterpreter: Sendable {
    public let bindings: KeyBindings

    private struct Held: Sendable {
        var pressedAt: Int64
        /// When the next repeat or the long press is due.
        var dueAt: Int64?
        var longDone = false
        /// Released at this time, unless a press follows within the debounce time.
        var releasedAt: Int64?
    }

    private struct Key: Hashable, Sendable {
        var device: Int
        var code: KeyCode
    }

    private var held: [Key: Held] = [:]

    public init(bindings: KeyBindings) {
        self.bindings = bindings
    }

    /// The keys to listen to: a device that has none of them is not used.
    public var keys: Set<KeyCode> { bindings.keys }

    /// When `tick` next has something to do (a repeat, a long press, a release), in the caller's milliseconds.
    public var nextDeadline: Int64? {
        held.values.compactMap { state in
            state.releasedAt.map { $0 + Int64(bindings.debounceMs) } ?? state.dueAt
        }.min()
    }

    /// One `EV_KEY` event: `value` 1 pressed, 0 released, 2 the kernel's auto-repeat. Returns what to do now.
    public mutating func handle(device: Int, code: KeyCode, value: Int32, atMs now: Int64) -> [KeyAction] {
        guard keys.contains(code) else { return [] }
        let key = Key(device: device, code: code)
        switch value {
        case 1:
            if var state = held[key] {
                // Pressed again before its release counted: a bounce (or a doubled event), the key stays held.
                state.releasedAt = nil
                held[key] = state
                return []
            }
            return press(key, at: now)
        case 0:
            guard var state = held[key], state.releasedAt == nil else { return [] }
            if bindings.debounceMs == 0 {
                held[key] = nil
                return release(key, state)
            }
            state.releasedAt = now
            held[key] = state
            return []
        default:
            return []  // the kernel's auto-repeat: repeats are ours
        }
    }

    /// Repeats, long presses and releases that are due at `now`.
    public mutating func tick(atMs now: Int64) -> [KeyAction] {
        var actions: [KeyAction] = []
        let order = held.keys.sorted { ($0.device, $0.code.value) < ($1.device, $1.code.value) }
        for key in order {
            guard var state = held[key] else { continue }
            if let releasedAt = state.releasedAt {
                if releasedAt + Int64(bindings.debounceMs) <= now {
                    held[key] = nil
                    actions += release(key, state)
                }
                continue
            }
            guard var dueAt = state.dueAt, dueAt <= now else { continue }
            if key.code == bindings.today {
                actions.append(.today)
                state.longDone = true
                state.dueAt = nil
            } else if let action = shortAction(key.code), isRepeating(action) {
                // One step per tick, however late the tick: a stalled thread does not fire a volley afterwards.
                actions.append(action)
                while dueAt <= now { dueAt += Int64(bindings.repeatIntervalMs) }
                state.dueAt = dueAt
            } else {
                state.dueAt = nil
            }
            held[key] = state
        }
        return actions
    }

    /// The device is gone: its keys are up, and nothing fires for them.
    public mutating func deviceGone(_ device: Int) {
        held = held.filter { $0.key.device != device }
    }

    private mutating func press(_ key: Key, at now: Int64) -> [KeyAction] {
        var state = Held(pressedAt: now)
        var actions: [KeyAction] = []
        if key.code == bindings.today {
            state.dueAt = now + Int64(bindings.longPressMs)
        } else if let action = shortAction(key.code) {
            actions.append(action)
            if isRepeating(action) { state.dueAt = now + Int64(bindings.repeatDelayMs) }
        }
        held[key] = state
        return actions
    }

    /// A release that counted: a key that is also the long-press key does its short action now, if it was not
    /// held long.
    private func release(_ key: Key, _ state: Held) -> [KeyAction] {
        guard key.code == bindings.today, !state.longDone, let action = shortAction(key.code), !isRepeating(action)
        else { return [] }
        return [action]
    }

    private func shortAction(_ code: KeyCode) -> KeyAction? {
        [KeyAction.volumeUp, .volumeDown, .mute, .replay].first { bindings[$0] == code }
    }

    private func isRepeating(_ action: KeyAction) -> Bool { action == .volumeUp || action == .volumeDown }
}
