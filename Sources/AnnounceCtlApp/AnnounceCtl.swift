import AnnounceClient
import AnnounceCore
import AnnounceSound
import AnnounceVersion
import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

struct AnnounceCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "announce-ctl",
        abstract: "Control the payment announcer daemon (announced), or compose announcements offline.",
        discussion: """
            Commands talking to the daemon:
              say [options] AMOUNT      announce a payment: say -w 100.00
              prompt [options] NAME     play a status prompt: prompt network-lost
              text [options] TEXT       speak free text: text "请稍候"
              combine [options] PART... clips by id, {$AMOUNT}, {#DIGITS}: combine new_order
              repeat -o ID --every S PART... | --stop ID  a notice said again and again until stopped
              status                    daemon, queue, voices, journal, audio
              queue                     the job playing and the jobs waiting
              cancel ID... | --all      stop jobs, waiting or playing
              replay [ID]               say the last payment (or job ID) again
              history [-n N]            recent announcements, newest accepted first
              volume [--level N] [--threshold N|--reset]  show or set the everyday level, the alert threshold
              today [--say] [--date D]  the day's payments and refunds heard; --say speaks them
              ping                      is the daemon there
              metrics                   counters in the Prometheus text format
            Commands without a daemon:
              words AMOUNT...           the sentence for each amount
              render --output FILE AMOUNT  the samples, as a WAV file

            Every daemon command takes -s/--socket PATH and -j/--json (the daemon's replies, one JSON object \
            per line), before or after the command's name. The socket is --socket, else $ANNOUNCE_SOCKET, else \
            /run/announce/announce.sock for root; other users get $XDG_RUNTIME_DIR/announce.sock (/tmp/announce.sock \
            without $XDG_RUNTIME_DIR, as announced's default) if their own daemon runs there, else the system one.

            Every failure is one line on standard error (a daemon's refusal: on standard output, as "error: \
            CODE: what; what to do", after the line of the job it concerns), saying what went wrong and what to \
            do about it.

            Exit status:
              0   success
              1   any other failure (a file not written, the daemon's internal error)
              2   invalid input, found here or by the daemon: a bad amount or number
                  (volume 150, cancel abc); unknown channel, language, prompt, job
              3   refused by the daemon: duplicate, queue_full, unauthorized, busy …
              4   the daemon cannot be reached (not running, wrong socket, no access)
              5   an announcement waited for (-w) did not play (failed, expired …)
              6   no voice pack found (words, render); the message says where
              64  usage error: an unknown option or command, a missing argument or
                  value, options that do not go together
            """,
        version: BuildInfo.line(program: "announce-ctl"),
        subcommands: [
            Say.self, Prompt.self, SayText.self, Combine.self, Repeat.self, Status.self, QueueCommand.self, Cancel.self, Replay.self,
            History.self, Volume.self, Today.self, Ping.self, MetricsCommand.self, Words.self, Render.self,
        ]
    )
}

/// Exit statuses, documented in the command's help and in README.md.
enum Exit {
    static let failure = ExitCode(1)
    static let invalidInput = ExitCode(2)
    static let refused = ExitCode(3)
    static let unreachable = ExitCode(4)
    static let notPlayed = ExitCode(5)

    /// Error codes that mean "what you asked for is wrong"; every other refusal is the daemon saying no.
    static let invalidCodes: Set<AnnounceError.Code> = [
        .invalidAmount, .badRequest, .unknownChannel, .unknownLanguage, .notFound, .missingClip,
    ]

    static let noVoicePack = ExitCode(6)

    /// What to do when the daemon cannot be reached, from why (`connect`'s errno).
    static func unreachableAdvice(_ error: ClientError, path: String) -> String {
        switch error.connectErrno {
        case EACCES, EPERM:
            return "you may not use that socket: ask to be put in its group (ls -l \(path) shows it), or use sudo"
        case ENOENT, ECONNREFUSED:
            return "is announced running? Start it (systemctl start announced.socket), or give its socket with "
                + "--socket or $ANNOUNCE_SOCKET"
        default:
            return "check that announced runs (systemctl status announced) and that --socket names its socket"
        }
    }

