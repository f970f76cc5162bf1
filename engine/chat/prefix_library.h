#pragma once
// Saved prefix prompts with their prefilled caches. A prefix is the opening of a conversation: a
// system prompt (a name and its text), or the first messages of a conversation (system, user,
// assistant ... in order: a few-shot opening, a document and a first exchange). Its tokens are
// what the chat template renders for those messages without a generation prompt, which is
// exactly how a conversation holding them renders them (rendering is prefix-stable), so a
// conversation started from it (or one whose rendered prompt happens to start with those
// tokens) copies the prefix's cache and prefills only the rest.
//
// The store holds the record, the snapshot file beside it holds the cache. A missing or damaged
// snapshot is rebuilt from its stored tokens; a prefix saved for another model is refused.
#include "engine/chat/chat_template.h"
#include "engine/common/progress.h"
#include "engine/store/store.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

class PrefixLibrary {
public:
    PrefixLibrary(Store& store, const Model& model, Backend& backend, const ChatTemplate& chat_template);

    // The tokens a prefix with this text (one system message) gets under the current model and template.
    std::vector<int32_t> tokens_for(std::string_view text) const;
    // The tokens a prefix holding these messages gets.
    std::vector<int32_t> tokens_for(const std::vector<ChatMessage>& messages) const;
    // A prefix's messages as a conversation holds them.
    static std::vector<ChatMessage> messages_of(const PrefixRecord& prefix);

    // Saves a new prefix of one system message and its prefilled cache (under `cache_spec`,
    // empty: the default). Refuses a name in use. `notices` gets what the user should know
    // (repaired text).
    // The prefill reports "Saving prefix" per chunk; cancelled (kvchat::Cancelled), nothing is
    // saved.
    PrefixRecord save(std::string_view name, std::string_view text, const std::string& cache_spec,
                      std::vector<std::string>& notices, const Progress& progress = {});
    // The same for the opening messages of a conversation (at least one).
    PrefixRecord save_messages(std::string_view name, const std::vector<ChatMessage>& messages,
                               const std::string& cache_spec, std::vector<std::string>& notices,
                               const Progress& progress = {});
    std::vector<PrefixRecord> list() const { return store_.list_prefixes(); }
    PrefixRecord find(std::string_view name) const;  // throws kvchat::Error when there is none
    void rename(std::string_view old_name, std::string_view new_name);
    // New text for a prefix of one system message: the old snapshot is removed and the cache
    // prefilled again. A prefix of several messages is refused (kvchat::Error): replacing them
    // by one system message would silently drop the exchange it holds; edit_messages replaces
    // them explicitly.
    // The new cache is prefilled before anything is stored: cancelled (kvchat::Cancelled), the
    // prefix keeps its messages and its cache.
    PrefixRecord edit(std::string_view name, std::string_view text, std::vector<std::string>& notices,
                      const Progress& progress = {});
    // Replaces every message of the prefix (at least one), then as edit().
    PrefixRecord edit_messages(std::string_view name, const std::vector<ChatMessage>& messages,
                               std::vector<std::string>& notices, const Progress& progress = {});
    // Deletes the record, then its snapshot file.
    void remove(std::string_view name);

    // A copy of the prefix's cache under `cache_spec` (converted when it was saved under another
    // strategy). Refuses (kvchat::Error) a prefix of another model. A missing or damaged snapshot
    // is rebuilt from the stored tokens and saved again, with a notice.
    // A rebuild reports "Prefilling" per chunk; cancelled (kvchat::Cancelled), nothing is recorded.
    std::unique_ptr<Cache> load_cache(const PrefixRecord& prefix, const std::string& cache_spec,
                                      std::vector<std::string>& notices, const Progress& progress = {});

    // The longest saved prefix of this model whose tokens start `tokens` (at least one token
    // must be left after it).
    std::optional<PrefixRecord> longest_match(const std::vector<int32_t>& tokens) const;

private:
    // Repaired messages (a notice when any had invalid UTF-8) and their tokens, refused when they
    // would not fit the model's context.
    std::vector<PrefixMessage> checked_messages(std::string_view name, const std::vector<ChatMessage>& messages,
                                                std::vector<int32_t>& tokens, std::vector<std::string>& notices) const;
    std::unique_ptr<Cache> prefill(const std::vector<int32_t>& tokens, const std::string& cache_spec,
                                   const Progress& progress = {}, std::string_view task = "Prefilling") const;
    void write_snapshot(const PrefixRecord& prefix, const Cache& cache, std::vector<std::string>& notices);

    Store& store_;
    const Model& model_;
    Backend& backend_;
    const ChatTemplate& template_;
};

}  // namespace kvchat
