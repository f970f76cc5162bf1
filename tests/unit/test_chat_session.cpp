// The chat session's rules that the window's worker used to hold itself, and the shape of a turn,
// on the tiny chat model: removing a conversation removes its lock file and snapshot; titles are
// unique, trimmed, and a new chat is named by its first message; prefixes renamed and removed by
// id; a session without a model browses and refuses turns; one turn reads the stored transcript
// once; take_turn's outcome says answered, stopped, cancelled or failed (and whether anything
// changed); the saved caches' verbs (list, drop, budget) and the global settings go through the
// session, with or without a model; a turn's figures are those stored with its answer.
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <filesystem>
#include <optional>
#include <vector>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

using Setup = test::ChatSetup;

std::string title_of(const Store& store, int64_t id) { return store.find_conversation_by_id(id)->title; }

// An answer's figures as a turn returned them against those the store kept with it, field by
// field (the caller checks QTest::currentTestFailed()).
void compare_figures(const AnswerFigures& turn, const AnswerFigures& stored) {
    QCOMPARE(stored.prompt_tokens, turn.prompt_tokens);
    QCOMPARE(stored.generated_tokens, turn.generated_tokens);
    QCOMPARE(stored.ttft_ms, turn.ttft_ms);
    QCOMPARE(stored.tokens_per_second, turn.tokens_per_second);
    QCOMPARE(stored.cached_tokens, turn.cached_tokens);
    QCOMPARE(stored.prefix_tokens, turn.prefix_tokens);
    QCOMPARE(stored.computed_tokens, turn.computed_tokens);
    QCOMPARE(stored.prefill_saved_ms, turn.prefill_saved_ms);
    QCOMPARE(stored.stop_reason, turn.stop_reason);
    QCOMPARE(stored.token_ids, turn.token_ids);
}

}  // namespace

