import AnnounceCore
import CAlsa
import Glibc

/// Negotiated PCM parameters.
public struct PCMParameters: Sendable, Equatable {
    public var sampleRate: Int
    public var channels: Int
    public var format: SampleFormat
    public var periodFrames: Int
    public var bufferFrames: Int
    /// Whether the PCM mixes into a ring that other clients share (dmix): while another one holds the card, what
    /// this process wrote is still played after it dies (``PCMDevice/mixesIntoSharedRing(_:)``).
    public var sharedRing = false

    /// Milliseconds of audio in `frames`, rounded up.
    func milliseconds(_ frames: Int) -> Int { (frames * 1000 + sampleRate - 1) / sampleRate }

    /// How long a running device may take nothing and play nothing before it counts as stuck (a USB speaker
    /// gone silent): two seconds beyond a whole buffer.
    var patienceMilliseconds: Int { 2_000 + milliseconds(bufferFrames) }
}

/// Whether the frames a device still has to play keep falling: a device whose queue stops shrinking for longer
/// than its patience is stuck, and a wait on it gives up like a write that makes no progress.
private struct PlayProgress {
    let patienceNanos: UInt64
    var lowest = Int.max
    var lastProgress = Monotonic.nanos

    init(_ parameters: PCMParameters) { patienceNanos = UInt64(parameters.patienceMilliseconds) * 1_000_000 }

    /// `unplayed`: frames still to play, not counting any written since the watch began.
    mutating func check(_ unplayed: Int) throws(AlsaError) {
        let now = Monotonic.nanos
        if unplayed < lowest {
            lowest = unplayed
            lastProgress = now
        } else if now - lastProgress > patienceNanos {
            throw AlsaError(function: "snd_pcm_delay (stuck at \(unplayed) frames)", code: -ETIMEDOUT)
        }
    }
}

/// An eventfd the audio thread keeps in its poll set: any thread may `signal` it to wake a blocked wait, as
/// speech-dispatcher's ALSA output does with its stop pipe.
final class WakeDescriptor: @unchecked Sendable {
    /// -1 when the system refused an eventfd; waits then fall back to a period's timeout.
    let fd: Int32

    init() {
        fd = eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
    }

    func signal() {
        guard fd >= 0 else { return }
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { Glibc.write(fd, $0.baseAddress, 8) }
    }

    /// Clears pending signals.
    func consume() {
        guard fd >= 0 else { return }
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { Glibc.read(fd, $0.baseAddress, 8) }
    }

    /// Waits up to `milliseconds` for a signal; returns whether one came (and clears it).
    @discardableResult
    func wait(milliseconds: Int) -> Bool {
        guard fd >= 0 else {
            usleep(UInt32(max(0, milliseconds)) * 1000)
            return false
        }
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, Int32(max(0, milliseconds)))
        guard ready > 0 else { return false }
        consume()
        return true
    }
}

/// `snd_pcm_hw_params_t` from `snd_pcm_hw_params_malloc`, freed with its owner.
private final class HardwareParameters {
    let pointer: OpaquePointer

    init() throws(AlsaError) {
        var pointer: OpaquePointer?
        try alsaCheck("snd_pcm_hw_params_malloc") { snd_pcm_hw_params_malloc(&pointer) }
        guard let pointer else { throw AlsaError(function: "snd_pcm_hw_params_malloc", code: -ENOMEM) }
        self.pointer = pointer
    }

    deinit { snd_pcm_hw_params_free(pointer) }
}

/// `snd_pcm_sw_params_t` from `snd_pcm_sw_params_malloc`, freed with its owner.
private final class SoftwareParameters {
    let pointer: OpaquePointer

    init() throws(AlsaError) {
        var pointer: OpaquePointer?
        try alsaCheck("snd_pcm_sw_params_malloc") { snd_pcm_sw_params_malloc(&pointer) }
        guard let pointer else { throw AlsaError(function: "snd_pcm_sw_params_malloc", code: -ENOMEM) }
        self.pointer = pointer
    }

    deinit { snd_pcm_sw_params_free(pointer) }
}

