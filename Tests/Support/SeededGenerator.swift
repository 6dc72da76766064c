/// A random generator that is the same on every machine for one seed (SplitMix64): reproducible property checks and
/// fault schedules. SplitMix64 starts from the seed itself. (Starting from seed × the increment made seed n + 1's
/// stream seed n's shifted by one draw: neighbouring seeds made near-identical schedules.)
public struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
