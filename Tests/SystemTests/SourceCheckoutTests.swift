import AnnounceTestSupport
import Foundation
import Testing

/// What a newcomer meets in a fresh checkout before anything runs: the one thing assumed (a Swift toolchain)
/// checked first and named, the demo installing only what it needs, a failed build showing its errors, `make
/// install` bringing the man pages and completions, and every document the scripts point at being there.
/// (The README's "Using it" lines themselves: IntegrationTests' ReadmeTests.)
struct SourceCheckoutTests {
    /// A folder holding a `swift` that answers `--version` with `version` and fails every build with compiler
    /// errors among other lines, first on PATH.
    static func fakeSwift(version: String) throws -> (folder: String, path: String) {
        let folder = try Paths.temporaryDirectory("fakeswift")
        try """
        #!/bin/sh
        case "$1" in
        --version) echo "\(version)"; echo "Target: x86_64-unknown-linux-gnu" ;;
        build)
            echo "[1/900] Compiling AnnounceCore Amount.swift"
            echo "/src/Sources/AnnounceCore/Amount.swift:12:9: error: cannot find 'nope' in scope"
            echo " 12 |         nope()"
            echo "[2/900] Compiling AnnounceCore Reader.swift"
            echo "/src/Sources/AnnounceCore/Reader.swift:3:1: error: expected declaration"
            echo "error: fatalError"
            exit 1 ;;
        *) exit 1 ;;
        esac
        """.write(toFile: "\(folder)/swift", atomically: true, encoding: .utf8)
        #expect(chmod("\(folder)/swift", 0o755) == 0)
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return (folder, "\(folder):\(path)")
    }

    /// The demo on a machine without Swift, or with one too old: one line saying what to install, before any
    /// package is installed.
    @Test func theSwiftToolchainIsCheckedFirstAndNamed() async throws {
        let demo = try Paths.temporaryDirectory("noswift")
        defer { try? FileManager.default.removeItem(atPath: demo) }
        let environment = ["ANNOUNCE_DEMO_DIR": demo, "ANNOUNCE_BIN_DIR": ""]
        let withoutSwift = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
            .filter { !FileManager.default.isExecutableFile(atPath: "\($0)/swift") }.joined(separator: ":")
        var missing = environment
        missing["PATH"] = withoutSwift
        let none = try await run("/bin/bash", ["\(Paths.root)/scripts/demo.sh"], environment: missing)
        #expect(none.status == 1 && none.stdout.isEmpty, "\(none)")
        #expect(
            none.stderr == "announce: no Swift toolchain (swift is not on PATH): install Swift 6.2 or newer "
                + "(https://www.swift.org/install/linux/, or apt-get install swiftlang where Debian has it) and put "
                + "its usr/bin on PATH\n", "\(none)")

