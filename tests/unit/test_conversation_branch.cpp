// ChatSession::branch on tiny models: a branch holds its parent's first N messages and a cache
// cropped to their tokens, so its first turn reuses exactly the copied messages' rendering and
// prefills only what is new, with the answer a cache-less conversation gives. For a dynamic cache
// (llama, every layer global: a plain crop) and a Gemma-3-style one (sliding window 8: back
// through the checkpoints), with the parent resident, closed (its snapshot on disk), after the
// session was reopened, and with the branch itself reopened before its first turn. Refusals
// create nothing.
#include "engine/chat/chat_session.h"
#include "engine/chat/conversation_cache.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

struct Setup {
    explicit Setup(bool sliding) {
        test::TinyModelSpec spec = test::chat_sized_spec();
        if (!sliding) {
            spec.arch = "llama";
            spec.sliding_window = 0;
        }
        const std::string path = (dir.path() + "/m.gguf").toStdString();
        test::write_tiny_gguf(spec, path);
        m = Model::load(path);
    }
    QTemporaryDir dir;
    std::unique_ptr<Model> m;
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    std::string db = (dir.path() + "/kv.db").toStdString();
};

std::vector<ChatMessage> as_chat(const ChatSession& s, const std::vector<MessageRecord>& stored) {
    std::vector<ChatMessage> out;
    for (const MessageRecord& m : stored)
        out.emplace_back(m.role, m.content, s.chat_template().answer_ids_from_file(m.stats.token_ids));
    return out;
}

// The tokens the copied messages render to: what the branch's first turn can reuse.
int64_t rendered(const ChatSession& s, const std::vector<MessageRecord>& stored) {
    return static_cast<int64_t>(s.chat_template().render(as_chat(s, stored), false).tokens.size());
}

// The answer to `stored` + `question` (none: `stored` ends with it) computed without any cache to reuse.
std::string fresh_answer(const Setup& setup, const ChatSession& s, const std::vector<MessageRecord>& stored,
                         const std::string& spec, const std::string& question, int n) {
    Conversation c(*setup.m, *setup.be, s.chat_template(), spec);
    for (const ChatMessage& m : as_chat(s, stored)) c.append(m.role, m.content, m.tokens);
    return question.empty() ? c.respond(greedy(n)).text : c.send(question, greedy(n)).text;
}

// A three-turn parent; returns its id.
int64_t three_turns(ChatSession& session) {
    const int64_t id = session.create("parent");
    session.send(id, "the cat sat", greedy(6));
    session.send(id, "on the mat", greedy(6));
    session.send(id, "and the dog ran", greedy(6));
    return id;
}

}  // namespace

class TestConversationBranch : public QObject {
    Q_OBJECT
private slots:
    void firstTurnReusesCopiedMessages_data() {
        QTest::addColumn<bool>("sliding");
        QTest::addColumn<int>("at");
        QTest::addColumn<QString>("where");  // the parent: "live", "closed", "reopened"; or "branch reopened"
        for (const bool sliding : {false, true})
            for (const char* where : {"live", "closed", "reopened", "branch reopened"}) {
                const QByteArray name = QByteArray(sliding ? "sliding" : "dynamic") + " " + where;
                QTest::newRow(name + " at 4") << sliding << 4 << where;
                // A dynamic cache crops anywhere; a sliding one only where a checkpoint was kept
                // (the snapshot keeps the latest few).
                if (!sliding) QTest::newRow(name + " at 2") << sliding << 2 << where;
                // Ending with a question of the user's: the branch's first turn answers it.
                QTest::newRow(name + (sliding ? " at 5" : " at 3")) << sliding << (sliding ? 5 : 3) << where;
                QTest::newRow(name + " at 6") << sliding << 6 << where;
            }
    }
    void firstTurnReusesCopiedMessages() {
        QFETCH(bool, sliding);
        QFETCH(int, at);
        QFETCH(QString, where);
        Setup s(sliding);
        auto store = std::make_unique<Store>(s.db);
        auto session = std::make_unique<ChatSession>(*store, *s.m, *s.be);
        const int64_t parent = three_turns(*session);
        const std::string spec = store->find_conversation_by_id(parent)->cache_spec;
        if (where == "closed") session->close(parent);
        if (where == "reopened") {
            session.reset();
            store = std::make_unique<Store>(s.db);
            session = std::make_unique<ChatSession>(*store, *s.m, *s.be);
        }
        if (where == "closed" || where == "reopened") QCOMPARE(session->resident(), size_t(0));
        const int64_t b = session->branch(parent, static_cast<size_t>(at), "the branch");
        for (const std::string& n : session->take_notices()) QVERIFY2(!contains(n, "could not"), n.c_str());
        if (where == "branch reopened") {
            session.reset();
            store = std::make_unique<Store>(s.db);
            session = std::make_unique<ChatSession>(*store, *s.m, *s.be);
        }
        const std::vector<MessageRecord> copied = session->messages(b);
        QCOMPARE(copied.size(), size_t(at));
        const std::vector<MessageRecord> of_parent = session->messages(parent);
        for (size_t i = 0; i < copied.size(); ++i) {
            QCOMPARE(copied[i].content, of_parent[i].content);
            QCOMPARE(copied[i].stats.token_ids, of_parent[i].stats.token_ids);
        }
        const auto row = *store->find_conversation_by_id(b);
        QCOMPARE(row.parent_id, std::optional<int64_t>(parent));
        QCOMPARE(row.branch_at, int64_t(at));
        QCOMPARE(row.origin, std::string("app"));
        QCOMPARE(row.cache_spec, spec);
        QVERIFY(!row.snapshot.empty());  // saved at once
        const auto summary = *session->summary(b);
        QCOMPARE(summary.parent_id, std::optional<int64_t>(parent));
        QCOMPARE(summary.branch_at, int64_t(at));

        const int64_t expected = rendered(*session, copied);
        const bool answered = at % 2 == 0;
        const std::string question = answered ? "under the table" : "";
        const TurnResult r = answered ? session->send(b, question, greedy(6)) : session->regenerate(b, greedy(6));
        // (All of them, but for a last token that also ends the prompt: it is computed again, its
        // logits start the reply.)
        QCOMPARE(r.figures.cached_tokens, std::min(expected, r.figures.prompt_tokens - 1));
        QCOMPARE(r.figures.computed_tokens, r.figures.prompt_tokens - r.figures.cached_tokens);
        QCOMPARE(r.text, fresh_answer(s, *session, copied, spec, question, 6));
        // The parent is as it was.
        QCOMPARE(session->messages(parent).size(), size_t(6));
    }

