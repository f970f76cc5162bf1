#include "engine/chat/chat_session.h"

#include "engine/chat/chat_settings.h"
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

}  // namespace

ChatSession::ChatSession(Store& store, const Model& model, Backend& backend, size_t max_resident)
    : ChatSession(store, &model, &backend, max_resident) {}

ChatSession::ChatSession(Store& store, const Model* model, Backend* backend, size_t max_resident)
    : store_(store), model_(model), backend_(backend), max_resident_(max_resident == 0 ? 1 : max_resident) {
    if (!model_ || !backend_) {
        model_ = nullptr;
        backend_ = nullptr;
        return;
    }
    template_.emplace(ChatTemplate::for_model(*model_));
    prefixes_.emplace(store, *model_, *backend_, *template_);
    if (!template_->notice().empty()) notices_.push_back(template_->notice());
}

namespace {
[[noreturn]] void no_model() { throw Error("no model is loaded: open one first"); }
}  // namespace

const Model& ChatSession::model() const {
    if (!model_) no_model();
    return *model_;
}

Backend& ChatSession::backend() const {
    if (!backend_) no_model();
    return *backend_;
}

const ChatTemplate& ChatSession::chat_template() const {
    if (!template_) no_model();
    return *template_;
}

PrefixLibrary& ChatSession::prefixes() {
    if (!prefixes_) no_model();
    return *prefixes_;
}

ChatSession::~ChatSession() {
    std::vector<std::string> ignored;
    try {
        save_all(ignored);
    } catch (...) {
        // A snapshot is only an acceleration: failing to write one at exit loses no message.
    }
}

std::vector<std::string> ChatSession::take_notices() { return std::exchange(notices_, {}); }

size_t ChatSession::resident() const {
    size_t n = 0;
    for (const Entry& e : entries_) n += e.conversation->has_cache() ? 1 : 0;
    return n;
}

ChatSession::Entry& ChatSession::entry(std::string_view title_in) {
    const RepairedUtf8 title = repair_utf8(title_in);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->title == title.text) {
            entries_.splice(entries_.begin(), entries_, it);
            return entries_.front();
        }
    throw Error("conversation " + in_quotes(title.text) + " is not open");
}

int64_t ChatSession::id_of(std::string_view title) { return entry(title).id; }

const ChatSession::Entry* ChatSession::find_entry(int64_t id) const {
    for (const Entry& e : entries_)
        if (e.id == id) return &e;
    return nullptr;
}

ChatSession::Entry& ChatSession::entry(int64_t id) {
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
    // Its messages are read by the turn that opened it (lock_and_sync), once.
    e.conversation = std::make_unique<Conversation>(model(), backend(), chat_template(), canonical_cache_spec(rec->cache_spec));
    entries_.push_front(std::move(e));
    return entries_.front();
}

Conversation& ChatSession::open(std::string_view title_in, const OpenOptions& options,
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
        e.conversation = std::make_unique<Conversation>(model(), backend(), chat_template(), spec);
        for (const MessageRecord& m : store_.list_messages(e.id)) adopt(*e.conversation, m);
        e.loaded = true;
        if (!options.prefix.empty())
            notices_.push_back("conversation " + in_quotes(title.text) + " already exists; --prefix applies only to new ones");
    } else {
        // Everything that can refuse (a bad spec, another model's prefix) happens before the row exists.
        const std::string spec = canonical_cache_spec(options.cache_spec);
        std::optional<PrefixRecord> prefix;
        std::unique_ptr<Cache> cache;
        if (!options.prefix.empty()) {
            prefix = prefixes().find(options.prefix);
            cache = prefixes().load_cache(*prefix, spec, notices_, progress);
        } else {
            cache = make_conversation_cache(model(), backend(), spec);
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
        e.id = store_.create_conversation(title.text, model().fingerprint(), spec, opening, &stored, options.origin).id;
        e.conversation = std::make_unique<Conversation>(model(), backend(), chat_template(), spec);
        for (const MessageRecord& m : stored) {
            if (!prefix && m.content_repaired)
                notices_.push_back("the system message had invalid UTF-8; it was replaced by U+FFFD");
            e.conversation->append(m.role, m.content);
        }
        e.conversation->set_cache(std::move(cache));
        e.loaded = true;
        e.cache_ready = true;
        e.dirty = prefix.has_value();
        if (prefix) e.prefix_tokens = static_cast<int64_t>(prefix->tokens.size());
    }
    entries_.push_front(std::move(e));
    return *entries_.front().conversation;
}

