#include "engine/chat/conversation_registry.h"

#include "engine/chat/conversation_cache.h"
#include "engine/chat/snapshot_storage.h"
#include "engine/common/quoted.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace kvchat {

namespace {

// Checkpoints a conversation snapshot keeps: where the last user message, its reply and the next
// message start.
constexpr size_t kSnapshotCheckpoints = 3;

std::filesystem::path lock_file_for(const Store& store, int64_t conversation_id) {
    return store.conversation_lock_path(conversation_id);
}

bool blank(std::string_view text) { return is_blank_text(text); }

// A turn that failed before its answer was stored leaves the conversation as it was: the error
// says so, so the user knows the message was not kept (the window puts it back in the box).
[[noreturn]] void rethrow_untouched(const char* what) {
    throw Error(std::string(what) + " (the conversation was left as it was)");
}

// The start of a message, for a refusal that quotes it.
std::string excerpt(std::string_view text) {
    constexpr size_t kMax = 60;
    if (text.size() <= kMax) return in_quotes(text);
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
    return in_quotes(std::string(text.substr(0, cut)) + "...");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ConversationRegistry::ConversationRegistry(Store& store, const Model& model, Backend& backend, size_t max_resident)
    : store_(store),
      model_(model),
      backend_(backend),
      template_(ChatTemplate::for_model(model)),
      prefixes_(store, model, backend, template_),
      max_resident_(max_resident == 0 ? 1 : max_resident) {
    if (!template_.notice().empty()) notices_.push_back(template_.notice());
}

ConversationRegistry::~ConversationRegistry() {
    std::vector<std::string> ignored;
    try {
        save_all(ignored);
    } catch (...) {
        // A snapshot is only an acceleration: failing to write one at exit loses no message.
    }
}

std::vector<std::string> ConversationRegistry::take_notices() { return std::exchange(notices_, {}); }

size_t ConversationRegistry::resident() const {
    size_t n = 0;
    for (const Entry& e : entries_) n += e.conversation->has_cache() ? 1 : 0;
    return n;
}

ConversationRegistry::Entry& ConversationRegistry::entry(std::string_view title_in) {
    const RepairedUtf8 title = repair_utf8(title_in);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->title == title.text) {
            entries_.splice(entries_.begin(), entries_, it);
            return entries_.front();
        }
    throw Error("conversation " + in_quotes(title.text) + " is not open");
}

int64_t ConversationRegistry::id_of(std::string_view title) { return entry(title).id; }

const ConversationRegistry::Entry* ConversationRegistry::find_entry(int64_t id) const {
    for (const Entry& e : entries_)
        if (e.id == id) return &e;
    return nullptr;
}

ConversationRegistry::Entry& ConversationRegistry::entry(int64_t id) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->id == id) {
            entries_.splice(entries_.begin(), entries_, it);
            return entries_.front();
        }
    const auto rec = store_.find_conversation_by_id(id);
    if (!rec) throw Error("no conversation with id " + std::to_string(id));
    Entry e;
    e.id = rec->id;
    e.title = rec->title;
    e.conversation = std::make_unique<Conversation>(model_, backend_, template_, canonical_cache_spec(rec->cache_spec));
    for (const MessageRecord& m : store_.list_messages(e.id)) adopt(*e.conversation, m);
    entries_.push_front(std::move(e));
    return entries_.front();
}

