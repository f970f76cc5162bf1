// Regression tests for what the soak test (kvchat_soak) found, each reduced to the fewest steps
// that show it. The seed and step that first showed each are named above it; DEVELOPERS.md ("The
// soak test") says how to replay one.
#include "engine/chat/conversation_cache.h"
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "soak/soak_support.h"
#include "soak/soak_world.h"
#include "support/chat_turns.h"
#include "support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <signal.h>

using namespace kvchat;

using test::greedy;

namespace {

struct Setup {
    QTemporaryDir dir;
    std::string model_path = test::write_chat_model(dir);
    std::unique_ptr<Model> m = Model::load(model_path);
    std::unique_ptr<Backend> be = make_cpu_backend(1);
    std::string db = (dir.path() + "/kv.db").toStdString();
};

std::vector<std::pair<Role, std::string>> transcript(const ChatSession& reg, int64_t id) {
    std::vector<std::pair<Role, std::string>> out;
    for (const MessageRecord& m : reg.messages(id)) out.emplace_back(m.role, m.content);
    return out;
}

}  // namespace

class TestSoakRegressions : public QObject {
    Q_OBJECT
private slots:
    // kvchat_soak seed 2, steps 36 and 45: Ctrl-C landing after the checkpointed prefill but
    // before the first token (while the generator computed the turn's last few prompt tokens) made
    // `kvchat-cli chat` exit 0 with the user's message stored and no answer, so the next message
    // was refused as stacked on an unanswered one. A stop before the first token takes the message
    // back, wherever in the prefill it lands: here at the last "Prefilling" report, after which
    // only the generator's part of the prompt is left.
    void stopJustBeforeTheFirstTokenTakesTheMessageBack_data() {
        QTest::addColumn<QString>("verb");
        QTest::newRow("send") << "send";
        QTest::newRow("regenerate") << "regenerate";
        QTest::newRow("edit") << "edit";
    }
    void stopJustBeforeTheFirstTokenTakesTheMessageBack() {
        QFETCH(QString, verb);
        Setup s;
        const int64_t id =
            test::conversation_answered_once(s.db, *s.m, *s.be, "c", "the cat sat", 4, [&](Store& store, int64_t c) {
                // Regenerate answers a message a crash left unanswered: its tokens are still to prefill.
                if (verb == "regenerate") store.append_message(c, Role::User, "on the mat");
            });
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const auto before = transcript(reg, id);

        std::atomic<bool> stop{false};
        bool reported_end = false;
        TurnCallbacks cb;
        cb.progress.cancel = &stop;
        cb.progress.report = [&](std::string_view task, int64_t done, int64_t total) {
            if (task == "Prefilling" && done == total) stop = reported_end = true;
        };
        cb.on_text = [&](std::string_view) { QFAIL("no text may come after the stop"); };
        const auto turn = [&] {
            if (verb == "send") reg.send(id, "on the mat", greedy(8), cb);
            else if (verb == "regenerate") reg.regenerate(id, greedy(8), cb);
            else reg.edit(id, 0, "on the mat", greedy(8), cb);
        };
        QVERIFY_THROWS_EXCEPTION(Cancelled, turn());
        QVERIFY(reported_end);
        QCOMPARE(transcript(reg, id), before);
        QCOMPARE(reg.list().front().last_unanswered, verb == "regenerate");
        // The turn done again is answered as if the stopped one had never been.
        cb = {};
        QVERIFY_THROWS_NO_EXCEPTION(turn());
        const auto after = transcript(reg, id);
        QCOMPARE(after.size(), verb == "send" ? before.size() + 2 : verb == "regenerate" ? before.size() + 1 : size_t(2));
        QCOMPARE(after.back().first, Role::Assistant);
    }

