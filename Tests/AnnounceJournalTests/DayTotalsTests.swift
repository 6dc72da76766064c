import AnnounceCore
import Foundation
import Testing

@testable import AnnounceJournal

/// `Journal.dayTotals`: what counts as a payment heard on a day, summed in integer fen.
struct DayTotalsTests {
    @Test func countsPaymentsHeardInTheWindowAndKeepsRefundsApart() throws {
        let directory = "/tmp/ann-daytotals-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = try Journal(path: "\(directory)/journal.sqlite")
        func insert(
            _ amount: String, refund: Bool = false, at: Int64, replayOf: UInt64? = nil, utterance: Utterance? = nil
        ) throws -> UInt64 {
            let parsed = try Amount(parsing: amount)
            let record = JobRecord(
                priority: .payment,
                utterance: utterance ?? .payment(amount: parsed, channel: "alipay", refund: refund), lang: "zh",
                style: nil, liang: nil, order: nil, announcement: Announcement(tokens: [], text: amount, files: []),
                replayOf: replayOf, accepted: .wall(at), ttlMs: nil)
            return try journal.insert(record).jobID
        }
        func finish(_ id: UInt64, _ state: JobState) throws {
            try journal.finishNow([Journal.Outcome(id: id, state: state, at: .wall(0))])
        }
        // Inside [1000, 2000): three heard (0.10 + 0.20 + 1,234.50), a refund heard, one muted, one replay heard,
        // one still waiting; a prompt and a day's total (no amount); outside: one before, one at the end.
        let heard = [try insert("0.10", at: 1_000), try insert("0.20", at: 1_500), try insert("1,234.50", at: 1_999)]
        let refund = try insert("50", refund: true, at: 1_200)
        let muted = try insert("8.88", at: 1_300)
        let replay = try insert("0.10", at: 1_600, replayOf: heard[0])
        _ = try insert("3.00", at: 1_700)  // waiting
        let prompt = try insert("1", at: 1_400, utterance: .prompt(name: "network-lost"))
        let summary = try insert("1", at: 1_401, utterance: .summary(DayTotals()))
        let before = try insert("7.00", at: 999)
        let after = try insert("7.00", at: 2_000)
        for id in heard + [refund, replay, prompt, summary, before, after] { try finish(id, .spoken) }
        try finish(muted, .failed)  // as the daemon records a job not played because the speaker was muted

        let totals = try journal.dayTotals(fromMs: 1_000, toMs: 2_000)
        #expect(totals.payments == DayTotals.Tally(count: 3, fen: 123_480), "0.10 + 0.20 + 1234.50 = 1234.80, exactly")
        #expect(totals.refunds == DayTotals.Tally(count: 1, fen: 5_000))
        #expect(totals.unheard == 2, "the muted one and the one still waiting")
        #expect(try journal.dayTotals(fromMs: 3_000, toMs: 4_000) == DayTotals())
    }
}
