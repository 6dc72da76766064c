/// Amounts written as negative numbers (`-1`, `-0.50`) are amounts, never options: no option of `say`, `words`
/// or `render` starts with a digit, yet swift-argument-parser would take `-1` for a cluster of short options and
/// drop it without a word. So, for those commands only and only when such an argument is there, the arguments
/// are put in an order that leaves no doubt: the options first, then `--`, then the amounts, each in its own
/// order. The amount parser then refuses `-1` as what it is ("negative; only positive amounts are announced",
/// exit 2). Plain command lines — what a till runs for every payment — pass untouched (and FastSay reads them).
enum AmountArguments {
    /// The options of each command that take a value (the next argument, unless written `--name=value`).
    static let valued: [String: Set<String>] = [
        "say": [
            "-s", "--socket", "-P", "--priority", "-t", "--ttl", "-c", "--channel", "-o", "--order", "-l", "--lang",
            "--style", "--fen",
        ],
        "words": ["--voices", "-l", "--lang", "-c", "--channel", "--style", "--fen"],
        "render": [
            "--voices", "-l", "--lang", "-c", "--channel", "--style", "--fen", "--output", "--lead-in-ms", "--gap-ms",
            "--prompt", "--text",
        ],
    ]

    /// The long name of each short option above (the same letter means the same option in every command).
    static let longNames = [
        "-s": "--socket", "-P": "--priority", "-t": "--ttl", "-c": "--channel", "-o": "--order", "-l": "--lang",
    ]

    static func normalized(_ arguments: [String]) -> [String] {
        guard let command = arguments.first, let valued = valued[command],
            arguments.dropFirst().contains(where: isNegativeNumber), !arguments.contains("--")
        else { return arguments }
        var options: [String] = []
        var amounts: [String] = []
        var index = 1
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if isNegativeNumber(argument) || !argument.hasPrefix("-") {
                amounts.append(argument)
            } else if valued.contains(argument), index < arguments.count {
                // The value joined to its option's long name, so that a value such as "-5" is not read as an
                // option either (`-t -1` would be "Missing value for '-t <s>'"; `--ttl=-1` is a ttl the daemon
                // refuses as what it is).
                options.append("\(longNames[argument] ?? argument)=\(arguments[index])")
                index += 1
            } else {
                options.append(argument)
            }
        }
        return [command] + options + ["--"] + amounts
    }

    /// `-1`, `-0.5`, `-1,000`: a minus sign and a digit.
    static func isNegativeNumber(_ argument: String) -> Bool {
        let scalars = argument.unicodeScalars
        guard scalars.count >= 2, scalars.first == "-" else { return false }
        return ("0"..."9").contains(scalars[scalars.index(after: scalars.startIndex)])
    }
}

/// `announce-ctl -s PATH say 1`: the connection options (`-s/--socket`, `-j/--json`) written before the command
/// are moved after its name, where each command declares them, rather than refused as options `announce-ctl`
/// itself does not have. Only a leading run of them moves; anything else is left to ArgumentParser as written.
enum LeadingOptions {
    static func moved(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "-s" || argument == "--socket", index + 1 < arguments.count {
                leading += [argument, arguments[index + 1]]
                index += 2
            } else if argument.hasPrefix("--socket=") || argument == "-j" || argument == "--json" {
                leading.append(argument)
                index += 1
            } else {
                break
            }
        }
        // Nothing to move, or no command after it (`announce-ctl -s PATH`: ArgumentParser says what is missing).
        guard !leading.isEmpty, index < arguments.count, !arguments[index].hasPrefix("-") else { return arguments }
        return [arguments[index]] + leading + Array(arguments[(index + 1)...])
    }
}
