#include "engine/store/store.h"

#include "engine/common/quoted.h"
#include "engine/common/atomic_file.h"
#include "engine/common/regular_file.h"
#include "engine/common/utf8.h"
#include "engine/error.h"
#include "engine/store/conversation_lock.h"
#include "engine/model/model_path.h"

#include <sqlite3.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>

namespace kvchat {

namespace {

// PRAGMA application_id marks the file as kvchat's ("KVCH"), so another program's database is
// recognised and left alone.
constexpr int kApplicationId = 0x4B564348;

// How long a statement waits for another connection's lock (a second kvchat window, the
// terminal tool) before reporting the database busy.
constexpr int kBusyTimeoutMs = 5000;

// Forward migrations: steps[i] brings a database from version i to version i + 1, each in its
// own transaction together with the new user_version. Append new steps; never edit old ones.
const char* const kMigrations[] = {
    // 1: the first schema.
    R"sql(
CREATE TABLE conversations (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    title             TEXT NOT NULL UNIQUE,
    model_fingerprint TEXT NOT NULL DEFAULT '',
    cache_spec        TEXT NOT NULL DEFAULT '',
    snapshot          TEXT,
    created_ms        INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL
);
CREATE INDEX conversations_by_update ON conversations (updated_ms);

CREATE TABLE messages (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id   INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    ordinal           INTEGER NOT NULL,
    role              TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content           TEXT NOT NULL,
    content_repaired  INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    generated_tokens  INTEGER NOT NULL DEFAULT 0,
    ttft_ms           REAL,
    tokens_per_second REAL,
    created_ms        INTEGER NOT NULL,
    UNIQUE (conversation_id, ordinal)
);

CREATE TABLE prefixes (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    name              TEXT NOT NULL UNIQUE,
    text              TEXT NOT NULL,
    text_repaired     INTEGER NOT NULL DEFAULT 0,
    model_fingerprint TEXT NOT NULL DEFAULT '',
    cache_spec        TEXT NOT NULL DEFAULT '',
    tokens            BLOB NOT NULL,
    snapshot          TEXT,
    created_ms        INTEGER NOT NULL,
    last_used_ms      INTEGER,
    use_count         INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

PRAGMA application_id = 1263944520;
)sql",
    // 2: a prefix holds the first messages of a conversation, not only a system prompt. Each
    // prefix of schema 1 becomes its one system message; prefixes.text stays (forward-only, and
    // it keeps what was saved) and from now on holds the first message's content. The tokens and
    // the snapshot stay valid: one system message renders exactly as the old text did.
    R"sql(
CREATE TABLE prefix_messages (
    prefix_id         INTEGER NOT NULL REFERENCES prefixes (id) ON DELETE CASCADE,
    ordinal           INTEGER NOT NULL,
    role              TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content           TEXT NOT NULL,
    content_repaired  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (prefix_id, ordinal)
) WITHOUT ROWID;

INSERT INTO prefix_messages (prefix_id, ordinal, role, content, content_repaired)
    SELECT id, 0, 'system', text, text_repaired FROM prefixes;
)sql",
    // 3: each answer keeps how much of its prompt came from the cache (and of that from a saved
    // prefix), how much was computed and the prefill time the reuse saved; and a full-text index
    // over conversation titles and message text (FTS5, external content: the text is stored once,
    // in the tables themselves, and triggers keep the index in step). Answers from before have
    // zeros and no saving; the index is filled from the rows already there.
    R"sql(
ALTER TABLE messages ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN prefix_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN computed_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN prefill_saved_ms REAL;

CREATE VIRTUAL TABLE conversation_titles_fts USING fts5 (
    title, content = 'conversations', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE message_text_fts USING fts5 (
    content, content = 'messages', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2');

CREATE TRIGGER conversations_fts_insert AFTER INSERT ON conversations BEGIN
    INSERT INTO conversation_titles_fts (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER conversations_fts_delete AFTER DELETE ON conversations BEGIN
    INSERT INTO conversation_titles_fts (conversation_titles_fts, rowid, title) VALUES ('delete', old.id, old.title);
END;
CREATE TRIGGER conversations_fts_update AFTER UPDATE OF title ON conversations BEGIN
    INSERT INTO conversation_titles_fts (conversation_titles_fts, rowid, title) VALUES ('delete', old.id, old.title);
    INSERT INTO conversation_titles_fts (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO message_text_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO message_text_fts (message_text_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO message_text_fts (message_text_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO message_text_fts (rowid, content) VALUES (new.id, new.content);
END;

INSERT INTO conversation_titles_fts (conversation_titles_fts) VALUES ('rebuild');
INSERT INTO message_text_fts (message_text_fts) VALUES ('rebuild');
)sql",
    // 4: each answer keeps the ids it was generated as (little-endian int32), so the next turn
    // renders it as its cache holds it; answers from before have none and are retokenized.
    R"sql(
ALTER TABLE messages ADD COLUMN token_ids BLOB;
)sql",
    // 5: where a conversation came from ('api': made by the local API server), and for a branch
    // the conversation it was branched from and how many of that one's messages it copied. A
    // deleted parent leaves its branches standing (parent_id becomes NULL, branch_at stays).
    R"sql(
ALTER TABLE conversations ADD COLUMN origin TEXT NOT NULL DEFAULT 'app' CHECK (origin IN ('app', 'api'));
ALTER TABLE conversations ADD COLUMN parent_id INTEGER REFERENCES conversations (id) ON DELETE SET NULL;
ALTER TABLE conversations ADD COLUMN branch_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX conversations_by_parent ON conversations (parent_id);
)sql",
    // 6: versions of an answer, and where the cache strategy changed. Regenerate and edit keep
    // what they replace: a place (conversation, ordinal) has numbered versions; the one shown is in
    // messages, the others' messages in version_messages. A place inside a version kept aside
    // (an answer regenerated after an edit that was then switched away) belongs to it: `within`.
    // A strategy change is recorded with the number of messages the conversation had then.
    // Conversations from before have neither.
    R"sql(
CREATE TABLE message_versions (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id   INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    ordinal           INTEGER NOT NULL,
    number            INTEGER NOT NULL,
    shown             INTEGER NOT NULL DEFAULT 0,
    within            INTEGER REFERENCES message_versions (id) ON DELETE CASCADE,
    created_ms        INTEGER NOT NULL
);
CREATE INDEX message_versions_by_place ON message_versions (conversation_id, ordinal);
CREATE INDEX message_versions_by_within ON message_versions (within);

CREATE TABLE version_messages (
    version_id        INTEGER NOT NULL REFERENCES message_versions (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL,
    role              TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content           TEXT NOT NULL,
    content_repaired  INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    generated_tokens  INTEGER NOT NULL DEFAULT 0,
    ttft_ms           REAL,
    tokens_per_second REAL,
    created_ms        INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    prefix_tokens     INTEGER NOT NULL DEFAULT 0,
    computed_tokens   INTEGER NOT NULL DEFAULT 0,
    prefill_saved_ms  REAL,
    token_ids         BLOB,
    PRIMARY KEY (version_id, position)
) WITHOUT ROWID;

CREATE TABLE strategy_changes (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id   INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    at_ordinal        INTEGER NOT NULL,
    from_spec         TEXT NOT NULL,
    to_spec           TEXT NOT NULL,
    created_ms        INTEGER NOT NULL
);
CREATE INDEX strategy_changes_by_conversation ON strategy_changes (conversation_id, at_ordinal);
)sql",
    // 7: each answer keeps how it ended (stop_reason_name: eos, end_of_turn, stop_string,
    // max_new_tokens, context_full, cancelled; NULL for answers from before; the answers kept aside as versions too), and a conversation
    // may have its own sampling, answer limit and context length (a NULL column: the global
    // setting). Deleting the conversation deletes its row.
    R"sql(
ALTER TABLE messages ADD COLUMN stop_reason TEXT;
ALTER TABLE version_messages ADD COLUMN stop_reason TEXT;

CREATE TABLE conversation_settings (
    conversation_id    INTEGER PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
    temperature        REAL,
    top_k              INTEGER,
    top_p              REAL,
    min_p              REAL,
    repetition_penalty REAL,
    seed               INTEGER,
    max_new_tokens     INTEGER,
    context_length     INTEGER
);
)sql",
};
static_assert(std::size(kMigrations) == Store::kSchemaVersion, "one migration step per schema version");
static_assert(kApplicationId == 1263944520, "the migration text spells out kApplicationId");

int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Snapshot names come back from the database and become paths, so only plain file names pass:
// nothing that could climb out of the snapshots folder or name a hidden temporary file.
bool is_plain_file_name(std::string_view name) {
    if (name.empty() || name.size() > 200 || name.front() == '.') return false;
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                        c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

void check_snapshot_name(std::string_view name) {
    if (!is_plain_file_name(name))
        throw Error("snapshot name " + in_quotes(name) +
                    " is not a plain file name (letters, digits, '.', '_', '-'; not starting with '.')");
}

std::string encode_tokens(const std::vector<int32_t>& tokens) {
    std::string out;
    out.resize(tokens.size() * 4);
    for (size_t i = 0; i < tokens.size(); ++i) {
        const auto u = static_cast<uint32_t>(tokens[i]);
        out[4 * i + 0] = static_cast<char>(u & 0xFF);
        out[4 * i + 1] = static_cast<char>((u >> 8) & 0xFF);
        out[4 * i + 2] = static_cast<char>((u >> 16) & 0xFF);
        out[4 * i + 3] = static_cast<char>((u >> 24) & 0xFF);
    }
    return out;
}

std::vector<int32_t> decode_tokens(std::string_view bytes) {
    std::vector<int32_t> out(bytes.size() / 4);
    for (size_t i = 0; i < out.size(); ++i) {
        const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 * i + k])); };
        out[i] = static_cast<int32_t>(b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24));
    }
    return out;
}

