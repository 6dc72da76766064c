import CCrypto

/// SHA-256 (FIPS 180-4) with OpenSSL's libcrypto, fed in pieces: ``update(_:)`` as the bytes come,
/// ``finalize()`` at the end. One owner at a time (not `Sendable`): it owns an `EVP_MD_CTX`, freed in `deinit`.
public final class SHA256 {
    /// Bytes in a digest.
    public static let byteCount = 32

    private let context: OpaquePointer

    /// A hasher that has seen no bytes yet.
    public init() {
        context = OpenSSL.check(EVP_MD_CTX_new(), "EVP_MD_CTX_new")
        OpenSSL.check(EVP_DigestInit_ex(context, EVP_sha256(), nil), "EVP_DigestInit_ex")
    }

    deinit { EVP_MD_CTX_free(context) }

    /// Adds `bytes` to what is hashed.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        OpenSSL.check(EVP_DigestUpdate(context, base, bytes.count), "EVP_DigestUpdate")
    }

    /// Adds `bytes` to what is hashed.
    public func update(_ bytes: some Sequence<UInt8>) {
        OpenSSL.withBytes(bytes) { base, count in update(UnsafeRawBufferPointer(start: base, count: count)) }
    }

    /// The digest of every byte added since `init` (or the last `finalize`); the hasher then starts again, empty.
    public func finalize() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Self.byteCount)
        var length: UInt32 = 0
        OpenSSL.check(EVP_DigestFinal_ex(context, &digest, &length), "EVP_DigestFinal_ex")
        guard Int(length) == Self.byteCount else { OpenSSL.fail("EVP_DigestFinal_ex") }
        OpenSSL.check(EVP_DigestInit_ex(context, EVP_sha256(), nil), "EVP_DigestInit_ex")
        return digest
    }

    /// The digest of `bytes`, at once.
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        let hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }
}
