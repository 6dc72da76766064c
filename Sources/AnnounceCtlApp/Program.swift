import AnnounceCommandLine
import ArgumentParser

/// `announce-ctl` as the `announce` executable runs it (Sources/announce).
public enum AnnounceCtlProgram {
    /// Parses `arguments` (without the program name) and runs the command; exits on an error, returns on success.
    /// A usage error is one line (``CommandLineErrors``); an amount written as a negative number is read as an
    /// amount, never as an option (``AmountArguments``).
    public static func main(_ arguments: [String]) {
        let arguments = AmountArguments.normalized(arguments)
        if arguments.first == "say", let say = FastSay.parse(arguments.dropFirst()) { say.run() }
        var command: any ParsableCommand
        do {
            command = try AnnounceCtl.parseAsRoot(arguments)
            try command.run()
        } catch {
            CommandLineErrors.exit(AnnounceCtl.self, program: "announce-ctl", error: error)
        }
    }
}