// Why a write of the database at `path` found no room: `reported` when it says so, else what the
// file system shows (SQLite does not always keep the system's error): a file of the database at
// the file size limit (EFBIG), or its folder's disk (nearly) full (ENOSPC). 0: neither.
int no_room_errno(const std::string& path, int reported) {
    if (reported == ENOSPC || reported == EDQUOT || reported == EFBIG) return reported;
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        for (const char* suffix : {"", "-wal", "-journal"}) {
            struct stat st {};
            if (::stat((path + suffix).c_str(), &st) == 0 &&
                static_cast<uint64_t>(st.st_size) + 65536 >= static_cast<uint64_t>(lim.rlim_cur))
                return EFBIG;
        }
    std::string folder = std::filesystem::path(path).parent_path().string();
    if (folder.empty()) folder = ".";
    struct statvfs vfs {};
    if (::statvfs(folder.c_str(), &vfs) == 0 && static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < (uint64_t{1} << 20))
        return ENOSPC;
    return 0;
}

// `path` as the path part of an SQLite URI: everything but unreserved characters and '/' escaped.
std::string uri_path(const std::string& path) {
    std::string out;
    for (unsigned char c : path) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                           c == '.' || c == '_' || c == '-' || c == '~';
        if (plain) {
            out += static_cast<char>(c);
        } else {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", c);
            out += hex;
        }
    }
    return out;
}

[[noreturn]] void fail(sqlite3* db, const std::string& path, const std::string& what, int rc) {
    const std::string name = "database " + in_quotes(path);
    const std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    // SQLite reports a file size limit (and some full disks) as a plain I/O error: the system's
    // own error says which.
    if (db && ((rc & 0xFF) == SQLITE_IOERR || (rc & 0xFF) == SQLITE_FULL)) {
        const std::string words = space_problem(no_room_errno(path, sqlite3_system_errno(db)));
        if (!words.empty())
            throw Error(name + ": " + words.substr(0, words.size() - 2) + " while " + what + " (" + in_quotes(path) +
                        " and its journal, in " + in_quotes(std::filesystem::path(path).parent_path().string()) +
                        "): " + msg);
    }
    switch (rc & 0xFF) {
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB: throw Error(name + " is damaged: " + msg);
        case SQLITE_FULL: throw Error(name + ": the disk is full (in " + in_quotes(std::filesystem::path(path).parent_path().string()) + "): " + msg);
        case SQLITE_BUSY:
        case SQLITE_LOCKED: throw Error(name + " is busy (another program holds its lock): " + msg);
        case SQLITE_READONLY: throw Error(name + " cannot be written: " + msg);
        case SQLITE_IOERR: throw Error(name + ": input/output error while " + what + ": " + msg);
        default: throw Error(name + ": " + what + " failed: " + msg);
    }
}

void exec(sqlite3* db, const std::string& path, const char* sql) {
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) fail(db, path, "running a statement", rc);
}

// A prepared statement, finalized on scope exit. Text and blobs are bound with SQLITE_TRANSIENT
// (copied), so a binding never outlives the string it came from.
class Statement {
public:
    Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
        const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
        if (rc != SQLITE_OK) fail(db_, path_, "preparing a statement", rc);
    }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind_int(int i, int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
    Statement& bind_int_or_null(int i, std::optional<int64_t> v) {
        return v ? bind_int(i, *v) : check(sqlite3_bind_null(stmt_, i));
    }
    Statement& bind_real(int i, std::optional<double> v) {
        return check(v ? sqlite3_bind_double(stmt_, i, *v) : sqlite3_bind_null(stmt_, i));
    }
    // sqlite binds a null pointer as SQL NULL, so empty text points at a literal instead.
    Statement& bind_int(int i, std::optional<int64_t> v) {
        return check(v ? sqlite3_bind_int64(stmt_, i, *v) : sqlite3_bind_null(stmt_, i));
    }
    Statement& bind_text(int i, std::string_view v) {
        return check(sqlite3_bind_text64(stmt_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
    }
    Statement& bind_text_or_null(int i, std::string_view v) {
        return v.empty() ? check(sqlite3_bind_null(stmt_, i)) : bind_text(i, v);
    }
    Statement& bind_blob(int i, std::string_view v) {
        return check(sqlite3_bind_blob64(stmt_, i, v.empty() ? "" : v.data(), v.size(), SQLITE_TRANSIENT));
    }

    // True while rows come; false when done. Throws on any other outcome.
    bool step() {
        const int rc = sqlite3_step(stmt_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        fail(db_, path_, "running a statement", rc);
    }
    // Runs a statement that changes rows and returns how many it changed. A UNIQUE violation is
    // reported as `taken` (the caller knows which name it was) instead of sqlite's wording.
    int64_t change(const std::string& taken = {}) {
        const int rc = sqlite3_step(stmt_);
        if (rc == SQLITE_CONSTRAINT_UNIQUE && !taken.empty()) throw Error(taken);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) fail(db_, path_, "running a statement", rc);
        return sqlite3_changes64(db_);
    }

    bool is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
    int64_t integer(int i) const { return sqlite3_column_int64(stmt_, i); }
    std::optional<int64_t> optional_integer(int i) const {
        return is_null(i) ? std::nullopt : std::optional<int64_t>(integer(i));
    }
    std::optional<double> optional_real(int i) const {
        return is_null(i) ? std::nullopt : std::optional<double>(sqlite3_column_double(stmt_, i));
    }
    std::optional<std::string> optional_text(int i) const {
        return is_null(i) ? std::nullopt : std::optional<std::string>(text(i));
    }
    std::string text(int i) const {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
        const int n = sqlite3_column_bytes(stmt_, i);  // after column_text, as sqlite requires
        return p ? std::string(p, static_cast<size_t>(n)) : std::string();
    }
    std::string blob(int i) const {
        const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, i));
        const int n = sqlite3_column_bytes(stmt_, i);
        return p ? std::string(p, static_cast<size_t>(n)) : std::string();
    }

private:
    Statement& check(int rc) {
        if (rc != SQLITE_OK) fail(db_, path_, "binding a parameter", rc);
        return *this;
    }
    sqlite3* db_;
    const std::string& path_;
    sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE takes the write lock up front, so a transaction that reads and then writes
// cannot fail half way with SQLITE_BUSY. Rolled back unless committed.
class Transaction {
public:
    Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) { exec(db_, path_, "BEGIN IMMEDIATE"); }
    ~Transaction() {
        if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit() {
        exec(db_, path_, "COMMIT");
        committed_ = true;
    }

private:
    sqlite3* db_;
    const std::string& path_;
    bool committed_ = false;
};

// Column lists shared by the readers, in the order the row readers below expect.
#define KVCHAT_CONVERSATION_COLUMNS \
    "id, title, model_fingerprint, cache_spec, snapshot, created_ms, updated_ms, origin, parent_id, branch_at"
#define KVCHAT_MESSAGE_COLUMNS                                                                             \
    "id, conversation_id, ordinal, role, content, content_repaired, prompt_tokens, generated_tokens, ttft_ms, " \
    "tokens_per_second, created_ms, cached_tokens, prefix_tokens, computed_tokens, prefill_saved_ms, token_ids, " \
    "stop_reason"
#define KVCHAT_PREFIX_COLUMNS                                                                                  \
    "id, name, text, text_repaired, model_fingerprint, cache_spec, tokens, snapshot, created_ms, last_used_ms, " \
    "use_count"

ConversationRecord read_conversation(const Statement& st) {
    ConversationRecord c;
    c.id = st.integer(0);
    c.title = st.text(1);
    c.model_fingerprint = st.text(2);
    c.cache_spec = st.text(3);
    c.snapshot = st.text(4);
    c.created_ms = st.integer(5);
    c.updated_ms = st.integer(6);
    c.origin = st.text(7);
    c.parent_id = st.optional_integer(8);
    c.branch_at = st.integer(9);
    return c;
}

// `whose`: which row it is, for the message naming a damaged database.
Role parse_role(const std::string& role, const std::string& path, const std::string& whose) {
    if (role == "system") return Role::System;
    if (role == "user") return Role::User;
    if (role == "assistant") return Role::Assistant;
    throw Error("database " + in_quotes(path) + " is damaged: " + whose + " has the role " + in_quotes(role));
}

MessageRecord read_message(const Statement& st, const std::string& path) {
    MessageRecord m;
    m.id = st.integer(0);
    m.conversation_id = st.integer(1);
    m.ordinal = st.integer(2);
    m.role = parse_role(st.text(3), path, "message " + std::to_string(m.id));
    m.content = st.text(4);
    m.content_repaired = st.integer(5) != 0;
    m.stats.prompt_tokens = st.integer(6);
    m.stats.generated_tokens = st.integer(7);
    m.stats.ttft_ms = st.optional_real(8);
    m.stats.tokens_per_second = st.optional_real(9);
    m.created_ms = st.integer(10);
    m.stats.cached_tokens = st.integer(11);
    m.stats.prefix_tokens = st.integer(12);
    m.stats.computed_tokens = st.integer(13);
    m.stats.prefill_saved_ms = st.optional_real(14);
    // Only an acceleration: a list that cannot be right is dropped, and the answer's text is
    // tokenized instead (the renderer also checks the ids against the text and the vocabulary).
    constexpr size_t kMaxIdBytes = size_t(4) << 20;
    if (const std::string ids = st.blob(15); ids.size() % 4 == 0 && ids.size() <= kMaxIdBytes)
        m.stats.token_ids = decode_tokens(ids);
    // A name this build does not know (a newer kvchat's) reads as "not recorded".
    if (const auto reason = st.optional_text(16)) m.stats.stop_reason = parse_stop_reason(*reason);
    return m;
}

PrefixRecord read_prefix(const Statement& st, const std::string& path) {
    PrefixRecord p;
    p.id = st.integer(0);
    p.name = st.text(1);
    p.text = st.text(2);
    p.text_repaired = st.integer(3) != 0;
    p.model_fingerprint = st.text(4);
    p.cache_spec = st.text(5);
    const std::string tokens = st.blob(6);
    if (tokens.size() % 4 != 0)
        throw Error("database " + in_quotes(path) + " is damaged: the token list of prefix " + in_quotes(p.name) + " is " +
                    std::to_string(tokens.size()) + " bytes, not a whole number of 4-byte tokens");
    p.tokens = decode_tokens(tokens);
    p.snapshot = st.text(7);
    p.created_ms = st.integer(8);
    p.last_used_ms = st.optional_integer(9);
    p.use_count = st.integer(10);
    return p;
}

// The first problem integrity_check names, without its "*** in database main ***" heading.
std::string first_finding(const std::string& report) {
    size_t start = 0;
    while (start < report.size()) {
        const size_t end = std::min(report.find('\n', start), report.size());
        const std::string line = report.substr(start, end - start);
        if (!line.empty() && line.rfind("***", 0) != 0) return line;
        start = end + 1;
    }
    return report;
}

void check_name(std::string_view kind, std::string_view name) {
    if (name.empty()) throw Error("a " + std::string(kind) + " needs a name");
}

}  // namespace

