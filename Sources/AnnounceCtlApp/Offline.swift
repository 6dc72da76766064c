import AnnounceCore
import AnnounceSound
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Options of the subcommands that compose without a daemon.
struct VoiceOptions: ParsableArguments {
    @Option(help: "Voice pack folder, or a folder of packs (default $ANNOUNCE_VOICES, else the installed packs).")
    var voices: String?

    @Option(
        name: [.short, .long],
        help: "Language of the voice pack to use: zh, en (a pack folder named so, or whose manifest says so).")
    var lang: String = "zh"

    @Option(
        name: [.short, .long],
        help: "Payment channel template: plain, alipay, wechat, unionpay (as the voice pack defines).")
    var channel: String = "plain"

    @Flag(name: [.short, .long], help: "A refund.")
    var refund = false

    @Option(help: "Reading style: decimal (十点五元) or units (十元五角) (default: the language's own).")
    var style: String?

    @Flag(help: "Say 两 instead of 二 before 百/千/万/亿.")
    var liang = false

    /// The pack folder for `lang`, found where the daemon would look (``VoicePackSearch``: --voices, else
    /// $ANNOUNCE_VOICES, else the installed packs): the folder itself if it is a pack, else `<voices>/<lang>`, else
    /// the first sub-folder whose manifest has that language.
    func packDirectory() throws(AnnounceError) -> String {
        let library = try VoicePackSearch.standard(flag: voices).locate()
        let folders = try VoicePackLoader.packFolders(library)
        if folders == [library] { return library }
        let named = Path.join(library, lang)
        if folders.contains(named) { return named }
        let key = Composer.languageKey(lang)
        for folder in folders
        where Composer.languageKey(try VoicePackLoader.readManifest(directory: folder).language) == key {
            return folder
        }
        let languages = folders.compactMap { try? VoicePackLoader.readManifest(directory: $0).language }
        throw AnnounceError(
            .unknownLanguage,
            "no voice pack for language \"\(lang)\" in \(library) (it has: \(languages.sorted().joined(separator: ", "))); "
                + "choose one with --lang, or another folder with --voices")
    }

    func readingOptions(_ composer: Composer) throws -> ReadingOptions {
        var options = ReadingOptions(style: composer.reader.defaultStyle, liang: liang)
        if let style {
            guard let parsed = ReadingStyle(rawValue: style) else {
                throw InvalidValue("unknown --style \(style) (use decimal or units)")
            }
            options.style = parsed
        }
        return options
    }
}

/// An amount given as yuan text or as integer fen, parsed with the same rules as the daemon's.
func parseAmount(text: String?, fen: Int64?) throws(AnnounceError) -> Amount {
    do {
        if let fen { return try Amount(fen: fen) }
        return try Amount(parsing: text ?? "")
    } catch {
        throw error.announceError
    }
}

/// Exit status for an error met while composing offline (documented in the command's help).
func exitStatus(for error: AnnounceError) -> ExitCode {
    switch error.code {
    case .invalidAmount, .unknownChannel, .unknownLanguage, .notFound, .badRequest: Exit.invalidInput
    case .badVoicePack: Exit.noVoicePack
    default: ExitCode(1)
    }
}

struct WordsLine: Encodable {
    var amount: String
    var text: String?
    var tokens: [String]?
    var files: [String]?
    var missing: [String]?
    var error: ErrorInfo?
}

struct Words: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "words",
        abstract: "Print the sentence each amount will be announced as (no daemon needed).",
        discussion: """
            Examples:  announce-ctl words --channel alipay 100.00 1005 0.05
                       announce-ctl words --lang en --json --fen 10530
            Exit status: 0 every amount can be announced; 2 an amount was refused (the message names the \
            problem) or the channel/language is unknown; 1 the voice pack is broken or lacks a clip.
            """
    )

    @OptionGroup var voice: VoiceOptions

    @Flag(help: "One JSON object per amount: amount, text, tokens, files (or amount and error).")
    var json = false

    @Flag(help: "Also print the clip tokens.")
    var tokens = false

    @Option(name: .customLong("fen"), help: "An amount in integer fen (repeatable), read like AMOUNT.")
    var fen: [Int64] = []

    @Argument(help: "Amounts in yuan: 100, 100.5, 1,000.00, ¥100.")
    var amounts: [String] = []

    func validate() throws {
        if amounts.isEmpty && fen.isEmpty { throw ValidationError("give at least one AMOUNT or --fen") }
    }

    func run() throws {
        let composer: Composer
        do {
            composer = try Composer(manifest: VoicePackLoader.readManifest(directory: voice.packDirectory()))
        } catch {
            Output.error(error.description)
            throw exitStatus(for: error)
        }
        let options = try voice.readingOptions(composer)
        var worst: ExitCode?
        let inputs: [(text: String?, fen: Int64?, label: String)] =
            amounts.map { ($0, nil, $0) } + fen.map { (nil, $0, "\($0) fen") }
        for input in inputs {
            do throws(AnnounceError) {
                let amount = try parseAmount(text: input.text, fen: input.fen)
                let announcement = try composer.compose(
                    amount: amount, channel: voice.channel, refund: voice.refund, options: options)
                if json {
                    print(
                        Output.json(
                            WordsLine(
                                amount: amount.description, text: announcement.text, tokens: announcement.tokens,
                                files: announcement.files,
                                missing: announcement.missing.isEmpty ? nil : announcement.missing)))
                } else {
                    print("\(input.label)\t\(announcement.text)")
                    if tokens { print("\t\(announcement.tokens.joined(separator: " | "))") }
                }
                if !announcement.missing.isEmpty {
                    let list = announcement.missing.map { "\"\($0)\"" }.joined(separator: ", ")
                    Output.error(
                        "\(input.label): the voice pack has no clip for \(list); the chime would play (add the clip "
                            + "to the pack, docs/voice-packs.md)")
                    worst = worst ?? ExitCode(1)
                }
            } catch {
                worst = Exit.invalidInput
                if json {
                    print(Output.json(WordsLine(amount: input.label, error: ErrorInfo(error))))
                } else {
                    Output.error("\(input.label): \(error.message)")
                }
            }
        }
        if let worst { throw worst }
    }
}

