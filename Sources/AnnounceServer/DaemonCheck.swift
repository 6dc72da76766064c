import AnnounceALSA
import AnnounceCore
import AnnounceSound
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `announced --check-config`: everything a start would check, without starting — the configuration's values,
/// the user and group names, the voice packs (fully loaded), the socket and state folders.
public enum DaemonCheck {
    /// The effective configuration and what was found, or the problems (all of them) as an error.
    public static func report(_ configuration: DaemonConfiguration) throws(AnnounceError) -> String {
        var problems = configuration.problems()
        do {
            _ = try AccessPolicy(configuration: configuration)
        } catch {
            problems.append(error.message)
        }
        if let group = configuration.socketGroup, AccessPolicy.groupID(group) == nil {
            problems.append("socket_group: no group \"\(group)\"")
        }
        var voiceLines: [String] = []
        var sampleRate = 16_000
        do {
            let library = try VoicePackLoader.loadLibrary(
                directory: configuration.voicesSearch.locate(), defaultLanguage: configuration.language)
            sampleRate = library.defaultPack.sampleRate
            for pack in library.packs.sorted(by: { $0.language < $1.language }) {
                let isDefault = pack.language == library.defaultPack.language
                voiceLines.append(
                    "# voice \(pack.language): \"\(pack.manifest.name)\" \(pack.clips.count) clips, \(pack.sampleRate) Hz, "
                        + "\(pack.directory)\(isDefault ? " (default)" : "")")
                for warning in pack.warnings {
                    voiceLines.append("# warning: voice \(pack.language): \(warning); the chime plays instead")
                }
            }
        } catch {
            problems.append("voices: \(error.message)")
        }
        if let reason = EspeakSynthesizer.unavailableReason() {
            voiceLines.append("# warning: free text cannot be spoken: libespeak-ng cannot be loaded (\(reason))")
        }
        let socketFolder = Path.directory(of: configuration.socketPath)
        if !creatable(socketFolder) { problems.append("socket: cannot create or write the folder \(socketFolder)") }
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
        // Warnings, not problems: the daemon starts and speaks all the same, and what is wrong now may be right by
        // the time it runs (a USB speaker plugged in, a disk remounted).
        var warnings: [String] = []
        if !creatable(configuration.stateDirectory) {
            warnings.append(
                "# warning: state_dir: cannot create or write the folder \(configuration.stateDirectory): the daemon "
                    + "would keep its journal in memory (not durable) until it can")
        }
        if let reason = deviceProblem(configuration, sampleRate: sampleRate) {
            warnings.append(
                "# warning: device \"\(configuration.device)\" cannot be opened now (\(reason)): jobs are accepted and "
                    + "each tries it; status says missing until it can be opened")
        }
        return ([configuration.summary] + voiceLines + warnings + ["# configuration ok"]).joined(separator: "\n")
    }

    /// Why the configured PCM cannot be opened now, if it cannot (opened at the default voice pack's rate, as the
    /// daemon would, and closed at once: nothing is played).
    static func deviceProblem(_ configuration: DaemonConfiguration, sampleRate: Int) -> String? {
        let sink = AlsaSink(
            device: configuration.device, periodMicroseconds: configuration.periodMicroseconds,
            periods: configuration.periods)
        defer { sink.close() }
        do {
            try sink.open(sampleRate: sampleRate)
            return nil
        } catch {
            return error.description
        }
    }

    /// Whether `folder` exists and is writable, or its nearest existing parent is.
    static func creatable(_ folder: String) -> Bool {
        var path = folder
        while !path.isEmpty && path != "/" {
            var info = stat()
            if stat(path, &info) == 0 {
                return info.st_mode & S_IFMT == S_IFDIR && faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) == 0
            }
            path = Path.directory(of: path)
        }
        return access("/", W_OK) == 0
    }
}
