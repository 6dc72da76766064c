/// Where a JSON text stops being JSON, as a person editing it would look for it: line and column (both from 1; the
/// column counts characters, not bytes) and what was expected there. Foundation's decoders only say "the given data
/// was not valid JSON", which leaves a voice pack author hunting through a long manifest.
public enum JSONSyntax {
    public struct Problem: Error, Equatable, Sendable, CustomStringConvertible {
        public var line: Int
        public var column: Int
        public var message: String
        public var description: String { "line \(line), column \(column): \(message)" }

        public init(line: Int, column: Int, message: String) {
            self.line = line
            self.column = column
            self.message = message
        }
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped, the rest as it is. For the
    /// request line `announce-ctl say` writes by hand, and for quoted values in log lines.
    public static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }

    /// The first syntax error of `bytes` (one JSON value, whitespace around it allowed), or nil if it is JSON.
    public static func firstProblem(_ bytes: [UInt8]) -> Problem? {
        var scanner = Scanner(bytes: bytes)
        do throws(Problem) {
            scanner.skipSpace()
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if scanner.index < bytes.count { throw scanner.problem("unexpected text after the end of the JSON value") }
            return nil
        } catch {
            return error
        }
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
        }

        /// Nesting deeper than this is refused (no stack overflow on hostile input).
        static let maximumDepth = 512

        func problem(_ message: String) -> Problem {
            var line = 1
            var column = 1
            for byte in bytes[..<min(index, bytes.count)] {
                if byte == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else if byte & 0xC0 != 0x80 {  // not a UTF-8 continuation byte: a new character
                    column += 1
                }
            }
            return Problem(line: line, column: column, message: message)
        }

        /// What is at the current position, for a message: `'x'`, or "the end of the file".
        var found: String {
            guard index < bytes.count else { return "the end of the file" }
            let byte = bytes[index]
            if byte >= 0x20 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
            return "byte 0x\(String(byte, radix: 16))"
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func expect(_ character: Character, _ context: String) throws(Problem) {
            guard index < bytes.count, bytes[index] == character.asciiValue else {
                throw problem("expected '\(character)' \(context), found \(found)")
            }
            index += 1
        }

        mutating func value(depth: Int) throws(Problem) {
            guard depth < Self.maximumDepth else { throw problem("nested more than \(Self.maximumDepth) deep") }
            guard index < bytes.count else { throw problem("expected a value, found the end of the file") }
            switch bytes[index] {
            case UInt8(ascii: "{"): try object(depth: depth)
            case UInt8(ascii: "["): try array(depth: depth)
            case UInt8(ascii: "\""): try string()
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            default: throw problem("expected a value, found \(found)")
            }
        }

        mutating func object(depth: Int) throws(Problem) {
            index += 1
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return
            }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw problem("expected a key in double quotes, found \(found)")
                }
                try string()
                skipSpace()
                try expect(":", "after the key")
                skipSpace()
                try value(depth: depth + 1)
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ",") || bytes[index] == UInt8(ascii: "}")
                else { throw problem("expected ',' or '}' after a value in an object, found \(found)") }
                index += 1
                if bytes[index - 1] == UInt8(ascii: "}") { return }
            }
        }

        mutating func array(depth: Int) throws(Problem) {
            index += 1
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipSpace()
                try value(depth: depth + 1)
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ",") || bytes[index] == UInt8(ascii: "]")
                else { throw problem("expected ',' or ']' after a value in an array, found \(found)") }
                index += 1
                if bytes[index - 1] == UInt8(ascii: "]") { return }
            }
        }

        mutating func string() throws(Problem) {
            index += 1
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { break }
                    let escaped = bytes[index]
                    if escaped == UInt8(ascii: "u") {
                        for _ in 0..<4 {
                            index += 1
                            guard index < bytes.count, Character(Unicode.Scalar(bytes[index])).isHexDigit else {
                                throw problem("expected 4 hexadecimal digits after \\u in a string")
                            }
                        }
                    } else if !"\"\\/bfnrt".utf8.contains(escaped) {
                        throw problem("unknown escape \\\(Character(Unicode.Scalar(escaped))) in a string")
                    }
                    index += 1
                case 0..<0x20:
                    throw problem("a control character (a line break?) inside a string; write it as \\n or \\t")
                default:
                    index += 1
                }
            }
            throw problem("a string is not closed (a missing '\"')")
        }

        mutating func digits() -> Int {
            let start = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - start
        }

        mutating func number() throws(Problem) {
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw problem("expected a digit, found \(found)") }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw problem("expected a digit after the decimal point, found \(found)") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard digits() > 0 else { throw problem("expected a digit in the exponent, found \(found)") }
            }
        }

        mutating func literal(_ word: String) throws(Problem) {
            for byte in word.utf8 {
                guard index < bytes.count, bytes[index] == byte else {
                    throw problem("expected \(word), found \(found)")
                }
                index += 1
            }
        }
    }
}