std::string Store::default_path() { return data_dir() + "/kvchat.db"; }

std::string read_only_problem(const std::string& path, int err) {
    const std::string name = "database " + in_quotes(path);
    const char* reading = ": it can be read (kvchat-cli conversations, prefix list) but not changed";
    if (err == EROFS) return name + " is on a read-only file system" + reading;
    if (err == EACCES || err == EPERM)
        return name + " is read-only (no permission to write it or its folder)" + reading;
    return {};
}

const char* Store::migration_sql(int version) {
    if (version < 1 || version > kSchemaVersion) throw Error("store: no schema version " + std::to_string(version));
    return kMigrations[version - 1];
}

Store::Store(const std::string& path, Access access) : path_(path) {
    namespace fs = std::filesystem;
    if (path_.empty()) throw Error("the database path is empty");
    // Only a regular file (or nothing yet) is a database: SQLite would open /dev/null or a FIFO and
    // create a "-journal" file beside it.
    bool exists = false;
    try {
        exists = regular_file_exists(path_);
    } catch (const Error& e) {
        throw Error(std::string("database ") + e.what());
    }
    key_ = file_key(fs::path(path_).filename().string());
    fs::path folder = fs::path(path_).parent_path();
    if (folder.empty()) folder = ".";
    snapshot_dir_ = (folder / "snapshots").string();
    if (access == Access::ReadOnly) {
        if (!exists) throw Error("database " + in_quotes(path_) + " does not exist");
        // A WAL database is read through its -shm file, which a folder that cannot be written
        // cannot hold: there the file is read as immutable (nothing can change it meanwhile).
        const bool folder_writable = ::access(folder.c_str(), W_OK) == 0;
        const std::string uri = "file:" + uri_path(path_) + (folder_writable ? "" : "?immutable=1");
        open_connection(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, [&] { open_checked(false); });
        return;
    }
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec)
        throw Error("cannot create the folder " + in_quotes(folder.string()) + " for database " + in_quotes(path_) + ": " +
                    ec.message());
    // SQLite would open a file it cannot write read-only and then fail at the first statement
    // with "unable to open database file": say what is wrong instead.
    for (const std::string& target : {exists ? path_ : std::string(), folder.string()}) {
        if (target.empty() || ::access(target.c_str(), W_OK) == 0) continue;
        const int err = errno;
        const std::string why = read_only_problem(path_, err);
        if (!why.empty()) throw Error(why);
    }
    open_connection(path_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, [&] {
        open_checked(true);
        fs::create_directories(snapshot_dir_, ec);
        if (ec) throw Error("cannot create the snapshot folder " + in_quotes(snapshot_dir_) + ": " + ec.message());
        // Snapshot writes a killed process left half done (a snapshot can be tens of MB).
        remove_abandoned_temporaries(snapshot_dir_);
        remove_orphan_snapshots();
    });
}

void Store::open_connection(const std::string& name, int flags, const std::function<void()>& then) {
    const int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_EXRESCODE, nullptr);
    if (rc != SQLITE_OK) {
        const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw Error("cannot open database " + in_quotes(path_) + ": " + msg);
    }
    try {
        then();
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

Store::~Store() {
    if (db_) sqlite3_close(db_);
}

void Store::open_checked(bool writable) {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    // Until the file is known to be ours and current, closing must not checkpoint a leftover
    // write-ahead log into it: a refused database is left exactly as it was.
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);

    const auto query_int = [&](const char* sql) {
        Statement st(db_, path_, sql);
        return st.step() ? st.integer(0) : int64_t{0};
    };
    const int64_t version = query_int("PRAGMA user_version");
    if (version > kSchemaVersion)
        throw Error("database " + in_quotes(path_) + " is from a newer kvchat (schema " + std::to_string(version) +
                    ", this build knows " + std::to_string(kSchemaVersion) +
                    "); it was left unchanged: open it with a newer kvchat or choose another database");
    if (version < 0)
        throw Error("database " + in_quotes(path_) + " is damaged: its schema version is " + std::to_string(version));
    const int64_t application = query_int("PRAGMA application_id");
    if (application != 0 && application != kApplicationId)
        throw Error("database " + in_quotes(path_) + " belongs to another program (application id " +
                    std::to_string(application) + "); it was left unchanged");
    if (version == 0 && query_int("SELECT count(*) FROM sqlite_schema") > 0)
        throw Error("database " + in_quotes(path_) +
                    " is not a kvchat database (it has tables but no kvchat schema version); it was left unchanged");
    if (version > 0) {
        // integrity_check reads every page once and checks every index against its table
        // (quick_check does not: fuzzing found an index entry moved to another conversation, which
        // then gave a new conversation an old one's message); about 2 s for 50,000 messages on a
        // busy machine. Damage is reported now, naming the file, rather than half way through a
        // conversation.
        const std::string check = pragma("integrity_check");
        if (check != "ok") throw Error("database " + in_quotes(path_) + " is damaged: " + first_finding(check));
    }

    if (!writable) {
        // Nothing is migrated here: the queries below expect the current schema.
        if (version < kSchemaVersion)
            throw Error("database " + in_quotes(path_) + (version == 0 ? " holds no kvchat data yet" :
                        " is from an earlier kvchat (schema " + std::to_string(version) +
                        "): open it once where it can be written (kvchat-cli chat or the window) to upgrade it"));
        return;
    }
    exec(db_, path_, "PRAGMA journal_mode = WAL");
    exec(db_, path_, "PRAGMA foreign_keys = ON");
    // FULL: a committed message survives a power cut, not only a crash of the program.
    exec(db_, path_, "PRAGMA synchronous = FULL");
    migrate(static_cast<int>(version));
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
}

void Store::migrate(int from_version) {
    for (int target = from_version + 1; target <= kSchemaVersion; ++target) {
        Transaction t(db_, path_);
        // Another process may have migrated between our check and taking the write lock.
        Statement v(db_, path_, "PRAGMA user_version");
        if (v.step() && v.integer(0) >= target) continue;
        exec(db_, path_, kMigrations[target - 1]);
        // PRAGMA takes no bound parameters; the number is this build's constant, not input.
        exec(db_, path_, ("PRAGMA user_version = " + std::to_string(target)).c_str());
        t.commit();
    }
}

std::string Store::snapshot_path(std::string_view name) const {
    check_snapshot_name(name);
    return snapshot_dir_ + "/" + std::string(name);
}

std::string Store::legacy_conversation_snapshot_name(int64_t conversation_id) {
    return "conversation-" + std::to_string(conversation_id) + ".kvcache";
}

std::string Store::legacy_prefix_snapshot_name(int64_t prefix_id) {
    return "prefix-" + std::to_string(prefix_id) + ".kvcache";
}

std::string Store::conversation_snapshot_name(int64_t conversation_id) const {
    return key_ + "." + legacy_conversation_snapshot_name(conversation_id);
}

std::string Store::prefix_snapshot_name(int64_t prefix_id) const {
    return key_ + "." + legacy_prefix_snapshot_name(prefix_id);
}

std::string Store::file_key(std::string_view name) {
    // Snapshot names must be plain (is_plain_file_name, at most 200 characters) and leave room for
    // ".conversation-<id>.kvcache".
    constexpr size_t kMaxKey = 120;
    std::string key;
    bool changed = false;
    for (char c : name) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                           c == '_' || c == '-';
        key += plain ? c : '_';
        changed |= !plain;
    }
    if (key.empty() || key.front() == '.') {
        key.insert(key.begin(), '_');
        changed = true;
    }
    if (key.size() > kMaxKey - 17) {
        key.resize(kMaxKey - 17);
        changed = true;
    }
    if (changed) {
        // Two names that differ only in replaced characters must not meet: FNV-1a of the original.
        uint64_t h = 14695981039346656037ull;
        for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
        key += "-";
        key += hex;
    }
    return key;
}

