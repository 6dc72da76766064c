// libsqlite3 (Debian 12: 3.40.1) for the journal (Sources/AnnounceJournal/SQLite.swift). No library is named
// here: the executable loads libsqlite3 on the first call of one of its functions (Sources/CLazyLibraries).
#ifndef CSQLITE_SHIM_H
#define CSQLITE_SHIM_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift cannot import: SQLite copies the
// text before this returns, so the Swift string's buffer need only live for the call.
static inline int CSQLite_bind_text_transient(sqlite3_stmt *statement, int index, const char *text, int bytes) {
    return sqlite3_bind_text(statement, index, text, bytes, SQLITE_TRANSIENT);
}

#endif
