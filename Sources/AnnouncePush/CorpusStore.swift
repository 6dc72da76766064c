import AnnounceCore
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The pushed clips on this terminal, in the listener's state folder (`<state_dir>/corpus`), beside the shipped voice
/// packs and never touching them; the daemon loads the version in force (its `corpus` setting names this folder).
///
/// A change never edits the version in force. It is built whole in a staging folder — the new clips downloaded
/// there, the unchanged ones hard-linked from the version in force (no copy, no extra space), `corpus.json` written
/// — synced, renamed to a version folder, and then made the version in force by turning the `current` link over it
/// in one rename (a symbolic link made beside it and renamed over it), the folder synced after each step. So a
/// download cut in half, a full disk or a `kill -9` at any moment leaves `current` naming the old version, whole,
/// or the new one, whole; what a dead run left half made (a staging folder, a version nothing names) is removed at
/// the next start. The version replaced stays, named by `previous`, until the daemon has loaded the new one: if it
/// cannot, `current` is turned back (``rollback()``).
///
/// Everything here is readable by others (folders 0755, files 0644, whatever the umask): the daemon runs as another
/// user. What became of each task is kept beside the receipts, in the listener's own state (``Outcome``,
/// `<state_dir>/corpus-tasks.json`), so that the same task again is known.
///
/// One writer: the corpus worker's thread; the MQTT thread only reads (``outcome(of:)``, ``current()``).
public final class CorpusStore: Sendable {
    public let directory: String
    /// The file of outcomes.
    public let ledgerPath: String
    /// Held while the ledger of outcomes is read or written.
    private let ledgerLock = Mutex(())

    static let previousLink = "previous"
    /// Outcomes remembered, the newest kept.
    static let ledgerLimit = 1024
    static let stagingPrefix = ".staging-"

    /// What became of a finished task.
    public struct Outcome: Codable, Sendable, Equatable {
        public var state: Receipt.State
        /// The error code, for a task not done (`bad_hash`, `download_failed` …).
        public var error: String?
        /// What the error said, for the log.
        public var detail: String?
        /// Pushed clips in force after it.
        public var clips: Int
        /// The version it made (installed, deleted).
        public var version: UInt64?
        /// The message it came in (its signature, or the platform's job code): that message again is not a resend.
        public var message: String?

        public init(
            state: Receipt.State, error: String? = nil, detail: String? = nil, clips: Int, version: UInt64? = nil,
            message: String? = nil
        ) {
            self.message = message
            self.state = state
            self.error = error
            self.detail = detail
            self.clips = clips
            self.version = version
        }
    }

    private struct Ledger: Codable {
        var order: [String] = []
        var outcomes: [String: Outcome] = [:]
    }