Conversation& ConversationRegistry::open(std::string_view title_in, const OpenOptions& options,
                                         const Progress& progress) {
    const RepairedUtf8 title = repair_utf8(title_in);
    if (title.text.empty()) throw Error("a conversation needs a name");
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->title == title.text) {
            entries_.splice(entries_.begin(), entries_, it);
            Entry& e = entries_.front();
            if (!options.cache_spec.empty() && canonical_cache_spec(options.cache_spec) != e.conversation->cache_spec()) {
                // A live switch: the cache is converted in place, keeping what it can.
                if (e.conversation->switch_strategy(conversation_cache_spec(options.cache_spec))) e.dirty = true;
                store_.set_conversation_cache_spec(e.id, e.conversation->cache_spec());
                e.switched_from.reset();
            }
            return *e.conversation;
        }
    if (title.replaced) notices_.push_back("the conversation name had invalid UTF-8; it was replaced by U+FFFD");

    Entry e;
    e.title = title.text;
    if (auto rec = store_.find_conversation(title.text)) {
        e.id = rec->id;
        std::string spec = canonical_cache_spec(rec->cache_spec);
        if (!options.cache_spec.empty() && canonical_cache_spec(options.cache_spec) != spec) {
            // Not recorded yet: the turn it is asked with may be refused (the conversation does not
            // fit the new strategy), and a refused turn leaves the conversation as it was.
            e.switched_from = spec;
            spec = canonical_cache_spec(options.cache_spec);
        }
        e.conversation = std::make_unique<Conversation>(model_, backend_, template_, spec);
        for (const MessageRecord& m : store_.list_messages(e.id)) adopt(*e.conversation, m);
        if (!options.prefix.empty())
            notices_.push_back("conversation " + in_quotes(title.text) + " already exists; --prefix applies only to new ones");
    } else {
        // Everything that can refuse (a bad spec, another model's prefix) happens before the row exists.
        const std::string spec = canonical_cache_spec(options.cache_spec);
        std::optional<PrefixRecord> prefix;
        std::unique_ptr<Cache> cache;
        if (!options.prefix.empty()) {
            prefix = prefixes_.find(options.prefix);
            cache = prefixes_.load_cache(*prefix, spec, notices_, progress);
        } else {
            cache = make_conversation_cache(model_, backend_, spec);
        }
        // The prefix's messages open the transcript, so every later turn renders them (and their
        // tokens are the ones the prefix cache holds); they are written with the conversation.
        std::vector<PrefixMessage> opening;
        if (prefix) {
            opening = prefix->messages;
            if (!options.system.empty())
                notices_.push_back("prefix " + in_quotes(prefix->name) + " gives the conversation its opening; the system "
                                   "message given besides it was not used");
        } else if (!options.system.empty()) {
            opening.push_back({Role::System, options.system});
        }
        std::vector<MessageRecord> stored;
        e.id = store_.create_conversation(title.text, model_.fingerprint(), spec, opening, &stored).id;
        e.conversation = std::make_unique<Conversation>(model_, backend_, template_, spec);
        for (const MessageRecord& m : stored) {
            if (!prefix && m.content_repaired)
                notices_.push_back("the system message had invalid UTF-8; it was replaced by U+FFFD");
            e.conversation->append(m.role, m.content);
        }
        e.conversation->set_cache(std::move(cache));
        e.cache_ready = true;
        e.dirty = prefix.has_value();
        if (prefix) e.prefix_tokens = static_cast<int64_t>(prefix->tokens.size());
    }
    entries_.push_front(std::move(e));
    return *entries_.front().conversation;
}

void ConversationRegistry::make_ready(Entry& e, std::vector<std::string>&, const Progress& progress) {
    constexpr std::string_view kTask = "Loading cache";
    if (e.cache_ready) return;
    const auto rec = store_.find_conversation_by_id(e.id);
    if (!rec) throw Error("conversation " + in_quotes(e.title) + " was deleted");
    if (!rec->snapshot.empty()) {
        // The snapshot is read in one piece on another thread: the step can be cancelled before
        // it starts, and its end is reported when the turn takes the cache.
        progress.tell(kTask, 0, 1);
        progress.check(kTask);
    }
    e.cache_ready = true;
    if (rec->model_fingerprint != model_.fingerprint()) store_.set_conversation_model(e.id, model_.fingerprint());
    if (rec->snapshot.empty()) return;
    // The snapshot is read on another thread while the turn renders the transcript; the
    // conversation waits for it where the turn first needs its cache.
    e.conversation->set_cache_loading(std::async(
        std::launch::async, [path = store_.snapshot_path(rec->snapshot), title = e.title,
                             has_messages = !e.conversation->messages().empty(),
                             spec = e.conversation->cache_spec(), target = e.conversation->spec(), &model = model_,
                             &backend = backend_] {
            LoadedCache out;
            SavedCache saved;
            try {
                saved = load_cache_snapshot(path, model, backend);
            } catch (const std::exception& err) {
                if (has_messages)
                    out.notices.push_back("the saved cache of conversation " + in_quotes(title) + " could not be used (" +
                                          err.what() + "); its transcript is prefilled again");
                return out;
            }
            const std::string was = saved.cache->spec_text();
            if (was != spec) {
                try {
                    kvchat::switch_strategy(*saved.cache, saved.checkpoints, model, backend, target);
                    out.notices.push_back("the cache of conversation " + in_quotes(title) + " was converted from " + was +
                                          " to " + spec);
                } catch (const std::exception& err) {
                    out.notices.push_back("the cache of conversation " + in_quotes(title) + " could not be converted to " +
                                          spec + " (" + err.what() + "); its transcript is prefilled again");
                    return out;
                }
            }
            out.cache = std::move(saved.cache);
            out.checkpoints = std::move(saved.checkpoints);
            return out;
        }));
}

