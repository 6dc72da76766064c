import AnnounceCore
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

struct SayText: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "text",
        abstract:
            "Speak free text no voice pack covers (synthesised by the daemon with espeak-ng in the pack's voice).",
        discussion: """
            Examples:
              announce-ctl text -w "请到前台取货"
              announce-ctl text -l en -o NOTICE-7 "please collect your order"   once only, in English
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var job: JobOptions

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("Language of the voice pack whose voice speaks it (default: the daemon's).", valueName: "lang"))
    var lang: String?

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("An id under which it is spoken once only (de-duplicated like a payment).", valueName: "id"))
    var order: String?

    @Argument(help: "The text (at most 500 characters).")
    var text: String

    func run() throws {
        let request = Request(
            id: requestID(), op: "text", lang: lang, order: order, priority: job.priority, ttl: job.ttl,
            wait: job.wait ? true : nil, text: text, enforce: job.enforce ? true : nil)
        try exchange(request, connection, waited: job.wait) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
    }
}
