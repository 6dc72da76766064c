#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// What one announcement says: the tokens (one clip each), the sentence printed for people, and the clip file
/// chosen for every token (context variants applied).
///
/// An announcement is composed when a job is accepted and rendered when it plays. Composing never fails for
/// a missing clip: the token is listed in ``missing`` and rendering then fails with `missing_clip`, so the
/// player plays the pack's chime and reports the error instead of staying silent.
public struct Announcement: Sendable, Equatable, Codable {
    public var tokens: [String]
    public var text: String
    /// The clip file of every token that has one, in order.
    public var files: [String]
    /// Tokens the voice pack has no clip for (empty when the announcement can be built).
    public var missing: [String]
    /// Free text to synthesise instead of clips (an operator message no pack covers).
    public var speech: String?
    /// The language of the voice pack that composed it ("zh", "en").
    public var language: String?

    public init(
        tokens: [String], text: String, files: [String], missing: [String] = [], speech: String? = nil,
        language: String? = nil
    ) {
        self.tokens = tokens
        self.text = text
        self.files = files
        self.missing = missing
        self.speech = speech
        self.language = language
    }

    private enum CodingKeys: String, CodingKey {
        case tokens, text, files, missing, speech, language
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        tokens = try container.decode([String].self, forKey: .tokens)
        text = try container.decode(String.self, forKey: .text)
        files = try container.decode([String].self, forKey: .files)
        missing = try container.decodeIfPresent([String].self, forKey: .missing) ?? []
        speech = try container.decodeIfPresent(String.self, forKey: .speech)
        language = try container.decodeIfPresent(String.self, forKey: .language)
    }
}

/// What to announce, before it is turned into words.
public enum Utterance: Sendable, Equatable, Codable {
    case payment(amount: Amount, channel: String, refund: Bool)
    case prompt(name: String)
    /// Free text (an operator message), synthesised at run time in the pack's language.
    case text(String)
    /// The day's total (`today`): the payments heard and their sum, and the refunds.
    case summary(DayTotals)
    /// A combination broadcast (`combine`): clips named by id, amounts and digits, in order.
    case combination([CombinationPart])
}

/// One piece of a combination broadcast.
public enum CombinationPart: Sendable, Equatable, Codable {
    /// A clip by id: a pushed clip (the corpus) of that id, else the voice pack's prompt of that name, else its clip
    /// for that token.
    case clip(String)
    /// An amount, read as `say` reads it (its currency words included).
    case amount(Amount)
    /// Digits read one by one (a pickup number: 0423 → 零四二三).
    case digits(String)

    /// Most parts in one combination.
    public static let maximumCount = 32
    /// Most digits in one `digits` part.
    public static let maximumDigits = 32
}

/// Turns an utterance into tokens with a voice pack's templates and the reader for its language.
/// Knows nothing about audio: the clips themselves are decoded elsewhere.
public struct Composer: Sendable {
    public let manifest: VoicePackManifest
    public let reader: any AmountReader

    public init(manifest: VoicePackManifest) throws(AnnounceError) {
        guard let reader = Self.reader(language: manifest.language, currency: manifest.currency) else {
            throw AnnounceError(.unknownLanguage, "voice pack language \"\(manifest.language)\" has no reader")
        }
        self.manifest = manifest
        self.reader = reader
    }

    /// The reader for a language code ("zh", "zh-CN", "en", "en-GB" …), if there is one.
    public static func reader(language: String, currency: CurrencyWords?) -> (any AmountReader)? {
        switch languageKey(language) {
        case "zh": MandarinReader()
        case "en": EnglishReader(currency: currency ?? CurrencyWords())
        default: nil
        }
    }

    /// The primary language of a tag, lowercased, with Mandarin's `cmn` folded into `zh`:
    /// "zh-CN" → "zh", "cmn" → "zh", "en_GB" → "en".
    public static func languageKey(_ language: String) -> String {
        let primary = language.split(whereSeparator: { $0 == "-" || $0 == "_" }).first.map { $0.lowercased() } ?? ""
        return primary == "cmn" ? "zh" : primary
    }

    /// The longest free text accepted, in characters.
    public static let maximumTextLength = 500

