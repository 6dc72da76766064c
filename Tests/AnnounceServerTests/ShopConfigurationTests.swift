import AnnounceCore
import AnnounceInput
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceServer

/// `[reading]`, `[keys]` and `[summary]` in announced.toml: what they set, and every mistake named.
struct ShopConfigurationTests {
    let base = DaemonConfiguration(socketPath: "/run/a.sock", stateDirectory: "/var/lib/a", voicesDirectory: "/v")

    @Test func theShopSectionsSetWhatTheySay() throws {
        let c = try ConfigFile.apply(
            """
            [reading]
            style = "units"
            liang = true
            [reading.channels.alipay]
            liang = false
            [reading.channels.wechat]
            style = "decimal"

            [keys]
            enabled = true
            devices = ["/dev/input/by-id/usb-keypad-event-kbd", "name:Terminal Keys"]
            volume_up = "KEY_KPPLUS"
            volume_down = "kpminus"
            mute = 113
            replay = "KEY_KPENTER"
            today = "KEY_KPENTER"
            long_press = "2s"
            repeat_delay = "500ms"
            repeat_interval = 0.25
            debounce = "20ms"
            volume_step = 5

            [summary]
            say_at = "21:30"
            """, onto: base)
        #expect(c.reading.all == ReadingDefaults.Choice(style: .units, liang: true))
        #expect(c.reading.channels["alipay"] == ReadingDefaults.Choice(liang: false))
        #expect(c.reading.channels["wechat"] == ReadingDefaults.Choice(style: .decimal))
        #expect(c.keys.enabled)
        #expect(c.keys.devices == [.path("/dev/input/by-id/usb-keypad-event-kbd"), .name("Terminal Keys")])
        #expect(c.keys.bindings.volumeUp == KeyCode(name: "KEY_KPPLUS") && c.keys.bindings.volumeDown?.value == 74)
        #expect(c.keys.bindings.mute?.value == 113 && c.keys.bindings.replay == KeyCode(name: "KEY_KPENTER"))
        #expect(c.keys.bindings.today == c.keys.bindings.replay)
        #expect(c.keys.bindings.longPressMs == 2000 && c.keys.bindings.repeatDelayMs == 500)
        #expect(c.keys.bindings.repeatIntervalMs == 250 && c.keys.bindings.debounceMs == 20)
        #expect(c.keys.volumeStep == 5)
        #expect(c.summaryTime == DailyTime(parsing: "21:30") && c.summaryTime?.description == "21:30")
        #expect(c.problems().isEmpty, "\(c.problems())")
        #expect(c.summary.contains("today = \"KEY_KPENTER\" (held)") && c.summary.contains("say_at = \"21:30\""))
        // "" unbinds a key.
        let none = try ConfigFile.apply("[keys]\nmute = \"\"\n", onto: base)
        #expect(none.keys.bindings.mute == nil && none.keys.bindings.volumeUp?.value == 115)
    }

    @Test func keysAreOffAndNothingIsReadUnlessAsked() {
        #expect(!base.keys.enabled && base.summaryTime == nil && base.reading.isEmpty)
    }

