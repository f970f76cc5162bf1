#pragma once
// The persistent store: one SQLite database holding conversations, their messages, saved prefix
// prompts and settings. Cache snapshots are files in a snapshots/ folder beside the database,
// named by the database's file name and the rows that own them (two databases in one folder must
// not write each other's files); the database is the source of truth and a snapshot is only an
// acceleration that may be missing (a crash between a message's commit and its snapshot costs the
// cache, never the message).
//
// Every statement is prepared with bound parameters; user text never becomes SQL. Text is stored
// byte for byte when it is valid UTF-8 and repaired (U+FFFD) otherwise, with a flag kept beside
// it so the interface can say so. Every failure throws kvchat::Error naming the database and the
// problem. A Store is used from one thread at a time.
#include "engine/store/records.h"

#include <cstdint>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;

namespace kvchat {

// Why a database cannot be written, in words, for `err` (errno of a write check): EROFS "is on a
// read-only file system", EACCES/EPERM "is read-only (no permission to write ...)". Empty for
// other errors.
std::string read_only_problem(const std::string& path, int err);

class Store {
public:
    // ReadOnly: for commands that only list (kvchat-cli conversations, prefix list). Nothing is
    // created, migrated or swept, so a database on a read-only mount or without write permission
    // can still be read; a database that needs upgrading is refused.
    enum class Access { ReadWrite, ReadOnly };

    // The schema version this build writes; PRAGMA user_version of an up-to-date database.
    static constexpr int kSchemaVersion = 7;
    // The statements that bring a database from version - 1 to `version` (1..kSchemaVersion), as
    // the migration runs them; tests build older databases with them.
    static const char* migration_sql(int version);

    // data_dir()/kvchat.db
    static std::string default_path();

    // Opens the database at `path` (creating it and its folder when missing), checks it and
    // migrates it forward to kSchemaVersion. Refuses, without changing the file, a database from
    // a newer kvchat, a file that is not a kvchat database, and a damaged one.
    // Snapshot files left by a crash (half-written ones, and ones whose conversation or prefix was
    // deleted) are removed on open.
    // A database that cannot be written is refused with read_only_problem's words (ReadWrite).
    explicit Store(const std::string& path = default_path(), Access access = Access::ReadWrite);
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
    // The names this database gives snapshot files: KEY.conversation-ID.kvcache and
    // KEY.prefix-ID.kvcache, KEY being file_key() (the database's file name made a plain name).
    std::string conversation_snapshot_name(int64_t conversation_id) const;
    std::string prefix_snapshot_name(int64_t prefix_id) const;
    // The names earlier versions gave, shared by every database of a folder: conversation-ID.kvcache
    // and prefix-ID.kvcache. Rows that still name such a file keep using it until the next save.
    static std::string legacy_conversation_snapshot_name(int64_t conversation_id);
    static std::string legacy_prefix_snapshot_name(int64_t prefix_id);
    // The database's file name as a plain file name: itself when it is one ("kvchat.db"), else
    // with the other characters replaced and a hash of the whole name added.
    static std::string file_key(std::string_view database_file_name);
    // Removes a snapshot file a row no longer names. A file of an earlier version's shared names is
    // left alone while another kvchat database lives in the same folder (it may be that one's).
    void remove_snapshot_file(std::string_view name) const;
    // The lock file of a conversation (engine/store/conversation_lock.h): locks/KEY.conversation-ID.lock
    // beside the database, not among the snapshots, since a snapshot folder that cannot be written
    // (a full or broken disk) must cost the cache, never the turn.
    std::string conversation_lock_path(int64_t conversation_id) const;

    // The value of a read-only PRAGMA on this connection (journal_mode, foreign_keys,
    // user_version, integrity_check, ...): for diagnostics and tests.
    std::string pragma(std::string_view name) const;

