import AnnounceCore
import CAlsa
import Glibc

/// `snd_mixer_selem_id_t` from `snd_mixer_selem_id_malloc`, freed with its owner.
private final class SimpleElementID {
    let pointer: OpaquePointer

    init(name: String, index: Int) throws(AlsaError) {
        var pointer: OpaquePointer?
        try alsaCheck("snd_mixer_selem_id_malloc") { snd_mixer_selem_id_malloc(&pointer) }
        guard let pointer else { throw AlsaError(function: "snd_mixer_selem_id_malloc", code: -ENOMEM) }
        snd_mixer_selem_id_set_name(pointer, name)
        snd_mixer_selem_id_set_index(pointer, UInt32(index))
        self.pointer = pointer
    }

    deinit { snd_mixer_selem_id_free(pointer) }
}

/// A playback volume element of the ALSA simple mixer (what `amixer -D CTL sget NAME` shows), as a
/// `VolumeControl`.
///
/// Opened the way amixer does it — open, attach, register, load, find — closing on every failure path; the
/// control device is opened non-blocking so pending change events (someone else moved the volume) can be
/// taken in before every read without ever blocking. When the control device goes away (the sound server
/// restarted, a USB card was unplugged) the next call reopens it.
///
/// Not thread-safe; its owner (`VolumeGuard`, `Ducker`) serialises calls.
public final class AlsaMixerElement: VolumeControl, @unchecked Sendable {
    public let address: MixerElementAddress
    private let identifier: SimpleElementID
    private var mixer: OpaquePointer?
    private var element: OpaquePointer?
    private var channels: [snd_mixer_selem_channel_id_t] = []
    private var hasSwitch = false

    /// Prepares the element; it is opened by `connect()` or the first call that needs it, so a daemon that
    /// starts before its sound server still starts (and the mixer comes when the server does).
    public init(address: MixerElementAddress) throws(AnnounceError) {
        self.address = address
        do {
            identifier = try SimpleElementID(name: address.element, index: address.index)
        } catch {
            throw error.announceError(.mixer, "cannot prepare mixer element \(address)")
        }
    }

    /// Opens the element now (if it is not open), to report a wrong card or element name early.
    public func connect() throws(AnnounceError) {
        _ = try current()
    }

    deinit { closeMixer() }

    public func scale() throws(AnnounceError) -> VolumeScale {
        let element = try current()
        var low = 0
        var high = 0
        do {
            try alsaCheck("snd_mixer_selem_get_playback_volume_range") {
                snd_mixer_selem_get_playback_volume_range(element, &low, &high)
            }
        } catch {
            throw failed(error, "cannot read the volume range of")
        }
        var scale = VolumeScale(raw: low...max(low, high))
        var dBLow = 0
        var dBHigh = 0
        // Elements without dB information (PulseAudio's Master, many USB cards) fail here: raw steps only.
        if snd_mixer_selem_get_playback_dB_range(element, &dBLow, &dBHigh) == 0, dBLow < dBHigh {
            scale.decibels = VolumeScale.Decibels(
                range: dBLow...dBHigh,
                fromRaw: { [weak self] raw in self?.decibels(raw: raw) },
                toRaw: { [weak self] centidB, roundUp in self?.raw(decibels: centidB, roundUp: roundUp) })
        }
        return scale
    }

    public func read() throws(AnnounceError) -> VolumeReading {
        let element = try current()
        do {
            var raw: [Int] = []
            var switches: [Bool]? = hasSwitch ? [] : nil
            for channel in channels {
                var value = 0
                try alsaCheck("snd_mixer_selem_get_playback_volume") {
                    snd_mixer_selem_get_playback_volume(element, channel, &value)
                }
                raw.append(value)
                if hasSwitch {
                    var on: Int32 = 0
                    try alsaCheck("snd_mixer_selem_get_playback_switch") {
                        snd_mixer_selem_get_playback_switch(element, channel, &on)
                    }
                    switches?.append(on != 0)
                }
            }
            return VolumeReading(raw: raw, switches: switches)
        } catch {
            throw failed(error, "cannot read")
        }
    }

    public func write(raw: [Int]) throws(AnnounceError) {
        let element = try current()
        guard raw.count == channels.count else {
            throw AnnounceError(.mixer, "\(raw.count) volume values for \(channels.count) channels of \(address)")
        }
        do {
            for (channel, value) in zip(channels, raw) {
                try alsaCheck("snd_mixer_selem_set_playback_volume(\(value))") {
                    snd_mixer_selem_set_playback_volume(element, channel, value)
                }
            }
        } catch {
            throw failed(error, "cannot set the volume of")
        }
    }

