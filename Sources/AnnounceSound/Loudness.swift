import CEbur128

/// An error from libebur128: the call that failed and its error code.
public struct Ebur128Error: Error, Sendable, CustomStringConvertible {
    public var function: String
    public var code: Int32

    public var description: String {
        let name =
            switch code {
            case Int32(EBUR128_ERROR_NOMEM.rawValue): "out of memory"
            case Int32(EBUR128_ERROR_INVALID_MODE.rawValue): "invalid mode"
            case Int32(EBUR128_ERROR_INVALID_CHANNEL_INDEX.rawValue): "invalid channel index"
            case Int32(EBUR128_ERROR_NO_CHANGE.rawValue): "no change"
            default: "error"
            }
        return "\(function): \(name) (\(code))"
    }
}

/// Loudness measured with libebur128 (EBU R 128 / ITU-R BS.1770 K-weighting), used to match the loudness of a
/// pack's clips so that no word jumps out of an announcement.
public enum Loudness {
    /// The loudness of a whole mono clip in LUFS: its integrated loudness (BS.1770 K-weighting and gating)
    /// with the clip repeated end to end until it fills ``minimumMeasuredSeconds``, so that single syllables
    /// (≈ 150 ms, shorter than one 400 ms gating block) are measured like longer clips; repeating does not
    /// change a clip's mean power. `-infinity` for silence.
    ///
    /// (libebur128's window loudness would measure a clip as it is, but Debian's 1.2.6 allocates and clears
    /// about samplerate × 8 bytes per millisecond of window in `ebur128_set_max_window`: 100 MB for a one
    /// second clip.)
    public static func ofClip(_ samples: [Float], sampleRate: Int) throws(Ebur128Error) -> Double {
        guard !samples.isEmpty, sampleRate > 0 else { return -.infinity }
        guard let state = ebur128_init(1, UInt(sampleRate), Int32(EBUR128_MODE_I.rawValue)) else {
            throw Ebur128Error(function: "ebur128_init", code: Int32(EBUR128_ERROR_NOMEM.rawValue))
        }
        var handle: UnsafeMutablePointer<ebur128_state>? = state
        defer { ebur128_destroy(&handle) }
        let wanted = Int(minimumMeasuredSeconds * Double(sampleRate))
        var added = 0
        repeat {
            try check(
                "ebur128_add_frames_float",
                samples.withUnsafeBufferPointer { buffer in
                    ebur128_add_frames_float(state, buffer.baseAddress, buffer.count)
                })
            added += samples.count
        } while added < wanted
        var loudness = 0.0
        try check("ebur128_loudness_global", ebur128_loudness_global(state, &loudness))
        return loudness
    }

    /// How long a clip is made (by repetition) before its integrated loudness is measured.
    public static let minimumMeasuredSeconds = 1.0

    private static func check(_ function: String, _ code: Int32) throws(Ebur128Error) {
        if code != Int32(EBUR128_SUCCESS.rawValue) && code != Int32(EBUR128_ERROR_NO_CHANGE.rawValue) {
            throw Ebur128Error(function: function, code: code)
        }
    }

    /// The libebur128 version, "major.minor.patch".
    public static var libraryVersion: String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        ebur128_get_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }
}
