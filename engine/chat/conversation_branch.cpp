// ChatSession::branch: a new conversation holding a parent's first messages, whose cache is the
// parent's cropped to them, so a branch costs only the tokens that are new in it.
#include "engine/chat/chat_session.h"

#include "engine/cache/cache_factory.h"
#include "engine/chat/conversation_cache.h"
#include "engine/common/quoted.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

namespace kvchat {

int64_t ChatSession::branch(int64_t id, size_t at, std::string_view title_in) {
    const std::string title = trim_white_space(repair_utf8(title_in).text);
    if (title.empty()) throw Error("a branch needs a name");
    if (store_.find_conversation(title)) throw Error("a conversation named " + in_quotes(title) + " already exists");
    std::vector<std::string> notices;
    Entry& b = make_branch(id, at, title, "app", notices);
    // On disk at once, so another process (kvchat-cli chat, the window after a restart) finds it.
    save_snapshot(b, notices);
    notices_.insert(notices_.end(), notices.begin(), notices.end());
    const int64_t branch_id = b.id;
    enforce_budget(&b);
    return branch_id;
}

ChatSession::Entry& ChatSession::make_branch(int64_t parent_id, size_t at, const std::string& title,
                                             std::string_view origin, std::vector<std::string>& notices) {
    const auto parent = store_.find_conversation_by_id(parent_id);
    if (!parent) throw Error("no conversation with id " + std::to_string(parent_id));
    const size_t count = store_.list_messages(parent_id).size();
    if (at < 1 || at > count)
        throw Error("conversation " + in_quotes(parent->title) + " has " + std::to_string(count) + " message" +
                    (count == 1 ? "" : "s") + "; a branch copies 1 to " + std::to_string(count) + " of them, not " +
                    std::to_string(at));

    // The parent's cache, before anything is stored (a failure here creates nothing): a plain copy
    // of the one in memory, else its snapshot read from disk. Either is cropped below.
    std::unique_ptr<Cache> cache;
    std::vector<CacheCheckpoint> checkpoints;
    Entry* live = nullptr;
    for (Entry& e : entries_)
        if (e.id == parent_id) live = &e;
    if (live && live->conversation->has_cache()) {
        live->conversation->finish_loading({});
        if (const Cache* held = live->conversation->resident_cache()) {
            cache = clone_cache(*held);
            checkpoints = live->conversation->checkpoints();  // (copies share their bytes)
        }
    }
    if (!cache && !parent->snapshot.empty() && parent->model_fingerprint == model().fingerprint()) {
        try {
            SavedCache saved = load_cache_snapshot(store_.snapshot_path(parent->snapshot), model(), backend());
            cache = std::move(saved.cache);
            checkpoints = std::move(saved.checkpoints);
        } catch (const Error& err) {
            notices.push_back("the saved cache of conversation " + in_quotes(parent->title) + " could not be used (" +
                              err.what() + "); the branch is prefilled on its first turn");
        }
    }
    const std::string spec = cache ? cache->spec_text() : canonical_cache_spec(parent->cache_spec);

    const ConversationRecord row = store_.create_branch(title, parent_id, static_cast<int64_t>(at), origin,
                                                        model().fingerprint(), spec);
    try {
        Entry e;
        e.id = row.id;
        e.title = row.title;
        e.conversation = std::make_unique<Conversation>(model(), backend(), chat_template(), spec);
        for (const MessageRecord& m : store_.list_messages(row.id)) adopt(*e.conversation, m);
        e.loaded = true;
        e.cache_ready = true;
        if (cache) {
            Conversation& c = *e.conversation;
            c.set_cache(std::move(cache), std::move(checkpoints));
            // Up to the end of the copied messages as the next turn renders them (prefix-stable), or
            // less where the parent's cache differs (written back as text, an older snapshot), or
            // back to the latest checkpoint where its sliding windows have moved on.
            std::vector<std::string> crop_notices;
            const int64_t kept = c.keep_prefix(chat_template().render(c.messages(), false).tokens, crop_notices);
            if (kept == 0) {
                c.release_cache();
                notices.push_back("branch " + in_quotes(row.title) + " could not reuse the cache of " +
                                  in_quotes(parent->title) + " (no checkpoint was kept that far back); its first turn "
                                  "prefills the copied messages");
            }
            e.dirty = kept > 0;
        }
        entries_.push_front(std::move(e));
        return entries_.front();
    } catch (...) {
        // Nothing half made: the branch's row and its copied messages go again.
        try {
            store_.delete_conversation(row.id);
        } catch (const std::exception&) {
        }
        throw;
    }
}

}  // namespace kvchat
