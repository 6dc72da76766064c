import AnnounceCore
import CAlsa

/// A failed libasound call: which function, its negative error code, and `snd_strerror`'s text.
public struct AlsaError: Error, Sendable, CustomStringConvertible, Equatable {
    public var function: String
    public var code: Int32
    public var message: String

    public init(function: String, code: Int32) {
        self.function = function
        self.code = code
        self.message = String(cString: snd_strerror(code))
    }

    public var description: String { "\(function): \(message) (\(code))" }

    /// What the code means to a PCM writer (underrun, suspend, retry, or the device is gone).
    public var kind: PCMErrorKind { PCMErrorKind(code: code) }

    /// The domain error for the socket protocol and logs, with this one as the cause.
    func announceError(_ code: AnnounceError.Code, _ message: String) -> AnnounceError {
        AnnounceError(code, message, cause: description)
    }
}

/// Checks a libasound return code: negative → `AlsaError` naming `function`, otherwise the value.
@discardableResult
@inline(__always)
func alsaCheck<T: BinaryInteger>(_ function: @autoclosure () -> String, _ body: () -> T) throws(AlsaError) -> T {
    let result = body()
    if result < 0 { throw AlsaError(function: function(), code: Int32(truncatingIfNeeded: result)) }
    return result
}
