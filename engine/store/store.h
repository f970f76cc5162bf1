#pragma once
// The persistent store: one SQLite database holding conversations, their messages, saved prefix
// prompts and settings. Cache snapshots are files in a snapshots/ folder beside the database,
// named by the rows that own them; the database is the source of truth and a snapshot is only an
// acceleration that may be missing (a crash between a message's commit and its snapshot costs the
// cache, never the message).
//
// Every statement is prepared with bound parameters; user text never becomes SQL. Text is stored
// byte for byte when it is valid UTF-8 and repaired (U+FFFD) otherwise, with a flag kept beside
// it so the interface can say so. Every failure throws kvchat::Error naming the database and the
// problem. A Store is used from one thread at a time.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;

namespace kvchat {

enum class Role { System, User, Assistant };
std::string_view role_name(Role role);  // "system", "user", "assistant"

// Times are milliseconds since the Unix epoch.
struct ConversationRecord {
    int64_t id = 0;
    std::string title;              // unique among conversations
    std::string model_fingerprint;  // the model the conversation's cache was built with
    std::string cache_spec;         // the cache strategy in its textual form
    std::string snapshot;           // file name under snapshot_dir(); empty when none is saved
    int64_t created_ms = 0;
    int64_t updated_ms = 0;         // strictly increasing across the store, so lists have one order
};

// Figures of a generated reply; a typed message has none.
struct GenerationStats {
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    std::optional<double> ttft_ms;            // time to first token
    std::optional<double> tokens_per_second;  // decode speed
};

struct MessageRecord {
    int64_t id = 0;
    int64_t conversation_id = 0;
    int64_t ordinal = 0;  // 0, 1, 2, ... within the conversation
    Role role = Role::User;
    std::string content;
    bool content_repaired = false;  // invalid UTF-8 was replaced by U+FFFD when it was stored
    GenerationStats stats;
    int64_t created_ms = 0;
};

// One message of a saved prefix, in the order the prefix holds them.
struct PrefixMessage {
    Role role = Role::System;
    std::string content;
    bool content_repaired = false;  // invalid UTF-8 was replaced by U+FFFD when it was stored
};

struct PrefixRecord {
    int64_t id = 0;
    std::string name;  // unique among prefixes
    // The opening messages of a conversation (a system prompt alone, or system / user /
    // assistant ... in order); never empty once stored.
    std::vector<PrefixMessage> messages;
    // The first message's content: the whole text of a prefix saved from text (one system
    // message), a preview of the others.
    std::string text;
    bool text_repaired = false;  // some message had invalid UTF-8 replaced by U+FFFD when it was stored
    std::string model_fingerprint;
    std::string cache_spec;
    std::vector<int32_t> tokens;  // the messages rendered and tokenized for model_fingerprint
    std::string snapshot;         // file name under snapshot_dir(); empty when none is saved
    int64_t created_ms = 0;
    std::optional<int64_t> last_used_ms;
    int64_t use_count = 0;
};

// What update_prefix_text did.
struct PrefixTextUpdate {
    bool text_repaired = false;    // invalid UTF-8 was replaced by U+FFFD
    std::string dropped_snapshot;  // the snapshot that no longer matches (empty when none)
};

class Store {
public:
    // The schema version this build writes; PRAGMA user_version of an up-to-date database.
    static constexpr int kSchemaVersion = 2;
    // The statements that bring a database from version - 1 to `version` (1..kSchemaVersion), as
    // the migration runs them; tests build older databases with them.
    static const char* migration_sql(int version);

    // data_dir()/kvchat.db
    static std::string default_path();

    // Opens the database at `path` (creating it and its folder when missing), checks it and
    // migrates it forward to kSchemaVersion. Refuses, without changing the file, a database from
    // a newer kvchat, a file that is not a kvchat database, and a damaged one.
    explicit Store(const std::string& path = default_path());
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    const std::string& path() const { return path_; }
    // The folder beside the database that holds cache snapshots (created on open).
    const std::string& snapshot_dir() const { return snapshot_dir_; }
    // The full path of a snapshot file named `name` (a plain file name; anything that could leave
    // the folder is refused).
    std::string snapshot_path(std::string_view name) const;
    // Every snapshot name the database refers to, so files no row owns can be removed.
    std::vector<std::string> snapshot_names() const;

    // The value of a read-only PRAGMA on this connection (journal_mode, foreign_keys,
    // user_version, integrity_check, ...): for diagnostics and tests.
    std::string pragma(std::string_view name) const;

