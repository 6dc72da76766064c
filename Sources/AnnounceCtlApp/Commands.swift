import AnnounceClient
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

/// Options shared by the commands that create a job.
struct JobOptions: ParsableArguments {
    @Flag(name: [.short, .long], help: "Wait until the announcement has played (or was dropped), and report how.")
    var wait = false

    @Option(
        name: [.customShort("P"), .long],
        help: ArgumentHelp("Priority class: urgent (goes first), payment, status (droppable).", valueName: "class"))
    var priority: String?

    @Option(
        name: [.short, .long], help: ArgumentHelp("Drop it if not started within this many seconds.", valueName: "s"))
    var ttl: Double?

    @Flag(help: "Play through the speaker's mute, if this terminal allows it (audio.allow_enforce).")
    var enforce = false
}

struct Say: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "say",
        abstract: "Announce a payment.",
        discussion: """
            Examples:
              announce-ctl say 100.00               到账一百元
              announce-ctl say -c alipay -w 8.50    支付宝到账八点五元, and wait until heard
              announce-ctl say -o A123 8.50         order A123: announced once only
              announce-ctl say -l en --fen 1234     payment received twelve yuan and …
              announce-ctl say -r -c wechat 25      a WeChat refund
            An order id (-o) is announced once: the same order again within the window answers \
            "duplicate" (exit 3) with the original job.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var job: JobOptions

    @Option(name: [.short, .long], help: ArgumentHelp("Channel: plain, alipay, wechat, unionpay…", valueName: "name"))
    var channel: String = "plain"

    @Option(name: [.short, .long], help: ArgumentHelp("Order id, for de-duplication.", valueName: "id"))
    var order: String?

    @Flag(name: [.short, .long], help: "Announce a refund.")
    var refund = false

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("Language of the voice pack (default: the daemon's).", valueName: "lang"))
    var lang: String?

    @Option(help: ArgumentHelp("Reading style: decimal (十点五元) or units (十元五角).", valueName: "style"))
    var style: String?

    @Flag(help: "Say 两 instead of 二 before 百/千/万/亿.")
    var liang = false

    @Option(help: ArgumentHelp("The amount in fen (integer), instead of AMOUNT.", valueName: "n"))
    var fen: Int64?

    @Argument(help: "The amount in yuan: 100, 100.5, 1,000.00, ¥100.")
    var amount: String?

    func validate() throws {
        if amount == nil && fen == nil { throw ValidationError("give an AMOUNT or --fen") }
        if amount != nil && fen != nil { throw ValidationError("give either an AMOUNT or --fen, not both") }
    }

    /// The request this command sends (``FastSay`` builds the same without ArgumentParser).
    var request: Request {
        Request(
            id: requestID(), op: "say", amount: amount, fen: fen, channel: channel, refund: refund ? true : nil,
            lang: lang, style: style, liang: liang ? true : nil, order: order, priority: job.priority, ttl: job.ttl,
            wait: job.wait ? true : nil, enforce: job.enforce ? true : nil)
    }

    func run() throws {
        try exchange(request, connection, waited: job.wait) { reply in
            reply.job.map(Output.describe(job:)) ?? "ok"
        }
    }
}

struct Prompt: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prompt",
        abstract: "Play a named status prompt from the voice pack.",
        discussion: """
            Status prompts are droppable: a newer one replaces one still waiting, and payments go first. \
            Use -P urgent or -P payment to keep one.
            Example:  announce-ctl prompt network-lost
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var job: JobOptions

    @Option(name: [.short, .long], help: ArgumentHelp("Language of the voice pack.", valueName: "lang"))
    var lang: String?

    @Argument(help: "Prompt name, e.g. network-lost.")
    var name: String

    func run() throws {
        let request = Request(
            id: requestID(), op: "prompt", lang: lang, priority: job.priority, ttl: job.ttl,
            wait: job.wait ? true : nil, prompt: name, enforce: job.enforce ? true : nil)
        try exchange(request, connection, waited: job.wait) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
    }
}

