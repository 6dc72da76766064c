import AnnounceCommandLine
import AnnounceCore
import ArgumentParser
import Testing

@testable import AnnounceCtlApp

/// One rule for announce-ctl's exit status: it says what is wrong, not who noticed. A value that cannot be used is
/// invalid input (2) whether announce-ctl finds it or the daemon answers `bad_request`; a usage error (64) is a
/// command line of the wrong shape. (The daemon's side, and the lines as printed: CommandLineTests.)
@Suite struct ExitStatusTests {
    func parseError(_ arguments: [String]) -> (any Error)? {
        do {
            _ = try AnnounceCtl.parseAsRoot(arguments)
            return nil
        } catch {
            return error
        }
    }

    @Test func aValueThatCannotBeReadIsInvalidInputNotUsage() throws {
        for arguments in [
            ["cancel", "abc"], ["say", "--fen", "12.5"], ["history", "-n", "many"], ["say", "--ttl", "x", "1"],
        ] {
            let error = try #require(parseError(arguments), "\(arguments)")
            #expect(CommandLineErrors.isUnreadableValue(AnnounceCtl.self, error: error), "\(arguments)")
        }
    }

    @Test func aCommandLineOfTheWrongShapeIsUsage() throws {
        for arguments in [
            ["say", "--bogus", "1"], ["say"], ["frobnicate"], ["cancel"], ["cancel", "--all", "3"], ["say", "1", "2"],
            ["volume", "50", "--threshold", "60"], ["today", "--wait"], ["say", "--fen"],
        ] {
            let error = try #require(parseError(arguments), "\(arguments)")
            #expect(AnnounceCtl.exitCode(for: error) == .validationFailure, "\(arguments)")
            #expect(!CommandLineErrors.isUnreadableValue(AnnounceCtl.self, error: error), "\(arguments)")
        }
    }

    /// Values checked here before anything is sent are refused in `run()`, as InvalidValue (exit 2), never in
    /// `validate()`, which ArgumentParser would report as usage.
    @Test func aValueOutOfRangeIsRefusedAsInvalidValue() throws {
        for arguments in [["volume", "150"], ["volume", "--level", "101"], ["volume", "--threshold=-1"]] {
            var command = try AnnounceCtl.parseAsRoot(arguments)
            #expect(throws: InvalidValue.self, "\(arguments)") { try command.run() }
        }
        var render = try AnnounceCtl.parseAsRoot(["render", "--output", "/dev/null", "--summary", "x"])
        #expect(throws: InvalidValue.self) { try render.run() }
        render = try AnnounceCtl.parseAsRoot(["render", "--output", "/dev/null", "--lead-in-ms=-5", "1"])
        #expect(throws: InvalidValue.self) { try render.run() }
    }

    @Test func theStatusOfEachDaemonErrorCode() {
        #expect(Exit.forError(code: "bad_request") == Exit.invalidInput)
        #expect(Exit.forError(code: "invalid_amount") == Exit.invalidInput)
        #expect(Exit.forError(code: "shutting_down") == Exit.refused)
        #expect(Exit.forError(code: "internal") == Exit.failure)
    }
}

/// Every reply that is not `ok` prints the daemon's error line; one that carries a job says where the job is first
/// (a `say -w` whose daemon stops: the job still queued, then why no final state came).
@Suite struct FailedReplyTests {
    let job = JobInfo(id: 7, state: .queued, text: "到账一百元", position: 1)

    /// What announce-ctl prints for a failed reply with this error (and job).
    func printed(_ code: String, _ message: String, job: JobInfo? = nil) -> String {
        Output.failure(Response(id: "ctl-1", ok: false, job: job, error: ErrorInfo(code: code, message: message)))
    }

    @Test func shuttingDownUnderAWaitSaysTheJobAndTheError() {
        #expect(
            printed("shutting_down", "the daemon is stopping; job 7 stays queued", job: job)
                == "job 7 queued: 到账一百元 (position 1)\n"
                + "error: shutting_down: the daemon is stopping; job 7 stays queued; try again once the daemon has "
                + "restarted")
    }

    @Test func aJobThatEndedUnheardHasItsErrorSaidOnce() {
        var expired = JobInfo(id: 3, state: .expired, text: "到账一百元")
        expired.error = ErrorInfo(code: "expired", message: "not started within its ttl")
        #expect(
            printed("expired", "not started within its ttl", job: expired)
                == "job 3 expired: 到账一百元\nerror: expired: not started within its ttl")
    }

    @Test func aDuplicateIsTheErrorLineAlone() {
        #expect(
            printed("duplicate", "order A1 already accepted as job 7 (queued)", job: job)
                == "error: duplicate: order A1 already accepted as job 7 (queued); an order is announced once; "
                + "announce-ctl replay repeats it")
    }

    @Test func aFailureWithoutAJobIsTheErrorLine() {
        #expect(printed("queue_full", "64 jobs wait") == "error: queue_full: 64 jobs wait; try again in a moment")
    }
}

/// `history` and `queue` list jobs in acceptance order, and the time column is the time of acceptance.
@Suite struct HistoryRowTests {
    @Test func theTimeColumnIsWhenTheJobWasAccepted() {
        let job = JobInfo(
            id: 2, state: .spoken, text: "到账一元", acceptedAt: "2026-11-23T08:00:00.000Z",
            startedAt: "2026-11-23T08:00:01.000Z", finishedAt: "2026-11-23T08:00:03.500Z")
        #expect(Output.header.contains("ACCEPTED (UTC)"))
        #expect(Output.row(job).contains("2026-11-23T08:00:00.000"))
        #expect(!Output.row(job).contains("08:00:03"))
    }
}
