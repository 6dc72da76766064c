import AnnounceCore

#if canImport(Glibc)
import Glibc
#endif

/// Where voice packs are looked for — the same way by `announced` and by `announce-ctl words`/`render`:
/// the folder given (`--voices`; for the daemon also `voices` in its config file), else `$ANNOUNCE_VOICES`, else
/// the installed packs (`/usr/share/announce/voices`, or under the prefix the executable was installed in, such as
/// `/usr/local/share/announce/voices`). When none of these holds a pack, the error says where it looked, what it
/// found there, and what to do.
public struct VoicePackSearch: Sendable, Equatable {
    public struct Place: Sendable, Equatable {
        public var path: String
        /// How it was chosen, as the user would recognise it: `--voices`, `$ANNOUNCE_VOICES`, `voices in FILE`,
        /// `installed`.
        public var origin: String

        public init(path: String, origin: String) {
            self.path = path
            self.origin = origin
        }
    }

    public var places: [Place]

    public init(places: [Place]) {
        self.places = places
    }

    public static let environmentVariable = "ANNOUNCE_VOICES"
    public static let installedOrigin = "installed"
    /// Where `make install` (PREFIX=/usr) and the packages put the default packs.
    public static let systemFolder = "/usr/share/announce/voices"

    /// The flag if given, else `$ANNOUNCE_VOICES`, else the installed places.
    public static func standard(flag: String?, environment: String? = Self.environmentValue()) -> VoicePackSearch {
        if let flag, !flag.isEmpty { return VoicePackSearch(places: [Place(path: flag, origin: "--voices")]) }
        if let environment, !environment.isEmpty {
            return VoicePackSearch(places: [Place(path: environment, origin: "$\(environmentVariable)")])
        }
        return installed
    }

    /// `$ANNOUNCE_VOICES`, read with getenv (a copy of the whole environment costs a command line's start).
    public static func environmentValue() -> String? {
        getenv(environmentVariable).map { String(cString: $0) }
    }

    /// The installed places: beside the executable's prefix (`PREFIX/bin/announce` → `PREFIX/share/announce/voices`)
    /// first, then the system's.
    public static var installed: VoicePackSearch {
        var paths: [String] = []
        if let executable = executablePath() {
            let bin = Path.directory(of: executable)
            let prefix = Path.directory(of: bin)
            if bin.hasSuffix("/bin") { paths.append(Path.join(prefix, "share/announce/voices")) }
        }
        if !paths.contains(systemFolder) { paths.append(systemFolder) }
        return VoicePackSearch(places: paths.map { Place(path: $0, origin: installedOrigin) })
    }

    /// The first place that holds voice packs (a pack, or a folder of packs); else a `bad_voice_pack` error that
    /// lists every place looked in and what is wrong with it, and says what to do.
    public func locate() throws(AnnounceError) -> String {
        var found: [String] = []
        for place in places {
            switch Self.inspect(place.path) {
            case nil: return place.path
            case let problem?: found.append("\(place.path) (\(place.origin)): \(problem)")
            }
        }
        throw AnnounceError(
            .badVoicePack,
            "no voice pack found; looked in " + found.joined(separator: "; ") + ". " + Self.advice)
    }

    /// What to do when no pack is found, in one sentence.
    public static let advice =
        "Give --voices FOLDER or set \(environmentVariable) to a folder of voice packs (each a folder with a "
        + "manifest.json): scripts/setup.sh builds them into out/voices, make install copies them to \(systemFolder)"

    /// Nil if `path` holds voice packs, else what is wrong there.
    public static func inspect(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return errno == ENOENT ? "no such folder" : "cannot be read: \(String(cString: strerror(errno)))"
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { return "not a folder" }
        do {
            _ = try VoicePackLoader.packFolders(path)
            return nil
        } catch {
            return error.cause ?? "no voice pack in it (no manifest.json in it or its folders)"
        }
    }

    /// `/proc/self/exe`, resolved.
    static func executablePath() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
