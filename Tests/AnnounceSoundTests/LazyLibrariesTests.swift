import CLazyLibraries
import Testing

/// The C libraries are loaded on first use (Sources/CLazyLibraries): a function the code calls that is not
/// listed there fails the link; this checks the other half, that every listed function is in its library as the
/// machine has it (a library that dropped or renamed one would otherwise fail only when that call is made).
@Suite struct LazyLibrariesTests {
    /// A C string in a buffer, up to its NUL.
    func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test(arguments: 0..<ANNOUNCE_LAZY_LIBRARIES)
    func everyListedFunctionIsInItsLibrary(library: Int) throws {
        let name = String(cString: try #require(announce_lazy_library_name(Int32(library))))
        #expect(announce_lazy_symbol_count(Int32(library)) > 0, "\(name) lists no function")
        var missing = [CChar](repeating: 0, count: 512)
        let count = announce_lazy_check(Int32(library), &missing, missing.count)
        #expect(count == 0, "\(name): \(count) missing, the first: \(text(missing))")
        #expect(announce_lazy_is_loaded(Int32(library)) != 0)
    }

    @Test func anUnknownLibraryIsAnError() {
        var error = [CChar](repeating: 0, count: 128)
        #expect(announce_lazy_load(Int32(ANNOUNCE_LAZY_LIBRARIES), &error, error.count) == -1)
        #expect(text(error) == "no library \(ANNOUNCE_LAZY_LIBRARIES)")
        #expect(announce_lazy_library_name(-1) == nil)
    }
}
