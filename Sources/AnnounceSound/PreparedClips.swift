import AnnounceCore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's files of prepared clips: one per voice pack, in `<state_dir>/prepared/`, holding every clip of the
/// pack exactly as it is played (16-bit, at the output rate, trimmed, loudness matched, faded). The daemon maps
/// the file instead of keeping the clips in its memory: a clip's pages are read in when it is spoken, and being
/// clean copies of the file, the kernel may drop them again when memory runs short. A start whose packs have not
/// changed maps the file and decodes nothing, so it never loads libsndfile, libsoxr or libebur128.
///
/// A file is named by a key over everything its samples depend on: the manifest, every clip file's bytes, the
/// output rate, the longest clip accepted, the file format, and the running executable (an upgrade prepares the
/// clips again). A file that does not match in every respect (torn, truncated, another format, another pack) is
/// not used; it is written again, atomically (``DurableFile``). docs/voice-packs.md, "Prepared clips".
///
/// Layout, little-endian: the header (`ANNCLIP1`, the key, the rate, the number of clips, where the samples
/// start), the index (per clip: its name's length, its number of samples, the byte offset of its samples, its
/// name padded to 8 bytes), then the samples.
public enum PreparedClips {
    static let magic = Array("ANNCLIP1".utf8)
    static let headerBytes = 32
    public static let suffix = ".clips"

    /// The file a pack with this key is prepared in.
    public static func path(in directory: String, key: UInt64) -> String {
        let hex = String(key, radix: 16)
        return Path.join(directory, String(repeating: "0", count: 16 - hex.count) + hex + suffix)
    }

    /// The key of a pack: the manifest's bytes, each clip file's name, size and bytes, the output rate and the
    /// longest clip accepted (`limits`), and the running executable's identity. Nil when a clip cannot be read
    /// (the caller decodes, which says what is wrong with it).
    static func key(
        directory: String, manifest: [UInt8], files: [String], outputRate: Int, limits: Double
    ) -> UInt64? {
        var hasher = StableHasher()
        magic.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(executableIdentity())
        hasher.combine(UInt64(outputRate))
        hasher.combine(limits.bitPattern)
        manifest.withUnsafeBytes { hasher.combine(bytes: $0) }
        for file in files {
            Array(file.utf8).withUnsafeBytes { hasher.combine(bytes: $0) }
            guard let descriptor = try? PackFile.open(file, in: directory) else { return nil }
            defer { close(descriptor) }
            var size = 0
            let failure = WholeFile.chunks(descriptor) { chunk in
                hasher.combine(bytes: chunk)
                size += chunk.count
                return true
            }
            guard failure == nil else { return nil }
            hasher.combine(UInt64(size))
        }
        return hasher.finish()
    }

