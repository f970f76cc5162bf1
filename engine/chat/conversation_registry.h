#pragma once
// The conversations of a store, opened by title, with their turns made durable: the user's
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
#include "engine/chat/prefix_library.h"
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
};

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
};

class ConversationRegistry {
public:
    ConversationRegistry(Store& store, const Model& model, Backend& backend, size_t max_resident = 4);
    ~ConversationRegistry();

    const ChatTemplate& chat_template() const { return template_; }
    PrefixLibrary& prefixes() { return prefixes_; }

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
    // Replaces the last reply.
    TurnResult regenerate(std::string_view title, const TurnOptions& options,
                          const std::function<void(std::string_view)>& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);
    // Replaces message `ordinal` (a user message), drops what followed and answers it again.
    TurnResult edit(std::string_view title, size_t ordinal, std::string_view text, const TurnOptions& options,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::atomic<bool>* cancel = nullptr);

    // ---- by id (the window's verbs) ----
    // A new conversation titled `title` (empty: "Chat"); when that title is taken, the first free
    // of "title 2", "title 3", ... Returns its id.
    int64_t create(std::string_view title, const OpenOptions& options = {}, const Progress& progress = {});
    std::vector<ConversationSummary> list() const;  // most recent first
    // Conversations whose title or message text holds every word of `query` (plain text; a word
    // matches the start of a word), most recent first.
    std::vector<ConversationSummary> search(std::string_view query) const;
    std::vector<MessageRecord> messages(int64_t id) const;
    void rename(int64_t id, std::string_view title);
    // Deletes the rows, then the snapshot file; the cache in memory is dropped unsaved.
    void remove(int64_t id);
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
    // The cache's telemetry when it is in memory now, else nullopt. Loads and creates nothing.
    std::optional<CacheTelemetry> telemetry(int64_t id) const;
    // What switching the conversation's cache to `spec` would do; nothing changes (the cache is
    // loaded into memory when it was not).
    ConversionPlan plan_switch(int64_t id, const std::string& spec);
    // Switches the conversation's cache to `spec` (carried over or rebuilt; progress and cancel
    // while rebuilding) and saves the strategy and the snapshot with the conversation. Cancelled
    // (kvchat::Cancelled) or failed, the old cache and strategy stay. Returns what was done.
    ConversionPlan switch_strategy(int64_t id, const std::string& spec, const Progress& progress = {});

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
    // Takes the entry's lock and reads the transcript again when another process changed it.
    void lock_and_sync(Entry& e, std::vector<std::string>& notices);
    // True when the entry's transcript is the stored one, message for message.
    bool transcript_is_stored(const Entry& e) const;
    std::string lock_path(const Entry& e) const;
    Entry& entry(std::string_view title);
    // The conversation `id`, opened (its transcript read) when it was not.
    Entry& entry(int64_t id);
    const Entry* find_entry(int64_t id) const;
    // Starts reading the conversation's snapshot ("Loading cache"; a set cancel flag throws
    // kvchat::Cancelled before anything is read).
    void make_ready(Entry& e, std::vector<std::string>& notices, const Progress& progress = {});
    // The conversation opened, locked (release with Unlock) and its cache ready for a turn;
    // notices get what that said.
    Entry& prepare(int64_t id, std::vector<std::string>& notices, const Progress& progress = {});
    // After a cancelled turn: the transcript and the stored messages become `before` again from
    // message `keep` on (the messages the turn removed come back, those it added go).
    void restore_messages(Entry& e, const std::vector<MessageRecord>& before, size_t keep);
    // The same after a failed turn; false when its answer was stored after all (the turn stays) or
    // the store could not be changed back.
    bool take_back(Entry& e, const std::vector<MessageRecord>& before, size_t keep);
    // Answers the last message and records the turn; t0 is when the call began.
    TurnResult answer(Entry& e, std::chrono::steady_clock::time_point t0, const TurnOptions& options,
                      const TurnCallbacks& callbacks, std::vector<std::string>& notices);
    ConversationSummary summary_of(const ConversationOverview& o) const;
    static TurnCallbacks callbacks_of(const std::function<void(std::string_view)>& on_text,
                                      const std::atomic<bool>* cancel);
    void save_snapshot(Entry& e, std::vector<std::string>& notices);
    // A stored message into the conversation: its text, its ids when they may be rendered, and
    // its prefill speed.
    void adopt(Conversation& c, const MessageRecord& m) const;
    void finish_turn(Entry& e, const TurnResult& r, size_t messages_before, std::vector<std::string>& notices);
    void enforce_budget(const Entry& keep);

    Store& store_;
    const Model& model_;
    Backend& backend_;
    ChatTemplate template_;
    PrefixLibrary prefixes_;
    size_t max_resident_;
    std::list<Entry> entries_;  // most recently used first
    std::vector<std::string> notices_;
    double prefill_tok_s_ = 0.0;  // the last turn's prefill speed, for rebuild estimates
};

}  // namespace kvchat
