import AnnounceTestSupport
import Foundation
import Testing

/// scripts/package.sh's refusals: without root, without debootstrap, without Debian's archive it stops at once
/// (before any chroot or download) saying what it needs; a cache entry an interrupted run left behind is removed,
/// mounts and all, never trusted. (What it builds is checked by installing it: ARM64SystemTests, VMSystemTests.)
struct PackagingScriptTests {
    static let script = "\(Paths.root)/scripts/package.sh"

    @Test func withoutRootItStopsAndSaysSo() async throws {
        // `setpriv` drops to nobody for the one command (the tests run as root, as CI does).
        let result = try await run("/usr/bin/setpriv", [
            "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/bash", Self.script, "--arch", "arm64",
        ])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("must run as root"), "\(result)")
    }

    @Test func withoutDebootstrapItStopsAndNamesIt() async throws {
        // A PATH with everything package.sh calls before its checks, but no debootstrap.
        let bin = try Paths.temporaryDirectory("nodebootstrap")
        defer { try? FileManager.default.removeItem(atPath: bin) }
        for tool in ["bash", "id", "dirname", "cat", "sed", "date", "sha256sum", "cut", "curl", "dpkg-deb", "env"] {
            guard let path = ["/usr/bin/\(tool)", "/bin/\(tool)"].first(where: FileManager.default.fileExists) else { continue }
            try FileManager.default.createSymbolicLink(atPath: "\(bin)/\(tool)", withDestinationPath: path)
        }
        let result = try await run("/bin/bash", [Self.script, "--arch", "amd64"], environment: ["PATH": bin])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("missing: debootstrap"), "\(result)")
        #expect(result.stderr.contains("apt-get install debootstrap"), "it says how to get it: \(result)")
    }

    @Test func withoutDebiansArchiveItStopsAndSaysWhere() async throws {
        // Nothing listens on port 9 of loopback: the archive cannot be reached.
        let result = try await run(
            "/bin/bash", [Self.script, "--arch", "arm64"], environment: ["ANNOUNCE_DEBIAN_MIRROR": "http://127.0.0.1:9/debian"])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("cannot reach Debian's archive at http://127.0.0.1:9/debian"), "\(result)")
        #expect(result.stderr.contains("ANNOUNCE_DEBIAN_MIRROR"), "it says what to change: \(result)")
    }

    @Test func anUnknownArchitectureIsAUsageError() async throws {
        let result = try await run("/bin/bash", [Self.script, "--arch", "sparc64"])
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("--arch amd64 or --arch arm64"), "\(result)")
    }

    /// An interrupted run leaves an entry without its `complete` mark, maybe with /dev still bound inside (a
    /// chroot's). The next run's lookup removes it — after unmounting, so that the host's /dev is untouched — and
    /// builds anew; a complete entry of the same recipe is kept.
    @Test func anInterruptedCacheEntryIsRemovedMountsAndAllAndACompleteOneKept() async throws {
        let cache = try Paths.temporaryDirectory("pkgcache")
        defer { try? FileManager.default.removeItem(atPath: cache) }
        let outside = try Paths.temporaryDirectory("outside")
        defer { try? FileManager.default.removeItem(atPath: outside) }
        try "keep me".write(toFile: "\(outside)/file", atomically: true, encoding: .utf8)
        let script = """
            set -euo pipefail
            source scripts/pkg/common.sh
            # An interrupted build of recipe 1: no complete mark, /dev still bound inside.
            first=$(pkg_cache_entry demo "recipe 1")
            mkdir -p "$first/root/dev"
            mount --bind "\(outside)" "$first/root/dev"
            # The same recipe again: not trusted, removed (its mount first), to be built anew.
            again=$(pkg_cache_entry demo "recipe 1")
            [[ "$again" == "$first" && ! -e "$first" ]] || { echo "unfinished entry trusted"; exit 1; }
            if grep -q "$first" /proc/mounts; then echo "still mounted"; exit 1; fi
            mkdir -p "$first" && touch "$first/complete"
            # Complete, it is found and kept.
            [[ "$(pkg_cache_entry demo "recipe 1")" == "$first" && -f "$first/complete" ]] || { echo "complete entry lost"; exit 1; }
            # Another recipe: the old entry goes.
            second=$(pkg_cache_entry demo "recipe 2")
            [[ "$second" != "$first" && ! -e "$first" ]] || { echo "old recipe kept"; exit 1; }
            echo ok
            """
        let result = try await run(
            "/bin/bash", ["-c", "cd \(Paths.root) && \(script)"], environment: ["ANNOUNCE_PKG_CACHE": cache])
        #expect(result.status == 0 && result.stdout.contains("ok"), "\(result)")
        #expect((try? String(contentsOfFile: "\(outside)/file", encoding: .utf8)) == "keep me", "the bound folder was emptied")
    }
}