std::string Store::conversation_lock_path(int64_t conversation_id) const {
    return (std::filesystem::path(path_).parent_path() / "locks" /
            (key_ + ".conversation-" + std::to_string(conversation_id) + ".lock"))
        .string();
}

void Store::remove_snapshot_file(std::string_view name) const {
    if (name.empty()) return;
    const std::string path = snapshot_path(name);
    if (!name.starts_with(key_ + ".") && !alone_in_folder()) return;
    std::remove(path.c_str());
}

bool Store::alone_in_folder() const {
    namespace fs = std::filesystem;
    fs::path folder = fs::path(path_).parent_path();
    if (folder.empty()) folder = ".";
    std::error_code ec;
    const fs::path self = fs::path(path_);
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
        std::error_code type_ec;
        if (!entry.is_regular_file(type_ec)) continue;
        if (fs::equivalent(entry.path(), self, type_ec)) continue;
        // SQLite's own files (the -wal, -shm, -journal of this database or another) are never a
        // database, and must not be opened: closing any descriptor of a file drops every POSIX
        // lock this process holds on it, and the lock SQLite keeps on this database's -shm is what
        // tells another program it is not the first. Without it, the next kvchat-cli truncates and
        // rebuilds the -shm under this process's mapping of it (SIGBUS here, a lost wal-index).
        const std::string name = entry.path().filename().string();
        if (name.ends_with("-wal") || name.ends_with("-shm") || name.ends_with("-journal")) continue;
        // A kvchat database: SQLite's header with kvchat's application id (offset 68, big-endian).
        unsigned char header[72] = {};
        FILE* f = std::fopen(entry.path().c_str(), "rb");
        if (!f) continue;
        const size_t got = std::fread(header, 1, sizeof header, f);
        std::fclose(f);
        if (got < sizeof header || std::memcmp(header, "SQLite format 3", 16) != 0) continue;
        const uint32_t app = (uint32_t{header[68]} << 24) | (uint32_t{header[69]} << 16) | (uint32_t{header[70]} << 8) |
                             uint32_t{header[71]};
        if (app == static_cast<uint32_t>(kApplicationId)) return false;
    }
    return !ec;
}

namespace {

// The id in "PREFIX<digits>.kvcache", or -1 for any other name (kvchat's names only).
int64_t snapshot_id(std::string_view name, std::string_view prefix) {
    constexpr std::string_view kSuffix = ".kvcache";
    if (!name.starts_with(prefix) || !name.ends_with(kSuffix)) return -1;
    const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - kSuffix.size());
    if (digits.empty() || digits.size() > 18 || digits[0] == '0') return -1;
    int64_t id = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return -1;
        id = id * 10 + (c - '0');
    }
    return id;
}

}  // namespace

size_t Store::remove_orphan_snapshots() {
    // Rows are created before their snapshot is ever written and ids are never reused
    // (AUTOINCREMENT), so a file named for an id the table has handed out but no longer holds
    // belongs to a deleted row for good. Ids above the highest handed out are left alone: another
    // process may be creating that row now. A conversation's file is removed only under its lock
    // (taken without waiting): a process that holds the conversation is left to its work.
    const auto highest = [&](const char* table) {
        Statement st(db_, path_, "SELECT seq FROM sqlite_sequence WHERE name = ?");
        st.bind_text(1, table);
        return st.step() ? st.integer(0) : int64_t{0};
    };
    const auto has_row = [&](const char* sql, int64_t id) {
        Statement st(db_, path_, sql);
        st.bind_int(1, id);
        return st.step();
    };
    size_t removed = 0;
    try {
        const int64_t last_conversation = highest("conversations"), last_prefix = highest("prefixes");
        // Asked only when there is a file of the shared names (it reads the folder's other files).
        std::optional<bool> alone;
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(snapshot_dir_, ec)) {
            const std::string name = entry.path().filename().string();
            // This database's names, and the shared names of earlier versions when no other
            // database of the folder can own them.
            int64_t conversation = snapshot_id(name, key_ + ".conversation-");
            int64_t prefix = snapshot_id(name, key_ + ".prefix-");
            bool legacy = false;
            if (conversation < 0 && prefix < 0) {
                conversation = snapshot_id(name, "conversation-");
                prefix = snapshot_id(name, "prefix-");
                if (conversation < 0 && prefix < 0) continue;
                if (!alone) alone = alone_in_folder();
                if (!*alone) continue;
                legacy = true;
            }
            std::error_code type_ec;
            if (!entry.is_regular_file(type_ec) || entry.is_symlink(type_ec)) continue;
            if (prefix >= 0) {
                if (prefix > last_prefix || has_row("SELECT 1 FROM prefixes WHERE id = ?", prefix)) continue;
                if (::unlink(entry.path().c_str()) == 0) ++removed;
                continue;
            }
            if (conversation > last_conversation) continue;
            // A lock file exists once a process has changed the conversation; without one, none holds it.
            std::unique_ptr<ConversationLock> lock;
            const std::string lock_path =
                legacy ? (std::filesystem::path(path_).parent_path() / "locks" /
                          ("conversation-" + std::to_string(conversation) + ".lock")).string()
                       : conversation_lock_path(conversation);
            if (std::filesystem::exists(lock_path, type_ec)) {
                try {
                    lock = std::make_unique<ConversationLock>(lock_path, name, std::chrono::milliseconds(0));
                } catch (const Error&) {
                    continue;  // held by a live process
                }
            }
            if (has_row("SELECT 1 FROM conversations WHERE id = ?", conversation)) continue;
            if (::unlink(entry.path().c_str()) == 0) ++removed;
            if (lock) ::unlink(lock_path.c_str());
        }
    } catch (const std::exception&) {
        // Best effort: an unreadable folder or a busy database leaves the files for the next open.
    }
    return removed;
}

std::vector<std::string> Store::snapshot_names() const {
    Statement st(db_, path_,
                 "SELECT snapshot FROM conversations WHERE snapshot IS NOT NULL "
                 "UNION SELECT snapshot FROM prefixes WHERE snapshot IS NOT NULL");
    std::vector<std::string> out;
    while (st.step()) out.push_back(st.text(0));
    return out;
}

std::string Store::pragma(std::string_view name) const {
    // Pragma names cannot be bound, so only a bare lower-case identifier is accepted.
    if (name.empty()) throw Error("empty pragma name");
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || c == '_')) throw Error("not a pragma name: " + in_quotes(name));
    const std::string sql = "PRAGMA " + std::string(name);
    Statement st(db_, path_, sql.c_str());
    std::string out;
    while (st.step()) {
        if (!out.empty()) out += '\n';
        out += st.text(0);
    }
    return out;
}

int64_t Store::next_update_time() const {
    // One past the newest when the clock has not moved on (or went back), so "most recently
    // updated first" always follows the order of the updates.
    Statement st(db_, path_, "SELECT max(updated_ms) FROM conversations");
    const int64_t newest = st.step() && !st.is_null(0) ? st.integer(0) : 0;
    return std::max(now_ms(), newest + 1);
}

void Store::require_conversation(int64_t id) const {
    Statement st(db_, path_, "SELECT 1 FROM conversations WHERE id = ?1");
    st.bind_int(1, id);
    if (!st.step()) throw Error("no conversation with id " + std::to_string(id));
}

// ---- conversations ----

namespace {

void check_origin(std::string_view origin) {
    if (origin != "app" && origin != "api")
        throw Error("conversation origin " + in_quotes(origin) + " is neither \"app\" nor \"api\"");
}

}  // namespace

int64_t Store::insert_conversation(const std::string& name, std::string_view model_fingerprint,
                                   std::string_view cache_spec, std::string_view origin,
                                   std::optional<int64_t> parent_id, int64_t branch_at, int64_t now) {
    Statement st(db_, path_,
                 "INSERT INTO conversations (title, model_fingerprint, cache_spec, created_ms, updated_ms, origin, "
                 "parent_id, branch_at) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7)");
    st.bind_text(1, name)
        .bind_text(2, repair_utf8(model_fingerprint).text)
        .bind_text(3, repair_utf8(cache_spec).text)
        .bind_int(4, now)
        .bind_text(5, origin)
        .bind_int_or_null(6, parent_id)
        .bind_int(7, branch_at);
    st.change("a conversation named " + in_quotes(name) + " already exists");
    return sqlite3_last_insert_rowid(db_);
}

ConversationRecord Store::create_conversation(std::string_view title, std::string_view model_fingerprint,
                                              std::string_view cache_spec, const std::vector<PrefixMessage>& opening,
                                              std::vector<MessageRecord>* stored, std::string_view origin) {
    const std::string name = repair_utf8(title).text;
    check_name("conversation", name);
    check_origin(origin);
    Transaction t(db_, path_);
    const int64_t now = next_update_time();
    const int64_t id = insert_conversation(name, model_fingerprint, cache_spec, origin, std::nullopt, 0, now);
    std::vector<MessageRecord> rows;
    for (const PrefixMessage& m : opening) rows.push_back(insert_message(id, m.role, m.content, {}, now));
    t.commit();
    if (stored) *stored = std::move(rows);
    return *find_conversation_by_id(id);
}

