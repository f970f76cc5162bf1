#pragma once
// The chat session: the one object the window's worker, kvchat-cli and the API server drive. It
// holds the conversations and prefixes of a store and the rules about them (unique titles, a new
// chat named by its first message, what removing one removes), and runs their turns.
//
// A session opened without a model can list, search, read, rename and remove conversations and
// prefixes; everything that needs the model (turns, strategy switches, saving prefixes) refuses
// with an Error saying so.
//
// Turns are made durable: the user's
// message is committed before generation starts, the reply as soon as it ends, and the cache is
// then written as a snapshot beside the database (so a crash can cost a cache, never a message).
// Reopening a conversation loads its snapshot and the next turn prefills only the new tokens; a
// missing, damaged or mismatched snapshot is rebuilt from the transcript, with a notice.
//
// Several processes (the window, kvchat-cli) may share one database: a turn, an edit, a
// regeneration and a strategy switch hold the conversation's lock (ConversationLock), first read
// the transcript again when another process changed it, and a snapshot is written only while its
// cache's transcript is still the stored one (so it never replaces a newer one).
//
// Memory budget: at most max_resident conversations keep their caches in RAM; the least recently
// used give theirs up (their snapshots on disk stand in for them).
#include "engine/cache/conversion_plan.h"
#include "engine/chat/conversation.h"
#include "engine/chat/prefill_speed.h"
#include "engine/chat/chat_settings.h"
#include "engine/chat/prefix_library.h"
#include "engine/chat/snapshot_storage.h"
#include "engine/common/progress.h"
#include "engine/store/conversation_lock.h"
#include "engine/store/store.h"

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

struct OpenOptions {
    std::string cache_spec;  // strategy for a new conversation, or a switch for an existing one
                             // (stored with its first answered turn: a refused turn keeps the old)
    std::string prefix;      // start a new conversation from this saved prefix
    std::string system;      // system message of a new conversation (a prefix's messages win)
    std::string origin = "app";  // of a new conversation: "app", or "api" (the local API server made it)
};

// A request of the local API server: an OpenAI-style message list to answer (ChatSession::answer_messages).
struct MessagesRequest {
    std::vector<ChatMessage> messages;  // system / user / assistant; the last one must be the user's
    std::string cache_spec;             // strategy for a NEW conversation ("" = the default)
    std::string origin = "api";
    std::string title;                  // "" = named after the first user message
};

struct MessagesResult {
    TurnResult turn;
    int64_t conversation_id = 0;  // the conversation that holds the exchange now
    int64_t reused_from = 0;      // the conversation or ...
    int64_t reused_prefix = 0;    // ... the saved prefix whose cache was reused (0: none)
};

// One line of the prefix library.
struct PrefixSummary {
    int64_t id = 0;
    std::string name;
    std::string text;             // the first message (all of a prefix saved from text)
    int64_t message_count = 0;
    int64_t tokens = 0;
    int64_t snapshot_bytes = 0;   // its saved cache on disk (0: none)
    std::optional<int64_t> last_used_ms;
    int64_t use_count = 0;
    std::string cache_spec;
};

// The title of a chat named after its first message: the message's first line, white space
// collapsed, cut at a word after 48 characters (with an ellipsis), as chat apps do.
std::string title_from_message(std::string_view text);

// One line of the conversation list.
struct ConversationSummary {
    int64_t id = 0;
    std::string title;
    int64_t updated_ms = 0;        // last activity
    int64_t message_count = 0;
    int64_t tokens = 0;            // tokens of the rendered transcript at its last answer (0: never answered)
    std::string cache_spec;
    bool cache_resident = false;   // its cache is in memory now
    bool cache_saved = false;      // a snapshot of its cache is on disk (the disk budget may have removed it)
    bool last_unanswered = false;  // ends with a user message
    std::string origin = "app";    // "api": made by the local API server
    std::optional<int64_t> parent_id;  // a branch: the conversation it came from (while that one exists)
    int64_t branch_at = 0;             // a branch: how many of the parent's messages it copied (0: none)
};

