import AnnounceCommandLine
import ArgumentParser

/// `announce-push` as the `announce` executable runs it (Sources/announce).
public enum AnnouncePushProgram {
    /// Parses `arguments` (without the program name) and runs the command; exits on an error, returns on success.
    public static func main(_ arguments: [String]) {
        var command: any ParsableCommand
        do {
            command = try AnnouncePushCommand.parseAsRoot(arguments)
            try command.run()
        } catch {
            CommandLineErrors.exit(AnnouncePushCommand.self, program: "announce-push", error: error)
        }
    }
}
