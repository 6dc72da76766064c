/// Capped exponential backoff with jitter: the n-th delay is drawn from [½·d, d] where
/// d = min(initial · 2ⁿ, maximum), so a fleet that lost its broker at once does not come back at once.
public struct Backoff: Sendable {
    public struct Policy: Sendable, Equatable {
        public var initialSeconds: Double
        public var maximumSeconds: Double

        public init(initialSeconds: Double, maximumSeconds: Double) {
            self.initialSeconds = initialSeconds
            self.maximumSeconds = maximumSeconds
        }
    }

    public let policy: Policy
    public private(set) var attempts = 0

    public init(_ policy: Policy) { self.policy = policy }

    /// The ceiling of the next delay, before jitter.
    public var ceiling: Double {
        let exponent = Double(min(attempts, 62))
        return min(
            policy.initialSeconds * Double(sign: .plus, exponent: Int(exponent), significand: 1),
            policy.maximumSeconds)
    }

    /// The next delay in seconds; `random` is a number in 0...1 (injected by tests).
    public mutating func next(random: Double = Double.random(in: 0...1)) -> Double {
        let delay = ceiling * (0.5 + 0.5 * min(max(random, 0), 1))
        attempts += 1
        return delay
    }

    /// After a success: the next failure waits the initial delay again.
    public mutating func reset() { attempts = 0 }
}