/// An open non-blocking ALSA playback PCM. Owns the `snd_pcm_t` (closed on deinit) and a conversion buffer.
///
/// Writes wait in `poll` on the PCM's descriptors plus the sink's wake descriptor, so another thread can stop
/// a write at once. Underruns, suspends and interrupted calls are recovered in place (and reported through
/// `onRecovery`); any other error means the device is gone and is thrown.
final class PCMDevice {
    let name: String
    let parameters: PCMParameters
    private let handle: OpaquePointer
    private let wake: WakeDescriptor
    /// The PCM's poll descriptors, then the wake descriptor.
    private var descriptors: [pollfd]
    /// Converted samples for devices that do not take mono S16 (nil when none is needed).
    private let scratch: UnsafeMutableRawPointer?
    private var closed = false
    /// Called after each in-place recovery.
    var onRecovery: (PCMErrorKind) -> Void = { _ in }

    /// Opens `name` and negotiates: S16 (else the first format the device takes, see `SampleFormat`), mono
    /// (else the fewest channels it takes, each carrying the same signal), exactly `sampleRate`, the period
    /// nearest to `periodMicroseconds` and `periods` periods per buffer (at least two).
    init(name: String, sampleRate: Int, periodMicroseconds: Int, periods: Int, wake: WakeDescriptor) throws(AlsaError) {
        var pcm: OpaquePointer?
        try alsaCheck("snd_pcm_open(\(name))") {
            snd_pcm_open(&pcm, name, SND_PCM_STREAM_PLAYBACK, SND_PCM_NONBLOCK)
        }
        guard let pcm else { throw AlsaError(function: "snd_pcm_open(\(name))", code: -ENODEV) }
        let negotiated: PCMParameters
        let descriptors: [pollfd]
        do {
            negotiated = try Self.configure(
                pcm, sampleRate: sampleRate, periodMicroseconds: periodMicroseconds, periods: periods)
            let count = Int(try alsaCheck("snd_pcm_poll_descriptors_count") { snd_pcm_poll_descriptors_count(pcm) })
            var pcmDescriptors = [pollfd](repeating: pollfd(), count: count)
            let filled = try alsaCheck("snd_pcm_poll_descriptors") {
                snd_pcm_poll_descriptors(pcm, &pcmDescriptors, UInt32(count))
            }
            descriptors = Array(pcmDescriptors.prefix(Int(filled))) + [pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)]
        } catch {
            snd_pcm_close(pcm)
            throw error
        }
        self.name = name
        self.handle = pcm
        self.wake = wake
        var parameters = negotiated
        parameters.sharedRing = Self.mixesIntoSharedRing(pcm)
        self.parameters = parameters
        self.descriptors = descriptors
        if negotiated.format == .s16 && negotiated.channels == 1 {
            scratch = nil
        } else {
            scratch = UnsafeMutableRawPointer.allocate(
                byteCount: negotiated.bufferFrames * negotiated.channels * negotiated.format.bytes,
                alignment: MemoryLayout<Int32>.alignment)
        }
    }

    /// Whether the PCM's chain ends in dmix ("Direct Stream Mixing PCM" in what `snd_pcm_dump` describes: the one
    /// way alsa-lib tells what lies under a plug or softvol layer). dmix mixes each write into the card's ring at
    /// once; the card stops with its last client, so a dead writer's samples play on only while another client —
    /// a music player through the same dmix — holds it. A card written directly is stopped by the kernel when the
    /// descriptor closes, and a sound server (an I/O plugin) drops a dead client's queue: neither plays on.
    static func mixesIntoSharedRing(_ pcm: OpaquePointer) -> Bool {
        var output: OpaquePointer?
        guard snd_output_buffer_open(&output) == 0, let output else { return false }
        defer { snd_output_close(output) }
        guard snd_pcm_dump(pcm, output) == 0 else { return false }
        var text: UnsafeMutablePointer<CChar>?
        let length = snd_output_buffer_string(output, &text)
        guard let text, length > 0 else { return false }
        let dump = UnsafeRawBufferPointer(start: text, count: length)
        let needle = Array("Direct Stream Mixing PCM".utf8)
        guard dump.count >= needle.count else { return false }
        return (0...(dump.count - needle.count)).contains { start in
            needle.indices.allSatisfy { dump[start + $0] == needle[$0] }
        }
    }

    deinit {
        scratch?.deallocate()
        // Only reached without `close()` when the owner is torn down by an error path; nothing to report to.
        if !closed { snd_pcm_close(handle) }
    }

    /// Closes the PCM (the device is released even when this reports an error).
    func close() throws(AlsaError) {
        guard !closed else { return }
        closed = true
        try alsaCheck("snd_pcm_close") { snd_pcm_close(handle) }
    }

    private static func configure(
        _ pcm: OpaquePointer, sampleRate: Int, periodMicroseconds: Int, periods: Int
    ) throws(AlsaError) -> PCMParameters {
        let hw = try HardwareParameters()
        try alsaCheck("snd_pcm_hw_params_any") { snd_pcm_hw_params_any(pcm, hw.pointer) }
        try alsaCheck("snd_pcm_hw_params_set_access(RW_INTERLEAVED)") {
            snd_pcm_hw_params_set_access(pcm, hw.pointer, SND_PCM_ACCESS_RW_INTERLEAVED)
        }
        guard let format = SampleFormat.allCases.first(where: { snd_pcm_hw_params_test_format(pcm, hw.pointer, $0.alsa) == 0 })
        else {
            let names = SampleFormat.allCases.map(\.rawValue).joined(separator: ", ")
            throw AlsaError(function: "snd_pcm_hw_params_test_format(none of \(names))", code: -EINVAL)
        }
        try alsaCheck("snd_pcm_hw_params_set_format(\(format.rawValue))") {
            snd_pcm_hw_params_set_format(pcm, hw.pointer, format.alsa)
        }
        var channels: UInt32 = 1
        try alsaCheck("snd_pcm_hw_params_set_channels_near(1)") {
            snd_pcm_hw_params_set_channels_near(pcm, hw.pointer, &channels)
        }
        var rate = UInt32(sampleRate)
        try alsaCheck("snd_pcm_hw_params_set_rate_near(\(sampleRate))") {
            snd_pcm_hw_params_set_rate_near(pcm, hw.pointer, &rate, nil)
        }
        guard rate == UInt32(sampleRate) else {
            // A hw: device at a fixed rate: the plug layer (plughw:, or the default device) resamples.
            throw AlsaError(function: "snd_pcm_hw_params_set_rate_near(\(sampleRate) → \(rate); use a plug device)",
                            code: -EINVAL)
        }
        var periodTime = UInt32(max(1, periodMicroseconds))
        try alsaCheck("snd_pcm_hw_params_set_period_time_near(\(periodMicroseconds) µs)") {
            snd_pcm_hw_params_set_period_time_near(pcm, hw.pointer, &periodTime, nil)
        }
        var count = UInt32(max(2, periods))
        try alsaCheck("snd_pcm_hw_params_set_periods_near(\(count))") {
            snd_pcm_hw_params_set_periods_near(pcm, hw.pointer, &count, nil)
        }
        try alsaCheck("snd_pcm_hw_params") { snd_pcm_hw_params(pcm, hw.pointer) }
        var periodFrames: snd_pcm_uframes_t = 0
        var bufferFrames: snd_pcm_uframes_t = 0
        try alsaCheck("snd_pcm_hw_params_get_period_size") {
            snd_pcm_hw_params_get_period_size(hw.pointer, &periodFrames, nil)
        }
        try alsaCheck("snd_pcm_hw_params_get_buffer_size") {
            snd_pcm_hw_params_get_buffer_size(hw.pointer, &bufferFrames)
        }

        let sw = try SoftwareParameters()
        try alsaCheck("snd_pcm_sw_params_current") { snd_pcm_sw_params_current(pcm, sw.pointer) }
        // Start as soon as one period is queued: lowest latency to the first sample.
        try alsaCheck("snd_pcm_sw_params_set_start_threshold") {
            snd_pcm_sw_params_set_start_threshold(pcm, sw.pointer, periodFrames)
        }
        // Wake the writer when a whole period is free.
        try alsaCheck("snd_pcm_sw_params_set_avail_min") {
            snd_pcm_sw_params_set_avail_min(pcm, sw.pointer, periodFrames)
        }
        // Stop (underrun) when the buffer runs dry rather than playing stale samples.
        try alsaCheck("snd_pcm_sw_params_set_stop_threshold") {
            snd_pcm_sw_params_set_stop_threshold(pcm, sw.pointer, bufferFrames)
        }
        try alsaCheck("snd_pcm_sw_params") { snd_pcm_sw_params(pcm, sw.pointer) }
        return PCMParameters(
            sampleRate: Int(rate), channels: Int(channels), format: format, periodFrames: Int(periodFrames),
            bufferFrames: Int(bufferFrames))
    }

    // MARK: - Writing

    /// Writes the frames, waiting for room in the buffer. Returns early with the frames written when `stop`
    /// says so (checked before every write and after every wake-up), or once the device has played the point
    /// that `mark` gives: the frames written before this call that follow it (nil: none). A waiting writer wakes
    /// for that point as for a period, so the caller learns that a job's end was heard when it was, whatever
    /// the period's length.
    func write(_ samples: UnsafeBufferPointer<Int16>, stop: () -> Bool, mark: () -> Int?) throws(AlsaError) -> Int {
        guard let base = samples.baseAddress else { return 0 }
        try prepareIfNeeded()
        var offset = 0
        // Whether the last poll said the device wants data: then whatever room there is gets written (the pulse
        // plugin signals one frame short of a period).
        var writable = false
        var idleWakeups = 0
        var progress = PlayProgress(parameters)
        while offset < samples.count {
            if stop() { return offset }
            // snd_pcm_avail, not _avail_update: plugin chains (plug, lfloat …) only move on with a hardware sync.
            let available = snd_pcm_avail(handle)
            if available < 0 {
                try recover(Int32(truncatingIfNeeded: available), "snd_pcm_avail")
                continue
            }
            let remaining = samples.count - offset
            if available <= 0 || (Int(available) < min(remaining, parameters.periodFrames) && !writable) {
                // Until the mark is played, at most as long as the frames in front of it take.
                var limit: Int?
                if let after = mark() {
                    let pending = try pendingFrames()
                    let markPending = after + offset
                    if pending <= markPending { return offset }
                    // Pending less what this call wrote: falls only as the device plays.
                    try progress.check(pending - offset)
                    limit = parameters.milliseconds(pending - markPending) + 1
                }
                writable = try waitForRoom(limit: limit)
                idleWakeups += 1
                if idleWakeups > 100 {
                    // A device that keeps waking us without taking data: do not spin on it.
                    wake.wait(milliseconds: 1)
                    idleWakeups = 0
                }
                continue
            }
            writable = false
            idleWakeups = 0
            let count = min(Int(available), remaining, parameters.bufferFrames)
            let result: snd_pcm_sframes_t
            if let scratch {
                parameters.format.encode(
                    UnsafeBufferPointer(start: base + offset, count: count), channels: parameters.channels,
                    into: scratch)
                result = snd_pcm_writei(handle, scratch, snd_pcm_uframes_t(count))
            } else {
                result = snd_pcm_writei(handle, base + offset, snd_pcm_uframes_t(count))
            }
            if result < 0 {
                try recover(Int32(truncatingIfNeeded: result), "snd_pcm_writei")
                continue
            }
            offset += Int(result)
        }
        return offset
    }

    /// Frames written and not yet played (`snd_pcm_delay`: through a sound server this includes what the server
    /// still holds). 0 when the stream is not running: after an underrun everything written was played.
    func pendingFrames() throws(AlsaError) -> Int {
        while true {
            switch snd_pcm_state(handle) {
            case SND_PCM_STATE_PREPARED:
                // Not started yet (less than the start threshold written): nothing was played, everything written
                // is pending. (ALSA's pulse plugin answers snd_pcm_delay with EIO until its stream starts.)
                let available = snd_pcm_avail(handle)
                if available < 0 {
                    try recover(Int32(truncatingIfNeeded: available), "snd_pcm_avail")
                    continue
                }
                return max(0, parameters.bufferFrames - Int(available))
            case SND_PCM_STATE_RUNNING, SND_PCM_STATE_DRAINING:
                var delay: snd_pcm_sframes_t = 0
                let result = snd_pcm_delay(handle, &delay)
                if result < 0 {
                    if PCMErrorKind(code: result) == .underrun { return 0 }
                    try recover(result, "snd_pcm_delay")
                    continue
                }
                return max(0, Int(delay))
            case SND_PCM_STATE_SUSPENDED:
                try recover(-ESTRPIPE, "snd_pcm_state")
            case SND_PCM_STATE_DISCONNECTED:
                throw AlsaError(function: "snd_pcm_state (disconnected)", code: -ENODEV)
            default:
                // XRUN (ran dry: everything was played), SETUP, OPEN.
                return 0
            }
        }
    }

    /// Waits until what was written has been played. Returns false, leaving the rest playing, as soon as
    /// `interrupt` (given the frames still pending) says so — checked at least once per period, on every
    /// wake-up, and as soon as the point `mark` gives (the frames written after it) has been played.
    func waitUntilPlayed(mark: () -> Int?, interrupt: (Int) -> Bool) throws(AlsaError) -> Bool {
        var progress = PlayProgress(parameters)
        // Once the device has taken all that was written (its ring empty), what the delay still counts is the
        // latency behind the ring — a sound server's graph and its device — which plays out in real time. ALSA's
        // pipewire plugin reports that latency afresh at every graph cycle while the stream runs, so it never falls
        // to 0 (the VM's PipeWire, with the 2048 frames of headroom Debian's WirePlumber gives a device in a VM,
        // stayed at about 3,540 frames, and every announcement was taken for stuck and played again from its start):
        // from then on the delay counts down in real time from what it was.
        var emptied: (nanos: UInt64, frames: Int)?
        while true {
            var delay = try pendingFrames()
            if delay > 0 {
                if emptied == nil, snd_pcm_avail(handle) >= parameters.bufferFrames {
                    emptied = (Monotonic.nanos, delay)
                }
                if let emptied {
                    let elapsed = Int((Monotonic.nanos - emptied.nanos) * UInt64(parameters.sampleRate) / 1_000_000_000)
                    delay = min(delay, max(0, emptied.frames - elapsed))
                }
            }
            if delay > 0, snd_pcm_state(handle) == SND_PCM_STATE_PREPARED {
                // Less than the start threshold was written (a sound shorter than a period): start it now.
                try alsaCheck("snd_pcm_start") { snd_pcm_start(handle) }
            }
            if interrupt(delay) { return false }
            if delay <= 0 { return true }
            try progress.check(delay)
            // Until the next mark in front of the end, if any, else the end; at most a period.
            let next = mark().flatMap { $0 < delay ? $0 : nil } ?? 0
            wake.wait(
                milliseconds: min(parameters.milliseconds(delay - next), parameters.milliseconds(parameters.periodFrames))
                    + 1)
        }
    }

    /// Stops the stream once what was written has played (immediate after `waitUntilPlayed`).
    func drain() throws(AlsaError) {
        let state = snd_pcm_state(handle)
        guard state == SND_PCM_STATE_RUNNING || state == SND_PCM_STATE_PREPARED else { return }
        let result = snd_pcm_drain(handle)
        guard result == -EAGAIN else {
            try alsaCheck("snd_pcm_drain") { result }
            return
        }
        // Non-blocking: the stream is draining; wait for it, bounded by the buffer's length.
        let deadline = parameters.milliseconds(parameters.bufferFrames) * 2 + 100
        var waited = 0
        while snd_pcm_state(handle) == SND_PCM_STATE_DRAINING && waited < deadline {
            usleep(5_000)
            waited += 5
        }
        if snd_pcm_state(handle) == SND_PCM_STATE_DRAINING {
            try alsaCheck("snd_pcm_drop (drain did not finish in \(deadline) ms)") { snd_pcm_drop(handle) }
        }
    }

    /// Discards what is buffered (a cancel). The next write prepares the stream again.
    func drop() throws(AlsaError) {
        try alsaCheck("snd_pcm_drop") { snd_pcm_drop(handle) }
    }

    // MARK: - Recovery

    private func prepareIfNeeded() throws(AlsaError) {
        switch snd_pcm_state(handle) {
        case SND_PCM_STATE_SETUP, SND_PCM_STATE_XRUN:
            try alsaCheck("snd_pcm_prepare") { snd_pcm_prepare(handle) }
        case SND_PCM_STATE_SUSPENDED:
            try recover(-ESTRPIPE, "snd_pcm_state")
        case SND_PCM_STATE_DISCONNECTED:
            throw AlsaError(function: "snd_pcm_state (disconnected)", code: -ENODEV)
        default:
            break
        }
    }

    /// Waits in `poll` until the PCM has a period of room, reports an error, the wake descriptor fires, or
    /// `limit` milliseconds passed (then false: the caller's mark may have been played). Returns whether the PCM
    /// said it wants data.
    @discardableResult
    private func waitForRoom(limit: Int? = nil) throws(AlsaError) -> Bool {
        if snd_pcm_state(handle) == SND_PCM_STATE_PREPARED {
            // A full buffer that has not started (cannot happen with our start threshold, but costs nothing).
            try alsaCheck("snd_pcm_start") { snd_pcm_start(handle) }
        }
        let stuck = parameters.patienceMilliseconds
        let timeout = Int32(min(stuck, limit ?? stuck))
        for index in descriptors.indices { descriptors[index].revents = 0 }
        let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
        if ready < 0 {
            if errno == EINTR { return false }
            throw AlsaError(function: "poll", code: -errno)
        }
        if ready == 0 {
            if timeout < stuck { return false }
            throw AlsaError(function: "poll (no progress for \(timeout) ms)", code: -ETIMEDOUT)
        }
        if let last = descriptors.last, last.revents != 0 { wake.consume() }
        var events: UInt16 = 0
        let result = descriptors.withUnsafeMutableBufferPointer { buffer in
            snd_pcm_poll_descriptors_revents(handle, buffer.baseAddress, UInt32(buffer.count - 1), &events)
        }
        if result < 0 {
            // The PCM reported an error on its descriptors: the connection or device is gone.
            throw AlsaError(function: "snd_pcm_poll_descriptors_revents", code: result)
        }
        if events & UInt16(POLLERR) != 0 {
            switch snd_pcm_state(handle) {
            case SND_PCM_STATE_XRUN: try recover(-EPIPE, "poll")
            case SND_PCM_STATE_SUSPENDED: try recover(-ESTRPIPE, "poll")
            case SND_PCM_STATE_DISCONNECTED: throw AlsaError(function: "poll (disconnected)", code: -ENODEV)
            default: break
            }
            return false
        }
        return events & UInt16(POLLOUT) != 0
    }

    /// Recovers in place from an underrun, a suspend or an interrupted call; throws for anything else.
    private func recover(_ code: Int32, _ function: String) throws(AlsaError) {
        let kind = PCMErrorKind(code: code)
        switch kind {
        case .underrun:
            try alsaCheck("snd_pcm_prepare (after an underrun in \(function))") { snd_pcm_prepare(handle) }
        case .suspended:
            // Wait (up to a second) for the hardware to resume; re-prepare if it cannot.
            var result = snd_pcm_resume(handle)
            var tries = 0
            while result == -EAGAIN && tries < 100 {
                wake.wait(milliseconds: 10)
                result = snd_pcm_resume(handle)
                tries += 1
            }
            if result < 0 {
                try alsaCheck("snd_pcm_prepare (after a suspend in \(function))") { snd_pcm_prepare(handle) }
            }
        case .tryAgain:
            try waitForRoom()
            return
        case .interrupted:
            break
        case .deviceLost:
            throw AlsaError(function: function, code: code)
        }
        onRecovery(kind)
    }
}
