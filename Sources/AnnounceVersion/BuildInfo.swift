import CBuildInfo

/// What every program says about itself (`--version`, `status`, the `announce_build_info` metric).
public enum BuildInfo {
    /// The release this source tree is. Packages add their own suffix (scripts/package.sh).
    public static let version = "0.1.0"

    /// The commit the executable was built from (scripts/build-info.sh), or "unknown" for a build made without
    /// it (a plain `swift build` of a clean checkout).
    public static var commit: String { String(cString: announce_build_commit()) }

    /// `announce-ctl 0.1.0 (commit 1a2b3c4d5e6f)`: the answer to `--version`.
    public static func line(program: String) -> String {
        "\(program) \(version) (commit \(commit))"
    }
}
