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
/// `--name value`, `--name=value` (a value not empty) or `-x value`, flags alone, one amount not starting with
/// `-`. Anything else — `--help`, an unknown or repeated option, combined short flags, `--`, a value that looks
/// like an option or does not parse, a missing or second amount — is left to ArgumentParser (`parse` returns
/// nil), which answers it exactly as always. FastSayTests checks that both read every accepted form the same.
struct FastSay {
    /// The options, by index into the parsed values. Looked up with `switch`, not dictionaries: a dictionary
    /// keyed by a type of ours makes the Swift runtime search every protocol conformance in the executable for
    /// its Hashable conformance at first use, which cost more than the rest of the parse.
    private enum Name: Int, CaseIterable {
        case socket, json, wait, priority, ttl, channel, order, refund, lang, style, liang, fen

        init?(long: Substring) {
            switch long {
            case "socket": self = .socket
            case "json": self = .json
            case "wait": self = .wait
            case "priority": self = .priority
            case "ttl": self = .ttl
            case "channel": self = .channel
            case "order": self = .order
            case "refund": self = .refund
            case "lang": self = .lang
            case "style": self = .style
            case "liang": self = .liang
            case "fen": self = .fen
            default: return nil
            }
        }

        init?(short: Substring) {
            switch short {
            case "-s": self = .socket
            case "-j": self = .json
            case "-w": self = .wait
            case "-P": self = .priority
            case "-t": self = .ttl
            case "-c": self = .channel
            case "-o": self = .order
            case "-r": self = .refund
            case "-l": self = .lang
            default: return nil
            }
        }

        var isFlag: Bool {
            switch self {
            case .json, .wait, .refund, .liang: true
            default: false
            }
        }
    }

    var socket: String?
    var json = false
    var wait = false
    var request: Request
    /// `request` as one JSON object, written here: JSONEncoder's Codable machinery makes the Swift runtime
    /// search the executable's protocol conformances once more before the request can leave.
    var encoded: [UInt8]

    /// The parsed arguments after `say`, or nil for ArgumentParser.
    static func parse(_ arguments: ArraySlice<String>) -> FastSay? {
        var values = [String?](repeating: nil, count: Name.allCases.count)
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
                guard let known = Name(long: key) else { return nil }
                name = known
                if key.endIndex != body.endIndex {
                    inline = String(body[body.index(after: key.endIndex)...])
                    // ArgumentParser reads `--name=` with nothing after it differently (the next argument).
                    guard inline != "" else { return nil }
                }
            } else {
                guard let known = Name(short: Substring(argument)) else { return nil }
                name = known
            }
            guard values[name.rawValue] == nil else { return nil }
            if name.isFlag {
                guard inline == nil else { return nil }
                values[name.rawValue] = ""
                continue
            }
            if let inline {
                values[name.rawValue] = inline
            } else {
                guard index != arguments.endIndex, !arguments[index].hasPrefix("-") else { return nil }
                values[name.rawValue] = arguments[index]
                index += 1
            }
        }
        func value(_ name: Name) -> String? { values[name.rawValue] }
        var ttl: Double?
        if let text = value(.ttl) {
            guard let parsed = Double(text) else { return nil }
            ttl = parsed
        }
        var fen: Int64?
        if let text = value(.fen) {
            guard let parsed = Int64(text) else { return nil }
            fen = parsed
        }
        // Say.validate: an amount or --fen, not both.
        guard (amount == nil) != (fen == nil) else { return nil }
        if let ttl, !ttl.isFinite { return nil }  // not a JSON number: JSONEncoder's error, through ArgumentParser
        let wait = value(.wait) != nil
        let request = Request(
            id: requestID(), op: "say", amount: amount, fen: fen, channel: value(.channel) ?? "plain",
            refund: value(.refund) != nil ? true : nil, lang: value(.lang), style: value(.style),
            liang: value(.liang) != nil ? true : nil, order: value(.order), priority: value(.priority), ttl: ttl,
            wait: wait ? true : nil)
        return FastSay(
            socket: value(.socket), json: value(.json) != nil, wait: wait, request: request,
            encoded: Self.encode(request))
    }

    /// The fields FastSay sets, as JSON (FastSayTests decodes it back and compares).
    static func encode(_ request: Request) -> [UInt8] {
        var json = ""
        func add(_ key: String, _ text: String?) { if let text { add(key, number: JSONSyntax.quoted(text)) } }
        func add(_ key: String, number: String?) {
            guard let number else { return }
            json += (json.isEmpty ? "{\"" : ",\"") + key + "\":" + number
        }
        add("amount", request.amount)
        add("channel", request.channel)
        add("fen", number: request.fen.map { "\($0)" })
        add("id", request.id)
        add("lang", request.lang)
        add("liang", number: request.liang.map { $0 ? "true" : "false" })
        add("op", request.op)
        add("order", request.order)
        add("priority", request.priority)
        add("refund", number: request.refund.map { $0 ? "true" : "false" })
        add("style", request.style)
        add("ttl", number: request.ttl.map { "\($0)" })
        add("wait", number: request.wait.map { $0 ? "true" : "false" })
        return Array((json + "}").utf8)
    }

    /// Sends the request as `Say.run` does; exits with the status ArgumentParser would give for its outcome.
    func run() -> Never {
        do {
            try exchange(request, socket: socket, json: json, encoded: encoded, waited: wait) { reply in
                reply.job.map(Output.describe(job:)) ?? "ok"
            }
        } catch let code as ExitCode {
            exit(code.rawValue)
        } catch {
            Output.error("\(error)")
            exit(Exit.failure.rawValue)
        }
        exit(0)
    }
}