class ChatSession {
public:
    ChatSession(Store& store, const Model& model, Backend& backend, size_t max_resident = 4);
    // Without a model (model and backend null): conversations and prefixes can be browsed and
    // managed, turns are refused.
    ChatSession(Store& store, const Model* model, Backend* backend, size_t max_resident = 4);
    ~ChatSession();

    bool has_model() const { return model_ != nullptr; }
    // These three throw kvchat::Error when the session has no model.
    const ChatTemplate& chat_template() const;
    PrefixLibrary& prefixes();
    const Model& model() const;

    // The conversation titled `title`, created when new. Nothing is loaded into the cache yet.
    // Starting from a prefix whose cache must be rebuilt reports "Prefilling" (cancel: nothing
    // is created).
    Conversation& open(std::string_view title, const OpenOptions& options = {}, const Progress& progress = {});
    int64_t id_of(std::string_view title);

    // One turn: the user's message, then the reply. Refuses (kvchat::Error) before storing
    // anything when the message is empty or only (Unicode) white space, and when the conversation ends with a user message left unanswered (by a crash or a
    // failed turn): regenerate() answers that one first, so two questions are never stacked
    // (the opening of a conversation just started from a prefix is not such a message).
    // A turn refused or failed before its answer is stored (it no longer fits the context or a
    // static cache, a write failed) leaves the conversation as it was: send() takes the message
    // back, regenerate() and edit() bring back what they replaced; the error says so.
    TurnResult send(std::string_view title, std::string_view text, const TurnOptions& options,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::atomic<bool>* cancel = nullptr);
    // Replaces the last reply; the one replaced is kept as a version (versions(), select_version()).
    TurnResult regenerate(std::string_view title, const TurnOptions& options,
                          const std::function<void(std::string_view)>& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);
    // Replaces message `ordinal` (a user message) and what followed it, and answers it again; what
    // was replaced is kept as a version of message `ordinal`.
    TurnResult edit(std::string_view title, size_t ordinal, std::string_view text, const TurnOptions& options,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::atomic<bool>* cancel = nullptr);

    // ---- by id (the window's and the server's verbs) ----
    // A new conversation titled `title` (empty: "Chat"); when that title is taken, the first free
    // of "title 2", "title 3", ... Returns its id.
    int64_t create(std::string_view title, const OpenOptions& options = {}, const Progress& progress = {});
    std::vector<ConversationSummary> list() const;  // most recent first
    std::optional<ConversationSummary> summary(int64_t id) const;  // nullopt: no such conversation
    // Conversations whose title or message text holds every word of `query` (plain text; a word
    // matches the start of a word), most recent first.
    std::vector<ConversationSummary> search(std::string_view query) const;
    std::vector<MessageRecord> messages(int64_t id) const;
    // The title is trimmed of white space; an empty one, or one another conversation has, is refused.
    void rename(int64_t id, std::string_view title);
    // Deletes the rows, then the snapshot file and the lock file; the cache in memory is dropped
    // unsaved.
    void remove(int64_t id);
    // Bytes of the conversation's saved cache on disk; nullopt when none is saved.
    std::optional<int64_t> snapshot_bytes(int64_t id) const;
    // Saves a changed cache, then frees it (the conversation is reopened by its next use).
    void close(int64_t id);
    // A turn whose prefill or cache load is cancelled (callbacks.progress.cancel set before the
    // first token) throws kvchat::Cancelled and leaves the transcript and the stored messages as
    // they were (send: the user's message is taken back out); the cache holds a prefix of them.
    // Set while the answer streams, the flag stops it instead and the partial answer is kept.
    TurnResult send(int64_t id, std::string_view text, const TurnOptions& options, const TurnCallbacks& callbacks = {});
    TurnResult regenerate(int64_t id, const TurnOptions& options, const TurnCallbacks& callbacks = {});
    TurnResult edit(int64_t id, size_t ordinal, std::string_view text, const TurnOptions& options,
                    const TurnCallbacks& callbacks = {});
    // The turn all of the above run: it never throws. How it ended is in the result (ending,
    // problem, changed); send, regenerate and edit rethrow what a turn that was not answered threw.
    // Its phases: the request applied (in memory), render, match the cache (a loading snapshot, a
    // saved prefix, the longest common prefix), the request stored, prefill, generate, store the
    // answer, snapshot. The stored transcript is read once, when the conversation is locked.
    TurnResult take_turn(int64_t id, const TurnRequest& request, const TurnOptions& options,
                         const TurnCallbacks& callbacks = {});
    // ---- versions of an answer (answer_versions.cpp) ----
    // The places of the transcript with versions: a regenerated answer, an edited message (with
    // what followed it). Reads the store only.
    std::vector<VersionSet> versions(int64_t id) const;
    // The messages of version `number` (1-based) of the place at `ordinal`.
    std::vector<MessageRecord> version(int64_t id, size_t ordinal, int64_t number) const;
    // Shows version `number` of the place at `ordinal`: it becomes the conversation's transcript,
    // so the next turn answers it (the cache keeps the longest prefix it shares with it; nothing is
    // recomputed now); the version shown before is kept. Takes the conversation's lock; works
    // without a model.
    void select_version(int64_t id, size_t ordinal, int64_t number);
    // Where the conversation's strategy changed, oldest first.
    std::vector<StrategyChange> strategy_changes(int64_t id) const;

