import CSQLite

// The journal's own small layer over Debian's libsqlite3: a connection that owns its handle and its prepared
// statements, values to bind, rows to read, transactions, and one error type. No more than the journal needs.
// (It replaced GRDB, which brought full Foundation and ICU, 46 MB, into the executable: docs/benchmarks.md.)
//
// Not thread-safe by itself: a connection is used by one thread at a time (the journal keeps it in a Mutex), and
// is opened without SQLite's own mutexes accordingly.

/// A failed call into libsqlite3: the function, the result code, SQLite's own message (`sqlite3_errmsg`), and the
/// statement it was running, if any.
struct SQLiteError: Error, Equatable, CustomStringConvertible {
    var function: String
    /// The extended result code (e.g. 1555, SQLITE_CONSTRAINT_PRIMARYKEY); `primaryCode` is its low byte.
    var code: Int32
    var message: String
    var sql: String?

    init(function: String, code: Int32 = SQLITE_ERROR, message: String, sql: String? = nil) {
        self.function = function
        self.code = code
        self.message = message
        self.sql = sql
    }

    /// A damaged database found by other means than a result code (`PRAGMA quick_check`'s findings).
    static func corruption(function: String, message: String) -> SQLiteError {
        SQLiteError(function: function, code: SQLITE_CORRUPT, message: message)
    }

    var primaryCode: Int32 { code & 0xFF }
    /// The disk (or the file system's quota) is full: SQLITE_FULL.
    var isDiskFull: Bool { primaryCode == SQLITE_FULL }
    /// The file is damaged or not a database: SQLITE_CORRUPT, SQLITE_NOTADB.
    var isCorruption: Bool { primaryCode == SQLITE_CORRUPT || primaryCode == SQLITE_NOTADB }
    /// Another connection holds the lock, longer than the busy timeout: SQLITE_BUSY, SQLITE_LOCKED.
    var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
    /// The file cannot be written any more: a file system remounted read-only, an I/O error (a worn flash card),
    /// the file or its folder made unusable underneath (not a full disk: that has the reserve).
    var isUnwritable: Bool {
        [SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_PERM].contains(primaryCode)
    }

    /// `sqlite3_step: database or disk is full (SQLITE_FULL) in "UPDATE job SET …"`.
    var description: String {
        var text = "\(function): \(message) (\(Self.name(of: code)))"
        if let sql { text += " in \"\(sql.split(whereSeparator: \.isWhitespace).joined(separator: " "))\"" }
        return text
    }

    /// The name of a result code's primary code, with the extended code's number when it has one.
    static func name(of code: Int32) -> String {
        let names: [Int32: String] = [
            SQLITE_ERROR: "SQLITE_ERROR", SQLITE_INTERNAL: "SQLITE_INTERNAL", SQLITE_PERM: "SQLITE_PERM",
            SQLITE_ABORT: "SQLITE_ABORT", SQLITE_BUSY: "SQLITE_BUSY", SQLITE_LOCKED: "SQLITE_LOCKED",
            SQLITE_NOMEM: "SQLITE_NOMEM", SQLITE_READONLY: "SQLITE_READONLY", SQLITE_INTERRUPT: "SQLITE_INTERRUPT",
            SQLITE_IOERR: "SQLITE_IOERR", SQLITE_CORRUPT: "SQLITE_CORRUPT", SQLITE_NOTFOUND: "SQLITE_NOTFOUND",
            SQLITE_FULL: "SQLITE_FULL", SQLITE_CANTOPEN: "SQLITE_CANTOPEN", SQLITE_PROTOCOL: "SQLITE_PROTOCOL",
            SQLITE_SCHEMA: "SQLITE_SCHEMA", SQLITE_TOOBIG: "SQLITE_TOOBIG", SQLITE_CONSTRAINT: "SQLITE_CONSTRAINT",
            SQLITE_MISMATCH: "SQLITE_MISMATCH", SQLITE_MISUSE: "SQLITE_MISUSE", SQLITE_RANGE: "SQLITE_RANGE",
            SQLITE_NOTADB: "SQLITE_NOTADB",
        ]
        let name = names[code & 0xFF] ?? "SQLite code"
        return code > 0xFF || names[code & 0xFF] == nil ? "\(name) \(code)" : name
    }
}