    /// What to do about a refusal, by its code; nil when the message says it already.
    static func advice(code: String) -> String? {
        switch AnnounceError.Code(rawValue: code) {
        case .duplicate: "an order is announced once; announce-ctl replay repeats it"
        case .queueFull, .busy: "try again in a moment"
        case .shuttingDown: "try again once the daemon has restarted"
        case .unknownChannel: "announce-ctl words --channel NAME 1 tries one; the voice pack's templates are its channels"
        case .unknownLanguage: "announce-ctl status lists the daemon's voice packs"
        case .invalidAmount: "write yuan as 100, 8.50 or 1,000.00, or give --fen"
        case .journal: "the daemon cannot write its journal (a full disk?): see announce-ctl status and its log"
        case .audioDevice: "the sound device failed: see announce-ctl status and the daemon's log"
        case .muted: "the speaker is muted and the mute policy is respect: unmute it"
        default: nil
        }
    }

    static func forError(code: String) -> ExitCode {
        let code = AnnounceError.Code(rawValue: code)
        if code == .internalError { return failure }
        return invalidCodes.contains(code) ? invalidInput : refused
    }
}

/// A value announce-ctl cannot use, found before anything is sent (`volume 150`, `words --style bogus`): one line,
/// exit status 2, as the daemon's `bad_request` for the same value — the status says what is wrong, not who
/// noticed it (README, "Exit status"). Thrown from `run()`, never from `validate()`, whose errors ArgumentParser
/// turns into usage errors (64): `validate()` checks the command line's shape only.
struct InvalidValue: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

struct ConnectionOptions: ParsableArguments {
    @Option(name: [.short, .long], help: ArgumentHelp("The daemon's socket.", valueName: "path"))
    var socket: String?

    @Flag(name: [.short, .long], help: "Print the daemon's replies as JSON, one object per line.")
    var json = false
}

/// A request id unique enough to match replies in logs.
func requestID() -> String { "ctl-\(getpid())" }

/// Sends one request and prints its replies; maps the outcome to the exit status.
/// `waited`: the request asked to wait for a job, so a final reply whose job did not play exits 5.
func exchange(
    _ request: Request, _ options: ConnectionOptions, waited: Bool = false, describe: (Response) -> String
) throws {
    try exchange(request, socket: options.socket, json: options.json, waited: waited, describe: describe)
}

/// ``exchange(_:_:waited:describe:)`` with the connection options as values (``FastSay`` has no
/// ``ConnectionOptions``: making one costs ArgumentParser's set-up), and `encoded`, the request already encoded
/// (else it is encoded here).
func exchange(
    _ request: Request, socket: String?, json: Bool, encoded: [UInt8]? = nil, waited: Bool = false,
    describe: (Response) -> String
) throws {
    let path = Client.socketPath(explicit: socket)
    let replies: [Response]
    do {
        let client = try Client(path: path)
        // The job as the last reply showed it: a failed reply about the same job in the same state (a `say -w`
        // whose daemon stops: still queued) prints only its error line.
        var shown: (id: UInt64, state: JobState)?
        let show = { (reply: Response) in
            if json {
                print(Output.json(reply))
            } else if reply.ok {
                print(describe(reply))
            } else {
                print(Output.failure(reply, shown: shown))
            }
            if let job = reply.job { shown = (job.id, job.state) }
            fflush(nil)
        }
        if let encoded {
            replies = try client.send(encoded: encoded, onReply: show)
        } else {
            replies = try client.send(request, onReply: show)
        }
    } catch {
        Output.error("\(error.description); \(Exit.unreachableAdvice(error, path: path))")
        throw Exit.unreachable
    }
    guard let last = replies.last else { throw Exit.unreachable }
    guard !last.ok else { return }
    let code = last.error?.code ?? ""
    if waited, replies.count > 1, let job = last.job, job.state.isFinal { throw Exit.notPlayed }
    throw Exit.forError(code: code)
}

enum Output {
    static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func error(_ message: String) {
        StandardError.write("announce-ctl: \(message)\n")
    }