    // ---- conversations ----
    // With `opening` (a prefix's messages, a system message), the conversation and those
    // messages are written in one transaction: a crash leaves all of them or none. The stored
    // messages (content repaired as append_message does) go to *stored when given.
    // `origin`: "app" or "api" (ConversationRecord::origin).
    ConversationRecord create_conversation(std::string_view title, std::string_view model_fingerprint,
                                           std::string_view cache_spec, const std::vector<PrefixMessage>& opening = {},
                                           std::vector<MessageRecord>* stored = nullptr,
                                           std::string_view origin = "app");
    // A branch of conversation `parent_id`: a new conversation holding copies of the parent's first
    // `at` messages (every column: figures and generated ids too), with parent_id and branch_at
    // set, in one transaction. Refuses `at` outside 1..the parent's message count and a taken title.
    ConversationRecord create_branch(std::string_view title, int64_t parent_id, int64_t at, std::string_view origin,
                                     std::string_view model_fingerprint, std::string_view cache_spec);
    std::optional<ConversationRecord> find_conversation(std::string_view title) const;
    std::optional<ConversationRecord> find_conversation_by_id(int64_t id) const;
    std::vector<ConversationRecord> list_conversations() const;  // most recently updated first
    // The conversations whose first message has this role and content (stored as given, or as
    // repaired when it is not valid UTF-8), most recently updated first: the only ones a message
    // list starting so can share messages with (one index lookup per conversation, no transcript read).
    std::vector<ConversationRecord> conversations_opening_with(Role role, std::string_view content) const;
    // The same with message counts, tokens and whether the last message waits for an answer.
    std::vector<ConversationOverview> list_conversation_overviews() const;
    // The conversations whose title or message text has every word of `query` (a word matches
    // the start of a word: "cat" finds "catalogue"), most recently updated first. The query is
    // plain text: quotes, operators and stars in it are words, never search syntax. A query
    // without words finds every conversation.
    std::vector<ConversationOverview> search_conversations(std::string_view query) const;
    // Where `query` (matched as search_conversations does) is found in message text: the first
    // matching message of each conversation, with a few words around the match (FTS5's
    // snippet(); the matched words between kMatchBegin and kMatchEnd, cut text marked "…").
    // A conversation found only by its title has no entry.
    static constexpr char kMatchBegin = '\x02', kMatchEnd = '\x03';
    struct MessageMatch {
        int64_t conversation_id = 0;
        int64_t message_id = 0;
        int64_t ordinal = 0;
        std::string snippet;
    };
    std::vector<MessageMatch> search_message_matches(std::string_view query, int snippet_words = 12) const;
    void rename_conversation(int64_t id, std::string_view title);
    // Deletes the conversation and its messages; returns its snapshot name (empty when none) so
    // the caller removes the file after the row is gone.
    std::string delete_conversation(int64_t id);
    // A change of strategy is also recorded (strategy_changes) at `at` messages (nullopt: as many
    // as the conversation has now), so the transcript can show where it happened.
    void set_conversation_cache_spec(int64_t id, std::string_view cache_spec, std::optional<int64_t> at = std::nullopt);
    // The changes recorded, oldest first.
    std::vector<StrategyChange> strategy_changes(int64_t conversation_id) const;
    void set_conversation_model(int64_t id, std::string_view model_fingerprint);
    // Records the snapshot now saved for the conversation; returns the name it replaces (empty
    // when none, or when it is the same name) so the caller can remove that file.
    std::string set_conversation_snapshot(int64_t id, std::string_view snapshot);
    void touch_conversation(int64_t id);

    // ---- messages ----
    // Appends after the conversation's last message in one transaction (which also touches the
    // conversation) and returns the stored record: id, ordinal, time and the content as stored.
    MessageRecord append_message(int64_t conversation_id, Role role, std::string_view content,
                                 const AnswerFigures& stats = {});
    // The same for several messages (at least one), in one transaction; returns them as stored.
    std::vector<MessageRecord> append_messages(int64_t conversation_id, const std::vector<PrefixMessage>& messages);
    std::vector<MessageRecord> list_messages(int64_t conversation_id) const;  // in ordinal order
    // How many times list_messages ran on this connection: lets tests hold a turn to one read.
    int64_t transcript_reads() const { return transcript_reads_; }
    // Replaces a message's content (an edit); returns true when invalid UTF-8 was repaired.
    bool update_message_content(int64_t message_id, std::string_view content);
    // The conversation's system prompt becomes `content`: the first message when it is a system
    // message (removed when `content` is empty), else a system message put before the others.
    // Returns false when nothing changed.
    bool set_system_message(int64_t conversation_id, std::string_view content);
    // Deletes the messages whose ordinal is greater than `ordinal` (edit and regenerate); returns
    // how many were deleted.
    int64_t delete_messages_after(int64_t conversation_id, int64_t ordinal);

