/// Polls `attempt` every `interval` until it returns a value, or `timeout` passes (nil then). An attempt begun
/// after the deadline is the last, but there always is one: a poller starved past its deadline (a loaded CI
/// machine, the arm64 tests under qemu-user, where 2 cores run every suite at once) still sees what happened
/// while it waited, instead of failing on the clock.
public func eventuallyValue<T>(
    timeout: Duration, every interval: Duration = .milliseconds(20), _ attempt: () async throws -> T?
) async throws -> T? {
    let deadline = ContinuousClock.now + timeout
    while true {
        let last = ContinuousClock.now >= deadline
        if let value = try await attempt() { return value }
        if last { return nil }
        try await Task.sleep(for: interval)
    }
}

/// ``eventuallyValue(timeout:every:_:)`` for a condition: whether it held before `timeout` passed.
public func eventually(
    timeout: Duration, every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async throws -> Bool {
    try await eventuallyValue(timeout: timeout, every: interval) { try await condition() ? true : nil } ?? false
}