std::string ConversationRegistry::lock_path(const Entry& e) const {
    const std::filesystem::path file = lock_file_for(store_, e.id);
    if (::mkdir(file.parent_path().c_str(), 0700) != 0 && errno != EEXIST)
        throw Error("cannot lock conversation " + in_quotes(e.title) + ": cannot create " +
                    in_quotes(file.parent_path().string()) + ": " + std::strerror(errno));
    return file.string();
}

bool ConversationRegistry::transcript_is_stored(const Entry& e) const {
    const std::vector<MessageRecord> stored = store_.list_messages(e.id);
    const std::vector<ChatMessage>& have = e.conversation->messages();
    if (stored.size() != have.size()) return false;
    for (size_t i = 0; i < have.size(); ++i) {
        if (stored[i].role != have[i].role || stored[i].content != have[i].content) return false;
        // An answer regenerated elsewhere may have the same text and other ids (an empty one, or
        // pieces that decode to nothing): they render differently (kvchat_soak seed 1005 step 214).
        if (have[i].role == Role::Assistant &&
            template_.answer_ids_from_file(stored[i].stats.token_ids) != template_.answer_ids_from_file(have[i].tokens))
            return false;
    }
    return true;
}

void ConversationRegistry::lock_and_sync(Entry& e, std::vector<std::string>& notices) {
    if (!e.lock) e.lock = std::make_unique<ConversationLock>(lock_path(e), e.title);
    try {
        const auto rec = store_.find_conversation_by_id(e.id);
        if (!rec) throw Error("conversation " + in_quotes(e.title) + " was deleted");
        e.title = rec->title;
        // Another process switched the strategy (kvchat-cli chat --cache): its choice stands, and
        // the cache in memory is converted to it as a live switch would. One the new strategy
        // cannot hold (it may hold more than the transcript the turn will keep) is dropped: the
        // turn prefills what it needs.
        const std::string stored_spec = canonical_cache_spec(rec->cache_spec);
        Conversation& conv = *e.conversation;
        if (e.switched_from && stored_spec == *e.switched_from) {
            // Still what it was when this process asked for its own switch: that one goes on.
        } else if (stored_spec != conv.cache_spec()) {
            e.switched_from.reset();
            bool converted = false;
            try {
                converted = conv.switch_strategy(parse_cache_spec(stored_spec));
            } catch (const Error&) {
                conv.release_cache();
                conv.set_cache_spec(stored_spec);
            }
            e.dirty = converted;
            notices.push_back("conversation " + in_quotes(e.title) + " was switched to " + stored_spec +
                              " by another kvchat process");
        }
        if (transcript_is_stored(e)) return;
        // Another process answered or edited meanwhile: its messages come first (answers with the
        // ids they were generated as, so they render as that process rendered them). The cache
        // keeps the longest prefix of tokens that still matches (the next turn aligns it).
        Conversation& c = *e.conversation;
        c.truncate(0);
        for (const MessageRecord& m : store_.list_messages(e.id)) adopt(c, m);
        notices.push_back("conversation " + in_quotes(e.title) +
                          " was changed by another kvchat process; its messages were read again");
    } catch (...) {
        e.lock.reset();
        throw;
    }
}

