import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceSound

/// The libsndfile side for real: decoding files written by libsndfile and by sox, and loading voice packs
/// (the default ones built by scripts/build-voice-pack.sh, and deliberately broken copies of them).
struct SoundFileTests {
    /// A file libsndfile cannot read leaves the caller's descriptor open (the caller closes it, once): Debian 12's
    /// libsndfile 1.2.0 closes the one it is given when `sf_open_fd` fails, whatever `close_desc` says, and a second
    /// close by the caller would then close another thread's file under the same number.
    @Test func aFileThatCannotBeDecodedLeavesTheCallersDescriptorOpen() throws {
        let directory = try Paths.temporaryDirectory("snd")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/not-audio.wav"
        try Data(repeating: 0x41, count: 100).write(to: URL(fileURLWithPath: path))
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        #expect(throws: SndFileError.self) { try SoundFile.read(descriptor: descriptor, path: path) }
        #expect(fcntl(descriptor, F_GETFD) >= 0, "the caller's descriptor was closed under it")
    }

    @Test func writesAndReadsBackTheSameSamples() throws {
        let directory = try Paths.temporaryDirectory("snd")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let samples: [Int16] = (0..<1600).map { Int16(truncatingIfNeeded: ($0 * 97) % 20000 - 10000) }
        let path = "\(directory)/a.wav"
        try SoundFile.writeWAV(path: path, samples: samples, sampleRate: 16000)
        let audio = try SoundFile.read(path: path)
        #expect(audio.sampleRate == 16000)
        #expect(audio.channels == 1)
        #expect(audio.frames == 1600)
        let back = audio.samples.map(ClipProcessing.int16)
        let worst = zip(back, samples).map { abs(Int32($0) - Int32($1)) }.max() ?? 0
        #expect(worst <= 1, "samples differ by up to \(worst) after a WAV round trip")
    }

    /// Unloading libsndfile (what the daemon does once its packs are decoded) leaves every call working: the next
    /// one loads it again, from any thread, while other tests of this process use it too.
    @Test func theLibraryLoadsAgainAfterItWasUnloaded() async throws {
        let directory = try Paths.temporaryDirectory("snd-unload")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let samples: [Int16] = (0..<800).map { Int16(truncatingIfNeeded: $0 * 31 - 12000) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    for round in 0..<25 {
                        let path = "\(directory)/\(worker)-\(round).wav"
                        #expect(SoundFile.unloadLibrary() == nil)
                        try SoundFile.writeWAV(path: path, samples: samples, sampleRate: 8000)
                        #expect(SoundFile.unloadLibrary() == nil)
                        let audio = try SoundFile.read(path: path)
                        #expect(audio.samples.map(ClipProcessing.int16) == samples, "\(path)")
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(SoundFile.libraryVersion.hasPrefix("libsndfile"))
        #expect(SoundFile.unloadLibrary() == nil && SoundFile.unloadLibrary() == nil, "unloading twice is no error")
    }

    @Test func readsFlacMadeBySox() async throws {
        let directory = try Paths.temporaryDirectory("snd")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/tone.flac"
        let made = try await run(
            "/usr/bin/sox",
            [
                "-D", "-n", "-r", "22050", "-c", "1", "-b", "16", path, "synth", "0.5",
                "sine", "440",
            ])
        #expect(made.status == 0, "\(made.stderr)")
        let audio = try SoundFile.read(path: path)
        #expect(audio.sampleRate == 22050)
        #expect(audio.frames == 11025)
        #expect(abs(ClipProcessing.peak(audio.samples) - 0.707) < 0.01, "sox synthesises a sine at -3 dBFS")
    }

    @Test func refusesWhatIsNotSound() throws {
        let directory = try Paths.temporaryDirectory("snd")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/text.wav"
        try Data("this is not a wav file".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: SndFileError.self) { try SoundFile.read(path: path) }
        #expect(throws: SndFileError.self) { try SoundFile.read(path: "\(directory)/missing.wav") }
    }
}

struct VoicePackLoaderTests {
    @Test(arguments: ["zh", "en"])
    func loadsTheDefaultPack(language: String) throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/\(language)")
        #expect(pack.language == language)
        #expect(pack.sampleRate == 16000)
        #expect(pack.clips.count == pack.manifest.allFiles.count)
        // A word of an amount is short; a prompt's sentence (a notice: 您有新的外卖订单，请及时处理) may be longer.
        let sentences = Set((pack.manifest.prompts ?? [:]).values.flatMap { $0 }.compactMap { pack.manifest.clips[$0] })
        for (file, samples) in pack.clips {
            let seconds = Double(samples.count) / Double(pack.sampleRate)
            let longest = sentences.contains(file) ? 6.0 : 3.0
            #expect(seconds > 0.05 && seconds < longest, "\(file) lasts \(seconds) s after trimming")
            // Trimmed and faded: every clip starts and ends at (near) silence, so joins cannot click.
            // (Kept as played, 16-bit: 0.01 of full scale is 328.)
            #expect(abs(Int(samples.first ?? .max)) < 328 && abs(Int(samples.last ?? .max)) < 328, "\(file) is not faded")
        }
    }

    @Test func rendersOneHundredYuanAsTheSumOfItsClips() throws {
        let pack = try VoicePackLoader.load(directory: "\(Paths.voices)/zh")
        let announcement = try pack.composer.compose(amount: Amount(parsing: "100.00"))
        #expect(announcement.text == "到账一百元")
        let samples = try pack.render(announcement)
        let clipFrames = announcement.files.reduce(0) { $0 + (pack.clips[$1]?.count ?? 0) }
        let gap = pack.manifest.gapMs * pack.sampleRate / 1000
        #expect(samples.count == clipFrames + gap * (announcement.files.count - 1))
    }

    /// A copy of the default zh pack to break in one way.
    func brokenCopy(_ breakIt: (String, inout [String: Any]) throws -> Void) throws -> String {
        try packCopy("zh", breakIt)
    }

    func refusal(_ directory: String) -> String {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            _ = try VoicePackLoader.load(directory: directory)
            return "loaded"
        } catch {
            #expect(error.code == .badVoicePack)
            return error.description
        }
    }

