/// `announce-ctl` as the `announce` executable runs it (Sources/announce).
public enum AnnounceCtlProgram {
    /// Parses `arguments` (without the program name) and runs the command; exits on an error, returns on success.
    public static func main(_ arguments: [String]) {
        if arguments.first == "say", let say = FastSay.parse(arguments.dropFirst()) { say.run() }
        AnnounceCtl.main(arguments)
    }
}