void ConversationRegistry::save_snapshot(Entry& e, std::vector<std::string>& notices) {
    // A switch no turn has made yet is not recorded: the snapshot stays the stored strategy's.
    if (!e.conversation->has_cache() || e.switched_from) return;
    const std::string name = store_.conversation_snapshot_name(e.id);
    // The snapshot is installed under the conversation's lock, and only when its cache was made
    // for the stored transcript: one made before another process moved the conversation on is
    // older than what that process saved, and must not replace it.
    std::unique_ptr<ConversationLock> taken;
    try {
        if (!e.lock) taken = std::make_unique<ConversationLock>(lock_path(e), e.title);
    } catch (const Error& err) {
        notices.push_back("the cache of conversation " + in_quotes(e.title) + " was not saved (" + err.what() +
                          "); the next session prefills it again");
        return;
    }
    if (!transcript_is_stored(e)) {
        e.dirty = false;
        return;
    }
    try {
        // Only the latest checkpoints go to disk: regenerating the last answer or editing the last
        // message crops to one of them, and each holds every sliding window, so older ones would
        // multiply what reopening the conversation has to read before its first token.
        const std::vector<CacheCheckpoint>& all = e.conversation->checkpoints();
        const size_t keep = std::min<size_t>(all.size(), kSnapshotCheckpoints);
        // Room first, for about what the last save of it took (the live cache when none), so a
        // save never fills the budget's disk before older caches give way.
        int64_t expected = e.conversation->cache().bytes();
        if (const auto rec = store_.find_conversation_by_id(e.id); rec && !rec->snapshot.empty()) {
            std::error_code ec;
            const auto size = std::filesystem::file_size(store_.snapshot_path(rec->snapshot), ec);
            if (!ec) expected = std::max<int64_t>(expected, static_cast<int64_t>(size));
        }
        make_room_for_snapshot(store_, {StoredCache::Owner::Conversation, e.id}, expected, notices);
        save_cache_snapshot(e.conversation->cache(), std::span(all).last(keep), model_, store_.snapshot_path(name));
    } catch (const Error& err) {
        notices.push_back("the cache of conversation " + in_quotes(e.title) + " was not saved (" + err.what() +
                          "); the next session prefills it again");
        return;
    }
    store_.remove_snapshot_file(store_.set_conversation_snapshot(e.id, name));
    keep_snapshots_in_budget(store_, {StoredCache::Owner::Conversation, e.id}, notices);
    e.dirty = false;
}

void ConversationRegistry::save_all(std::vector<std::string>& notices) {
    for (Entry& e : entries_)
        if (e.dirty) save_snapshot(e, notices);
}

void ConversationRegistry::enforce_budget(const Entry& keep) {
    while (resident() > max_resident_) {
        Entry* victim = nullptr;
        for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
            if (&*it != &keep && it->conversation->has_cache()) {
                victim = &*it;
                break;
            }
        if (!victim) return;
        if (victim->dirty) save_snapshot(*victim, notices_);
        victim->conversation->release_cache();
        victim->cache_ready = false;
    }
}

void ConversationRegistry::adopt(Conversation& c, const MessageRecord& m) const {
    c.append(m.role, m.content, template_.answer_ids_from_file(m.stats.token_ids));
    // Time to first token over the tokens computed: a prefill's speed, slightly low.
    if (m.stats.ttft_ms) c.note_prefill_speed(m.stats.computed_tokens, *m.stats.ttft_ms);
}

void ConversationRegistry::finish_turn(Entry& e, const TurnResult& r, size_t messages_before,
                                       std::vector<std::string>& notices) {
    Conversation& c = *e.conversation;
    e.dirty = true;
    if (c.messages().size() > messages_before) {
        GenerationStats stats;
        stats.prompt_tokens = r.prompt_tokens;
        stats.generated_tokens = static_cast<int64_t>(r.tokens.size());
        stats.ttft_ms = r.ttft_ms;
        if (r.decode_tok_s > 0) stats.tokens_per_second = r.decode_tok_s;
        stats.cached_tokens = r.cached_tokens;
        stats.prefix_tokens = r.prefix_tokens;
        stats.computed_tokens = r.prefill_tokens;
        stats.prefill_saved_ms = r.prefill_saved_ms;
        stats.token_ids = c.messages().back().tokens;
        store_.append_message(e.id, Role::Assistant, c.messages().back().content, stats);
    }
    if (const auto rec = store_.find_conversation_by_id(e.id); rec && rec->cache_spec != c.cache_spec())
        store_.set_conversation_cache_spec(e.id, c.cache_spec());
    e.switched_from.reset();  // (a switch asked on open is made by this turn)
    // The message is committed; only now the snapshot.
    save_snapshot(e, notices);
    enforce_budget(e);
}

