import AnnounceInput
import Foundation
import Logging
import Synchronization
import Testing

/// The monitor against real files and real system calls on this machine, which has no input devices (no
/// /dev/input, no /dev/uinput): every way a device can be unusable, and the folder watch that makes hot-plug work.
/// Real key presses through the kernel are tested in the VM (Tests/SystemTests, a uinput keypad).
@Suite struct InputMonitorTests {
    /// Every line the monitor logs, with its metadata, as a user reading the log would see them.
    final class LogRecorder: Sendable {
        let lines = Mutex<[String]>([])

        var logger: Logger {
            var logger = Logger(label: "test") { _ in Handler(recorder: self) }
            logger.logLevel = .trace
            return logger
        }

        struct Handler: LogHandler {
            let recorder: LogRecorder
            var metadata: Logger.Metadata = [:]
            var logLevel: Logger.Level = .trace
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }

            func log(event: LogEvent) {
                let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                let line = "\(event.level) \(event.message) \(fields.joined(separator: " "))"
                recorder.lines.withLock { $0.append(line) }
            }
        }

        /// Waits until a line contains every one of `parts` (or 30 s pass: false). The lines are looked at once more
        /// after the deadline: on a machine whose every thread is busy, this task may wake only after it.
        func waitFor(_ parts: String...) async -> Bool {
            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                if lines.withLock({ $0.contains { line in parts.allSatisfy(line.contains) } }) { return true }
                if ContinuousClock.now >= deadline { return false }
                try? await Task.sleep(for: .milliseconds(10))
            }
        }

        var text: String { lines.withLock { $0.joined(separator: "\n") } }
    }

    func folder() throws -> String {
        let path = "/tmp/ann-input-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func monitor(_ specs: [InputDeviceSpec], directory: String, log: LogRecorder) -> InputMonitor {
        InputMonitor(specs: specs, bindings: KeyBindings(), directory: directory, logger: log.logger) { action in
            Issue.record("no key can be pressed here, yet \(action) came")
        }
    }

    @Test func aMissingOrUnusableDeviceIsSaidOnceAndNothingStops() async throws {
        let directory = try folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = LogRecorder()
        // /dev/null is a character device but not an input device; the other path does not exist.
        let missing = "\(directory)/by-id/usb-keypad-event-kbd"
        let monitor = monitor([.path("/dev/null"), .path(missing)], directory: directory, log: log)
        monitor.start()
        #expect(await log.waitFor("warning", "input device cannot be used", "/dev/null is not an input event device"),
                "\(log.text)")
        #expect(await log.waitFor("warning", "input device not present", missing), "\(log.text)")
        #expect(monitor.devices.isEmpty)
        // The missing path appears (udev makes the by-id folder, then the link): it is looked at at once — and is no
        // input device either, which is said; the problems said before are not said again.
        try FileManager.default.createDirectory(atPath: "\(directory)/by-id", withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: missing, contents: Data("not a device".utf8)))
        #expect(await log.waitFor("input device cannot be used", "\(missing) is not an input event device"),
                "the path that appeared was not looked at: \(log.text)")
        monitor.stop()
        let lines = log.lines.withLock { $0 }
        #expect(lines.filter { $0.contains("/dev/null is not an input event device") }.count == 1, "\(log.text)")
        #expect(lines.filter { $0.contains("input device not present") }.count == 1, "\(log.text)")
    }

    @Test func aNodeThatAppearsIsLookedAtAtOnceEvenInAFolderThatCameLater() async throws {
        let parent = try folder()
        defer { try? FileManager.default.removeItem(atPath: parent) }
        let directory = "\(parent)/input"
        let log = LogRecorder()
        let monitor = monitor([], directory: directory, log: log)
        monitor.start()
        #expect(await log.waitFor("warning", "no input device folder", directory), "\(log.text)")
        // The folder appears (a first USB keypad on a machine that had none), then a node in it.
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        // The folder's creation makes the monitor watch it and then list it, so the node is seen either way: by the
        // listing if it was made before the watch, by the watch if after.
        let node = "\(directory)/event0"
        #expect(FileManager.default.createFile(atPath: node, contents: Data()))
        #expect(await log.waitFor("input node skipped", node), "\(log.text)")
        monitor.stop()
        #expect(monitor.devices.isEmpty)
    }

    @Test func aNamedDeviceSpecAndPathsAreParsed() {
        let byID = "/dev/input/by-id/usb-x-event-kbd"
        #expect(InputDeviceSpec(parsing: byID) == .path(byID))
        #expect(InputDeviceSpec(parsing: "name:USB Keypad") == .name("USB Keypad"))
        #expect(InputDeviceSpec(parsing: "name:") == nil)
        #expect(InputDeviceSpec(parsing: "event3") == nil)
        #expect(InputDeviceSpec(parsing: "") == nil)
    }

    @Test func stopEndsTheThreadPromptly() async throws {
        let directory = try folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = LogRecorder()
        let monitor = monitor([], directory: directory, log: log)
        monitor.start()
        monitor.start()  // once only
        monitor.stop()
        monitor.stop()  // a second stop is harmless
        #expect(monitor.devices.isEmpty)
    }
}