/// A value SQLite stores: NULL, a 64-bit integer, a double, or UTF-8 text (the journal keeps no blobs).
enum SQLiteValue: Equatable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// What can be bound to a statement's `?`. Optionals bind NULL for nil; Bool binds 0 or 1, as GRDB stored it.
protocol SQLiteBindable {
    var sqliteValue: SQLiteValue { get }
}

extension SQLiteValue: SQLiteBindable {
    var sqliteValue: SQLiteValue { self }
}

extension Int64: SQLiteBindable {
    var sqliteValue: SQLiteValue { .integer(self) }
}

extension Int: SQLiteBindable {
    var sqliteValue: SQLiteValue { .integer(Int64(self)) }
}

extension Bool: SQLiteBindable {
    var sqliteValue: SQLiteValue { .integer(self ? 1 : 0) }
}

extension Double: SQLiteBindable {
    var sqliteValue: SQLiteValue { .real(self) }
}

extension String: SQLiteBindable {
    var sqliteValue: SQLiteValue { .text(self) }
}

extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}

/// One row of a result, valid only inside the closure it is passed to (it reads the statement's current row).
/// Columns are numbered from 0, in the order of the SELECT; a NULL reads as nil.
struct SQLiteRow {
    fileprivate let statement: OpaquePointer

    func isNull(_ column: Int) -> Bool { sqlite3_column_type(statement, Int32(column)) == SQLITE_NULL }

    func int64(_ column: Int) -> Int64? { isNull(column) ? nil : sqlite3_column_int64(statement, Int32(column)) }

    func int(_ column: Int) -> Int? { int64(column).map { Int(truncatingIfNeeded: $0) } }

    func bool(_ column: Int) -> Bool? { int64(column).map { $0 != 0 } }

    func double(_ column: Int) -> Double? { isNull(column) ? nil : sqlite3_column_double(statement, Int32(column)) }

    func text(_ column: Int) -> String? {
        // Text first, then its length: the documented order (column_text may convert the value; bytes then
        // counts the converted text).
        guard !isNull(column), let bytes = sqlite3_column_text(statement, Int32(column)) else { return nil }
        let count = Int(sqlite3_column_bytes(statement, Int32(column)))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// The value as SQLite stored it.
    func value(_ column: Int) -> SQLiteValue {
        switch sqlite3_column_type(statement, Int32(column)) {
        case SQLITE_INTEGER: .integer(sqlite3_column_int64(statement, Int32(column)))
        case SQLITE_FLOAT: .real(sqlite3_column_double(statement, Int32(column)))
        case SQLITE_NULL: .null
        default: text(column).map(SQLiteValue.text) ?? .null
        }
    }
}

/// A prepared statement, finalized when the last reference goes. Kept in its connection's cache.
final class SQLiteStatement {
    fileprivate let handle: OpaquePointer
    let sql: String
    private let connection: OpaquePointer