    @Test func refusesAMissingClipNamingIt() throws {
        let message = refusal(
            try brokenCopy { directory, _ in
                try FileManager.default.removeItem(atPath: "\(directory)/clips/bai.wav")
            })
        #expect(message.contains("clips/bai.wav") && message.contains("missing"), "\(message)")
    }

    @Test func refusesAnUnreadableClip() throws {
        let message = refusal(
            try brokenCopy { directory, _ in
                try Data(repeating: 0x41, count: 100).write(to: URL(fileURLWithPath: "\(directory)/clips/qian.wav"))
            })
        #expect(message.contains("clips/qian.wav") && message.contains("cannot be decoded"), "\(message)")
    }

    @Test func refusesAStereoClip() async throws {
        let stereo = try Paths.temporaryDirectory("stereo")
        defer { try? FileManager.default.removeItem(atPath: stereo) }
        let made = try await run(
            "/usr/bin/sox",
            [
                "-D", "-n", "-r", "16000", "-c", "2", "-b", "16",
                "\(stereo)/wan.wav", "synth", "0.3", "sine", "300",
            ])
        #expect(made.status == 0, "\(made)")
        let message = refusal(
            try brokenCopy { directory, _ in
                try FileManager.default.removeItem(atPath: "\(directory)/clips/wan.wav")
                try FileManager.default.copyItem(atPath: "\(stereo)/wan.wav", toPath: "\(directory)/clips/wan.wav")
            })
        #expect(message.contains("clips/wan.wav") && message.contains("2 channels"), "\(message)")
    }

    @Test func refusesAnEmptyClip() throws {
        let message = refusal(
            try brokenCopy { directory, _ in
                try SoundFile.writeWAV(path: "\(directory)/clips/yuan.wav", samples: [], sampleRate: 16000)
            })
        #expect(message.contains("clips/yuan.wav") && message.contains("empty"), "\(message)")
    }

    @Test func refusesAPackWhoseReaderTokensHaveNoClip() throws {
        let message = refusal(
            try brokenCopy { _, manifest in
                var clips = manifest["clips"] as! [String: String]
                clips["亿"] = nil
                manifest["clips"] = clips
            })
        #expect(message.contains("\"亿\""), "\(message)")
    }
}

