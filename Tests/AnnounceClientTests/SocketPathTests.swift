import AnnounceTestSupport
import Foundation
import Testing

@testable import AnnounceClient

/// Which socket `announce-ctl` talks to when none is named.
struct SocketPathTests {
    @Test func anExplicitPathThenTheEnvironmentWin() {
        let environment = ["ANNOUNCE_SOCKET": "/env.sock", "XDG_RUNTIME_DIR": "/run/user/1000"]
        #expect(Client.socketPath(explicit: "/x.sock", environment: environment, isRoot: false) == "/x.sock")
        #expect(Client.socketPath(explicit: nil, environment: environment, isRoot: true) == "/env.sock")
        #expect(Client.socketPath(explicit: "", environment: environment, isRoot: false) == "/env.sock")
    }

    @Test func rootUsesTheSystemSocket() {
        #expect(
            Client.socketPath(explicit: nil, environment: ["XDG_RUNTIME_DIR": "/run/user/0"], isRoot: true)
                == "/run/announce/announce.sock")
    }

    @Test func aUserPrefersTheirOwnDaemonElseTheSystemOne() throws {
        let directory = try Paths.temporaryDirectory("sp")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let runtime = "\(directory)/user"
        let system = "\(directory)/system.sock"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        let environment = ["XDG_RUNTIME_DIR": runtime]
        func path() -> String {
            Client.socketPath(explicit: nil, environment: environment, isRoot: false, systemSocket: system)
        }
        #expect(path() == "\(runtime)/announce.sock", "neither exists: the user's own, for a clear error")
        #expect(FileManager.default.createFile(atPath: system, contents: nil))
        #expect(path() == system, "only the system daemon runs")
        #expect(FileManager.default.createFile(atPath: "\(runtime)/announce.sock", contents: nil))
        #expect(path() == "\(runtime)/announce.sock", "the user's own daemon wins")
    }
}