    fileprivate init(handle: OpaquePointer, sql: String, connection: OpaquePointer) {
        self.handle = handle
        self.sql = sql
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    private func error(_ function: String, _ code: Int32) -> SQLiteError {
        SQLiteError(function: function, code: code, message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }

    /// Binds `arguments` to the statement's parameters, in order; their number must match.
    fileprivate func bind(_ arguments: [any SQLiteBindable]) throws(SQLiteError) {
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard arguments.count == expected else {
            throw SQLiteError(
                function: "bind", code: SQLITE_RANGE,
                message: "\(arguments.count) arguments for \(expected) parameters", sql: sql)
        }
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch argument.sqliteValue {
            case .null: code = sqlite3_bind_null(handle, index)
            case let .integer(value): code = sqlite3_bind_int64(handle, index, value)
            case let .real(value): code = sqlite3_bind_double(handle, index, value)
            case let .text(value):
                // The string's UTF-8 bytes and their count (an empty string binds '' and not NULL: withCString
                // always gives a pointer).
                code = value.withCString { CSQLite_bind_text_transient(handle, index, $0, Int32(value.utf8.count)) }
            }
            guard code == SQLITE_OK else { throw error("sqlite3_bind", code) }
        }
    }

    /// Runs the statement to its end with `arguments`, calling `row` for each row; then resets it for reuse.
    fileprivate func run(
        _ arguments: [any SQLiteBindable], _ row: (SQLiteRow) throws(SQLiteError) -> Void
    ) throws(SQLiteError) {
        defer {
            // Their codes repeat the last step's error, already thrown.
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        try bind(arguments)
        while true {
            let code = sqlite3_step(handle)
            switch code {
            case SQLITE_ROW: try row(SQLiteRow(statement: handle))
            case SQLITE_DONE: return
            default: throw error("sqlite3_step", code)
            }
        }
    }
}

/// One connection to a database file, owning its handle and its cache of prepared statements; closed by `close()`
/// or when the last reference goes.
final class SQLiteConnection {
    private var handle: OpaquePointer?
    let path: String
    /// Prepared once per SQL text, reused (reset after each run).
    private var statements: [String: SQLiteStatement] = [:]

    /// Opens `path` (creating it if `readOnly` is false). `busyTimeoutMs`: how long a statement waits for another
    /// connection's lock before failing with SQLITE_BUSY.
    /// `uri`: `path` is a `file:` URI (with parameters such as `immutable=1`).
    init(path: String, readOnly: Bool = false, uri: Bool = false, busyTimeoutMs: Int32 = 5_000) throws(SQLiteError) {
        self.path = path
        var handle: OpaquePointer?
        let flags =
            (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
            | (uri ? SQLITE_OPEN_URI : 0)
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            // A handle is returned even when the open fails (unless memory ran out); it holds the message.
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(handle)
            throw SQLiteError(function: "sqlite3_open_v2", code: code, message: "\(message): \(path)")
        }
        self.handle = handle
        // Both only set a field of an open connection: SQLITE_OK.
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeoutMs)
    }

    deinit { close() }

    /// Copies the whole database into `destination`, replacing what it held (SQLite's online backup).
    func copy(into destination: SQLiteConnection) throws(SQLiteError) {
        let source = try open()
        let target = try destination.open()
        guard let backup = sqlite3_backup_init(target, "main", source, "main") else {
            throw SQLiteError(
                function: "sqlite3_backup_init", code: sqlite3_errcode(target),
                message: String(cString: sqlite3_errmsg(target)))
        }
        let step = sqlite3_backup_step(backup, -1)
        let finish = sqlite3_backup_finish(backup)
        guard step == SQLITE_DONE, finish == SQLITE_OK else {
            throw SQLiteError(
                function: "sqlite3_backup_step", code: step == SQLITE_DONE ? finish : step,
                message: String(cString: sqlite3_errmsg(target)))
        }
    }

    /// Finalizes the cached statements and closes the connection (a WAL database is checkpointed when its last
    /// connection closes). Using the connection afterwards throws SQLITE_MISUSE.
    func close() {
        statements.removeAll()
        // Every statement is finalized, so it closes now (close_v2 would otherwise wait for the last one).
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    private func open() throws(SQLiteError) -> OpaquePointer {
        guard let handle else {
            throw SQLiteError(function: "SQLiteConnection", code: SQLITE_MISUSE, message: "the connection is closed")
        }
        return handle
    }

    /// The cached statement for `sql`, prepared on first use.
    private func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        let handle = try open()
        var prepared: OpaquePointer?
        var trailing = false
        let code = sql.withCString { text in
            var tail: UnsafePointer<CChar>?
            let code = sqlite3_prepare_v3(handle, text, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, &tail)
            trailing = tail.map { !String(cString: $0).allSatisfy(\.isWhitespace) } ?? false
            return code
        }
        guard code == SQLITE_OK, let prepared else {
            throw SQLiteError(
                function: "sqlite3_prepare_v3", code: code == SQLITE_OK ? SQLITE_MISUSE : code,
                message: code == SQLITE_OK ? "no statement" : String(cString: sqlite3_errmsg(handle)), sql: sql)
        }
        let statement = SQLiteStatement(handle: prepared, sql: sql, connection: handle)
        // One statement only: the rest of the text would be silently ignored.
        guard !trailing else {
            throw SQLiteError(
                function: "sqlite3_prepare_v3", code: SQLITE_MISUSE, message: "more than one statement", sql: sql)
        }
        statements[sql] = statement
        return statement
    }

    /// Runs one statement (cached) with `arguments`, ignoring any rows.
    func execute(_ sql: String, _ arguments: any SQLiteBindable...) throws(SQLiteError) {
        try execute(sql, arguments: arguments)
    }

    func execute(_ sql: String, arguments: [any SQLiteBindable]) throws(SQLiteError) {
        try statement(sql).run(arguments) { _ in }
    }

    /// Runs several statements separated by semicolons, in order, each prepared once and not cached (schema
    /// changes); the first that fails stops the rest and names itself in the error.
    func executeScript(_ script: String) throws(SQLiteError) {
        let handle = try open()
        var failure: SQLiteError?
        script.withCString { start in
            var next: UnsafePointer<CChar>? = start
            while let current = next, current.pointee != 0 {
                var prepared: OpaquePointer?
                var tail: UnsafePointer<CChar>?
                let code = sqlite3_prepare_v3(handle, current, -1, 0, &prepared, &tail)
                let text = Self.text(from: current, to: tail)
                guard code == SQLITE_OK else {
                    failure = SQLiteError(
                        function: "sqlite3_prepare_v3", code: code, message: String(cString: sqlite3_errmsg(handle)),
                        sql: text)
                    return
                }
                next = tail
                // Only white space or a comment left: nothing to run.
                guard let prepared else { continue }
                do throws(SQLiteError) {
                    try SQLiteStatement(handle: prepared, sql: text, connection: handle).run([]) { _ in }
                } catch {
                    failure = error
                    return
                }
            }
        }
        if let failure { throw failure }
    }

    private static func text(from start: UnsafePointer<CChar>, to end: UnsafePointer<CChar>?) -> String {
        let count = end.map { start.distance(to: $0) } ?? strlenOf(start)
        return start.withMemoryRebound(to: UInt8.self, capacity: count) {
            String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
        }.trimmingWhitespace
    }

    private static func strlenOf(_ text: UnsafePointer<CChar>) -> Int {
        var count = 0
        while text[count] != 0 { count += 1 }
        return count
    }

    /// The rows of a query (cached statement), each made into a `T` by `read`.
    func rows<T>(
        _ sql: String, arguments: [any SQLiteBindable] = [], read: (SQLiteRow) throws(SQLiteError) -> T
    ) throws(SQLiteError) -> [T] {
        var result: [T] = []
        try statement(sql).run(arguments) { (row) throws(SQLiteError) in result.append(try read(row)) }
        return result
    }

    /// The first row of a query made into a `T`, or nil if there is none.
    func firstRow<T>(
        _ sql: String, arguments: [any SQLiteBindable] = [], read: (SQLiteRow) throws(SQLiteError) -> T
    ) throws(SQLiteError) -> T? {
        var result: T?
        try statement(sql).run(arguments) { (row) throws(SQLiteError) in
            if result == nil { result = try read(row) }
        }
        return result
    }

    /// How many prepared statements are kept (for the tests).
    var cachedStatements: Int { statements.count }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { handle.map { Int(sqlite3_changes($0)) } ?? 0 }

    /// The rowid of the last row inserted.
    var lastInsertRowID: Int64 { handle.map { sqlite3_last_insert_rowid($0) } ?? 0 }

    /// Whether a transaction is open.
    var isInTransaction: Bool { handle.map { sqlite3_get_autocommit($0) == 0 } ?? false }

    /// Runs `body` in a transaction that takes the write lock at once (BEGIN IMMEDIATE: waits up to the busy
    /// timeout for another writer, and never fails later for a lock it could not upgrade). Commits if `body`
    /// returns; rolls back and rethrows if it or the commit throws.
    func transaction<T>(_ body: () throws(SQLiteError) -> T) throws(SQLiteError) -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            // SQLite may have rolled back already (a full disk, an interrupted statement): only if still open.
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        String(self.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }
}
