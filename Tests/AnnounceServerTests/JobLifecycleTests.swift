import AnnounceCore
import AnnounceJournal
import Foundation
import Logging
import Synchronization
import Testing

@testable import AnnounceServer

/// The job lifecycle against a real journal (SQLite in a temporary folder).
struct JobLifecycleTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lifecycle-\(UUID().uuidString)").path

    func lifecycle(capacity: Int) throws -> (JobLifecycle, Journal) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let journal = try Journal(path: directory + "/journal.sqlite")
        let lifecycle = try JobLifecycle(
            journal: journal, capacity: capacity, dedupWindowMs: 60_000, now: .wall(1_000),
            logger: Logger(label: "test"), wakePlayer: {}, onFinal: { _, _ in })
        return (lifecycle, journal)
    }

    func payment(_ index: Int) throws -> (Job, JobRecord) {
        let amount = try Amount(parsing: "\(index + 1).00")
        let utterance = Utterance.payment(amount: amount, channel: "plain", refund: false)
        let announcement = Announcement(tokens: ["到账", amount.description], text: "到账\(amount)", files: [])
        let job = Job(id: 0, utterance: utterance, announcement: announcement, acceptedAt: Monotonic.nanos)
        let record = JobRecord(
            priority: .payment, utterance: utterance, lang: "zh", style: nil, liang: nil, order: nil,
            announcement: announcement, accepted: .wall(1_000 + Int64(index)), ttlMs: nil)
        return (job, record)
    }

    /// Issue 16, item 5: a reload that lowers the queue bound between a job's journal commit and its enqueue must
    /// not leave a committed job out of the queue (accepted on disk, never played until a restart). Reloads and
    /// acceptances race here for real, from many tasks at once; afterwards the journal, the queue and the replies
    /// must tell the same story: every job told "accepted" is queued and journaled `queued`, every job refused
    /// was refused with `queue_full` and never reached the journal.
    @Test func aReloadThatLowersTheBoundNeverLeavesACommittedJobUnqueued() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (lifecycle, journal) = try lifecycle(capacity: 1)
        let submissions = 1_000
        let payments = try (0..<submissions).map(payment)

        let done = Atomic(false)
        let reloads = Task {
            var round = 0
            while !done.load(ordering: .acquiring) {
                await lifecycle.setCapacity(round % 2 == 0 ? 1 : 10_000)
                round += 1
                await Task.yield()
            }
        }
        let outcomes = await withTaskGroup(of: Result<UInt64, AnnounceError>.self) { group in
            for (job, record) in payments {
                group.addTask {
                    do throws(AnnounceError) {
                        switch try await lifecycle.accept(job, record: record, dedupKey: nil) {
                        case let .accepted(info): return .success(info.id)
                        case let .duplicate(info): return .failure(AnnounceError(.duplicate, "duplicate \(info.id)"))
                        }
                    } catch {
                        return .failure(error)
                    }
                }
            }
            var outcomes: [Result<UInt64, AnnounceError>] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        done.store(true, ordering: .releasing)
        await reloads.value

        let accepted = Set(outcomes.compactMap { try? $0.get() })
        let refusals = outcomes.compactMap { outcome -> AnnounceError? in
            if case let .failure(error) = outcome { return error }
            return nil
        }
        #expect(accepted.count + refusals.count == submissions)
        #expect(refusals.allSatisfy { $0.code == .queueFull }, "\(refusals.filter { $0.code != .queueFull })")
        #expect(!accepted.isEmpty, "the bound never let a job in: the race was not exercised")
        #expect(!refusals.isEmpty, "the bound never refused a job: the race was not exercised")
        let queued = Set(lifecycle.queue.snapshot.map(\.id))
        #expect(queued == accepted, "accepted but not queued: \(accepted.subtracting(queued).sorted())")
        let onDisk = try journal.countByState()
        #expect(onDisk == ["queued": accepted.count], "the journal holds \(onDisk) for \(accepted.count) accepted")
    }

    /// Repeats' bookkeeping against the real journal: a time counted once (a time found again after a restart is not
    /// counted twice), the last time ends it `done`, the shop's key ends every one running `acknowledged` — told to
    /// the subscribers and journaled, so a new run of the daemon has none running — and a running one is carried over.
    @Test func repeatsAreCountedOnceEndedOnDiskAndCarriedOverARestart() async throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (lifecycle, journal) = try lifecycle(capacity: 8)
        let (_, subscription) = lifecycle.events.subscribe()
        func plan(_ order: String, times: Int) -> RepeatPlan {
            RepeatPlan(order: order, parts: [.clip("new-order")], everyMs: 1_000, times: times)
        }
        let spoken = JobInfo(id: 1, state: .spoken)
        #expect(try await lifecycle.beginRepeat(plan("R-1", times: 2), text: "n").started)
        #expect(try await lifecycle.beginRepeat(plan("R-1", times: 2), text: "n").started == false, "never twice")
        #expect(await lifecycle.nextTime(of: "R-1")?.time == 1)
        #expect(await lifecycle.timeEnded(of: "R-1", time: 1, info: spoken) == .again(afterMs: 1_000))
        #expect(await lifecycle.timeEnded(of: "R-1", time: 1, info: spoken) == .again(afterMs: 1_000), "counted once")
        #expect(await lifecycle.nextTime(of: "R-1")?.time == 2)
        #expect(await lifecycle.timeEnded(of: "R-1", time: 2, info: JobInfo(id: 2, state: .failed)) == .ended)
        #expect(await subscription.next() == .repeatEnded(try #require(try journal.repeatRecord("R-1")?.info)))
        let done = try #require(try journal.repeatRecord("R-1"))
        #expect(done.state == .done && done.played == 2 && done.heard == 1, "\(done)")

        #expect(try await lifecycle.beginRepeat(plan("R-2", times: 5), text: "n").started)
        #expect(try await lifecycle.beginRepeat(plan("R-3", times: 5), text: "n").started)
        let acknowledged = try await lifecycle.stopRepeats(nil, state: .acknowledged)
        #expect(acknowledged.map(\.order) == ["R-2", "R-3"] && acknowledged.allSatisfy { $0.state == .acknowledged })
        let stillRepeating = await lifecycle.isRepeating
        #expect(await lifecycle.runningRepeats.isEmpty && !stillRepeating)
        #expect(try journal.repeatRecord("R-3")?.state == .acknowledged)
        #expect(await lifecycle.nextTime(of: "R-2") == nil, "its driver stops")

        #expect(try await lifecycle.beginRepeat(plan("R-4", times: 5), text: "n").started)
        #expect(await lifecycle.timeEnded(of: "R-4", time: 1, info: spoken) == .again(afterMs: 1_000))
        let next = try JobLifecycle(
            journal: journal, capacity: 8, dedupWindowMs: 60_000, now: .wall(2_000), logger: Logger(label: "test"),
            wakePlayer: {}, onFinal: { _, _ in })
        let carried = await next.runningRepeats
        #expect(carried.map(\.order) == ["R-4"] && carried.first?.played == 1, "\(carried)")
        #expect(await next.nextTime(of: "R-4")?.time == 2)
    }
}
