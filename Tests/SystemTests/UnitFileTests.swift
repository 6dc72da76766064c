import AnnounceTestSupport
import Foundation
import Testing

/// The unit files as installed by `make install`, checked by the real systemd-analyze on the host.
struct UnitFileTests {
    @Test func unitsVerifyAndBothServicesExposuresAreAtMost2() async throws {
        // make check-units: systemd-analyze verify of every unit and systemd-analyze security --threshold=20 of
        // announced.service and announce-push.service.
        let result = try await run("/usr/bin/make", ["-C", Paths.root, "--no-print-directory", "check-units",
                                                     "CHECK_ROOT=/tmp/ann-units-\(getpid())", "BUILD_DIR=\(Paths.bin)"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("Overall exposure level for announced.service"), "\(result.stdout)")
        #expect(result.stdout.contains("Overall exposure level for announce-push.service"), "\(result.stdout)")
    }
}
