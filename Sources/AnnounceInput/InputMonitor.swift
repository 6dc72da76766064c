import AnnounceCore
import CInput
import Glibc
import Logging
import Synchronization

/// Which input devices to read.
public enum InputDeviceSpec: Sendable, Equatable, CustomStringConvertible {
    /// A node, or a symlink to one (`/dev/input/by-id/usb-…-event-kbd`, `/dev/input/by-path/platform-gpio-keys-…`).
    case path(String)
    /// Every device with exactly this name (`evtest` and `/proc/bus/input/devices` show it).
    case name(String)

    /// `/dev/input/…` (anything starting with `/`) or `name:NAME`.
    public init?(parsing text: String) {
        if text.hasPrefix("/") {
            self = .path(text)
        } else if text.hasPrefix("name:"), text.count > 5 {
            self = .name(String(text.dropFirst(5)))
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .path(let path): path
        case .name(let name): "name:\(name)"
        }
    }
}

/// A device in use, for the log and for tests.
public struct InputDeviceDescription: Sendable, Equatable {
    public var path: String
    public var name: String
    /// The configured keys it has.
    public var keys: [KeyCode]
}

/// Reads key presses from Linux input devices (evdev) on a thread of its own and hands the actions that
/// ``KeyInterpreter`` makes of them to `onAction`.
///
/// The thread waits in poll(2) on every device in use, an inotify descriptor on the input folder (and its
/// `by-id`/`by-path` folders) and an eventfd that `stop()` writes. A node that appears or changes permissions
/// (udev gives it its group just after making it) is looked at again, so a USB keypad plugged in later is used at
/// once; one unplugged is dropped (its keys count as released, without acting). Devices: `specs` by path or by
/// name, or — when empty — every device that has one of the configured keys. What cannot be used is said in the
/// log, once per device node, and never stops anything: a missing device, one the daemon may not open, one that
/// is not an input device, one without any of the keys.
public final class InputMonitor: Sendable {
    private let specs: [InputDeviceSpec]
    private let bindings: KeyBindings
    private let directory: String
    private let logger: Logger
    private let onAction: @Sendable (KeyAction) -> Void
    private let stopDescriptor: Int32
    private enum Reader { case idle, reading, ended }
    /// Whether the reader thread runs; `stop()` waits here for its end.
    private let reader = ConditionLock(Reader.idle)
    private let inUse = Mutex<[InputDeviceDescription]>([])

    /// - Parameters:
    ///   - directory: where the device nodes are (`/dev/input`; tests give a folder of their own).
    ///   - onAction: called on the monitor's thread, in order; it must not block.
    public init(
        specs: [InputDeviceSpec], bindings: KeyBindings, directory: String = "/dev/input", logger: Logger,
        onAction: @escaping @Sendable (KeyAction) -> Void
    ) {
        self.specs = specs
        self.bindings = bindings
        self.directory = directory
        self.logger = logger
        self.onAction = onAction
        stopDescriptor = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
    }

    deinit { close(stopDescriptor) }

    /// The devices read now.
    public var devices: [InputDeviceDescription] { inUse.withLock { $0 } }

    /// Starts the thread (once).
    public func start() {
        let start = reader.withLock { state -> Bool in
            guard state == .idle else { return false }
            state = .reading
            return true
        }
        guard start else { return }
        SystemThread.detach(name: "announce-keys") { [self] in
            var loop = Loop(monitor: self)
            loop.run()
            reader.withLock { $0 = .ended }
            reader.broadcast()
        }
    }

    /// Stops the thread and closes every device; returns once it has.
    public func stop() {
        guard reader.withLock({ $0 == .reading }) else { return }
        var one: UInt64 = 1
        _ = write(stopDescriptor, &one, MemoryLayout<UInt64>.size)
        reader.withLock(when: { $0 != .reading }) { $0 = .idle }  // (a second stop at once waits for the same end)
    }

    // MARK: - The thread

    /// The thread's state; only the thread touches it.
    private struct Loop {
        let monitor: InputMonitor
        var interpreter: KeyInterpreter
        var devices: [Int: InputDevice] = [:]
        var nextID = 1
        let inotify: Int32
        /// Watch descriptor → folder.
        var watches: [Int32: String] = [:]
        /// Devices looked at and not used (no keys, another name), by node: not opened again until the node changes.
        var passedOver: Set<NodeIdentity> = []
        /// Problems already logged, so that each is said once per node (or per missing path).
        var reported: Set<String> = []
        var permissionDenied: Set<String> = []

        init(monitor: InputMonitor) {
            self.monitor = monitor
            interpreter = KeyInterpreter(bindings: monitor.bindings)
            inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        }

        var logger: Logger { monitor.logger }

