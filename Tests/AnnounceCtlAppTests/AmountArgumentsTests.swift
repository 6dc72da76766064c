import ArgumentParser
import Testing

@testable import AnnounceCtlApp

/// `words -l en -1 2`: a negative amount is an amount (refused as one later), never a cluster of short options, and
/// an option's value stays with its option — and a command line without a negative number is left as it is.
@Suite struct AmountArgumentsTests {
    @Test func aNegativeAmountIsPutAfterTheOptions() {
        #expect(
            AmountArguments.normalized(["words", "-l", "en", "-1", "2"]) == ["words", "--lang=en", "--", "-1", "2"])
        #expect(
            AmountArguments.normalized(["say", "-1", "--order", "-5", "-w"])
                == ["say", "--order=-5", "-w", "--", "-1"])
        #expect(
            AmountArguments.normalized(["render", "-0.50", "--output", "a.wav", "-c", "alipay"])
                == ["render", "--output=a.wav", "--channel=alipay", "--", "-0.50"])
    }

    /// `say -t -1 10`: the negative value stays the ttl's (joined to its long name), not "Missing value for
    /// '-t <s>'"; the daemon then refuses the ttl as what it is (bad_request, exit 2).
    @Test func aNegativeValueOfAShortOptionStaysItsValue() throws {
        let normalized = AmountArguments.normalized(["say", "-t", "-1", "10"])
        #expect(normalized == ["say", "--ttl=-1", "--", "10"])
        let say = try #require(try AnnounceCtl.parseAsRoot(normalized) as? Say)
        #expect(say.job.ttl == -1 && say.amount == "10")
        let socket = try #require(
            try AnnounceCtl.parseAsRoot(AmountArguments.normalized(["say", "-s", "/x.sock", "-5"])) as? Say)
        #expect(socket.connection.socket == "/x.sock" && socket.amount == "-5")
    }

    @Test func otherCommandLinesAreLeftAlone() {
        for arguments in [
            ["words", "-l", "en", "1", "2"], ["say", "-w", "100"], ["words", "--", "-1"], ["history", "-n", "-1"],
            ["volume", "-5"], [],
        ] {
            #expect(AmountArguments.normalized(arguments) == arguments, "\(arguments)")
        }
    }

    /// What ArgumentParser makes of the reordered line: the options as given, the amounts in order.
    @Test func theReorderedLineParsesAsMeant() throws {
        let parsed = try AnnounceCtl.parseAsRoot(AmountArguments.normalized(["words", "-l", "en", "-1", "-r", "2"]))
        let words = try #require(parsed as? Words)
        #expect(words.voice.lang == "en" && words.voice.refund)
        #expect(words.amounts == ["-1", "2"])
    }

    @Test func isNegativeNumber() {
        #expect(AmountArguments.isNegativeNumber("-1") && AmountArguments.isNegativeNumber("-0.5"))
        #expect(!AmountArguments.isNegativeNumber("-l") && !AmountArguments.isNegativeNumber("-"))
        #expect(!AmountArguments.isNegativeNumber("1") && !AmountArguments.isNegativeNumber("--1"))
    }
}

/// `announce-ctl -s PATH say 1`: the connection options before the command's name are read as after it.
@Suite struct LeadingOptionsTests {
    @Test func connectionOptionsBeforeTheCommandMoveAfterIt() throws {
        #expect(LeadingOptions.moved(["-s", "/x.sock", "say", "1"]) == ["say", "-s", "/x.sock", "1"])
        #expect(
            LeadingOptions.moved(["--socket=/x.sock", "-j", "history", "-n", "3"])
                == ["history", "--socket=/x.sock", "-j", "-n", "3"])
        #expect(LeadingOptions.moved(["--json", "--socket", "/x", "ping"]) == ["ping", "--json", "--socket", "/x"])
        let moved = LeadingOptions.moved(["-s", "/x.sock", "-j", "say", "1"])
        let say = try #require(try AnnounceCtl.parseAsRoot(moved) as? Say)
        #expect(say.connection.socket == "/x.sock" && say.connection.json && say.amount == "1")
    }

    @Test func anythingElseIsLeftAsWritten() {
        for arguments in [
            ["say", "-s", "/x", "1"], ["-s", "/x"], ["-s"], ["--help"], ["-s", "/x", "--help"], ["--version"],
            ["-w", "say", "1"], [],
        ] {
            #expect(LeadingOptions.moved(arguments) == arguments, "\(arguments)")
        }
    }
}