    @Test func everyMistakeIsNamed() {
        for (text, expected) in [
            ("[keys]\nvolume_up = \"KEY_VOLUMEUPP\"\n", "keys.volume_up: unknown key \"KEY_VOLUMEUPP\""),
            ("[keys]\nmute = 900\n", "keys.mute: must be a key name"),
            ("[keys]\nbeep = \"KEY_A\"\n", "keys.beep: unknown key"),
            ("[keys]\ndevices = [\"event3\"]\n", "keys.devices: \"event3\" is neither a path"),
            ("[keys]\ndevices = \"/dev/input/event3\"\n", "keys.devices: must be an array"),
            ("[keys]\nenabled = \"yes\"\n", "keys.enabled: must be true or false"),
            ("[keys]\nlong_press = \"forever\"\n", "keys.long_press: must be a duration"),
            ("[keys]\nlong_press = \"100ms\"\n", "keys.long_press: must be 300ms … 10s, not 100ms"),
            ("[keys]\nrepeat_interval = 0\n", "keys.repeat_interval: must be 50ms … 5s, not 0"),
            ("[keys]\ndebounce = \"1s\"\n", "keys.debounce: must be 0 … 500ms, not 1s"),
            ("[reading]\nstyle = \"fancy\"\n", "reading.style: must be \"decimal\""),
            ("[reading]\nliang = 1\n", "reading.liang: must be true or false"),
            ("[reading]\ntone = 1\n", "reading.tone: unknown key"),
            ("[reading.channels.alipay]\npitch = 1\n", "reading.channels.alipay.pitch: unknown key"),
            ("[summary]\nsay_at = \"25:00\"\n", "summary.say_at: must be a local time"),
            ("[summary]\nsay_at = \"9:5\"\n", "summary.say_at: must be a local time"),
            ("[summary]\nat = \"21:00\"\n", "summary.at: unknown key"),
        ] {
            let error = #expect(throws: AnnounceError.self, "\(text)") { try ConfigFile.apply(text, onto: base) }
            #expect(error?.message.contains(expected) == true, "\(String(describing: error?.message)) for \(text)")
        }
    }

    @Test func bindingsThatCannotWorkAreConfigurationProblems() throws {
        for (text, expected) in [
            ("[keys]\nmute = \"KEY_VOLUMEUP\"\n", "keys.mute: KEY_VOLUMEUP is already keys.volume_up"),
            ("[keys]\ntoday = \"KEY_VOLUMEDOWN\"\n", "keys.today: KEY_VOLUMEDOWN is a volume key"),
            ("[keys]\nvolume_step = 0\n", "keys.volume_step: must be 1…50"),
            ("[keys]\nenabled = true\nvolume_up = \"\"\nvolume_down = \"\"\nmute = \"\"\nreplay = \"\"\ntoday = \"\"\n",
             "keys: enabled, but no key does anything"),
        ] {
            let c = try ConfigFile.apply(text, onto: base)
            #expect(c.problems().contains { $0.contains(expected) }, "\(c.problems()) for \(text)")
        }
    }

    @Test func readingFlagsWinOverTheFile() throws {
        var c = try ConfigFile.apply("[reading]\nstyle = \"units\"\nliang = true\n", onto: base)
        var overrides = ConfigurationOverrides()
        overrides.readingStyle = .decimal
        overrides.liang = false
        overrides.apply(to: &c)
        #expect(c.reading.all == ReadingDefaults.Choice(style: .decimal, liang: false))
    }

    /// examples/announced.toml shows every shop setting, and is a configuration the daemon takes.
    @Test func theExampleConfigurationShowsTheShopSettings() throws {
        let text = try String(contentsOfFile: "\(Paths.root)/examples/announced.toml", encoding: .utf8)
        let c = try ConfigFile.apply(text, source: "examples/announced.toml", onto: DaemonConfiguration.defaults())
        #expect(c.problems().isEmpty, "\(c.problems())")
        // Keys stay off until the unit may read input devices (docs/deployment.md); the daily total is shown, off.
        #expect(!c.keys.enabled && c.summaryTime == nil, "\(c.summary)")
        #expect(c.reading.all == ReadingDefaults.Choice(style: .decimal, liang: false))
        #expect(c.reading.channels["alipay"]?.style == .units)
        #expect(c.leadInMs == 50 && c.pauseMs == 500, "the example says the defaults: \(c.leadInMs), \(c.pauseMs)")
        for key in ["[reading]", "[keys]", "[summary]", "volume_step", "long_press", "repeat_delay", "repeat_interval",
                    "devices", "volume_up", "volume_down", "mute", "replay", "today", "say_at", "lead_in_ms",
                    "pause_ms"] {
            #expect(text.contains(key), "examples/announced.toml does not show \(key)")
        }
        // What the comments say to do works: enabled, and the daily total at its time.
        let enabled = text.replacingOccurrences(of: "enabled = false", with: "enabled = true")
            .replacingOccurrences(of: "# say_at = ", with: "say_at = ")
        let on = try ConfigFile.apply(enabled, onto: DaemonConfiguration.defaults())
        #expect(on.keys.enabled && on.summaryTime?.description == "21:30" && on.problems().isEmpty)
    }
}