    // The same through the terminal tool: SIGINT at random moments of `chat --message` leaves the
    // conversation answered (possibly with a stopped answer) or as it was ("stopped before the
    // answer began"), never with the message unanswered. An answer stopped by Ctrl-C exits 130
    // as a stop before it does (README, "Using kvchat"); one that ended before the signal, 0.
    void interruptedChatNeverLeavesTheMessageUnanswered() {
        Setup s;
        const std::string cli = test::cli_path();
        const auto chat = [&](const std::string& title, int signal_after_ms) {
            soak::ProcessOptions p;
            p.args = {cli, "chat", "--db", s.db, "--model", s.model_path, "--threads", "1", "--conversation", title,
                      "--message", "the cat sat on the mat and the dog ran far", "-n", "64", "--greedy", "--json"};
            p.signal = signal_after_ms >= 0 ? SIGINT : 0;
            p.signal_after_ms = signal_after_ms;
            return soak::run_process(p);
        };
        int kept = 0, taken_back = 0;
        // A few turns to each conversation (they fill the model's context otherwise), the first one
        // to a new conversation, which a stop before its first token does not leave behind.
        std::map<std::string, size_t> answered;
        for (int at = 0; at < 120; at += 3) {
            const std::string title = "c" + std::to_string(at / 18);
            if (at % 18 == 9) {  // (and an existing one, answered in full first)
                QCOMPARE(chat(title, -1).exit_code, 0);
                answered[title] += 2;
            }
            const soak::ProcessResult r = chat(title, at);
            // Killed by SIGINT itself: it landed before kvchat-cli caught it (loading the model).
            QVERIFY2(r.term_signal == SIGINT || (r.term_signal == 0 && (r.exit_code == 0 || r.exit_code == 130)),
                     (r.status() + " " + r.err).c_str());
            const soak::DbView db = soak::read_db(s.db);
            const soak::DbConversation* c = db.conversation(title);
            const size_t have = c ? c->messages.size() : 0;
            const auto what = [&] {
                return QString("SIGINT at %1 ms: %2 %3, %4 messages, the last one %5's")
                    .arg(at)
                    .arg(QString::fromStdString(r.status()), QString::fromStdString(r.err))
                    .arg(have)
                    .arg(c && have ? QString::fromStdString(c->messages.back().role) : QString("nobody"));
            };
            if (have == answered[title] + 2) {
                answered[title] += 2;
                ++kept;
            } else {
                QVERIFY2(r.exit_code == 130 || r.term_signal == SIGINT, qPrintable(what()));
                if (r.exit_code == 130) {
                    QVERIFY2(test::contains(r.err, "stopped before the answer began"), qPrintable(what()));
                    ++taken_back;
                }
            }
            QVERIFY2(have == answered[title], qPrintable(what()));
            QVERIFY2(have == 0 || c->messages.back().role == "assistant", qPrintable(what()));
        }
        qInfo("%d answers kept, %d taken back before their first token", kept, taken_back);
    }

    // kvchat_soak seed 3, steps 37 and 58: after another program (kvchat-cli) changed a
    // conversation, the window's registry read its messages again without the ids each answer was
    // generated as, so it rendered the answers retokenized from their text: another prompt than
    // the cache and every other program hold (258 tokens where it is 256), another greedy answer,
    // and a refusal where the context still had room. Read again, a transcript renders exactly as
    // a fresh reopening renders it.
    void messagesReadAgainKeepTheirAnswerIds() {
        Setup s;
        Store store_a(s.db);
        ChatSession a(store_a, *s.m, *s.be);
        const int64_t id = a.create("c");
        // Answers whose text tokenizes to other ids than the model wrote (random weights write
        // pieces a tokenizer would merge): found among a few openings, checked below.
        a.send(id, "the cat sat on the mat", greedy(24));
        {
            Store store_b(s.db);
            ChatSession b(store_b, *s.m, *s.be);
            b.send(id, "and the dog ran far", greedy(24));  // the other program's turn
        }
        const auto stored = store_a.list_messages(id);
        bool retokenizes_differently = false;
        std::vector<ChatMessage> msgs;
        for (const MessageRecord& m : stored) {
            msgs.emplace_back(m.role, m.content, a.chat_template().answer_ids_from_file(m.stats.token_ids));
            if (m.role == Role::Assistant)
                retokenizes_differently |= s.m->tokenizer().encode(m.content, false) != m.stats.token_ids;
        }
        QVERIFY2(retokenizes_differently, "the test needs an answer whose text tokenizes to other ids");
        msgs.emplace_back(Role::User, "why");
        const int64_t want = static_cast<int64_t>(a.chat_template().render(msgs, true).tokens.size());
        const TurnResult r = a.send(id, "why", greedy(4));
        QCOMPARE(r.figures.prompt_tokens, want);
        // The cache held the first turn's tokens as generated: all of them are reused.
        QVERIFY2(r.figures.cached_tokens > 0, std::to_string(r.figures.cached_tokens).c_str());
    }

