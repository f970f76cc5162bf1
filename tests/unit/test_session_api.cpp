// The session API a window drives, on a tiny model: conversations by id (create, list, search,
// rename, close, remove), per-step telemetry, the figures each answer keeps, the chat settings,
// strategy switching, and progress with cancel for the long steps.
#include "engine/chat/chat_settings.h"
#include "engine/chat/conversation_cache.h"
#include "engine/chat/chat_session.h"
#include "engine/chat/prefix_library.h"
#include "engine/chat/snapshot_storage.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/load_model.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <tuple>
#include <filesystem>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

std::unique_ptr<Model> tiny_model(const QTemporaryDir& dir) { return test::chat_model(dir); }


std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& f : std::filesystem::directory_iterator(dir)) out.push_back(f.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

const ConversationSummary* find(const std::vector<ConversationSummary>& list, int64_t id) {
    for (const ConversationSummary& s : list)
        if (s.id == id) return &s;
    return nullptr;
}

// A Progress that records every report and sets its cancel flag at the first report of `task`
// (empty: any task).
struct CancelAt {
    explicit CancelAt(std::string t) : task(std::move(t)) {}
    std::string task;
    std::atomic<bool> flag{false};
    std::vector<std::tuple<std::string, int64_t, int64_t>> reports;
    Progress progress() {
        Progress p;
        p.cancel = &flag;
        p.report = [this](std::string_view t, int64_t done, int64_t total) {
            reports.emplace_back(std::string(t), done, total);
            if (task.empty() || t == task) flag = true;
        };
        return p;
    }
};

// Text of more than one prefill chunk (512 tokens) on the tiny model.
std::string long_text() {
    std::string s;
    for (int i = 0; i < 40; ++i) s += "the cat sat on the mat " + std::to_string(i) + ". ";
    return s;
}

// What must come back unchanged after a cancelled step.
struct StoredMessage {
    Role role;
    std::string content;
    int64_t prompt_tokens;
    bool operator==(const StoredMessage&) const = default;
};
std::vector<StoredMessage> stored(const ChatSession& reg, int64_t id) {
    std::vector<StoredMessage> out;
    for (const MessageRecord& m : reg.messages(id)) out.push_back({m.role, m.content, m.stats.prompt_tokens});
    return out;
}

// A user message the tiny model's tokenizer turns into well over Conversation::kBatchTokens.
std::string long_message() {
    std::string text;
    for (int i = 0; i < 12; ++i) text += "the cat sat on the mat ";
    return text;
}

struct Setup {
    QTemporaryDir dir;
    std::unique_ptr<Model> m = tiny_model(dir);
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    std::string db = (dir.path() + "/kv.db").toStdString();
};

}  // namespace

class TestSessionApi : public QObject {
    Q_OBJECT
private slots:
    // A turn refused because the conversation no longer fits its static cache (the cache read
    // from its snapshot, as after a restart) leaves the conversation as it was, through the API
    // the window uses: no unanswered message, and the refusal says so.
    void refusedTurnLeavesTheConversation() {
        Setup s;
        const std::string message = "the cat sat on the mat and looked at the dog for a while.";
        int64_t id = 0;
        std::vector<StoredMessage> before;
        std::string refusal;
        for (int i = 0; i < 20 && refusal.empty(); ++i) {
            // A new store and registry for every turn: the cache comes back from its snapshot.
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            if (id == 0) {
                OpenOptions o;
                o.cache_spec = "static:max_len=256";
                id = reg.create("small", o);
            }
            before = stored(reg, id);
            refusal = error_of([&] { reg.send(id, message, greedy(12)); });
            if (!refusal.empty()) {
                QCOMPARE(stored(reg, id), before);
                const std::vector<ConversationSummary> list = reg.list();
                const ConversationSummary* sum = find(list, id);
                QVERIFY(sum && !sum->last_unanswered);
            }
        }
        QVERIFY2(contains(refusal, "context holds") && contains(refusal, "left as it was"), refusal.c_str());
        QVERIFY(before.size() >= 2);
        // The next message is refused for the same reason, not as one a crash left unanswered.
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const std::string again = error_of([&] { reg.send(id, "short", greedy(12)); });
        QVERIFY2(!contains(again, "has no answer"), again.c_str());
        QCOMPARE(stored(reg, id), before);
    }