    // ---- branches ----
    // A new conversation `title` holding the first `at` messages of conversation `id`, whose cache
    // is the parent's cropped to those messages' tokens, so its first turn prefills only what is
    // new: copied from the parent's cache in memory when it is resident, else read from the
    // parent's snapshot on disk; sliding-window layers go back through the parent's checkpoints.
    // Where nothing can be reused (no cache, no checkpoint that far back), the first turn prefills.
    // The branch's cache is saved as its snapshot at once. Refuses (kvchat::Error, nothing created)
    // `at` outside 1..the parent's message count, an empty title and a title in use. Returns its id.
    int64_t branch(int64_t id, size_t at, std::string_view title);

    // ---- the local API server's request ----
    using MessagesRequest = kvchat::MessagesRequest;
    using MessagesResult = kvchat::MessagesResult;
    // Answers an OpenAI-style message list from the stored cache that matches it best. The
    // request's messages are compared with every stored conversation of this model (resident or
    // only snapshotted, by their stored messages: no snapshot is read to compare) and every saved
    // prefix (by its stored tokens); the one sharing the longest rendered token prefix wins (ties:
    // the most recent). A conversation whose whole transcript begins the request is continued
    // (the messages it lacks are stored with the turn); one that diverges is branched at the last
    // common message (branch()) and the branch answers; a prefix starts a new conversation from
    // its cache; otherwise a new conversation is made with `cache_spec`. Conversations made here
    // get `origin`. A conversation another process holds locked is passed over (never waited for).
    // Refuses (kvchat::Error, before anything is stored) a request without messages, one whose last
    // message is not the user's, an empty (white space) message, a bad cache_spec or origin, and a
    // message list the model's template refuses. Everything after that ends in result.turn as
    // take_turn's turns do, never thrown: answered, stopped with what it had, cancelled or failed
    // with nothing half stored (a conversation made for it is removed again; conversation_id is
    // then 0). result.turn.cached_tokens counts the tokens reused.
    MessagesResult answer_messages(const MessagesRequest& request, const TurnOptions& options,
                                   const TurnCallbacks& callbacks = {});

    // ---- a conversation's own settings ----
    // Its sampling, answer limit and context length (values not set: the global settings').
    ConversationSettings conversation_settings(int64_t id) const;
    // Validated (validate_conversation_settings; the context length against the model's, when a
    // model is loaded) and stored; the next turn uses them.
    void set_conversation_settings(int64_t id, const ConversationSettings& settings);
    // The conversation's system prompt (empty: none) becomes `text`. The next turn renders the
    // conversation again; its cache keeps what still matches, which with the system prompt first
    // is little: the conversation is prefilled again. Returns false when nothing changed.
    bool set_system_prompt(int64_t id, std::string_view text);

    // The model's batch prefill speed on this machine (prefill_speed.h) as kept in the store,
    // measured first when none is kept yet. Needs the model.
    PrefillSpeed batch_prefill_speed();

