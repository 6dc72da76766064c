import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// The files of prepared clips the daemon maps instead of decoding its packs at every start (PreparedClips).
struct PreparedClipsTests {
    /// A pack copy, a folder for its prepared clips, and the pack as decoded into memory (the reference).
    struct Setup {
        let pack: String
        let prepared: String
        let reference: VoicePack

        init(_ language: String = "zh") throws {
            pack = try packCopy(language) { _, _ in }
            prepared = try Paths.temporaryDirectory("prepared")
            reference = try VoicePackLoader.load(directory: pack)
        }

        var options: VoicePackLoader.Options {
            var options = VoicePackLoader.Options()
            options.preparedDirectory = prepared
            return options
        }

        func load() throws -> VoicePack { try VoicePackLoader.load(directory: pack, options: options) }

        func files() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: prepared).sorted()
        }

        func remove() {
            try? FileManager.default.removeItem(atPath: pack)
            try? FileManager.default.removeItem(atPath: prepared)
        }
    }

    func mappedFile(_ pack: VoicePack) -> String? {
        if case let .mapped(file) = pack.storage { return file }
        return nil
    }

    @Test func theFirstLoadPreparesAFileAndTheNextReadsIt() throws {
        let setup = try Setup()
        defer { setup.remove() }
        #expect(setup.reference.storage == .memory)
        var file = ""
        do {
            let first = try setup.load()
            file = try #require(mappedFile(first), "\(first.storage)")
            #expect(try setup.files() == [(file as NSString).lastPathComponent])
            #expect(first.clips == setup.reference.clips, "the mapped clips are the decoded ones")
            let announcement = try first.composer.compose(amount: Amount(parsing: "123.45"))
            #expect(try first.render(announcement, leadInMs: 40) == setup.reference.render(announcement, leadInMs: 40))
        }
        // The next load reads that file rather than decoding: change one clip's samples in it, and the pack
        // has the changed samples.
        let name = try #require(setup.reference.manifest.clips["一"])
        let second = try setup.load()
        #expect(mappedFile(second) == file)
        let clip = try #require(second.clips[name])
        let marker = (0..<clip.count).map { Int16(truncatingIfNeeded: $0 &* 7919) }
        let handle = try #require(FileHandle(forWritingAtPath: file))
        try handle.seek(toOffset: UInt64(clip.offset))
        try handle.write(contentsOf: marker.withUnsafeBytes { Data($0) })
        try handle.close()
        let third = try setup.load()
        #expect(third.clips[name]?.array == marker, "the third load decoded instead of reading the prepared file")
        #expect(third.clips.filter { $0.key != name } == setup.reference.clips.filter { $0.key != name })
    }

    @Test func aChangedClipIsPreparedAgainAndTheOldFileRemoved() throws {
        let setup = try Setup()
        defer { setup.remove() }
        let before = try VoicePackLoader.loadLibrary(directory: setup.pack, options: setup.options)
        let old = try #require(mappedFile(before.defaultPack))
        // A new recording of "一": a tone where the word was.
        let name = try #require(setup.reference.manifest.clips["一"])
        let tone = (0..<8000).map { Int16(8000 * sin(Double($0) * 2 * .pi * 440 / 16000)) }
        try SoundFile.writeWAV(path: "\(setup.pack)/\(name)", samples: tone, sampleRate: 16000)
        let after = try VoicePackLoader.loadLibrary(directory: setup.pack, options: setup.options)
        let new = try #require(mappedFile(after.defaultPack))
        #expect(new != old)
        #expect(try setup.files() == [(new as NSString).lastPathComponent], "the old file is removed")
        let decoded = try VoicePackLoader.load(directory: setup.pack)
        #expect(after.defaultPack.clips[name] == decoded.clips[name])
        #expect(after.defaultPack.clips[name] != setup.reference.clips[name])
        // The library loaded before still reads its clips from the removed file, as they were.
        #expect(before.defaultPack.clips == setup.reference.clips)
        // Another output rate is another file.
        var options = setup.options
        options.sampleRate = 8000
        let slower = try VoicePackLoader.load(directory: setup.pack, options: options)
        #expect(mappedFile(slower) != nil && mappedFile(slower) != new)
        #expect(slower.sampleRate == 8000)
    }

    /// A torn, truncated or foreign file is not used: the clips are decoded and the file written again whole.
    @Test(arguments: ["truncated", "torn header", "foreign", "empty"])
    func aDamagedFileIsPreparedAgain(damage: String) throws {
        let setup = try Setup()
        defer { setup.remove() }
        let file = try #require(mappedFile(try setup.load()))
        let whole = try Data(contentsOf: URL(fileURLWithPath: file))
        var damaged = whole
        switch damage {
        case "truncated": damaged = whole.prefix(whole.count - 2)
        case "torn header": damaged.replaceSubrange(40..<48, with: [UInt8](repeating: 0xFF, count: 8))
        case "foreign": damaged.replaceSubrange(8..<16, with: [UInt8](repeating: 0, count: 8))
        default: damaged = Data()
        }
        try damaged.write(to: URL(fileURLWithPath: file))
        let pack = try setup.load()
        #expect(mappedFile(pack) == file)
        #expect(pack.clips == setup.reference.clips)
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == whole, "written again whole")
    }

    @Test func aFolderThatCannotBeWrittenLeavesTheClipsInMemory() throws {
        let setup = try Setup()
        defer { setup.remove() }
        let blocker = "\(setup.prepared)/file"
        try Data("not a folder".utf8).write(to: URL(fileURLWithPath: blocker))
        var options = setup.options
        options.preparedDirectory = "\(blocker)/prepared"
        let pack = try VoicePackLoader.load(directory: setup.pack, options: options)
        guard case let .unsaved(reason) = pack.storage else {
            Issue.record("\(pack.storage)")
            return
        }
        #expect(reason.contains("\(blocker)/prepared/") && reason.contains("Not a directory"), "\(reason)")
        #expect(pack.clips == setup.reference.clips)
    }

    @Test func theKeyCoversEveryInput() throws {
        let setup = try Setup()
        defer { setup.remove() }
        let manifest = Array(try Data(contentsOf: URL(fileURLWithPath: "\(setup.pack)/manifest.json")))
        let files = setup.reference.manifest.allFiles
        func key(manifest: [UInt8] = manifest, files: [String] = files, rate: Int = 16000, limit: Double = 8) -> UInt64? {
            PreparedClips.key(directory: setup.pack, manifest: manifest, files: files, outputRate: rate, limits: limit)
        }
        let base = try #require(key())
        #expect(key() == base, "the same inputs give the same key")
        #expect(key(manifest: manifest + [0x20]) != base)
        #expect(key(files: Array(files.dropLast())) != base)
        #expect(key(rate: 22050) != base)
        #expect(key(limit: 7) != base)
        #expect(key(files: files + ["clips/missing.wav"]) == nil, "a missing clip is left to the decoder to report")
        let name = try #require(files.first)
        let path = "\(setup.pack)/\(name)"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: path))
        #expect(key() != base, "one bit of one clip")
    }
}
