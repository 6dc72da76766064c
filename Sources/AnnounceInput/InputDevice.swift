import CInput
import Glibc

/// Why an input device cannot be used: the call that failed, on which node, and the system's reason.
public struct InputError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No such node.
        case missing
        /// The node exists but may not be opened (the daemon is not in group `input`; see docs/deployment.md).
        case permission
        /// Not an input event device (the evdev requests fail): a wrong path.
        case notInput
        /// The device was unplugged.
        case gone
        case other
    }

    public var kind: Kind
    public var path: String
    public var function: String
    public var code: Int32

    init(_ function: String, path: String, code: Int32) {
        self.function = function
        self.path = path
        self.code = code
        switch code {
        case ENOENT: kind = .missing
        case EACCES, EPERM: kind = .permission
        case ENOTTY, EINVAL: kind = function == "open" ? .other : .notInput
        case ENODEV, ENXIO: kind = .gone
        default: kind = .other
        }
    }

    public var description: String {
        let reason = String(cString: strerror(code))
        switch kind {
        case .notInput: return "\(path) is not an input event device (\(function): \(reason))"
        default: return "\(path): \(function): \(reason)"
        }
    }
}

/// One evdev device node (`/dev/input/eventN`), open for reading, non-blocking. Reading is all it does: the
/// device is not grabbed, so its keys still reach every other program.
final class InputDevice {
    let path: String
    let name: String
    /// Which node this is (inode and device number): a node removed and made again is another device.
    let identity: NodeIdentity
    let descriptor: Int32
    /// The `EV_KEY` codes it reports.
    private let keyBits: [UInt8]
    /// Its events are stamped with CLOCK_MONOTONIC (else the reader stamps them as it reads them).
    let monotonicStamps: Bool

    /// One key event.
    struct KeyEvent {
        var code: KeyCode
        var value: Int32
        /// CLOCK_MONOTONIC milliseconds, or nil when the kernel stamped it with another clock.
        var atMs: Int64?
    }

    static let keyBytes = Int(KeyCode.maximum) / 8 + 1

    /// Opens `path` and reads what the device is. Throws for a node that is missing, forbidden or not evdev.
    init(path: String) throws(InputError) {
        self.path = path
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw InputError("open", path: path, code: errno) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let code = errno
            close(fd)
            throw InputError("fstat", path: path, code: code)
        }
        guard info.st_mode & S_IFMT == S_IFCHR else {
            close(fd)
            throw InputError("EVIOCGBIT", path: path, code: ENOTTY)
        }
        identity = NodeIdentity(inode: UInt64(info.st_ino), device: UInt64(info.st_rdev))
        var types = [UInt8](repeating: 0, count: 4)
        guard CInput_getBits(fd, 0, &types, UInt32(types.count)) >= 0 else {
            let code = errno
            close(fd)
            throw InputError("EVIOCGBIT", path: path, code: code)
        }
        var keys = [UInt8](repeating: 0, count: Self.keyBytes)
        if types[0] & (1 << UInt8(EV_KEY)) != 0 {
            guard CInput_getBits(fd, UInt32(EV_KEY), &keys, UInt32(keys.count)) >= 0 else {
                let code = errno
                close(fd)
                throw InputError("EVIOCGBIT(EV_KEY)", path: path, code: code)
            }
        }
        var text = [CChar](repeating: 0, count: 256)
        if CInput_getName(fd, &text, UInt32(text.count - 1)) < 0 { text[0] = 0 }
        name = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        monotonicStamps = CInput_setClock(fd, CLOCK_MONOTONIC) == 0
        keyBits = keys
        descriptor = fd
    }

    deinit { close(descriptor) }

    func has(_ key: KeyCode) -> Bool {
        let index = Int(key.value)
        guard index / 8 < keyBits.count else { return false }
        return keyBits[index / 8] & (1 << UInt8(index % 8)) != 0
    }

    /// Which of `keys` it has.
    func keys(among keys: Set<KeyCode>) -> [KeyCode] { keys.filter(has).sorted() }

    /// The key events waiting (possibly none). Throws `.gone` once the device was unplugged.
    func readKeyEvents() throws(InputError) -> [KeyEvent] {
        var events: [KeyEvent] = []
        var buffer = [input_event](repeating: input_event(), count: 64)
        let size = MemoryLayout<input_event>.stride
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { return events }
                throw InputError("read", path: path, code: errno)
            }
            if count == 0 { throw InputError("read", path: path, code: ENODEV) }
            for index in 0..<(count / size) where buffer[index].type == UInt16(EV_KEY) {
                let microseconds = withUnsafePointer(to: &buffer[index]) { CInput_eventMicroseconds($0) }
                events.append(
                    KeyEvent(
                        code: KeyCode(buffer[index].code), value: buffer[index].value,
                        atMs: monotonicStamps ? Int64(microseconds / 1000) : nil))
            }
            if count < buffer.count * size { return events }
        }
    }
}

/// A device node's identity: its inode (a node made again is a new one) and its device number.
struct NodeIdentity: Hashable, Sendable {
    var inode: UInt64
    var device: UInt64

    /// The identity of the node at `path` (following symlinks), or nil if there is none.
    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.init(inode: UInt64(info.st_ino), device: UInt64(info.st_rdev))
    }

    init(inode: UInt64, device: UInt64) {
        self.inode = inode
        self.device = device
    }
}

/// CLOCK_MONOTONIC in milliseconds: the clock of key timings (the devices' events are stamped with it).
func monotonicMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}
