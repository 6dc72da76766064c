import AnnounceTestSupport
import Foundation
import Testing

extension DaemonIntegration {
    /// README.md's "Using it", line by line as written — read from README.md itself, so that the page and the
    /// programs cannot drift apart — against the speaker the README says to start (`scripts/demo.sh --keep`, here
    /// with the build CI made: ANNOUNCE_BIN_DIR), one daemon for every line.
    @Suite
    struct ReadmeTests {
        /// What each line must do: its exit status and what its output must contain. A line of the README not
        /// here, or a line here no longer in the README, fails the test.
        static let expected: [String: (status: Int32, output: [String])] = [
            "scripts/demo.sh --keep": (0, ["job 1 spoken: 到账一百元", "scripts/demo.sh --env", "scripts/demo.sh --stop"]),
            #"eval "$(scripts/demo.sh --env)""#: (0, []),
            "announce-ctl say 100.00": (0, ["job 2 queued: 到账一百元"]),
            "announce-ctl say -c alipay -o A123 -w 8.5": (0, ["job 3 spoken: 支付宝到账八点五元 (order A123, first sample"]),
            "announce-ctl say -o A123 8.5": (3, ["error: duplicate: order already accepted as job 3 (spoken)"]),
            "announce-ctl say -l en --fen 1234": (0, ["queued: payment received twelve yuan and thirty four fen"]),
            "announce-ctl prompt network-lost": (0, ["queued: 网络已断开"]),
            #"announce-ctl text "请到前台取货""#: (0, ["queued: 请到前台取货"]),
            "announce-ctl queue; announce-ctl history -n 20": (0, ["ACCEPTED (UTC)", "支付宝到账八点五元  order=A123"]),
            "announce-ctl replay": (0, ["queued: 支付宝到账八点五元", "replay of 3"]),
            "announce-ctl combine new-order '{#0423}'": (0, ["job 8 queued: 您有新的外卖订单，请及时处理零四二三"]),
            "announce-ctl repeat -o T-17 --every 30 new-order '{#0423}'": (
                0, ["repeat T-17 repeating: 您有新的外卖订单，请及时处理零四二三 (every 30"]
            ),
            "announce-ctl repeat --stop T-17": (0, ["repeat T-17 stopped"]),
            "announce-ctl cancel 7; announce-ctl cancel --all": (0, ["cancelled"]),
            "announce-ctl volume --level 60": (0, ["level 60%"]),
            "announce-ctl volume 70": (0, ["threshold 70% (set)"]),
            "announce-ctl today": (0, [" payments, ", " yuan"]),
            "announce-ctl today --say": (0, ["queued: 今日收款"]),
            "announce-ctl status": (0, [", running, pid ", "voices:   en (en-espeak), zh* (zh-espeak)"]),
            "announce-ctl words 1005 10010 0.05": (0, ["1005\t到账一千零五元\n10010\t到账一万零一十元\n0.05\t到账零点零五元\n"]),
            "announce-ctl render --output a.wav 100.00": (0, ["a.wav\t到账一百元"]),
            "scripts/demo.sh --stop": (0, ["demo: stopped the speaker kept"]),
        ]

        /// The lines of the first `sh` block under "## Using it", and each one's command (the line without its
        /// comment).
        static func usingItLines() throws -> [(line: String, command: String)] {
            let readme = try String(contentsOfFile: "\(Paths.root)/README.md", encoding: .utf8)
            let section = try #require(readme.components(separatedBy: "\n## Using it\n").dropFirst().first)
            let block = try #require(section.components(separatedBy: "```sh\n").dropFirst().first)
            let body = try #require(block.components(separatedBy: "\n```").first)
            return body.split(separator: "\n").map { line in
                let command = line.range(of: " #").map { line[..<$0.lowerBound] } ?? line[...]
                return (String(line), command.trimmingCharacters(in: .whitespaces))
            }
        }

        @Test func theUsingItLinesWorkAsWritten() async throws {
            let lines = try Self.usingItLines()
            #expect(Set(lines.map(\.command)) == Set(Self.expected.keys), "README's lines and this test's differ")
            #expect(lines.first?.command == "scripts/demo.sh --keep", "the speaker is started first")
            #expect(lines.dropFirst().first?.command.hasPrefix("eval ") == true, "and its environment taken")
            let demo = try Paths.temporaryDirectory("readme")
            let work = "\(demo)/cwd"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            // The demo's folder is the test's own, and the build is CI's (the demo builds nothing then).
            let environment = ["ANNOUNCE_DEMO_DIR": "\(demo)/demo", "ANNOUNCE_BIN_DIR": Paths.build]
            defer {
                _ = try? FileManager.default.removeItem(atPath: demo)
            }
            func bash(_ script: String) async throws -> CommandResult {
                try await run("/bin/bash", ["-c", script], environment: environment)
            }
            func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
            do {
                // Each line as written, in a shell that took the speaker's environment the README's way; the
                // scripts from the checkout, the rest in a folder of their own (render writes a.wav there).
                let root = quoted(Paths.root)
                let takeEnvironment = lines[1].command
                for (index, (line, command)) in lines.enumerated() {
                    let script =
                        index == 0 || command.hasPrefix("scripts/")
                        ? "cd \(root) && \(line)"
                        : "cd \(root) && \(takeEnvironment) && cd \(quoted(work)) && \(line)"
                    let result = try await bash(script)
                    let expected = try #require(Self.expected[command])
                    #expect(result.status == expected.status, "\(line)\n\(result)")
                    for text in expected.output {
                        #expect(result.stdout.contains(text), "\(line): no \"\(text)\" in\n\(result)")
                    }
                    if command == "announce-ctl status" {
                        #expect(!result.stdout.contains("commit unknown"), "--version and status name the commit")
                    }
                    if command == "announce-ctl render --output a.wav 100.00" {
                        #expect(FileManager.default.fileExists(atPath: "\(work)/a.wav"))
                    }
                }
                #expect(!FileManager.default.fileExists(atPath: "\(demo)/demo/announced.pid"), "the speaker stopped")
            } catch {
                _ = try? await bash("cd \(quoted(Paths.root)) && scripts/demo.sh --stop")
                throw error
            }
            // Whatever a failed expectation left running.
            _ = try await bash("cd \(quoted(Paths.root)) && scripts/demo.sh --stop")
        }
    }
}
