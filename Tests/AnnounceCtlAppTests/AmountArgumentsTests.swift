import ArgumentParser
import Testing

@testable import AnnounceCtlApp

/// `words -l en -1 2`: a negative amount is an amount (refused as one later), never a cluster of short options, and
/// an option's value stays with its option — and a command line without a negative number is left as it is.
@Suite struct AmountArgumentsTests {
    @Test func aNegativeAmountIsPutAfterTheOptions() {
        #expect(
            AmountArguments.normalized(["words", "-l", "en", "-1", "2"]) == ["words", "-l", "en", "--", "-1", "2"])
        #expect(
            AmountArguments.normalized(["say", "-1", "--order", "-5", "-w"])
                == ["say", "--order=-5", "-w", "--", "-1"])
        #expect(
            AmountArguments.normalized(["render", "-0.50", "--output", "a.wav", "-c", "alipay"])
                == ["render", "--output=a.wav", "-c", "alipay", "--", "-0.50"])
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
