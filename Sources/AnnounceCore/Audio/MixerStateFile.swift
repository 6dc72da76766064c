import Synchronization
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// The mixer settings the daemon has changed and must put back, kept on disk so that a crash (kill -9, power
/// loss) mid-alert cannot leave the owner's volume raised, unmuted or the music ducked. An entry is written
/// (and synced) *before* the change is made and removed after the original is restored; at start-up a leftover
/// entry is restored by `restoreLeftovers`.
public final class MixerStateFile: Sendable {
    /// What was changed on one element, and why.
    public struct Entry: Sendable, Equatable, Codable {
        public enum Purpose: String, Sendable, Codable {
            /// Raised to the volume threshold and/or unmuted for an alert.
            case alert
            /// Lowered while an announcement played over other audio.
            case duck
        }

        public var element: MixerElementAddress
        public var purpose: Purpose
        /// The owner's setting before the daemon touched it.
        public var original: VolumeReading
        /// What the daemon set (for a duck: the end of the ramp).
        public var applied: VolumeReading

        public init(element: MixerElementAddress, purpose: Purpose, original: VolumeReading, applied: VolumeReading) {
            self.element = element
            self.purpose = purpose
            self.original = original
            self.applied = applied
        }

        /// Whether `current` is something the daemon could have left: on the way from `original` to `applied`
        /// (a ramp may have stopped half-way), switches as applied. Anything else was set by someone else.
        public func isOurs(_ current: VolumeReading) -> Bool {
            guard current.raw.count == applied.raw.count, original.raw.count == applied.raw.count else { return false }
            for channel in current.raw.indices {
                let low = min(original.raw[channel], applied.raw[channel])
                let high = max(original.raw[channel], applied.raw[channel])
                guard (low...high).contains(current.raw[channel]) else { return false }
            }
            return current.switches == applied.switches || current.switches == original.switches
        }
    }

    public let path: String
    private let lock = Mutex(())

    public init(path: String) {
        self.path = path
    }

    /// The entries on disk (none when there is no file).
    public func entries() throws(AnnounceError) -> [Entry] {
        return try lock.withLock { _ throws(AnnounceError) -> [Entry] in
            return try load()
        }
    }

    /// Adds or replaces the entry for the element and purpose, and syncs it to disk before returning.
    public func record(_ entry: Entry) throws(AnnounceError) {
        try lock.withLock { _ throws(AnnounceError) in
            var entries = try load().filter { !($0.element == entry.element && $0.purpose == entry.purpose) }
            entries.append(entry)
            try store(entries)
        }
    }

    /// Forgets the entry for the element and purpose (the original is back, or the user took over).
    public func remove(_ element: MixerElementAddress, purpose: Entry.Purpose) throws(AnnounceError) {
        try lock.withLock { _ throws(AnnounceError) in
            let entries = try load()
            let kept = entries.filter { !($0.element == element && $0.purpose == purpose) }
            if kept.count != entries.count { try store(kept) }
        }
    }

    /// What start-up did with one leftover entry.
    public enum Recovery: Sendable, Equatable {
        /// Put back to the owner's original.
        case restored(Entry)
        /// Someone changed the element after the daemon did: their setting stays.
        case keptUserSetting(Entry, current: VolumeReading)
        /// The element cannot be reached now; the entry stays for the next start.
        case unreachable(Entry, AnnounceError)
    }

    /// Restores every leftover entry (the daemon died mid-alert): each element the daemon left as it set it
    /// goes back to the original; one changed by someone else since is left alone. Entries that are handled
    /// are removed; unreachable ones stay.
    @discardableResult
    public func restoreLeftovers(open: (MixerElementAddress) throws(AnnounceError) -> any VolumeControl) -> [Recovery] {
        return lock.withLock { _ -> [Recovery] in
            let entries: [Entry]
            do { entries = try load() } catch {
                // An unreadable file cannot be acted on; move it aside so it is kept for a human and not retried.
                try? FileManager.default.moveItem(atPath: path, toPath: path + ".unreadable")
                return []
            }
            var outcomes: [Recovery] = []
            var remaining: [Entry] = []
            for entry in entries {
                do throws(AnnounceError) {
                    let control = try open(entry.element)
                    let current = try control.read()
                    if entry.isOurs(current) {
                        try control.write(raw: entry.original.raw)
                        if let switches = entry.original.switches, current.switches != nil {
                            try control.write(switches: switches)
                        }
                        outcomes.append(.restored(entry))
                    } else {
                        outcomes.append(.keptUserSetting(entry, current: current))
                    }
                } catch {
                    outcomes.append(.unreachable(entry, error))
                    remaining.append(entry)
                }
            }
            try? store(remaining)
            return outcomes
        }
    }

    private func load() throws(AnnounceError) -> [Entry] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            if data.isEmpty { return [] }
            return try JSONDecoder().decode([Entry].self, from: data)
        } catch {
            throw AnnounceError(.mixer, "cannot read the mixer state file \(path)", cause: errorReason(error))
        }
    }

    /// Writes a temporary file, syncs it, renames it over the old one and syncs the folder: the file is always
    /// either the old or the new list, even after a power cut.
    private func store(_ entries: [Entry]) throws(AnnounceError) {
        if entries.isEmpty {
            if FileManager.default.fileExists(atPath: path) { unlink(path) }
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data: Data
        do { data = try encoder.encode(entries) } catch {
            throw AnnounceError(.internalError, "cannot encode the mixer state", cause: "\(error)")
        }
        do {
            try DurableFile.replace(path, with: Array(data))
        } catch {
            throw AnnounceError(.mixer, "cannot save the mixer state file", cause: error.description)
        }
    }
}
