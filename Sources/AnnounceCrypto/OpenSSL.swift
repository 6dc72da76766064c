import CCrypto

/// What AnnounceCrypto's calls of libcrypto share: the check of every return code.
///
/// With the arguments this target gives them, OpenSSL's HMAC and digest functions fail only when memory runs out or
/// libcrypto itself is broken; nothing a caller could do differently. As CLazyLibraries does for a library it
/// cannot load, such a failure ends the process with the function's name and OpenSSL's reason (systemd restarts
/// the listener), rather than making every signature a `throws` that no caller could recover from.
enum OpenSSL {
    /// `value`, or the end of the process if `function` returned NULL.
    static func check<Value>(_ value: Value?, _ function: StaticString) -> Value {
        guard let value else { fail(function) }
        return value
    }

    /// Nothing, or the end of the process if `function` did not return 1 (OpenSSL's success).
    static func check(_ result: Int32, _ function: StaticString) {
        guard result == 1 else { fail(function) }
    }

    /// Ends the process with OpenSSL's reason for the last error on this thread.
    static func fail(_ function: StaticString) -> Never {
        let code = ERR_get_error()
        var text = [CChar](repeating: 0, count: 256)
        if code != 0 { ERR_error_string_n(code, &text, text.count) }
        let reason =
            code == 0
            ? "no reason given" : String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        fatalError("OpenSSL \(function) failed: \(reason)")
    }

    /// Calls `body` with `bytes` in contiguous memory whose base address is never nil (OpenSSL wants a pointer even
    /// for no bytes).
    static func withBytes<Result>(
        _ bytes: some Sequence<UInt8>, _ body: (UnsafePointer<UInt8>, Int) -> Result
    ) -> Result {
        let direct = bytes.withContiguousStorageIfAvailable { buffer in
            withBuffer(UnsafeRawBufferPointer(buffer), body)
        }
        if let direct { return direct }
        return Array(bytes).withUnsafeBytes { withBuffer($0, body) }
    }

    private static func withBuffer<Result>(
        _ buffer: UnsafeRawBufferPointer, _ body: (UnsafePointer<UInt8>, Int) -> Result
    ) -> Result {
        guard let base = buffer.baseAddress, !buffer.isEmpty else {
            return withUnsafePointer(to: UInt8(0)) { body($0, 0) }
        }
        return body(base.assumingMemoryBound(to: UInt8.self), buffer.count)
    }
}
