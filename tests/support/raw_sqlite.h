#pragma once
// A second connection to a database file, not through Store: to look at or tamper with the file
// as another program would.
#include <sqlite3.h>

#include <string>

namespace kvchat::test {

// Runs `sql` and returns the first column of the first row as its bytes ("" for none or NULL),
// or "<cannot open>" / "<error: ...>".
inline std::string raw_query(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
        sqlite3_close(db);
        return "<cannot open>";
    }
    sqlite3_stmt* st = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
        out = std::string("<error: ") + sqlite3_errmsg(db) + ">";
    } else {
        const int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const auto* p = static_cast<const char*>(sqlite3_column_blob(st, 0));
            out.assign(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(st, 0)));
        } else if (rc != SQLITE_DONE) {
            out = std::string("<error: ") + sqlite3_errmsg(db) + ">";
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

// Runs `sql` (any number of statements): "ok", or "<cannot open>" / "<error: ...>".
inline std::string raw_exec(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    std::string out = "ok";
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
        out = "<cannot open>";
    } else if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
        out = std::string("<error: ") + sqlite3_errmsg(db) + ">";
    }
    sqlite3_close(db);
    return out;
}

}  // namespace kvchat::test
