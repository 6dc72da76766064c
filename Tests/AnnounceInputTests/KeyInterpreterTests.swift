import AnnounceInput
import CInput
import Testing

/// The key rules, on a clock the test drives: what an owner pressing, holding and releasing keys gets.
@Suite struct KeyInterpreterTests {
    static let up = KeyCode(UInt16(KEY_VOLUMEUP))
    static let down = KeyCode(UInt16(KEY_VOLUMEDOWN))
    static let mute = KeyCode(UInt16(KEY_MUTE))
    static let play = KeyCode(UInt16(KEY_PLAYPAUSE))

    /// One key event at a time: (ms, device, key, value).
    struct Event {
        var at: Int64
        var device = 1
        var key: KeyCode
        var value: Int32
    }

    /// Feeds `events` in order and ticks every `step` ms (as the monitor's poll timeout would) until `end`;
    /// returns each action with the time it came.
    static func play(
        _ events: [Event], until end: Int64, bindings: KeyBindings = KeyBindings(), step: Int64 = 5,
        gone: (at: Int64, device: Int)? = nil
    ) -> [(at: Int64, action: KeyAction)] {
        var interpreter = KeyInterpreter(bindings: bindings)
        var actions: [(Int64, KeyAction)] = []
        var pending = events[...]
        var now: Int64 = 0
        var goneDone = false
        while now <= end {
            while let event = pending.first, event.at <= now {
                pending = pending.dropFirst()
                let done = interpreter.handle(device: event.device, code: event.key, value: event.value, atMs: event.at)
                for action in done { actions.append((event.at, action)) }
            }
            if let gone, !goneDone, gone.at <= now {
                interpreter.deviceGone(gone.device)
                goneDone = true
            }
            for action in interpreter.tick(atMs: now) { actions.append((now, action)) }
            now += step
        }
        return actions
    }

    static func press(_ key: KeyCode, at: Int64, for duration: Int64, device: Int = 1) -> [Event] {
        [
            Event(at: at, device: device, key: key, value: 1),
            Event(at: at + duration, device: device, key: key, value: 0),
        ]
    }

    @Test func aVolumeKeyActsAtOnceWhenPressed() {
        let actions = Self.play(Self.press(Self.up, at: 100, for: 80), until: 1000)
        #expect(actions.map(\.action) == [.volumeUp])
        #expect(actions.first?.at == 100, "the step comes with the press, not the release")
    }

    @Test func aHeldVolumeKeyRepeatsAtItsOwnPaceNotTheKernels() {
        // Held 2 s, with the kernel's auto-repeat (value 2) every 33 ms from 250 ms on, as a keyboard sends it.
        var events = [Event(at: 0, key: Self.down, value: 1)]
        for time in stride(from: Int64(250), to: 2000, by: 33) {
            events.append(Event(at: time, key: Self.down, value: 2))
        }
        events.append(Event(at: 2000, key: Self.down, value: 0))
        let actions = Self.play(events, until: 3000)
        // The press, then after 600 ms one step every 300 ms while held: 600, 900, 1200, 1500, 1800.
        #expect(actions.map(\.at) == [0, 600, 900, 1200, 1500, 1800], "\(actions)")
        #expect(actions.allSatisfy { $0.action == .volumeDown })
    }

    @Test func aLateTickGivesOneStepNotAVolley() {
        var interpreter = KeyInterpreter(bindings: KeyBindings())
        #expect(interpreter.handle(device: 1, code: Self.up, value: 1, atMs: 0) == [.volumeUp])
        #expect(interpreter.nextDeadline == 600)
        // The thread was held up for 2 s: one step, and the next one an interval later.
        #expect(interpreter.tick(atMs: 2600) == [.volumeUp])
        #expect(interpreter.nextDeadline == 2700)
        #expect(interpreter.tick(atMs: 2650) == [])
        #expect(interpreter.handle(device: 1, code: Self.up, value: 0, atMs: 2660) == [])
    }

    @Test func aShortPressOfTheSharedKeyReplaysOnRelease() {
        // KEY_PLAYPAUSE is replay (short) and today (long) by default.
        let actions = Self.play(Self.press(Self.play, at: 100, for: 300), until: 3000)
        #expect(actions.map(\.action) == [.replay], "\(actions)")
        let at = actions.first?.at ?? 0
        #expect(at >= 400 && at <= 440, "replayed once the release counted (debounce 30 ms), at \(at)")
    }

    @Test func aLongPressSpeaksTheTotalWhileHeldAndNothingOnRelease() {
        let actions = Self.play(Self.press(Self.play, at: 100, for: 2500), until: 4000)
        #expect(actions.map(\.action) == [.today], "\(actions)")
        #expect(actions.first?.at == 1600, "at the long-press time, while still held")
    }

    @Test func aDedicatedTotalKeyIgnoresShortPresses() {
        var bindings = KeyBindings()
        bindings.today = KeyCode(UInt16(KEY_F1))
        let short = Self.play(Self.press(KeyCode(UInt16(KEY_F1)), at: 0, for: 500), until: 2000, bindings: bindings)
        #expect(short.isEmpty, "\(short)")
        let long = Self.play(Self.press(KeyCode(UInt16(KEY_F1)), at: 0, for: 1800), until: 2000, bindings: bindings)
        #expect(long.map(\.action) == [.today])
        // …and the play key, no longer shared, replays at once when pressed.
        let replay = Self.play(Self.press(Self.play, at: 0, for: 2000), until: 3000, bindings: bindings)
        #expect(replay.map(\.action) == [.replay] && replay.first?.at == 0, "\(replay)")
    }