    // A parent switched to another strategy: the branch takes the cache as it now is, and its first
    // turn still reuses the copied messages (the window of a sliding strategy still holds them).
    void afterStrategySwitch_data() {
        QTest::addColumn<QString>("spec");
        QTest::newRow("quantized") << "quantized:nbits=8,residual=128";
        QTest::newRow("sliding") << "sliding_window:window=512";
    }
    void afterStrategySwitch() {
        QFETCH(QString, spec);
        Setup s(false);
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t parent = three_turns(session);
        session.switch_strategy(parent, spec.toStdString());
        const std::string canonical = canonical_cache_spec(spec.toStdString());
        const int64_t b = session.branch(parent, 4, "switched");
        QCOMPARE(store.find_conversation_by_id(b)->cache_spec, canonical);
        const std::vector<MessageRecord> copied = session.messages(b);
        const TurnResult r = session.send(b, "under the table", greedy(6));
        QCOMPARE(r.cache_spec, canonical);
        QCOMPARE(r.figures.cached_tokens, rendered(session, copied));
        QCOMPARE(r.text, fresh_answer(s, session, copied, canonical, "under the table", 6));
    }

    // Refused with a clear error, nothing created: a count out of range, a title in use or empty,
    // an unknown parent.
    void refusals() {
        Setup s(false);
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t parent = session.create("parent");
        session.send(parent, "the cat sat", greedy(4));
        const size_t before = store.list_conversations().size();
        QVERIFY(contains(error_of([&] { session.branch(parent, 0, "b"); }), "copies 1 to 2 of them, not 0"));
        QVERIFY(contains(error_of([&] { session.branch(parent, 3, "b"); }), "copies 1 to 2 of them, not 3"));
        QVERIFY(contains(error_of([&] { session.branch(parent, 1, " parent "); }), "already exists"));
        QVERIFY(contains(error_of([&] { session.branch(parent, 1, " \t"); }), "needs a name"));
        QVERIFY(contains(error_of([&] { session.branch(parent + 100, 1, "b"); }), "no conversation"));
        QCOMPARE(store.list_conversations().size(), before);
        // A parent without a saved or resident cache: the branch's first turn prefills it all.
        const int64_t b = session.branch(parent, 2, "b");
        session.close(b);
        session.close(parent);
        store.set_conversation_snapshot(parent, "");
        const int64_t c = session.branch(parent, 1, "c");
        const TurnResult r = session.regenerate(c, greedy(4));  // (it ends with the question)
        QCOMPARE(r.figures.cached_tokens, int64_t(0));
        QCOMPARE(session.messages(c).size(), size_t(2));
        // A deleted parent leaves its branches.
        session.remove(parent);
        QVERIFY(!session.summary(b)->parent_id.has_value());
        QCOMPARE(session.messages(b).size(), size_t(2));
    }
};

QTEST_GUILESS_MAIN(TestConversationBranch)
#include "test_conversation_branch.moc"