    // ---- conversations ----
    // With `opening` (a prefix's messages, a system message), the conversation and those
    // messages are written in one transaction: a crash leaves all of them or none. The stored
    // messages (content repaired as append_message does) go to *stored when given.
    ConversationRecord create_conversation(std::string_view title, std::string_view model_fingerprint,
                                           std::string_view cache_spec, const std::vector<PrefixMessage>& opening = {},
                                           std::vector<MessageRecord>* stored = nullptr);
    std::optional<ConversationRecord> find_conversation(std::string_view title) const;
    std::optional<ConversationRecord> find_conversation_by_id(int64_t id) const;
    std::vector<ConversationRecord> list_conversations() const;  // most recently updated first
    void rename_conversation(int64_t id, std::string_view title);
    // Deletes the conversation and its messages; returns its snapshot name (empty when none) so
    // the caller removes the file after the row is gone.
    std::string delete_conversation(int64_t id);
    void set_conversation_cache_spec(int64_t id, std::string_view cache_spec);
    void set_conversation_model(int64_t id, std::string_view model_fingerprint);
    // Records the snapshot now saved for the conversation; returns the name it replaces (empty
    // when none, or when it is the same name) so the caller can remove that file.
    std::string set_conversation_snapshot(int64_t id, std::string_view snapshot);
    void touch_conversation(int64_t id);

    // ---- messages ----
    // Appends after the conversation's last message in one transaction (which also touches the
    // conversation) and returns the stored record: id, ordinal, time and the content as stored.
    MessageRecord append_message(int64_t conversation_id, Role role, std::string_view content,
                                 const GenerationStats& stats = {});
    std::vector<MessageRecord> list_messages(int64_t conversation_id) const;  // in ordinal order
    // Replaces a message's content (an edit); returns true when invalid UTF-8 was repaired.
    bool update_message_content(int64_t message_id, std::string_view content);
    // Deletes the messages whose ordinal is greater than `ordinal` (edit and regenerate); returns
    // how many were deleted.
    int64_t delete_messages_after(int64_t conversation_id, int64_t ordinal);

    // ---- prefixes ----
    // Saves a new prefix from `prefix` (its id, times, use count, text and repaired flags are
    // ignored; messages empty: one system message holding `text`) and returns the stored record.
    PrefixRecord save_prefix(const PrefixRecord& prefix);
    std::optional<PrefixRecord> find_prefix(std::string_view name) const;
    std::optional<PrefixRecord> find_prefix_by_id(int64_t id) const;
    std::vector<PrefixRecord> list_prefixes() const;  // by name
    void rename_prefix(int64_t id, std::string_view name);
    // Replaces the text and its tokens. The old snapshot no longer matches, so it is dropped from
    // the row and its name returned for the caller to remove the file.
    PrefixTextUpdate update_prefix_text(int64_t id, std::string_view text, const std::vector<int32_t>& tokens);
    // The same for a new list of messages (at least one), which replaces every message the prefix held.
    PrefixTextUpdate update_prefix_messages(int64_t id, const std::vector<PrefixMessage>& messages,
                                            const std::vector<int32_t>& tokens);
    // Records the snapshot saved for the prefix and what it was built with; returns the name it
    // replaces (empty when none, or when it is the same name).
    std::string set_prefix_snapshot(int64_t id, std::string_view snapshot, std::string_view model_fingerprint,
                                    std::string_view cache_spec);
    // Deletes the prefix; returns its snapshot name (empty when none).
    std::string delete_prefix(int64_t id);
    // Sets last used to now and adds one to the use count.
    void record_prefix_use(int64_t id);

    // ---- settings ----
    std::optional<std::string> setting(std::string_view key) const;
    void set_setting(std::string_view key, std::string_view value);
    void remove_setting(std::string_view key);

private:
    void open_checked();
    void migrate(int from_version);
    int64_t next_update_time() const;
    void require_conversation(int64_t id) const;
    // append_message's work inside the caller's transaction.
    MessageRecord insert_message(int64_t conversation_id, Role role, std::string_view content,
                                 const GenerationStats& stats, int64_t now);
    void insert_prefix_messages(int64_t prefix_id, const std::vector<PrefixMessage>& messages);
    void read_prefix_messages(PrefixRecord& p) const;

    std::string path_;
    std::string snapshot_dir_;
    sqlite3* db_ = nullptr;
};

}  // namespace kvchat
