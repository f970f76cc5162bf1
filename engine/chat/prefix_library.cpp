#include "engine/chat/prefix_library.h"

#include "engine/chat/conversation_cache.h"
#include "engine/chat/snapshot_storage.h"
#include "engine/common/quoted.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <algorithm>
#include <cstdio>

namespace kvchat {

namespace {

std::string messages_count(size_t n) { return std::to_string(n) + (n == 1 ? " message" : " messages"); }

}  // namespace

PrefixLibrary::PrefixLibrary(Store& store, const Model& model, Backend& backend, const ChatTemplate& chat_template)
    : store_(store), model_(model), backend_(backend), template_(chat_template) {}

std::vector<int32_t> PrefixLibrary::tokens_for(std::string_view text) const {
    return tokens_for({ChatMessage{Role::System, std::string(text)}});
}

std::vector<int32_t> PrefixLibrary::tokens_for(const std::vector<ChatMessage>& messages) const {
    // Without a generation prompt: whatever follows (the user's next message, or the reply's
    // opening) renders after these tokens unchanged.
    return template_.render(messages, false).tokens;
}

std::vector<ChatMessage> PrefixLibrary::messages_of(const PrefixRecord& prefix) {
    std::vector<ChatMessage> out;
    out.reserve(prefix.messages.size());
    for (const PrefixMessage& m : prefix.messages) out.push_back({m.role, m.content});
    return out;
}

std::vector<PrefixMessage> PrefixLibrary::checked_messages(std::string_view name,
                                                           const std::vector<ChatMessage>& messages,
                                                           std::vector<int32_t>& tokens,
                                                           std::vector<std::string>& notices) const {
    if (messages.empty()) throw Error("prefix " + in_quotes(name) + " needs at least one message");
    std::vector<PrefixMessage> fixed;
    std::vector<ChatMessage> rendered;
    bool replaced = false;
    for (const ChatMessage& m : messages) {
        RepairedUtf8 r = repair_utf8(m.content);
        replaced = replaced || r.replaced;
        rendered.push_back({m.role, r.text});
        fixed.push_back({m.role, std::move(r.text), r.replaced});
    }
    if (replaced)
        notices.push_back(messages.size() == 1 ? "the prefix text had invalid UTF-8; it was replaced by U+FFFD"
                                               : "a message of the prefix had invalid UTF-8; it was replaced by U+FFFD");
    tokens = tokens_for(rendered);
    if (static_cast<int64_t>(tokens.size()) >= model_.config().n_ctx_train)
        throw Error("prefix " + in_quotes(name) + " has " + std::to_string(tokens.size()) +
                    " tokens; the model's context holds " + std::to_string(model_.config().n_ctx_train));
    return fixed;
}

std::unique_ptr<Cache> PrefixLibrary::prefill(const std::vector<int32_t>& tokens, const std::string& cache_spec,
                                              const Progress& progress, std::string_view task) const {
    auto cache = make_conversation_cache(model_, backend_, cache_spec.empty() ? default_cache_spec() : cache_spec);
    prefill_in_chunks(model_, backend_, *cache, tokens.data(), static_cast<int64_t>(tokens.size()), progress, task);
    return cache;
}

void PrefixLibrary::write_snapshot(const PrefixRecord& prefix, const Cache& cache, std::vector<std::string>& notices) {
    const std::string name = store_.prefix_snapshot_name(prefix.id);
    const CacheRef self{StoredCache::Owner::Prefix, prefix.id};
    make_room_for_snapshot(store_, self, cache.bytes(), notices);
    try {
        save_cache_snapshot(cache, {}, model_, store_.snapshot_path(name));
    } catch (const Error& e) {
        notices.push_back("the cache of prefix " + in_quotes(prefix.name) + " was not saved (" + e.what() +
                          "); it will be prefilled again when used");
        return;
    }
    store_.remove_snapshot_file(store_.set_prefix_snapshot(prefix.id, name, model_.fingerprint(), cache.spec_text()));
    keep_snapshots_in_budget(store_, self, notices);
}

PrefixRecord PrefixLibrary::save(std::string_view name, std::string_view text, const std::string& cache_spec,
                                 std::vector<std::string>& notices, const Progress& progress) {
    return save_messages(name, {ChatMessage{Role::System, std::string(text)}}, cache_spec, notices, progress);
}

PrefixRecord PrefixLibrary::save_messages(std::string_view name, const std::vector<ChatMessage>& messages,
                                          const std::string& cache_spec, std::vector<std::string>& notices,
                                          const Progress& progress) {
    if (name.empty()) throw Error("a prefix needs a name");
    if (store_.find_prefix(name)) throw Error("a prefix named " + in_quotes(name) + " already exists");
    const std::string spec = canonical_cache_spec(cache_spec);
    PrefixRecord rec;
    rec.name = std::string(name);
    rec.messages = checked_messages(name, messages, rec.tokens, notices);
    rec.model_fingerprint = model_.fingerprint();
    rec.cache_spec = spec;
    // Before the row: a refused spec or a cancel saves nothing.
    auto cache = prefill(rec.tokens, spec, progress, "Saving prefix");
    // The record first: a crash before the snapshot costs the cache, never the prefix.
    rec = store_.save_prefix(rec);
    write_snapshot(rec, *cache, notices);
    return *store_.find_prefix_by_id(rec.id);
}

PrefixRecord PrefixLibrary::find(std::string_view name) const {
    auto p = store_.find_prefix(name);
    if (!p) throw Error("there is no prefix named " + in_quotes(name));
    return *p;
}

void PrefixLibrary::rename(std::string_view old_name, std::string_view new_name) {
    const PrefixRecord p = find(old_name);
    if (new_name.empty()) throw Error("a prefix needs a name");
    if (store_.find_prefix(new_name)) throw Error("a prefix named " + in_quotes(new_name) + " already exists");
    store_.rename_prefix(p.id, new_name);
}

PrefixRecord PrefixLibrary::edit(std::string_view name, std::string_view text, std::vector<std::string>& notices,
                                 const Progress& progress) {
    const PrefixRecord p = find(name);
    if (p.messages.size() != 1 || p.messages.front().role != Role::System)
        throw Error("prefix " + in_quotes(p.name) + " holds " + messages_count(p.messages.size()) +
                    ", not one system prompt; new text would drop them: replace them from a conversation "
                    "(prefix edit NAME --conversation CONV [--messages N]) or save the text under another name");
    return edit_messages(name, {ChatMessage{Role::System, std::string(text)}}, notices, progress);
}

PrefixRecord PrefixLibrary::edit_messages(std::string_view name, const std::vector<ChatMessage>& messages,
                                          std::vector<std::string>& notices, const Progress& progress) {
    PrefixRecord p = find(name);
    const std::string spec = canonical_cache_spec(p.cache_spec);
    std::vector<int32_t> tokens;
    const std::vector<PrefixMessage> fixed = checked_messages(p.name, messages, tokens, notices);
    // The new cache first: a cancel leaves the prefix as it was.
    auto cache = prefill(tokens, spec, progress, "Saving prefix");
    const PrefixTextUpdate u = store_.update_prefix_messages(p.id, fixed, tokens);
    store_.remove_snapshot_file(u.dropped_snapshot);
    p = *store_.find_prefix_by_id(p.id);
    p.cache_spec = spec;
    write_snapshot(p, *cache, notices);
    return *store_.find_prefix_by_id(p.id);
}

void PrefixLibrary::remove(std::string_view name) {
    const PrefixRecord p = find(name);
    store_.remove_snapshot_file(store_.delete_prefix(p.id));
}

std::unique_ptr<Cache> PrefixLibrary::load_cache(const PrefixRecord& prefix, const std::string& cache_spec,
                                                 std::vector<std::string>& notices, const Progress& progress) {
    if (prefix.model_fingerprint != model_.fingerprint())
        throw Error("prefix " + in_quotes(prefix.name) +
                    " was saved with another model; its cache cannot be used with this one (save it again under "
                    "this model)");
    const std::string want = canonical_cache_spec(cache_spec);
    std::string saved;
    try {
        saved = canonical_cache_spec(prefix.cache_spec);
    } catch (const Error&) {
        saved = default_cache_spec();  // a spec this build no longer reads: rebuild under the default
    }
    std::unique_ptr<Cache> cache;
    if (!prefix.snapshot.empty()) {
        try {
            cache = load_cache_snapshot(store_.snapshot_path(prefix.snapshot), model_, backend_).cache;
            if (cache->tokens() != prefix.tokens) throw Error("it holds other tokens than the prefix");
        } catch (const Error& e) {
            notices.push_back("the cache of prefix " + in_quotes(prefix.name) + " could not be used (" + e.what() +
                              "); it was prefilled again");
            cache.reset();
        }
    }
    if (!cache) {
        cache = prefill(prefix.tokens, saved, progress);
        write_snapshot(prefix, *cache, notices);
    }
    if (cache->spec_text() != want) {
        try {
            convert_conversation_cache(*cache, model_, backend_, parse_cache_spec(want), progress);
            notices.push_back("prefix " + in_quotes(prefix.name) + " was saved under " + saved +
                              "; its cache was converted to " + want);
        } catch (const Cancelled&) {
            throw;
        } catch (const Error& e) {
            cache = prefill(prefix.tokens, want, progress);
            notices.push_back("prefix " + in_quotes(prefix.name) + " was saved under " + saved +
                              " and could not be converted to " + want + " (" + e.what() + "); it was prefilled again");
        }
    }
    store_.record_prefix_use(prefix.id);
    return cache;
}

std::optional<PrefixRecord> PrefixLibrary::longest_match(const std::vector<int32_t>& tokens) const {
    std::optional<PrefixRecord> best;
    for (PrefixRecord& p : store_.list_prefixes()) {
        if (p.model_fingerprint != model_.fingerprint() || p.tokens.empty() || p.tokens.size() >= tokens.size())
            continue;
        if (!std::equal(p.tokens.begin(), p.tokens.end(), tokens.begin())) continue;
        if (!best || p.tokens.size() > best->tokens.size()) best = std::move(p);
    }
    return best;
}

}  // namespace kvchat
