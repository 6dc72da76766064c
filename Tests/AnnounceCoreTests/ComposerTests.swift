import Testing

@testable import AnnounceCore

struct ComposerTests {
    let composer: Composer

    init() throws {
        composer = try Composer(manifest: Fixtures.zhManifest)
    }

    @Test func fillsTheChannelTemplateWithTheAmountsWords() throws {
        let plain = try composer.compose(amount: Amount(parsing: "100.00"))
        #expect(plain.text == "到账一百元")
        #expect(plain.tokens == ["到账", "一", "百", "元"])
        let alipay = try composer.compose(amount: Amount(parsing: "8.5"), channel: "alipay")
        #expect(alipay.text == "支付宝到账八点五元")
        let refund = try composer.compose(amount: Amount(parsing: "3"), refund: true)
        #expect(refund.text == "退款三元")
    }

    @Test func usesContextVariantsForToneSandhi() throws {
        let announcement = try composer.compose(amount: Amount(parsing: "110"))
        // 一百一十: the first 一 is followed by 百 (variant yi4), the second by 十 (plain clip).
        #expect(
            announcement.files == [
                "clips/到账.wav", "clips/yi4.wav", "clips/百.wav", "clips/一.wav",
                "clips/十.wav", "clips/元.wav",
            ])
    }

    @Test func refusesUnknownChannelsAndPromptsByName() throws {
        #expect(throws: AnnounceError.self) { try composer.compose(amount: Amount(parsing: "1"), channel: "paypal") }
        let one = try Amount(parsing: "1")
        do { _ = try composer.compose(amount: one, channel: "paypal") } catch {
            #expect(error.code == .unknownChannel)
            #expect(error.message.contains("paypal"))
        }
        do { _ = try composer.compose(prompt: "nope") } catch { #expect(error.code == .notFound) }
        #expect(try composer.compose(prompt: "network_lost").text == "网络已断开")
    }

    @Test func aMissingClipIsComposedThenRefusedAtRenderNamingTheToken() throws {
        var manifest = Fixtures.zhManifest
        manifest.clips["九"] = nil
        let pack = try Fixtures.pack(manifest)
        // Composing never drops the job: the token is listed as missing ...
        let announcement = try pack.composer.compose(amount: Amount(parsing: "9"))
        #expect(announcement.text == "到账九元")
        #expect(announcement.missing == ["九"])
        // ... and rendering refuses with missing_clip naming it, so the player plays the chime instead.
        do {
            _ = try pack.render(announcement)
            Issue.record("rendered without a clip for 九")
        } catch {
            #expect(error.code == .missingClip)
            #expect(error.message.contains("\"九\""), "\(error.message)")
        }
        #expect(!(try pack.renderChime()).isEmpty)
        #expect(manifest.problems(requiredTokens: pack.composer.readerTokens).contains { $0.contains("\"九\"") })
    }

    @Test func promptsWithoutClipsAreWarningsNotProblems() throws {
        var manifest = Fixtures.zhManifest
        manifest.prompts?["low-battery"] = ["电量低"]
        #expect(manifest.problems(requiredTokens: try Composer(manifest: manifest).readerTokens).isEmpty)
        #expect(manifest.warnings() == ["prompt \"low-battery\" uses token \"电量低\" that has no clip"])
        let announcement = try Composer(manifest: manifest).compose(prompt: "low-battery")
        #expect(announcement.missing == ["电量低"])
    }

    @Test func aPackWithoutChimeIsBroken() {
        var manifest = Fixtures.zhManifest
        manifest.chime = nil
        #expect(manifest.problems().contains { $0.contains("no chime") })
    }

    @Test func freeTextIsComposedForSynthesisAndCheckedFirst() throws {
        let announcement = try composer.compose(.text("  请到前台取货  "))
        #expect(announcement.speech == "请到前台取货")
        #expect(announcement.text == "请到前台取货")
        #expect(announcement.files.isEmpty && announcement.missing.isEmpty)
        #expect(announcement.language == "zh")
        for bad in ["", "   ", String(repeating: "长", count: Composer.maximumTextLength + 1), "bell\u{07}"] {
            do {
                _ = try composer.compose(text: bad)
                Issue.record("accepted \(bad.debugDescription)")
            } catch {
                #expect(error.code == .badRequest)
            }
        }
        // A pack without a synthesiser reports it at render time, so the player falls back to the chime.
        let pack = try Fixtures.pack()
        #expect(throws: AnnounceError.self) { try pack.render(announcement) }
    }

    @Test func languageKeysFoldTagsAndMandarin() {
        #expect(Composer.languageKey("zh-CN") == "zh")
        #expect(Composer.languageKey("cmn") == "zh")
        #expect(Composer.languageKey("EN_gb") == "en")
        #expect(Composer.reader(language: "fr", currency: nil) == nil)
    }

    @Test func manifestProblemsNameTheTemplateAndToken() {
        var manifest = Fixtures.zhManifest
        manifest.templates["wechat"] = ["微信收款", "{amount}"]
        manifest.templates["broken"] = ["到账"]
        let problems = manifest.problems()
        #expect(problems.contains("template \"wechat\" uses token \"微信收款\" that has no clip"))
        #expect(problems.contains("template \"broken\" has 0 {amount} placeholders"))
    }

    @Test func readerTokensCoverEveryCharacterTheMandarinReaderUses() {
        #expect(
            composer.readerTokens
                == Set([
                    "零", "一", "二", "两", "三", "四", "五", "六", "七", "八", "九",
                    "十", "百", "千", "万", "亿", "点", "元", "角", "分",
                ]))
    }

    @Test func englishGoesThroughTheSameComposerWithThePacksCurrencyWords() throws {
        let english = try Composer(manifest: Fixtures.enManifest())
        let plain = try english.compose(amount: Amount(parsing: "105.30"))
        #expect(plain.text == "payment received one hundred and five yuan and thirty fen")
        #expect(plain.tokens.first == "payment received")
        #expect(plain.missing.isEmpty)
        #expect(try english.compose(amount: Amount(parsing: "1"), refund: true).text == "refund one yuan")
        let decimal = try english.compose(amount: Amount(parsing: "10.50"), options: ReadingOptions(style: .decimal))
        #expect(decimal.text == "payment received ten point five yuan")

        let dollars = CurrencyWords(major: "dollar", majorPlural: "dollars", minor: "cent", minorPlural: "cents")
        let american = try Composer(manifest: Fixtures.enManifest(currency: dollars))
        #expect(
            try american.compose(amount: Amount(parsing: "1.01")).text
                == "payment received one dollar and one cent")
        #expect(american.readerTokens.isSuperset(of: ["dollar", "dollars", "cent", "cents", "and", "billion"]))
        #expect(!american.readerTokens.contains("yuan"))
    }

    @Test func aLibraryPicksThePackByLanguageAndRendersWithIt() throws {
        let zh = try Fixtures.pack()
        let en = try Fixtures.pack(Fixtures.enManifest())
        let library = try VoiceLibrary(packs: [zh, en], defaultLanguage: "zh")
        #expect(library.languages == ["zh", "en"])
        #expect(try library.pack(language: "en-GB").language == "en")
        #expect(try library.pack(language: "cmn").language == "zh")
        #expect(try library.pack(language: nil).language == "zh")
        do {
            _ = try library.pack(language: "fr")
            Issue.record("found a French pack")
        } catch {
            #expect(error.code == .unknownLanguage)
            #expect(error.message.contains("zh, en"))
        }
        let english = try en.composer.compose(amount: Amount(parsing: "2"))
        #expect(try library.render(english) == (try en.render(english)))
        #expect(try library.render(english) != (try zh.render(zh.composer.compose(amount: Amount(parsing: "2")))))
        #expect(throws: AnnounceError.self) { try VoiceLibrary(packs: [zh, zh]) }
        #expect(throws: AnnounceError.self) { try VoiceLibrary(packs: []) }
        #expect(throws: AnnounceError.self) { try VoiceLibrary(packs: [zh, en], defaultLanguage: "fr") }
    }

    @Test func renderingPlacesEveryWordWithTheGapBetween() throws {
        let pack = try Fixtures.pack()
        let announcement = try pack.composer.compose(amount: Amount(parsing: "100"))
        let rendering = try pack.rendering(announcement, leadInMs: 5)
        let gap = pack.gapMs * pack.sampleRate / 1000
        #expect(rendering.segments.count == announcement.files.count)
        #expect(rendering.segments.first?.lowerBound == 5 * pack.sampleRate / 1000)
        for (previous, next) in zip(rendering.segments, rendering.segments.dropFirst()) {
            #expect(next.lowerBound - previous.upperBound == gap)
        }
        #expect(rendering.segments.last?.upperBound == rendering.samples.count)
        let overridden = try VoicePack(manifest: pack.manifest, directory: "/x", clips: pack.clips, gapMs: 0)
        #expect(
            try overridden.render(announcement).count == rendering.samples.count - 5 * pack.sampleRate / 1000
                - gap * (announcement.files.count - 1))
    }
}