    // kvchat_soak seed 1005, step 214: another program regenerated an answer into one with the
    // same text and other ids (an empty answer of pieces that decode to nothing, 9 ids where the
    // window's had 7). The window compared texts only, took its transcript for the stored one and
    // rendered its own ids: another prompt (77 tokens where a reopening renders 79), another
    // answer. Ids count in the comparison.
    void answerRegeneratedElsewhereWithTheSameTextIsReadAgain() {
        Setup s;
        Store store_a(s.db);
        ChatSession a(store_a, *s.m, *s.be);
        const int64_t id = a.create("c");
        a.send(id, "the cat sat on the mat", greedy(6));
        {
            // The other program's regenerate: the same text, one more id that decodes to nothing.
            const int32_t pad = s.m->tokenizer().find_piece("<pad>");
            QVERIFY(pad >= 0);
            MessageRecord answer = store_a.list_messages(id).back();
            QCOMPARE(answer.role, Role::Assistant);
            std::vector<int32_t> ids = answer.stats.token_ids;
            ids.push_back(pad);
            QCOMPARE(s.m->tokenizer().decode(ids), answer.content);
            QVERIFY(!a.chat_template().answer_ids_from_file(ids).empty());
            Store other(s.db);
            other.delete_messages_after(id, 0);
            answer.stats.token_ids = ids;
            other.append_message(id, Role::Assistant, answer.content, answer.stats);
        }
        std::vector<ChatMessage> msgs;
        for (const MessageRecord& m : store_a.list_messages(id))
            msgs.emplace_back(m.role, m.content, a.chat_template().answer_ids_from_file(m.stats.token_ids));
        msgs.emplace_back(Role::User, "why");
        const int64_t want = static_cast<int64_t>(a.chat_template().render(msgs, true).tokens.size());
        const TurnResult r = a.send(id, "why", greedy(4));
        QCOMPARE(r.figures.prompt_tokens, want);
    }

    // kvchat_soak seed 4, step 97 (and seed 3, step 13): a strategy another program switched the
    // conversation to (kvchat-cli chat --cache) was undone by the window's next turn, which ran
    // with the strategy it had in memory and wrote it back. The switch stands, and the turn runs
    // with it.
    void strategySwitchedByAnotherProgramStands() {
        Setup s;
        Store store_a(s.db);
        ChatSession a(store_a, *s.m, *s.be);
        const int64_t id = a.create("c");
        a.send(id, "the cat sat on the mat", greedy(4));
        const std::string other = "offloaded";
        // What `kvchat-cli chat --conversation c --cache offloaded` records before its turn (and
        // without reading the snapshot, which the [switch] known bug would crash on).
        Store(s.db).set_conversation_cache_spec(id, other);
        a.send(id, "and the dog ran far", greedy(24));
        QCOMPARE(QString::fromStdString(store_a.find_conversation_by_id(id)->cache_spec), QString::fromStdString(other));
        QCOMPARE(QString::fromStdString(a.list().front().cache_spec), QString::fromStdString(other));
        QCOMPARE(QString::fromStdString(a.telemetry(id)->spec), QString::fromStdString(other));
        Store(s.db).set_conversation_cache_spec(id, "static:max_len=48");
        // kvchat_soak seed 113, step 4: the cache in memory holds more than the new strategy can,
        // but the edit keeps less: the edit is answered (the cache is rebuilt for it), where the
        // failed conversion refused it.
        QVERIFY(a.telemetry(id)->tokens > 48);
        const TurnResult r = a.edit(id, 0, "the cat", greedy(4));
        QVERIFY(!r.figures.token_ids.empty());
        QCOMPARE(store_a.list_messages(id).size(), size_t(2));
        QCOMPARE(QString::fromStdString(a.telemetry(id)->spec), QString("static:max_len=48"));
    }

    // kvchat_soak seed 8, step 11: regenerate on a conversation whose stored strategy cannot hold
    // it any more (kvchat-cli chat --cache static:max_len=96 on a longer conversation records the
    // strategy, then refuses its turn) deleted the answer it was to replace, then was refused:
    // the answer is lost and the message left unanswered. The fit is checked against the model's
    // context before the cache (and its capacity) is loaded. The same cause as the known
    // "refused turns leave an unanswered message" of issue 25.4, fixed on branch clirel.
    void refusedRegenerateKeepsTheAnswer() {
        Setup s;
        const int64_t id = test::conversation_answered_once(
            s.db, *s.m, *s.be, "c", "the cat sat on the mat and the dog ran far", 8,
            [](Store& store, int64_t c) { store.set_conversation_cache_spec(c, "static:max_len=24"); });
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const auto before = transcript(reg, id);
        const std::string err = test::error_of([&] { reg.regenerate(id, greedy(4)); });
        QVERIFY2(test::contains(err, "24"), err.c_str());
        QCOMPARE(transcript(reg, id), before);
    }