/// More ways a pack can be broken; each refusal names the clip (or field) and the problem.
struct VoicePackRefusalTests {
    func refusal(_ directory: String) -> String {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            _ = try VoicePackLoader.load(directory: directory)
            return "loaded"
        } catch {
            #expect(error.code == .badVoicePack)
            return error.description
        }
    }

    @Test func refusesATooLongClip() throws {
        let message = refusal(
            try packCopy { directory, _ in
                try SoundFile.write(
                    path: "\(directory)/clips/dian.wav", samples: sine(300, amplitude: 0.5, seconds: 9, rate: 16000),
                    sampleRate: 16000, format: .wav)
            })
        #expect(message.contains("clips/dian.wav") && message.contains("9.0 s long"), "\(message)")
    }

    @Test func refusesASilentClip() throws {
        let message = refusal(
            try packCopy { directory, _ in
                try SoundFile.write(
                    path: "\(directory)/clips/jiao.wav", samples: [Float](repeating: 0.001, count: 8000),
                    sampleRate: 16000, format: .wav)
            })
        #expect(message.contains("clips/jiao.wav") && message.contains("silent"), "\(message)")
    }

    @Test func refusesAMissingChimeAndAChimeFileThatIsGone() throws {
        let noChime = refusal(try packCopy { _, manifest in manifest["chime"] = nil })
        #expect(noChime.contains("no chime"), "\(noChime)")
        let gone = refusal(
            try packCopy { directory, _ in
                try FileManager.default.removeItem(atPath: "\(directory)/clips/chime.wav")
            })
        #expect(gone.contains("clips/chime.wav") && gone.contains("missing"), "\(gone)")
    }

    @Test func refusesAManifestThatIsNotJSONOrOutOfRange() throws {
        let directory = try packCopy { _, _ in }
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: "\(directory)/manifest.json"))
        #expect(refusal(directory).contains("manifest.json is not valid"))
        // A comma too many at the end of line 3 of a real manifest: said with its line and column.
        let original = try String(contentsOfFile: "\(Paths.voices)/zh/manifest.json", encoding: .utf8)
        var lines = original.components(separatedBy: "\n")
        #expect(lines[2].hasSuffix(","))
        lines[2] += ","
        let commaTooMany = try packCopy { _, _ in }
        try Data(lines.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: "\(commaTooMany)/manifest.json"))
        let located = refusal(commaTooMany)
        #expect(
            located.contains(
                "manifest.json is not valid JSON: line 3, column \(lines[2].count): expected a key in double quotes, "
                    + "found ','"), "\(located)\n\(lines[2])")
        let settings = refusal(
            try packCopy { _, manifest in
                manifest["processing"] = ["loudnessLufs": 3, "fadeMs": 500]
                manifest["gapMs"] = -1
            })
        #expect(
            settings.contains("loudnessLufs 3.0") && settings.contains("fadeMs 500") && settings.contains("gapMs -1"),
            "\(settings)")
        let template = refusal(
            try packCopy { _, manifest in
                var templates = manifest["templates"] as! [String: [String]]
                templates["wechat"] = ["微信到账啦", "{amount}"]
                manifest["templates"] = templates
            })
        #expect(template.contains("template \"wechat\" uses token \"微信到账啦\" that has no clip"), "\(template)")
    }

    @Test func promptsWithoutClipsLoadWithAWarning() throws {
        let directory = try packCopy { _, manifest in
            var prompts = manifest["prompts"] as! [String: [String]]
            prompts["door-open"] = ["门开了"]
            manifest["prompts"] = prompts
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pack = try VoicePackLoader.load(directory: directory)
        #expect(pack.warnings == ["prompt \"door-open\" uses token \"门开了\" that has no clip"])
        let announcement = try pack.composer.compose(prompt: "door-open")
        #expect(throws: AnnounceError.self) { try pack.render(announcement) }
        #expect(!(try pack.renderChime()).isEmpty)
    }

    @Test func aLibraryWithABrokenPackIsRefusedNamingIt() throws {
        let library = try Paths.temporaryDirectory("lib")
        defer { try? FileManager.default.removeItem(atPath: library) }
        let broken = try packCopy("en") { directory, _ in
            try FileManager.default.removeItem(atPath: "\(directory)/clips/seven.wav")
        }
        try FileManager.default.moveItem(atPath: broken, toPath: "\(library)/en")
        try FileManager.default.copyItem(atPath: "\(Paths.voices)/zh", toPath: "\(library)/zh")
        do {
            _ = try VoicePackLoader.loadLibrary(directory: library)
            Issue.record("loaded a library with a broken pack")
        } catch {
            #expect(error.code == .badVoicePack)
            #expect(error.message.contains("clips/seven.wav"), "\(error)")
        }
        let empty = try Paths.temporaryDirectory("empty")
        defer { try? FileManager.default.removeItem(atPath: empty) }
        #expect(throws: AnnounceError.self) { try VoicePackLoader.loadLibrary(directory: empty) }
    }
}

