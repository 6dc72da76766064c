/// The manifest of a voice pack (`manifest.json` in the pack folder), as written by
/// `scripts/build-voice-pack.sh` or by hand for a recorded pack. See docs/voice-packs.md.
public struct VoicePackManifest: Codable, Sendable, Equatable {
    /// A clip used instead of `token`'s usual clip when the next token is one of `before`
    /// (or the previous one is one of `after`), e.g. 一 read yì before 百/千 (tone sandhi).
    public struct Variant: Codable, Sendable, Equatable {
        public var token: String
        public var before: [String]?
        public var after: [String]?
        public var file: String

        public init(token: String, before: [String]? = nil, after: [String]? = nil, file: String) {
            self.token = token
            self.before = before
            self.after = after
            self.file = file
        }
    }

    /// How the day's total is said (`announce-ctl today --say`): three token lists, `payments` and `refunds` with one
    /// `{count}` and one `{amount}` each (今日收款 {count} 笔，共 {amount}), and `none` for a day without payments
    /// (今日暂无收款). The refunds part follows the payments part (or `none`) when there were refunds.
    public struct SummaryTemplates: Codable, Sendable, Equatable {
        public var payments: [String]
        public var refunds: [String]
        public var none: [String]

        public init(payments: [String], refunds: [String], none: [String]) {
            self.payments = payments
            self.refunds = refunds
            self.none = none
        }
    }

    /// How clips are prepared when the pack is loaded (all optional in the manifest; see ``ClipSettings``).
    public var processing: ClipSettings?
    /// The espeak-ng voice that speaks free text for this pack (optional; see ``SpeechSettings``).
    public var speech: SpeechSettings?

    public static let supportedFormat = 1
    /// The placeholder in a template that the amount's words replace.
    public static let amountPlaceholder = "{amount}"
    /// The placeholder in a summary template that the count's words replace.
    public static let countPlaceholder = "{count}"

    public var format: Int
    public var name: String
    public var language: String
    public var sampleRate: Int
    /// Silence between words, in milliseconds.
    public var gapMs: Int
    /// What joins tokens in the printed sentence ("" for Chinese, " " for English).
    public var separator: String
    public var currency: CurrencyWords?
    /// Token → clip file, relative to the pack folder.
    public var clips: [String: String]
    public var variants: [Variant]?
    /// Channel template name ("plain", "alipay", "wechat.refund", …) → tokens with one `{amount}`.
    public var templates: [String: [String]]
    /// Status prompt name ("network_lost", …) → tokens.
    public var prompts: [String: [String]]?
    /// The day's total (optional: a pack without it cannot speak `today`).
    public var summary: SummaryTemplates?
    /// Played when an announcement cannot be built from clips.
    public var chime: String?
    /// Where the clips come from (tool versions, recording studio …); informational.
    public var source: String?

    public init(
        format: Int = VoicePackManifest.supportedFormat, name: String, language: String, sampleRate: Int,
        gapMs: Int = 20, separator: String = "", currency: CurrencyWords? = nil, clips: [String: String],
        variants: [Variant]? = nil, templates: [String: [String]], prompts: [String: [String]]? = nil,
        chime: String? = nil, source: String? = nil, processing: ClipSettings? = nil, speech: SpeechSettings? = nil,
        summary: SummaryTemplates? = nil
    ) {
        self.format = format
        self.name = name
        self.language = language
        self.sampleRate = sampleRate
        self.gapMs = gapMs
        self.separator = separator
        self.currency = currency
        self.clips = clips
        self.variants = variants
        self.templates = templates
        self.prompts = prompts
        self.chime = chime
        self.source = source
        self.processing = processing
        self.speech = speech
        self.summary = summary
    }

    /// The clip preparation settings, defaults filled in.
    public var clipSettings: ClipSettings { processing ?? ClipSettings() }

    /// Every file the pack refers to, each once, in a stable order.
    public var allFiles: [String] {
        var files = Set(clips.values)
        for variant in variants ?? [] { files.insert(variant.file) }
        if let chime { files.insert(chime) }
        return files.sorted()
    }

