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
        do {
            let library = try VoicePackLoader.loadLibrary(
                directory: configuration.voicesSearch.locate(), defaultLanguage: configuration.language)
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
        for (key, folder) in [
            ("socket", Path.directory(of: configuration.socketPath)),
            ("state_dir", configuration.stateDirectory),
        ] where !creatable(folder) {
            problems.append("\(key): cannot create or write the folder \(folder)")
        }
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
        return ([configuration.summary] + voiceLines + ["# configuration ok"]).joined(separator: "\n")
    }

    /// Whether `folder` exists and is writable, or its nearest existing parent is.
    static func creatable(_ folder: String) -> Bool {
        var path = folder
        while !path.isEmpty && path != "/" {
            var info = stat()
            if stat(path, &info) == 0 {
                return info.st_mode & S_IFMT == S_IFDIR && access(path, W_OK | X_OK) == 0
            }
            path = Path.directory(of: path)
        }
        return access("/", W_OK) == 0
    }
}