    /// Every token the reader can emit, found by reading amounts that use every digit in every position
    /// in every style. A pack must have a clip for each.
    public var readerTokens: Set<String> {
        var tokens = Set<String>()
        var samples: [Int64] = []
        var power: Int64 = 1
        while power <= 100_000_000_000 {
            for digit in Int64(1)...9 { samples.append(digit * power * 100 + digit * 11) }
            samples.append(power * 100 + 1)
            power *= 10
        }
        samples += [1, 10, 100, 1_000_000_000_000, 200_000, 2_000_000_000_000, 1_020_304]
        for fen in samples {
            guard let amount = try? Amount(fen: fen) else { continue }
            for style in ReadingStyle.allCases {
                for liang in [false, true] {
                    tokens.formUnion(reader.words(for: amount, options: ReadingOptions(style: style, liang: liang)))
                }
            }
        }
        return tokens
    }

    /// The template key for a channel: `alipay`, or `alipay.refund` for refunds.
    public static func templateName(channel: String, refund: Bool) -> String {
        refund ? "\(channel).refund" : channel
    }

    /// `corpus`: the ids of the pushed clips a combination may name.
    public func compose(
        _ utterance: Utterance, options: ReadingOptions? = nil, corpus: Set<String> = []
    ) throws(AnnounceError) -> Announcement {
        switch utterance {
        case .payment(let amount, let channel, let refund):
            return try compose(amount: amount, channel: channel, refund: refund, options: options)
        case .prompt(let name):
            return try compose(prompt: name)
        case .text(let text):
            return try compose(text: text)
        case .summary(let totals):
            return try compose(summary: totals, options: options)
        case .combination(let parts):
            return try compose(combination: parts, corpus: corpus, options: options)
        }
    }

    /// A combination broadcast: each part's tokens in turn. A clip part names a pushed clip (an id in `corpus`,
    /// which wins), else a prompt of the pack (its notices), else a token of the pack; amounts are read as `say`
    /// reads them, digits one by one.
    /// - Throws: `not_found` naming a clip id that neither the pushed clips nor the pack have (refused when
    ///   accepted, not played as a chime), `bad_request` for an empty combination.
    public func compose(
        combination parts: [CombinationPart], corpus: Set<String> = [], options: ReadingOptions? = nil
    ) throws(AnnounceError) -> Announcement {
        guard !parts.isEmpty else { throw AnnounceError(.badRequest, "a combination needs at least one part") }
        let options = options ?? ReadingOptions(style: reader.defaultStyle)
        var whole = Announcement(tokens: [], text: "", files: [], language: manifest.language)
        for part in parts {
            let piece: Announcement
            switch part {
            case .clip(let id) where corpus.contains(id):
                piece = Announcement(
                    tokens: [id], text: id, files: [Corpus.fileKey(id)], language: manifest.language)
            case .clip(let id):
                if let tokens = manifest.prompts?[id] {
                    // A prompt of the pack by name (its notices: new-order, have-a-nice-day …).
                    piece = announcement(tokens)
                    break
                }
                guard manifest.clips[id] != nil || manifest.variants?.contains(where: { $0.token == id }) == true else {
                    let pushed = corpus.isEmpty ? "none" : corpus.sorted().joined(separator: ", ")
                    throw AnnounceError(
                        .notFound,
                        "no clip \"\(id)\" in the voice pack \(manifest.name) or the pushed clips (pushed: \(pushed))")
                }
                piece = announcement([id])
            case .amount(let amount):
                piece = announcement(reader.words(for: amount, options: options))
            case .digits(let digits):
                piece = announcement(digits.compactMap(\.wholeNumberValue).map(reader.word(forDigit:)))
            }
            whole.tokens += piece.tokens
            whole.files += piece.files
            whole.missing += piece.missing
        }
        whole.text = whole.tokens.joined(separator: manifest.separator)
        return whole
    }

