/// Speaks free text that no clip covers, in a pack's voice, already prepared like the pack's clips
/// (output rate, silence trimmed, loudness matched, faded). Implemented with libespeak-ng in AnnounceSound.
public protocol SpeechSynthesizer: Sendable {
    /// Mono samples in −1…1 at the pack's output rate.
    func speech(for text: String) throws(AnnounceError) -> [Float]
}

/// A loaded voice pack: the manifest, its composer, and every clip decoded once into the output format
/// (mono at ``sampleRate``, silence trimmed, loudness matched, faded at both ends), kept as the 16-bit samples
/// the device is given: half the memory of the Float they are prepared in, and nothing left to convert when one
/// is spoken. The daemon keeps them in a file of prepared clips that it maps (``clipFile``), so that only the
/// clips being spoken take memory (``storage``).
public struct VoicePack: Sendable {
    public let manifest: VoicePackManifest
    public let directory: String
    public let composer: Composer
    /// Clip file (as named in the manifest) → processed samples, as played.
    public let clips: [String: ClipSamples]
    /// Where ``clips`` are held.
    public let storage: ClipStorage
    /// The output rate every clip has been converted to (the manifest's rate unless the loader was told
    /// otherwise, e.g. to give all packs of a library one rate).
    public let sampleRate: Int
    /// Silence between words, in milliseconds: the manifest's `gapMs` unless overridden at load.
    public let gapMs: Int
    /// Speaks ``Announcement/speech`` (free text); nil when the pack cannot synthesise.
    public let synthesizer: (any SpeechSynthesizer)?
    /// Problems that do not stop the pack from working (see ``VoicePackManifest/warnings()``).
    public let warnings: [String]
    /// The pushed clips a combination broadcast may name, by corpus id (``VoiceLibrary`` gives every pack the
    /// library's; see ``Corpus/fileKey(_:)``).
    public private(set) var pushed: [String: ClipSamples] = [:]

    /// The same pack, with these pushed clips.
    public func with(pushed clips: [String: ClipSamples]) -> VoicePack {
        var copy = self
        copy.pushed = clips
        return copy
    }

    /// `clips`: the prepared samples in −1…1, stored as they will be played (``ClipProcessing/int16(_:)``).
    public init(
        manifest: VoicePackManifest, directory: String, clips: [String: [Float]], sampleRate: Int? = nil,
        gapMs: Int? = nil, synthesizer: (any SpeechSynthesizer)? = nil, warnings: [String] = []
    ) throws(AnnounceError) {
        try self.init(
            manifest: manifest, directory: directory,
            clips: clips.mapValues { ClipSamples($0.map(ClipProcessing.int16)) },
            sampleRate: sampleRate, gapMs: gapMs, synthesizer: synthesizer, warnings: warnings)
    }

    /// `clips`: the samples as played (another pack's ``clips``, or clips mapped from a file: `storage`).
    public init(
        manifest: VoicePackManifest, directory: String, clips: [String: ClipSamples], storage: ClipStorage = .memory,
        sampleRate: Int? = nil, gapMs: Int? = nil, synthesizer: (any SpeechSynthesizer)? = nil,
        warnings: [String] = []
    ) throws(AnnounceError) {
        self.manifest = manifest
        self.directory = directory
        self.composer = try Composer(manifest: manifest)
        self.clips = clips
        self.storage = storage
        self.sampleRate = sampleRate ?? manifest.sampleRate
        self.gapMs = gapMs ?? manifest.gapMs
        self.synthesizer = synthesizer
        self.warnings = warnings
    }

    public var language: String { manifest.language }

    /// Where a pack's clips are held.
    public enum ClipStorage: Sendable, Equatable {
        /// In the daemon's memory (a pack loaded for one command, or one whose prepared clips were not asked for).
        case memory
        /// Mapped from this file of prepared clips (`PreparedClips` in AnnounceSound).
        case mapped(file: String)
        /// In memory, because the file of prepared clips could not be written: why.
        case unsaved(reason: String)
    }

    /// Rendered samples and where each word sits in them.
    public struct Rendering: Sendable, Equatable {
        /// Exactly what the player writes to the device.
        public var samples: [Int16]
        /// The sample range of every clip (or synthesised phrase), in order; the gaps lie between them.
        public var segments: [Range<Int>]
    }

    /// Renders an announcement: each clip in turn with ``gapMs`` of silence between words, after `leadInMs`
    /// of silence (amplifier wake). The result is exactly what the player writes to ALSA and what
    /// `announce-ctl render` writes to a file.
    /// - Throws: `missing_clip` when a token has no clip (the player then plays ``renderChime(leadInMs:)``),
    ///   `synthesis_failed` when free text cannot be synthesised.
    public func render(_ announcement: Announcement, leadInMs: Int = 0) throws(AnnounceError) -> [Int16] {
        try rendering(announcement, leadInMs: leadInMs).samples
    }

    /// ``render(_:leadInMs:)`` with the position of every word.
    public func rendering(_ announcement: Announcement, leadInMs: Int = 0) throws(AnnounceError) -> Rendering {
        if !announcement.missing.isEmpty {
            let tokens = announcement.missing.map { "\"\($0)\"" }.joined(separator: ", ")
            throw AnnounceError(
                .missingClip, "voice pack \"\(manifest.name)\" has no clip for \(tokens) in \"\(announcement.text)\"")
        }
        if let text = announcement.speech {
            guard let synthesizer else {
                throw AnnounceError(.synthesisFailed, "voice pack \"\(manifest.name)\" has no voice for free text")
            }
            return join([ClipSamples(try synthesizer.speech(for: text).map(ClipProcessing.int16))], leadInMs: leadInMs)
        }
        var parts: [ClipSamples] = []
        parts.reserveCapacity(announcement.files.count)
        for file in announcement.files {
            if let id = Corpus.id(fromFileKey: file) {
                guard let samples = pushed[id] else {
                    throw AnnounceError(.missingClip, "the pushed clip \"\(id)\" is not loaded (deleted since?)")
                }
                parts.append(samples)
                continue
            }
            guard let samples = clips[file] else {
                throw AnnounceError(.missingClip, "clip \(file) is not loaded in voice pack \"\(manifest.name)\"")
            }
            parts.append(samples)
        }
        return join(parts, leadInMs: leadInMs)
    }

    /// Renders the pack's chime (for an announcement that could not be built).
    public func renderChime(leadInMs: Int = 0) throws(AnnounceError) -> [Int16] {
        guard let chime = manifest.chime, let samples = clips[chime] else {
            throw AnnounceError(.missingClip, "the voice pack \"\(manifest.name)\" has no chime")
        }
        return join([samples], leadInMs: leadInMs).samples
    }

    func join(_ parts: [ClipSamples], leadInMs: Int) -> Rendering {
        let gap = gapMs * sampleRate / 1000
        let leadIn = max(0, leadInMs) * sampleRate / 1000
        let total = leadIn + parts.reduce(0) { $0 + $1.count } + gap * max(0, parts.count - 1)
        var output = [Int16](repeating: 0, count: leadIn)
        output.reserveCapacity(total)
        var segments: [Range<Int>] = []
        for (index, part) in parts.enumerated() {
            if index > 0 { output.append(contentsOf: repeatElement(0, count: gap)) }
            let start = output.count
            _ = part.withContiguousStorageIfAvailable { output.append(contentsOf: $0) }
            segments.append(start..<output.count)
        }
        return Rendering(samples: output, segments: segments)
    }
}