struct Render: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render",
        abstract: "Write exactly the samples the daemon would play to a WAV file (no daemon needed).",
        discussion: """
            Renders an amount (or --fen, a --prompt, or free --text) with the same voice pack, reading options, \
            gap and lead-in as the daemon: the file holds, sample for sample, what announced writes to ALSA.
            If the announcement cannot be built (a clip is missing, speech cannot be synthesised), the file \
            holds the pack's chime, as the daemon would play, and the exit status is 1.
            Examples:  announce-ctl render --output a.wav 100.00
                       announce-ctl render --lang en --output b.wav --prompt network-lost
                       announce-ctl render --output t.wav --summary 3/1234.50 --refunds 1/50
            """
    )

    @OptionGroup var voice: VoiceOptions

    @Option(help: "WAV file to write (16-bit mono at the pack's rate).")
    var output: String

    @Option(name: .customLong("lead-in-ms"), help: "Silence before the announcement, as the daemon's --lead-in-ms.")
    var leadInMs: Int = 0

    @Option(name: .customLong("gap-ms"), help: "Silence between words, ms (default: the voice pack's gapMs).")
    var gapMs: Int?

    @Option(help: "The amount in integer fen, instead of AMOUNT.")
    var fen: Int64?

    @Option(help: "Render a named status prompt instead of an amount, e.g. network-lost.")
    var prompt: String?

    @Option(help: "Render free text (synthesised with espeak-ng in the pack's voice) instead of an amount.")
    var text: String?

    @Option(
        help: ArgumentHelp(
            "Render the day's total instead: COUNT payments summing to AMOUNT (0/0 for none), as `today --say`.",
            valueName: "count/amount"))
    var summary: String?

    @Option(help: ArgumentHelp("With --summary: the refunds, COUNT/AMOUNT.", valueName: "count/amount"))
    var refunds: String?

    @Argument(help: "The amount in yuan.")
    var amount: String?

    func validate() throws {
        let given = [amount != nil, fen != nil, prompt != nil, text != nil, summary != nil].filter { $0 }.count
        guard given == 1 else {
            throw ValidationError("give exactly one of AMOUNT, --fen, --prompt, --text, --summary")
        }
        if refunds != nil && summary == nil { throw ValidationError("--refunds goes with --summary") }
    }

    /// `--summary 3/1234.50 --refunds 1/50` as the journal would count them.
    func totals() throws -> DayTotals {
        func tally(_ text: String?, _ flag: String) throws -> DayTotals.Tally {
            guard let text else { return DayTotals.Tally() }
            let parts = text.split(separator: "/", maxSplits: 1)
            guard parts.count == 2, let count = Int(parts[0]), count >= 0 else {
                throw InvalidValue("--\(flag): COUNT/AMOUNT, e.g. 3/1234.50")
            }
            if parts[1] == "0" && count == 0 { return DayTotals.Tally() }
            guard let sum = try? Amount(parsing: String(parts[1])), count > 0 else {
                throw InvalidValue("--\(flag): \(parts[1]) is not an amount for \(count) payments")
            }
            return DayTotals.Tally(count: count, fen: sum.fen)
        }
        return DayTotals(payments: try tally(summary, "summary"), refunds: try tally(refunds, "refunds"))
    }

    func run() throws {
        guard leadInMs >= 0 else { throw InvalidValue("--lead-in-ms cannot be negative") }
        let totals = summary == nil ? nil : try totals()
        do {
            var options = VoicePackLoader.Options()
            options.gapMs = gapMs
            let pack = try VoicePackLoader.load(directory: voice.packDirectory(), options: options)
            let utterance: Utterance
            if let prompt {
                utterance = .prompt(name: prompt)
            } else if let text {
                utterance = .text(text)
            } else if let totals {
                utterance = .summary(totals)
            } else {
                let parsed = try parseAmount(text: amount, fen: fen)
                utterance = .payment(amount: parsed, channel: voice.channel, refund: voice.refund)
            }
            let announcement = try pack.composer.compose(utterance, options: try voice.readingOptions(pack.composer))
            var failure: AnnounceError?
            let samples: [Int16]
            do {
                samples = try pack.render(announcement, leadInMs: leadInMs)
            } catch {
                // What the daemon does: the chime rather than silence, and the error reported.
                failure = error
                samples = try pack.renderChime(leadInMs: leadInMs)
            }
            try SoundFile.writeWAV(path: output, samples: samples, sampleRate: pack.sampleRate)
            let seconds = Double(samples.count) / Double(pack.sampleRate)
            print(
                "\(output)\t\(failure == nil ? announcement.text : "(chime)") "
                    + "(\(cFormat("%.2f", seconds)) s, \(pack.sampleRate) Hz)")
            if let failure {
                Output.error("\(failure.description); wrote the chime the daemon would play instead")
                throw ExitCode(1)
            }
        } catch let error as AnnounceError {
            Output.error(error.description)
            throw exitStatus(for: error)
        } catch let error as SndFileError {
            Output.error("\(error.description); choose a file in a folder you may write with --output")
            throw ExitCode(1)
        }
    }
}
