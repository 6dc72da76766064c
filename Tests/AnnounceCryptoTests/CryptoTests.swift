import AnnounceCrypto
import Testing

/// Lowercase hex of `bytes`.
private func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xf)]] })
}

/// One published test case: key, message, expected code in hex.
struct HMACVector: Sendable, CustomTestStringConvertible {
    var name: String
    var key: [UInt8]
    var message: String
    var code: String
    var testDescription: String { name }
}

/// HMAC-SHA256, HMAC-SHA1 and SHA-256 against their published test vectors (RFC 4231, RFC 2202, FIPS 180-2), and
/// the check of a code.
struct CryptoTests {
    /// RFC 4231, section 4: test cases 1, 2 and 6 (a 131-byte key, longer than SHA-256's block: hashed first).
    static let sha256Vectors = [
        HMACVector(
            name: "RFC 4231 case 1", key: [UInt8](repeating: 0x0b, count: 20), message: "Hi There",
            code: "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        HMACVector(
            name: "RFC 4231 case 2", key: Array("Jefe".utf8), message: "what do ya want for nothing?",
            code: "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        HMACVector(
            name: "RFC 4231 case 6", key: [UInt8](repeating: 0xaa, count: 131),
            message: "Test Using Larger Than Block-Size Key - Hash Key First",
            code: "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
    ]

    /// RFC 2202, section 3: test cases 1 and 2.
    static let sha1Vectors = [
        HMACVector(
            name: "RFC 2202 case 1", key: [UInt8](repeating: 0x0b, count: 20), message: "Hi There",
            code: "b617318655057264e28bc0b6fb378c8ef146be00"),
        HMACVector(
            name: "RFC 2202 case 2", key: Array("Jefe".utf8), message: "what do ya want for nothing?",
            code: "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
    ]

    @Test(arguments: sha256Vectors)
    func hmacSHA256MatchesRFC4231(vector: HMACVector) {
        let code = HMAC.code(.sha256, key: HMACKey(vector.key), message: vector.message.utf8)
        #expect(hex(code) == vector.code)
        #expect(HMAC.isValid(code, .sha256, key: HMACKey(vector.key), message: vector.message.utf8))
    }

    @Test(arguments: sha1Vectors)
    func hmacSHA1MatchesRFC2202(vector: HMACVector) {
        let code = HMAC.code(.sha1, key: HMACKey(vector.key), message: vector.message.utf8)
        #expect(hex(code) == vector.code)
        #expect(HMAC.isValid(code, .sha1, key: HMACKey(vector.key), message: vector.message.utf8))
    }

    /// A message given as a sequence that is not contiguous in memory is the same message.
    @Test func aMessageInAnyShapeHasTheSameCode() {
        let vector = Self.sha256Vectors[1]
        let key = HMACKey(vector.key)
        let lazy = vector.message.utf8.lazy.map { $0 }
        #expect(hex(HMAC.code(.sha256, key: key, message: lazy)) == vector.code)
        #expect(hex(HMAC.code(.sha256, key: key, message: Array(vector.message.utf8))) == vector.code)
    }

    @Test func aWrongCodeOrOneOfAnotherLengthIsRefused() {
        let vector = Self.sha256Vectors[0]
        let key = HMACKey(vector.key)
        let message = Array(vector.message.utf8)
        let code = HMAC.code(.sha256, key: key, message: message)
        #expect(HMAC.isValid(code, .sha256, key: key, message: message))

        var flipped = code
        flipped[31] ^= 0x01
        #expect(!HMAC.isValid(flipped, .sha256, key: key, message: message))
        #expect(!HMAC.isValid(code.dropLast(), .sha256, key: key, message: message))
        #expect(!HMAC.isValid(code + [0], .sha256, key: key, message: message))
        #expect(!HMAC.isValid([], .sha256, key: key, message: message))
        // The right code of another message, another key or another hash.
        #expect(!HMAC.isValid(code, .sha256, key: key, message: message + [0]))
        #expect(!HMAC.isValid(code, .sha256, key: HMACKey(vector.key.dropLast()), message: message))
        #expect(!HMAC.isValid(HMAC.code(.sha1, key: key, message: message), .sha256, key: key, message: message))
        #expect(!HMAC.isValid(Array(code.prefix(20)), .sha1, key: key, message: message))
    }

    /// A key printed by mistake shows its length, not its bytes.
    @Test func aKeyDoesNotPrintItsBytes() {
        #expect("\(HMACKey([0xde, 0xad, 0xbe, 0xef]))" == "HMACKey(4 bytes)")
    }

    /// FIPS 180-2, appendix B.1, and the empty message.
    @Test func sha256OfAbcAndOfNothing() {
        #expect(hex(SHA256.hash("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex(SHA256().finalize()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    /// FIPS 180-2, appendix B.3: a million times "a", fed in chunks of uneven sizes (some empty), through both
    /// kinds of update.
    @Test func sha256OfAMillionAsInUnevenChunks() {
        let hasher = SHA256()
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 10_007)
        let sizes = [1, 0, 63, 64, 65, 7, 1000, 4095, 10_007, 333]
        var fed = 0
        var turn = 0
        while fed < 1_000_000 {
            let size = min(sizes[turn % sizes.count], 1_000_000 - fed)
            if turn % 2 == 0 {
                chunk.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[..<size])) }
            } else {
                hasher.update(chunk[..<size])
            }
            fed += size
            turn += 1
        }
        #expect(hex(hasher.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// After ``SHA256/finalize()`` the hasher starts again from nothing.
    @Test func aFinalizedHasherStartsAgain() {
        let hasher = SHA256()
        hasher.update("abc".utf8)
        #expect(hex(hasher.finalize()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        hasher.update("a".utf8)
        hasher.update("bc".utf8)
        #expect(hex(hasher.finalize()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
