import CCrypto

/// A secret key for ``HMAC``: its bytes, as a plain value (`Sendable`).
public struct HMACKey: Sendable {
    /// The key's bytes.
    public let bytes: [UInt8]

    /// A key of these bytes.
    public init(_ bytes: some Sequence<UInt8>) { self.bytes = Array(bytes) }
}

extension HMACKey: CustomStringConvertible {
    /// The key's length only: a key printed by mistake (a log, a test's failure) does not show its bytes.
    public var description: String { "HMACKey(\(bytes.count) bytes)" }
}

/// HMAC (RFC 2104) with OpenSSL's libcrypto: the code of a message, and its constant-time check.
public enum HMAC {
    /// The hash function under the HMAC.
    public enum Hash: Sendable {
        case sha256, sha1

        /// Bytes in a code.
        public var byteCount: Int {
            switch self {
            case .sha256: 32
            case .sha1: 20
            }
        }

        /// OpenSSL's digest (a static object: nothing to free).
        var digest: OpaquePointer? {
            switch self {
            case .sha256: EVP_sha256()
            case .sha1: EVP_sha1()
            }
        }
    }

    /// The HMAC of `message` with `key` (``Hash/byteCount`` bytes).
    public static func code(_ hash: Hash, key: HMACKey, message: some Sequence<UInt8>) -> [UInt8] {
        precondition(key.bytes.count <= Int(Int32.max), "an HMAC key of more than 2 GiB")
        var code = [UInt8](repeating: 0, count: hash.byteCount)
        var length: UInt32 = 0
        OpenSSL.withBytes(key.bytes) { keyBytes, keyCount in
            OpenSSL.withBytes(message) { messageBytes, messageCount in
                _ = OpenSSL.check(
                    CCrypto.HMAC(
                        hash.digest, keyBytes, Int32(keyCount), messageBytes, messageCount, &code, &length),
                    "HMAC")
            }
        }
        guard Int(length) == hash.byteCount else { OpenSSL.fail("HMAC") }
        return code
    }

    /// Whether `code` is the HMAC of `message` with `key`: its length first, then its bytes in constant time.
    public static func isValid(
        _ code: some Sequence<UInt8>, _ hash: Hash, key: HMACKey, message: some Sequence<UInt8>
    ) -> Bool {
        let given = Array(code)
        guard given.count == hash.byteCount else { return false }
        let expected = Self.code(hash, key: key, message: message)
        return CRYPTO_memcmp(given, expected, expected.count) == 0
    }
}
