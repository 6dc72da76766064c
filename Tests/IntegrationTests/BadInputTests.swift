import AnnounceClient
import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// A corpus of hostile and broken requests over the real socket (issue 8): each one gets a clean error with
    /// the right code on its own connection, which stays usable, and the daemon keeps serving a well-behaved
    /// client throughout. Nothing in the corpus may be accepted.
    @Suite
    struct BadInputTests {
        /// A request line and the error code it must get.
        struct Case: CustomStringConvertible {
            var name: String
            var line: [UInt8]
            var code: String
            var description: String { name }

            init(_ name: String, _ line: String, _ code: String = "bad_request") {
                self.init(name, bytes: Array(line.utf8), code)
            }

            init(_ name: String, bytes: [UInt8], _ code: String = "bad_request") {
                self.name = name
                self.line = bytes
                self.code = code
            }
        }

        /// Amounts that look like numbers to a person or to a lax parser: every one is `invalid_amount`.
        static let trickAmounts: [(String, String)] = [
            ("full-width digits", "１００"),
            ("full-width point", "100．00"),
            ("full-width comma", "1，000"),
            ("Arabic-Indic digits", "١٠٠"),
            ("Arabic decimal separator", "1٫50"),
            ("Devanagari digits", "१००"),
            ("mathematical bold digits", "𝟏𝟎𝟎"),
            ("superscript digits", "¹⁰⁰"),
            ("roman numeral", "Ⅻ"),
            ("RTL mark inside", "1\u{200F}00"),
            ("RTL mark before", "\u{200F}100"),
            ("LTR override", "\u{202D}100"),
            ("RTL override reversing digits", "\u{202E}001"),
            ("combining acute on a digit", "1\u{0301}00"),
            ("combining enclosing keycap", "1\u{20E3}"),
            ("NBSP thousands separator", "1\u{00A0}000"),
            ("NBSP around", "\u{00A0}100\u{00A0}"),
            ("thin space separator", "1\u{2009}000"),
            ("ideographic space", "\u{3000}100"),
            ("zero-width space", "1\u{200B}00"),
            ("zero-width joiner", "1\u{200D}00"),
            ("byte order mark", "\u{FEFF}100"),
            ("minus sign U+2212", "\u{2212}5"),
            ("hyphen minus", "-5"),
            ("plus", "+5"),
            ("exponent", "1e3"),
            ("hex", "0x64"),
            ("NaN", "NaN"),
            ("Infinity", "Infinity"),
            ("NUL inside", "1\u{0000}00"),
            ("too many decimals", "1.001"),
            ("European decimal comma", "12,34"),
            ("too large", "1000000000000"),
            ("a thousand digits", String(repeating: "9", count: 1000)),
            ("zero", "0.00"),
            ("empty", ""),
            ("currency sign alone", "¥"),
            ("two currency signs", "¥¥100"),
            ("Chinese numerals", "一百"),
            ("dollar sign", "$100"),
        ]

        static let corpus: [Case] = {
            var cases: [Case] = [
                // Truncated and malformed JSON.
                Case("truncated object", #"{"op":"say","amount":"1"#),
                Case("truncated string", #"{"op":"say","amount":"10"#),
                Case("missing closing brace", #"{"op":"ping""#),
                Case("trailing garbage", #"{"op":"ping"} x"#),
                // (Foundation's JSONDecoder accepts a trailing comma, `{"op":"ping",}`: lenient, harmless.)
                Case("two objects on a line", #"{"op":"ping"}{"op":"ping"}"#),
                Case("single quotes", "{'op':'ping'}"),
                Case("unquoted key", "{op:\"ping\"}"),
                Case("comment", #"{"op":"ping"} // hi"#),
                Case("not JSON", "say 100"),
                Case("lone surrogate escape", #"{"op":"say","amount":"\ud800"}"#),
                // Not an object.
                Case("array", "[]"),
                Case("string", #""say""#),
                Case("number", "42"),
                Case("null", "null"),
                Case("true", "true"),
                // Binary.
                Case("invalid UTF-8", bytes: [0xFF, 0xFE, 0x7B, 0x80, 0xC0, 0xAF]),
                Case("NUL bytes", bytes: Array(#"{"op":"#.utf8) + [0, 0, 0] + Array(#""ping"}"#.utf8)),
                Case("control characters", bytes: (1...31).map(UInt8.init).filter { $0 != 10 && $0 != 13 && $0 != 9 }),
                Case("overlong UTF-8 slash", bytes: Array(#"{"op":"ping"#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8)),
                Case(
                    "random bytes",
                    bytes: {
                        var generator = SystemRandomNumberGenerator()
                        return (0..<4000).map { _ in UInt8.random(in: 0...255, using: &generator) }.filter {
                            $0 != 10
                        }
                    }()),
                // Deep nesting, within the line limit.
                Case("deeply nested arrays", #"{"op":"say","amount":"# + String(repeating: "[", count: 8000)
                    + String(repeating: "]", count: 8000) + "}"),
                Case("deeply nested objects", String(repeating: #"{"a":"#, count: 2500) + "1"
                    + String(repeating: "}", count: 2500)),
                Case("unclosed nesting", String(repeating: "[{\"op\":", count: 2000)),
                // Wrong types.
                Case("op a number", #"{"op":1}"#),
                Case("op null", #"{"op":null}"#),
                Case("op missing", #"{"amount":"100"}"#),
                Case("op unknown", #"{"op":"shout","amount":"100"}"#),
                Case("op empty", #"{"op":""}"#),
                Case("amount a number", #"{"op":"say","amount":100}"#),
                Case("amount an array", #"{"op":"say","amount":["100"]}"#),
                Case("amount an object", #"{"op":"say","amount":{"yuan":100}}"#),
                Case("fen a string", #"{"op":"say","fen":"100"}"#),
                Case("fen a fraction", #"{"op":"say","fen":1.5}"#),
                Case("fen beyond Int64", #"{"op":"say","fen":99999999999999999999}"#),
                Case("fen 1e400", #"{"op":"say","fen":1e400}"#),
                Case("wait a string", #"{"op":"say","amount":"1","wait":"yes"}"#),
                Case("ttl a string", #"{"op":"say","amount":"1","ttl":"10s"}"#),
                Case("ttl negative", #"{"op":"say","amount":"1","ttl":-1}"#),
                Case("ttl a century", #"{"op":"say","amount":"1","ttl":3153600000}"#),
                Case("job negative", #"{"op":"cancel","job":-1}"#),
                Case("id an object", #"{"id":{"x":1},"op":"say","amount":"1"}"#),
                Case("version from the future", #"{"v":2,"op":"say","amount":"1"}"#),
                Case("priority unknown", #"{"op":"say","amount":"1","priority":"vip"}"#),
                Case("payment as droppable status", #"{"op":"say","amount":"1","priority":"status"}"#),
                Case("both amount and fen", #"{"op":"say","amount":"1","fen":100}"#),
                Case("neither amount nor fen", #"{"op":"say"}"#),
                Case("channel with a path", #"{"op":"say","amount":"1","channel":"../../etc/passwd"}"#),
                Case("channel unicode", #"{"op":"say","amount":"1","channel":"支付宝"}"#),
                Case("lang with a slash", #"{"op":"say","amount":"1","lang":"zh/../en"}"#),
                Case("order with a newline escape", #"{"op":"say","amount":"1","order":"A\nB"}"#),
                Case("order with a line separator", #"{"op":"say","amount":"1","order":"A\u2028B"}"#),
                Case(
                    "order too long",
                    #"{"op":"say","amount":"1","order":""# + String(repeating: "x", count: 200) + #""}"#),
                Case("text blank", #"{"op":"text","text":" \t "}"#),
                Case("text huge", #"{"op":"text","text":""# + String(repeating: "字", count: 4000) + #""}"#),
                Case("history limit huge", #"{"op":"history","limit":1000000}"#),
                Case("cancel without a job", #"{"op":"cancel"}"#),
            ]
            for (index, (name, amount)) in trickAmounts.enumerated() {
                let request = Request(id: "t\(index)", op: "say", amount: amount)
                let line = String(decoding: try! JSONEncoder().encode(request), as: UTF8.self)
                cases.append(Case("amount: \(name)", line, "invalid_amount"))
            }
            return cases
        }()

        @Test func everyBadRequestGetsACleanErrorAndTheDaemonKeepsServing() async throws {
            try await withDaemon(rig: nil, device: "null") { daemon in
                // A well-behaved client speaks while the barrage goes on.
                let bystander = Task {
                    try await blocking {
                        let client = try Client(path: daemon.socket)
                        return try (1...20).map { index in
                            try client.send(Request(op: "say", fen: Int64(index), order: "good-\(index)")).last?.ok
                        }
                    }
                }
                let connection = try RawConnection(path: daemon.socket)
                var failures: [String] = []
                for item in Self.corpus {
                    connection.write(item.line + [UInt8(ascii: "\n")])
                    guard let line = await connection.readLine() else {
                        failures.append("\(item): no reply (connection closed)")
                        break
                    }
                    guard let reply = try? JSONDecoder().decode(Response.self, from: Data(line.utf8)) else {
                        failures.append("\(item): the reply is not a protocol reply: \(line.prefix(200))")
                        continue
                    }
                    if reply.ok || reply.error?.code != item.code || reply.error?.message.isEmpty != false {
                        failures.append("\(item): expected \(item.code), got \(line.prefix(300))")
                    }
                    if item.code == "invalid_amount" && reply.id?.hasPrefix("t") != true {
                        failures.append("\(item): id not echoed: \(line.prefix(200))")
                    }
                    // The same connection is still served after each bad line.
                    connection.write(#"{"id":"after","op":"ping"}"# + "\n")
                    let ping = await connection.readResponse()
                    if ping?.ok != true || ping?.id != "after" {
                        failures.append("\(item): the connection is not usable afterwards: \(String(describing: ping))")
                    }
                }
                #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")

                #expect(try await bystander.value == Array(repeating: true, count: 20))
                try await daemon.waitUntilIdle()
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.totals.accepted == 20, "only the bystander's payments were accepted")
                #expect(status.totals.finished["spoken"] == 20)
                #expect(!daemon.log.contains("Fatal error"), "\(daemon.log)")
            }
        }

        /// Lines too long, nested past any parser's depth, and connections cut mid-request.
        @Test func oversizedDeepAndCutRequestsAreRefusedOnTheirOwnConnection() async throws {
            let config = try Paths.temporaryDirectory("cfg")
            defer { try? FileManager.default.removeItem(atPath: config) }
            // A large line limit, so that a 400,000-deep nesting reaches the JSON parser.
            try "[limits]\nmax_request_bytes = 1048576\n".write(
                toFile: "\(config)/a.toml", atomically: true, encoding: .utf8)
            try await withDaemon(rig: nil, arguments: ["--config", "\(config)/a.toml"], device: "null") { daemon in
                let deep = try RawConnection(path: daemon.socket)
                deep.write(String(repeating: "[", count: 400_000) + String(repeating: "]", count: 400_000) + "\n")
                #expect(await deep.readResponse()?.error?.code == "bad_request")
                let deepObjects = try RawConnection(path: daemon.socket)
                deepObjects.write(String(repeating: #"{"op":"#, count: 150_000) + "\n")
                #expect(await deepObjects.readResponse()?.error?.code == "bad_request")

                let huge = try RawConnection(path: daemon.socket)
                huge.write(#"{"op":"say","amount":""# + String(repeating: "1", count: 2 << 20) + "\"}\n")
                let refused = await huge.readResponse()
                #expect(refused?.error?.code == "bad_request", "\(String(describing: refused))")
                #expect(await huge.isClosedByPeer(within: .seconds(10)), "an over-long line ends its connection")

                // Cut in the middle of a request, in the middle of a UTF-8 sequence, and at once.
                let cuts: [[UInt8]] = [
                    Array(#"{"op":"say","amount":"10"#.utf8),
                    Array(Array("{\"op\":\"text\",\"text\":\"\u{5B57}".utf8).dropLast(1)),
                    [],
                ]
                for bytes in cuts {
                    let cut = try RawConnection(path: daemon.socket)
                    cut.write(bytes)
                    cut.close()
                }
                #expect(try await daemon.reply(Request(op: "say", amount: "8.88", wait: true)).job?.state == .spoken)
                let status = try #require(try await daemon.reply(Request(op: "status")).status)
                #expect(status.totals.accepted == 1, "none of the cut requests was taken for a job")
            }
        }
    }
}
