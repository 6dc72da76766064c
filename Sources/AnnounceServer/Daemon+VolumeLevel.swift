import AnnounceCore
import Dispatch
import Logging

/// The speaker's everyday volume level (docs/audio.md): set by the volume keys and `volume` with `level`, read by
/// `volume`, kept in the journal so that it survives a restart and a power cut that loses the mixer's own state.
/// Every method here does mixer or journal I/O: call it off Swift's cooperative pool (``offThePool(_:)``) or
/// from a thread of its own.
extension Daemon {
    /// The journal setting: `CTL/ELEMENT=RAW,RAW…`, the element's raw values per channel.
    static let levelSetting = "volume_level"

    /// Journal writes of the level, in order, off the audio thread (which reports a level it finds changed).
    private static let levelWriter = DispatchQueue(label: "announce.volume-level")

    /// The mixer element's guard, or `not_found` when no mixer is configured.
    func mixerGuard() throws(AnnounceError) -> VolumeGuard {
        guard let volumeGuard else {
            throw AnnounceError(
                .notFound, "no mixer element is configured (audio.mixer = \"none\"): the daemon does not set the volume")
        }
        return volumeGuard
    }

    /// Sets the everyday level to `percent` (0…100 on alsamixer's scale) on every channel. Returns the level as
    /// set, in percent.
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
        logger.notice("volume level set", metadata: ["level": "\(percent)%", "raw": "\(level.raw)"])
        return Self.percent(level, scale)
    }

    /// One step up or down from the level now (the volume keys). Returns the new level, percent.
    func stepVolumeLevel(up: Bool, step: Int) throws(AnnounceError) -> Int {
        let guarded = try mixerGuard()
        var target = 0
        let (level, scale) = try guarded.changeEveryday { reading, scale in
            target = VolumeSteps.next(from: Self.percentValue(reading, scale), step: step, up: up)
            let raw = VolumeMapping.raw(normalized: Double(target) / 100, scale: scale, roundUp: true)
            return VolumeReading(raw: reading.raw.map { _ in raw }, switches: reading.switches)
        }
        logger.info("volume key", metadata: ["level": "\(target)%", "raw": "\(level.raw)", "up": "\(up)"])
        return Self.percent(level, scale)
    }

    /// Mutes, or unmutes when muted (the mute key); returns whether it is muted now. Under the `respect` policy a
    /// mute silences an alert playing now; under `override` the alert plays on and the mute follows it.
    func toggleMute() throws(AnnounceError) -> Bool {
        let guarded = try mixerGuard()
        let (level, _) = try guarded.changeEveryday { (reading, _) throws(AnnounceError) in
            guard let switches = reading.switches else {
                throw AnnounceError(.mixer, "mixer element \(guarded.address) has no playback switch to mute")
            }
            let mute = !reading.isMuted
            return VolumeReading(raw: reading.raw, switches: switches.map { _ in !mute })
        }
        logger.info("mute key", metadata: ["muted": "\(level.isMuted)"])
        return level.isMuted
    }

    /// From now on, keeps the owner's level in the journal whenever it changes.
    func keepEverydayLevel() {
        guard let volumeGuard else { return }
        volumeGuard.observeEveryday { [self] level in
            Self.levelWriter.async { self.keep(level, of: volumeGuard.address) }
        }
    }

    /// Keeps the level the mixer holds now (at a stop: a change made with amixer since the last alert is kept).
    func recordEverydayLevel() {
        guard let volumeGuard, let (level, _) = try? volumeGuard.everydayLevel() else { return }
        Self.levelWriter.sync { keep(level, of: volumeGuard.address) }
    }

    private func keep(_ level: VolumeReading, of element: MixerElementAddress) {
        let value = "\(element)=" + level.raw.map(String.init).joined(separator: ",")
        do {
            if try journal.setting(Self.levelSetting) != value { try journal.setSetting(Self.levelSetting, value) }
        } catch {
            logger.warning("cannot keep the volume level in the journal", metadata: ["error": "\(error)"])
        }
    }

    /// Puts back the level last kept in the journal (at start): a terminal whose mixer forgot it in a power cut
    /// speaks at the owner's level again. Nothing is kept for another element, or another channel count.
    func restoreEverydayLevel() {
        guard let volumeGuard else { return }
        do {
            guard let text = try journal.setting(Self.levelSetting), let equals = text.lastIndex(of: "=") else { return }
            guard text[..<equals] == "\(volumeGuard.address)" else { return }
            let raw = text[text.index(after: equals)...].split(separator: ",").compactMap { Int($0) }
            let (now, _) = try volumeGuard.everydayLevel()
            guard !raw.isEmpty, raw.count == now.raw.count, raw != now.raw else { return }
            try volumeGuard.changeEveryday { reading, _ in VolumeReading(raw: raw, switches: reading.switches) }
            logger.notice(
                "volume level put back as last set", metadata: ["mixer": "\(volumeGuard.address)", "raw": "\(raw)"])
        } catch {
            logger.warning("cannot put the volume level back", metadata: ["error": "\(error)"])
        }
    }

    /// The everyday level now, percent (the quietest channel).
    func volumeLevel() throws(AnnounceError) -> Int {
        let (level, scale) = try mixerGuard().everydayLevel()
        return Self.percent(level, scale)
    }

    private static func percentValue(_ reading: VolumeReading, _ scale: VolumeScale) -> Double {
        VolumeMapping.normalized(raw: reading.raw.min() ?? scale.raw.lowerBound, scale: scale) * 100
    }

    private static func percent(_ reading: VolumeReading, _ scale: VolumeScale) -> Int {
        Int(percentValue(reading, scale).rounded())
    }
}
