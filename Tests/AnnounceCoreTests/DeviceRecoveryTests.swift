import Foundation
import Testing

@testable import AnnounceCore

/// The device failure state machine, with time passed in.
struct DeviceRecoveryTests {
    let ms: UInt64 = 1_000_000

    /// `failed(at:)` is mutating, which `#expect` cannot take inline.
    func fail(_ recovery: inout DeviceRecovery, at now: UInt64) -> DeviceRecovery.Decision {
        recovery.failed(at: now)
    }

    @Test func backoffDoublesUpToTheMaximum() {
        let recovery = DeviceRecovery(
            settings: RecoverySettings(initialBackoffMs: 100, maximumBackoffMs: 1_000, giveUpAfterMs: 60_000))
        #expect((1...7).map(recovery.backoff) == [100, 200, 400, 800, 1_000, 1_000, 1_000])
        #expect(recovery.backoff(200) == 1_000, "no overflow for long outages")
    }

    @Test func failuresAskForRetriesUntilTheJobHasFailedForTheGiveUpTime() {
        var recovery = DeviceRecovery(
            settings: RecoverySettings(initialBackoffMs: 100, maximumBackoffMs: 400, giveUpAfterMs: 1_000))
        recovery.jobStarted()
        #expect(fail(&recovery, at: 10_000 * ms) == .retry(afterMs: 100))
        #expect(fail(&recovery, at: 10_100 * ms) == .retry(afterMs: 200))
        #expect(fail(&recovery, at: 10_300 * ms) == .retry(afterMs: 400))
        #expect(fail(&recovery, at: 10_700 * ms) == .retry(afterMs: 400))
        #expect(recovery.isRecovering)
        #expect(fail(&recovery, at: 11_000 * ms) == .giveUp)
        #expect(recovery.jobsGivenUp == 1)
        #expect(recovery.failures == 5)
    }

    /// Issue 27, finding 6: once given up on, the device is missing: the next job's first failure gives up at once
    /// (no second wait of `giveUpAfterMs`), until the device works again.
    @Test func afterAGiveUpTheDeviceIsMissingUntilItWorks() {
        var recovery = DeviceRecovery(
            settings: RecoverySettings(initialBackoffMs: 100, maximumBackoffMs: 400, giveUpAfterMs: 500))
        recovery.jobStarted()
        _ = recovery.failed(at: 0)
        #expect(!recovery.isMissing)
        #expect(fail(&recovery, at: 600 * ms) == .giveUp)
        #expect(recovery.isMissing)
        recovery.gaveUp(more: 2)
        #expect(recovery.jobsGivenUp == 3, "the jobs waiting failed with it")
        recovery.jobStarted()
        #expect(fail(&recovery, at: 700 * ms) == .giveUp, "missing: the next job fails at once")
        recovery.succeeded()
        #expect(!recovery.isMissing)
        recovery.jobStarted()
        #expect(fail(&recovery, at: 800 * ms) == .retry(afterMs: 100), "it worked: a new failure is retried again")
    }

    @Test func aSuccessAfterFailuresIsOneRecoveryAndResetsTheBackoff() {
        var recovery = DeviceRecovery(settings: RecoverySettings())
        recovery.jobStarted()
        _ = recovery.failed(at: 0)
        _ = recovery.failed(at: 100 * ms)
        let recovered = recovery.succeeded()
        #expect(recovered)
        #expect(recovery.recoveries == 1)
        #expect(!recovery.isRecovering)
        let again = recovery.succeeded()
        #expect(!again, "a success without failures is not a recovery")
        #expect(fail(&recovery, at: 10_000 * ms) == .retry(afterMs: 100))
    }

    @Test func aZeroGiveUpTimeFailsAtTheFirstFailure() {
        var recovery = DeviceRecovery(
            settings: RecoverySettings(initialBackoffMs: 100, maximumBackoffMs: 100, giveUpAfterMs: 0))
        recovery.jobStarted()
        #expect(fail(&recovery, at: 5 * ms) == .giveUp)
    }

    @Test func pcmErrorCodesAreClassifiedLikeAplayDoes() {
        #expect(PCMErrorKind(code: -EPIPE) == .underrun)
        #expect(PCMErrorKind(code: -ESTRPIPE) == .suspended)
        #expect(PCMErrorKind(code: -EAGAIN) == .tryAgain)
        #expect(PCMErrorKind(code: -EINTR) == .interrupted)
        for gone in [ENODEV, EIO, EBADFD, ENOTCONN, ECONNREFUSED, ENOENT] {
            #expect(PCMErrorKind(code: -gone) == .deviceLost, "errno \(gone)")
        }
    }
}
