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

    /// The push listener judges a payment's age only by a clock it can trust (docs/push.md, "The clock"): its unit
    /// starts after time synchronisation has begun (time-sync.target), and never waits for a server to answer
    /// (systemd-time-wait-sync), which a terminal without network time would wait for forever.
    @Test func thePushListenerStartsAfterTimeSynchronisationWithoutWaitingForIt() throws {
        let unit = try String(contentsOfFile: "\(Paths.root)/systemd/announce-push.service", encoding: .utf8)
        func values(_ key: String) -> [String] {
            unit.split(separator: "\n").filter { $0.hasPrefix("\(key)=") }
                .flatMap { $0.dropFirst(key.count + 1).split(separator: " ").map(String.init) }
        }
        #expect(values("After").contains("time-sync.target"), "After=\(values("After"))")
        #expect(values("Wants").contains("time-sync.target"), "Wants=\(values("Wants"))")
        let dependencies = ["Wants", "Requires", "Requisite", "BindsTo", "After"].flatMap(values)
        #expect(!dependencies.contains { $0.contains("time-wait-sync") }, "\(dependencies)")
    }
}