ConversationRecord Store::create_branch(std::string_view title, int64_t parent_id, int64_t at, std::string_view origin,
                                        std::string_view model_fingerprint, std::string_view cache_spec) {
    const std::string name = repair_utf8(title).text;
    check_name("conversation", name);
    check_origin(origin);
    Transaction t(db_, path_);
    require_conversation(parent_id);
    Statement count(db_, path_, "SELECT count(*) FROM messages WHERE conversation_id = ?1");
    count.bind_int(1, parent_id).step();
    const int64_t have = count.integer(0);
    if (at < 1 || at > have)
        throw Error("a branch copies 1 to " + std::to_string(have) + " messages of its conversation (it has " +
                    std::to_string(have) + "); " + std::to_string(at) + " were asked for");
    const int64_t now = next_update_time();
    const int64_t id = insert_conversation(name, model_fingerprint, cache_spec, origin, parent_id, at, now);
    // Every column of the copied messages (their figures and generated ids too: the branch renders
    // them as its parent's cache holds them); the copies are new rows of this conversation.
    Statement copy(db_, path_,
                   "INSERT INTO messages (conversation_id, ordinal, role, content, content_repaired, prompt_tokens, "
                   "generated_tokens, ttft_ms, tokens_per_second, created_ms, cached_tokens, prefix_tokens, "
                   "computed_tokens, prefill_saved_ms, token_ids) "
                   "SELECT ?1, ordinal, role, content, content_repaired, prompt_tokens, generated_tokens, ttft_ms, "
                   "tokens_per_second, created_ms, cached_tokens, prefix_tokens, computed_tokens, prefill_saved_ms, "
                   "token_ids FROM messages WHERE conversation_id = ?2 AND ordinal < ?3 ORDER BY ordinal");
    copy.bind_int(1, id).bind_int(2, parent_id).bind_int(3, at);
    if (copy.change() != at) throw Error("conversation " + std::to_string(parent_id) + "'s message ordinals have gaps");
    t.commit();
    return *find_conversation_by_id(id);
}

std::optional<ConversationRecord> Store::find_conversation(std::string_view title) const {
    Statement st(db_, path_, "SELECT " KVCHAT_CONVERSATION_COLUMNS " FROM conversations WHERE title = ?1");
    st.bind_text(1, repair_utf8(title).text);
    if (!st.step()) return std::nullopt;
    return read_conversation(st);
}

std::optional<ConversationRecord> Store::find_conversation_by_id(int64_t id) const {
    Statement st(db_, path_, "SELECT " KVCHAT_CONVERSATION_COLUMNS " FROM conversations WHERE id = ?1");
    st.bind_int(1, id);
    if (!st.step()) return std::nullopt;
    return read_conversation(st);
}

std::vector<ConversationRecord> Store::list_conversations() const {
    Statement st(db_, path_,
                 "SELECT " KVCHAT_CONVERSATION_COLUMNS " FROM conversations ORDER BY updated_ms DESC, id DESC");
    std::vector<ConversationRecord> out;
    while (st.step()) out.push_back(read_conversation(st));
    return out;
}

std::vector<ConversationRecord> Store::conversations_opening_with(Role role, std::string_view content) const {
    Statement st(db_, path_,
                 "SELECT " KVCHAT_CONVERSATION_COLUMNS " FROM conversations c WHERE EXISTS (SELECT 1 FROM messages m "
                 "WHERE m.conversation_id = c.id AND m.ordinal = 0 AND m.role = ?1 AND m.content = ?2) "
                 "ORDER BY updated_ms DESC, id DESC");
    st.bind_text(1, role_name(role)).bind_text(2, repair_utf8(content).text);
    std::vector<ConversationRecord> out;
    while (st.step()) out.push_back(read_conversation(st));
    return out;
}

namespace {

// The overview columns after the conversation's own: message count, the last answer's prompt and
// reply tokens, and the last message's role.
#define KVCHAT_OVERVIEW_SELECT                                                                                   \
    "SELECT c.id, c.title, c.model_fingerprint, c.cache_spec, c.snapshot, c.created_ms, c.updated_ms, "          \
    "c.origin, c.parent_id, c.branch_at, "                                                                       \
    "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id), "                                        \
    "(SELECT m.prompt_tokens + m.generated_tokens FROM messages m WHERE m.conversation_id = c.id AND "          \
    "m.role = 'assistant' ORDER BY m.ordinal DESC LIMIT 1), "                                                   \
    "(SELECT m.role FROM messages m WHERE m.conversation_id = c.id ORDER BY m.ordinal DESC LIMIT 1) "           \
    "FROM conversations c "

ConversationOverview read_overview(const Statement& st) {
    ConversationOverview o;
    o.conversation = read_conversation(st);
    o.message_count = st.integer(10);
    o.tokens = st.optional_integer(11).value_or(0);
    o.last_unanswered = st.text(12) == "user";
    return o;
}

// The words of a plain-text query as an FTS5 query: each word quoted (quotes inside doubled),
// so nothing the user typed is read as search syntax, and matched as the start of a word.
std::string fts_query(std::string_view text) {
    std::string out, word;
    auto flush = [&] {
        if (word.empty()) return;
        if (!out.empty()) out += ' ';
        out += '"';
        for (char c : word) {
            if (c == '"') out += '"';
            out += c;
        }
        out += "\"*";
        word.clear();
    };
    for (char c : text) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')
            flush();
        else
            word += c;
    }
    flush();
    return out;
}

}  // namespace

std::vector<ConversationOverview> Store::list_conversation_overviews() const {
    Statement st(db_, path_, KVCHAT_OVERVIEW_SELECT "ORDER BY c.updated_ms DESC, c.id DESC");
    std::vector<ConversationOverview> out;
    while (st.step()) out.push_back(read_overview(st));
    return out;
}

std::vector<ConversationOverview> Store::search_conversations(std::string_view query) const {
    const std::string match = fts_query(repair_utf8(query).text);
    if (match.empty()) return list_conversation_overviews();
    // A word that holds only separators (punctuation) matches nothing rather than failing.
    Statement st(db_, path_,
                 KVCHAT_OVERVIEW_SELECT
                 "WHERE c.id IN (SELECT rowid FROM conversation_titles_fts WHERE conversation_titles_fts MATCH ?1) "
                 "OR c.id IN (SELECT m.conversation_id FROM messages m WHERE m.id IN "
                 "(SELECT rowid FROM message_text_fts WHERE message_text_fts MATCH ?1)) "
                 "ORDER BY c.updated_ms DESC, c.id DESC");
    st.bind_text(1, match);
    std::vector<ConversationOverview> out;
    while (st.step()) out.push_back(read_overview(st));
    return out;
}

std::vector<Store::MessageMatch> Store::search_message_matches(std::string_view query, int snippet_words) const {
    const std::string match = fts_query(repair_utf8(query).text);
    std::vector<MessageMatch> out;
    if (match.empty()) return out;
    Statement st(db_, path_,
                 "SELECT m.conversation_id, m.id, m.ordinal, "
                 "snippet(message_text_fts, 0, char(2), char(3), '…', ?2) "
                 "FROM message_text_fts JOIN messages m ON m.id = message_text_fts.rowid "
                 "WHERE message_text_fts MATCH ?1 ORDER BY m.conversation_id, m.ordinal");
    st.bind_text(1, match).bind_int(2, std::clamp(snippet_words, 1, 64));
    while (st.step()) {
        const int64_t conversation = st.integer(0);
        if (!out.empty() && out.back().conversation_id == conversation) continue;  // its first match only
        out.push_back({conversation, st.integer(1), st.integer(2), st.text(3)});
    }
    return out;
}

void Store::rename_conversation(int64_t id, std::string_view title) {
    const std::string name = repair_utf8(title).text;
    check_name("conversation", name);
    Statement st(db_, path_, "UPDATE conversations SET title = ?1 WHERE id = ?2");
    st.bind_text(1, name).bind_int(2, id);
    if (st.change("a conversation named " + in_quotes(name) + " already exists") == 0)
        throw Error("no conversation with id " + std::to_string(id));
}

std::string Store::delete_conversation(int64_t id) {
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT snapshot FROM conversations WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no conversation with id " + std::to_string(id));
    std::string snapshot = get.text(0);
    Statement del(db_, path_, "DELETE FROM conversations WHERE id = ?1");
    del.bind_int(1, id).change();
    t.commit();
    return snapshot;
}

void Store::set_conversation_cache_spec(int64_t id, std::string_view cache_spec, std::optional<int64_t> at) {
    const std::string spec = repair_utf8(cache_spec).text;
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT cache_spec FROM conversations WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no conversation with id " + std::to_string(id));
    const std::string was = get.text(0);
    if (was == spec) return;  // (the transaction rolls back: nothing changed)
    Statement st(db_, path_, "UPDATE conversations SET cache_spec = ?1 WHERE id = ?2");
    st.bind_text(1, spec).bind_int(2, id).change();
    if (!was.empty()) {
        Statement count(db_, path_, "SELECT count(*) FROM messages WHERE conversation_id = ?1");
        count.bind_int(1, id).step();
        const int64_t messages = count.integer(0);
        Statement rec(db_, path_,
                      "INSERT INTO strategy_changes (conversation_id, at_ordinal, from_spec, to_spec, created_ms) "
                      "VALUES (?1, ?2, ?3, ?4, ?5)");
        rec.bind_int(1, id)
            .bind_int(2, std::clamp<int64_t>(at.value_or(messages), 0, messages))
            .bind_text(3, was)
            .bind_text(4, spec)
            .bind_int(5, now_ms())
            .change();
    }
    t.commit();
}