        mutating func run() {
            if inotify < 0 {
                logger.error(
                    "cannot watch for input devices coming and going (inotify); using those present now",
                    metadata: ["error": "\(String(cString: strerror(errno)))"])
            }
            rescan(initial: true)
            while true {
                var descriptors = [pollfd(fd: monitor.stopDescriptor, events: Int16(POLLIN), revents: 0)]
                if inotify >= 0 { descriptors.append(pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)) }
                let ids = devices.keys.sorted()
                for id in ids {
                    descriptors.append(pollfd(fd: devices[id]!.descriptor, events: Int16(POLLIN), revents: 0))
                }
                var timeout: Int32 = -1
                if let deadline = interpreter.nextDeadline {
                    timeout = Int32(clamping: max(0, deadline - monotonicMilliseconds()))
                }
                let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
                if ready < 0 && errno != EINTR {
                    logger.error("input: poll failed", metadata: ["error": "\(String(cString: strerror(errno)))"])
                    break
                }
                if descriptors[0].revents != 0 { break }
                var offset = 1
                if inotify >= 0 {
                    if descriptors[1].revents != 0, drainNotifications() { rescan() }
                    offset = 2
                }
                for (index, id) in ids.enumerated() where descriptors[offset + index].revents != 0 {
                    read(id)
                }
                act(interpreter.tick(atMs: monotonicMilliseconds()))
            }
            devices.removeAll()
            if inotify >= 0 { close(inotify) }
            monitor.inUse.withLock { $0 = [] }
        }

        mutating func act(_ actions: [KeyAction]) {
            for action in actions {
                logger.info("key action", metadata: ["action": "\(action)"])
                monitor.onAction(action)
            }
        }

        mutating func read(_ id: Int) {
            guard let device = devices[id] else { return }
            do {
                for event in try device.readKeyEvents() {
                    let at = event.atMs ?? monotonicMilliseconds()
                    act(interpreter.handle(device: id, code: event.code, value: event.value, atMs: at))
                }
            } catch {
                drop(id, because: error.kind == .gone ? "unplugged" : error.description)
            }
        }

        mutating func drop(_ id: Int, because reason: String) {
            guard let device = devices.removeValue(forKey: id) else { return }
            interpreter.deviceGone(id)
            reported = reported.filter { !$0.hasSuffix("|\(device.path)") }
            logger.notice("input device gone", metadata: ["path": "\(device.path)", "name": "\(device.name)",
                                                          "reason": "\(reason)"])
            publish()
        }

