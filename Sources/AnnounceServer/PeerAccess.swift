import AnnounceCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Who is on the other end of a connection, as the kernel says (SO_PEERCRED, taken at `connect` time, so a
/// client cannot lie about it), plus its supplementary groups (SO_PEERGROUPS, Linux ≥ 4.13).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public var groups: [UInt32]

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32] = []) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// `struct ucred` of <sys/socket.h> (pid_t, uid_t, gid_t), declared here because Glibc's module only has it
    /// under _GNU_SOURCE.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// Room for 64 supplementary groups; a peer in more gets its primary group only (and a log line).
    struct GroupList: Sendable {
        // swift-format-ignore
        var gids: (
            UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
            UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
            UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
            UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
            UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32
        ) = (
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )

        /// The kernel returns the groups sorted ascending (set_groups sorts them) and NIO zero-fills the rest
        /// without telling the length, so the list ends where the values stop increasing. Group 0 can only be
        /// first and cannot be told apart from "no groups": it is left out (never grants access by itself).
        var values: [UInt32] {
            withUnsafeBytes(of: gids) { raw in
                var result: [UInt32] = []
                for gid in raw.bindMemory(to: UInt32.self) {
                    if gid == 0 { if result.isEmpty { continue } else { break } }
                    if let last = result.last, gid <= last { break }
                    result.append(gid)
                }
                return result
            }
        }
    }

    /// Reads the peer's credentials from an accepted Unix socket channel. Called as the connection is accepted,
    /// on its event loop, before anything can close it: a client that sends its request and shuts its side down
    /// at once (`echo … | socat`) is still known.
    public static func of(_ channel: any Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(
                AnnounceError(.internalError, "the connection has no socket options"))
        }
        let ucred: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return ucred.flatMap { ucred in
            let credentials = PeerCredentials(pid: ucred.pid, uid: ucred.uid, gid: ucred.gid)
            let groups: EventLoopFuture<GroupList> = provider.unsafeGetSocketOption(
                level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERGROUPS))
            return groups.map { list in
                var withGroups = credentials
                withGroups.groups = list.values
                return withGroups
            }.recover { _ in credentials }
        }
    }
}

/// Decides what a peer may do from its credentials. Resolved once from the configuration (names → ids) and
/// replaced on reload.
public struct AccessPolicy: Sendable, Equatable {
    public var controlUIDs: Set<UInt32>
    public var controlGIDs: Set<UInt32>
    public var submitUIDs: Set<UInt32>
    public var submitGIDs: Set<UInt32>
    public var readUIDs: Set<UInt32>
    public var readGIDs: Set<UInt32>
    public var readAnyone: Bool

    public init(
        controlUIDs: Set<UInt32>, controlGIDs: Set<UInt32> = [], submitUIDs: Set<UInt32> = [],
        submitGIDs: Set<UInt32> = [], readUIDs: Set<UInt32> = [], readGIDs: Set<UInt32> = [], readAnyone: Bool = true
    ) {
        self.controlUIDs = controlUIDs
        self.controlGIDs = controlGIDs
        self.submitUIDs = submitUIDs
        self.submitGIDs = submitGIDs
        self.readUIDs = readUIDs
        self.readGIDs = readGIDs
        self.readAnyone = readAnyone
    }

    /// Root and the daemon's own user always have control, whatever the configuration says.
    public init(configuration: DaemonConfiguration, daemonUID: UInt32 = getuid()) throws(AnnounceError) {
        var problems: [String] = []
        func users(_ names: [String], _ key: String) -> Set<UInt32> {
            Set(
                names.compactMap { name in
                    let id = Self.userID(name)
                    if id == nil { problems.append("access.\(key): no user \"\(name)\"") }
                    return id
                })
        }
        func groups(_ names: [String], _ key: String) -> Set<UInt32> {
            Set(
                names.compactMap { name in
                    let id = Self.groupID(name)
                    if id == nil { problems.append("access.\(key): no group \"\(name)\"") }
                    return id
                })
        }
        self.init(
            controlUIDs: users(configuration.controlUsers, "control_users").union([0, daemonUID]),
            controlGIDs: groups(configuration.controlGroups, "control_groups"),
            submitUIDs: users(configuration.submitUsers, "submit_users"),
            submitGIDs: groups(configuration.submitGroups, "submit_groups"),
            readUIDs: users(configuration.readUsers, "read_users"),
            readGIDs: groups(configuration.readGroups, "read_groups"),
            readAnyone: configuration.readAnyone)
        guard problems.isEmpty else { throw AnnounceError(.badRequest, problems.joined(separator: "\n")) }
    }

    public func access(for peer: PeerCredentials) -> Access {
        let groups = Set(peer.groups).union([peer.gid])
        if controlUIDs.contains(peer.uid) || !controlGIDs.isDisjoint(with: groups) { return .control }
        if submitUIDs.contains(peer.uid) || !submitGIDs.isDisjoint(with: groups) { return .submit }
        if readAnyone || readUIDs.contains(peer.uid) || !readGIDs.isDisjoint(with: groups) { return .read }
        return .none
    }

    /// A user name or number → uid.
    public static func userID(_ name: String) -> UInt32? {
        if let number = UInt32(name) { return number }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// A group name or number → gid.
    public static func groupID(_ name: String) -> UInt32? {
        if let number = UInt32(name) { return number }
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }

    /// A uid → user name, for messages.
    public static func userName(_ uid: UInt32) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil,
            let name = entry.pw_name
        else { return nil }
        return String(cString: name)
    }
}
