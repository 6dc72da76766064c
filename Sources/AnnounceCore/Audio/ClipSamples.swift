#if canImport(Glibc)
import Glibc
#endif

/// One clip's prepared samples, as played (16-bit, mono, at the pack's rate), read-only. They are held in an array,
/// or lie in a file of prepared clips mapped into memory (`PreparedClips` in AnnounceSound): mapped, a clip takes
/// memory only while it is being read, and the kernel can drop its pages again when memory runs short, since they
/// are clean copies of the file.
public struct ClipSamples: Sendable, RandomAccessCollection, Equatable, CustomStringConvertible {
    /// A read-only file mapping, unmapped when the last clip that lies in it goes.
    public final class Mapping: @unchecked Sendable {  // read-only after init; never written through
        let base: UnsafeRawPointer
        let byteCount: Int

        /// Takes over a mapping made with `mmap` (read-only).
        public init(base: UnsafeRawPointer, byteCount: Int) {
            self.base = base
            self.byteCount = byteCount
        }

        deinit { munmap(UnsafeMutableRawPointer(mutating: base), byteCount) }
    }

    private enum Storage: Sendable {
        case array([Int16])
        case mapped(Mapping)
    }

    private let storage: Storage
    /// Where the samples start in their mapping, in bytes (0 for samples held in an array).
    public let offset: Int
    public let count: Int

    /// Samples held in an array.
    public init(_ samples: [Int16]) {
        storage = .array(samples)
        offset = 0
        count = samples.count
    }

    /// `count` samples at byte `offset` of `mapping` (an offset that is a multiple of 2, inside it).
    public init(mapping: Mapping, offset: Int, count: Int) {
        precondition(offset >= 0 && offset % 2 == 0 && count >= 0 && offset + count * 2 <= mapping.byteCount)
        storage = .mapped(mapping)
        self.offset = offset
        self.count = count
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }
    public subscript(position: Int) -> Int16 {
        precondition(position >= 0 && position < count, "sample index out of range")
        return withContiguousStorageIfAvailable { $0[position] }!
    }

    public func withContiguousStorageIfAvailable<R>(_ body: (UnsafeBufferPointer<Int16>) throws -> R) rethrows -> R? {
        switch storage {
        case let .array(samples):
            return try samples.withUnsafeBufferPointer(body)
        case let .mapped(mapping):
            let start = (mapping.base + offset).assumingMemoryBound(to: Int16.self)
            return try body(UnsafeBufferPointer(start: start, count: count))
        }
    }

    /// The samples as an array.
    public var array: [Int16] {
        if case let .array(samples) = storage { return samples }
        return withContiguousStorageIfAvailable(Array.init)!
    }

    public static func == (lhs: ClipSamples, rhs: ClipSamples) -> Bool {
        lhs.withContiguousStorageIfAvailable { left in rhs.withContiguousStorageIfAvailable { left.elementsEqual($0) } }!!
    }

    public var description: String { "\(count) samples" }
}
