import AnnounceCore
import Logging

/// The speaker's everyday volume level (docs/audio.md): set by the volume keys and `volume` with `level`, read by
/// `volume`, kept in the journal so that it survives a restart and a power cut that loses the mixer's own state.
/// Every method here does mixer or journal I/O: call it off Swift's cooperative pool (``offThePool(_:)``) or
/// from a thread of its own.
extension Daemon {
    /// The journal setting: `CTL/ELEMENT=RAW,RAW…`, the element's raw values per channel.
    static let levelSetting = "volume_level"

    /// The mixer element's guard, or `not_found` when no mixer is configured.
    func mixerGuard() throws(AnnounceError) -> VolumeGuard {
        guard let volumeGuard else {
            throw AnnounceError(
                .notFound,
                "no mixer element is configured (audio.mixer = \"none\"): the daemon does not set the volume")
        }
        return volumeGuard
    }

    /// Sets the everyday level to `percent` (0…100 on alsamixer's scale) on every channel (a mute by the mute key
    /// ends). Returns the level as set, in percent.
    @discardableResult
    public func setVolumeLevel(_ percent: Int) throws(AnnounceError) -> Int {
        guard (0...100).contains(percent) else {
            throw AnnounceError(.badRequest, "level must be a percentage 0…100, not \(percent)")
        }
        let guarded = try mixerGuard()
        let (level, scale) = try guarded.changeEveryday { reading, scale in
            let raw = VolumeMapping.raw(normalized: Double(percent) / 100, scale: scale, roundUp: true)
            return VolumeReading(raw: reading.raw.map { _ in raw }, switches: reading.switches)
        }
        let now = VolumeMapping.percent(ofRaw: level.raw.min() ?? scale.raw.lowerBound, scale: scale)
        logger.notice("volume level set", metadata: ["level": "\(now)%", "raw": "\(level.raw)"])
        return now
    }

    /// One step up or down from the level now (the volume keys), on the `step` grid; a step always changes what
    /// is heard. Returns the new level, percent.
    func stepVolumeLevel(up: Bool, step: Int) throws(AnnounceError) -> Int {
        let guarded = try mixerGuard()
        var target = 0
        let (level, _) = try guarded.changeEveryday { reading, scale in
            let (percent, raw) = VolumeSteps.step(
                fromRaw: reading.raw.min() ?? scale.raw.lowerBound, scale: scale, step: step, up: up)
            target = percent
            return VolumeReading(raw: reading.raw.map { _ in raw }, switches: reading.switches)
        }
        logger.info("volume key", metadata: ["level": "\(target)%", "raw": "\(level.raw)", "up": "\(up)"])
        return target
    }

    /// Mutes, or unmutes when muted (the mute key); returns whether it is muted now. Under the `respect` policy a
    /// mute silences an alert playing now; under `override` the alert plays on and the mute follows it.
    func toggleMute() throws(AnnounceError) -> Bool {
        let muted = try mixerGuard().toggleMute()
        logger.info("mute key", metadata: ["muted": "\(muted)"])
        return muted
    }

    /// From now on, keeps the owner's level in the journal whenever it changes.
    func keepEverydayLevel() {
        guard let volumeGuard else { return }
        let element = volumeGuard.address
        volumeGuard.observeEveryday { [self] level in
            // Reported by the audio thread: written on the job executor, in order, without waiting for it.
            let text = Self.text(level, of: element)
            jobs.post { jobs in self.keep(text, jobs) }
        }
    }

    /// Keeps the level the mixer holds now (at a stop: a change made with amixer since the last alert is kept).
    func recordEverydayLevel() {
        guard let volumeGuard, let (level, _) = try? volumeGuard.everydayLevel() else { return }
        let text = Self.text(level, of: volumeGuard.address)
        _ = try? jobs.sync { jobs in self.keep(text, jobs) }
    }

    /// `CTL/ELEMENT=RAW,RAW` and, for a mute by the mute key on an element without a switch, ` muted-from=RAW,RAW`.
    private static func text(_ level: EverydayLevel, of element: MixerElementAddress) -> String {
        var text = "\(element)=" + level.reading.raw.map(String.init).joined(separator: ",")
        if let from = level.mutedFrom { text += " muted-from=" + from.map(String.init).joined(separator: ",") }
        return text
    }

    private func keep(_ value: String, _ jobs: isolated JobLifecycle) {
        do {
            try jobs.setSetting(Self.levelSetting, value)
        } catch {
            logger.warning("cannot keep the volume level in the journal", metadata: ["error": "\(error)"])
        }
    }

    /// Puts back the level last kept in the journal (at start): a terminal whose mixer forgot it in a power cut
    /// speaks at the owner's level again. Nothing is kept for another element, or another channel count.
    func restoreEverydayLevel() {
        guard let volumeGuard else { return }
        do {
            guard let text = try jobs.sync({ (jobs) throws(AnnounceError) in try jobs.setting(Self.levelSetting) }) else {
                return
            }
            let parts = text.split(separator: " ")
            guard let first = parts.first, let equals = first.lastIndex(of: "="),
                first[..<equals] == "\(volumeGuard.address)"
            else { return }
            func values(_ text: Substring) -> [Int] { text.split(separator: ",").compactMap { Int($0) } }
            let raw = values(first[first.index(after: equals)...])
            let mutedFrom = parts.dropFirst().first { $0.hasPrefix("muted-from=") }.map { values($0.dropFirst(11)) }
            let (now, _) = try volumeGuard.everydayLevel()
            guard !raw.isEmpty, raw.count == now.reading.raw.count else { return }
            let kept = EverydayLevel(
                reading: VolumeReading(raw: raw, switches: now.reading.switches), mutedFrom: mutedFrom)
            guard kept.reading.raw != now.reading.raw || kept.mutedFrom != now.mutedFrom else { return }
            try volumeGuard.restoreEveryday(kept)
            logger.notice(
                "volume level put back as last set",
                metadata: ["mixer": "\(volumeGuard.address)", "raw": "\(raw)", "muted": "\(mutedFrom != nil)"])
        } catch {
            logger.warning("cannot put the volume level back", metadata: ["error": "\(error)"])
        }
    }
}
