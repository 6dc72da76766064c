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
        discussion: "Example:  announce-ctl text --wait \"请到前台取货\""
    )

    @OptionGroup var connection: ConnectionOptions

    @Flag(help: "Wait until the text has been spoken.")
    var wait = false

    @Argument(help: "The text (at most 500 characters).")
    var text: String

    func run() throws {
        let request = Request(id: "ctl-\(getpid())", op: "text", wait: wait, text: text)
        try exchange(request, connection) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
    }
}