    /// The store in `directory`, made (0755) if needed, its outcomes in `ledger`; what a dead run left half made is
    /// removed.
    public init(directory: String, ledger: String) {
        self.directory = directory
        ledgerPath = ledger
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        chmod(directory, 0o755)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            if name.hasPrefix(Self.stagingPrefix) || name.hasSuffix(".tmp") {
                try? FileManager.default.removeItem(atPath: Path.join(directory, name))
            }
        }
        prune(keepPrevious: true)
    }

    // MARK: Reading

    /// The version folder `current` names (nil: nothing pushed yet).
    public var currentFolder: String? { target(CorpusManifest.currentLink) }

    /// The manifest of the version in force (empty when nothing was pushed yet).
    public func current() throws(AnnounceError) -> CorpusManifest {
        guard let folder = currentFolder else { return CorpusManifest() }
        let path = Path.join(folder, CorpusManifest.fileName)
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AnnounceError(.noSpace, "cannot read \(path)", cause: String(cString: strerror(errno)))
        }
        do {
            return try JSONDecoder().decode(CorpusManifest.self, from: data)
        } catch {
            throw AnnounceError(.badClip, "\(path) is not a corpus manifest", cause: "\(error)")
        }
    }

    /// What became of `task`, if it has finished.
    public func outcome(of task: String) -> Outcome? {
        ledgerLock.withLock { _ in readLedger().outcomes[task] }
    }

    /// Bytes free on the folder's file system for this user.
    public var freeBytes: Int {
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { return 0 }
        return Int(info.f_bavail) * Int(info.f_frsize)
    }

    // MARK: Changing

    /// Notes what became of `task` (durably, before its receipt is made).
    public func record(_ task: String, _ outcome: Outcome) throws(AnnounceError) {
        try ledgerLock.withLock { _ throws(AnnounceError) in
            var ledger = readLedger()
            if ledger.outcomes.updateValue(outcome, forKey: task) == nil { ledger.order.append(task) }
            while ledger.order.count > Self.ledgerLimit { ledger.outcomes[ledger.order.removeFirst()] = nil }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let bytes = Array((try? encoder.encode(ledger)) ?? Data())
            do throws(DurableFile.Failure) {
                try DurableFile.replace(ledgerPath, with: bytes)
            } catch {
                throw Self.failure(error)
            }
        }
    }

    /// A new, empty staging folder for a change.
    public func stage() throws(AnnounceError) -> String {
        let path = Path.join(directory, Self.stagingPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16))
        guard mkdir(path, 0o755) == 0 else {
            throw Self.failure(DurableFile.Failure(call: "mkdir", path: path))
        }
        chmod(path, 0o755)
        return path
    }

    /// Removes a staging folder that will not be installed.
    public func discard(staging: String) {
        try? FileManager.default.removeItem(atPath: staging)
    }

    /// Makes `manifest` the version in force: its clips not in `staging` already are linked there from the version
    /// in force, the manifest is written, the folder synced and renamed to its version, `previous` turned to the
    /// version replaced and `current` to the new one.
    public func install(_ manifest: CorpusManifest, staging: String) throws(AnnounceError) {
        let old = currentFolder
        for clip in manifest.clips.values {
            let path = Path.join(staging, clip.file)
            var info = stat()
            if lstat(path, &info) == 0 { continue }
            guard let old, link(Path.join(old, clip.file), path) == 0 else {
                throw Self.failure(DurableFile.Failure(call: "link", path: path))
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let bytes = Array((try? encoder.encode(manifest)) ?? Data())
        let manifestPath = Path.join(staging, CorpusManifest.fileName)
        do throws(DurableFile.Failure) {
            try DurableFile.replace(manifestPath, with: bytes, mode: 0o644)
            chmod(manifestPath, 0o644)
            try DurableFile.syncDirectory(staging)
            let name = Self.versionName(manifest.version)
            let folder = Path.join(directory, name)
            // A version folder of this number left by a run that died before turning `current` to it.
            if folder != old { try? FileManager.default.removeItem(atPath: folder) }
            guard rename(staging, folder) == 0 else { throw DurableFile.Failure(call: "rename", path: staging) }
            try DurableFile.syncDirectory(directory)
            if let old { try turn(Self.previousLink, to: lastComponent(old)) }
            try turn(CorpusManifest.currentLink, to: name)
        } catch {
            throw Self.failure(error)
        }
    }

    /// Turns `current` back to the version `previous` names (the daemon could not load the new one). False if there
    /// is none to go back to.
    @discardableResult
    public func rollback() throws(AnnounceError) -> Bool {
        guard let previous = target(Self.previousLink) else { return false }
        do throws(DurableFile.Failure) {
            try turn(CorpusManifest.currentLink, to: lastComponent(previous))
            try DurableFile.remove(Path.join(directory, Self.previousLink))
        } catch {
            throw Self.failure(error)
        }
        return true
    }

    /// Removes every version but the one in force (and, with `keepPrevious`, the one `previous` names).
    public func prune(keepPrevious: Bool = false) {
        let keep = Set(
            [currentFolder, keepPrevious ? target(Self.previousLink) : nil].compactMap { $0.map(lastComponent) })
        if !keepPrevious { unlink(Path.join(directory, Self.previousLink)) }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        where name.hasPrefix("v") && !keep.contains(name) {
            try? FileManager.default.removeItem(atPath: Path.join(directory, name))
        }
        try? DurableFile.syncDirectory(directory)
    }

    // MARK: Helpers

    /// `v` and the version in 16 digits: the folders sort by version.
    static func versionName(_ version: UInt64) -> String {
        let digits = String(version)
        return "v" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// Points the link `name` at `target` atomically: a new link beside it, renamed over it, the folder synced.
    private func turn(_ name: String, to target: String) throws(DurableFile.Failure) {
        let path = Path.join(directory, name)
        let temporary = path + ".tmp"
        unlink(temporary)
        guard symlink(target, temporary) == 0 else { throw DurableFile.Failure(call: "symlink", path: temporary) }
        guard rename(temporary, path) == 0 else {
            let failure = DurableFile.Failure(call: "rename", path: temporary)
            unlink(temporary)
            throw failure
        }
        try DurableFile.syncDirectory(directory)
    }

    /// The folder a link of this store names, resolved (nil: no such link, or it leads nowhere).
    private func target(_ link: String) -> String? {
        guard let pointer = realpath(Path.join(directory, link), nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    private func lastComponent(_ path: String) -> String {
        String(path.split(separator: "/").last ?? Substring(path))
    }

    private func readLedger() -> Ledger {
        guard let data = FileManager.default.contents(atPath: ledgerPath),
            let ledger = try? JSONDecoder().decode(Ledger.self, from: data)
        else { return Ledger() }
        return ledger
    }

    static func failure(_ failure: DurableFile.Failure) -> AnnounceError {
        let full = failure.code == ENOSPC || failure.code == EDQUOT
        return AnnounceError(
            full ? .noSpace : .internalError, "cannot \(failure.call) \(failure.path)", cause: failure.reason)
    }
}
