import AnnounceCore
import CLazyLibraries
import CSndFile
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An error from libsndfile: the call that failed, the file, and the library's own message.
public struct SndFileError: Error, Sendable, CustomStringConvertible {
    public var function: String
    public var path: String
    public var message: String

    public var description: String { "\(function)(\(path)): \(message)" }
}

/// Decoded audio: interleaved Float samples in −1…1.
public struct DecodedAudio: Sendable {
    public var samples: [Float]
    public var sampleRate: Int
    public var channels: Int
    public var frames: Int { channels == 0 ? 0 : samples.count / channels }
    public var seconds: Double { sampleRate == 0 ? 0 : Double(frames) / Double(sampleRate) }
}

/// Reading and writing sound files through libsndfile: WAV, FLAC, OGG/Vorbis, Opus and MP3, as far as the
/// installed library supports them (``Format/isSupported``).
public enum SoundFile {
    /// File formats the project writes (tests, conversions of packs). Reading takes whatever libsndfile reads.
    public enum Format: String, Sendable, CaseIterable {
        case wav, flac, ogg, opus, mp3

        /// The libsndfile major|minor format code.
        var code: Int32 {
            switch self {
            case .wav: Int32(SF_FORMAT_WAV | SF_FORMAT_PCM_16)
            case .flac: Int32(SF_FORMAT_FLAC | SF_FORMAT_PCM_16)
            case .ogg: Int32(SF_FORMAT_OGG | SF_FORMAT_VORBIS)
            case .opus: Int32(SF_FORMAT_OGG | SF_FORMAT_OPUS)
            case .mp3: Int32(SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III)
            }
        }

        /// The usual file name extension.
        public var fileExtension: String { rawValue }

        /// Whether this libsndfile can write mono files of this format at `sampleRate` (reading support comes
        /// with the same codec libraries).
        public func isSupported(sampleRate: Int) -> Bool {
            var info = SF_INFO()
            info.samplerate = Int32(sampleRate)
            info.channels = 1
            info.format = code
            return SoundFile.library.withLock { _ in
                return sf_format_check(&info) != 0
            }
        }
    }

    /// Decodes a whole file. Refuses files over `maximumFrames` before reading them.
    public static func read(path: String, maximumFrames: Int = 30 * 192_000) throws(SndFileError) -> DecodedAudio {
        return try library.withLock { _ throws(SndFileError) -> DecodedAudio in
            var info = SF_INFO()
            guard let file = sf_open(path, Int32(SFM_READ), &info) else {
                throw SndFileError(function: "sf_open", path: path, message: String(cString: sf_strerror(nil)))
            }
            return try read(file, info: info, path: path, maximumFrames: maximumFrames)
        }
    }

    /// Decodes a whole file already open for reading as `descriptor` (named `path` in errors). The caller keeps
    /// the descriptor and closes it.
    public static func read(
        descriptor: Int32, path: String, maximumFrames: Int = 30 * 192_000
    ) throws(SndFileError) -> DecodedAudio {
        // libsndfile is handed a duplicate of its own, which it closes: from 1.0.31 to 1.2.0 (Debian 12's),
        // sf_open_fd closes the descriptor it was given when the open fails, close_desc false or not (libsndfile
        // issue 949), and the caller's own close would then close whatever another thread had meanwhile opened
        // under the same number.
        let own = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard own >= 0 else {
            throw SndFileError(
                function: "fcntl(F_DUPFD_CLOEXEC)", path: path, message: String(cString: strerror(errno)))
        }
        return try library.withLock { _ throws(SndFileError) -> DecodedAudio in
            var info = SF_INFO()
            // SF_TRUE: sf_close, or the failed open itself, closes `own`.
            guard let file = sf_open_fd(own, Int32(SFM_READ), &info, Int32(SF_TRUE)) else {
                throw SndFileError(function: "sf_open_fd", path: path, message: String(cString: sf_strerror(nil)))
            }
            return try read(file, info: info, path: path, maximumFrames: maximumFrames)
        }
    }