    /// The day's total with the pack's summary templates: the payments part (or `none` when there were none),
    /// then the refunds part if there were refunds. Counts and sums are read by the pack's amount reader, sums
    /// in the reading style of `options` (or the reader's own).
    public func compose(
        summary totals: DayTotals, options: ReadingOptions? = nil
    ) throws(AnnounceError) -> Announcement {
        guard let templates = manifest.summary else {
            throw AnnounceError(
                .notFound, "the voice pack \(manifest.name) has no summary templates; it cannot say the day's total")
        }
        let options = options ?? ReadingOptions(style: reader.defaultStyle)
        func fill(_ template: [String], _ tally: DayTotals.Tally) throws(AnnounceError) -> [String] {
            let sum: Amount
            do { sum = try Amount(fen: tally.fen) } catch {
                throw AnnounceError(.invalidAmount, "the day's total cannot be read: \(error.description)")
            }
            var tokens: [String] = []
            for token in template {
                switch token {
                case VoicePackManifest.countPlaceholder: tokens += reader.words(forCount: Int64(tally.count))
                case VoicePackManifest.amountPlaceholder: tokens += reader.words(for: sum, options: options)
                default: tokens.append(token)
                }
            }
            return tokens
        }
        var tokens = totals.payments.count > 0 ? try fill(templates.payments, totals.payments) : templates.none
        if totals.refunds.count > 0 { tokens += try fill(templates.refunds, totals.refunds) }
        return announcement(tokens)
    }

    /// Free text, to be synthesised when it plays. Refuses empty text, control characters and text longer
    /// than ``maximumTextLength``.
    public func compose(text: String) throws(AnnounceError) -> Announcement {
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty else { throw AnnounceError(.badRequest, "the text is empty") }
        guard trimmed.count <= Self.maximumTextLength else {
            throw AnnounceError(
                .badRequest, "the text has \(trimmed.count) characters; at most \(Self.maximumTextLength) are spoken")
        }
        if let control = trimmed.unicodeScalars.first(where: { $0.properties.generalCategory == .control }) {
            throw AnnounceError(
                .badRequest,
                "the text contains the control character U+\(String(control.value, radix: 16, uppercase: true))")
        }
        return Announcement(tokens: [trimmed], text: trimmed, files: [], speech: trimmed, language: manifest.language)
    }

    public func compose(
        amount: Amount, channel: String = "plain", refund: Bool = false, options: ReadingOptions? = nil
    ) throws(AnnounceError) -> Announcement {
        let name = Self.templateName(channel: channel, refund: refund)
        guard let template = manifest.templates[name] else {
            let known = manifest.templates.keys.sorted().joined(separator: ", ")
            throw AnnounceError(.unknownChannel, "the voice pack has no template \"\(name)\" (it has: \(known))")
        }
        let words = reader.words(for: amount, options: options ?? ReadingOptions(style: reader.defaultStyle))
        var tokens: [String] = []
        for token in template {
            if token == VoicePackManifest.amountPlaceholder { tokens += words } else { tokens.append(token) }
        }
        return announcement(tokens)
    }

    public func compose(prompt name: String) throws(AnnounceError) -> Announcement {
        guard let tokens = manifest.prompts?[name] else {
            let known = (manifest.prompts ?? [:]).keys.sorted().joined(separator: ", ")
            throw AnnounceError(.notFound, "the voice pack has no prompt \"\(name)\" (it has: \(known))")
        }
        return announcement(tokens)
    }

    /// Picks a clip file for every token, applying context variants (first matching variant wins). Tokens
    /// without a clip are listed in ``Announcement/missing``.
    func announcement(_ tokens: [String]) -> Announcement {
        var missing: [String] = []
        var files: [String] = []
        files.reserveCapacity(tokens.count)
        for (index, token) in tokens.enumerated() {
            let next = index + 1 < tokens.count ? tokens[index + 1] : nil
            let previous = index > 0 ? tokens[index - 1] : nil
            let variant = manifest.variants?.first { variant in
                variant.token == token
                    && (variant.before.map { list in next.map(list.contains) ?? false } ?? true)
                    && (variant.after.map { list in previous.map(list.contains) ?? false } ?? true)
                    && (variant.before != nil || variant.after != nil)
            }
            if let variant {
                files.append(variant.file)
            } else if let file = manifest.clips[token] {
                files.append(file)
            } else {
                missing.append(token)
            }
        }
        return Announcement(
            tokens: tokens, text: tokens.joined(separator: manifest.separator), files: files, missing: missing,
            language: manifest.language)
    }
}