    /// The clips of the file at `path`, mapped, if it is a complete file of prepared clips with this `key`, at
    /// this `rate`, holding exactly `files`; nil otherwise (missing, torn, or made for something else).
    static func map(_ path: String, key: UInt64, rate: Int, files: [String]) -> [String: ClipSamples]? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size >= headerBytes else {
            return nil
        }
        let size = Int(info.st_size)
        // The header and the index are read, not mapped: a page of the mapping that is touched comes into the
        // daemon's memory with its neighbours (the kernel's fault-around), and only clips being spoken should.
        var head = [UInt8](repeating: 0, count: headerBytes)
        guard readFully(descriptor, &head, at: 0), Array(head[0..<8]) == magic,
            word(head, 8, UInt64.self) == key, word(head, 16, UInt32.self) == UInt32(rate),
            let count = word(head, 20, UInt32.self).map(Int.init), count == files.count,
            let indexEnd = word(head, 24, UInt64.self).flatMap({ Int(exactly: $0) }),
            indexEnd >= headerBytes, indexEnd <= size, indexEnd - headerBytes <= count * (16 + 4096)
        else { return nil }
        var index = [UInt8](repeating: 0, count: indexEnd - headerBytes)
        guard readFully(descriptor, &index, at: headerBytes) else { return nil }
        var entries: [(name: String, offset: Int, samples: Int)] = []
        var position = 0
        for _ in 0..<count {
            guard let nameLength = word(index, position, UInt32.self).map(Int.init),
                let samples = word(index, position + 4, UInt32.self).map(Int.init),
                let offset = word(index, position + 8, UInt64.self).flatMap({ Int(exactly: $0) }),
                position + 16 + nameLength <= index.count
            else { return nil }
            let name = String(decoding: index[(position + 16)..<(position + 16 + nameLength)], as: UTF8.self)
            position += 16 + padded(nameLength)
            guard offset % 2 == 0, offset >= indexEnd, offset <= size, samples <= (size - offset) / 2 else {
                return nil
            }
            entries.append((name, offset, samples))
        }
        guard Set(entries.map(\.name)) == Set(files) else { return nil }
        guard let address = mmap(nil, size, PROT_READ, MAP_PRIVATE, descriptor, 0), address != MAP_FAILED else {
            return nil
        }
        // Into the page cache now, while the daemon starts, rather than from flash under the first announcement.
        // Only the pages of the clips being spoken come into the daemon's own memory.
        _ = posix_fadvise(descriptor, 0, 0, POSIX_FADV_WILLNEED)
        let mapping = ClipSamples.Mapping(base: UnsafeRawPointer(address), byteCount: size)
        var clips: [String: ClipSamples] = [:]
        for entry in entries {
            clips[entry.name] = ClipSamples(mapping: mapping, offset: entry.offset, count: entry.samples)
        }
        return clips
    }

    private static func word<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, _: T.Type) -> T? {
        guard offset >= 0, offset + MemoryLayout<T>.size <= bytes.count else { return nil }
        return bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
    }

    private static func readFully(_ descriptor: Int32, _ buffer: inout [UInt8], at offset: Int) -> Bool {
        var done = 0
        while done < buffer.count {
            let count = buffer.withUnsafeMutableBytes {
                pread(descriptor, $0.baseAddress! + done, $0.count - done, off_t(offset + done))
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            done += count
        }
        return true
    }

    /// Writes the clips of a pack to `path`, atomically and durably.
    static func write(
        _ clips: [String: [Int16]], key: UInt64, rate: Int, to path: String
    ) throws(DurableFile.Failure) {
        let names = clips.keys.sorted()
        var header = magic
        func append<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) }
        }
        append(key)
        append(UInt32(rate))
        append(UInt32(names.count))
        var offset = headerBytes + names.reduce(0) { $0 + 16 + padded($1.utf8.count) }
        let samplesStart = offset
        append(UInt64(samplesStart))
        for name in names {
            let count = clips[name]?.count ?? 0
            append(UInt32(name.utf8.count))
            append(UInt32(count))
            append(UInt64(offset))
            header.append(contentsOf: name.utf8)
            header.append(contentsOf: repeatElement(0, count: padded(name.utf8.count) - name.utf8.count))
            offset += count * 2
        }
        precondition(header.count == samplesStart)
        header.reserveCapacity(offset)
        // The samples as they lie in memory: little-endian on every machine this is built for (x86-64, arm64),
        // as the mapping reads them.
        for name in names { clips[name]?.withUnsafeBytes { header.append(contentsOf: $0) } }
        try DurableFile.replace(path, with: header, mode: 0o640)
    }

    /// Removes the files of prepared clips in `directory` that are not in `keep`, and any half-written one left by
    /// a power cut. The daemon calls this once a whole library has loaded; a file still mapped by a library being
    /// replaced stays readable until it is unmapped.
    public static func prune(_ directory: String, keep: Set<String>) {
        var removed = false
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        where name.hasSuffix(suffix) || name.hasSuffix(suffix + ".tmp") {
            let path = Path.join(directory, name)
            if !keep.contains(path) && unlink(path) == 0 { removed = true }
        }
        if removed { try? DurableFile.syncDirectory(directory) }
    }

    private static func padded(_ count: Int) -> Int { (count + 7) & ~7 }

    /// The running executable's device, inode, size and change time: another build or an upgrade differs.
    private static func executableIdentity() -> UInt64 {
        var info = stat()
        guard stat("/proc/self/exe", &info) == 0 else { return 0 }
        var hasher = StableHasher()
        for value in [UInt64(info.st_dev), UInt64(info.st_ino), UInt64(info.st_size)] { hasher.combine(value) }
        hasher.combine(UInt64(bitPattern: Int64(info.st_mtim.tv_sec)))
        hasher.combine(UInt64(bitPattern: Int64(info.st_mtim.tv_nsec)))
        return hasher.finish()
    }
}

/// A 64-bit hash that is the same in every process (Swift's `Hasher` is seeded per process), to name files by
/// their content. Not a cryptographic hash: it tells apart inputs that changed, not inputs made to collide (whoever
/// can write the prepared clips can write the voice packs too).
struct StableHasher {
    private var state: UInt64 = 0x243F_6A88_85A3_08D3

    mutating func combine(_ value: UInt64) {
        state = (state ^ (value &* 0x9E37_79B9_7F4A_7C15)).rotatedLeft(by: 27) &* 0xBF58_476D_1CE4_E5B9 &+ 0x94D0_49BB
    }

    /// The bytes, eight at a time, then their count.
    mutating func combine(bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset + 8 <= bytes.count {
            combine(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            offset += 8
        }
        var tail: UInt64 = 0
        for (index, byte) in bytes[offset...].enumerated() { tail |= UInt64(byte) << (8 * UInt64(index)) }
        combine(tail)
        combine(UInt64(bytes.count))
    }

    func finish() -> UInt64 {
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}

extension UInt64 {
    fileprivate func rotatedLeft(by count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
