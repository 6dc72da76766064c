import AnnounceSound
import AnnounceTestSupport
import Foundation

/// One run of the system-test VM (scripts/vm/run.sh) for one architecture, shared by every test that reads it:
/// the guest installs the packages and acts and records facts (scripts/vm/guest/system-test.sh), the tests check
/// them.
struct VirtualMachineRun: Sendable {
    let directory: String
    let log: String

    /// The amd64 VM (every step), started by the first test that asks, at most once per test process.
    static let amd64 = Task<VirtualMachineRun, any Error> { try await start(arch: "amd64", folder: "system-test") }
    /// The arm64 VM (the packages' own steps under qemu-system-aarch64), likewise.
    static let arm64 = Task<VirtualMachineRun, any Error> { try await start(arch: "arm64", folder: "system-test-arm64") }

    /// ANNOUNCE_VM_REUSE=1 checks the facts of the last run (in out/FOLDER) again without booting: for working on
    /// the checks themselves. Never set in CI (scripts/test.sh unsets it).
    static func start(arch: String, folder: String) async throws -> VirtualMachineRun {
        let directory = "\(Paths.root)/out/\(folder)"
        if ProcessInfo.processInfo.environment["ANNOUNCE_VM_REUSE"] == "1" {
            print("ANNOUNCE_VM_REUSE=1: checking the facts of the last run in \(directory), no VM booted")
            return VirtualMachineRun(directory: directory, log: "")
        }
        let result = try await run("\(Paths.root)/scripts/vm/run.sh", ["--arch", arch, directory])
        print(result.stdout, terminator: "")
        guard result.status == 0 else {
            throw HarnessError("the \(arch) system-test VM failed (exit \(result.status)):\n\(result.stdout)\(result.stderr)")
        }
        return VirtualMachineRun(directory: directory, log: result.stdout)
    }

    func facts(_ step: String) -> Facts { Facts(directory: "\(directory)/facts/\(step)") }
}

/// What one in-guest step recorded: `NAME` (one line, or a command's output), `NAME.status` (its exit status),
/// `NAME.raw` (a capture from hw:Loopback,1,0), `NAME.wav` (an offline render).
struct Facts: Sendable {
    let directory: String

    /// The file's text without the final newline; "(missing)" if the step did not record it.
    subscript(_ name: String) -> String {
        guard let text = try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8) else { return "(missing)" }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// The exit status of the command recorded as `name`.
    func status(_ name: String) -> Int? { Int(self["\(name).status"]) }

    func number(_ name: String) -> Int? { Int(self[name]) }

    /// A raw capture: 16 kHz mono S16_LE.
    func capture(_ name: String) throws -> [Int16] {
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(name).raw"))
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }

    /// An offline render (announce-ctl render), as 16-bit samples.
    func render(_ name: String) throws -> [Int16] {
        let audio = try SoundFile.read(path: "\(directory)/\(name).wav")
        return audio.samples.map { Int16(clamping: Int(($0 * 32768).rounded())) }
    }

    /// Everything recorded, for failure messages.
    var summary: String {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.sorted().filter { !$0.hasSuffix(".raw") && !$0.hasSuffix(".wav") }
            .map { "\($0): \(self[$0])" }.joined(separator: "\n")
    }
}