ConversationRegistry::Entry& ConversationRegistry::prepare(int64_t id, std::vector<std::string>& notices,
                                                          const Progress& progress) {
    Entry& e = entry(id);
    notices = take_notices();
    lock_and_sync(e, notices);
    try {
        make_ready(e, notices, progress);
    } catch (...) {
        e.lock.reset();
        throw;
    }
    return e;
}

void ConversationRegistry::restore_messages(Entry& e, const std::vector<MessageRecord>& before, size_t keep) {
    Conversation& c = *e.conversation;
    c.truncate(keep);
    store_.delete_messages_after(e.id, static_cast<int64_t>(keep) - 1);
    for (size_t i = keep; i < before.size(); ++i) {
        store_.append_message(e.id, before[i].role, before[i].content, before[i].stats);
        adopt(c, before[i]);
    }
}

bool ConversationRegistry::take_back(Entry& e, const std::vector<MessageRecord>& before, size_t keep) {
    try {
        // Every turn stores its answer last: once it is there, the turn happened and stays.
        const std::vector<MessageRecord> now = store_.list_messages(e.id);
        if (!now.empty() && now.back().role == Role::Assistant) return false;
        restore_messages(e, before, keep);
        return true;
    } catch (const std::exception&) {
        // The store itself failed (a full disk): what it holds stays, as a crash would leave it.
        return false;
    }
}

TurnCallbacks ConversationRegistry::callbacks_of(const std::function<void(std::string_view)>& on_text,
                                                 const std::atomic<bool>* cancel) {
    TurnCallbacks c;
    c.on_text = on_text;
    c.progress.cancel = cancel;
    return c;
}

TurnResult ConversationRegistry::answer(Entry& e, std::chrono::steady_clock::time_point t0, const TurnOptions& options,
                                        const TurnCallbacks& callbacks, std::vector<std::string>& notices) {
    Conversation& c = *e.conversation;
    const size_t before = c.messages().size();
    const double before_ms = ms_since(t0);
    TurnResult r;
    try {
        r = c.respond(options, callbacks);
    } catch (...) {
        e.dirty = true;  // the cache may hold part of the answer: save it with the next snapshot
        throw;
    }
    r.ttft_ms += before_ms;  // opening, loading and prefix reuse count toward the first token
    // The first answer of a conversation started from a prefix reuses the prefix's tokens.
    r.prefix_tokens = std::min(e.prefix_tokens, r.cached_tokens);
    e.prefix_tokens = 0;
    if (r.prefill_ms > 0 && r.prefill_tokens > 0) prefill_tok_s_ = static_cast<double>(r.prefill_tokens) * 1000.0 / r.prefill_ms;
    finish_turn(e, r, before, notices);
    r.notices.insert(r.notices.begin(), notices.begin(), notices.end());
    return r;
}

TurnResult ConversationRegistry::send(std::string_view title, std::string_view text, const TurnOptions& options,
                                      const std::function<void(std::string_view)>& on_text,
                                      const std::atomic<bool>* cancel) {
    open(title);
    return send(entry(title).id, text, options, callbacks_of(on_text, cancel));
}

TurnResult ConversationRegistry::regenerate(std::string_view title, const TurnOptions& options,
                                            const std::function<void(std::string_view)>& on_text,
                                            const std::atomic<bool>* cancel) {
    open(title);
    return regenerate(entry(title).id, options, callbacks_of(on_text, cancel));
}

TurnResult ConversationRegistry::edit(std::string_view title, size_t ordinal, std::string_view text,
                                      const TurnOptions& options, const std::function<void(std::string_view)>& on_text,
                                      const std::atomic<bool>* cancel) {
    open(title);
    return edit(entry(title).id, ordinal, text, options, callbacks_of(on_text, cancel));
}