        /// Reads every pending inotify event (forgetting watches the kernel dropped); true if there was any.
        mutating func drainNotifications() -> Bool {
            var buffer = [UInt8](repeating: 0, count: 4096)
            var any = false
            let header = MemoryLayout<inotify_event>.size
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(inotify, $0.baseAddress, $0.count) }
                if count <= 0 { return any }
                any = true
                var offset = 0
                while offset + header <= count {
                    let event = buffer.withUnsafeBytes {
                        $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    }
                    if event.mask & UInt32(IN_IGNORED) != 0 { watches[event.wd] = nil }
                    offset += header + Int(event.len)
                }
            }
        }

        // MARK: Finding devices

        /// How a node came to be looked at: every node (no specs), a path given, or a node whose name may match.
        enum Wanted { case any, path, named }

        /// Looks at the folder again: watches the folders that exist, drops devices whose node is gone, opens the
        /// ones wanted that are not open yet. `initial`: the first look, at start.
        mutating func rescan(initial: Bool = false) {
            watch()
            let nodes = eventNodes()
            let present = Set(nodes.compactMap { NodeIdentity(path: $0) })
            passedOver.formIntersection(present)
            for (id, device) in devices where !present.contains(device.identity) {
                drop(id, because: "its node was removed")
            }
            var candidates: [(path: String, wanted: Wanted)] = []
            if monitor.specs.isEmpty {
                candidates = nodes.map { ($0, .any) }
            } else {
                for case .path(let path) in monitor.specs {
                    if NodeIdentity(path: path) == nil {
                        if firstTime("missing|\(path)") {
                            logger.warning(
                                "input device not present; it is used when it appears", metadata: ["path": "\(path)"])
                        }
                    } else {
                        reported.remove("missing|\(path)")
                        candidates.append((path, .path))
                    }
                }
                if monitor.specs.contains(where: { if case .name = $0 { true } else { false } }) {
                    candidates += nodes.map { ($0, .named) }
                }
            }
            var opened = Set(devices.values.map(\.identity))
            for (path, wanted) in candidates {
                guard let identity = NodeIdentity(path: path), !opened.contains(identity),
                    !passedOver.contains(identity)
                else { continue }
                if consider(path, wanted: wanted, initial: initial) { opened.insert(identity) }
            }
            reportPermissions()
            publish()
        }

        /// The names of the `name:` specs.
        var names: Set<String> {
            Set(monitor.specs.compactMap { if case .name(let name) = $0 { name } else { nil } })
        }

        /// Opens one node and keeps it if it is wanted; returns whether it is now in use.
        mutating func consider(_ path: String, wanted: Wanted, initial: Bool) -> Bool {
            let device: InputDevice
            do {
                device = try InputDevice(path: path)
            } catch {
                switch (error.kind, wanted) {
                case (.missing, _):
                    break  // gone again already
                case (.permission, _) where !initial && Self.groupOf(path) == 0:
                    // Just made: udev gives it its group (and says so, which brings it here again) in a moment.
                    logger.debug("input node not ready yet", metadata: ["path": "\(path)"])
                case (.permission, .path):
                    if firstTime("denied|\(path)") {
                        logger.warning(
                            "cannot open the input device: permission denied (the daemon needs group input)",
                            metadata: ["path": "\(path)", "see": "docs/deployment.md"])
                    }
                case (.permission, _):
                    permissionDenied.insert(path)
                case (_, .path):
                    if firstTime("unusable|\(path)") {
                        logger.warning("input device cannot be used", metadata: ["error": "\(error)"])
                    }
                default:
                    logger.debug("input node skipped", metadata: ["error": "\(error)"])
                }
                return false
            }
            permissionDenied.remove(path)
            if wanted == .named, !names.contains(device.name) {
                passedOver.insert(device.identity)
                return false
            }
            let keys = device.keys(among: interpreter.keys)
            guard !keys.isEmpty else {
                passedOver.insert(device.identity)
                if wanted != .any {
                    logger.warning(
                        "input device has none of the configured keys; not used",
                        metadata: [
                            "path": "\(path)", "name": "\(device.name)",
                            "keys": "\(interpreter.keys.sorted().map(\.description).joined(separator: ","))",
                        ])
                } else {
                    logger.debug(
                        "input device without the keys", metadata: ["path": "\(path)", "name": "\(device.name)"])
                }
                return false
            }
            let id = nextID
            nextID += 1
            devices[id] = device
            logger.notice(
                "input device opened",
                metadata: [
                    "path": "\(path)", "name": "\(device.name)",
                    "keys": "\(keys.map(\.description).joined(separator: ","))",
                ])
            return true
        }

        /// The group owning a node (udev gives input nodes group input once it has handled them).
        static func groupOf(_ path: String) -> UInt32? {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_gid : nil
        }

        /// Devices that could not be opened because of their permissions, said once while the set is the same.
        mutating func reportPermissions() {
            guard !permissionDenied.isEmpty else { return }
            if firstTime("denied-all|\(permissionDenied.sorted().joined(separator: ","))") {
                logger.warning(
                    "cannot open input devices: permission denied; keys on them are not read (needs group input)",
                    metadata: [
                        "paths": "\(permissionDenied.sorted().joined(separator: ","))", "see": "docs/deployment.md",
                    ])
            }
        }

        /// Whether `key` (a problem with one node or path) is new; it is remembered from now on.
        mutating func firstTime(_ key: String) -> Bool {
            reported.insert(key).inserted
        }

        /// The `eventN` nodes of the folder, in number order.
        func eventNodes() -> [String] {
            guard let folder = opendir(monitor.directory) else { return [] }
            defer { closedir(folder) }
            var names: [String] = []
            while let entry = readdir(folder) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                    String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name.hasPrefix("event"), Int(name.dropFirst(5)) != nil { names.append(name) }
            }
            return names.sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
                .map { "\(monitor.directory)/\($0)" }
        }

        /// Watches the input folder and its by-id/by-path folders; while the input folder does not exist, its
        /// parent, to see it come.
        mutating func watch() {
            guard inotify >= 0 else { return }
            let folder = monitor.directory
            let nodes = UInt32(IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM)
            let links = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO)
            if !add(folder, nodes) {
                if firstTime("nofolder|\(folder)") {
                    logger.warning(
                        "no input device folder; keys are read once devices appear", metadata: ["folder": "\(folder)"])
                }
                let parent = "/" + folder.split(separator: "/").dropLast().joined(separator: "/")
                _ = add(parent, UInt32(IN_CREATE | IN_MOVED_TO))
                return
            }
            reported.remove("nofolder|\(folder)")
            for sub in ["by-id", "by-path"] { _ = add("\(folder)/\(sub)", links) }
        }

        /// Adds a watch unless there is one; whether the folder is watched.
        mutating func add(_ folder: String, _ mask: UInt32) -> Bool {
            if watches.values.contains(folder) { return true }
            let descriptor = inotify_add_watch(inotify, folder, mask)
            guard descriptor >= 0 else { return false }
            watches[descriptor] = folder
            return true
        }

        func publish() {
            let list = devices.keys.sorted().compactMap { devices[$0] }.map { device in
                InputDeviceDescription(
                    path: device.path, name: device.name, keys: device.keys(among: interpreter.keys))
            }
            monitor.inUse.withLock { $0 = list }
        }
    }
}
