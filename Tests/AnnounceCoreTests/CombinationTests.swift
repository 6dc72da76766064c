import Foundation
import Testing

@testable import AnnounceCore

/// Combination broadcasts (`combine`, docs/protocol.md): the request checked, the parts composed with the pack and the
/// pushed clips, and the render taking each pushed clip's samples.
struct CombinationTests {
    func request(_ json: String) throws -> JobRequest {
        try JSONDecoder().decode(Request.self, from: Data(json.utf8)).jobRequest()
    }

    func code(_ json: String) -> AnnounceError.Code? {
        do {
            _ = try request(json)
            return nil
        } catch let error as AnnounceError {
            return error.code
        } catch {
            return nil
        }
    }

    @Test func aCombineRequestBecomesACombinationJob() throws {
        let job = try request(
            #"{"op":"combine","parts":[{"clip":"new_order"},{"amount":"12.50"},{"digits":"0423"}],"order":"SP-1"}"#)
        #expect(job.utterance == .combination([.clip("new_order"), .amount(try Amount(parsing: "12.5")), .digits("0423")]))
        #expect(job.priority == .payment, "spoken in turn like a payment, never dropped")
        #expect(job.order == "SP-1")
        #expect(job.utterance.dedupKind == .combination, "its ids are its own: SP-1 never blocks payment SP-1")
        #expect(try request(#"{"op":"combine","parts":[{"clip":"x"}],"priority":"urgent"}"#).priority == .urgent)
        #expect(try Request(op: "combine").requiredAccess() == .submit)
    }

    @Test func badPartsAreRefusedNamingThePart() throws {
        #expect(code(#"{"op":"combine"}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{}]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{"clip":"a","digits":"1"}]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{"clip":""}]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{"clip":"a\u0007"}]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{"digits":"12a"}]}"#) == .badRequest)
        #expect(code(#"{"op":"combine","parts":[{"digits":"三"}]}"#) == .badRequest, "digits are 0-9, nothing else")
        #expect(code(#"{"op":"combine","parts":[{"amount":"-1"}]}"#) == .invalidAmount)
        #expect(code(#"{"op":"combine","parts":[{"clip":"a"}],"amount":"1"}"#) == .badRequest)
        let many = Array(repeating: #"{"clip":"a"}"#, count: CombinationPart.maximumCount + 1).joined(separator: ",")
        #expect(code(#"{"op":"combine","parts":[\#(many)]}"#) == .badRequest)
        do {
            _ = try request(#"{"op":"combine","parts":[{"clip":"a"},{"digits":"x"}]}"#)
            Issue.record("refused")
        } catch let error as AnnounceError {
            #expect(error.message.contains("parts[1].digits"), "\(error.message)")
        }
    }

    @Test func listItemsAreWrittenAsTheAlibabaPlatformWritesThem() {
        #expect(Request.Part(listItem: "{$12.50}") == Request.Part(amount: "12.50"))
        #expect(Request.Part(listItem: "{#0423}") == Request.Part(digits: "0423"))
        #expect(Request.Part(listItem: "new_order") == Request.Part(clip: "new_order"))
        #expect(Request.Part(listItem: "{$") == Request.Part(clip: "{$"), "no closing brace: a clip id")
    }

    @Test func partsAreComposedInOrderWithPushedClipsAndDigitsReadOneByOne() throws {
        let composer = try Composer(manifest: Fixtures.zhManifest)
        let parts: [CombinationPart] = [.clip("new_order"), .clip("到账"), .amount(try Amount(parsing: "12.5")), .digits("0423")]
        let announcement = try composer.compose(.combination(parts), corpus: ["new_order"])
        #expect(announcement.tokens == ["new_order", "到账", "十", "二", "点", "五", "元", "零", "四", "二", "三"])
        #expect(announcement.text == "new_order到账十二点五元零四二三", "二, never 两: digits are read as digits")
        #expect(announcement.files.first == Corpus.fileKey("new_order"))
        #expect(announcement.files.dropFirst().first == "clips/到账.wav")
        #expect(announcement.missing.isEmpty)
        // A pushed clip wins over the pack's token of the same name: the fleet pushed it to be said.
        #expect(try composer.compose(.combination([.clip("元")]), corpus: ["元"]).files == [Corpus.fileKey("元")])
        // A prompt of the pack by name (the default packs' notices: new-order …), its words shown.
        let notice = try composer.compose(.combination([.clip("network_lost"), .digits("12")]))
        #expect(notice.text == "网络已断开一二" && notice.files.first == "clips/网络已断开.wav")
        // English digits.
        let english = try Composer(manifest: Fixtures.enManifest())
        #expect(try english.compose(.combination([.digits("207")])).tokens == ["two", "zero", "seven"])
    }

    @Test func anIDNeitherThePackNorThePushedClipsHaveIsRefused() throws {
        let composer = try Composer(manifest: Fixtures.zhManifest)
        do {
            _ = try composer.compose(.combination([.clip("到账"), .clip("urged")]), corpus: ["new_order"])
            Issue.record("composed a clip that is nowhere")
        } catch {
            #expect(error.code == .notFound)
            #expect(error.message.contains("\"urged\"") && error.message.contains("new_order"), "\(error.message)")
        }
    }

    @Test func theRenderTakesEachPushedClipsSamples() throws {
        let pushedSamples = ClipSamples([Int16](repeating: 1234, count: 30))
        let manifest = CorpusManifest(version: 1)
        let corpus = Corpus(directory: nil, manifest: manifest, clips: ["new_order": pushedSamples])
        let library = try VoiceLibrary(packs: [try Fixtures.pack()], corpus: corpus)
        let pack = library.defaultPack
        let announcement = try pack.composer.compose(
            .combination([.clip("new_order"), .clip("元")]), corpus: Set(corpus.clips.keys))
        let rendering = try pack.rendering(announcement)
        #expect(rendering.segments.count == 2)
        let first = Array(rendering.samples[rendering.segments[0]])
        #expect(first == [Int16](repeating: 1234, count: 30), "the pushed clip, as loaded")
        let second = Array(rendering.samples[rendering.segments[1]])
        #expect(second == Array(pack.clips["clips/元.wav"] ?? ClipSamples([])), "then the pack's 元")
        // A pushed clip deleted since it was composed: missing_clip (the player then plays the chime), not silence.
        let without = try VoiceLibrary(packs: [try Fixtures.pack()]).defaultPack
        do {
            _ = try without.render(announcement)
            Issue.record("rendered a clip that is gone")
        } catch {
            #expect(error.code == .missingClip && error.message.contains("new_order"), "\(error.message)")
        }
    }
}