        let old = try Self.fakeSwift(version: "Swift version 5.10.1 (swift-5.10.1-RELEASE)")
        defer { try? FileManager.default.removeItem(atPath: old.folder) }
        var tooOld = environment
        tooOld["PATH"] = old.path
        let result = try await run("/bin/bash", ["\(Paths.root)/scripts/test.sh"], environment: tooOld)
        #expect(result.status == 1 && result.stdout.isEmpty, "\(result)")
        #expect(result.stderr.hasPrefix("announce: Swift 5.10 is too old (the project needs 6.2 or newer): install"))
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result)")
    }

    /// The demo's packages are what building and the demo need; the tests' and the packages' tools (qemu,
    /// debootstrap, mmdebstrap, the broker …) come only with --tests, which scripts/test.sh asks for.
    @Test func theDemoInstallsWhatItNeedsAndTheTestsTheRest() async throws {
        let demo = try await run("/bin/bash", ["\(Paths.root)/scripts/setup.sh", "--list"])
        let tests = try await run("/bin/bash", ["\(Paths.root)/scripts/setup.sh", "--tests", "--list"])
        #expect(demo.status == 0 && tests.status == 0)
        let demoPackages = Set(demo.stdout.split(separator: "\n").map(String.init))
        let testPackages = Set(tests.stdout.split(separator: "\n").map(String.init))
        for needed in ["libasound2-dev", "libmosquitto-dev", "pulseaudio", "libasound2-plugins", "espeak-ng", "sox"] {
            #expect(demoPackages.contains(needed), "the demo needs \(needed)")
        }
        for heavy in [
            "qemu-user-static", "qemu-system-x86", "qemu-system-arm", "debootstrap", "mmdebstrap", "mosquitto",
        ] {
            #expect(!demoPackages.contains(heavy) && testPackages.contains(heavy), "\(heavy)")
        }
        #expect(demoPackages.isSubset(of: testPackages))
        let testScript = try String(contentsOfFile: "\(Paths.root)/scripts/test.sh", encoding: .utf8)
        #expect(testScript.contains("\nscripts/setup.sh --tests\n"), "the test command installs the rest")
    }

    /// A build that fails shows the compiler's errors, not only SwiftPM's last line; and the demo recorded the
    /// commit first (scripts/build-info.sh), so that --version names it.
    @Test func aFailedDemoBuildShowsItsErrors() async throws {
        let demo = try Paths.temporaryDirectory("demobuild")
        defer { try? FileManager.default.removeItem(atPath: demo) }
        let swift = try Self.fakeSwift(version: "Swift version 6.3.1 (swift-6.3.1-RELEASE)")
        defer { try? FileManager.default.removeItem(atPath: swift.folder) }
        let result = try await run(
            "/bin/bash", ["\(Paths.root)/scripts/demo.sh"],
            environment: ["ANNOUNCE_DEMO_DIR": demo, "ANNOUNCE_BIN_DIR": "", "PATH": swift.path])
        #expect(result.status == 1, "\(result)")
        #expect(result.stdout.contains("demo: building\nbuild-info: "), "\(result)")
        #expect(
            result.stderr.contains(
                "/src/Sources/AnnounceCore/Amount.swift:12:9: error: cannot find 'nope' in scope\n"
                    + "/src/Sources/AnnounceCore/Reader.swift:3:1: error: expected declaration\n"), "\(result)")
        #expect(result.stderr.contains("demo: the build failed (the whole log: \(demo)/build.log)"), "\(result)")
        #expect(!result.stdout.contains("rig"), "nothing started: \(result)")
    }

    /// `make install` installs the man pages and completions the packages carry: `man announced` finds its page.
    @Test func makeInstallInstallsTheManPagesAndCompletions() async throws {
        let stage = try Paths.temporaryDirectory("install")
        defer { try? FileManager.default.removeItem(atPath: stage) }
        let make = [
            "-C", Paths.root, "--no-print-directory", "DESTDIR=\(stage)/root", "BUILD_DIR=\(Paths.bin)",
            "MANUALS=\(stage)/manuals",
        ]
        let built = try await run("/usr/bin/make", make + ["manuals", "install"])
        #expect(built.status == 0, "\(built)")
        let man = "\(stage)/root/usr/share/man"
        let found = try await run("/usr/bin/man", ["-M", man, "-w", "announced"])
        #expect(found.status == 0 && found.stdout == "\(man)/man8/announced.8\n", "\(found)")
        let page = try await run("/usr/bin/man", ["-M", man, "announce-ctl"], environment: ["MANPAGER": "cat"])
        #expect(page.status == 0 && page.stdout.contains("Exit status:"), "\(page)")
        for program in ["announced", "announce-ctl", "announce-push"] {
            for file in [
                "bash-completion/completions/\(program)", "zsh/vendor-completions/_\(program)",
                "fish/vendor_completions.d/\(program).fish",
            ] {
                #expect(FileManager.default.fileExists(atPath: "\(stage)/root/usr/share/\(file)"), "\(file)")
            }
        }
        let removed = try await run("/usr/bin/make", make + ["uninstall"])
        #expect(removed.status == 0, "\(removed)")
        #expect(!FileManager.default.fileExists(atPath: "\(man)/man8/announced.8"), "make uninstall removes them")
    }

    /// Every docs/… file a script, the Makefile, README or a program's help points at exists (scripts/rig.sh
    /// pointed at a docs/testing.md that did not).
    @Test func everyDocumentPointedAtExists() throws {
        var files = ["README.md", "Makefile"]
        for folder in ["scripts", "Sources"] {
            let enumerator = FileManager.default.enumerator(atPath: "\(Paths.root)/\(folder)")
            while let file = enumerator?.nextObject() as? String {
                if file.hasSuffix(".sh") || file.hasSuffix(".swift") {
                    files.append("\(folder)/\(file)")
                }
            }
        }
        var checked = 0
        for file in files {
            let text = try String(contentsOfFile: "\(Paths.root)/\(file)", encoding: .utf8)
            for match in text.matches(of: /docs\/[A-Za-z0-9_-]+\.(md|conf)/) {
                checked += 1
                let named = String(match.output.0)
                #expect(FileManager.default.fileExists(atPath: "\(Paths.root)/\(named)"), "\(file) names \(named)")
            }
        }
        #expect(checked > 10)
    }
}
