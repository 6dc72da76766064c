import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A state folder on a tiny file system of its own, to fill up (the tests run as root).
public enum SmallDisk {
    /// Runs `body` with a daemon folder whose `state/` (the journal) is a fresh tmpfs of `megabytes`; unmounts
    /// and removes it afterwards.
    public static func withStateFilesystem<T>(
        megabytes: Int, _ body: (_ directory: String, _ mount: String) async throws -> T
    ) async throws -> T {
        let directory = try Paths.temporaryDirectory("full")
        let mount = "\(directory)/state"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        let mounted = try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", mount])
        func cleanUp() async {
            _ = try? await run("/bin/umount", ["-l", mount])
            try? FileManager.default.removeItem(atPath: directory)
        }
        guard mounted.status == 0 else {
            await cleanUp()
            throw HarnessError("cannot mount a tmpfs: \(mounted)")
        }
        do {
            let result = try await body(directory, mount)
            await cleanUp()
            return result
        } catch {
            await cleanUp()
            throw error
        }
    }

    /// Fills the file system at `directory` to the last byte (a file named `filler`).
    public static func fill(_ directory: String) throws {
        guard let file = fopen("\(directory)/filler", "a") else { throw HarnessError("cannot create the filler") }
        defer { fclose(file) }
        let block = [UInt8](repeating: 0xA5, count: 4096)
        while fwrite(block, 1, block.count, file) == block.count {}
        fflush(file)
        var byte: UInt8 = 1
        while fwrite(&byte, 1, 1, file) == 1 && fflush(file) == 0 {}
    }

    /// Remounts the file system at `directory` read-only or writable (nothing may have a file open for writing
    /// there when it goes read-only).
    public static func remount(_ directory: String, readOnly: Bool) async throws {
        let result = try await run("/bin/mount", ["-o", readOnly ? "remount,ro" : "remount,rw", directory])
        guard result.status == 0 else { throw HarnessError("cannot remount \(directory): \(result)") }
    }

    /// Frees what `fill` took.
    public static func free(_ directory: String) {
        unlink("\(directory)/filler")
    }
}
