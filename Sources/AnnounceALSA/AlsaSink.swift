import AnnounceCore
import Logging
import Synchronization

/// The daemon's sink: an ALSA PCM, opened on demand, written without blocking, woken through an eventfd.
///
/// The audio thread calls everything except `wake()` and `status`. Errors it cannot recover from in place
/// (the device is gone) are thrown as `audio_device` with the ALSA call and its error text as the cause; the
/// player then closes the sink and retries with backoff.
public final class AlsaSink: AudioSink, @unchecked Sendable {
    public let device: String
    public let periodMicroseconds: Int
    public let periods: Int
    private let logger: Logger
    private let wakeDescriptor = WakeDescriptor()
    private var pcm: PCMDevice?
    private let state: Mutex<SinkStatus>

    public init(device: String, periodMicroseconds: Int = 80_000, periods: Int = 4, logger: Logger? = nil) {
        self.device = device
        self.periodMicroseconds = periodMicroseconds
        self.periods = periods
        self.logger = logger ?? Logger(label: "announce.alsa")
        self.state = Mutex(SinkStatus(device: device))
    }

    /// The negotiated parameters while open. Audio thread.
    public var parameters: PCMParameters? { pcm?.parameters }

    public var status: SinkStatus { state.withLock { $0 } }

    public func open(sampleRate: Int) throws(AnnounceError) {
        if let pcm, pcm.parameters.sampleRate == sampleRate { return }
        close()
        let opened: PCMDevice
        do {
            opened = try PCMDevice(
                name: device, sampleRate: sampleRate, periodMicroseconds: periodMicroseconds, periods: periods,
                wake: wakeDescriptor)
        } catch {
            throw error.announceError(.audioDevice, "cannot open ALSA PCM \"\(device)\"")
        }
        opened.onRecovery = { [weak self] kind in
            guard let self else { return }
            state.withLock { status in
                switch kind {
                case .underrun: status.xruns += 1
                case .suspended: status.suspends += 1
                case .interrupted: status.interruptions += 1
                case .tryAgain, .deviceLost: break
                }
            }
            logger.notice("ALSA PCM recovered", metadata: ["device": "\(device)", "from": "\(kind)"])
        }
        let parameters = opened.parameters
        state.withLock { status in
            status.isOpen = true
            status.opens += 1
            status.sampleRate = parameters.sampleRate
            status.channels = parameters.channels
            status.format = parameters.format.rawValue
            status.periodFrames = parameters.periodFrames
            status.bufferFrames = parameters.bufferFrames
            status.sharedRing = parameters.sharedRing
        }
        logger.debug(
            "ALSA PCM open",
            metadata: [
                "device": "\(device)", "rate": "\(parameters.sampleRate)", "format": "\(parameters.format.rawValue)",
                "channels": "\(parameters.channels)", "period": "\(parameters.periodFrames)",
                "buffer": "\(parameters.bufferFrames)", "shared_ring": "\(parameters.sharedRing)",
            ])
        pcm = opened
    }

    public func write(_ samples: ArraySlice<Int16>, stop: () -> Bool, mark: () -> Int?) throws(AnnounceError) -> Int {
        guard let pcm else { throw AnnounceError(.audioDevice, "ALSA PCM \"\(device)\" is not open") }
        do {
            return try samples.withUnsafeBufferPointer { buffer throws(AlsaError) in
                try pcm.write(buffer, stop: stop, mark: mark)
            }
        } catch {
            throw error.announceError(.audioDevice, "writing to ALSA PCM \"\(device)\" failed")
        }
    }

    public func pendingFrames() throws(AnnounceError) -> Int {
        guard let pcm else { return 0 }
        do {
            return try pcm.pendingFrames()
        } catch {
            throw error.announceError(.audioDevice, "ALSA PCM \"\(device)\" failed while playing out")
        }
    }

    public func waitUntilPlayed(mark: () -> Int?, interrupt: (_ pendingFrames: Int) -> Bool) throws(AnnounceError)
        -> Bool
    {
        guard let pcm else { return true }
        do {
            return try pcm.waitUntilPlayed(mark: mark, interrupt: interrupt)
        } catch {
            throw error.announceError(.audioDevice, "ALSA PCM \"\(device)\" failed while playing out")
        }
    }

    public func drain() {
        do { try pcm?.drain() } catch {
            logger.notice("ALSA PCM drain failed", metadata: ["device": "\(device)", "error": "\(error)"])
        }
    }

    public func drop() {
        do { try pcm?.drop() } catch {
            logger.notice("ALSA PCM drop failed", metadata: ["device": "\(device)", "error": "\(error)"])
        }
    }

    public func close() {
        guard let pcm else { return }
        self.pcm = nil
        state.withLock { $0.isOpen = false }
        do { try pcm.close() } catch {
            logger.notice("ALSA PCM close failed", metadata: ["device": "\(device)", "error": "\(error)"])
        }
    }

    public func wake() { wakeDescriptor.signal() }
}
