import AnnounceCommandLine
import ArgumentParser

#if canImport(Glibc)
import Glibc
#endif

/// `announce-ctl` as the `announce` executable runs it (Sources/announce).
public enum AnnounceCtlProgram {
    /// Parses `arguments` (without the program name) and runs the command; exits on an error, returns on success.
    /// A usage error is one line (``CommandLineErrors``) with status 64, but a value that cannot be read as its
    /// type (`cancel abc`) is invalid input, status 2, as the daemon's `bad_request` for a value it cannot use (the
    /// status says what is wrong, not who noticed: README, "Exit status"). An amount written as a negative number
    /// is read as an amount, never as an option (``AmountArguments``); `-s PATH` and `-j` may come before the
    /// command (``LeadingOptions``).
    public static func main(_ arguments: [String]) {
        let arguments = AmountArguments.normalized(LeadingOptions.moved(arguments))
        if arguments.first == "say", let say = FastSay.parse(arguments.dropFirst()) { say.run() }
        var command: any ParsableCommand
        do {
            command = try AnnounceCtl.parseAsRoot(arguments)
            try command.run()
        } catch let invalid as InvalidValue {
            Output.error(invalid.description)
            exit(Exit.invalidInput.rawValue)
        } catch {
            CommandLineErrors.exit(
                AnnounceCtl.self, program: "announce-ctl", error: error, unreadableValue: Exit.invalidInput)
        }
    }
}
