/// The voice packs a daemon speaks with, one per language, all at one output rate, and a default; and the clips the
/// fleet pushed (``corpus``), at the same rate.
/// Load one with `VoicePackLoader.loadLibrary(directory:defaultLanguage:options:corpus:)` (AnnounceSound).
public struct VoiceLibrary: Sendable {
    /// Every pack, the default one first.
    public let packs: [VoicePack]
    /// The pushed clips, by corpus id (``Corpus/empty`` when there are none).
    public let corpus: Corpus

    /// - Throws: `bad_voice_pack` when there is no pack, two packs share a language, or their rates differ
    ///   (one device plays them all, so the loader converts every pack to one rate).
    public init(packs: [VoicePack], defaultLanguage: String? = nil, corpus: Corpus = .empty) throws(AnnounceError) {
        guard !packs.isEmpty else { throw AnnounceError(.badVoicePack, "there is no voice pack") }
        var seen: Set<String> = []
        for pack in packs {
            let key = Composer.languageKey(pack.language)
            guard seen.insert(key).inserted else {
                throw AnnounceError(.badVoicePack, "two voice packs are for language \"\(key)\"")
            }
            guard pack.sampleRate == packs[0].sampleRate else {
                throw AnnounceError(
                    .badVoicePack,
                    "voice pack \"\(pack.manifest.name)\" plays at \(pack.sampleRate) Hz, "
                        + "\"\(packs[0].manifest.name)\" at \(packs[0].sampleRate) Hz")
            }
        }
        var ordered = packs.sorted { Composer.languageKey($0.language) < Composer.languageKey($1.language) }
        if let defaultLanguage {
            let key = Composer.languageKey(defaultLanguage)
            guard let index = ordered.firstIndex(where: { Composer.languageKey($0.language) == key }) else {
                throw AnnounceError(
                    .unknownLanguage,
                    "no voice pack for the default language \"\(defaultLanguage)\" (there are: \(Self.list(ordered)))")
            }
            ordered.insert(ordered.remove(at: index), at: 0)
        }
        self.init(packs: ordered, corpus: corpus)
    }

    private init(packs: [VoicePack], corpus: Corpus) {
        self.packs = packs.map { $0.with(pushed: corpus.clips) }
        self.corpus = corpus
    }

    /// The same packs with other pushed clips (a corpus reloaded on its own).
    public func with(corpus: Corpus) -> VoiceLibrary { VoiceLibrary(packs: packs, corpus: corpus) }

    public var defaultPack: VoicePack { packs[0] }
    /// The output rate of every pack.
    public var sampleRate: Int { packs[0].sampleRate }
    /// The languages there are packs for, default first.
    public var languages: [String] { packs.map(\.language) }

    /// The pack for a language tag ("zh", "zh-CN", "cmn", "en-GB"), or the default one for nil.
    /// - Throws: `unknown_language` naming the languages there are.
    public func pack(language: String?) throws(AnnounceError) -> VoicePack {
        guard let language else { return defaultPack }
        let key = Composer.languageKey(language)
        guard let pack = packs.first(where: { Composer.languageKey($0.language) == key }) else {
            throw AnnounceError(
                .unknownLanguage, "no voice pack for language \"\(language)\" (there are: \(Self.list(packs)))")
        }
        return pack
    }

    /// Renders an announcement with the pack of its language (see ``VoicePack/render(_:leadInMs:)``).
    public func render(_ announcement: Announcement, leadInMs: Int = 0) throws(AnnounceError) -> [Int16] {
        try pack(language: announcement.language).render(announcement, leadInMs: leadInMs)
    }

    /// The chime of the announcement's pack (or the default pack's).
    public func renderChime(for announcement: Announcement? = nil, leadInMs: Int = 0) throws(AnnounceError) -> [Int16] {
        let pack = (try? pack(language: announcement?.language)) ?? defaultPack
        return try pack.renderChime(leadInMs: leadInMs)
    }

    private static func list(_ packs: [VoicePack]) -> String {
        packs.map(\.language).joined(separator: ", ")
    }
}
