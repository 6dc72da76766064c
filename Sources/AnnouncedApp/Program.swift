import AnnounceCommandLine
import AnnounceCore
import ArgumentParser
import CLazyLibraries

#if canImport(Glibc)
import Glibc
#endif

/// `announced` as the `announce` executable runs it (Sources/announce).
public enum AnnouncedProgram {
    /// Parses `arguments` (without the program name) and runs the daemon until it stops; then exits.
    /// What an `async` `@main` does, kept out of the executable's own entry so that the command line's
    /// synchronous path does not start Swift concurrency's main executor.
    public static func main(_ arguments: [String]) -> Never {
        loadLibraries()
        Task {
            do {
                var command = try Announced.parseAsRoot(arguments)
                if var daemon = command as? any AsyncParsableCommand {
                    try await daemon.run()
                } else {
                    try command.run()
                }
            } catch {
                CommandLineErrors.exit(Announced.self, program: "announced", error: error)
            }
            exit(0)
        }
        // The main thread parks here until the task exits the process. Not dispatchMain(): nothing of the daemon
        // runs on the main queue, and dispatchMain ends the main thread (pthread_exit), after which libdispatch
        // runs its signal thread on that thread's unwound stack; AddressSanitizer then reads the stale shadow of
        // the frames the exit skipped, and a SIGTERM became a false stack-buffer-overflow report.
        while true { pause() }
    }

    /// The C libraries the daemon calls are loaded on first use (CLazyLibraries); the daemon loads those a
    /// payment needs before it starts, so that no announcement waits for one, and so that a missing one stops it
    /// at once with the reason, as the dynamic loader would have. Not libespeak-ng: only free text uses it, and
    /// it loads at the first (``Espeak``). Not the decoders (libsndfile, libsoxr, libebur128): they load only
    /// when a voice pack has to be prepared (its first start, or a pack changed; ``PreparedClips``), and
    /// libsndfile leaves again once it is (``Daemon/releaseDecoders(_:)``).
    static func loadLibraries() {
        let libraries = [ANNOUNCE_LAZY_ASOUND, ANNOUNCE_LAZY_SYSTEMD, ANNOUNCE_LAZY_SQLITE]
        for library in libraries {
            var error = [CChar](repeating: 0, count: 512)
            guard announce_lazy_load(Int32(library), &error, error.count) == 0 else {
                StandardError.write("announced: cannot load a library it needs: \(String(cBuffer: error))\n")
                exit(1)
            }
        }
    }
}