    /// Checks the manifest itself (not the audio): every template and prompt token has a clip,
    /// every template has exactly one amount placeholder, the settings are in range. Returns the problems
    /// found, empty if none.
    public func problems(requiredTokens: Set<String> = []) -> [String] {
        var problems: [String] = []
        if format != Self.supportedFormat {
            problems.append("format \(format) is not supported (expected \(Self.supportedFormat))")
        }
        if !(8000...192_000).contains(sampleRate) { problems.append("sampleRate \(sampleRate) is out of range") }
        if !(0...1000).contains(gapMs) { problems.append("gapMs \(gapMs) is out of range 0…1000") }
        problems += clipSettings.problems().map { "processing: \($0)" }
        if chime == nil { problems.append("no chime (the fallback played when an announcement cannot be built)") }
        if templates["plain"] == nil { problems.append("template \"plain\" is missing") }
        for (name, tokens) in templates.sorted(by: { $0.key < $1.key }) {
            let placeholders = tokens.filter { $0 == Self.amountPlaceholder }.count
            if placeholders != 1 {
                problems.append("template \"\(name)\" has \(placeholders) \(Self.amountPlaceholder) placeholders")
            }
            for token in tokens where token != Self.amountPlaceholder && clips[token] == nil {
                problems.append("template \"\(name)\" uses token \"\(token)\" that has no clip")
            }
        }
        if let summary {
            for (name, tokens, placeholders) in [
                ("payments", summary.payments, 1), ("refunds", summary.refunds, 1), ("none", summary.none, 0),
            ] {
                for placeholder in [Self.countPlaceholder, Self.amountPlaceholder]
                where tokens.filter({ $0 == placeholder }).count != placeholders {
                    problems.append("summary \"\(name)\" must have \(placeholders) \(placeholder) placeholder(s)")
                }
                if tokens.isEmpty { problems.append("summary \"\(name)\" has no tokens") }
                for token in tokens
                where token != Self.amountPlaceholder && token != Self.countPlaceholder && clips[token] == nil {
                    problems.append("summary \"\(name)\" uses token \"\(token)\" that has no clip")
                }
            }
        }
        for (name, tokens) in (prompts ?? [:]).sorted(by: { $0.key < $1.key }) where tokens.isEmpty {
            problems.append("prompt \"\(name)\" has no tokens")
        }
        for variant in variants ?? [] where clips[variant.token] == nil {
            problems.append("variant for \"\(variant.token)\" has no base clip")
        }
        for token in requiredTokens.sorted() where clips[token] == nil {
            problems.append("token \"\(token)\" that the \(language) reader needs has no clip")
        }
        return problems
    }

    /// What is wrong but does not stop the pack from announcing payments: prompts that use a token without a
    /// clip. Such a prompt plays the chime and reports `missing_clip` when asked for, rather than being silent.
    public func warnings() -> [String] {
        var warnings: [String] = []
        for (name, tokens) in (prompts ?? [:]).sorted(by: { $0.key < $1.key }) {
            for token in tokens where clips[token] == nil {
                warnings.append("prompt \"\(name)\" uses token \"\(token)\" that has no clip")
            }
        }
        return warnings
    }
}

/// How a pack's clips are prepared once, at load: silence trimmed, loudness matched, ends faded.
/// Every field may be left out of the manifest; the defaults suit espeak-ng and studio recordings alike.
public struct ClipSettings: Codable, Sendable, Equatable {
    /// Leading and trailing samples quieter than this (dB relative to full scale) are trimmed. −40 dBFS is 1 %.
    public var trimThresholdDb: Double
    /// The RMS window the threshold applies to, so isolated blips above it are not taken for speech.
    public var trimWindowMs: Int
    /// Samples kept on each side of what the threshold found, so soft onsets and tails are not chopped.
    public var trimMarginMs: Int
    /// Length of the raised-cosine fade-in and fade-out given to every clip, so no join clicks.
    public var fadeMs: Int
    /// Loudness every clip is brought to (LUFS, measured with libebur128); `nil` leaves clip levels alone.
    public var loudnessLufs: Double?
    /// No clip's peak is raised above this (dBFS); a clip that would clip reaches the target less closely.
    public var peakCeilingDb: Double