    // kvchat_soak seed 8, step 11 (how the conversation got there): `kvchat-cli chat --cache
    // static:max_len=24 --message ...` on a conversation longer than 24 tokens is refused ("the
    // static cache holds max_len=24 tokens, but N are needed"), yet the strategy is recorded:
    // every later turn is refused until the user switches again. A refused turn leaves the
    // conversation as it was, strategy included: the switch asked on open is recorded by the
    // first turn that is answered (after a restart here, as every kvchat-cli run is).
    void refusedSwitchOnOpenKeepsTheOldStrategy() {
        Setup s;
        const int64_t id =
            test::conversation_answered_once(s.db, *s.m, *s.be, "c", "the cat sat on the mat and the dog ran far", 8);
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        OpenOptions open;
        open.cache_spec = "static:max_len=24";
        const std::string err = test::error_of([&] {
            reg.open("c", open);
            reg.send("c", "and then", greedy(4));
        });
        QVERIFY2(test::contains(err, "max_len=24"), err.c_str());
        QCOMPARE(QString::fromStdString(store.find_conversation_by_id(id)->cache_spec), QString("dynamic"));
        QCOMPARE(transcript(reg, id).size(), size_t(2));
        // The next program's turn runs with the old strategy, answered; and a switch whose turn is
        // answered is recorded with it, its snapshot of the new strategy.
        Store store2(s.db);
        ChatSession next(store2, *s.m, *s.be);
        QVERIFY(!next.send("c", "and then", greedy(4)).figures.token_ids.empty());
        QCOMPARE(QString::fromStdString(store2.find_conversation_by_id(id)->cache_spec), QString("dynamic"));
        Store store3(s.db);
        ChatSession third(store3, *s.m, *s.be);
        OpenOptions offloaded;
        offloaded.cache_spec = "offloaded";
        third.open("c", offloaded);
        QVERIFY(!third.send("c", "more", greedy(4)).figures.token_ids.empty());
        QCOMPARE(QString::fromStdString(store3.find_conversation_by_id(id)->cache_spec), QString("offloaded"));
        const std::string snapshot = store3.find_conversation_by_id(id)->snapshot;
        QCOMPARE(QString::fromStdString(load_cache_snapshot(store3.snapshot_path(snapshot), *s.m, *s.be).cache->spec_text()),
                 QString("offloaded"));
    }

