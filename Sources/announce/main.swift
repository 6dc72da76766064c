// The one executable of the project, like busybox: installed as /usr/bin/announce with the links announced,
// announce-ctl and announce-push, it runs the program whose name it was called by. `announce PROGRAM ARGS…`
// does the same. One copy of the Swift runtime for the three programs; see docs/deployment.md.
import AnnounceCore
import AnnounceCtlApp
import AnnouncePushApp
import AnnounceVersion
import AnnouncedApp

#if canImport(Glibc)
import Glibc
#endif

let programs = ["announced", "announce-ctl", "announce-push"]

let usage = """
    usage: announce PROGRAM [ARGUMENTS…]   (or call it by the program's name, a link to it)
    programs:
      announced       the speaker daemon
      announce-ctl    the command line: say, status, history, render …
      announce-push   the MQTT push listener and publisher tool
    Each program's --help says more; --version says which build this is.

    """

func fail(_ message: String) -> Never {
    StandardError.write("announce: \(message)\n\(usage)")
    exit(64)
}

var arguments = Array(CommandLine.arguments.dropFirst())
var name = String(CommandLine.arguments.first?.split(separator: "/").last ?? "announce")
if !programs.contains(name) {
    guard name == "announce" else {
        fail("called as \"\(name)\", which is none of \(programs.joined(separator: ", "))")
    }
    guard let first = arguments.first else { fail("which program?") }
    if first == "--help" || first == "-h" || first == "help" {
        print(usage, terminator: "")
        exit(0)
    }
    if first == "--version" {
        print(BuildInfo.line(program: "announce"))
        exit(0)
    }
    guard programs.contains(first) else { fail("unknown program \"\(first)\"") }
    name = first
    arguments.removeFirst()
}

switch name {
case "announced": AnnouncedProgram.main(arguments)
case "announce-ctl": AnnounceCtlProgram.main(arguments)
case "announce-push": AnnouncePushProgram.main(arguments)
default: fail("unknown program \"\(name)\"")
}
