#pragma once
// Saved prefix prompts with their prefilled caches. A prefix is a system prompt (a name and its
// text): its tokens are what the chat template renders for a conversation that opens with that
// system message, so a conversation started from it (or one whose rendered prompt happens to
// start with those tokens) copies the prefix's cache and prefills only the rest.
//
// The store holds the record, the snapshot file beside it holds the cache. A missing or damaged
// snapshot is rebuilt from the text; a prefix saved for another model is refused.
#include "engine/chat/chat_template.h"
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

    // The tokens a prefix with this text gets under the current model and template.
    std::vector<int32_t> tokens_for(std::string_view text) const;

    // Saves a new prefix and its prefilled cache (under `cache_spec`, empty: the default).
    // Refuses a name in use. `notices` gets what the user should know (repaired text).
    PrefixRecord save(std::string_view name, std::string_view text, const std::string& cache_spec,
                      std::vector<std::string>& notices);
    std::vector<PrefixRecord> list() const { return store_.list_prefixes(); }
    PrefixRecord find(std::string_view name) const;  // throws kvchat::Error when there is none
    void rename(std::string_view old_name, std::string_view new_name);
    // New text: the old snapshot is removed and the cache prefilled again.
    PrefixRecord edit(std::string_view name, std::string_view text, std::vector<std::string>& notices);
    // Deletes the record, then its snapshot file.
    void remove(std::string_view name);

    // A copy of the prefix's cache under `cache_spec` (converted when it was saved under another
    // strategy). Refuses (kvchat::Error) a prefix of another model. A missing or damaged snapshot
    // is rebuilt from the text and saved again, with a notice.
    std::unique_ptr<Cache> load_cache(const PrefixRecord& prefix, const std::string& cache_spec,
                                      std::vector<std::string>& notices);

    // The longest saved prefix of this model whose tokens start `tokens` (at least one token
    // must be left after it).
    std::optional<PrefixRecord> longest_match(const std::vector<int32_t>& tokens) const;

private:
    std::unique_ptr<Cache> prefill(const std::vector<int32_t>& tokens, const std::string& cache_spec) const;
    void write_snapshot(const PrefixRecord& prefix, const Cache& cache, std::vector<std::string>& notices);

    Store& store_;
    const Model& model_;
    Backend& backend_;
    const ChatTemplate& template_;
};

}  // namespace kvchat