    public init(
        trimThresholdDb: Double = -40, trimWindowMs: Int = 10, trimMarginMs: Int = 5, fadeMs: Int = 5,
        loudnessLufs: Double? = -20,
        peakCeilingDb: Double = -1
    ) {
        self.trimThresholdDb = trimThresholdDb
        self.trimWindowMs = trimWindowMs
        self.trimMarginMs = trimMarginMs
        self.fadeMs = fadeMs
        self.loudnessLufs = loudnessLufs
        self.peakCeilingDb = peakCeilingDb
    }

    private enum CodingKeys: String, CodingKey {
        case trimThresholdDb, trimWindowMs, trimMarginMs, fadeMs, loudnessLufs, peakCeilingDb
    }

    public init(from decoder: any Decoder) throws {
        let defaults = ClipSettings()
        let container = try decoder.container(keyedBy: CodingKeys.self)
        trimThresholdDb =
            try container.decodeIfPresent(Double.self, forKey: .trimThresholdDb) ?? defaults.trimThresholdDb
        trimWindowMs = try container.decodeIfPresent(Int.self, forKey: .trimWindowMs) ?? defaults.trimWindowMs
        trimMarginMs = try container.decodeIfPresent(Int.self, forKey: .trimMarginMs) ?? defaults.trimMarginMs
        fadeMs = try container.decodeIfPresent(Int.self, forKey: .fadeMs) ?? defaults.fadeMs
        // An explicit null turns loudness matching off; a missing key keeps the default.
        if container.contains(.loudnessLufs) {
            loudnessLufs = try container.decodeIfPresent(Double.self, forKey: .loudnessLufs)
        } else {
            loudnessLufs = defaults.loudnessLufs
        }
        peakCeilingDb = try container.decodeIfPresent(Double.self, forKey: .peakCeilingDb) ?? defaults.peakCeilingDb
    }

    /// Out-of-range settings, empty if none.
    public func problems() -> [String] {
        var problems: [String] = []
        if !(-90 ... -6).contains(trimThresholdDb) {
            problems.append("trimThresholdDb \(trimThresholdDb) is out of range −90…−6")
        }
        if !(1...100).contains(trimWindowMs) { problems.append("trimWindowMs \(trimWindowMs) is out of range 1…100") }
        if !(0...100).contains(trimMarginMs) { problems.append("trimMarginMs \(trimMarginMs) is out of range 0…100") }
        if !(0...50).contains(fadeMs) { problems.append("fadeMs \(fadeMs) is out of range 0…50") }
        if let loudnessLufs, !(-40 ... -6).contains(loudnessLufs) {
            problems.append("loudnessLufs \(loudnessLufs) is out of range −40…−6")
        }
        if !(-20...0).contains(peakCeilingDb) {
            problems.append("peakCeilingDb \(peakCeilingDb) is out of range −20…0")
        }
        return problems
    }
}

/// The espeak-ng voice that speaks free text (an operator message no clip covers) for a pack.
public struct SpeechSettings: Codable, Sendable, Equatable {
    /// espeak-ng voice name, e.g. `cmn-latn-pinyin+f3` (never `cmn`/`zh`, which are broken on Debian 12).
    public var voice: String
    /// Words per minute.
    public var speed: Int
    /// SSML prosody range (`x-low` … `x-high`); a wide range makes Mandarin tones audible.
    public var pitchRange: String?

    public init(voice: String, speed: Int = 175, pitchRange: String? = nil) {
        self.voice = voice
        self.speed = speed
        self.pitchRange = pitchRange
    }

    /// The voice used when a pack names none: what the default packs are built with.
    public static func defaults(language: String) -> SpeechSettings? {
        switch Composer.languageKey(language) {
        case "zh": SpeechSettings(voice: "cmn-latn-pinyin+f3", speed: 190, pitchRange: "x-high")
        case "en": SpeechSettings(voice: "en-us+f3", speed: 175, pitchRange: "x-high")
        default: nil
        }
    }
}
