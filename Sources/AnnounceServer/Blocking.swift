import AnnounceCore
import NIOPosix

/// Runs blocking work — mixer I/O, journal reads and writes — on NIO's thread pool, never on Swift's cooperative
/// pool: a few slow mixer reads there (a sound server that hangs) would hold up every other connection's task.
func offThePool<T: Sendable>(
    _ body: @escaping @Sendable () throws(AnnounceError) -> T
) async throws(AnnounceError) -> T {
    let outcome: Result<T, AnnounceError>
    do {
        outcome = try await NIOThreadPool.singleton.runIfActive { () -> Result<T, AnnounceError> in
            do throws(AnnounceError) { return .success(try body()) } catch { return .failure(error) }
        }
    } catch {
        throw AnnounceError(.internalError, "the blocking-work thread pool is not running", cause: "\(error)")
    }
    return try outcome.get()
}
