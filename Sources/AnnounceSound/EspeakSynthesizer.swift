import AnnounceCore
import CEspeakNG
import CLazyLibraries
import Synchronization

/// An error from libespeak-ng: the call that failed, its `espeak_ERROR` code and what it means.
public struct EspeakError: Error, Sendable, CustomStringConvertible {
    public var function: String
    public var code: Int32
    public var message: String

    public var description: String { "\(function): \(message) (\(code))" }

    /// The library itself could not be loaded (the dynamic loader's reason).
    init(unloadable reason: String) {
        function = "dlopen"
        code = -1
        message = reason
    }

    init(_ function: String, code: Int32) {
        self.function = function
        self.code = code
        self.message =
            switch code {
            case EE_BUFFER_FULL.rawValue: "buffer full"
            case EE_NOT_FOUND.rawValue: "not found"
            default: "internal error (espeak-ng data missing?)"
            }
    }
}

/// libespeak-ng, which keeps process-wide state: one lock serialises every call, and the library is loaded and
/// initialised once, on first use, in synchronous mode (samples come back through a callback). Loaded then, not
/// at the daemon's start: only free text needs it, and on Debian it brings libpcaudio, libpulse, X11, xcb and
/// D-Bus with it (about 1 MB of the idle daemon's RSS); one that cannot be loaded fails that text, with the loader's
/// reason, while payments, made of the pack's clips, go on.
enum Espeak {
    /// The library's output rate, once initialised.
    private static let state = Mutex<Int?>(nil)

    /// Collects the samples espeak-ng hands to the callback during one `espeak_Synth` call.
    final class Collector {
        var samples: [Int16] = []
    }

    /// Synthesises `text` (UTF-8, SSML allowed) with `voice` at `speed` words per minute.
    /// Returns 16-bit samples and their rate.
    static func synthesise(_ text: String, voice: String, speed: Int) throws(EspeakError) -> (
        samples: [Int16], rate: Int
    ) {
        let result: Result<(samples: [Int16], rate: Int), EspeakError> = state.withLock { rate in
            if rate == nil {
                if let reason = EspeakSynthesizer.unavailableReason() {
                    return .failure(EspeakError(unloadable: reason))
                }
                let initialised = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nil, 0)
                guard initialised > 0 else { return .failure(EspeakError("espeak_Initialize", code: initialised)) }
                espeak_SetSynthCallback { wave, count, events in
                    guard let wave, count > 0, let context = events?.pointee.user_data else { return 0 }
                    let collector = Unmanaged<Collector>.fromOpaque(context).takeUnretainedValue()
                    collector.samples.append(contentsOf: UnsafeBufferPointer(start: wave, count: Int(count)))
                    return 0
                }
                rate = Int(initialised)
            }
            let voiceSet = espeak_SetVoiceByName(voice)
            guard voiceSet == EE_OK else {
                return .failure(EspeakError("espeak_SetVoiceByName(\(voice))", code: voiceSet.rawValue))
            }
            let speedSet = espeak_SetParameter(espeakRATE, Int32(speed), 0)
            guard speedSet == EE_OK else {
                return .failure(EspeakError("espeak_SetParameter(rate)", code: speedSet.rawValue))
            }
            let collector = Collector()
            let context = Unmanaged.passRetained(collector)
            defer { context.release() }
            let flags = UInt32(espeakCHARS_UTF8 | espeakSSML)
            let status = text.withCString { pointer in
                espeak_Synth(pointer, text.utf8.count + 1, 0, POS_CHARACTER, 0, flags, nil, context.toOpaque())
            }
            guard status == EE_OK else { return .failure(EspeakError("espeak_Synth", code: status.rawValue)) }
            return .success((collector.samples, rate ?? 22050))
        }
        return try result.get()
    }
}

/// Speaks free text with libespeak-ng in a pack's voice (``SpeechSettings``), prepared like the pack's clips
/// (``ClipPreparer``: resampled to the pack rate, trimmed, loudness matched, faded). Results are cached by
/// text, so an operator message repeated every few minutes is synthesised once.
public final class EspeakSynthesizer: SpeechSynthesizer {
    public let settings: SpeechSettings
    public let preparer: ClipPreparer
    public let cacheCapacity: Int

    private struct Cache {
        var entries: [String: [Float]] = [:]
        /// Keys, least recently used first.
        var order: [String] = []
        var hits = 0
        var misses = 0
    }

    private let cache = Mutex(Cache())

    public init(settings: SpeechSettings, preparer: ClipPreparer, cacheCapacity: Int = 64) {
        self.settings = settings
        self.preparer = preparer
        self.cacheCapacity = max(1, cacheCapacity)
    }

    /// Why free text cannot be spoken here (libespeak-ng cannot be loaded: the loader's reason), or nil. Loads
    /// the library: for `--check-config`, not for a daemon that may never speak text.
    public static func unavailableReason() -> String? {
        var reason = [CChar](repeating: 0, count: 512)
        guard announce_lazy_load(Int32(ANNOUNCE_LAZY_ESPEAK), &reason, reason.count) != 0 else { return nil }
        return String(cBuffer: reason)
    }

    /// Cache hits and misses so far (each miss was one synthesis).
    public var cacheCounts: (hits: Int, misses: Int) { cache.withLock { ($0.hits, $0.misses) } }

    public func speech(for text: String) throws(AnnounceError) -> [Float] {
        let cached: [Float]? = cache.withLock { cache in
            guard let samples = cache.entries[text] else { return nil }
            cache.hits += 1
            cache.order.removeAll { $0 == text }
            cache.order.append(text)
            return samples
        }
        if let cached { return cached }

        let raw: (samples: [Int16], rate: Int)
        do {
            raw = try Espeak.synthesise(ssml(text), voice: settings.voice, speed: settings.speed)
        } catch where error.function == "dlopen" {
            throw AnnounceError(.synthesisFailed, "libespeak-ng cannot be loaded (\(error.message)): reinstall libespeak-ng1")
        } catch {
            throw AnnounceError(.synthesisFailed, "espeak-ng cannot speak the text", cause: error.description)
        }
        let prepared: [Float]
        do {
            prepared = try preparer.prepare(raw.samples.map { Float($0) / 32768 }, sampleRate: raw.rate).samples
        } catch {
            throw AnnounceError(.synthesisFailed, "the synthesised speech \(error)")
        }
        cache.withLock { cache in
            cache.misses += 1
            if cache.entries.updateValue(prepared, forKey: text) == nil { cache.order.append(text) }
            while cache.order.count > cacheCapacity { cache.entries[cache.order.removeFirst()] = nil }
        }
        return prepared
    }

    /// The text as SSML for espeak-ng: escaped, inside the voice's prosody.
    func ssml(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&apos;"
            default: escaped.append(character)
            }
        }
        if let range = settings.pitchRange {
            return "<speak><prosody range=\"\(range)\">\(escaped)</prosody></speak>"
        }
        return "<speak>\(escaped)</speak>"
    }
}
