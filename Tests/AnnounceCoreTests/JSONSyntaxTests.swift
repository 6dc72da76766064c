import AnnounceCore
import Testing

/// A broken JSON text is located by line and column (characters, not bytes), with what was expected there.
@Suite struct JSONSyntaxTests {
    func problem(_ text: String) -> JSONSyntax.Problem? { JSONSyntax.firstProblem(Array(text.utf8)) }

    @Test func validJSONHasNoProblem() {
        for text in [
            "{}", " [ ] ", "{\"a\": [1, -2.5e3, true, false, null, \"x\\n\\u00e9\"], \"b\": {\"c\": {}}}", "\"到账\"",
        ] {
            #expect(problem(text) == nil, "\(text)")
        }
    }

    @Test func theFirstErrorIsLocated() {
        #expect(
            problem("{\n  \"a\": 1,\n  \"b\": 2,\n}")
                == JSONSyntax.Problem(line: 4, column: 1, message: "expected a key in double quotes, found '}'"))
        #expect(problem("{\"a\" 1}")?.description == "line 1, column 6: expected ':' after the key, found '1'")
        #expect(problem("[1 2]")?.description == "line 1, column 4: expected ',' or ']' after a value in an array, found '2'")
        #expect(problem("{\"a\": tru}")?.description == "line 1, column 10: expected true, found '}'")
        #expect(problem("{\"a\": [1,")?.description == "line 1, column 10: expected a value, found the end of the file")
        #expect(problem("{\"a\": \"b}")?.message == "a string is not closed (a missing '\"')")
        #expect(problem("{} x")?.description == "line 1, column 4: unexpected text after the end of the JSON value")
    }

    @Test func columnsCountCharactersNotBytes() {
        // 到账 is six bytes in UTF-8, two characters on the editor's line.
        #expect(problem("[\"到账\" 1]")?.description == "line 1, column 7: expected ',' or ']' after a value in an array, found '1'")
    }

    @Test func deepNestingIsRefusedNotACrash() {
        let deep = String(repeating: "[", count: 100_000)
        #expect(problem(deep)?.message.hasPrefix("nested more than") == true)
    }
}
