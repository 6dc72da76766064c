import Glibc

/// A failed libsystemd call: which function, its negative errno, and `strerror`'s text.
public struct SystemdError: Error, Sendable, CustomStringConvertible, Equatable {
    public var function: String
    public var code: Int32
    public var message: String

    public init(function: String, code: Int32) {
        self.function = function
        self.code = code
        self.message = String(cString: strerror(-code))
    }

    public var description: String { "\(function): \(message) (\(code))" }
}

/// Checks a libsystemd return code: negative (−errno) → `SystemdError`, otherwise the value.
@discardableResult
@inline(__always)
func systemdCheck(_ function: String, _ body: () -> Int32) throws(SystemdError) -> Int32 {
    let result = body()
    if result < 0 { throw SystemdError(function: function, code: result) }
    return result
}
