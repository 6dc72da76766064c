import AnnounceCore
import ArgumentParser
import Testing

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

@testable import AnnounceCtlApp

/// `announce-ctl say` skips ArgumentParser for its plain forms (FastSay): whatever it takes must mean exactly what
/// ArgumentParser makes of it, and whatever else must be left to ArgumentParser.
@Suite struct FastSayTests {
    static let taken: [[String]] = [
        ["100.00"], ["1,000.00"], ["¥100"], ["0.05"],
        ["--socket", "/tmp/x.sock", "100"], ["-s", "/tmp/x.sock", "1"], ["--socket=/tmp/x.sock", "1"],
        ["-w", "-j", "1"], ["--wait", "--json", "--order", "A1", "8.5"], ["-c", "alipay", "-o", "A123", "-w", "8.5"],
        ["-l", "en", "--fen", "1234"], ["--fen=7"], ["-r", "-c", "wechat", "25"], ["--refund", "25"],
        ["--style", "units", "--liang", "200"], ["--style=decimal", "10.5"], ["-P", "urgent", "-t", "2.5", "1"],
        ["--ttl=30", "1"], ["--priority=status", "--lang=zh", "1"], ["--order", "", "1"],
        ["1", "--channel", "alipay"], ["--channel", "alipay", "1", "--wait"], ["--ttl", "1e3", "1"],
        ["--order", "A=B", "1"], ["--channel=a=b", "1"],
        ["--order", "quote\" back\\slash\nline 到账", "1"], ["--ttl", "0.1", "--fen", "0"],
    ]

    static let left: [[String]] = [
        [], ["--help"], ["-h"], ["-wj", "1"], ["--", "1"], ["-c", "a", "-c", "b", "1"], ["1", "2"],
        ["--fen", "5", "1"], ["--ttl", "abc", "1"], ["--fen", "1.5"], ["--bogus", "1"], ["-x", "1"],
        ["--order", "-5", "1"], ["--wait=yes", "1"], ["-5"], ["--socket"], ["1", "--order"], ["-s"],
        ["--version"], ["-w", "-w", "1"], ["--order=", "1"], ["-cs", "1"], ["--fen"], ["---order", "1"],
    ]

    @Test(arguments: taken)
    func readsWhatItTakesAsArgumentParserDoes(arguments: [String]) throws {
        let fast = try #require(FastSay.parse(arguments[...]), "FastSay left \(arguments) to ArgumentParser")
        let say = try Say.parse(arguments)
        #expect(fast.request == say.request, "\(arguments)")
        #expect(fast.socket == say.connection.socket && fast.json == say.connection.json, "\(arguments)")
        #expect(fast.wait == say.job.wait, "\(arguments)")
        let decoded = try JSONDecoder().decode(Request.self, from: Data(fast.encoded))
        #expect(decoded == say.request, "what FastSay sends reads as Say's request: \(arguments)")
    }

    /// Its hand-written JSON escapes what it must: every string survives the daemon's decoder intact.
    @Test func encodesAnyStringTheDaemonDecodesIntact() throws {
        let strings = [
            "A\"1", "back\\slash", "line\nbreak\ttab\r", "\u{01}\u{1f}\u{7f}", "到账", "emoji 🎉", "/path/",
        ]
        for text in strings {
            let request = Request(id: "ctl-1", op: "say", amount: "1", channel: text, order: text, ttl: 0.25)
            let decoded = try JSONDecoder().decode(Request.self, from: Data(FastSay.encode(request)))
            #expect(decoded == request, "\(text.debugDescription)")
        }
    }

    @Test(arguments: left)
    func leavesEverythingElseToArgumentParser(arguments: [String]) {
        #expect(FastSay.parse(arguments[...]) == nil, "\(arguments)")
    }
}
