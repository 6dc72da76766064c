import Foundation
import Synchronization

@testable import AnnounceCore

/// A sound card that keeps a tape: records every sample written and every call, and injects faults on cue in
/// the manner of swift-system's MockingDriver (a script of failures the code under test must survive).
///
/// It has a device buffer of `bufferFrames`: what is written goes into it, and comes out — is *heard*, appended
/// to `heard` — when later writes push it out, or while the player waits for the tail to play (a period per
/// step, and only when `playOut` lets it). A drop or a close without a drain discards what is in the buffer.
final class RecordingSink: AudioSink, @unchecked Sendable {
    private let lock = NSLock()
    private var _samples: [Int16] = []
    private var _heard: [Int16] = []
    private var _buffer: [Int16] = []
    private var _calls: [String] = []
    private var _status = SinkStatus(device: "fake")
    private var isOpen = false
    /// Frames per write call (the "period").
    let period: Int
    /// Called after each period is written (to pace, or to act mid-job).
    var afterPeriod: (() -> Void)?
    /// When set, each period waits this long for the "device" — or until `wake()` — like a real PCM in poll.
    var periodWait: DispatchTimeInterval?
    private let wakeSignal = DispatchSemaphore(value: 0)

    // Faults, consumed as they fire.
    /// `open` fails this many times before succeeding (device busy / not there).
    var openFailures = 0
    /// `open` fails while this says so (a device that is away for a while).
    var deviceAway: (() -> Bool)?
    /// The write that crosses this many total frames throws (the device vanished), once.
    var failWriteAtFrame: Int?
    /// At these total frame counts the device underruns; the sink recovers in place and counts it.
    var xrunAtFrames: Set<Int> = []
    /// `waitUntilPlayed` throws this many times (the device dies while the tail plays).
    var waitFailures = 0
    /// Frames the device holds before it plays them.
    let bufferFrames: Int
    /// While the player waits for the tail, each step asks this whether the device may play a period now; the
    /// step waits (for `wake()` or 10 ms) while it says no. Nil: always.
    var playOut: (() -> Bool)?
    /// A ring other clients share, as dmix's (``SinkStatus/sharedRing``).
    let sharedRing: Bool
    /// After each write: the frames written so far and how many of them had been heard.
    private var _fills: [(written: Int, heard: Int)] = []
    var fills: [(written: Int, heard: Int)] { lock.withLock { _fills } }

    init(period: Int = 16, bufferPeriods: Int = 4, sharedRing: Bool = false) {
        self.period = period
        self.bufferFrames = period * bufferPeriods
        self.sharedRing = sharedRing
    }

    /// Everything written, in order.
    var samples: [Int16] { lock.withLock { _samples } }
    /// What left the device: what a listener heard.
    var heard: [Int16] { lock.withLock { _heard } }
    /// Frames in the device buffer now.
    var pending: Int { lock.withLock { _buffer.count } }
    var calls: [String] { lock.withLock { _calls } }
    private func log(_ call: String) { lock.withLock { _calls.append(call) } }

    var status: SinkStatus { lock.withLock { _status } }

    func open(sampleRate: Int) throws(AnnounceError) {
        if lock.withLock({ isOpen }) { return }
        log("open(\(sampleRate))")
        if openFailures > 0 {
            openFailures -= 1
            throw AnnounceError(.audioDevice, "injected: device busy")
        }
        if let deviceAway, deviceAway() { throw AnnounceError(.audioDevice, "injected: device away") }
        lock.withLock {
            isOpen = true
            _status.isOpen = true
            _status.sampleRate = sampleRate
            _status.periodFrames = period
            _status.bufferFrames = bufferFrames
            _status.sharedRing = sharedRing
        }
    }

    /// `mark` is not needed here: this sink plays a period at a time, and the player checks after each.
    func write(_ samples: ArraySlice<Int16>, stop: () -> Bool, mark: () -> Int?) throws(AnnounceError) -> Int {
        var written = 0
        var index = samples.startIndex
        while index < samples.endIndex {
            if stop() { return written }
            if let periodWait, wakeSignal.wait(timeout: .now() + periodWait) == .success {
                continue  // woken: check `stop` again before writing
            }
            let end = min(index + period, samples.endIndex)
            let total = lock.withLock { _samples.count }
            if let frame = failWriteAtFrame, total + (end - index) >= frame {
                failWriteAtFrame = nil
                log("vanished")
                throw AnnounceError(.audioDevice, "injected: device vanished")
            }
            if let frame = xrunAtFrames.first(where: { $0 > total && $0 <= total + (end - index) }) {
                xrunAtFrames.remove(frame)
                log("xrun")
                lock.withLock {
                    _status.xruns += 1
                    // Ran dry: everything in the buffer was played.
                    _heard.append(contentsOf: _buffer)
                    _buffer = []
                }
            }
            lock.withLock {
                _samples.append(contentsOf: samples[index..<end])
                _buffer.append(contentsOf: samples[index..<end])
                let over = _buffer.count - bufferFrames
                if over > 0 {
                    _heard.append(contentsOf: _buffer.prefix(over))
                    _buffer.removeFirst(over)
                }
                _fills.append((_samples.count, _heard.count))
            }
            written += end - index
            index = end
            afterPeriod?()
        }
        return written
    }

