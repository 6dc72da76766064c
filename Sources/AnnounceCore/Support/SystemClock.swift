#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// What tells a program that the wall clock is right (docs/protocol.md, "Time"). A payment terminal has no
/// battery-backed clock: it boots at its last shutdown time (systemd-timesyncd) or at 1970, and is right only once
/// network time has been heard.
public enum ClockSync: Sendable, Equatable, CustomStringConvertible {
    /// The kernel's own account (`adjtimex`): synchronised while its maximum error is under 16 s, which is how
    /// systemd decides what `timedatectl` shows as "System clock synchronized"; an NTP client that disciplines the
    /// clock (systemd-timesyncd, chrony, ntpd) keeps it there, a clock nobody set stays at 16 s. A process whose
    /// seccomp filter refuses `adjtimex` (systemd's `ProtectClock=`) asks timesyncd's flag file instead,
    /// `/run/systemd/timesync/synchronized`.
    case kernel
    /// The clock is always right (a terminal with a battery-backed clock and no network time).
    case trust
    /// Right once this file exists (e.g. `/run/systemd/timesync/synchronized`, which systemd-timesyncd creates
    /// at its first synchronisation).
    case file(String)

    /// `"kernel"`, `"trust"`, or a path.
    public init?(text: String) {
        switch text {
        case "kernel": self = .kernel
        case "trust": self = .trust
        case let path where path.hasPrefix("/"): self = .file(path)
        default: return nil
        }
    }

    /// What a setting of another value is told.
    public static let expected = "must be \"kernel\", \"trust\" or an absolute file path"

    /// What `status` and logs call the kind of source: `kernel`, `trust` or `file`.
    public var name: String {
        switch self {
        case .kernel: "kernel"
        case .trust: "trust"
        case .file: "file"
        }
    }

    public var description: String {
        switch self {
        case .kernel, .trust: name
        case .file(let path): path
        }
    }

    /// systemd-timesyncd's flag file, made at its first synchronisation.
    public static let timesyncFlag = "/run/systemd/timesync/synchronized"
}

/// A moment as a durable record keeps it: the wall clock (what people read, what a day is, the only clock that
/// spans reboots) and the kernel's boot clock (what a duration is within one boot: it never jumps). A wall
/// clock that jumps — set by NTP after a boot without a battery-backed clock, or by hand — moves every duration
/// measured on it; one measured on the boot clock stays true (``age(at:)``).
public struct ClockStamp: Sendable, Equatable {
    /// Wall clock, Unix milliseconds.
    public var wallMs: Int64
    /// The boot this moment belongs to (`/proc/sys/kernel/random/boot_id`).
    public var boot: String
    /// Boot clock (CLOCK_BOOTTIME: since boot, suspend included), milliseconds.
    public var bootMs: Int64
    /// Whether the wall clock was synchronised then (``ClockSync``).
    public var trusted: Bool

    public init(wallMs: Int64, boot: String, bootMs: Int64, trusted: Bool) {
        self.wallMs = wallMs
        self.boot = boot
        self.bootMs = bootMs
        self.trusted = trusted
    }

    /// Wall minus boot clock: constant within a boot until the wall clock is set.
    public var offsetMs: Int64 { wallMs - bootMs }

    /// How long before `now` this moment was: on the boot clock within one boot; across boots on the wall clock,
    /// never negative (a moment stamped by a clock that was ahead counts as just now).
    public func age(at now: ClockStamp) -> Int64 {
        if !boot.isEmpty && boot == now.boot { return now.bootMs - bootMs }
        return max(0, now.wallMs - wallMs)
    }

    /// A moment known by the wall clock only (a record from before the boot clock was kept).
    public static func wall(_ wallMs: Int64, trusted: Bool = true) -> ClockStamp {
        ClockStamp(wallMs: wallMs, boot: "", bootMs: 0, trusted: trusted)
    }

    /// Now, by the system's clocks; `trusted`: whether the wall clock is synchronised (AnnounceClock's
    /// `ClockSync.isSynchronized`).
    public static func now(trusted: Bool) -> ClockStamp {
        ClockStamp(wallMs: WallClock.nowMs, boot: SystemClock.bootID, bootMs: SystemClock.bootMs, trusted: trusted)
    }
}

/// The kernel's boot clock and boot id.
public enum SystemClock {
    /// This boot's id (a random UUID the kernel makes at boot); "" if it cannot be read.
    public static let bootID: String = {
        guard case .success(let bytes) = WholeFile.read(atPath: "/proc/sys/kernel/random/boot_id") else { return "" }
        return String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
    }()

    /// Milliseconds since boot, suspend included (CLOCK_BOOTTIME), as `/proc/uptime` gives it (10 ms steps).
    /// Read from the kernel's file rather than through `clock_gettime`: a library that fakes time for tests
    /// (libfaketime) moves every clock `clock_gettime` returns together with the wall clock, and a duration that
    /// must survive a wall-clock jump cannot be measured on a clock that jumps with it. Falls back to
    /// `clock_gettime(CLOCK_BOOTTIME)` if the file cannot be read.
    public static var bootMs: Int64 {
        let fd = open("/proc/uptime", O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0, let ms = parseUptime(buffer[..<count]) { return ms }
        }
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    /// The first field of `/proc/uptime`, "12345.67 …", in milliseconds.
    static func parseUptime(_ bytes: ArraySlice<UInt8>) -> Int64? {
        var whole: Int64 = 0
        var fraction: Int64 = 0
        var fractionDigits = 0
        var seenDot = false
        var digits = 0
        for byte in bytes {
            if byte == UInt8(ascii: ".") && !seenDot {
                seenDot = true
            } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                digits += 1
                if seenDot {
                    if fractionDigits < 3 {
                        fraction = fraction * 10 + Int64(byte - UInt8(ascii: "0"))
                        fractionDigits += 1
                    }
                } else {
                    whole = whole * 10 + Int64(byte - UInt8(ascii: "0"))
                }
            } else {
                break
            }
        }
        guard digits > 0 else { return nil }
        while fractionDigits < 3 {
            fraction *= 10
            fractionDigits += 1
        }
        return whole * 1000 + fraction
    }
}