    private static func read(
        _ file: OpaquePointer, info: SF_INFO, path: String, maximumFrames: Int
    ) throws(SndFileError) -> DecodedAudio {
        defer { sf_close(file) }
        let channels = Int(info.channels)
        // Some decoders (MP3) do not know the length in advance and report a huge or zero frame count; read in
        // blocks until the end then, still refusing more than the limit.
        let known = Int(info.frames)
        let blockFrames = 4096
        var samples: [Float] = []
        samples.reserveCapacity(min(max(known, 0), maximumFrames + 1) * channels)
        var block = [Float](repeating: 0, count: blockFrames * channels)
        while true {
            let read = block.withUnsafeMutableBufferPointer { buffer in
                sf_readf_float(file, buffer.baseAddress, sf_count_t(blockFrames))
            }
            if read < 0 || (read == 0 && sf_error(file) != 0) {
                throw SndFileError(function: "sf_readf_float", path: path, message: String(cString: sf_strerror(file)))
            }
            if read == 0 { break }
            samples.append(contentsOf: block[0..<(Int(read) * channels)])
            if samples.count / max(channels, 1) > maximumFrames {
                throw SndFileError(
                    function: "sf_readf_float", path: path,
                    message: "longer than the limit of \(maximumFrames) frames")
            }
        }
        if sf_error(file) != 0 {
            throw SndFileError(function: "sf_readf_float", path: path, message: String(cString: sf_strerror(file)))
        }
        return DecodedAudio(samples: samples, sampleRate: Int(info.samplerate), channels: channels)
    }

    /// Writes mono signed 16-bit samples as a WAV file.
    /// The samples are written as they are (no conversion), so the file holds exactly what the daemon plays.
    public static func writeWAV(path: String, samples: [Int16], sampleRate: Int) throws(SndFileError) {
        try library.withLock { _ throws(SndFileError) in
            var info = SF_INFO()
            info.samplerate = Int32(sampleRate)
            info.channels = 1
            info.format = Format.wav.code
            guard let file = sf_open(path, Int32(SFM_WRITE), &info) else {
                throw SndFileError(function: "sf_open", path: path, message: String(cString: sf_strerror(nil)))
            }
            let written = samples.withUnsafeBufferPointer { buffer in
                sf_writef_short(file, buffer.baseAddress, sf_count_t(samples.count))
            }
            try finish(file, path: path, function: "sf_writef_short", complete: written == samples.count)
        }
    }

    /// Writes mono Float samples (−1…1) in `format` (lossy formats encode at the codec's default quality).
    public static func write(path: String, samples: [Float], sampleRate: Int, format: Format) throws(SndFileError) {
        try library.withLock { _ throws(SndFileError) in
            var info = SF_INFO()
            info.samplerate = Int32(sampleRate)
            info.channels = 1
            info.format = format.code
            guard sf_format_check(&info) != 0 else {
                throw SndFileError(
                    function: "sf_format_check", path: path,
                    message: "this libsndfile cannot write \(format.rawValue) at \(sampleRate) Hz")
            }
            guard let file = sf_open(path, Int32(SFM_WRITE), &info) else {
                throw SndFileError(function: "sf_open", path: path, message: String(cString: sf_strerror(nil)))
            }
            let written = samples.withUnsafeBufferPointer { buffer in
                sf_writef_float(file, buffer.baseAddress, sf_count_t(samples.count))
            }
            try finish(file, path: path, function: "sf_writef_float", complete: written == samples.count)
        }
    }

    /// Closes a file being written, turning a short write or a failed close into an error.
    private static func finish(
        _ file: OpaquePointer, path: String, function: String, complete: Bool
    ) throws(SndFileError) {
        let message = complete ? nil : String(cString: sf_strerror(file))
        let closed = sf_close(file)
        if let message { throw SndFileError(function: function, path: path, message: message) }
        if closed != 0 {
            throw SndFileError(function: "sf_close", path: path, message: String(cString: sf_error_number(closed)))
        }
    }

    /// The libsndfile version string, for `status` and logs.
    public static var libraryVersion: String {
        return library.withLock { _ -> String in
            return String(cString: sf_version_string())
        }
    }

    /// Held by every call into libsndfile, so that ``unloadLibrary()`` never takes the library away from under one.
    static let library = Mutex(())

    /// Unloads libsndfile and the codec libraries it brought (FLAC, Vorbis, Opus, MPEG: about 0.9 MB of the
    /// daemon's resident memory on arm64). The daemon decodes its voice packs at start and at a reload and calls
    /// this after each; the next use here loads the library again. Waits for a call in progress. Returns
    /// dlclose's complaint if it had one (the library then stays as it was: loaded or not, every call works).
    @discardableResult
    public static func unloadLibrary() -> String? {
        return library.withLock { _ -> String? in
            var error = [CChar](repeating: 0, count: 512)
            guard announce_lazy_unload(Int32(ANNOUNCE_LAZY_SNDFILE), &error, error.count) == 0 else {
                return String(cBuffer: error)
            }
            return nil
        }
    }
}