    @Test func muteActsWhenPressedAndDoesNotRepeat() {
        let actions = Self.play(Self.press(Self.mute, at: 10, for: 3000), until: 4000)
        #expect(actions.map(\.action) == [.mute] && actions.first?.at == 10, "\(actions)")
    }

    @Test func contactBounceIsOnePress() {
        // A worn button: press, released for 4 ms, pressed again, released at 120 ms with another bounce.
        let bouncy = [
            Event(at: 0, key: Self.up, value: 1), Event(at: 5, key: Self.up, value: 0),
            Event(at: 9, key: Self.up, value: 1), Event(at: 120, key: Self.up, value: 0),
            Event(at: 123, key: Self.up, value: 1), Event(at: 126, key: Self.up, value: 0),
        ]
        #expect(Self.play(bouncy, until: 1000).map(\.action) == [.volumeUp])
        // A long press with a bounce at its start is still a long press, and never a replay.
        let held = [
            Event(at: 0, key: Self.play, value: 1), Event(at: 4, key: Self.play, value: 0),
            Event(at: 7, key: Self.play, value: 1), Event(at: 2000, key: Self.play, value: 0),
        ]
        let actions = Self.play(held, until: 3000)
        #expect(actions.map(\.action) == [.today] && actions.first?.at == 1500, "\(actions)")
        // Two real presses further apart than the debounce time are two presses.
        let twice = Self.press(Self.up, at: 0, for: 50) + Self.press(Self.up, at: 150, for: 50)
        #expect(Self.play(twice, until: 1000).map(\.action) == [.volumeUp, .volumeUp])
    }

    @Test func aKeypadUnpluggedMidPressDoesNothing() {
        // The play key is down when the device goes: no replay at "release", no total at 1.5 s.
        let actions = Self.play(
            [Event(at: 0, key: Self.play, value: 1)], until: 3000, gone: (at: 200, device: 1))
        #expect(actions.isEmpty, "\(actions)")
        // A volume key held when it goes stops repeating.
        let volume = Self.play([Event(at: 0, key: Self.up, value: 1)], until: 3000, gone: (at: 700, device: 1))
        #expect(volume.map(\.at) == [0, 600], "\(volume)")
    }

    @Test func twoKeypadsHaveTheirOwnPresses() {
        // Device 2 releases the play key; device 1 still holds it: device 1's long press still counts.
        let events = [
            Event(at: 0, device: 1, key: Self.play, value: 1), Event(at: 100, device: 2, key: Self.play, value: 1),
            Event(at: 300, device: 2, key: Self.play, value: 0),
        ]
        let actions = Self.play(events, until: 2000)
        #expect(actions.map(\.action) == [.replay, .today], "\(actions)")
        #expect(actions.map(\.at) == [330, 1500], "\(actions)")
    }

    @Test func otherKeysAndReleasesWithoutAPressAreIgnored() {
        var interpreter = KeyInterpreter(bindings: KeyBindings())
        #expect(interpreter.handle(device: 1, code: KeyCode(UInt16(KEY_A)), value: 1, atMs: 0).isEmpty)
        #expect(interpreter.handle(device: 1, code: Self.up, value: 0, atMs: 0).isEmpty, "opened while held")
        #expect(interpreter.nextDeadline == nil)
        var unbound = KeyBindings()
        unbound.volumeUp = nil
        var without = KeyInterpreter(bindings: unbound)
        #expect(without.handle(device: 1, code: Self.up, value: 1, atMs: 0).isEmpty)
    }

    @Test func bindingsThatCannotWorkAreRefused() {
        var bindings = KeyBindings()
        #expect(bindings.problems().isEmpty, "the defaults work")
        bindings.mute = Self.up
        #expect(bindings.problems() == ["keys.mute: KEY_VOLUMEUP is already keys.volume_up"])
        bindings = KeyBindings()
        bindings.today = Self.down
        #expect(bindings.problems().first?.contains("keys.today: KEY_VOLUMEDOWN is a volume key") == true)
        bindings = KeyBindings()
        bindings.today = Self.mute
        #expect(bindings.problems().isEmpty, "mute may share its key with the long press")
    }

    @Test func keysAreNamedAsInTheKernelHeader() {
        // Against the header as the C compiler reads it.
        #expect(KeyCode(name: "KEY_VOLUMEUP")?.value == UInt16(KEY_VOLUMEUP))
        #expect(KeyCode(name: "volumedown")?.value == UInt16(KEY_VOLUMEDOWN))
        #expect(KeyCode(name: "Mute")?.value == UInt16(KEY_MUTE))
        #expect(KeyCode(name: "KEY_KPENTER")?.value == UInt16(KEY_KPENTER))
        #expect(KeyCode(name: "KEY_F24")?.value == UInt16(KEY_F24))
        #expect(KeyCode(name: "BTN_LEFT")?.value == UInt16(BTN_LEFT))
        #expect(KeyCode(name: "KEY_PLAYPAUSE")?.value == UInt16(KEY_PLAYPAUSE))
        #expect(KeyCode(name: "0")?.value == UInt16(KEY_0), "the key marked 0, not code 0")
        for bad in ["KEY_VOLUMEUPP", "", "164", "-1", "volume up", "KEY_"] {
            #expect(KeyCode(name: bad) == nil, "\(bad)")
        }
        #expect(KeyCode(code: 164)?.value == 164)
        #expect(KeyCode(code: 0) == nil && KeyCode(code: 768) == nil && KeyCode(code: -1) == nil)
        #expect(KeyCode(UInt16(KEY_MUTE)).description == "KEY_MUTE")
        #expect(KeyCode(UInt16(KEY_HANGEUL)).description == "KEY_HANGEUL", "one of two names: the first")
        #expect(KeyCode(767).description == "key 767")
    }
}