    /// A reply that is not `ok`: always the daemon's error line, `error: CODE: message; what to do`. A reply that
    /// carries a job says first where that job is — how a waited job ended (`job 3 expired: …`), or that it is
    /// still queued when the daemon stops under a waiting `say -w` — except `duplicate`, whose message names the
    /// original job already, or the job as `shown` by the reply before (same id, same state). Without the error line a
    /// `shutting_down` read like a second acceptance.
    static func failure(_ reply: Response, shown: (id: UInt64, state: JobState)? = nil) -> String {
        let code = reply.error?.code ?? "?"
        let line = "error: \(code): \(reply.error?.message ?? "")" + (Exit.advice(code: code).map { "; \($0)" } ?? "")
        guard var job = reply.job, code != AnnounceError.Code.duplicate.rawValue else { return line }
        if let shown, shown.id == job.id, shown.state == job.state { return line }
        // The job's own error is the reply's (expired, cancelled, …): said once, on the error line.
        if job.error?.code == reply.error?.code { job.error = nil }
        return describe(job: job) + "\n" + line
    }

    /// `job 3 spoken: 到账一百元 (first sample 12.3 ms, done 2450.1 ms)`
    static func describe(repeat info: RepeatInfo) -> String {
        var line = "repeat \(info.order) \(info.state.rawValue)"
        if let text = info.text { line += ": \(text)" }
        let every = info.every.rounded() == info.every ? "\(Int(info.every))" : "\(info.every)"
        var details = ["every \(every) s", "\(info.played)/\(info.times) said", "\(info.heard) heard"]
        if let job = info.job { details.append("job \(job)") }
        if let error = info.error { details.append("\(error.code): \(error.message)") }
        return line + " (" + details.joined(separator: ", ") + ")"
    }

    static func describe(job: JobInfo) -> String {
        var line = "job \(job.id) \(job.state.rawValue)"
        if let text = job.text { line += ": \(text)" }
        var details: [String] = []
        if job.state == .queued, let position = job.position { details.append("position \(position)") }
        if let priority = job.priority, priority != .payment { details.append(priority.rawValue) }
        if let order = job.order { details.append("order \(order)") }
        if let replayOf = job.replayOf { details.append("replay of \(replayOf)") }
        if let first = job.firstSampleMs { details.append(cFormat("first sample %.1f ms", first)) }
        if let finished = job.finishedMs { details.append(cFormat("done %.1f ms", finished)) }
        if !details.isEmpty { line += " (\(details.joined(separator: ", ")))" }
        if let error = job.error { line += " — \(error.code): \(error.message)" }
        if job.durable == false { line += " [NOT ON DISK: the daemon's journal is in memory; see announce-ctl status]" }
        return line
    }

    /// `2026-11-23 (CST, UTC+08:00): 3 payments, 1,234.50 yuan; 1 refund, 50.00 yuan; 1 payment not heard`
    static func describe(summary: DaySummary) -> String {
        func tally(_ tally: DayTotals.Tally, _ noun: String) -> String {
            "\(tally.count) \(noun)\(tally.count == 1 ? "" : "s"), \(grouped(tally.amount)) yuan"
        }
        var line = "\(summary.date) (\(summary.zone), UTC\(summary.utcOffset)): " + tally(summary.payments, "payment")
        if summary.refunds.count > 0 { line += "; " + tally(summary.refunds, "refund") }
        if summary.unheard > 0 {
            line += "; \(summary.unheard) payment\(summary.unheard == 1 ? "" : "s") not heard"
        }
        return line
    }

    /// `1234.50` → `1,234.50`.
    static func grouped(_ amount: String) -> String {
        let parts = amount.split(separator: ".", maxSplits: 1)
        let digits = Array(parts.first ?? "")
        var text = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { text.append(",") }
            text.append(digit)
        }
        return parts.count > 1 ? text + "." + parts[1] : text
    }

    /// One row of `queue`/`history`. The time is when the job was accepted, the order both lists follow (history:
    /// newest first by id, which is acceptance order); when it started and finished are in `--json`.
    static func row(_ job: JobInfo) -> String {
        let time = job.acceptedAt ?? ""
        let columns = [
            String(job.id).leftPadded(6), job.state.rawValue.padded(9), (job.priority?.rawValue ?? "").padded(8),
            String(time.prefix(23)).padded(24), job.text ?? "",
        ]
        var line = columns.joined(separator: " ")
        if let order = job.order { line += "  order=\(order)" }
        if let error = job.error { line += "  \(error.code)" }
        return line
    }

    static let header = ["ID".leftPadded(6), "STATE".padded(9), "PRIO".padded(8), "ACCEPTED (UTC)".padded(24), "TEXT"]
        .joined(separator: " ")
}

extension String {
    func padded(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