    func pendingFrames() throws(AnnounceError) -> Int { pending }

    func waitUntilPlayed(mark: () -> Int?, interrupt: (Int) -> Bool) throws(AnnounceError) -> Bool {
        if waitFailures > 0 {
            waitFailures -= 1
            log("vanished in tail")
            throw AnnounceError(.audioDevice, "injected: device vanished while playing out")
        }
        while true {
            let left = pending
            if interrupt(left) { return false }
            if left == 0 { break }
            if let playOut, !playOut() {
                _ = wakeSignal.wait(timeout: .now() + .milliseconds(10))
                continue
            }
            lock.withLock {
                let step = min(period, _buffer.count)
                _heard.append(contentsOf: _buffer.prefix(step))
                _buffer.removeFirst(step)
            }
        }
        log("played")
        return true
    }

    func drain() {
        lock.withLock {
            _heard.append(contentsOf: _buffer)
            _buffer = []
        }
        log("drain")
    }

    func drop() {
        lock.withLock { _buffer = [] }
        log("drop")
    }

    func close() {
        let wasOpen = lock.withLock {
            defer {
                isOpen = false
                _status.isOpen = false
                _buffer = []
            }
            return isOpen
        }
        if wasOpen { log("close") }
    }

    /// Times another thread woke the sink.
    var wakes: Int { lock.withLock { _wakes } }
    private var _wakes = 0

    func wake() {
        lock.withLock { _wakes += 1 }
        wakeSignal.signal()
    }
}

/// A mixer element in memory: a "hardware" value the test (the user) may change at any time, a trace of every
/// call, and injected failures (forceErrno-style counters).
final class FakeVolumeControl: VolumeControl, @unchecked Sendable {
    let address: MixerElementAddress
    private let lock = NSLock()
    private var _value: VolumeReading
    private var _trace: [String] = []
    let rawRange: ClosedRange<Int>
    /// dB per raw step when the element has dB information (0 dB at the top), nil for none (like PulseAudio's).
    let centidBPerStep: Int?

    /// Reads fail this many times.
    var readFailures = 0
    /// Writes fail this many times.
    var writeFailures = 0
    /// Called after every successful write with the new value (a user reacting, a test checking order).
    var afterWrite: ((FakeVolumeControl) -> Void)?
    /// Called before every read (a user turning the knob between two reads).
    var beforeRead: ((FakeVolumeControl) -> Void)?

    init(
        _ address: String = "fake/Master", raw: [Int], switches: [Bool]? = [true], range: ClosedRange<Int> = 0...100,
        centidBPerStep: Int? = nil
    ) {
        self.address = try! MixerElementAddress(parsing: address)
        self._value = VolumeReading(raw: raw, switches: switches.map { s in raw.map { _ in s[0] } })
        self.rawRange = range
        self.centidBPerStep = centidBPerStep
    }

    /// The element's value as the hardware holds it.
    var value: VolumeReading {
        get { lock.withLock { _value } }
        set { lock.withLock { _value = newValue } }
    }

    var trace: [String] { lock.withLock { _trace } }
    var writes: [String] { trace.filter { $0.hasPrefix("write") } }

    /// What a user does with amixer: sets the value behind the daemon's back.
    func userSets(raw: [Int]? = nil, switches: [Bool]? = nil) {
        lock.withLock {
            if let raw { _value.raw = raw }
            if let switches { _value.switches = switches }
            _trace.append("user")
        }
    }

    func scale() throws(AnnounceError) -> VolumeScale {
        var scale = VolumeScale(raw: rawRange)
        if let step = centidBPerStep {
            let range = rawRange
            let top = range.upperBound
            scale.decibels = VolumeScale.Decibels(
                range: (range.lowerBound - top) * step...0,
                fromRaw: { raw in (raw - top) * step },
                toRaw: { centidB, roundUp in
                    let exact = Double(centidB) / Double(step) + Double(top)
                    let raw = Int(roundUp ? exact.rounded(.up) : exact.rounded(.down))
                    return min(range.upperBound, max(range.lowerBound, raw))
                })
        }
        return scale
    }

    func read() throws(AnnounceError) -> VolumeReading {
        beforeRead?(self)
        lock.lock()
        defer { lock.unlock() }
        _trace.append("read")
        if readFailures > 0 {
            readFailures -= 1
            throw AnnounceError(.mixer, "injected: control device gone")
        }
        return _value
    }

    func write(raw: [Int]) throws(AnnounceError) {
        try change { $0.raw = raw; return "write raw \(raw)" }
    }

    func write(switches: [Bool]) throws(AnnounceError) {
        try change { $0.switches = switches; return "write switches \(switches)" }
    }

    private func change(_ body: (inout VolumeReading) -> String) throws(AnnounceError) {
        lock.lock()
        if writeFailures > 0 {
            writeFailures -= 1
            _trace.append("write failed")
            lock.unlock()
            throw AnnounceError(.mixer, "injected: cannot set")
        }
        _trace.append(body(&_value))
        lock.unlock()
        afterWrite?(self)
    }
}