/// The project's own pack builder (scripts/build-voice-pack.sh), run for real.
@Suite(.serialized)
struct VoicePackBuilderTests {
    /// Every file of a folder, relative path → bytes.
    func contents(_ directory: String) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let relative = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            let path = "\(directory)/\(relative)"
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[relative] = try Data(contentsOf: URL(fileURLWithPath: path))
            }
        }
        return files
    }

    @Test("two builds are byte-identical", arguments: ["zh", "en"])
    func buildsAreReproducible(language: String) async throws {
        let directory = try Paths.temporaryDirectory("build")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        async let first = run(
            "\(Paths.root)/scripts/build-voice-pack.sh", ["--lang", language, "--out", "\(directory)/a"])
        async let second = run(
            "\(Paths.root)/scripts/build-voice-pack.sh", ["--lang", language, "--out", "\(directory)/b"])
        let results = try await [first, second]
        for result in results { #expect(result.status == 0, "\(result)") }
        let a = try contents("\(directory)/a")
        let b = try contents("\(directory)/b")
        #expect(a.count > 20, "\(a.keys.sorted())")
        #expect(a.keys.sorted() == b.keys.sorted())
        for (file, bytes) in a { #expect(b[file] == bytes, "\(file) differs between two builds") }
        // And the fresh build is a pack that loads, speaks every prompt it defines and has no warnings.
        let pack = try VoicePackLoader.load(directory: "\(directory)/a")
        #expect(pack.warnings.isEmpty, "\(pack.warnings)")
        // Every channel has its refund (collect.refund was once missing: a refund on it was refused).
        let templates = pack.manifest.templates
        for channel in templates.keys where !channel.hasSuffix(".refund") {
            #expect(templates["\(channel).refund"] != nil, "\(language): no \(channel).refund template")
        }
        #expect(templates["collect.refund"] != nil)
        for name in (pack.manifest.prompts ?? [:]).keys.sorted() {
            #expect(!(try pack.render(pack.composer.compose(prompt: name))).isEmpty, "\(name)")
        }
        for name in ["network-lost", "network-restored", "server-connected", "low-battery", "volume-5", "volume-max"] {
            #expect(pack.manifest.prompts?[name] != nil, "the default \(language) pack has no prompt \(name)")
        }
    }

    @Test func refusesAnUnknownLanguage() async throws {
        let result = try await run(
            "\(Paths.root)/scripts/build-voice-pack.sh", ["--lang", "fr", "--out", "/tmp/never"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("no recipe for language \"fr\""))
    }
}

/// A pack reads only regular files inside its own folder (issue 16, item 11): a clip path or a link that leads out
/// of it is refused, and so is a FIFO, which used to block the load (and with it a reload and SIGTERM) forever.
struct VoicePackContainmentTests {
    func refusal(_ directory: String) -> String {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            _ = try VoicePackLoader.load(directory: directory)
            return "loaded"
        } catch {
            #expect(error.code == .badVoicePack)
            return error.description
        }
    }

    /// A real clip outside the pack folder, named by a relative path (`../…`) or reached through a link.
    @Test func refusesAClipOutsideThePackFolder() throws {
        let folder = try Paths.temporaryDirectory("outside")
        let outside = "\(folder)/bai.wav"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try FileManager.default.copyItem(atPath: "\(Paths.voices)/zh/clips/bai.wav", toPath: outside)
        let relative = "../" + outside.split(separator: "/").suffix(2).joined(separator: "/")

        let byPath = refusal(
            try packCopy { _, manifest in
                var clips = manifest["clips"] as! [String: String]
                clips["百"] = relative
                manifest["clips"] = clips
            })
        #expect(byPath.contains("voice pack clip \(relative): is outside the voice pack folder"), "\(byPath)")
        #expect(byPath.contains("(it is \(outside))"), "\(byPath)")

        let deep = refusal(
            try packCopy { _, manifest in
                var clips = manifest["clips"] as! [String: String]
                clips["百"] = "../../../../../../../../etc/hostname"
                manifest["clips"] = clips
            })
        #expect(deep.contains("../etc/hostname: is outside the voice pack folder"), "\(deep)")

        let byLink = refusal(
            try packCopy { directory, _ in
                try FileManager.default.removeItem(atPath: "\(directory)/clips/bai.wav")
                try FileManager.default.createSymbolicLink(
                    atPath: "\(directory)/clips/bai.wav", withDestinationPath: outside)
            })
        #expect(byLink.contains("voice pack clip clips/bai.wav: is outside the voice pack folder"), "\(byLink)")
    }

    /// Links inside the pack, and a pack folder that is itself a link, are fine.
    @Test func linksWithinThePackAreFollowed() throws {
        let directory = try packCopy { directory, _ in
            try FileManager.default.moveItem(
                atPath: "\(directory)/clips/bai.wav", toPath: "\(directory)/clips/bai-real.wav")
            try FileManager.default.createSymbolicLink(
                atPath: "\(directory)/clips/bai.wav", withDestinationPath: "bai-real.wav")
        }
        let link = directory + "-link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: directory)
        defer {
            try? FileManager.default.removeItem(atPath: link)
            try? FileManager.default.removeItem(atPath: directory)
        }
        let pack = try VoicePackLoader.load(directory: link)
        #expect(pack.clips["clips/bai.wav"]?.isEmpty == false)
    }

    /// Loads `directory` on a thread of its own; if the load is still blocked after `limit`, opens `fifo` for
    /// writing and closes it, which ends the blocked open(2) and read(2), so that the test ends either way.
    func loadUnblocking(_ directory: String, fifo: String, limit: Duration = .seconds(20)) async -> (String, Bool) {
        let finished = AsyncStream<String>.makeStream()
        Thread.detachNewThread {
            defer { try? FileManager.default.removeItem(atPath: directory) }
            do {
                _ = try VoicePackLoader.load(directory: directory)
                finished.continuation.yield("loaded")
            } catch {
                finished.continuation.yield("\(error)")  // "bad_voice_pack: …"
            }
            finished.continuation.finish()
        }
        let rescue = Task {
            try await Task.sleep(for: limit)
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
        }
        var iterator = finished.stream.makeAsyncIterator()
        let message = await iterator.next() ?? "no result"
        rescue.cancel()
        let blocked = (try? await rescue.value) != nil
        return (message, blocked)
    }

    @Test func refusesAFIFOClipWithoutBlocking() async throws {
        var fifo = ""
        let directory = try packCopy { directory, _ in
            fifo = "\(directory)/clips/yuan.wav"
            try FileManager.default.removeItem(atPath: fifo)
            #expect(mkfifo(fifo, 0o644) == 0)
        }
        let (message, blocked) = await loadUnblocking(directory, fifo: fifo)
        #expect(!blocked, "the load blocked on the FIFO until the test opened it")
        #expect(
            message.hasPrefix("bad_voice_pack: voice pack clip clips/yuan.wav: is not a regular file (a FIFO)"),
            "\(message)")
    }

    /// A manifest is read up to 1 MiB: a huge file (a log written over it) is refused, not read whole.
    @Test func refusesAnOversizedManifest() throws {
        let directory = try packCopy { _, _ in }
        try Data(repeating: 0x20, count: (1 << 20) + 1).write(to: URL(fileURLWithPath: "\(directory)/manifest.json"))
        #expect(refusal(directory).contains("manifest.json is larger than 1048576 bytes"), "\(refusal(directory))")
    }

    @Test func refusesAFIFOManifestWithoutBlocking() async throws {
        let directory = try packCopy { _, _ in }
        let fifo = "\(directory)/manifest.json"
        try FileManager.default.removeItem(atPath: fifo)
        #expect(mkfifo(fifo, 0o644) == 0)
        let (message, blocked) = await loadUnblocking(directory, fifo: fifo)
        #expect(!blocked, "the load blocked on the FIFO until the test opened it")
        #expect(
            message.hasPrefix("bad_voice_pack: voice pack manifest \(fifo) is not a regular file (a FIFO)"),
            "\(message)")
    }
}
