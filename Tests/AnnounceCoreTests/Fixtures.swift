import Foundation

@testable import AnnounceCore

/// A small voice pack built in memory: every token is a clip of a distinct constant level, so a rendered
/// stream can be read back into tokens.
enum Fixtures {
    static let rate = 8000

    static var zhManifest: VoicePackManifest {
        let tokens = [
            "零", "一", "二", "两", "三", "四", "五", "六", "七", "八", "九", "十", "百", "千", "万", "亿",
            "点", "元", "角", "分", "到账", "支付宝到账", "退款", "网络已断开",
        ]
        var clips: [String: String] = [:]
        for token in tokens { clips[token] = "clips/\(token).wav" }
        return VoicePackManifest(
            name: "test-zh", language: "zh", sampleRate: rate, gapMs: 10, clips: clips,
            variants: [.init(token: "一", before: ["百", "千"], file: "clips/yi4.wav")],
            templates: [
                "plain": ["到账", "{amount}"], "alipay": ["支付宝到账", "{amount}"],
                "plain.refund": ["退款", "{amount}"],
            ],
            prompts: ["network_lost": ["网络已断开"]], chime: "clips/chime.wav")
    }

    /// An English pack with configurable currency words, composed by the same ``Composer``.
    static func enManifest(currency: CurrencyWords = CurrencyWords()) -> VoicePackManifest {
        var tokens = [
            "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
            "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
            "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred",
            "thousand", "million", "billion", "and", "point", "payment received", "refund",
        ]
        tokens += [currency.major, currency.majorPlural, currency.minor, currency.minorPlural]
        var clips: [String: String] = [:]
        for token in tokens { clips[token] = "clips/\(token).wav" }
        return VoicePackManifest(
            name: "test-en", language: "en", sampleRate: rate, gapMs: 10, separator: " ", currency: currency,
            clips: clips,
            templates: ["plain": ["payment received", "{amount}"], "plain.refund": ["refund", "{amount}"]],
            chime: "clips/chime.wav")
    }

    /// Each file gets 40 samples of a level unique to it.
    static func pack(_ manifest: VoicePackManifest = zhManifest) throws -> VoicePack {
        var clips: [String: [Float]] = [:]
        for (index, file) in manifest.allFiles.enumerated() {
            clips[file] = [Float](repeating: Float(index + 1) / 100, count: 40)
        }
        return try VoicePack(manifest: manifest, directory: "/nonexistent", clips: clips)
    }

    static func job(_ id: UInt64, _ amount: String, pack: VoicePack) throws -> Job {
        let amount = try Amount(parsing: amount)
        let announcement = try pack.composer.compose(amount: amount)
        return Job(
            id: id, utterance: .payment(amount: amount, channel: "plain", refund: false),
            announcement: announcement, acceptedAt: Monotonic.nanos)
    }
}