TurnResult ConversationRegistry::send(int64_t id, std::string_view text, const TurnOptions& options,
                                      const TurnCallbacks& callbacks) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> notices;
    if (blank(text)) throw Error("the message is empty (only white space): nothing was sent");
    Entry& e = prepare(id, notices, callbacks.progress);
    const Unlock unlock{e};
    Conversation& c = *e.conversation;
    // (A conversation just started from a prefix may end with the prefix's user message: the
    // new one continues it, as the prefix was saved to be used.)
    if (!c.messages().empty() && c.messages().back().role == Role::User && e.prefix_tokens == 0)
        throw Error("conversation " + in_quotes(e.title) + " ends with a message of yours that has no answer (" +
                    excerpt(c.messages().back().content) +
                    ", left by a crash or a failed turn); regenerate answers it (/regenerate in kvchat-cli chat, "
                    "--regenerate with --conversation), or edit it; nothing was sent");
    const RepairedUtf8 fixed = repair_utf8(text);
    if (fixed.replaced) notices.push_back("your message had invalid UTF-8; it was replaced by U+FFFD");
    const std::vector<MessageRecord> before = store_.list_messages(e.id);

    c.append(Role::User, fixed.text);
    try {
        const RenderedChat rendered = c.render_for_reply();
        c.check_fits(rendered, options);
        c.finish_loading(callbacks.progress);
        // A conversation with nothing cached may start with a saved prefix.
        if (!c.has_cache() || c.cache().seq_length() == 0)
            if (auto p = prefixes_.longest_match(rendered.tokens)) {
                c.set_cache(prefixes_.load_cache(*p, c.cache_spec(), notices, callbacks.progress));
                e.prefix_tokens = static_cast<int64_t>(p->tokens.size());
                notices.push_back("reused the cache of prefix " + in_quotes(p->name) + " (" +
                                  std::to_string(p->tokens.size()) + " tokens)");
            }
        // The raw text, so the store records that it repaired it (it repairs it the same way).
        store_.append_message(e.id, Role::User, text);
    } catch (...) {
        c.truncate(c.messages().size() - 1);
        throw;
    }
    try {
        return answer(e, t0, options, callbacks, notices);
    } catch (const Cancelled&) {
        restore_messages(e, before, before.size());
        throw;
    } catch (const Error& err) {
        // Refused (the conversation no longer fits the cache) or failed: the message is taken back,
        // or the next one would be refused as left unanswered.
        if (!take_back(e, before, before.size())) throw;
        rethrow_untouched(err.what());
    } catch (...) {
        take_back(e, before, before.size());
        throw;
    }
}

TurnResult ConversationRegistry::regenerate(int64_t id, const TurnOptions& options, const TurnCallbacks& callbacks) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> notices;
    Entry& e = prepare(id, notices, callbacks.progress);
    const Unlock unlock{e};
    Conversation& c = *e.conversation;
    const auto& msgs = c.messages();
    if (msgs.empty() || (msgs.back().role != Role::Assistant && msgs.back().role != Role::User))
        throw Error("conversation " + in_quotes(e.title) + " has no answer to regenerate");
    const std::vector<MessageRecord> before = store_.list_messages(e.id);
    const size_t keep = msgs.back().role == Role::Assistant ? msgs.size() - 1 : msgs.size();
    if (msgs.back().role == Role::Assistant) {
        c.check_fits(c.chat_template().render({msgs.begin(), msgs.end() - 1}, true), options);
        store_.delete_messages_after(e.id, static_cast<int64_t>(msgs.size()) - 2);
        c.truncate(msgs.size() - 1);
    }
    try {
        return answer(e, t0, options, callbacks, notices);
    } catch (const Cancelled&) {
        restore_messages(e, before, keep);
        throw;
    } catch (const Error& err) {
        // The answer it was to replace comes back.
        if (!take_back(e, before, keep)) throw;
        rethrow_untouched(err.what());
    } catch (...) {
        take_back(e, before, keep);
        throw;
    }
}

