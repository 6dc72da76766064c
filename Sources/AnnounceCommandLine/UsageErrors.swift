import ArgumentParser

#if canImport(Glibc)
import Glibc
#endif

/// How every program of the executable answers a command line it cannot use: one line on standard error — what
/// is wrong, and where the options are described — and exit status 64 (EX_USAGE). swift-argument-parser's own
/// answer is three lines (the error, the usage, "See … --help"); `--help` and `--version` are answered as it does.
public enum CommandLineErrors {
    /// The one line for a usage error (`Unknown option '--bogus'`, a failed `validate()`), or nil for anything
    /// else (help, version, an exit status, another error).
    public static func usageLine<Command: ParsableCommand>(
        _ command: Command.Type, program: String, error: any Error
    ) -> String? {
        guard command.exitCode(for: error) == .validationFailure else { return nil }
        let message = command.message(for: error).split(whereSeparator: \.isNewline).joined(separator: "; ")
        // "  See 'announce-ctl say --help' for more information.": the help of the command that was being parsed.
        let help = command.fullMessage(for: error).split(whereSeparator: \.isNewline).lazy.compactMap { line in
            line.drop(while: \.isWhitespace).hasPrefix("See '") ? quoted(line) : nil
        }.first
        return "\(program): \(message)" + (help.map { " (\($0) describes the options)" } ?? "")
    }

    /// Whether the usage error is a value swift-argument-parser could not read as its option's or argument's type
    /// (`cancel abc`, `--fen 12.5`): a wrong value rather than a command line of the wrong shape. ArgumentParser
    /// gives such errors no type of their own, only their message ("The value 'abc' is invalid for '<ids>'").
    public static func isUnreadableValue<Command: ParsableCommand>(_ command: Command.Type, error: any Error) -> Bool {
        command.exitCode(for: error) == .validationFailure && command.message(for: error).hasPrefix("The value '")
    }

    /// Exits for an error met while parsing or running `command`: a usage error as one line with status 64, the
    /// rest as swift-argument-parser does (help and version printed, `ExitCode` as given). `unreadableValue`: the
    /// status for a value that cannot be read as its type (``isUnreadableValue(_:error:)``), when a program's rule
    /// is that a wrong value is not a usage error (announce-ctl: exit 2, as the daemon's `bad_request`).
    public static func exit<Command: ParsableCommand>(
        _ command: Command.Type, program: String, error: any Error,
        unreadableValue: ExitCode = .validationFailure
    ) -> Never {
        if let line = usageLine(command, program: program, error: error) {
            let bytes = Array((line + "\n").utf8)
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            Glibc.exit(
                isUnreadableValue(command, error: error)
                    ? unreadableValue.rawValue : ExitCode.validationFailure.rawValue)
        }
        command.exit(withError: error)
    }

    /// The text between the first and the last `'` of `line`.
    static func quoted(_ line: Substring) -> Substring? {
        guard let first = line.firstIndex(of: "'"), let last = line.lastIndex(of: "'"), first < last else { return nil }
        return line[line.index(after: first)..<last]
    }
}
