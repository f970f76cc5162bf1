// ChatSession's versions of an answer: listing them and choosing the one shown (a file of its own,
// as they are the only verbs that change a transcript without a turn).
#include "engine/chat/chat_session.h"

#include "engine/common/quoted.h"
#include "engine/error.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvchat {

std::vector<VersionSet> ChatSession::versions(int64_t id) const { return store_.version_sets(id); }

std::vector<MessageRecord> ChatSession::version(int64_t id, size_t ordinal, int64_t number) const {
    return store_.version_messages(id, static_cast<int64_t>(ordinal), number);
}

std::vector<StrategyChange> ChatSession::strategy_changes(int64_t id) const { return store_.strategy_changes(id); }

void ChatSession::select_version(int64_t id, size_t ordinal, int64_t number) {
    const auto rec = store_.find_conversation_by_id(id);
    if (!rec) throw Error("no conversation with id " + std::to_string(id));
    if (!has_model()) {
        // Browsing without a model: the store changes under the conversation's lock all the same.
        const std::filesystem::path file = store_.conversation_lock_path(id);
        if (::mkdir(file.parent_path().c_str(), 0700) != 0 && errno != EEXIST)
            throw Error("cannot lock conversation " + in_quotes(rec->title) + ": cannot create " +
                        in_quotes(file.parent_path().string()) + ": " + std::strerror(errno));
        const ConversationLock lock(file.string(), rec->title);
        store_.show_version(id, static_cast<int64_t>(ordinal), number);
        return;
    }
    Entry& e = entry(id);
    std::vector<std::string> notices;
    std::vector<MessageRecord> stored;
    lock_and_sync(e, notices, stored);
    const Unlock unlock{e};
    for (std::string& n : notices) notices_.push_back(std::move(n));
    store_.show_version(id, static_cast<int64_t>(ordinal), number);
    // The transcript follows; the cache stays as it is, and the next turn keeps the longest prefix
    // of it that the chosen version still renders to.
    Conversation& c = *e.conversation;
    c.truncate(0);
    for (const MessageRecord& m : store_.list_messages(id)) adopt(c, m);
}

}  // namespace kvchat