struct Combine: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "combine",
        abstract: "Speak a combination: pushed clips (or the pack's words) by id, amounts and digits, in order.",
        discussion: """
            Each part is a clip id, {$AMOUNT} (read as say reads it) or {#DIGITS} (read one by one), as in \
            Alibaba Cloud IoT's combination lists. Quote the braces in a shell.
            Examples:
              announce-ctl combine -w new_order                       a pushed clip
              announce-ctl combine -o SP-1 alipay_in '{$12.50}'        spoken once only for id SP-1
              announce-ctl combine pickup '{#0423}'                   digits one by one
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var job: JobOptions

    @Option(name: [.short, .long], help: ArgumentHelp("Language of the voice pack.", valueName: "lang"))
    var lang: String?

    @Option(
        name: [.short, .long],
        help: ArgumentHelp("An id under which it is spoken once only (de-duplicated like a payment).", valueName: "id"))
    var order: String?

    @Argument(help: "The parts, in order: clip ids, {$AMOUNT}, {#DIGITS}.")
    var parts: [String]

    func validate() throws {
        if parts.isEmpty { throw ValidationError("give at least one part") }
    }

    func run() throws {
        let request = Request(
            id: requestID(), op: "combine", lang: lang, order: order, priority: job.priority, ttl: job.ttl,
            wait: job.wait ? true : nil, parts: parts.map(Request.Part.init(listItem:)), enforce: job.enforce ? true : nil)
        try exchange(request, connection, waited: job.wait) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
    }
}

struct Repeat: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repeat",
        abstract: "Repeat a notice (a combination) every few seconds until stopped, or stop one.",
        discussion: """
            Each time is a notice: it never plays while a payment waits, and a payment cuts it (it is said again \
            after). It ends after --times times, with --stop, or when the shop presses the replay key.
            Examples:
              announce-ctl repeat -o T-17 --every 30 new-order '{#0423}'   until stopped, at most 10 times
              announce-ctl repeat --stop T-17
              announce-ctl repeat --stop-all
            """
    )

    @OptionGroup var connection: ConnectionOptions

    @Option(name: [.short, .long], help: ArgumentHelp("Language of the voice pack.", valueName: "lang"))
    var lang: String?

    @Option(name: [.short, .long], help: ArgumentHelp("The repeat's id (to stop it; sent again, not started twice).", valueName: "id"))
    var order: String?

    @Option(help: ArgumentHelp("Seconds of silence between two times (1…3600).", valueName: "seconds"))
    var every: Double?

    @Option(help: ArgumentHelp("Most times it is said (default 10).", valueName: "n"))
    var times: Int?

    @Flag(help: "Play through the owner's mute, where the terminal allows it (audio.allow_enforce).")
    var enforce = false

    @Option(help: ArgumentHelp("Stop the repeat of this id.", valueName: "id"))
    var stop: String?

    @Flag(help: "Stop every repeat running.")
    var stopAll = false

    @Argument(help: "The parts, in order: clip ids, {$AMOUNT}, {#DIGITS}.")
    var parts: [String] = []

    func validate() throws {
        if stop != nil || stopAll {
            if stop != nil && stopAll { throw ValidationError("give --stop ID or --stop-all, not both") }
            if !parts.isEmpty || order != nil || every != nil || times != nil {
                throw ValidationError("a stop takes no parts, --order, --every or --times")
            }
            return
        }
        if parts.isEmpty { throw ValidationError("give at least one part") }
        if order == nil { throw ValidationError("give the repeat an id: -o ID") }
        if every == nil { throw ValidationError("give --every SECONDS") }
    }

    func run() throws {
        var request = Request(id: requestID(), op: "repeat", lang: lang, order: stop ?? order)
        if stop != nil || stopAll {
            request.stop = true
            request.all = stopAll ? true : nil
        } else {
            request.parts = parts.map(Request.Part.init(listItem:))
            request.every = every
            request.times = times
            request.enforce = enforce ? true : nil
        }
        try exchange(request, connection) { reply in
            if let stopped = reply.repeats {
                return stopped.isEmpty ? "no repeat was running" : stopped.map(Output.describe(repeat:)).joined(separator: "\n")
            }
            return reply.repeat.map(Output.describe(repeat:)) ?? "ok"
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the daemon at a glance: version, uptime, device, volume, queue, last payment; then details.")

    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        try exchange(Request(id: requestID(), op: "status"), connection) { reply in
            guard let status = reply.status else { return "ok" }
            return StatusView.lines(status).joined(separator: "\n")
        }
    }
}

struct QueueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue", abstract: "List the job playing and the jobs waiting, in play order.")

    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        try exchange(Request(id: requestID(), op: "queue"), connection) { reply in
            let jobs = reply.jobs ?? []
            if jobs.isEmpty { return "the queue is empty" }
            return ([Output.header] + jobs.map(Output.row)).joined(separator: "\n")
        }
    }
}

struct Cancel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel waiting or playing jobs.",
        discussion: "Examples:  announce-ctl cancel 12 13   announce-ctl cancel --all")

    @OptionGroup var connection: ConnectionOptions

    @Flag(name: [.short, .long], help: "Cancel every job, waiting or playing.")
    var all = false

    @Argument(help: "Job ids.")
    var ids: [UInt64] = []

    func validate() throws {
        if all == !ids.isEmpty { throw ValidationError("give job ids or --all") }
    }

    func run() throws {
        let requests =
            all
            ? [Request(id: requestID(), op: "cancel", all: true)]
            : ids.map { Request(id: requestID(), op: "cancel", job: $0) }
        var failure: ExitCode?
        for request in requests {
            do {
                try exchange(request, connection) { reply in
                    let jobs = reply.jobs ?? []
                    if jobs.isEmpty { return "nothing to cancel" }
                    return jobs.map(Output.describe(job:)).joined(separator: "\n")
                }
            } catch let code as ExitCode {
                failure = failure ?? code
            }
        }
        if let failure { throw failure }
    }
}

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Say an announcement again: the last payment spoken, or job ID from the history.",
        discussion: "A replay is a new job (urgent unless -P says otherwise) and is never a duplicate.")

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var job: JobOptions

    @Argument(help: "Job id (default: the last payment spoken).")
    var id: UInt64?

    @Flag(help: "The last combination broadcast spoken instead of the last payment.")
    var combination = false

    func validate() throws {
        if combination && id != nil { throw ValidationError("give a job ID or --combination, not both") }
    }

    func run() throws {
        let request = Request(
            id: requestID(), op: "replay", priority: job.priority, ttl: job.ttl, wait: job.wait ? true : nil, job: id,
            kind: combination ? ReplayKind.combination.rawValue : nil)
        try exchange(request, connection, waited: job.wait) { reply in reply.job.map(Output.describe(job:)) ?? "ok" }
    }
}

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "List recent announcements, newest accepted first (kept across restarts).")

    @OptionGroup var connection: ConnectionOptions

    @Option(name: [.customShort("n"), .long], help: ArgumentHelp("How many (1…1000).", valueName: "n"))
    var limit: Int = 10

    func run() throws {
        try exchange(Request(id: requestID(), op: "history", limit: limit), connection) { reply in
            let jobs = reply.jobs ?? []
            if jobs.isEmpty { return "no announcements yet" }
            return ([Output.header] + jobs.map(Output.row)).joined(separator: "\n")
        }
    }
}

struct Volume: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "volume",
        abstract: "Show or set the speaker's everyday level and the alert threshold (percent).",
        discussion: """
            The everyday level is what the speaker plays at — what the volume keys change. The threshold is the \
            least an announcement needs: the level is raised to it for an announcement if it is lower, and put \
            back afterwards. Both are on alsamixer's percent scale.
            Examples:  announce-ctl volume                   show both
                       announce-ctl volume --level 60        set the everyday level
                       announce-ctl volume --threshold 70    set the threshold (also: announce-ctl volume 70)
                       announce-ctl volume --reset           the configured audio.volume_threshold again
            A threshold set here is kept across restarts, and so is the level (in the daemon's journal).
            """)

    @OptionGroup var connection: ConnectionOptions

    @Option(help: ArgumentHelp("New everyday level, 0…100.", valueName: "percent"))
    var level: Int?

    @Option(help: ArgumentHelp("New alert threshold, 0…100.", valueName: "percent"))
    var threshold: Int?

    @Flag(help: "Forget the threshold set here; use the configured one.")
    var reset = false

    @Argument(help: "New threshold, 0…100 (the same as --threshold).")
    var percent: Int?

    func validate() throws {
        if percent != nil && threshold != nil {
            throw ValidationError("give the threshold once: PERCENT or --threshold")
        }
        if reset && (percent ?? threshold) != nil { throw ValidationError("give a threshold or --reset, not both") }
    }

    func run() throws {
        for value in [percent, threshold, level].compactMap({ $0 }) where !(0...100).contains(value) {
            throw InvalidValue("a percentage is 0…100, not \(value)")
        }
        let request = Request(
            id: requestID(), op: "volume", threshold: percent ?? threshold, reset: reset ? true : nil, level: level)
        try exchange(request, connection) { reply in
            guard let audio = reply.volume else { return "ok" }
            var parts = ["device \(audio.device)"]
            if let mixer = audio.mixer { parts.append("mixer \(mixer)") }
            if let level = audio.level { parts.append("level \(level)%\(audio.muted == true ? " [muted]" : "")") }
            // Above the level: an alert holds it raised (a muted speaker without a switch sits at its minimum).
            if let volume = audio.volume, let level = audio.level, volume > level {
                parts.append("now \(volume)% (raised for an alert)")
            }
            parts.append(
                "threshold " + (audio.threshold.map { "\($0)%" } ?? "none")
                    + (audio.thresholdSource.map { " (\($0))" } ?? ""))
            return parts.joined(separator: ", ")
        }
    }
}

struct Today: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "today",
        abstract: "The day's payments and refunds heard (from the journal); --say speaks them.",
        discussion: """
            Counts the payments announced today (a replay is not a payment), sums them and the refunds apart, \
            and says how many payments were not heard (muted, device gone, cancelled, expired, or still waiting). \
            The day runs from midnight to midnight on the terminal's clock, in its time zone.
            Examples:  announce-ctl today                 2026-11-23 (CST, UTC+08:00): 3 payments, 1,234.50 yuan
                       announce-ctl today --say -w        …and speak it: 今日收款三笔，共一千二百三十四点五元
                       announce-ctl today --date 2026-11-22
            """)

    @OptionGroup var connection: ConnectionOptions

    @Option(help: ArgumentHelp("Another day, YYYY-MM-DD (local).", valueName: "date"))
    var date: String?

    @Flag(help: "Also speak it (after the payments waiting).")
    var say = false

    @Flag(name: [.short, .long], help: "With --say: wait until it has been heard.")
    var wait = false

    @Option(name: [.short, .long], help: ArgumentHelp("With --say: the voice pack's language.", valueName: "lang"))
    var lang: String?

    func validate() throws {
        if (wait || lang != nil) && !say { throw ValidationError("--wait and --lang go with --say") }
    }

    func run() throws {
        let request = Request(
            id: requestID(), op: "today", lang: lang, wait: wait ? true : nil, date: date, say: say ? true : nil)
        var printed = false
        try exchange(request, connection, waited: wait) { reply in
            var lines: [String] = []
            if let summary = reply.summary, !printed {
                printed = true
                lines.append(Output.describe(summary: summary))
            }
            if let job = reply.job { lines.append(Output.describe(job: job)) }
            return lines.joined(separator: "\n")
        }
    }
}

struct Ping: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ping", abstract: "Check that the daemon answers.")

    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        try exchange(Request(id: requestID(), op: "ping"), connection) { reply in "ok (protocol \(reply.v ?? 0))" }
    }
}

struct MetricsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics", abstract: "Print the daemon's metrics in the Prometheus text format.")

    @OptionGroup var connection: ConnectionOptions

    func run() throws {
        try exchange(Request(id: requestID(), op: "metrics"), connection) { reply in
            (reply.metrics ?? "").trimmingNewlines()
        }
    }
}
