#pragma once
// What the soak test and its regression suites share: running kvchat-cli as a child process that
// can be interrupted or killed at a chosen moment or run under a file size limit (a full disk
// without root), and reading a database the way a second program would (never writing, straight
// from SQLite, so looking never changes what is looked at: opening a Store removes leftover files).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvchat::soak {

struct ProcessOptions {
    std::vector<std::string> args;  // args[0] is the program
    int signal = 0;                 // sent `signal_after_ms` after the start (0: none)
    int signal_after_ms = 0;
    uint64_t file_size_limit = 0;   // RLIMIT_FSIZE for the child, with SIGXFSZ ignored (0: none)
    int timeout_ms = 60000;         // then SIGKILL, and timed_out
    std::vector<std::pair<std::string, std::string>> env;  // added to the environment
};

struct ProcessResult {
    int exit_code = -1;       // when it exited
    int term_signal = 0;      // the signal that ended it (0: it exited)
    bool timed_out = false;
    bool signal_sent = false; // the chosen signal was sent before it ended
    std::string out, err;
    // "exit 0", "signal 11", "timeout": for messages.
    std::string status() const;
};

ProcessResult run_process(const ProcessOptions& options);

struct DbMessage {
    std::string role;
    std::string content;
    std::vector<int32_t> token_ids;
    bool operator==(const DbMessage&) const = default;
};
struct DbConversation {
    int64_t id = 0;
    std::string title, cache_spec, snapshot;
    std::vector<DbMessage> messages;
};
struct DbPrefix {
    int64_t id = 0;
    std::string name, snapshot;
    std::vector<DbMessage> messages;
    std::vector<int32_t> tokens;  // its messages rendered
};
struct DbView {
    bool exists = false;
    std::string error;      // a read that failed (empty: fine)
    std::string integrity;  // PRAGMA integrity_check ("ok")
    std::vector<DbConversation> conversations;  // by id
    std::vector<DbPrefix> prefixes;             // by name
    int64_t last_conversation_id = 0, last_prefix_id = 0;  // the highest ids handed out (sqlite_sequence)
    const DbConversation* conversation(const std::string& title) const;
    const DbPrefix* prefix(const std::string& name) const;
};

// Reads everything the soak compares, in one read transaction.
DbView read_db(const std::string& path);

// Files under `dir` (recursively) whose names mark them as unfinished: an atomic write's
// ".NAME.tmp-XXXXXX", anything with ".partial" or ".tmp" in its name, SQLite's "-journal", and
// spill files ("kvchat-spill-").
std::vector<std::string> leftover_files(const std::string& dir);

}  // namespace kvchat::soak
