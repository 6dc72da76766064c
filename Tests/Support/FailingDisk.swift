import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A state folder on a small ext4 file system of its own (an image on a loop device), mounted as a terminal's
/// flash card is, `errors=remount-ro`: ``fail()`` makes the kernel find an error on it, and the kernel turns it
/// read-only at once, under every process writing there — what a worn SD card does in the field. ``repair()``
/// checks and mounts it again, writable (the tests run as root).
public final class FailingDisk: Sendable {
    /// The folder holding the daemon's socket and log, with `state/` on the file system.
    public let directory: String
    public let mount: String
    let image: String

    private init(directory: String) {
        self.directory = directory
        mount = "\(directory)/state"
        image = "\(directory)/disk.img"
    }

    /// Runs `body` with a fresh file system (mounted read-only from the start if `readOnly`, after `prepare` ran on
    /// it writable); unmounts and removes it afterwards.
    public static func with<T>(
        readOnly: Bool = false, prepare: (FailingDisk) async throws -> Void = { _ in },
        _ body: (FailingDisk) async throws -> T
    ) async throws -> T {
        let disk = FailingDisk(directory: try Paths.temporaryDirectory("disk"))
        defer { try? FileManager.default.removeItem(atPath: disk.directory) }
        try FileManager.default.createDirectory(atPath: disk.mount, withIntermediateDirectories: true)
        try await disk.check("/usr/bin/truncate", ["-s", "16M", disk.image])
        try await disk.check("/usr/sbin/mkfs.ext4", ["-q", "-F", disk.image])
        try await disk.mountImage(options: "loop,errors=remount-ro")
        do {
            try await prepare(disk)
            // (Read-only by a remount, not on a read-only loop device: a remount can make it writable again.)
            if readOnly { try await disk.check("/bin/mount", ["-o", "remount,ro", disk.mount]) }
            let result = try await body(disk)
            await disk.unmount()
            return result
        } catch {
            await disk.unmount()
            throw error
        }
    }

    /// The kernel finds an error on the file system: with `errors=remount-ro` it is read-only from now on, for files
    /// already open too (`emergency_ro`), until it is checked and mounted again.
    public func fail() async throws {
        guard let device = try await loopDevice() else { throw HarnessError("\(mount) is not on a loop device") }
        let trigger = "/sys/fs/ext4/\(device)/trigger_fs_error"
        guard let file = fopen(trigger, "w") else { throw HarnessError("cannot open \(trigger)") }
        fputs("1", file)
        fclose(file)
        // The mount flags may still say rw (ext4's emergency read-only): a write says what it is.
        let readOnly = try await eventually(timeout: .seconds(10)) {
            let descriptor = open("\(self.mount)/.probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            if descriptor >= 0 { close(descriptor) }
            return descriptor < 0 && errno == EROFS
        }
        if !readOnly { throw HarnessError("\(mount) did not turn read-only") }
    }

    /// Checks the file system and mounts it again, writable (nothing may hold a file there: stop the daemon first).
    public func repair() async throws {
        try await check("/bin/umount", [mount])
        _ = try await run("/usr/sbin/e2fsck", ["-p", "-f", image])
        try await mountImage(options: "loop,errors=remount-ro")
    }

    /// Makes a file system mounted read-only writable again (an operator's `mount -o remount,rw`).
    public func remountWritable() async throws {
        try await check("/bin/mount", ["-o", "remount,rw", mount])
    }

    private func mountImage(options: String) async throws {
        try await check("/bin/mount", ["-t", "ext4", "-o", options, image, mount])
    }

    private func unmount() async {
        _ = try? await run("/bin/umount", ["-l", mount])
    }

    /// The loop device under the mount, as /sys/fs/ext4 names it (`loop3`).
    private func loopDevice() async throws -> String? {
        let found = try await run("/bin/findmnt", ["-n", "-o", "SOURCE", "--target", mount])
        let source = found.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").last
        return source.map { String($0.split(separator: "/").last ?? "") }
    }

    private func check(_ executable: String, _ arguments: [String]) async throws {
        let result = try await run(executable, arguments)
        guard result.status == 0 else { throw HarnessError("\(executable) \(arguments) failed: \(result)") }
    }
}