    // ---- prefixes by id ----
    std::vector<PrefixSummary> prefix_list() const;  // by name
    PrefixRecord prefix(int64_t id) const;            // throws kvchat::Error when it was deleted
    // Saves the first `count` messages of conversation `conversation_id` as a prefix.
    PrefixRecord save_prefix_from(std::string_view name, int64_t conversation_id, int64_t count,
                                  std::vector<std::string>& notices, const Progress& progress = {});
    PrefixRecord edit_prefix(int64_t id, std::string_view text, std::vector<std::string>& notices,
                             const Progress& progress = {});
    // The name is trimmed of white space; an empty one, or one another prefix has, is refused.
    void rename_prefix(int64_t id, std::string_view name);
    // Deletes the record, then its snapshot file.
    void remove_prefix(int64_t id);

    // The cache's telemetry when it is in memory now, else nullopt. Loads and creates nothing.
    std::optional<CacheTelemetry> telemetry(int64_t id) const;
    // What switching the conversation's cache to `spec` would do; nothing changes (the cache is
    // loaded into memory when it was not).
    ConversionPlan plan_switch(int64_t id, const std::string& spec);
    // Switches the conversation's cache to `spec` (carried over or rebuilt; progress and cancel
    // while rebuilding) and saves the strategy and the snapshot with the conversation. Cancelled
    // (kvchat::Cancelled) or failed, the old cache and strategy stay. Returns what was done.
    ConversionPlan switch_strategy(int64_t id, const std::string& spec, const Progress& progress = {});

    // ---- the saved caches on disk and their budget (snapshot_storage.h); work without a model ----
    // Every conversation and prefix with what its saved cache takes, least recently used first.
    std::vector<StoredCache> stored_caches() const;
    // Forgets one saved cache now: its file goes and its row forgets it (the messages stay). False
    // when it had none.
    bool drop_cache(StoredCache::Owner owner, int64_t id);
    struct SnapshotBudget {
        int64_t bytes = 0;
        bool is_default = true;  // no budget is set: default_snapshot_budget() applies
    };
    SnapshotBudget snapshot_budget() const;
    // Sets the budget (nullopt: back to the default; a negative one throws kvchat::Error and
    // nothing changes), then removes saved caches, least recently used first, until they fit it.
    // Returns what was removed.
    std::vector<StoredCache> set_snapshot_budget(std::optional<int64_t> bytes);

    // ---- the global settings (chat_settings.h) ----
    ChatSettings settings() const;
    // Validates, then stores (kvchat::Error naming the setting, and nothing written, when a value
    // is out of range). The session's own resident-cache limit is not changed: set_max_resident.
    void save_settings(const ChatSettings& settings);
    // At most `n` (at least 1) caches in RAM from now on; the least recently used over it are saved
    // when changed and freed.
    void set_max_resident(size_t n);

