import CAlsa

/// The sample formats the sink can write. Announcements are rendered as S16; a device that refuses S16 gets
/// the first of the others it accepts, converted exactly (S16 fits losslessly in each).
public enum SampleFormat: String, Sendable, CaseIterable {
    case s16 = "S16_LE"
    case s32 = "S32_LE"
    case float32 = "FLOAT_LE"
    case s24 = "S24_LE"
    case s24Packed = "S24_3LE"

    var alsa: snd_pcm_format_t {
        switch self {
        case .s16: SND_PCM_FORMAT_S16_LE
        case .s32: SND_PCM_FORMAT_S32_LE
        case .float32: SND_PCM_FORMAT_FLOAT_LE
        case .s24: SND_PCM_FORMAT_S24_LE
        case .s24Packed: SND_PCM_FORMAT_S24_3LE
        }
    }

    /// Bytes per sample in memory.
    public var bytes: Int {
        switch self {
        case .s16: 2
        case .s24Packed: 3
        case .s32, .float32, .s24: 4
        }
    }

    /// Writes `samples`, each repeated on `channels` interleaved channels, into `destination` (which holds at
    /// least `samples.count * channels * bytes` bytes), little-endian.
    public func encode(_ samples: UnsafeBufferPointer<Int16>, channels: Int, into destination: UnsafeMutableRawPointer) {
        var offset = 0
        for sample in samples {
            for _ in 0..<channels {
                switch self {
                case .s16:
                    destination.storeBytes(of: sample.littleEndian, toByteOffset: offset, as: Int16.self)
                case .s32:
                    destination.storeBytes(of: (Int32(sample) << 16).littleEndian, toByteOffset: offset, as: Int32.self)
                case .s24:
                    destination.storeBytes(of: (Int32(sample) << 8).littleEndian, toByteOffset: offset, as: Int32.self)
                case .s24Packed:
                    let value = UInt32(bitPattern: Int32(sample) << 8)
                    destination.storeBytes(of: UInt8(truncatingIfNeeded: value), toByteOffset: offset, as: UInt8.self)
                    destination.storeBytes(
                        of: UInt8(truncatingIfNeeded: value >> 8), toByteOffset: offset + 1, as: UInt8.self)
                    destination.storeBytes(
                        of: UInt8(truncatingIfNeeded: value >> 16), toByteOffset: offset + 2, as: UInt8.self)
                case .float32:
                    let value = Float(sample) / 32768
                    destination.storeBytes(of: value.bitPattern.littleEndian, toByteOffset: offset, as: UInt32.self)
                }
                offset += bytes
            }
        }
    }
}
