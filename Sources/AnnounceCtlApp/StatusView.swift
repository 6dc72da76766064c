import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// `announce-ctl status` as a person reads it: first what an installer or a support call needs at a glance —
/// which daemon (version, build, uptime), the device and its state, the volume, the queue, the last payment heard
/// and when, xruns since start — then the details (voices, journal, metrics, the audio engine, who you are).
/// Each line is its own statement: one long array literal took Debian's Swift 6.2 too long to type-check.
enum StatusView {
    static func lines(_ status: DaemonStatus, now: Date = Date()) -> [String] {
        var lines: [String] = []
        let build = status.version.map { "\($0) (commit \(status.commit ?? "unknown"))" } ?? "(version not reported)"
        lines.append(
            "announced \(build), \(status.state), pid \(status.pid), up \(duration(status.uptimeSeconds)), "
                + "protocol \(status.v)")
        lines.append(deviceLine(status.audio))
        lines.append(volumeLine(status.audio))
        lines.append(queueLine(status.queue))
        for info in status.repeats ?? [] {
            lines.append("repeat:   \(info.order), \(info.played)/\(info.times) said: \(info.text ?? "")")
        }
        lines.append(lastPaymentLine(status.lastPayment, now: now))
        let finished = status.totals.finished.sorted { $0.key < $1.key }.map { ", \($0.value) \($0.key)" }.joined()
        let refused = status.totals.refused.sorted { $0.key < $1.key }.map { ", \($0.value) \($0.key)" }.joined()
        lines.append("jobs:     since start \(status.totals.accepted) accepted" + finished + refused)
        let voices = status.voices.map { "\($0.lang)\($0.isDefault ? "*" : "") (\($0.name))" }
        lines.append("voices:   " + voices.joined(separator: ", "))
        if let corpus = status.corpus {
            let ids = corpus.clips.prefix(8).map(\.id).joined(separator: " ")
            let more = corpus.clips.count > 8 ? " …" : ""
            lines.append(
                "pushed:   \(corpus.clips.count) clips (version \(corpus.version)) in \(corpus.directory)"
                    + (corpus.clips.isEmpty ? "" : ": \(ids)\(more)"))
            if let error = corpus.error { lines.append("pushed:   NOT LOADED: \(error.message)") }
        }
        let journal = status.journal
        lines.append(
            "journal:  \(journal.path); \(journal.dedupOrders) order ids in a \(Int(journal.dedupWindowSeconds)) s "
                + "window; at start \(journal.recoveredAtStart) recovered, \(journal.interruptedAtStart) interrupted")
        if journal.durable == false {
            let reason = journal.problem.map { ": \($0.message)" } ?? ""
            lines.append("journal:  IN MEMORY, not on disk\(reason); what is accepted now is lost if the daemon stops")
        }
        if let moved = journal.recoveredFromCorruption {
            lines.append("journal:  DAMAGED at start: moved to \(moved); this run began with an empty journal")
        }
        if let unrecorded = journal.unrecorded, unrecorded > 0 {
            let reason = journal.lastError.map { ": \($0.message)" } ?? ""
            lines.append("journal:  \(unrecorded) job starts/ends NOT RECORDED yet\(reason)")
        }
        lines.append("socket:   \(status.socket) (\(status.clients) client\(status.clients == 1 ? "" : "s"))")
        if let metrics = status.metrics {
            if let serving = metrics.serving {
                lines.append("metrics:  http://\(serving)/metrics")
            } else {
                lines.append("metrics:  NOT SERVING on \(metrics.listen): \(metrics.error ?? "starting")")
            }
        }
        lines.append(audioLine(status.audio))
        lines += status.audio.engine.map(Output.engineLines) ?? []
        if let peer = status.peer {
            lines.append("you:      uid \(peer.uid), gid \(peer.gid): \(peer.access.rawValue)")
        }
        return lines
    }

