#if canImport(Glibc)
import Glibc
#endif

/// One clip's prepared samples, as played (16-bit, mono, at the pack's rate), read-only. They live either in
/// memory the clip owns or in a file of prepared clips mapped into memory (`PreparedClips` in AnnounceSound):
/// mapped, a clip takes memory only while it is being read, and the kernel can drop its pages again when memory
/// runs short, since they are clean copies of the file.
public struct ClipSamples: Sendable, RandomAccessCollection, Equatable, CustomStringConvertible {
    /// Memory holding samples: a buffer of its own, or a read-only file mapping; freed or unmapped with the last
    /// clip that uses it.
    public final class Memory: @unchecked Sendable {  // read-only after init; the pointer is never written through
        let base: UnsafeRawPointer
        let byteCount: Int
        private let mapped: Bool

        /// A copy of `samples` in memory of its own.
        init(copying samples: [Int16]) {
            let buffer = UnsafeMutableBufferPointer<Int16>.allocate(capacity: Swift.max(1, samples.count))
            _ = buffer.initialize(from: samples)
            base = UnsafeRawPointer(buffer.baseAddress!)
            byteCount = samples.count * 2
            mapped = false
        }

        /// Takes over a mapping made with `mmap` (read-only); it is unmapped when the last clip using it goes.
        public init(mapping: UnsafeRawPointer, byteCount: Int) {
            base = mapping
            self.byteCount = byteCount
            mapped = true
        }

        deinit {
            if mapped {
                munmap(UnsafeMutableRawPointer(mutating: base), byteCount)
            } else {
                base.deallocate()
            }
        }
    }

    public let memory: Memory
    /// Where the samples start in ``memory``, in bytes.
    public let offset: Int
    public let count: Int

    private var start: UnsafePointer<Int16> { (memory.base + offset).assumingMemoryBound(to: Int16.self) }

    /// The samples, copied into memory of their own.
    public init(_ samples: [Int16]) {
        memory = Memory(copying: samples)
        offset = 0
        count = samples.count
    }

    /// `count` samples at byte `offset` of `memory` (an offset that is a multiple of 2, inside it).
    public init(memory: Memory, offset: Int, count: Int) {
        precondition(offset >= 0 && offset % 2 == 0 && count >= 0 && offset + count * 2 <= memory.byteCount)
        self.memory = memory
        self.offset = offset
        self.count = count
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }
    public subscript(position: Int) -> Int16 {
        precondition(position >= 0 && position < count, "sample index out of range")
        return start[position]
    }

    public func withContiguousStorageIfAvailable<R>(_ body: (UnsafeBufferPointer<Int16>) throws -> R) rethrows -> R? {
        try body(UnsafeBufferPointer(start: start, count: count))
    }

    /// The samples as an array (a copy).
    public var array: [Int16] { Array(UnsafeBufferPointer(start: start, count: count)) }

    public static func == (lhs: ClipSamples, rhs: ClipSamples) -> Bool {
        lhs.count == rhs.count && memcmp(lhs.start, rhs.start, lhs.count * 2) == 0
    }

    public var description: String { "\(count) samples" }
}