    // kvchat_soak seed 305, step 61 (reduced): the tiny model wrote <start_of_turn> seven times
    // inside an answer (a control token: it decodes to nothing). The live session rendered that
    // answer with the ids it was generated as, markers included; every reopening (a restart,
    // another program, the registry reading it again) drops ids with a turn marker
    // (answer_ids_from_file) and renders its text: 27 tokens less, so the next turn's prompt, and
    // its greedy answer, depended on whether the conversation had been reopened. Both render alike.
    void answerWithATurnMarkerRendersAsReopened() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        const ChatTemplate& t = reg.chat_template();
        const Tokenizer& tok = s.m->tokenizer();
        const int32_t marker = tok.find_piece("<start_of_turn>");
        QVERIFY(marker >= 0);
        std::vector<int32_t> ids = tok.encode("the cat", false);
        ids.push_back(marker);
        for (int32_t id : tok.encode(" sat", false)) ids.push_back(id);
        const std::string text = tok.decode(ids);
        QVERIFY(t.answer_ids_from_file(ids).empty());  // what a reopening reads back
        const auto render = [&](std::vector<int32_t> answer_ids) {
            std::vector<ChatMessage> msgs;
            msgs.emplace_back(Role::User, "hello");
            msgs.emplace_back(Role::Assistant, text, std::move(answer_ids));
            msgs.emplace_back(Role::User, "and then");
            return t.render(msgs, true).tokens;
        };
        QCOMPARE(render(ids), render(t.answer_ids_from_file(ids)));
        // An answer without a marker keeps its ids (they are what the cache holds).
        std::vector<int32_t> plain = tok.encode("the cat", false);
        plain.insert(plain.begin(), plain.back());  // (ids a tokenizer would not give for the text)
        std::vector<ChatMessage> msgs;
        msgs.emplace_back(Role::User, "hello");
        msgs.emplace_back(Role::Assistant, tok.decode(plain), plain);
        const std::vector<int32_t> rendered = t.render(msgs, false).tokens;
        QVERIFY(std::search(rendered.begin(), rendered.end(), plain.begin(), plain.end()) != rendered.end());
    }

    // Found while reading the soak's SIGBUS (seed 1 step 39, which was SQLite's -shm): the soak
    // damages snapshots by replacing them, as kvchat's own writes and crashes do, but another
    // program can truncate or rewrite one in place (`cp` over it, `truncate`) while the window
    // has it loaded. Its layers and checkpoints used the file's mapping, so the next turn died of
    // SIGBUS. The loaded cache does not depend on the file any more.
    void snapshotCutInPlaceAfterLoadingIsHarmless_data() {
        QTest::addColumn<QString>("verb");
        QTest::newRow("send") << "send";
        QTest::newRow("regenerate") << "regenerate";
        QTest::newRow("edit") << "edit";
    }
    void snapshotCutInPlaceAfterLoadingIsHarmless() {
        QFETCH(QString, verb);
        Setup s;
        int64_t id = 0;
        {
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            id = reg.create("c");
            reg.send(id, "the cat sat on the mat and the dog ran far away from home", greedy(40));
            reg.send(id, "and then what", greedy(40));
        }
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        // A turn stopped before its first token loads the snapshot and writes none: the file is
        // still the one the cache was loaded from (a turn that is answered replaces it by rename).
        std::atomic<bool> stop{false};
        TurnCallbacks cb;
        cb.progress.cancel = &stop;
        cb.progress.report = [&](std::string_view task, int64_t done, int64_t total) {
            if (task == "Prefilling" && done == total) stop = true;
        };
        QVERIFY_THROWS_EXCEPTION(Cancelled, reg.send(id, "tell me more", greedy(4), cb));
        QVERIFY(stop);
        const std::string path = store.snapshot_path(store.find_conversation_by_id(id)->snapshot);
        QVERIFY(std::filesystem::file_size(path) > 4096);
        std::filesystem::resize_file(path, 0);  // in place: the same file, cut
        TurnResult r;
        if (verb == "send") r = reg.send(id, "why", greedy(8));
        else if (verb == "regenerate") r = reg.regenerate(id, greedy(8));
        else r = reg.edit(id, 2, "and then", greedy(8));  // back to a checkpoint inside the old snapshot
        QVERIFY(!r.figures.token_ids.empty());
        // The answer is the one a cache never saved would give.
        soak::Reference ref(*s.m, *s.be);
        std::vector<soak::Message> msgs;
        for (const MessageRecord& m : store.list_messages(id)) msgs.push_back({std::string(role_name(m.role)), m.content, m.stats.token_ids});
        msgs.pop_back();
        QCOMPARE(r.figures.token_ids, ref.answer(msgs, 8, 0).ids);
    }

    // Written while reducing kvchat_soak seed 305, step 61 (under hybrid, the turn after a stopped
    // answer gave other greedy tokens than the no-cache reference, after another program's turns
    // and a reopening from a snapshot with bytes appended). These steps do not reproduce it yet
    // (`kvchat_soak --seed 305 --steps 61` does): they check the path it took, which must hold.
    void turnAfterAStoppedAnswerEqualsNoCache_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<int>("stop_after");
        for (const char* spec : {"hybrid", "dynamic", "static:max_len=512"})
            for (int k : {0, 1, 3, 6})
                QTest::newRow((std::string(spec) + " stop after " + std::to_string(k)).c_str()) << spec << k;
    }
    void turnAfterAStoppedAnswerEqualsNoCache() {
        QFETCH(QString, spec);
        QFETCH(int, stop_after);
        Setup s;
        int64_t id = 0;
        {
            // Another program's turns, then the window reopens the conversation from its snapshot.
            Store store(s.db);
            ChatSession reg(store, *s.m, *s.be);
            OpenOptions open;
            open.cache_spec = spec.toStdString();
            id = reg.create("c", open);
            reg.send(id, "the cat sat on the mat and the dog ran far away from home", greedy(12));
            reg.send(id, "and then what", greedy(30));
        }
        Store store(s.db);
        ChatSession reg(store, *s.m, *s.be);
        std::atomic<bool> stop{false};
        int pieces = 0;
        TurnCallbacks cb;
        cb.progress.cancel = &stop;
        cb.on_text = [&](std::string_view) {
            if (++pieces > stop_after) stop = true;
        };
        reg.send(id, "tell me more about it", greedy(40), cb);
        const TurnResult r = reg.send(id, "why is the sun hot", greedy(16));
        soak::Reference ref(*s.m, *s.be);
        std::vector<soak::Message> msgs;
        for (const MessageRecord& m : store.list_messages(id)) msgs.push_back({std::string(role_name(m.role)), m.content, m.stats.token_ids});
        msgs.pop_back();
        const soak::ReferenceAnswer want = ref.answer(msgs, 16, 0);
        QCOMPARE(r.figures.token_ids, want.ids);
    }
};

QTEST_GUILESS_MAIN(TestSoakRegressions)
#include "test_soak_regressions.moc"