    public func write(switches: [Bool]) throws(AnnounceError) {
        let element = try current()
        guard hasSwitch else { throw AnnounceError(.mixer, "mixer element \(address) has no playback switch") }
        guard switches.count == channels.count else {
            throw AnnounceError(.mixer, "\(switches.count) switch values for \(channels.count) channels of \(address)")
        }
        do {
            for (channel, on) in zip(channels, switches) {
                try alsaCheck("snd_mixer_selem_set_playback_switch(\(on))") {
                    snd_mixer_selem_set_playback_switch(element, channel, on ? 1 : 0)
                }
            }
        } catch {
            throw failed(error, "cannot set the playback switch of")
        }
    }

    // MARK: - Handles

    private func open() throws(AlsaError) {
        var hctl: OpaquePointer?
        try alsaCheck("snd_hctl_open(\(address.control))") {
            snd_hctl_open(&hctl, address.control, SND_CTL_NONBLOCK)
        }
        guard let hctl else { throw AlsaError(function: "snd_hctl_open(\(address.control))", code: -ENODEV) }
        var handle: OpaquePointer?
        do {
            try alsaCheck("snd_mixer_open") { snd_mixer_open(&handle, 0) }
        } catch {
            snd_hctl_close(hctl)
            throw error
        }
        guard let handle else {
            snd_hctl_close(hctl)
            throw AlsaError(function: "snd_mixer_open", code: -ENOMEM)
        }
        do throws(AlsaError) {
            // From here on the mixer owns the hctl and closes it with itself.
            try alsaCheck("snd_mixer_attach_hctl(\(address.control))") { snd_mixer_attach_hctl(handle, hctl) }
            try alsaCheck("snd_mixer_selem_register") { snd_mixer_selem_register(handle, nil, nil) }
            try alsaCheck("snd_mixer_load") { snd_mixer_load(handle) }
            guard let found = snd_mixer_find_selem(handle, identifier.pointer) else {
                throw AlsaError(function: "snd_mixer_find_selem(\(address.element),\(address.index))", code: -ENOENT)
            }
            guard snd_mixer_selem_has_playback_volume(found) != 0 else {
                throw AlsaError(function: "snd_mixer_selem_has_playback_volume(\(address.element))", code: -EINVAL)
            }
            if snd_mixer_selem_is_playback_mono(found) != 0 {
                channels = [SND_MIXER_SCHN_MONO]
            } else {
                channels = (0...SND_MIXER_SCHN_LAST.rawValue).map { snd_mixer_selem_channel_id_t(rawValue: $0) }
                    .filter { snd_mixer_selem_has_playback_channel(found, $0) != 0 }
            }
            hasSwitch = snd_mixer_selem_has_playback_switch(found) != 0
            mixer = handle
            element = found
        } catch {
            snd_mixer_close(handle)
            throw error
        }
    }

    private func closeMixer() {
        guard let mixer else { return }
        // Closing a mixer whose control device died reports that death again; there is nothing left to do.
        _ = snd_mixer_close(mixer)
        self.mixer = nil
        element = nil
    }

    /// The element with fresh values: pending change events are handled first; a dead control is reopened.
    private func current() throws(AnnounceError) -> OpaquePointer {
        if let mixer, let element {
            let handled = snd_mixer_handle_events(mixer)
            if handled >= 0 { return element }
            closeMixer()
        }
        do {
            try open()
        } catch {
            throw error.announceError(.mixer, "cannot open mixer element \(address)")
        }
        guard let element else { throw AnnounceError(.mixer, "mixer element \(address) vanished") }
        return element
    }

    /// Maps a failed call to the domain error and drops the handles, so the next call starts afresh.
    private func failed(_ error: AlsaError, _ what: String) -> AnnounceError {
        closeMixer()
        return error.announceError(.mixer, "\(what) mixer element \(address)")
    }

    private func decibels(raw: Int) -> Int? {
        guard let element else { return nil }
        var value = 0
        guard snd_mixer_selem_ask_playback_vol_dB(element, raw, &value) == 0 else { return nil }
        return value
    }

    private func raw(decibels: Int, roundUp: Bool) -> Int? {
        guard let element else { return nil }
        var value = 0
        guard snd_mixer_selem_ask_playback_dB_vol(element, decibels, roundUp ? 1 : -1, &value) == 0 else { return nil }
        return value
    }
}
