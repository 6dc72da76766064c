import AnnounceCore
import Foundation

/// A folder of pushed clips made by hand, as the push listener would leave it (docs/voice-packs.md, "Pushed
/// clips"): versions of clips of the default zh pack, and `current` naming one.
public enum CorpusFolder {
    /// Makes version `version` in `directory` (a new temporary folder if nil) holding `clips` (corpus id → a file of
    /// the default zh pack's `clips/`), and turns `current` to it. Returns the corpus folder.
    @discardableResult
    public static func make(
        _ clips: [String: String], version: UInt64 = 1, in directory: String? = nil
    ) throws -> String {
        let directory = try directory ?? Paths.temporaryDirectory("corpus")
        let folder = "\(directory)/v\(version)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var manifest = CorpusManifest(version: version)
        for (id, clip) in clips {
            let source = "\(Paths.voices)/zh/clips/\(clip)"
            try FileManager.default.copyItem(atPath: source, toPath: "\(folder)/\(id).wav")
            let size = try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int ?? 0
            manifest.clips[id] = .init(file: "\(id).wav", format: "wav", size: size)
        }
        try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: "\(folder)/\(CorpusManifest.fileName)"))
        try? FileManager.default.removeItem(atPath: "\(directory)/current")
        try FileManager.default.createSymbolicLink(atPath: "\(directory)/current", withDestinationPath: "v\(version)")
        return directory
    }
}