std::vector<StrategyChange> Store::strategy_changes(int64_t conversation_id) const {
    Statement st(db_, path_,
                 "SELECT at_ordinal, from_spec, to_spec, created_ms FROM strategy_changes WHERE conversation_id = ?1 "
                 "ORDER BY id");
    st.bind_int(1, conversation_id);
    std::vector<StrategyChange> out;
    while (st.step()) out.push_back({st.integer(0), st.text(1), st.text(2), st.integer(3)});
    return out;
}

void Store::set_conversation_model(int64_t id, std::string_view model_fingerprint) {
    Statement st(db_, path_, "UPDATE conversations SET model_fingerprint = ?1 WHERE id = ?2");
    st.bind_text(1, repair_utf8(model_fingerprint).text).bind_int(2, id);
    if (st.change() == 0) throw Error("no conversation with id " + std::to_string(id));
}

std::string Store::set_conversation_snapshot(int64_t id, std::string_view snapshot) {
    if (!snapshot.empty()) check_snapshot_name(snapshot);
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT snapshot FROM conversations WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no conversation with id " + std::to_string(id));
    std::string old = get.text(0);
    Statement set(db_, path_, "UPDATE conversations SET snapshot = ?1 WHERE id = ?2");
    set.bind_text_or_null(1, snapshot).bind_int(2, id).change();
    t.commit();
    return old == snapshot ? std::string() : old;
}

void Store::touch_conversation(int64_t id) {
    Transaction t(db_, path_);
    Statement st(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    st.bind_int(1, next_update_time()).bind_int(2, id);
    if (st.change() == 0) throw Error("no conversation with id " + std::to_string(id));
    t.commit();
}

// ---- messages ----

MessageRecord Store::append_message(int64_t conversation_id, Role role, std::string_view content,
                                    const AnswerFigures& stats) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    const int64_t now = next_update_time();
    MessageRecord m = insert_message(conversation_id, role, content, stats, now);
    Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    touch.bind_int(1, now).bind_int(2, conversation_id).change();
    t.commit();
    return m;
}

std::vector<MessageRecord> Store::append_messages(int64_t conversation_id, const std::vector<PrefixMessage>& messages) {
    if (messages.empty()) throw Error("no messages to append");
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    const int64_t now = next_update_time();
    std::vector<MessageRecord> out;
    for (const PrefixMessage& m : messages) out.push_back(insert_message(conversation_id, m.role, m.content, {}, now));
    Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    touch.bind_int(1, now).bind_int(2, conversation_id).change();
    t.commit();
    return out;
}

MessageRecord Store::insert_message(int64_t conversation_id, Role role, std::string_view content,
                                    const AnswerFigures& stats, int64_t now) {
    RepairedUtf8 text = repair_utf8(content);
    Statement next(db_, path_, "SELECT coalesce(max(ordinal), -1) + 1 FROM messages WHERE conversation_id = ?1");
    next.bind_int(1, conversation_id).step();
    const int64_t ordinal = next.integer(0);
    Statement insert(db_, path_,
                     "INSERT INTO messages (conversation_id, ordinal, role, content, content_repaired, prompt_tokens, "
                     "generated_tokens, ttft_ms, tokens_per_second, created_ms, cached_tokens, prefix_tokens, "
                     "computed_tokens, prefill_saved_ms, token_ids, stop_reason) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)");
    insert.bind_int(1, conversation_id)
        .bind_int(2, ordinal)
        .bind_text(3, role_name(role))
        .bind_text(4, text.text)
        .bind_int(5, text.replaced ? 1 : 0)
        .bind_int(6, stats.prompt_tokens)
        .bind_int(7, stats.generated_tokens)
        .bind_real(8, stats.ttft_ms)
        .bind_real(9, stats.tokens_per_second)
        .bind_int(10, now)
        .bind_int(11, stats.cached_tokens)
        .bind_int(12, stats.prefix_tokens)
        .bind_int(13, stats.computed_tokens)
        .bind_real(14, stats.prefill_saved_ms)
        .bind_blob(15, encode_tokens(stats.token_ids))
        .bind_text_or_null(16, stats.stop_reason ? stop_reason_name(*stats.stop_reason) : std::string_view())
        .change();
    MessageRecord m;
    m.id = sqlite3_last_insert_rowid(db_);
    m.conversation_id = conversation_id;
    m.ordinal = ordinal;
    m.role = role;
    m.content = std::move(text.text);
    m.content_repaired = text.replaced;
    m.stats = stats;
    m.created_ms = now;
    return m;
}

std::vector<MessageRecord> Store::list_messages(int64_t conversation_id) const {
    ++transcript_reads_;
    Statement st(db_, path_,
                 "SELECT " KVCHAT_MESSAGE_COLUMNS " FROM messages WHERE conversation_id = ?1 ORDER BY ordinal");
    st.bind_int(1, conversation_id);
    std::vector<MessageRecord> out;
    while (st.step()) out.push_back(read_message(st, path_));
    return out;
}

bool Store::update_message_content(int64_t message_id, std::string_view content) {
    const RepairedUtf8 text = repair_utf8(content);
    Transaction t(db_, path_);
    // The ids spelled the old text: dropped with it.
    Statement st(db_, path_, "UPDATE messages SET content = ?1, content_repaired = ?2, token_ids = NULL WHERE id = ?3");
    st.bind_text(1, text.text).bind_int(2, text.replaced ? 1 : 0).bind_int(3, message_id);
    if (st.change() == 0) throw Error("no message with id " + std::to_string(message_id));
    Statement touch(db_, path_,
                    "UPDATE conversations SET updated_ms = ?1 "
                    "WHERE id = (SELECT conversation_id FROM messages WHERE id = ?2)");
    touch.bind_int(1, next_update_time()).bind_int(2, message_id).change();
    t.commit();
    return text.replaced;
}

bool Store::set_system_message(int64_t conversation_id, std::string_view content) {
    const RepairedUtf8 text = repair_utf8(content);
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    Statement first(db_, path_, "SELECT id, role, content FROM messages WHERE conversation_id = ?1 AND ordinal = 0");
    first.bind_int(1, conversation_id);
    const bool has_system = first.step() && first.text(1) == "system";
    const int64_t system_id = has_system ? first.integer(0) : 0;
    if (has_system && first.text(2) == text.text) return false;
    if (!has_system && text.text.empty()) return false;
    // Ordinals are unique per conversation and checked row by row: every row moves to the negative
    // side first, then to its place (a shift in one statement could collide half-way).
    auto shift = [&](int64_t by) {
        Statement away(db_, path_, "UPDATE messages SET ordinal = -1 - ordinal WHERE conversation_id = ?1");
        away.bind_int(1, conversation_id).change();
        Statement back(db_, path_, "UPDATE messages SET ordinal = -1 - ordinal + ?2 WHERE conversation_id = ?1");
        back.bind_int(1, conversation_id).bind_int(2, by).change();
    };
    if (has_system && text.text.empty()) {
        Statement del(db_, path_, "DELETE FROM messages WHERE id = ?1");
        del.bind_int(1, system_id).change();
        shift(-1);
    } else if (has_system) {
        Statement st(db_, path_, "UPDATE messages SET content = ?1, content_repaired = ?2 WHERE id = ?3");
        st.bind_text(1, text.text).bind_int(2, text.replaced ? 1 : 0).bind_int(3, system_id).change();
    } else {
        shift(1);
        Statement insert(db_, path_,
                         "INSERT INTO messages (conversation_id, ordinal, role, content, content_repaired, created_ms) "
                         "VALUES (?1, 0, 'system', ?2, ?3, ?4)");
        insert.bind_int(1, conversation_id).bind_text(2, text.text).bind_int(3, text.replaced ? 1 : 0);
        insert.bind_int(4, now_ms()).change();
    }
    Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    touch.bind_int(1, next_update_time()).bind_int(2, conversation_id).change();
    t.commit();
    return true;
}

int64_t Store::delete_messages_after(int64_t conversation_id, int64_t ordinal) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    Statement del(db_, path_, "DELETE FROM messages WHERE conversation_id = ?1 AND ordinal > ?2");
    const int64_t deleted = del.bind_int(1, conversation_id).bind_int(2, ordinal).change();
    // Places with versions among the deleted messages go with them.
    Statement places(db_, path_,
                     "DELETE FROM message_versions WHERE conversation_id = ?1 AND within IS NULL AND ordinal > ?2");
    places.bind_int(1, conversation_id).bind_int(2, ordinal).change();
    if (deleted > 0) {
        Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
        touch.bind_int(1, next_update_time()).bind_int(2, conversation_id).change();
    }
    t.commit();
    return deleted;
}

// ---- versions ----

// The message columns a version keeps, in messages' and version_messages' shared names (in
// KVCHAT_MESSAGE_COLUMNS' order after its first three).
#define KVCHAT_VERSION_MESSAGE_COLUMNS                                                                     \
    "role, content, content_repaired, prompt_tokens, generated_tokens, ttft_ms, tokens_per_second, created_ms, " \
    "cached_tokens, prefix_tokens, computed_tokens, prefill_saved_ms, token_ids, stop_reason"