TurnResult ConversationRegistry::edit(int64_t id, size_t ordinal, std::string_view text, const TurnOptions& options,
                                      const TurnCallbacks& callbacks) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> notices;
    if (blank(text)) throw Error("the message is empty (only white space): nothing was changed");
    Entry& e = prepare(id, notices, callbacks.progress);
    const Unlock unlock{e};
    Conversation& c = *e.conversation;
    if (ordinal >= c.messages().size() || c.messages()[ordinal].role != Role::User)
        throw Error("message " + std::to_string(ordinal) + " of conversation " + in_quotes(e.title) +
                    " is not a user message");
    const RepairedUtf8 fixed = repair_utf8(text);
    if (fixed.replaced) notices.push_back("your message had invalid UTF-8; it was replaced by U+FFFD");
    std::vector<ChatMessage> edited(c.messages().begin(), c.messages().begin() + static_cast<ptrdiff_t>(ordinal) + 1);
    edited.back().content = fixed.text;
    c.check_fits(c.chat_template().render(edited, true), options);
    const std::vector<MessageRecord> stored = store_.list_messages(e.id);
    if (ordinal >= stored.size()) throw Error("the store lacks message " + std::to_string(ordinal));
    store_.update_message_content(stored[ordinal].id, text);
    store_.delete_messages_after(e.id, static_cast<int64_t>(ordinal));
    c.edit(ordinal, fixed.text);
    try {
        return answer(e, t0, options, callbacks, notices);
    } catch (const Cancelled&) {
        // The edited message goes back to its old text and what followed it comes back.
        restore_messages(e, stored, ordinal);
        throw;
    } catch (const Error& err) {
        if (!take_back(e, stored, ordinal)) throw;
        rethrow_untouched(err.what());
    } catch (...) {
        take_back(e, stored, ordinal);
        throw;
    }
}

// ---- by id ----

int64_t ConversationRegistry::create(std::string_view title_in, const OpenOptions& options, const Progress& progress) {
    std::string base = repair_utf8(title_in).text;
    if (base.empty()) base = "Chat";
    std::string title = base;
    for (int n = 2; store_.find_conversation(title); ++n) title = base + " " + std::to_string(n);
    open(title, options, progress);
    return entries_.front().id;
}

ConversationSummary ConversationRegistry::summary_of(const ConversationOverview& o) const {
    ConversationSummary s;
    s.id = o.conversation.id;
    s.title = o.conversation.title;
    s.updated_ms = o.conversation.updated_ms;
    s.message_count = o.message_count;
    s.tokens = o.tokens;
    s.cache_spec = o.conversation.cache_spec;
    s.last_unanswered = o.last_unanswered;
    s.cache_saved = !o.conversation.snapshot.empty();
    if (const Entry* e = find_entry(s.id)) {
        s.cache_resident = e->conversation->has_cache();
        s.cache_spec = e->conversation->cache_spec();
    }
    return s;
}

std::vector<ConversationSummary> ConversationRegistry::list() const {
    std::vector<ConversationSummary> out;
    for (const ConversationOverview& o : store_.list_conversation_overviews()) out.push_back(summary_of(o));
    return out;
}

std::vector<ConversationSummary> ConversationRegistry::search(std::string_view query) const {
    std::vector<ConversationSummary> out;
    for (const ConversationOverview& o : store_.search_conversations(query)) out.push_back(summary_of(o));
    return out;
}

std::vector<MessageRecord> ConversationRegistry::messages(int64_t id) const {
    if (!store_.find_conversation_by_id(id)) throw Error("no conversation with id " + std::to_string(id));
    return store_.list_messages(id);
}

void ConversationRegistry::rename(int64_t id, std::string_view title) {
    store_.rename_conversation(id, title);
    for (Entry& e : entries_)
        if (e.id == id) e.title = store_.find_conversation_by_id(id)->title;
}

void ConversationRegistry::remove(int64_t id) {
    store_.remove_snapshot_file(store_.delete_conversation(id));
    // Its lock file too (ids are never reused, so no later conversation can need this one).
    std::remove(lock_file_for(store_, id).c_str());
    // Its cache goes unsaved: nothing owns it any more.
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->id == id) {
            entries_.erase(it);
            break;
        }
}

void ConversationRegistry::close(int64_t id) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->id == id) {
            if (it->dirty) save_snapshot(*it, notices_);
            entries_.erase(it);
            return;
        }
}

std::optional<CacheTelemetry> ConversationRegistry::telemetry(int64_t id) const {
    const Entry* e = find_entry(id);
    if (!e) return std::nullopt;
    const Cache* c = e->conversation->resident_cache();
    if (!c) return std::nullopt;
    return c->telemetry();
}

}  // namespace kvchat