    // ---- versions (records.h: VersionSet) ----
    // Keeps the messages from `ordinal` on as a version of that place and takes them out of the
    // transcript (the versions set up deeper in them go with them); the messages appended next
    // are the new version, shown. One transaction. Refuses an ordinal with no message.
    KeptVersion keep_version(int64_t conversation_id, int64_t ordinal);
    // Shows version `number` of the place at `ordinal` (the one shown now is kept aside, whole).
    void show_version(int64_t conversation_id, int64_t ordinal, int64_t number);
    // Undoes keep_version for a turn that failed: the messages from `ordinal` on and their version
    // are dropped and version `kept` comes back (a place left with one version has none).
    void drop_shown_version(int64_t conversation_id, int64_t ordinal, int64_t kept);
    // The places of the transcript as it is shown that have versions, by ordinal.
    std::vector<VersionSet> version_sets(int64_t conversation_id) const;
    // The messages of version `number` of the place at `ordinal` (the shown one's are the
    // transcript's), ordinals as they would be shown.
    std::vector<MessageRecord> version_messages(int64_t conversation_id, int64_t ordinal, int64_t number) const;

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

    // ---- a conversation's own settings (schema 6) ----
    // None set (every value nullopt) when it has none of its own.
    ConversationSettings conversation_settings(int64_t conversation_id) const;
    // Replaces them all; an empty value removes the row (the global settings apply again).
    void set_conversation_settings(int64_t conversation_id, const ConversationSettings& settings);

    // ---- settings ----
    std::optional<std::string> setting(std::string_view key) const;
    void set_setting(std::string_view key, std::string_view value);
    void remove_setting(std::string_view key);

private:
    void open_checked(bool writable);
    // Opens db_ on `name` (a path or a file: URI) with `flags`, then runs `then`; on any failure the
    // connection is closed again and the error names the database.
    void open_connection(const std::string& name, int flags, const std::function<void()>& then);
    // Snapshot files kvchat named for a conversation or prefix whose row was deleted (a crash
    // between the row's delete and the file's) are removed when the database is opened; see
    // store.cpp for why no live one can be taken. Returns how many were removed.
    size_t remove_orphan_snapshots();
    // True when no other kvchat database is in this one's folder, so files with the shared names
    // of earlier versions are this database's.
    bool alone_in_folder() const;
    void migrate(int from_version);
    int64_t next_update_time() const;
    void require_conversation(int64_t id) const;
    // The conversation's row inside the caller's transaction; returns its id.
    int64_t insert_conversation(const std::string& name, std::string_view model_fingerprint, std::string_view cache_spec,
                                std::string_view origin, std::optional<int64_t> parent_id, int64_t branch_at,
                                int64_t now);
    // append_message's work inside the caller's transaction.
    MessageRecord insert_message(int64_t conversation_id, Role role, std::string_view content,
                                 const AnswerFigures& stats, int64_t now);
    // The id of the live (shown-transcript) version row of a place, nullopt when none.
    std::optional<int64_t> version_row(int64_t conversation_id, int64_t ordinal, int64_t number) const;
    // Moves the messages from `ordinal` on into version row `version_id`, with the deeper places.
    void stash_messages(int64_t conversation_id, int64_t ordinal, int64_t version_id);
    // Moves version row `version_id`'s messages back into the transcript from `ordinal` on.
    void unstash_messages(int64_t conversation_id, int64_t ordinal, int64_t version_id);
    void insert_prefix_messages(int64_t prefix_id, const std::vector<PrefixMessage>& messages);
    void read_prefix_messages(PrefixRecord& p) const;

    std::string path_;
    std::string key_;  // file_key() of the database's file name
    std::string snapshot_dir_;
    sqlite3* db_ = nullptr;
    mutable int64_t transcript_reads_ = 0;
};

}  // namespace kvchat