class TestChatSession : public QObject {
    Q_OBJECT
private slots:
    // The window removed conversations through the store, leaving the lock file behind.
    void removeTakesLockFileAndSnapshot() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");
        session.send(id, "the cat sat", greedy(4));
        const std::string snapshot = store.find_conversation_by_id(id)->snapshot;
        const std::string lock = store.conversation_lock_path(id);
        QVERIFY(!snapshot.empty());
        QVERIFY(std::filesystem::exists(store.snapshot_path(snapshot)));
        QVERIFY(std::filesystem::exists(lock));
        session.remove(id);
        QVERIFY(!store.find_conversation_by_id(id).has_value());
        QVERIFY(!std::filesystem::exists(store.snapshot_path(snapshot)));
        QVERIFY(!std::filesystem::exists(lock));
    }

    // create() makes titles unique; rename() trims, refuses an empty name and one in use (the
    // conversation's own name is not "in use").
    void titlesUniqueAndTrimmed() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t a = session.create("");
        const int64_t b = session.create("");
        const int64_t c = session.create("Notes");
        const int64_t d = session.create("Notes");
        QCOMPARE(title_of(store, a), std::string("Chat"));
        QCOMPARE(title_of(store, b), std::string("Chat 2"));
        QCOMPARE(title_of(store, c), std::string("Notes"));
        QCOMPARE(title_of(store, d), std::string("Notes 2"));
        session.rename(a, "\u00a0 Cats\t");
        QCOMPARE(title_of(store, a), std::string("Cats"));
        session.rename(a, "Cats");
        QVERIFY(contains(error_of([&] { session.rename(b, " Cats "); }), "already exists"));
        QVERIFY(contains(error_of([&] { session.rename(b, " \u3000"); }), "needs a name"));
        QCOMPARE(title_of(store, b), std::string("Chat 2"));
    }

    // A chat with the title create() gave it is named by its first message when the request asks
    // (the window's send); other titles, later messages and the by-id send leave the title.
    void newChatNamedByFirstMessage() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t a = session.create("");
        const int64_t b = session.create("");
        const int64_t c = session.create("Kept");
        const int64_t plain = session.create("");
        auto named = [](std::string text) {
            TurnRequest r = TurnRequest::send(std::move(text));
            r.names_new_chat = true;
            return r;
        };
        QCOMPARE(session.take_turn(a, named("  the cat\n sat on the mat"), greedy(3)).ending, TurnResult::Ending::Answered);
        QCOMPARE(title_of(store, a), std::string("the cat"));
        QCOMPARE(session.take_turn(b, named("the cat"), greedy(3)).ending, TurnResult::Ending::Answered);
        QCOMPARE(title_of(store, b), std::string("the cat 2"));
        session.take_turn(c, named("the dog"), greedy(3));
        QCOMPARE(title_of(store, c), std::string("Kept"));
        session.take_turn(a, named("the dog"), greedy(3));
        QCOMPARE(title_of(store, a), std::string("the cat"));
        session.send(plain, "the dog", greedy(3));
        QCOMPARE(title_of(store, plain), std::string("Chat 3"));
    }

    // The title rule on its own: the first line, white space collapsed, cut at a word after 48
    // characters (never inside a UTF-8 character) with an ellipsis.
    void titleFromMessage() {
        QCOMPARE(title_from_message("  hello \t there \nsecond line"), std::string("hello there"));
        const std::string words = "one two three four five six seven eight nine ten eleven twelve";
        const std::string t = title_from_message(words);
        QCOMPARE(t, std::string("one two three four five six seven eight nine\u2026"));
        const std::string no_spaces(60, 'x');
        QCOMPARE(title_from_message(no_spaces), std::string(48, 'x') + "\u2026");
        std::string accents;
        for (int i = 0; i < 60; ++i) accents += "\u00e9";
        std::string want;
        for (int i = 0; i < 48; ++i) want += "\u00e9";
        QCOMPARE(title_from_message(accents), want + "\u2026");
    }

    // Prefixes renamed and removed by id, with the rules the window used to check itself.
    void prefixesById() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::vector<std::string> notices;
        const PrefixRecord p = session.prefixes().save("one", "You are terse.", "", notices);
        const PrefixRecord q = session.prefixes().save("two", "You are kind.", "", notices);
        QVERIFY(!p.snapshot.empty());
        QCOMPARE(session.prefix_list().size(), size_t(2));
        QVERIFY(session.prefix_list()[0].snapshot_bytes > 0);
        session.rename_prefix(p.id, " uno ");
        QCOMPARE(session.prefix(p.id).name, std::string("uno"));
        QVERIFY(contains(error_of([&] { session.rename_prefix(q.id, "uno"); }), "already exists"));
        QVERIFY(contains(error_of([&] { session.rename_prefix(q.id, "  "); }), "needs a name"));
        session.remove_prefix(p.id);
        QVERIFY(!store.find_prefix_by_id(p.id).has_value());
        QVERIFY(!std::filesystem::exists(store.snapshot_path(p.snapshot)));
        QVERIFY(contains(error_of([&] { session.prefix(p.id); }), "deleted"));
    }

    // Without a model the session lists, reads, renames and removes; a turn fails, saying why.
    void withoutModel() {
        Setup s;
        Store store(s.db);
        int64_t id = 0;
        {
            ChatSession session(store, *s.m, *s.be);
            id = session.create("");
            session.send(id, "the cat sat", greedy(3));
        }
        ChatSession session(store, nullptr, nullptr);
        QVERIFY(!session.has_model());
        QCOMPARE(session.list().size(), size_t(1));
        QCOMPARE(session.messages(id).size(), size_t(2));
        const TurnResult r = session.take_turn(id, TurnRequest::send("more"), greedy(3));
        QCOMPARE(r.ending, TurnResult::Ending::Failed);
        QVERIFY2(contains(r.problem, "no model"), r.problem.c_str());
        QVERIFY(!r.changed);
        QCOMPARE(session.messages(id).size(), size_t(2));
        session.rename(id, "Renamed");
        QCOMPARE(title_of(store, id), std::string("Renamed"));
        const std::string lock = store.conversation_lock_path(id);
        QVERIFY(std::filesystem::exists(lock));
        session.remove(id);
        QVERIFY(session.list().empty());
        QVERIFY(!std::filesystem::exists(lock));
    }

    // The storage view's verbs: the saved caches least recently used first; dropping one removes
    // its file and clears its row (a second drop finds none); a budget that holds only the newest
    // snapshot drops the oldest; a negative budget is refused; nullopt is the default again.
    void savedCachesAndBudget() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t a = session.create("a");
        const int64_t b = session.create("b");
        const int64_t c = session.create("c");
        session.send(a, "the cat sat", greedy(3));
        session.send(b, "the dog ran", greedy(3));
        session.send(c, "the bird flew", greedy(3));
        auto caches = session.stored_caches();
        QCOMPARE(caches.size(), size_t(3));
        QCOMPARE(caches[0].id, a);
        QCOMPARE(caches[2].id, c);
        for (const StoredCache& sc : caches) QVERIFY(sc.bytes > 0);
        QVERIFY(session.snapshot_budget().is_default);

        const std::string b_file = store.snapshot_path(store.find_conversation_by_id(b)->snapshot);
        QVERIFY(session.drop_cache(StoredCache::Owner::Conversation, b));
        QVERIFY(!std::filesystem::exists(b_file));
        QVERIFY(store.find_conversation_by_id(b)->snapshot.empty());
        QVERIFY(!session.drop_cache(StoredCache::Owner::Conversation, b));
        QCOMPARE(session.messages(b).size(), size_t(2));

        const std::string a_file = store.snapshot_path(store.find_conversation_by_id(a)->snapshot);
        const std::string c_file = store.snapshot_path(store.find_conversation_by_id(c)->snapshot);
        const int64_t c_bytes = session.stored_caches()[2].bytes;
        const auto dropped = session.set_snapshot_budget(c_bytes);
        QCOMPARE(dropped.size(), size_t(1));
        QCOMPARE(dropped[0].id, a);
        QVERIFY(!std::filesystem::exists(a_file));
        QVERIFY(store.find_conversation_by_id(a)->snapshot.empty());
        QVERIFY(std::filesystem::exists(c_file));
        QCOMPARE(session.snapshot_budget().bytes, c_bytes);
        QVERIFY(!session.snapshot_budget().is_default);

        QVERIFY(contains(error_of([&] { session.set_snapshot_budget(-1); }), "budget"));
        QCOMPARE(session.snapshot_budget().bytes, c_bytes);
        QVERIFY(session.set_snapshot_budget(std::nullopt).empty());
        QVERIFY(session.snapshot_budget().is_default);
        QCOMPARE(session.snapshot_budget().bytes, default_snapshot_budget(store));

        // A session without a model (the window before one is loaded) manages them too.
        ChatSession bare(store, nullptr, nullptr);
        QCOMPARE(bare.stored_caches().size(), size_t(3));
        QVERIFY(bare.drop_cache(StoredCache::Owner::Conversation, c));
        QVERIFY(!std::filesystem::exists(c_file));
    }

    // The global settings are read and saved through the session; a value out of range is refused
    // and nothing is written. set_max_resident frees the least recently used caches over it.
    void settingsAndResidentLimit() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        ChatSettings st = session.settings();
        QCOMPARE(st.max_new_tokens, ChatSettings{}.max_new_tokens);
        st.max_new_tokens = 77;
        st.system_prompt = "Be brief.";
        session.save_settings(st);
        ChatSession bare(store, nullptr, nullptr);
        QCOMPARE(bare.settings().max_new_tokens, 77);
        QCOMPARE(bare.settings().system_prompt, std::string("Be brief."));
        ChatSettings bad = st;
        bad.max_new_tokens = 78;
        bad.resident_caches = -3;
        QVERIFY(contains(error_of([&] { bare.save_settings(bad); }), "chat.resident_caches"));
        QCOMPARE(bare.settings().max_new_tokens, 77);

        const int64_t a = session.create("a");
        const int64_t b = session.create("b");
        session.send(a, "the cat sat", greedy(3));
        session.send(b, "the dog ran", greedy(3));
        QCOMPARE(session.resident(), size_t(2));
        session.set_max_resident(1);
        QCOMPARE(session.resident(), size_t(1));
        QVERIFY(session.telemetry(b).has_value());
        QVERIFY(!session.telemetry(a).has_value());
    }

    // A turn reads the stored transcript once, whichever request it answers, also on a
    // conversation this session has not opened yet (the window's worker and the registry used to
    // read it six times a send).
    void transcriptReadOncePerTurn() {
        Setup s;
        const int64_t id = test::conversation_answered_once(s.db, *s.m, *s.be, "", "the cat sat", 3);
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        auto reads_of = [&](const TurnRequest& request) {
            const int64_t before = store.transcript_reads();
            const TurnResult r = session.take_turn(id, request, greedy(3));
            if (r.ending != TurnResult::Ending::Answered) qWarning("%s", r.problem.c_str());
            return store.transcript_reads() - before;
        };
        QCOMPARE(reads_of(TurnRequest::send("on the mat")), int64_t(1));  // opened by this turn
        QCOMPARE(reads_of(TurnRequest::send("and the dog")), int64_t(1));
        QCOMPARE(reads_of(TurnRequest::regenerate()), int64_t(1));
        QCOMPARE(reads_of(TurnRequest::edit(2, "and the bird")), int64_t(1));
        QCOMPARE(session.messages(id).size(), size_t(4));
        // kvchat-cli's verbs by title: open() reads the transcript (it hands the conversation
        // out), each turn once more, under the lock.
        int64_t before = store.transcript_reads();
        session.open("titled");
        session.send("titled", "the cat", greedy(3));
        QCOMPARE(store.transcript_reads() - before, int64_t(1));  // a new conversation: nothing to read at open
        Store other(s.db);
        ChatSession reopened(other, *s.m, *s.be);
        before = other.transcript_reads();
        reopened.open("titled");
        reopened.send("titled", "the dog", greedy(3));
        QCOMPARE(other.transcript_reads() - before, int64_t(2));
        before = other.transcript_reads();
        reopened.send("titled", "the bird", greedy(3));
        QCOMPARE(other.transcript_reads() - before, int64_t(1));
    }

    // One outcome type: answered (the stored answer comes with it), stopped (the partial answer
    // stored), cancelled before the answer began and failed (nothing changed, the reason given).
    void outcomes() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");

        const TurnResult answered = session.take_turn(id, TurnRequest::send("the cat sat"), greedy(4));
        QCOMPARE(answered.ending, TurnResult::Ending::Answered);
        QVERIFY(answered.answer.has_value());
        const std::vector<MessageRecord> stored = session.messages(id);
        QCOMPARE(answered.answer->id, stored.back().id);
        QCOMPARE(answered.answer->content, answered.text);
        QCOMPARE(answered.cache_spec, std::string("dynamic"));
        QVERIFY(!answered.thrown);

        std::atomic<bool> stop{false};
        TurnCallbacks stopping;
        stopping.progress.cancel = &stop;
        stopping.on_text = [&](std::string_view) { stop = true; };
        const TurnResult stopped = session.take_turn(id, TurnRequest::send("on the mat"), greedy(40), stopping);
        QCOMPARE(stopped.ending, TurnResult::Ending::Stopped);
        QCOMPARE(stopped.figures.stop_reason, StopReason::Stopped);
        QVERIFY(stopped.answer.has_value());
        QCOMPARE(session.messages(id).back().content, stopped.text);

        const size_t count = session.messages(id).size();
        std::atomic<bool> cancel{true};
        TurnCallbacks cancelled_early;
        cancelled_early.progress.cancel = &cancel;
        const TurnResult cancelled = session.take_turn(id, TurnRequest::send("and the dog"), greedy(4), cancelled_early);
        QCOMPARE(cancelled.ending, TurnResult::Ending::Cancelled);
        QVERIFY(!cancelled.changed);
        QVERIFY(!cancelled.answer.has_value());
        QCOMPARE(session.messages(id).size(), count);
        // The throwing verb rethrows what was thrown.
        QVERIFY_EXCEPTION_THROWN(session.send(id, "and the dog", greedy(4), cancelled_early), Cancelled);

        const TurnResult failed = session.take_turn(id, TurnRequest::edit(1, "not mine"), greedy(4));
        QCOMPARE(failed.ending, TurnResult::Ending::Failed);
        QVERIFY2(contains(failed.problem, "is not a user message"), failed.problem.c_str());
        QVERIFY(!failed.changed);
        QCOMPARE(session.messages(id).size(), count);
        const TurnResult blank = session.take_turn(id, TurnRequest::send(" \n"), greedy(4));
        QCOMPARE(blank.ending, TurnResult::Ending::Failed);
        QVERIFY(contains(blank.problem, "empty"));
    }

    // A turn's figures are the answer's figures: what an answered and a stopped turn return is
    // what the store keeps with the answer (read back after reopening), and they add up against
    // the transcript itself: the prompt is the stored transcript rendered for a reply,
    // computed + cached tokens are the prompt, the ids are the answer's.
    void turnFiguresAreTheStoredOnes() {
        Setup s;
        int64_t id = 0;
        std::vector<TurnResult> turns;
        {
            Store store(s.db);
            ChatSession session(store, *s.m, *s.be);
            id = session.create("");
            turns.push_back(session.take_turn(id, TurnRequest::send("the cat sat"), greedy(4)));
            turns.push_back(session.take_turn(id, TurnRequest::send("on the mat"), greedy(5)));
            std::atomic<bool> stop{false};
            int pieces = 0;
            TurnCallbacks stopping;
            stopping.progress.cancel = &stop;
            stopping.on_text = [&](std::string_view) {
                if (++pieces == 2) stop = true;
            };
            turns.push_back(session.take_turn(id, TurnRequest::send("and the dog"), greedy(40), stopping));
        }
        QCOMPARE(turns[0].ending, TurnResult::Ending::Answered);
        QCOMPARE(turns[1].ending, TurnResult::Ending::Answered);
        QCOMPARE(turns[2].ending, TurnResult::Ending::Stopped);
        QCOMPARE(turns[2].figures.stop_reason, std::optional<StopReason>(StopReason::Stopped));
        QVERIFY(turns[1].figures.cached_tokens > 0);  // the second turn reused the first's cache

        Store store(s.db);
        ChatSession reopened(store, *s.m, *s.be);
        const std::vector<MessageRecord> stored = reopened.messages(id);
        QCOMPARE(stored.size(), size_t(6));
        for (size_t k = 0; k < turns.size(); ++k) {
            const AnswerFigures& f = turns[k].figures;
            const MessageRecord& answer = stored[2 * k + 1];
            QCOMPARE(answer.role, Role::Assistant);
            QCOMPARE(answer.content, turns[k].text);
            compare_figures(f, answer.stats);
            if (QTest::currentTestFailed()) return;
            QCOMPARE(f.computed_tokens + f.cached_tokens, f.prompt_tokens);
            QVERIFY(f.computed_tokens > 0);
            // The answers before it with the ids they were generated as, as the turn rendered them.
            std::vector<ChatMessage> before;
            for (size_t i = 0; i < 2 * k + 1; ++i) before.emplace_back(stored[i].role, stored[i].content, stored[i].stats.token_ids);
            QCOMPARE(f.prompt_tokens, static_cast<int64_t>(reopened.chat_template().render(before, true).tokens.size()));
            QVERIFY(!f.token_ids.empty());
            QCOMPARE(f.generated_tokens, static_cast<int64_t>(f.token_ids.size()));
            QVERIFY(f.ttft_ms && *f.ttft_ms > 0);
            QVERIFY(f.stop_reason.has_value());
        }
        // The reuse counted is the earlier turn's prompt and answer at least.
        QVERIFY(turns[1].figures.cached_tokens >= turns[0].figures.prompt_tokens + turns[0].figures.generated_tokens);
        QVERIFY(turns[2].figures.cached_tokens >= turns[1].figures.prompt_tokens + turns[1].figures.generated_tokens);
    }
};

QTEST_GUILESS_MAIN(TestChatSession)
#include "test_chat_session.moc"
