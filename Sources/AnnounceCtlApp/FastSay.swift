import AnnounceCore
import ArgumentParser

#if canImport(Glibc)
import Glibc
#endif

/// `announce-ctl say` in its plain forms, parsed without swift-argument-parser: the command a point-of-sale app
/// runs for every payment, so its start-up is part of how soon the payment is heard. ArgumentParser builds its
/// model of every command by reflection on each run, which was most of the process's own time.
///
/// Only arguments this reads exactly as ArgumentParser would are taken: each of `say`'s options at most once, as
/// `--name value`, `--name=value` (a value not empty) or `-x value`, flags alone, one amount not starting with `-`. Anything else —
/// `--help`, an unknown or repeated option, combined short flags, `--`, a value that looks like an option or does
/// not parse, a missing or second amount — is left to ArgumentParser (`parse` returns nil), which answers it
/// exactly as always. FastSayTests checks that both read every accepted form the same.
struct FastSay {
    private enum Name: Hashable {
        case socket, json, wait, priority, ttl, channel, order, refund, lang, style, liang, fen
    }

    var socket: String?
    var json = false
    var wait = false
    var request: Request

    /// The parsed arguments after `say`, or nil for ArgumentParser.
    static func parse(_ arguments: ArraySlice<String>) -> FastSay? {
        let long: [String: Name] = [
            "socket": .socket, "json": .json, "wait": .wait, "priority": .priority, "ttl": .ttl, "channel": .channel,
            "order": .order, "refund": .refund, "lang": .lang, "style": .style, "liang": .liang, "fen": .fen,
        ]
        let short: [Character: Name] = [
            "s": .socket, "j": .json, "w": .wait, "P": .priority, "t": .ttl, "c": .channel, "o": .order,
            "r": .refund, "l": .lang,
        ]
        let flags: Set<Name> = [.json, .wait, .refund, .liang]
        var values: [Name: String] = [:]
        var amount: String?
        var index = arguments.startIndex
        while index != arguments.endIndex {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("-") else {
                guard amount == nil else { return nil }
                amount = argument
                continue
            }
            let name: Name
            var inline: String?
            if argument.hasPrefix("--") {
                let body = argument.dropFirst(2)
                let key = body.firstIndex(of: "=").map { body[..<$0] } ?? body
                guard let known = long[String(key)] else { return nil }
                name = known
                if key.endIndex != body.endIndex {
                    inline = String(body[body.index(after: key.endIndex)...])
                    // ArgumentParser reads `--name=` with nothing after it differently (the next argument).
                    guard inline != "" else { return nil }
                }
            } else {
                guard argument.count == 2, let known = short[argument.last!] else { return nil }
                name = known
            }
            guard values[name] == nil else { return nil }
            if flags.contains(name) {
                guard inline == nil else { return nil }
                values[name] = ""
                continue
            }
            if let inline {
                values[name] = inline
            } else {
                guard index != arguments.endIndex, !arguments[index].hasPrefix("-") else { return nil }
                values[name] = arguments[index]
                index += 1
            }
        }
        var ttl: Double?
        if let text = values[.ttl] {
            guard let value = Double(text) else { return nil }
            ttl = value
        }
        var fen: Int64?
        if let text = values[.fen] {
            guard let value = Int64(text) else { return nil }
            fen = value
        }
        // Say.validate: an amount or --fen, not both.
        guard (amount == nil) != (fen == nil) else { return nil }
        let wait = values[.wait] != nil
        let request = Request(
            id: requestID(), op: "say", amount: amount, fen: fen, channel: values[.channel] ?? "plain",
            refund: values[.refund] != nil ? true : nil, lang: values[.lang], style: values[.style],
            liang: values[.liang] != nil ? true : nil, order: values[.order], priority: values[.priority], ttl: ttl,
            wait: wait ? true : nil)
        return FastSay(socket: values[.socket], json: values[.json] != nil, wait: wait, request: request)
    }

    /// Sends the request as `Say.run` does; exits with the status ArgumentParser would give for its outcome.
    func run() -> Never {
        var connection = ConnectionOptions()
        connection.socket = socket
        connection.json = json
        do {
            try exchange(request, connection, waited: wait) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
        } catch let code as ExitCode {
            exit(code.rawValue)
        } catch {
            Output.error("\(error)")
            exit(Exit.failure.rawValue)
        }
        exit(0)
    }
}