    // Unicode white space alone is a blank message, as ASCII white space is: refused, nothing stored.
    void unicodeBlankMessagesAreRefused() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("blank");
        for (const char* blank : {"\u00a0\u3000\u2003", "\u2028\u205f\u1680\u0085", " \t\n", "\u202f\u2009"}) {
            const std::string e = error_of([&] { reg.send(id, blank, greedy(4)); });
            QVERIFY2(contains(e, "empty"), blank);
        }
        QVERIFY(reg.messages(id).empty());
        // Text next to the white space is a message.
        QVERIFY(error_of([&] { reg.send(id, "\u00a0cat\u3000", greedy(2)); }).empty());
        QCOMPARE(reg.messages(id).size(), size_t(2));
    }

    // Snapshots are named after the database, so two databases in one folder keep their caches
    // apart; a snapshot saved under an earlier version's shared name still serves its conversation,
    // and is replaced by the new name at the next save (while no other database shares the folder).
    void snapshotsKeyedByDatabase() {
        Setup s;
        const std::string other = (s.dir.path() + "/other.db").toStdString();
        int64_t id = 0;
        std::string legacy;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            id = reg.create("one");
            reg.send(id, "the cat sat on the mat and the dog sat on the log.", greedy(8));
            const std::string name = store.find_conversation_by_id(id)->snapshot;
            QCOMPARE(name, store.conversation_snapshot_name(id));
            QVERIFY(contains(name, "kv.db"));
            QVERIFY(store.conversation_lock_path(id).find("kv.db") != std::string::npos);
            // What an earlier version left: the same file under the shared name.
            legacy = Store::legacy_conversation_snapshot_name(id);
            std::filesystem::rename(store.snapshot_path(name), store.snapshot_path(legacy));
            store.set_conversation_snapshot(id, legacy);
        }
        const std::string snapshots = (s.dir.path() + "/snapshots/").toStdString();
        {
            Store store(s.db);
            QVERIFY(std::filesystem::exists(snapshots + legacy));  // not swept: its row names it
            ChatSession reg(store, *s.m, *s.be);
            const TurnResult r = reg.send(id, "and then?", greedy(4));
            QVERIFY2(r.figures.cached_tokens > 20, std::to_string(r.figures.cached_tokens).c_str());
            QCOMPARE(store.find_conversation_by_id(id)->snapshot, store.conversation_snapshot_name(id));
            QVERIFY(!std::filesystem::exists(snapshots + legacy));
        }
        // With another database in the folder a shared name may be that one's: it is left in place.
        {
            Store o(other);
            const int64_t oid = o.create_conversation("theirs", "fp", "dynamic").id;
            QCOMPARE(oid, id);
        }
        {
            Store store(s.db);
            const std::string name = store.find_conversation_by_id(id)->snapshot;
            std::filesystem::copy_file(store.snapshot_path(name), store.snapshot_path(legacy));
            store.set_conversation_snapshot(id, legacy);
            std::filesystem::remove(store.snapshot_path(name));
        }
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            const TurnResult r = reg.send(id, "and after that?", greedy(4));
            QVERIFY(r.figures.cached_tokens > 20);
            QVERIFY(std::filesystem::exists(snapshots + legacy));
            QVERIFY(std::filesystem::exists(store.snapshot_path(store.conversation_snapshot_name(id))));
        }
        // Each database writes its own names.
        QCOMPARE(Store(other).conversation_snapshot_name(id), Store::file_key("other.db") + "." + legacy);
    }

    // Saved caches stay within the disk budget: a save that would pass it removes the least
    // recently used conversations' snapshots first (their messages stay, the list says which
    // have a saved cache, and a reopened one is computed again and answers the same), a cache
    // larger than the whole budget is not kept, and the turn never fails for it.
    void snapshotBudget() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        set_snapshot_budget(store, 1'000'000'000);
        std::vector<int64_t> ids;
        std::vector<std::string> replies;
        for (int i = 0; i < 4; ++i) {
            ids.push_back(reg.create("c" + std::to_string(i)));
            replies.push_back(reg.send(ids.back(), "the cat sat on the mat " + std::to_string(i), greedy(6)).text);
            reg.close(ids.back());
        }
        auto caches = stored_caches(store);
        QCOMPARE(caches.size(), size_t(4));
        for (const StoredCache& c : caches) {
            QVERIFY(c.bytes > 0);
            QVERIFY(c.tokens > 0);
        }
        QCOMPARE(caches.front().id, ids[0]);  // least recently used first
        const int64_t one = caches.front().bytes;
        QVERIFY(reg.take_notices().empty());
        // Room for about three: a turn in c1 (used again: now the most recent) makes c0 and c2
        // give way, the oldest first.
        set_snapshot_budget(store, 3 * one + one / 2);
        const TurnResult dog = reg.send(ids[1], "and the dog", greedy(6));
        caches = stored_caches(store);
        QVERIFY(total_snapshot_bytes(caches) <= 3 * one + one / 2);
        auto saved = [&](int64_t id) { return !store.find_conversation_by_id(id)->snapshot.empty(); };
        QVERIFY(!saved(ids[0]));
        QVERIFY(saved(ids[1]) && saved(ids[3]));
        QCOMPARE(std::count_if(caches.begin(), caches.end(), [](const StoredCache& c) { return c.bytes > 0; }), 2);
        QVERIFY(!saved(ids[2]));
        QVERIFY(std::any_of(dog.notices.begin(), dog.notices.end(),
                            [](const std::string& n) { return contains(n, "least recently used"); }));
        QVERIFY(!find(reg.list(), ids[0])->cache_saved);
        QVERIFY(find(reg.list(), ids[1])->cache_saved);
        QCOMPARE(files_in(store.snapshot_dir()).size(), size_t(2));
        // c0 keeps its messages; regenerating its answer computes the cache again, same answer.
        QCOMPARE(reg.messages(ids[0]).size(), size_t(2));
        QCOMPARE(reg.regenerate(ids[0], greedy(6)).text, replies[0]);
        QVERIFY(saved(ids[0]));
        // A budget smaller than one cache: the turn is answered, its cache is not kept.
        set_snapshot_budget(store, one / 2);
        const TurnResult r = reg.send(ids[3], "and the bird", greedy(4));
        QVERIFY(!r.text.empty());
        QVERIFY(!saved(ids[3]));
        QCOMPARE(total_snapshot_bytes(stored_caches(store)), int64_t(0));
        QVERIFY(files_in(store.snapshot_dir()).empty());
        QVERIFY(std::any_of(r.notices.begin(), r.notices.end(),
                            [](const std::string& n) { return contains(n, "larger than the budget"); }));
        QCOMPARE(reg.messages(ids[3]).size(), size_t(4));
        // Prefixes count too, and drop_snapshot forgets one at once.
        set_snapshot_budget(store, 1'000'000'000);
        PrefixLibrary lib(store, *s.m, *s.be, reg.chat_template());
        std::vector<std::string> lib_notices;
        const PrefixRecord p = lib.save("sys", "You are a cat.", "dynamic", lib_notices);
        QVERIFY(!store.find_prefix_by_id(p.id)->snapshot.empty());
        caches = stored_caches(store);
        QVERIFY(std::any_of(caches.begin(), caches.end(), [&](const StoredCache& c) {
            return c.owner == StoredCache::Owner::Prefix && c.id == p.id && c.bytes > 0;
        }));
        QVERIFY(drop_snapshot(store, {StoredCache::Owner::Prefix, p.id}));
        QVERIFY(store.find_prefix_by_id(p.id)->snapshot.empty());
        QVERIFY(!drop_snapshot(store, {StoredCache::Owner::Prefix, p.id}));
        // A conversation being changed (its lock held, as by another process) is not pruned.
        const int64_t held = ids[0];
        reg.send(ids[0], "again", greedy(2));
        reg.send(ids[2], "again", greedy(2));
        QVERIFY(saved(ids[0]) && saved(ids[2]));
        {
            ConversationLock lock(store.conversation_lock_path(held), "c0");
            const auto dropped = prune_snapshots(store, 0);
            QCOMPARE(dropped.size(), size_t(1));
            QCOMPARE(dropped[0].id, ids[2]);
            QVERIFY(saved(held));
        }
        QCOMPARE(prune_snapshots(store, 0).size(), size_t(1));
        QVERIFY(!saved(held));
        // The setting: a negative budget is refused; default without it.
        QVERIFY(contains(error_of([&] { set_snapshot_budget(store, -1); }), "0 or more"));
        store.remove_setting(kSnapshotBudgetSetting);
        QVERIFY(snapshot_budget(store) > 0 && snapshot_budget(store) <= kDefaultSnapshotBudget);
    }

    void lifecycleById() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t a = reg.create("");
        const int64_t b = reg.create("");
        const int64_t c = reg.create("Chat");
        QVERIFY(a != b && b != c);
        QCOMPARE(store.find_conversation_by_id(a)->title, std::string("Chat"));
        QCOMPARE(store.find_conversation_by_id(b)->title, std::string("Chat 2"));
        QCOMPARE(store.find_conversation_by_id(c)->title, std::string("Chat 3"));

        const TurnResult r = reg.send(b, "the cat sat", greedy(6));
        QVERIFY(!r.figures.token_ids.empty());
        // Most recent first; b answered, with its message count and tokens.
        auto list = reg.list();
        QCOMPARE(list.size(), size_t(3));
        QCOMPARE(list[0].id, b);
        QCOMPARE(list[0].title, std::string("Chat 2"));
        QCOMPARE(list[0].message_count, int64_t(2));
        QCOMPARE(list[0].tokens, r.figures.prompt_tokens + static_cast<int64_t>(r.figures.token_ids.size()));
        QVERIFY(list[0].cache_resident);
        QVERIFY(!list[0].last_unanswered);
        QCOMPARE(list[0].cache_spec, std::string("dynamic"));
        QCOMPARE(find(list, a)->message_count, int64_t(0));
        QCOMPARE(find(list, a)->tokens, int64_t(0));

        const auto msgs = reg.messages(b);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[0].content, std::string("the cat sat"));
        QCOMPARE(msgs[1].content, r.text);

        reg.rename(b, "Cats");
        QCOMPARE(store.find_conversation_by_id(b)->title, std::string("Cats"));
        QVERIFY(contains(error_of([&] { reg.rename(a, "Cats"); }), "already exists"));

        // A twin that stays open, for what a reopened cache must match.
        const int64_t twin = reg.create("twin");
        QCOMPARE(reg.send(twin, "the cat sat", greedy(6)).text, r.text);

        // Close: the snapshot is on disk, the cache no longer in memory.
        reg.close(b);
        QVERIFY(!find(reg.list(), b)->cache_resident);
        QVERIFY(!reg.telemetry(b).has_value());
        const std::string snapshot = store.find_conversation_by_id(b)->snapshot;
        QVERIFY(!snapshot.empty());
        QVERIFY(std::filesystem::exists(store.snapshot_path(snapshot)));
        // The next turn reopens it from the snapshot and reuses what the open twin reuses.
        const TurnResult again = reg.send(b, "on the mat", greedy(6));
        const TurnResult twin_again = reg.send(twin, "on the mat", greedy(6));
        QVERIFY(again.figures.cached_tokens > 0);
        QCOMPARE(again.figures.cached_tokens, twin_again.figures.cached_tokens);
        QCOMPARE(again.text, twin_again.text);
        QVERIFY(find(reg.list(), b)->cache_resident);

        // Remove: rows and snapshot file together; the id is gone everywhere.
        reg.remove(b);
        QVERIFY(!store.find_conversation_by_id(b).has_value());
        QVERIFY(!std::filesystem::exists(store.snapshot_path(snapshot)));
        QVERIFY(find(reg.list(), b) == nullptr);
        QVERIFY(contains(error_of([&] { reg.messages(b); }), "no conversation with id"));
        QVERIFY(contains(error_of([&] { reg.send(b, "hello", greedy(2)); }), "no conversation with id"));
        QVERIFY(!reg.telemetry(b).has_value());
        QCOMPARE(reg.list().size(), size_t(3));
    }

    void searchByTitleAndText() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t garden = reg.create("Garden notes");
        const int64_t other = reg.create("Other");
        reg.send(other, "tomatoes want sun", greedy(2));
        auto ids = [&](std::string_view q) {
            std::vector<int64_t> out;
            for (const ConversationSummary& c : reg.search(q)) out.push_back(c.id);
            return out;
        };
        QCOMPARE(ids("garden"), std::vector<int64_t>{garden});
        QCOMPARE(ids("tomato"), std::vector<int64_t>{other});
        QCOMPARE(ids("nowhere"), std::vector<int64_t>{});
        reg.remove(other);
        QCOMPARE(ids("tomato"), std::vector<int64_t>{});
    }

    // Telemetry looks, never loads or creates: nothing for a closed or unknown conversation, and
    // looking does not make a cache or a file.
    void telemetryHasNoSideEffects() {
        Setup s;
        int64_t id = 0;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            id = reg.create("t");
            const TurnResult r = reg.send(id, "the cat", greedy(4));
            const auto t = reg.telemetry(id);
            QVERIFY(t.has_value());
            QVERIFY(t->tokens >= r.figures.prompt_tokens);
            QVERIFY(t->total_bytes > 0);
        }
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const auto files_before = files_in(store.snapshot_dir());
        QVERIFY(!reg.telemetry(id).has_value());
        QVERIFY(!reg.telemetry(id + 100).has_value());
        QCOMPARE(reg.resident(), size_t(0));
        QVERIFY(!find(reg.list(), id)->cache_resident);
        QCOMPARE(files_in(store.snapshot_dir()), files_before);
        // A conversation created but never used has no file either.
        const int64_t fresh = reg.create("fresh");
        reg.close(fresh);
        QVERIFY(!reg.telemetry(fresh).has_value());
        QCOMPARE(files_in(store.snapshot_dir()), files_before);
    }

    // on_step comes once per decode step, with the cache one token longer each time.
    void onStepOncePerDecodeStep() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("steps");
        TurnOptions o = greedy(10);
        o.generation.stop_at_eos = false;
        std::vector<int64_t> lengths;
        TurnCallbacks cb;
        cb.on_step = [&](const CacheTelemetry& t) { lengths.push_back(t.tokens); };
        const TurnResult r = reg.send(id, "the cat sat on", o, cb);
        // The generator computes every sampled token into the cache except the last one (the
        // answer ends there) and a stop token (never kept).
        const bool stopped_by_token =
            r.figures.stop_reason == StopReason::EndOfSequence || r.figures.stop_reason == StopReason::EndOfTurn;
        QCOMPARE(static_cast<int64_t>(lengths.size()),
                 static_cast<int64_t>(r.figures.token_ids.size()) - (stopped_by_token ? 0 : 1));
        QVERIFY(lengths.size() >= 2);
        for (size_t k = 0; k < lengths.size(); ++k)
            QCOMPARE(lengths[k], r.figures.prompt_tokens + static_cast<int64_t>(k) + 1);
    }

    // Each answer keeps its figures: reused and computed prompt tokens, those of a prefix, and
    // the prefill time the reuse saved; they are still there after reopening the store.
    void answerFiguresStoredAndKept() {
        Setup s;
        int64_t id = 0, from_prefix = 0;
        TurnResult second, first_of_prefix;
        size_t prefix_tokens = 0;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            id = reg.create("figures");
            const TurnResult first = reg.send(id, long_message(), greedy(6));
            QCOMPARE(first.figures.cached_tokens, int64_t(0));
            QVERIFY(first.figures.computed_tokens >= Conversation::kBatchTokens);
            QVERIFY(!first.figures.prefill_saved_ms.has_value() || *first.figures.prefill_saved_ms == 0.0);
            second = reg.send(id, "a cat", greedy(6));
            QVERIFY(second.figures.cached_tokens > 0);
            QVERIFY(second.figures.computed_tokens < Conversation::kBatchTokens);
            QCOMPARE(second.figures.cached_tokens + second.figures.computed_tokens, second.figures.prompt_tokens);
            // The saving is priced at the first turn's batch speed, not at the few tokens' own.
            QVERIFY(second.figures.prefill_saved_ms.has_value());
            QVERIFY(qFuzzyCompare(
                *second.figures.prefill_saved_ms,
                second.figures.cached_tokens * first.prefill_ms / static_cast<double>(first.figures.computed_tokens)));
            QCOMPARE(second.figures.prefix_tokens, int64_t(0));

            std::vector<std::string> notices;
            const PrefixRecord p = reg.prefixes().save("cats", "the cat sat on the mat; a cat sat on a mat", "", notices);
            prefix_tokens = p.tokens.size();
            OpenOptions open;
            open.prefix = "cats";
            from_prefix = reg.create("from prefix", open);
            first_of_prefix = reg.send(from_prefix, "the mat", greedy(4));
            QCOMPARE(first_of_prefix.figures.prefix_tokens, static_cast<int64_t>(prefix_tokens));
            QVERIFY(first_of_prefix.figures.cached_tokens >= first_of_prefix.figures.prefix_tokens);
        }
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const auto msgs = reg.messages(id);
        QCOMPARE(msgs.size(), size_t(4));
        {
            // Reopened, the speed comes from the stored figures of the largest prefill (the first
            // answer's time to first token over its computed tokens).
            const AnswerFigures& big = msgs[1].stats;
            QVERIFY(big.ttft_ms.has_value());
            const TurnResult third = reg.send(id, "one more", greedy(4));
            QVERIFY(third.figures.computed_tokens < Conversation::kBatchTokens);
            QVERIFY(third.figures.prefill_saved_ms.has_value());
            QVERIFY(qFuzzyCompare(*third.figures.prefill_saved_ms, third.figures.cached_tokens * *big.ttft_ms /
                                                                       static_cast<double>(big.computed_tokens)));
        }
        const AnswerFigures& st = msgs[3].stats;
        QCOMPARE(st.cached_tokens, second.figures.cached_tokens);
        QCOMPARE(st.computed_tokens, second.figures.computed_tokens);
        QCOMPARE(st.prompt_tokens, second.figures.prompt_tokens);
        QCOMPARE(st.prefix_tokens, int64_t(0));
        QCOMPARE(st.prefill_saved_ms, second.figures.prefill_saved_ms);
        QCOMPARE(st.ttft_ms, second.figures.ttft_ms);
        const auto pm = reg.messages(from_prefix);
        QCOMPARE(pm.back().role, Role::Assistant);
        QCOMPARE(pm.back().stats.prefix_tokens, static_cast<int64_t>(prefix_tokens));
        QCOMPARE(pm.back().stats.cached_tokens, first_of_prefix.figures.cached_tokens);
    }

    // After a restart, an answer whose text tokenizes otherwise than the model wrote it is still
    // rendered as written (its ids are stored with it), so the snapshot's cache is reused whole.
    void answerIdsReusedAfterRestart() {
        Setup s;
        const ChatTemplate tmpl = ChatTemplate::for_model(*s.m);
        const char* openings[] = {"the cat", "a mat", "the mat sat", "cat", "on the", "sat on a cat", "the the", "a"};
        bool found = false;
        for (const char* opening : openings) {
            int64_t id = 0, closed = 0;
            {
                Store store(s.db);
                ChatSession reg(store, *s.m, *s.be);
                id = reg.create(opening);
                const TurnResult first = reg.send(id, opening, greedy(24));
                if (first.text.empty() || s.m->tokenizer().encode(first.text, false) == first.figures.token_ids)
                    continue;
                std::vector<ChatMessage> msgs;
                for (const MessageRecord& m : reg.messages(id)) msgs.emplace_back(m.role, m.content);
                msgs.back().tokens = tmpl.answer_ids_from_file(first.figures.token_ids);
                if (msgs.back().tokens.empty()) continue;  // the answer holds a control id: not kept across restarts
                closed = static_cast<int64_t>(tmpl.render(msgs, false).tokens.size());
            }
            found = true;
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            const TurnResult second = reg.send(id, "the mat", greedy(4));
            QCOMPARE(second.figures.cached_tokens, closed);
            break;
        }
        QVERIFY2(found, "no opening gave an answer that its text tokenizes differently");
    }

    // Only small prefills so far: the reuse is priced at the model's batch speed measured once on
    // this machine and kept in the settings table, so a later session prices it at the same speed
    // without measuring again.
    void smallPrefillsPricedAtMeasuredSpeed() {
        Setup s;
        std::string kept;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            const std::string key = prefill_speed_key(*s.m, *s.be);
            QVERIFY(!store.setting(key).has_value());
            const int64_t id = reg.create("small");
            const TurnResult first = reg.send(id, "a cat", greedy(4));
            QVERIFY(first.figures.computed_tokens < Conversation::kBatchTokens);
            QVERIFY(!first.figures.prefill_saved_ms.has_value());  // nothing reused, nothing measured yet
            QVERIFY(!store.setting(key).has_value());
            const TurnResult second = reg.send(id, "a mat", greedy(4));
            QVERIFY(second.figures.cached_tokens > 0);
            const auto speed = load_prefill_speed(store, key);
            QVERIFY(speed.has_value());
            QVERIFY(speed->tokens >= PrefillSpeed::kBatchTokens);
            QVERIFY(second.figures.prefill_saved_ms.has_value());
            QVERIFY(
                qFuzzyCompare(*second.figures.prefill_saved_ms, second.figures.cached_tokens * speed->ms_per_token()));
            // Stored with the answer as it was returned.
            QCOMPARE(reg.messages(id).back().stats.prefill_saved_ms, second.figures.prefill_saved_ms);
            kept = *store.setting(key);
        }
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("small again");
        reg.send(id, "a cat", greedy(4));
        const TurnResult again = reg.send(id, "a mat", greedy(4));
        QCOMPARE(*store.setting(prefill_speed_key(*s.m, *s.be)), kept);  // not measured again
        const auto speed = load_prefill_speed(store, prefill_speed_key(*s.m, *s.be));
        QVERIFY(again.figures.prefill_saved_ms.has_value());
        QVERIFY(qFuzzyCompare(*again.figures.prefill_saved_ms, again.figures.cached_tokens * speed->ms_per_token()));
    }

    // A conversation's own settings make its turn's options (the rest stay the global ones), are
    // validated against the model's context, and its context length is enforced by the turn with
    // the error that names the sizes; the answer keeps how it ended.
    void conversationSettingsDriveTheTurn() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("own");
        const int64_t other = reg.create("global");
        ChatSettings global;
        global.max_new_tokens = 9;
        ConversationSettings own;
        own.max_new_tokens = 2;
        own.temperature = 0.0;
        own.seed = 5;
        reg.set_conversation_settings(id, own);
        const TurnOptions t = global.turn_options("dynamic", reg.conversation_settings(id));
        QCOMPARE(t.generation.max_new_tokens, 2);
        QCOMPARE(t.generation.sampling.temperature, 0.0f);
        QCOMPARE(t.generation.sampling.seed, uint64_t(5));
        QCOMPARE(t.generation.sampling.top_k, global.sampling.top_k);
        QCOMPARE(global.turn_options("dynamic", reg.conversation_settings(other)).generation.max_new_tokens, 9);
        // An answer at its limit says so, stored with it.
        TurnOptions two = greedy(2);
        const TurnResult r = reg.send(id, "the cat sat on", two);
        if (r.figures.token_ids.size() == 2) {
            QCOMPARE(r.figures.stop_reason, StopReason::MaxNewTokens);
            QCOMPARE(reg.messages(id).back().stats.stop_reason, std::optional<StopReason>(StopReason::MaxNewTokens));
        }
        QVERIFY(r.figures.stop_reason.has_value());
        QCOMPARE(reg.messages(id).back().stats.stop_reason, r.figures.stop_reason);

        // Over the model's context, or under 16 tokens: refused, nothing stored.
        ConversationSettings wide;
        wide.context_length = s.m->config().n_ctx_train + 1;
        QVERIFY(error_of([&] { reg.set_conversation_settings(id, wide); }).find("context length") != std::string::npos);
        QCOMPARE(reg.conversation_settings(id), own);
        ConversationSettings hot;
        hot.temperature = -1;
        QVERIFY(error_of([&] { reg.set_conversation_settings(id, hot); }).find("chat.temperature") != std::string::npos);

        // A context length the conversation outgrows: the turn is refused with the sizes, the
        // conversation left as it was.
        ConversationSettings narrow;
        narrow.context_length = 40;
        reg.set_conversation_settings(id, narrow);
        const size_t before = reg.messages(id).size();
        TurnOptions limited = greedy(2);
        limited.context_length = *reg.conversation_settings(id).context_length;
        const std::string refusal = error_of([&] { reg.send(id, long_message(), limited); });
        QVERIFY2(refusal.find("but the context holds 40") != std::string::npos, refusal.c_str());
        QCOMPARE(reg.messages(id).size(), before);
        // The same message fits the model's own context.
        QVERIFY(error_of([&] { reg.send(id, long_message(), greedy(2)); }).empty());
    }

    // A new system prompt: stored first, the next turn renders the conversation with it (the
    // cache keeps only the part before it, so the rest is prefilled again); removing it works too.
    void systemPromptChangeRendersAgain() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("sys");
        reg.send(id, "the cat sat on", greedy(3));
        const TurnResult warm = reg.send(id, "a mat", greedy(3));
        QVERIFY(warm.figures.cached_tokens > 0);
        QVERIFY(reg.set_system_prompt(id, "You answer about cats."));
        QVERIFY(!reg.set_system_prompt(id, "You answer about cats."));
        auto msgs = reg.messages(id);
        QCOMPARE(msgs.front().role, Role::System);
        QCOMPARE(msgs.front().content, std::string("You answer about cats."));
        const TurnResult after = reg.send(id, "and the dog", greedy(3));
        // What follows the new prompt is computed again.
        QVERIFY(after.figures.cached_tokens < warm.figures.cached_tokens);
        QCOMPARE(after.figures.cached_tokens + after.figures.computed_tokens, after.figures.prompt_tokens);
        QVERIFY(reg.set_system_prompt(id, ""));
        msgs = reg.messages(id);
        QVERIFY(msgs.front().role != Role::System);
        QVERIFY(error_of([&] { reg.send(id, "one more", greedy(2)); }).empty());
    }

    void loadModelReportsAndCancels() {
        QTemporaryDir dir;
        test::TinyModelSpec spec;
        spec.n_layer = 2;
        spec.n_embd = 64;
        spec.n_head = 2;
        spec.n_head_kv = 1;
        spec.head_dim = 32;
        spec.n_ff = 128;
        const std::string path = (dir.path() + "/m.gguf").toStdString();
        test::write_tiny_gguf(spec, path);
        CancelAt none{"no such task"};
        const auto m = load_model(path, none.progress());
        QCOMPARE(m->fingerprint(), Model::load(path)->fingerprint());
        QVERIFY(none.reports.size() >= 3);
        int64_t last = -1;
        for (const auto& [task, done, total] : none.reports) {
            QCOMPARE(task, std::string("Loading model"));
            QVERIFY(done >= last);
            last = done;
            QCOMPARE(total, std::get<2>(none.reports.back()));
        }
        QVERIFY(last > 0);
        QCOMPARE(last, std::get<2>(none.reports.back()));  // all of it read

        CancelAt first{"Loading model"};
        const std::string msg = error_of([&] { load_model(path, first.progress()); });
        QVERIFY2(contains(msg, "cancelled"), msg.c_str());
        bool cancelled = false;
        try {
            load_model(path, first.progress());
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        // A bad file is still an error naming it, not a cancel.
        QVERIFY(contains(error_of([&] { load_model(path + ".missing", {}); }), ".missing"));
    }

    // A cancelled snapshot load leaves the conversation as it was: nothing loaded, no message
    // stored; the next turn uses the snapshot as if nothing had happened.
    void snapshotLoadCancelled() {
        Setup s;
        const int64_t id = test::conversation_answered_once(s.db, *s.m, *s.be, "c", "the cat sat", 4);
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const auto before = stored(reg, id);
        CancelAt cancel{"Loading cache"};
        TurnCallbacks cb;
        cb.progress = cancel.progress();
        bool cancelled = false;
        try {
            reg.send(id, "on the mat", greedy(4), cb);
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QCOMPARE(std::get<0>(cancel.reports.front()), std::string("Loading cache"));
        QVERIFY(stored(reg, id) == before);
        QVERIFY(!reg.telemetry(id).has_value());
        // The next turn loads the snapshot and reports the load from start to end.
        CancelAt watch{"no such task"};
        TurnCallbacks cb2;
        cb2.progress = watch.progress();
        const TurnResult r = reg.send(id, "on the mat", greedy(4), cb2);
        QVERIFY(r.figures.cached_tokens > 0);
        QVERIFY(watch.reports.size() >= 2);
        QCOMPARE(watch.reports[0], std::make_tuple(std::string("Loading cache"), int64_t(0), int64_t(1)));
        QCOMPARE(watch.reports[1], std::make_tuple(std::string("Loading cache"), int64_t(1), int64_t(1)));
        QCOMPARE(stored(reg, id).size(), before.size() + 2);
    }

    // A prefill cancelled after its first chunk: the user's message is taken back out of the
    // transcript and the store, the cache is back to its length, and the conversation goes on
    // exactly as a twin that never had the cancelled turn.
    void prefillCancelled() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("c");
        const int64_t twin = reg.create("twin");
        reg.send(id, "the cat sat", greedy(4));
        reg.send(twin, "the cat sat", greedy(4));
        const auto before = stored(reg, id);
        const int64_t cache_before = reg.telemetry(id)->tokens;
        CancelAt cancel{"Prefilling"};
        TurnCallbacks cb;
        cb.progress = cancel.progress();
        std::string text_seen;
        cb.on_text = [&](std::string_view t) { text_seen += t; };
        bool cancelled = false;
        try {
            reg.send(id, long_text(), greedy(4), cb);
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QCOMPARE(cancel.reports.size(), size_t(1));  // cancelled after the first report
        const auto& [task, done, total] = cancel.reports.front();
        QCOMPARE(task, std::string("Prefilling"));
        QVERIFY(done > 0 && done < total);
        QVERIFY(total > 512);
        QVERIFY(text_seen.empty());
        QVERIFY(stored(reg, id) == before);
        // The cache keeps what the turn did not replace (the turn's alignment may have cropped
        // tokens that no longer render the same), none of the cancelled prefill.
        QVERIFY(reg.telemetry(id)->tokens <= cache_before);
        QVERIFY(reg.telemetry(id)->tokens > 0);
        QVERIFY(!find(reg.list(), id)->last_unanswered);
        const TurnResult a = reg.send(id, "on the mat", greedy(6));
        const TurnResult b = reg.send(twin, "on the mat", greedy(6));
        QCOMPARE(a.text, b.text);
        QCOMPARE(a.figures.cached_tokens, b.figures.cached_tokens);
        QCOMPARE(a.figures.prompt_tokens, b.figures.prompt_tokens);
        // Uncancelled, the long prefill reports per chunk of at most 512 tokens up to its total.
        CancelAt watch("no such task");
        TurnCallbacks cb2;
        cb2.progress = watch.progress();
        reg.send(twin, long_text(), greedy(2), cb2);
        std::vector<int64_t> done_at;
        for (const auto& [t, d, n] : watch.reports)
            if (t == "Prefilling") {
                done_at.push_back(d);
                QCOMPARE(n, std::get<2>(watch.reports.back()));
            }
        QVERIFY(done_at.size() >= 3);
        for (size_t i = 1; i < done_at.size(); ++i) QVERIFY(done_at[i] > done_at[i - 1] && done_at[i] - done_at[i - 1] <= 512);
        QCOMPARE(done_at.back(), std::get<2>(watch.reports.back()));
    }

    // Edit and regenerate cancelled in their prefill: the messages they removed come back.
    void editAndRegenerateCancelled() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const int64_t id = reg.create("c");
        reg.send(id, "the cat sat", greedy(4));
        reg.send(id, "on the mat", greedy(4));
        const auto before = stored(reg, id);
        {
            CancelAt cancel{"Prefilling"};
            TurnCallbacks cb;
            cb.progress = cancel.progress();
            bool cancelled = false;
            try {
                reg.edit(id, 0, long_text(), greedy(4), cb);
            } catch (const Cancelled&) {
                cancelled = true;
            }
            QVERIFY(cancelled);
            QVERIFY(stored(reg, id) == before);
        }
        // Regenerate with the whole history to prefill again: the snapshot is gone and the
        // conversation closed, so its first message (long now) is computed anew.
        reg.edit(id, 2, long_text(), greedy(4));
        const auto with_long = stored(reg, id);
        reg.close(id);
        const auto rec = store.find_conversation_by_id(id);
        std::filesystem::remove(store.snapshot_path(rec->snapshot));
        CancelAt cancel{"Prefilling"};
        TurnCallbacks cb;
        cb.progress = cancel.progress();
        bool cancelled = false;
        try {
            reg.regenerate(id, greedy(4), cb);
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QVERIFY(stored(reg, id) == with_long);
        // And it still regenerates afterwards, replacing only the last answer.
        const TurnResult r = reg.regenerate(id, greedy(4));
        const auto after = stored(reg, id);
        QCOMPARE(after.size(), with_long.size());
        QCOMPARE(after.back().content, r.text);
        QVERIFY(std::equal(after.begin(), after.end() - 1, with_long.begin()));
    }

    void prefixSaveAndEditCancelled() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        std::vector<std::string> notices;
        {
            CancelAt cancel{"Saving prefix"};
            bool cancelled = false;
            try {
                reg.prefixes().save("long", long_text(), "", notices, cancel.progress());
            } catch (const Cancelled&) {
                cancelled = true;
            }
            QVERIFY(cancelled);
            QVERIFY(store.list_prefixes().empty());
            QCOMPARE(files_in(store.snapshot_dir()), std::vector<std::string>{});
        }
        CancelAt watch{"no such task"};
        const PrefixRecord p = reg.prefixes().save("p", "the cat sat on the mat", "", notices, watch.progress());
        QVERIFY(!watch.reports.empty());
        QCOMPARE(std::get<0>(watch.reports.back()), std::string("Saving prefix"));
        QCOMPARE(std::get<1>(watch.reports.back()), static_cast<int64_t>(p.tokens.size()));
        const auto files = files_in(store.snapshot_dir());
        QCOMPARE(files.size(), size_t(1));
        CancelAt cancel{"Saving prefix"};
        bool cancelled = false;
        try {
            reg.prefixes().edit("p", long_text(), notices, cancel.progress());
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        const PrefixRecord after = reg.prefixes().find("p");
        QCOMPARE(after.text, p.text);
        QCOMPARE(after.tokens, p.tokens);
        QCOMPARE(after.snapshot, p.snapshot);
        QCOMPARE(files_in(store.snapshot_dir()), files);
    }

    // A chat from a prefix whose cache must be rebuilt: cancelled, no conversation is created
    // and the prefix is not counted as used.
    void chatFromPrefixCancelled() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("long", long_text(), "", notices);
        std::filesystem::remove(store.snapshot_path(p.snapshot));
        OpenOptions open;
        open.prefix = "long";
        CancelAt cancel("Prefilling");
        bool cancelled = false;
        try {
            reg.create("from prefix", open, cancel.progress());
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QVERIFY(reg.list().empty());
        QCOMPARE(store.find_prefix("long")->use_count, int64_t(0));
        const int64_t id = reg.create("from prefix", open);
        QCOMPARE(reg.messages(id).size(), size_t(1));
        QCOMPARE(store.find_prefix("long")->use_count, int64_t(1));
    }

    // The switch verb: what it did, the strategy saved with the conversation (reopening finds
    // the converted cache), a plan that changes nothing, a cancelled rebuild that keeps the old
    // cache and strategy.
    void switchStrategy() {
        Setup s;
        int64_t id = 0;
        std::string quantized;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            OpenOptions open;
            open.cache_spec = "quantized:nbits=4,residual=16,group=16";
            id = reg.create("q", open);
            reg.send(id, long_text(), greedy(2));
            const CacheTelemetry before = *reg.telemetry(id);
            quantized = before.spec;
            QVERIFY(quantized.rfind("quantized", 0) == 0);

            // A plan changes nothing.
            const ConversionPlan plan = reg.plan_switch(id, "dynamic");
            QCOMPARE(plan.kind, ConversionPlan::Kind::Rebuild);
            QVERIFY(plan.tokens_rebuilt > 256);
            QCOMPARE(reg.telemetry(id)->spec, quantized);
            QCOMPARE(reg.telemetry(id)->tokens, before.tokens);
            QCOMPARE(store.find_conversation_by_id(id)->cache_spec, quantized);

            // Cancelled after the first rebuilt chunk: the old cache and strategy stay.
            CancelAt cancel("Converting cache");
            bool cancelled = false;
            try {
                reg.switch_strategy(id, "dynamic", cancel.progress());
            } catch (const Cancelled&) {
                cancelled = true;
            }
            QVERIFY(cancelled);
            QVERIFY(!cancel.reports.empty());
            QCOMPARE(reg.telemetry(id)->spec, quantized);
            QCOMPARE(reg.telemetry(id)->tokens, before.tokens);
            QCOMPARE(reg.telemetry(id)->total_bytes, before.total_bytes);
            QCOMPARE(store.find_conversation_by_id(id)->cache_spec, quantized);

            // Done: rebuilt, reported to the end, saved with the conversation.
            CancelAt watch("no such task");
            const ConversionPlan done = reg.switch_strategy(id, "dynamic", watch.progress());
            QCOMPARE(done.kind, ConversionPlan::Kind::Rebuild);
            QCOMPARE(done.to_spec, std::string("dynamic"));
            QCOMPARE(reg.telemetry(id)->spec, std::string("dynamic"));
            QCOMPARE(reg.telemetry(id)->tokens, before.tokens);
            QCOMPARE(store.find_conversation_by_id(id)->cache_spec, std::string("dynamic"));
            QVERIFY(!watch.reports.empty());
            QCOMPARE(std::get<0>(watch.reports.back()), std::string("Converting cache"));
            QCOMPARE(std::get<1>(watch.reports.back()), std::get<2>(watch.reports.back()));
            QCOMPARE(find(reg.list(), id)->cache_spec, std::string("dynamic"));
            // The same strategy again: nothing to do.
            QCOMPARE(reg.switch_strategy(id, "dynamic").kind, ConversionPlan::Kind::Unchanged);
        }
        // Reopened: the snapshot holds the converted cache, so nothing is converted or rebuilt.
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const TurnResult r = reg.send(id, "the mat", greedy(2));
        for (const std::string& n : r.notices) QVERIFY2(!contains(n, "convert") && !contains(n, "prefilled again"), n.c_str());
        QVERIFY(r.figures.cached_tokens > 256);
        QCOMPARE(reg.telemetry(id)->spec, std::string("dynamic"));
        // Switched in the reopened session, whose cache came from the snapshot (issue 25: this
        // crashed), it goes on from the converted cache.
        const std::string offloaded = "offloaded:dir=" + s.dir.path().toStdString();
        QCOMPARE(reg.switch_strategy(id, offloaded).kind, ConversionPlan::Kind::Lossless);
        const TurnResult after = reg.send(id, "the cat", greedy(2));
        QVERIFY(after.figures.cached_tokens > 256);
        QCOMPARE(reg.telemetry(id)->spec, canonical_cache_spec(offloaded));
        QVERIFY(!find(reg.list(), id)->last_unanswered);
        reg.switch_strategy(id, "dynamic");
        // A bad spec is refused naming it, and changes nothing.
        QVERIFY(!error_of([&] { reg.switch_strategy(id, "no-such-strategy"); }).empty());
        QCOMPARE(store.find_conversation_by_id(id)->cache_spec, std::string("dynamic"));
    }

    void settingsRoundTrip() {
        Setup s;
        Store store(s.db);
        const ChatSettings defaults = ChatSettings::load(store);
        QCOMPARE(defaults.device, std::string("cpu"));
        QVERIFY(defaults.notices.empty());
        QCOMPARE(defaults.resident_caches, 4);
        QCOMPARE(defaults.max_new_tokens, 1024);
        // Chat sampling, not the text completer's (kvchat-cli generate keeps SamplerConfig's).
        QCOMPARE(defaults.sampling.temperature, 0.7f);
        QCOMPARE(defaults.sampling.top_p, 0.9f);
        QCOMPARE(defaults.sampling.repetition_penalty, 1.1f);
        QCOMPARE(defaults.context_policy, ContextPolicy::Refuse);
        QVERIFY(defaults.random_seed);

        ChatSettings c;
        c.threads = 3;
        c.device = "cuda:1";
        c.resident_caches = 2;
        c.cache_memory_budget = int64_t{3} << 30;
        c.context_policy = ContextPolicy::Sliding;
        c.default_strategy = "quantized:nbits=4";
        c.sampling.temperature = 0.3f;
        c.sampling.top_k = 7;
        c.sampling.top_p = 0.85f;
        c.sampling.min_p = 0.1f;
        c.sampling.repetition_penalty = 1.15f;
        c.sampling.seed = 1234567;
        c.random_seed = false;
        c.max_new_tokens = 99;
        c.system_prompt = "Be brief.\nAnd \"kind\".";
        c.save(store);
        const ChatSettings back = ChatSettings::load(store);
        QVERIFY(back.notices.empty());
        QCOMPARE(back.threads, 3);
        QCOMPARE(back.device, std::string("cuda:1"));
        QCOMPARE(back.resident_caches, 2);
        QCOMPARE(back.cache_memory_budget, int64_t{3} << 30);
        QCOMPARE(back.context_policy, ContextPolicy::Sliding);
        QVERIFY(back.default_strategy.rfind("quantized", 0) == 0);
        QVERIFY(back.default_strategy.find("nbits=4") != std::string::npos);
        QCOMPARE(back.sampling.temperature, 0.3f);
        QCOMPARE(back.sampling.top_k, 7);
        QCOMPARE(back.sampling.top_p, 0.85f);
        QCOMPARE(back.sampling.min_p, 0.1f);
        QCOMPARE(back.sampling.repetition_penalty, 1.15f);
        QCOMPARE(back.sampling.seed, uint64_t(1234567));
        QVERIFY(!back.random_seed);
        QCOMPARE(back.max_new_tokens, 99);
        QCOMPARE(back.system_prompt, c.system_prompt);
        // The turn options carry them, with the fallback rule.
        const TurnOptions t = back.turn_options("quantized:nbits=4");
        QCOMPARE(t.generation.max_new_tokens, 99);
        QCOMPARE(t.generation.sampling.seed, uint64_t(1234567));
        QCOMPARE(t.policy, ContextPolicy::Sliding);
        QCOMPARE(t.max_cache_bytes, int64_t{3} << 30);
        QCOMPARE(t.fallback_spec, std::string("quantized:nbits=4+offloaded"));
        QCOMPARE(back.turn_options("dynamic").fallback_spec, std::string("offloaded"));
        QCOMPARE(fallback_strategy("quantized:nbits=8+offloaded"), std::string("quantized:nbits=8+offloaded"));
    }

    void badSettingsFallBackToDefaults_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");
        QTest::newRow("threads negative") << "chat.threads" << "-1";
        QTest::newRow("threads text") << "chat.threads" << "four";
        QTest::newRow("device") << "chat.device" << "gpu";
        QTest::newRow("device index") << "chat.device" << "cuda:x";
        QTest::newRow("resident zero") << "chat.resident_caches" << "0";
        QTest::newRow("budget negative") << "chat.cache_memory_budget" << "-5";
        QTest::newRow("policy") << "chat.context_policy" << "forget";
        QTest::newRow("strategy") << "chat.default_strategy" << "quantized:nbits=3";
        QTest::newRow("temperature") << "chat.temperature" << "nan";
        QTest::newRow("top_p") << "chat.top_p" << "2";
        QTest::newRow("min_p") << "chat.min_p" << "1";
        QTest::newRow("top_k") << "chat.top_k" << "3.5";
        QTest::newRow("penalty") << "chat.repeat_penalty" << "0";
        QTest::newRow("seed") << "chat.seed" << "-3";
        QTest::newRow("max tokens") << "chat.max_new_tokens" << "0";
        QTest::newRow("greedy") << "chat.greedy" << "yes";
        QTest::newRow("trailing text") << "chat.max_new_tokens" << "12abc";
    }
    void badSettingsFallBackToDefaults() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        Setup s;
        Store store(s.db);
        store.set_setting("chat.max_new_tokens", "77");  // a good value beside the bad one stays
        store.set_setting(key.toStdString(), value.toStdString());
        const ChatSettings loaded = ChatSettings::load(store);
        QCOMPARE(loaded.notices.size(), size_t(1));
        QVERIFY2(contains(loaded.notices[0], key.toStdString()), loaded.notices[0].c_str());
        const ChatSettings d;
        QCOMPARE(loaded.threads, d.threads);
        QCOMPARE(loaded.device, d.device);
        QCOMPARE(loaded.resident_caches, d.resident_caches);
        QCOMPARE(loaded.cache_memory_budget, d.cache_memory_budget);
        QCOMPARE(loaded.context_policy, d.context_policy);
        QCOMPARE(loaded.default_strategy, d.default_strategy);
        QCOMPARE(loaded.sampling.temperature, d.sampling.temperature);
        QCOMPARE(loaded.sampling.top_p, d.sampling.top_p);
        QCOMPARE(loaded.sampling.greedy, d.sampling.greedy);
        QCOMPARE(loaded.random_seed, d.random_seed);
        if (key != "chat.max_new_tokens") QCOMPARE(loaded.max_new_tokens, 77);
        else QCOMPARE(loaded.max_new_tokens, d.max_new_tokens);
    }

    void savingBadSettingsWritesNothing() {
        Setup s;
        Store store(s.db);
        ChatSettings c;
        c.max_new_tokens = 64;
        c.sampling.top_p = 1.5f;
        QVERIFY(contains(error_of([&] { c.save(store); }), "chat.top_p"));
        QVERIFY(!store.setting("chat.max_new_tokens").has_value());
        c.sampling.top_p = 0.9f;
        c.default_strategy = "no-such-strategy";
        QVERIFY(contains(error_of([&] { c.save(store); }), "chat.default_strategy"));
        QVERIFY(!store.setting("chat.max_new_tokens").has_value());
    }
};

QTEST_GUILESS_MAIN(TestSessionApi)
#include "test_session_api.moc"