void ChatSession::make_ready(Entry& e, const ConversationRecord& row, const Progress& progress) {
    constexpr std::string_view kTask = "Loading cache";
    if (e.cache_ready) return;
    const ConversationRecord* rec = &row;
    if (!rec->snapshot.empty()) {
        // The snapshot is read in one piece on another thread: the step can be cancelled before
        // it starts, and its end is reported when the turn takes the cache.
        progress.tell(kTask, 0, 1);
        progress.check(kTask);
    }
    e.cache_ready = true;
    if (rec->model_fingerprint != model().fingerprint()) store_.set_conversation_model(e.id, model().fingerprint());
    if (rec->snapshot.empty()) return;
    // The snapshot is read on another thread while the turn renders the transcript; the
    // conversation waits for it where the turn first needs its cache.
    e.conversation->set_cache_loading(std::async(
        std::launch::async, [path = store_.snapshot_path(rec->snapshot), title = e.title,
                             has_messages = !e.conversation->messages().empty(),
                             spec = e.conversation->cache_spec(), target = e.conversation->spec(), &model = model(),
                             &backend = backend()] {
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

std::string ChatSession::lock_path(const Entry& e) const { return lock_path(e.id, e.title); }

std::string ChatSession::lock_path(int64_t id, const std::string& title) const {
    const std::filesystem::path file = lock_file_for(store_, id);
    if (::mkdir(file.parent_path().c_str(), 0700) != 0 && errno != EEXIST)
        throw Error("cannot lock conversation " + in_quotes(title) + ": cannot create " +
                    in_quotes(file.parent_path().string()) + ": " + std::strerror(errno));
    return file.string();
}

bool ChatSession::transcript_is_stored(const Entry& e) const {
    return transcript_is(e, store_.list_messages(e.id));
}

bool ChatSession::transcript_is(const Entry& e, const std::vector<MessageRecord>& stored) const {
    const std::vector<ChatMessage>& have = e.conversation->messages();
    if (stored.size() != have.size()) return false;
    for (size_t i = 0; i < have.size(); ++i) {
        if (stored[i].role != have[i].role || stored[i].content != have[i].content) return false;
        // An answer regenerated elsewhere may have the same text and other ids (an empty one, or
        // pieces that decode to nothing): they render differently (kvchat_soak seed 1005 step 214).
        if (have[i].role == Role::Assistant &&
            chat_template().answer_ids_from_file(stored[i].stats.token_ids) != chat_template().answer_ids_from_file(have[i].tokens))
            return false;
    }
    return true;
}

ConversationRecord ChatSession::lock_and_sync(Entry& e, std::vector<std::string>& notices,
                                              std::vector<MessageRecord>& stored) {
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
        stored = store_.list_messages(e.id);
        if (e.loaded && transcript_is(e, stored)) return *rec;
        // Another process answered or edited meanwhile (or the conversation was just opened): the
        // stored messages come first (answers with the ids they were generated as, so they render
        // as that process rendered them). The cache keeps the longest prefix of tokens that still
        // matches (the next turn aligns it).
        Conversation& c = *e.conversation;
        c.truncate(0);
        for (const MessageRecord& m : stored) adopt(c, m);
        if (e.loaded)
            notices.push_back("conversation " + in_quotes(e.title) +
                              " was changed by another kvchat process; its messages were read again");
        e.loaded = true;
        return *rec;
    } catch (...) {
        e.lock.reset();
        throw;
    }
}

void ChatSession::save_snapshot(Entry& e, std::vector<std::string>& notices, bool known_stored) {
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
    if (!known_stored && !transcript_is_stored(e)) {
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
        save_cache_snapshot(e.conversation->cache(), std::span(all).last(keep), model(), store_.snapshot_path(name));
    } catch (const Error& err) {
        notices.push_back("the cache of conversation " + in_quotes(e.title) + " was not saved (" + err.what() +
                          "); the next session prefills it again");
        return;
    }
    store_.remove_snapshot_file(store_.set_conversation_snapshot(e.id, name));
    keep_snapshots_in_budget(store_, {StoredCache::Owner::Conversation, e.id}, notices);
    e.dirty = false;
}

void ChatSession::save_all(std::vector<std::string>& notices) {
    for (Entry& e : entries_)
        if (e.dirty) save_snapshot(e, notices);
}

void ChatSession::enforce_budget(const Entry* keep) {
    while (resident() > max_resident_) {
        Entry* victim = nullptr;
        for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
            if (&*it != keep && it->conversation->has_cache()) {
                victim = &*it;
                break;
            }
        if (!victim) return;
        if (victim->dirty) save_snapshot(*victim, notices_);
        victim->conversation->release_cache();
        victim->cache_ready = false;
    }
}

void ChatSession::adopt(Conversation& c, const MessageRecord& m) const {
    c.append(m.role, m.content, chat_template().answer_ids_from_file(m.stats.token_ids));
    // Time to first token over the tokens computed: a prefill's speed, slightly low.
    if (m.stats.ttft_ms) c.note_prefill_speed(m.stats.computed_tokens, *m.stats.ttft_ms);
}

ChatSession::Entry& ChatSession::prepare(int64_t id, std::vector<std::string>& notices, const Progress& progress,
                                         std::vector<MessageRecord>* stored, ConversationRecord* row) {
    Entry& e = entry(id);
    notices = take_notices();
    std::vector<MessageRecord> read;
    const ConversationRecord r = lock_and_sync(e, notices, stored ? *stored : read);
    if (row) *row = r;
    try {
        make_ready(e, r, progress);
    } catch (...) {
        e.lock.reset();
        throw;
    }
    return e;
}

// ---- by id ----

int64_t ChatSession::create(std::string_view title_in, const OpenOptions& options, const Progress& progress) {
    std::string base = repair_utf8(title_in).text;
    if (base.empty()) base = "Chat";
    open(unique_title(base), options, progress);
    return entries_.front().id;
}

ConversationSummary ChatSession::summary_of(const ConversationOverview& o) const {
    ConversationSummary s;
    s.id = o.conversation.id;
    s.title = o.conversation.title;
    s.updated_ms = o.conversation.updated_ms;
    s.message_count = o.message_count;
    s.tokens = o.tokens;
    s.cache_spec = o.conversation.cache_spec;
    s.last_unanswered = o.last_unanswered;
    s.cache_saved = !o.conversation.snapshot.empty();
    s.origin = o.conversation.origin;
    s.parent_id = o.conversation.parent_id;
    s.branch_at = o.conversation.branch_at;
    if (const Entry* e = find_entry(s.id)) {
        s.cache_resident = e->conversation->has_cache();
        s.cache_spec = e->conversation->cache_spec();
    }
    return s;
}

std::vector<ConversationSummary> ChatSession::list() const {
    std::vector<ConversationSummary> out;
    for (const ConversationOverview& o : store_.list_conversation_overviews()) out.push_back(summary_of(o));
    return out;
}

std::vector<ConversationSummary> ChatSession::search(std::string_view query) const {
    std::vector<ConversationSummary> out;
    for (const ConversationOverview& o : store_.search_conversations(query)) out.push_back(summary_of(o));
    return out;
}

std::vector<MessageRecord> ChatSession::messages(int64_t id) const {
    if (!store_.find_conversation_by_id(id)) throw Error("no conversation with id " + std::to_string(id));
    return store_.list_messages(id);
}

std::string ChatSession::unique_title(const std::string& base) const {
    std::string title = base;
    for (int n = 2; store_.find_conversation(title); ++n) title = base + " " + std::to_string(n);
    return title;
}

bool ChatSession::is_default_title(std::string_view title) {
    return title == "Chat" || title.starts_with("Chat ");
}

std::string title_from_message(std::string_view text) {
    constexpr size_t kMaxChars = 48, kMinCut = 24;
    const std::string trimmed = trim_white_space(text);
    std::string line = simplify_white_space(std::string_view(trimmed).substr(0, trimmed.find('\n')));
    // Cut after kMaxChars characters (never inside one), then back to a word when one ends late enough.
    size_t chars = 0, cut = 0;
    for (size_t i = 0; i < line.size(); ++i)
        if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80 && chars++ == kMaxChars) {
            cut = i;
            break;
        }
    if (cut == 0) return line;
    line.resize(cut);
    const size_t space = line.rfind(' ');
    if (space != std::string::npos && space > kMinCut) line.resize(space);
    return line + "\u2026";
}

std::optional<ConversationSummary> ChatSession::summary(int64_t id) const {
    // (The list's own query: a summary reads as the list shows it.)
    for (const ConversationOverview& o : store_.list_conversation_overviews())
        if (o.conversation.id == id) return summary_of(o);
    return std::nullopt;
}

std::optional<int64_t> ChatSession::snapshot_bytes(int64_t id) const {
    const auto rec = store_.find_conversation_by_id(id);
    if (!rec || rec->snapshot.empty()) return std::nullopt;
    std::error_code ec;
    const auto size = std::filesystem::file_size(store_.snapshot_path(rec->snapshot), ec);
    if (ec) return std::nullopt;
    return static_cast<int64_t>(size);
}

void ChatSession::rename(int64_t id, std::string_view title_in) {
    const std::string title = trim_white_space(title_in);
    if (title.empty()) throw Error("a conversation needs a name");
    if (auto other = store_.find_conversation(title); other && other->id != id)
        throw Error("a conversation named \u201c" + title + "\u201d already exists");
    store_.rename_conversation(id, title);
    for (Entry& e : entries_)
        if (e.id == id) e.title = store_.find_conversation_by_id(id)->title;
}

void ChatSession::remove(int64_t id) {
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

void ChatSession::close(int64_t id) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->id == id) {
            if (it->dirty) save_snapshot(*it, notices_);
            entries_.erase(it);
            return;
        }
}

// ---- prefixes by id ----

std::vector<PrefixSummary> ChatSession::prefix_list() const {
    std::vector<PrefixSummary> out;
    for (const PrefixRecord& p : store_.list_prefixes()) {
        PrefixSummary s;
        s.id = p.id;
        s.name = p.name;
        s.text = p.text;
        s.message_count = static_cast<int64_t>(p.messages.size());
        s.tokens = static_cast<int64_t>(p.tokens.size());
        if (!p.snapshot.empty()) {
            std::error_code ec;
            const auto size = std::filesystem::file_size(store_.snapshot_path(p.snapshot), ec);
            if (!ec) s.snapshot_bytes = static_cast<int64_t>(size);
        }
        s.last_used_ms = p.last_used_ms;
        s.use_count = p.use_count;
        s.cache_spec = p.cache_spec;
        out.push_back(std::move(s));
    }
    return out;
}

PrefixRecord ChatSession::prefix(int64_t id) const {
    auto p = store_.find_prefix_by_id(id);
    if (!p) throw Error("the prefix was deleted");
    return *p;
}

PrefixRecord ChatSession::save_prefix_from(std::string_view name, int64_t conversation_id, int64_t count,
                                           std::vector<std::string>& notices, const Progress& progress) {
    const std::vector<MessageRecord> all = messages(conversation_id);
    if (count < 1 || static_cast<size_t>(count) > all.size())
        throw Error("the conversation has " + std::to_string(all.size()) + " messages; " + std::to_string(count) +
                    " were asked for");
    std::vector<ChatMessage> opening;
    for (size_t i = 0; i < static_cast<size_t>(count); ++i) opening.push_back({all[i].role, all[i].content});
    return prefixes().save_messages(name, opening, "", notices, progress);
}

PrefixRecord ChatSession::edit_prefix(int64_t id, std::string_view text, std::vector<std::string>& notices,
                                      const Progress& progress) {
    return prefixes().edit(prefix(id).name, text, notices, progress);
}

void ChatSession::rename_prefix(int64_t id, std::string_view name_in) {
    const std::string name = trim_white_space(name_in);
    if (name.empty()) throw Error("a prefix needs a name");
    if (auto other = store_.find_prefix(name); other && other->id != id)
        throw Error("a prefix named \u201c" + name + "\u201d already exists");
    store_.rename_prefix(id, name);
}

void ChatSession::remove_prefix(int64_t id) { store_.remove_snapshot_file(store_.delete_prefix(id)); }

std::optional<CacheTelemetry> ChatSession::telemetry(int64_t id) const {
    const Entry* e = find_entry(id);
    if (!e) return std::nullopt;
    const Cache* c = e->conversation->resident_cache();
    if (!c) return std::nullopt;
    return c->telemetry();
}

// ---- a conversation's own settings ----

ConversationSettings ChatSession::conversation_settings(int64_t id) const { return store_.conversation_settings(id); }

void ChatSession::set_conversation_settings(int64_t id, const ConversationSettings& settings) {
    validate_conversation_settings(settings, model_ ? model_->config().n_ctx_train : 0);
    store_.set_conversation_settings(id, settings);
}

bool ChatSession::set_system_prompt(int64_t id, std::string_view text) {
    Entry& e = entry(id);
    std::vector<std::string> notices;
    std::vector<MessageRecord> stored;
    lock_and_sync(e, notices, stored);
    const Unlock unlock{e};
    notices_.insert(notices_.end(), notices.begin(), notices.end());
    if (!store_.set_system_message(e.id, text)) return false;
    // The transcript in memory follows the store; the cache is matched against it by the next turn.
    Conversation& c = *e.conversation;
    c.truncate(0);
    for (const MessageRecord& m : store_.list_messages(e.id)) adopt(c, m);
    return true;
}

// ---- the batch prefill speed ----

const std::optional<PrefillSpeed>& ChatSession::kept_batch_speed() {
    if (!batch_speed_read_ && model_) {
        batch_speed_ = load_prefill_speed(store_, prefill_speed_key(*model_, *backend_));
        batch_speed_read_ = true;
    }
    return batch_speed_;
}

void ChatSession::note_batch_speed(const PrefillSpeed& measured) {
    if (!model_ || !measured.usable()) return;
    const auto& kept = kept_batch_speed();
    if (kept && kept->tokens >= measured.tokens) return;
    batch_speed_ = measured;
    try {
        save_prefill_speed(store_, prefill_speed_key(*model_, *backend_), measured);
    } catch (const Error&) {
        // Only a figure: this session still uses it; a later one measures again.
    }
}

PrefillSpeed ChatSession::batch_prefill_speed() {
    if (!model_) throw Error("no model is loaded: the prefill speed cannot be measured");
    if (const auto& kept = kept_batch_speed()) return *kept;
    note_batch_speed(measure_prefill_speed(*model_, *backend_));
    if (batch_speed_) return *batch_speed_;
    throw Error("the prefill speed could not be measured");
}

void ChatSession::set_max_resident(size_t n) {
    max_resident_ = n == 0 ? 1 : n;
    enforce_budget(nullptr);
}

std::vector<StoredCache> ChatSession::stored_caches() const { return kvchat::stored_caches(store_); }

bool ChatSession::drop_cache(StoredCache::Owner owner, int64_t id) { return drop_snapshot(store_, {owner, id}); }

ChatSession::SnapshotBudget ChatSession::snapshot_budget() const {
    return {kvchat::snapshot_budget(store_), !store_.setting(kSnapshotBudgetSetting).has_value()};
}

std::vector<StoredCache> ChatSession::set_snapshot_budget(std::optional<int64_t> bytes) {
    if (bytes)
        kvchat::set_snapshot_budget(store_, *bytes);
    else
        store_.remove_setting(kSnapshotBudgetSetting);
    return prune_snapshots(store_, kvchat::snapshot_budget(store_));
}

ChatSettings ChatSession::settings() const { return ChatSettings::load(store_); }

void ChatSession::save_settings(const ChatSettings& settings) { settings.save(store_); }

}  // namespace kvchat