std::optional<int64_t> Store::version_row(int64_t conversation_id, int64_t ordinal, int64_t number) const {
    Statement st(db_, path_,
                 "SELECT id FROM message_versions WHERE conversation_id = ?1 AND ordinal = ?2 AND number = ?3 "
                 "AND within IS NULL");
    st.bind_int(1, conversation_id).bind_int(2, ordinal).bind_int(3, number);
    if (!st.step()) return std::nullopt;
    return st.integer(0);
}

void Store::stash_messages(int64_t conversation_id, int64_t ordinal, int64_t version_id) {
    Statement copy(db_, path_,
                   "INSERT INTO version_messages (version_id, position, " KVCHAT_VERSION_MESSAGE_COLUMNS ") "
                   "SELECT ?1, ordinal - ?3, " KVCHAT_VERSION_MESSAGE_COLUMNS " FROM messages "
                   "WHERE conversation_id = ?2 AND ordinal >= ?3");
    copy.bind_int(1, version_id).bind_int(2, conversation_id).bind_int(3, ordinal).change();
    Statement del(db_, path_, "DELETE FROM messages WHERE conversation_id = ?1 AND ordinal >= ?2");
    del.bind_int(1, conversation_id).bind_int(2, ordinal).change();
    // The places deeper in these messages are theirs now.
    Statement nest(db_, path_,
                   "UPDATE message_versions SET within = ?1 WHERE conversation_id = ?2 AND within IS NULL AND ordinal > ?3");
    nest.bind_int(1, version_id).bind_int(2, conversation_id).bind_int(3, ordinal).change();
    Statement hide(db_, path_, "UPDATE message_versions SET shown = 0 WHERE id = ?1");
    hide.bind_int(1, version_id).change();
}

void Store::unstash_messages(int64_t conversation_id, int64_t ordinal, int64_t version_id) {
    Statement copy(db_, path_,
                   "INSERT INTO messages (conversation_id, ordinal, " KVCHAT_VERSION_MESSAGE_COLUMNS ") "
                   "SELECT ?2, ?3 + position, " KVCHAT_VERSION_MESSAGE_COLUMNS " FROM version_messages "
                   "WHERE version_id = ?1 ORDER BY position");
    copy.bind_int(1, version_id).bind_int(2, conversation_id).bind_int(3, ordinal).change();
    Statement del(db_, path_, "DELETE FROM version_messages WHERE version_id = ?1");
    del.bind_int(1, version_id).change();
    Statement unnest(db_, path_, "UPDATE message_versions SET within = NULL WHERE within = ?1");
    unnest.bind_int(1, version_id).change();
    Statement show(db_, path_, "UPDATE message_versions SET shown = 1 WHERE id = ?1");
    show.bind_int(1, version_id).change();
}

KeptVersion Store::keep_version(int64_t conversation_id, int64_t ordinal) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    Statement count(db_, path_, "SELECT count(*) FROM messages WHERE conversation_id = ?1 AND ordinal >= ?2");
    count.bind_int(1, conversation_id).bind_int(2, ordinal).step();
    if (ordinal < 0 || count.integer(0) == 0)
        throw Error("conversation " + std::to_string(conversation_id) + " has no message " + std::to_string(ordinal) +
                    " to keep as a version");
    const int64_t now = now_ms();
    KeptVersion k;
    Statement shown(db_, path_,
                    "SELECT id, number FROM message_versions WHERE conversation_id = ?1 AND ordinal = ?2 AND within IS NULL "
                    "AND shown = 1");
    shown.bind_int(1, conversation_id).bind_int(2, ordinal);
    int64_t kept_id = 0;
    if (shown.step()) {
        kept_id = shown.integer(0);
        k.kept = shown.integer(1);
    } else {
        // The first version of this place: what the transcript holds now.
        Statement first(db_, path_,
                        "INSERT INTO message_versions (conversation_id, ordinal, number, shown, created_ms) "
                        "VALUES (?1, ?2, 1, 1, ?3)");
        first.bind_int(1, conversation_id).bind_int(2, ordinal).bind_int(3, now).change();
        kept_id = sqlite3_last_insert_rowid(db_);
        k.kept = 1;
    }
    stash_messages(conversation_id, ordinal, kept_id);
    Statement next(db_, path_,
                   "SELECT coalesce(max(number), 0) + 1 FROM message_versions WHERE conversation_id = ?1 AND ordinal = ?2 "
                   "AND within IS NULL");
    next.bind_int(1, conversation_id).bind_int(2, ordinal).step();
    k.number = next.integer(0);
    Statement add(db_, path_,
                  "INSERT INTO message_versions (conversation_id, ordinal, number, shown, created_ms) VALUES (?1, ?2, ?3, 1, ?4)");
    add.bind_int(1, conversation_id).bind_int(2, ordinal).bind_int(3, k.number).bind_int(4, now).change();
    Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    touch.bind_int(1, next_update_time()).bind_int(2, conversation_id).change();
    t.commit();
    return k;
}

void Store::show_version(int64_t conversation_id, int64_t ordinal, int64_t number) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    const auto target = version_row(conversation_id, ordinal, number);
    if (!target)
        throw Error("message " + std::to_string(ordinal) + " of conversation " + std::to_string(conversation_id) +
                    " has no version " + std::to_string(number));
    Statement shown(db_, path_,
                    "SELECT id FROM message_versions WHERE conversation_id = ?1 AND ordinal = ?2 AND within IS NULL "
                    "AND shown = 1");
    shown.bind_int(1, conversation_id).bind_int(2, ordinal);
    if (!shown.step()) throw Error("store: the versions of message " + std::to_string(ordinal) + " have none shown");
    const int64_t current = shown.integer(0);
    if (current == *target) return;
    stash_messages(conversation_id, ordinal, current);
    unstash_messages(conversation_id, ordinal, *target);
    Statement touch(db_, path_, "UPDATE conversations SET updated_ms = ?1 WHERE id = ?2");
    touch.bind_int(1, next_update_time()).bind_int(2, conversation_id).change();
    t.commit();
}

void Store::drop_shown_version(int64_t conversation_id, int64_t ordinal, int64_t kept) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    const auto back = version_row(conversation_id, ordinal, kept);
    if (!back) throw Error("message " + std::to_string(ordinal) + " has no version " + std::to_string(kept));
    Statement del(db_, path_, "DELETE FROM messages WHERE conversation_id = ?1 AND ordinal >= ?2");
    del.bind_int(1, conversation_id).bind_int(2, ordinal).change();
    Statement drop(db_, path_,
                   "DELETE FROM message_versions WHERE conversation_id = ?1 AND within IS NULL AND "
                   "((ordinal = ?2 AND shown = 1) OR ordinal > ?2)");
    drop.bind_int(1, conversation_id).bind_int(2, ordinal).change();
    unstash_messages(conversation_id, ordinal, *back);
    Statement left(db_, path_,
                   "SELECT count(*) FROM message_versions WHERE conversation_id = ?1 AND ordinal = ?2 AND within IS NULL");
    left.bind_int(1, conversation_id).bind_int(2, ordinal).step();
    if (left.integer(0) == 1) {
        Statement single(db_, path_, "DELETE FROM message_versions WHERE id = ?1");
        single.bind_int(1, *back).change();
    }
    t.commit();
}

std::vector<VersionSet> Store::version_sets(int64_t conversation_id) const {
    Statement st(db_, path_,
                 "SELECT ordinal, count(*), max(CASE WHEN shown = 1 THEN number ELSE 0 END) FROM message_versions "
                 "WHERE conversation_id = ?1 AND within IS NULL GROUP BY ordinal ORDER BY ordinal");
    st.bind_int(1, conversation_id);
    std::vector<VersionSet> out;
    while (st.step()) out.push_back({st.integer(0), st.integer(1), st.integer(2)});
    return out;
}

std::vector<MessageRecord> Store::version_messages(int64_t conversation_id, int64_t ordinal, int64_t number) const {
    const auto row = version_row(conversation_id, ordinal, number);
    if (!row)
        throw Error("message " + std::to_string(ordinal) + " of conversation " + std::to_string(conversation_id) +
                    " has no version " + std::to_string(number));
    Statement shown(db_, path_, "SELECT shown FROM message_versions WHERE id = ?1");
    shown.bind_int(1, *row).step();
    if (shown.integer(0) != 0) {
        std::vector<MessageRecord> all = list_messages(conversation_id);
        all.erase(all.begin(), all.begin() + std::min<int64_t>(ordinal, static_cast<int64_t>(all.size())));
        return all;
    }
    Statement st(db_, path_,
                 "SELECT 0, ?2, ?3 + position, " KVCHAT_VERSION_MESSAGE_COLUMNS
                 " FROM version_messages WHERE version_id = ?1 ORDER BY position");
    st.bind_int(1, *row).bind_int(2, conversation_id).bind_int(3, ordinal);
    std::vector<MessageRecord> out;
    while (st.step()) out.push_back(read_message(st, path_));
    return out;
}

// ---- prefixes ----

void Store::insert_prefix_messages(int64_t prefix_id, const std::vector<PrefixMessage>& messages) {
    int64_t ordinal = 0;
    for (const PrefixMessage& m : messages) {
        const RepairedUtf8 content = repair_utf8(m.content);
        Statement st(db_, path_,
                     "INSERT INTO prefix_messages (prefix_id, ordinal, role, content, content_repaired) "
                     "VALUES (?1, ?2, ?3, ?4, ?5)");
        st.bind_int(1, prefix_id)
            .bind_int(2, ordinal++)
            .bind_text(3, role_name(m.role))
            .bind_text(4, content.text)
            .bind_int(5, content.replaced ? 1 : 0)
            .change();
    }
}