    /// `device:   default — playing, 0 xruns since start`
    static func deviceLine(_ audio: AudioStatus) -> String {
        var line = "device:   \(audio.device)"
        if let engine = audio.engine {
            line += " — \(engine.state.rawValue)"
            if engine.state == .recovering, let retry = engine.retryInMs { line += " (retrying in \(retry) ms)" }
            if engine.state == .missing { line += " (CANNOT BE OPENED: payments fail until it is back)" }
        }
        line += ", \(audio.xruns ?? audio.engine?.sink.xruns ?? 0) xruns since start"
        if let error = audio.lastError { line += "; last error \(error.code): \(error.message)" }
        return line
    }

    /// The volume: the element now and whose setting that is, the alert threshold, and the owner's everyday
    /// level (reported by daemons that keep one; the slot is shown empty until then).
    static func volumeLine(_ audio: AudioStatus) -> String {
        guard let mixer = audio.mixer else { return "volume:   not managed (mixer none)" }
        var line = "volume:   \(mixer)"
        if let volume = audio.volume {
            line += " \(volume)%"
            if audio.engine?.volume?.raised == true {
                line += " (raised for an alert; the owner's level comes back after)"
            } else {
                line += " (the owner's)"
            }
        } else {
            line += " (cannot be read now)"
        }
        if audio.muted == true { line += " [muted]" }
        let threshold = audio.threshold.map { "\($0)%" } ?? audio.engine?.volume?.threshold ?? "none"
        line += ", alert threshold \(threshold)" + (audio.thresholdSource.map { " (\($0))" } ?? "")
        // The owner's everyday level (the shop's volume keys and `volume --level` set it); "—" from a daemon that
        // reports none.
        line += ", everyday level \(audio.level.map { "\($0)%" } ?? "—")"
        return line
    }

    static func queueLine(_ queue: DaemonStatus.Queue) -> String {
        let classes = ["urgent", "payment", "status"].compactMap { name -> String? in
            guard let count = queue.byPriority[name], count > 0 else { return nil }
            return "\(count) \(name)"
        }
        var line = "queue:    \(queue.waiting) waiting"
        if !classes.isEmpty { line += " (\(classes.joined(separator: ", ")))" }
        line += ", capacity \(queue.capacity), playing \(queue.playing.map { "job \($0)" } ?? "nothing")"
        return line
    }

    /// `last paid: 到账一百元 (job 12, 100.00, alipay, order A1), heard 2026-11-25 06:03:44 UTC, 3 min ago`
    static func lastPaymentLine(_ job: JobInfo?, now: Date) -> String {
        guard let job else { return "last paid: none heard yet" }
        var details = ["job \(job.id)"]
        if let amount = job.amount { details.append(amount) }
        if let channel = job.channel { details.append(channel) }
        if job.refund == true { details.append("refund") }
        if let order = job.order { details.append("order \(order)") }
        var line = "last paid: \(job.text ?? "?") (\(details.joined(separator: ", ")))"
        if let finished = job.finishedAt {
            line += ", heard " + String(finished.prefix(19).map { $0 == "T" ? " " : $0 }) + " UTC"
            if let date = try? Date(finished, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) {
                line += ", \(duration(max(0, now.timeIntervalSince(date)))) ago"
            }
        }
        return line
    }

    /// The daemon's own summary of the audio side.
    static func audioLine(_ audio: AudioStatus) -> String {
        var line = "audio:    device \(audio.device)"
        if let volume = audio.volume { line += ", volume \(volume)%" }
        if let threshold = audio.threshold { line += ", threshold \(threshold)%" }
        if let ducked = audio.ducked, !ducked.isEmpty { line += ", ducking \(ducked.joined(separator: " "))" }
        if let xruns = audio.xruns { line += ", \(xruns) xruns" }
        if let recoveries = audio.recoveries { line += ", \(recoveries) recoveries" }
        return line
    }

    /// `42 s`, `3 min`, `2 h 13 min`, `4 d 2 h`.
    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds)
        if total < 60 { return "\(total) s" }
        if total < 3600 { return "\(total / 60) min" }
        if total < 86_400 { return "\(total / 3600) h \(total % 3600 / 60) min" }
        return "\(total / 86_400) d \(total % 86_400 / 3600) h"
    }
}