    // How many conversations hold their caches in RAM now.
    size_t resident() const;
    // Writes the snapshots of caches changed since their last save.
    void save_all(std::vector<std::string>& notices);
    // Notices from opening conversations (a rebuilt snapshot, a prefix conversion) not yet shown.
    std::vector<std::string> take_notices();

private:
    struct Entry {
        int64_t id = 0;
        std::string title;
        std::unique_ptr<Conversation> conversation;
        bool loaded = false;       // its messages were read from the store
        bool cache_ready = false;  // the snapshot was loaded (or found unusable) for this session
        bool dirty = false;        // the cache changed since its snapshot was written
        int64_t prefix_tokens = 0; // tokens of the saved prefix its cache started from, until the first answer
        // The stored strategy a switch asked on open (OpenOptions::cache_spec) replaces: the switch
        // is recorded by the first turn that is answered, so a refused one leaves it as it was.
        std::optional<std::string> switched_from;
        std::unique_ptr<ConversationLock> lock;  // held while a change is under way
    };
    // Releases the entry's lock when the change ends, however it ends.
    struct Unlock {
        Entry& e;
        ~Unlock() { e.lock.reset(); }
    };
    // Takes the entry's lock, reads the conversation's row and its stored transcript (into
    // `stored`), and takes the stored messages when another process changed them (or the entry
    // has none yet). Returns the row.
    ConversationRecord lock_and_sync(Entry& e, std::vector<std::string>& notices, std::vector<MessageRecord>& stored);
    // True when the entry's transcript is the stored one (read now) / `stored`, message for message.
    bool transcript_is_stored(const Entry& e) const;
    bool transcript_is(const Entry& e, const std::vector<MessageRecord>& stored) const;
    std::string lock_path(const Entry& e) const;
    std::string lock_path(int64_t id, const std::string& title) const;
    // The branch `title` of conversation `parent_id` at `at` messages, opened with its cache (not
    // saved yet); notices get what the user should know about its cache.
    Entry& make_branch(int64_t parent_id, size_t at, const std::string& title, std::string_view origin,
                       std::vector<std::string>& notices);
    Entry& entry(std::string_view title);
    // The conversation `id`, opened (its transcript read) when it was not.
    Entry& entry(int64_t id);
    const Entry* find_entry(int64_t id) const;
    // Starts reading the conversation's snapshot ("Loading cache"; a set cancel flag throws
    // kvchat::Cancelled before anything is read).
    void make_ready(Entry& e, const ConversationRecord& row, const Progress& progress = {});
    // The conversation opened, locked (release with Unlock) and its cache ready for a turn;
    // notices get what that said, `stored` the transcript as stored and `row` its row.
    Entry& prepare(int64_t id, std::vector<std::string>& notices, const Progress& progress = {},
                   std::vector<MessageRecord>* stored = nullptr, ConversationRecord* row = nullptr);
    // After a cancelled turn: the transcript and the stored messages become `before` again from
    // message `keep` on (the messages the turn removed come back, those it added go).
    // `kept`: the turn kept what it replaced as a version (regenerate, edit), which comes back.
    void restore_messages(Entry& e, const std::vector<MessageRecord>& before, size_t keep,
                          const std::optional<KeptVersion>& kept = std::nullopt);
    // The same after a failed turn; false when its answer was stored after all (the turn stays) or
    // the store could not be changed back.
    bool take_back(Entry& e, const std::vector<MessageRecord>& before, size_t keep,
                   const std::optional<KeptVersion>& kept = std::nullopt);
    // take_turn's phases with the conversation locked; `before` is the stored transcript, `row`
    // the conversation's row, t0 when the call began.
    TurnResult run_turn(Entry& e, const TurnRequest& request, const std::vector<MessageRecord>& before,
                        const ConversationRecord& row, std::chrono::steady_clock::time_point t0,
                        const TurnOptions& options, const TurnCallbacks& callbacks, std::vector<std::string>& notices);
    static TurnResult thrown_if_unanswered(TurnResult r);
    ConversationSummary summary_of(const ConversationOverview& o) const;
    static TurnCallbacks callbacks_of(const std::function<void(std::string_view)>& on_text,
                                      const std::atomic<bool>* cancel);
    // known_stored: the caller holds the lock and knows the transcript is the stored one.
    void save_snapshot(Entry& e, std::vector<std::string>& notices, bool known_stored = false);
    // A stored message into the conversation: its text, its ids when they may be rendered, and
    // its prefill speed.
    void adopt(Conversation& c, const MessageRecord& m) const;
    // Frees the least recently used caches over max_resident_, never `keep`'s (null: any).
    void enforce_budget(const Entry* keep);

    Backend& backend() const;
    // True when `title` is one create() gives a chat it names itself ("Chat", "Chat 2", ...).
    static bool is_default_title(std::string_view title);
    // The first free of `base`, "base 2", "base 3", ...
    std::string unique_title(const std::string& base) const;

    Store& store_;
    const Model* model_;
    Backend* backend_;
    std::optional<ChatTemplate> template_;
    std::optional<PrefixLibrary> prefixes_;
    size_t max_resident_;
    std::list<Entry> entries_;  // most recently used first
    std::vector<std::string> notices_;
    double prefill_tok_s_ = 0.0;  // the last turn's prefill speed, for rebuild estimates
    std::optional<PrefillSpeed> batch_speed_;  // as kept in the store (read on first need)
    bool batch_speed_read_ = false;
    // The kept speed, read from the store once; nullopt when none is kept yet.
    const std::optional<PrefillSpeed>& kept_batch_speed();
    // Keeps `measured` when it is a batch larger than the kept one.
    void note_batch_speed(const PrefillSpeed& measured);
    // Tokens per second a rebuild's estimate is priced at (0: none known).
    double rebuild_tok_s();
};

}  // namespace kvchat
