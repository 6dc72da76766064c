import CSoxr

/// An error from libsoxr: the call that failed and the library's message.
public struct SoxrError: Error, Sendable, CustomStringConvertible {
    public var function: String
    public var message: String

    public var description: String { "\(function): \(message)" }
}

/// Sample-rate conversion with libsoxr (the resampler sox itself uses, so a clip converted at load sounds like
/// one converted by the pack builder). Used once per clip when a pack is loaded, and for synthesised speech.
public enum Resampler {
    /// Converts mono samples from `inputRate` to `outputRate` with libsoxr's high quality (20-bit, linear
    /// phase) recipe. The result has `round(count × outputRate / inputRate)` samples, aligned with the input
    /// (libsoxr compensates its filter delay). Same rates: the input is returned unchanged.
    public static func convert(_ samples: [Float], from inputRate: Int, to outputRate: Int) throws(SoxrError) -> [Float]
    {
        guard inputRate != outputRate, !samples.isEmpty else { return samples }
        guard inputRate > 0, outputRate > 0 else {
            throw SoxrError(function: "soxr_oneshot", message: "invalid rates \(inputRate) → \(outputRate) Hz")
        }
        let wanted = Int((Double(samples.count) * Double(outputRate) / Double(inputRate)).rounded())
        var output = [Float](repeating: 0, count: wanted)
        var done = 0
        var io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I)
        var quality = soxr_quality_spec(UInt(SOXR_HQ), UInt(SOXR_LINEAR_PHASE))
        let error = samples.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                soxr_oneshot(
                    Double(inputRate), Double(outputRate), 1, input.baseAddress, input.count, nil,
                    out.baseAddress, out.count, &done, &io, &quality, nil)
            }
        }
        if let error {
            throw SoxrError(function: "soxr_oneshot", message: String(cString: error))
        }
        output.removeLast(wanted - done)
        return output
    }

    /// The libsoxr version string.
    public static var libraryVersion: String { String(cString: soxr_version()) }
}
