/// The version of the programs, as the fleet sees it (`announce/<device>/status`, docs/fleet.md). The packages
/// carry it too (scripts/package.sh: `0.1.0+git…`).
public enum AnnounceVersion {
    public static let current = "0.1.0"
}