void Store::read_prefix_messages(PrefixRecord& p) const {
    Statement st(db_, path_,
                 "SELECT role, content, content_repaired FROM prefix_messages WHERE prefix_id = ?1 ORDER BY ordinal");
    st.bind_int(1, p.id);
    p.messages.clear();
    while (st.step()) {
        PrefixMessage m;
        m.role = parse_role(st.text(0), path_, "a message of prefix " + in_quotes(p.name));
        m.content = st.text(1);
        m.content_repaired = st.integer(2) != 0;
        p.messages.push_back(std::move(m));
    }
    // A row without messages can only come from outside kvchat; its text is what schema 1 meant.
    if (p.messages.empty()) p.messages.push_back({Role::System, p.text, p.text_repaired});
}

PrefixRecord Store::save_prefix(const PrefixRecord& prefix) {
    const std::string name = repair_utf8(prefix.name).text;
    check_name("prefix", name);
    if (!prefix.snapshot.empty()) check_snapshot_name(prefix.snapshot);
    std::vector<PrefixMessage> messages = prefix.messages;
    if (messages.empty()) messages.push_back({Role::System, prefix.text, false});
    bool repaired = false;
    for (const PrefixMessage& m : messages) repaired = repaired || !is_valid_utf8(m.content);
    Transaction t(db_, path_);
    Statement st(db_, path_,
                 "INSERT INTO prefixes (name, text, text_repaired, model_fingerprint, cache_spec, tokens, snapshot, "
                 "created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    st.bind_text(1, name)
        .bind_text(2, repair_utf8(messages.front().content).text)
        .bind_int(3, repaired ? 1 : 0)
        .bind_text(4, repair_utf8(prefix.model_fingerprint).text)
        .bind_text(5, repair_utf8(prefix.cache_spec).text)
        .bind_blob(6, encode_tokens(prefix.tokens))
        .bind_text_or_null(7, prefix.snapshot)
        .bind_int(8, now_ms());
    st.change("a prefix named " + in_quotes(name) + " already exists");
    const int64_t id = sqlite3_last_insert_rowid(db_);
    insert_prefix_messages(id, messages);
    t.commit();
    return *find_prefix_by_id(id);
}

std::optional<PrefixRecord> Store::find_prefix(std::string_view name) const {
    Statement st(db_, path_, "SELECT " KVCHAT_PREFIX_COLUMNS " FROM prefixes WHERE name = ?1");
    st.bind_text(1, repair_utf8(name).text);
    if (!st.step()) return std::nullopt;
    PrefixRecord p = read_prefix(st, path_);
    read_prefix_messages(p);
    return p;
}

std::optional<PrefixRecord> Store::find_prefix_by_id(int64_t id) const {
    Statement st(db_, path_, "SELECT " KVCHAT_PREFIX_COLUMNS " FROM prefixes WHERE id = ?1");
    st.bind_int(1, id);
    if (!st.step()) return std::nullopt;
    PrefixRecord p = read_prefix(st, path_);
    read_prefix_messages(p);
    return p;
}

std::vector<PrefixRecord> Store::list_prefixes() const {
    Statement st(db_, path_, "SELECT " KVCHAT_PREFIX_COLUMNS " FROM prefixes ORDER BY name, id");
    std::vector<PrefixRecord> out;
    while (st.step()) out.push_back(read_prefix(st, path_));
    for (PrefixRecord& p : out) read_prefix_messages(p);
    return out;
}

void Store::rename_prefix(int64_t id, std::string_view name) {
    const std::string fixed = repair_utf8(name).text;
    check_name("prefix", fixed);
    Statement st(db_, path_, "UPDATE prefixes SET name = ?1 WHERE id = ?2");
    st.bind_text(1, fixed).bind_int(2, id);
    if (st.change("a prefix named " + in_quotes(fixed) + " already exists") == 0)
        throw Error("no prefix with id " + std::to_string(id));
}

PrefixTextUpdate Store::update_prefix_text(int64_t id, std::string_view text, const std::vector<int32_t>& tokens) {
    return update_prefix_messages(id, {PrefixMessage{Role::System, std::string(text), false}}, tokens);
}

PrefixTextUpdate Store::update_prefix_messages(int64_t id, const std::vector<PrefixMessage>& messages,
                                               const std::vector<int32_t>& tokens) {
    if (messages.empty()) throw Error("a prefix needs at least one message");
    bool repaired = false;
    for (const PrefixMessage& m : messages) repaired = repaired || !is_valid_utf8(m.content);
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT snapshot FROM prefixes WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no prefix with id " + std::to_string(id));
    PrefixTextUpdate result{repaired, get.text(0)};
    Statement set(db_, path_,
                  "UPDATE prefixes SET text = ?1, text_repaired = ?2, tokens = ?3, snapshot = NULL WHERE id = ?4");
    set.bind_text(1, repair_utf8(messages.front().content).text)
        .bind_int(2, repaired ? 1 : 0)
        .bind_blob(3, encode_tokens(tokens))
        .bind_int(4, id);
    set.change();
    Statement del(db_, path_, "DELETE FROM prefix_messages WHERE prefix_id = ?1");
    del.bind_int(1, id).change();
    insert_prefix_messages(id, messages);
    t.commit();
    return result;
}

std::string Store::set_prefix_snapshot(int64_t id, std::string_view snapshot, std::string_view model_fingerprint,
                                       std::string_view cache_spec) {
    if (!snapshot.empty()) check_snapshot_name(snapshot);
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT snapshot FROM prefixes WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no prefix with id " + std::to_string(id));
    std::string old = get.text(0);
    Statement set(db_, path_,
                  "UPDATE prefixes SET snapshot = ?1, model_fingerprint = ?2, cache_spec = ?3 WHERE id = ?4");
    set.bind_text_or_null(1, snapshot)
        .bind_text(2, repair_utf8(model_fingerprint).text)
        .bind_text(3, repair_utf8(cache_spec).text)
        .bind_int(4, id)
        .change();
    t.commit();
    return old == snapshot ? std::string() : old;
}

std::string Store::delete_prefix(int64_t id) {
    Transaction t(db_, path_);
    Statement get(db_, path_, "SELECT snapshot FROM prefixes WHERE id = ?1");
    get.bind_int(1, id);
    if (!get.step()) throw Error("no prefix with id " + std::to_string(id));
    std::string snapshot = get.text(0);
    Statement del(db_, path_, "DELETE FROM prefixes WHERE id = ?1");
    del.bind_int(1, id).change();
    t.commit();
    return snapshot;
}

void Store::record_prefix_use(int64_t id) {
    Statement st(db_, path_, "UPDATE prefixes SET last_used_ms = ?1, use_count = use_count + 1 WHERE id = ?2");
    st.bind_int(1, now_ms()).bind_int(2, id);
    if (st.change() == 0) throw Error("no prefix with id " + std::to_string(id));
}

// ---- settings ----

// ---- a conversation's own settings ----

ConversationSettings Store::conversation_settings(int64_t conversation_id) const {
    Statement st(db_, path_,
                 "SELECT temperature, top_k, top_p, min_p, repetition_penalty, seed, max_new_tokens, context_length "
                 "FROM conversation_settings WHERE conversation_id = ?1");
    st.bind_int(1, conversation_id);
    ConversationSettings c;
    if (!st.step()) return c;
    c.temperature = st.optional_real(0);
    c.top_k = st.optional_integer(1);
    c.top_p = st.optional_real(2);
    c.min_p = st.optional_real(3);
    c.repetition_penalty = st.optional_real(4);
    c.seed = st.optional_integer(5);
    c.max_new_tokens = st.optional_integer(6);
    c.context_length = st.optional_integer(7);
    return c;
}

void Store::set_conversation_settings(int64_t conversation_id, const ConversationSettings& c) {
    Transaction t(db_, path_);
    require_conversation(conversation_id);
    if (c.empty()) {
        Statement del(db_, path_, "DELETE FROM conversation_settings WHERE conversation_id = ?1");
        del.bind_int(1, conversation_id).change();
    } else {
        Statement st(db_, path_,
                     "INSERT OR REPLACE INTO conversation_settings (conversation_id, temperature, top_k, top_p, min_p, "
                     "repetition_penalty, seed, max_new_tokens, context_length) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
        st.bind_int(1, conversation_id)
            .bind_real(2, c.temperature)
            .bind_int(3, c.top_k)
            .bind_real(4, c.top_p)
            .bind_real(5, c.min_p)
            .bind_real(6, c.repetition_penalty)
            .bind_int(7, c.seed)
            .bind_int(8, c.max_new_tokens)
            .bind_int(9, c.context_length)
            .change();
    }
    t.commit();
}

std::optional<std::string> Store::setting(std::string_view key) const {
    Statement st(db_, path_, "SELECT value FROM settings WHERE key = ?1");
    st.bind_text(1, repair_utf8(key).text);
    if (!st.step()) return std::nullopt;
    return st.text(0);
}

void Store::set_setting(std::string_view key, std::string_view value) {
    const std::string k = repair_utf8(key).text;
    if (k.empty()) throw Error("a setting needs a name");
    Statement st(db_, path_,
                 "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    st.bind_text(1, k).bind_text(2, repair_utf8(value).text).change();
}

void Store::remove_setting(std::string_view key) {
    Statement st(db_, path_, "DELETE FROM settings WHERE key = ?1");
    st.bind_text(1, repair_utf8(key).text).change();
}

}  // namespace kvchat
