// Versions of an answer in the chat session, on the tiny chat model: regenerate and edit keep what
// they replace; choosing a version makes it the transcript the next turn answers (and that answer
// is the one a fresh conversation with the same messages gives, so the cache was realigned, not
// trusted); versions survive reopening from disk, a failed (cancelled) regenerate and edit, and
// a strategy switch, which is recorded where it happened.
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

using namespace kvchat;

using test::greedy;

namespace {

using Setup = test::ChatSetup;

std::vector<std::string> texts(const std::vector<MessageRecord>& ms) {
    std::vector<std::string> out;
    for (const MessageRecord& m : ms) out.push_back(m.content);
    return out;
}

using Texts = std::vector<std::string>;

// The greedy answer a new conversation holding `messages` (as stored: answers with the ids they
// were generated as) gives to `next`, computed with no cache from before.
std::string fresh_answer(Setup& s, const std::vector<MessageRecord>& messages, const std::string& next) {
    Store store((s.dir.path() + "/fresh.db").toStdString());
    ChatSession session(store, *s.m, *s.be);
    const int64_t id = session.create("");
    for (const MessageRecord& m : messages) store.append_message(id, m.role, m.content, m.stats);
    const std::string out = session.send(id, next, greedy(6)).text;
    session.remove(id);
    return out;
}

TurnCallbacks cancelled_at_once(std::atomic<bool>& flag) {
    flag = true;
    TurnCallbacks c;
    c.progress.cancel = &flag;
    return c;
}

}  // namespace

class TestAnswerVersions : public QObject {
    Q_OBJECT
private slots:
    // Regenerate keeps the old answer; choosing it makes it the conversation's answer again, and
    // the next turn answers that transcript exactly as a fresh conversation would.
    void regenerateKeepsAndSelectLeads() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");
        const std::string first = session.send(id, "the cat sat", greedy(6)).text;
        TurnOptions sampled = greedy(6);
        sampled.generation.sampling.greedy = false;
        sampled.generation.sampling.seed = 7;
        sampled.generation.sampling.temperature = 2.0f;
        const std::string second = session.regenerate(id, sampled).text;
        auto sets = session.versions(id);
        QCOMPARE(sets.size(), size_t(1));
        QCOMPARE(sets[0].ordinal, int64_t(1));
        QCOMPARE(sets[0].count, int64_t(2));
        QCOMPARE(sets[0].shown, int64_t(2));
        QCOMPARE(texts(session.version(id, 1, 1)), (Texts{first}));
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", second}));

        session.select_version(id, 1, 1);
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", first}));
        QCOMPARE(session.versions(id)[0].shown, int64_t(1));
        const TurnResult next = session.send(id, "on the mat", greedy(6));
        QVERIFY(next.figures.cached_tokens > 0);  // the common start of both versions
        const std::vector<MessageRecord> chosen = session.messages(id);
        QCOMPARE(next.text, fresh_answer(s, {chosen[0], chosen[1]}, "on the mat"));
        // Regenerating once more adds a third version, after the two.
        session.select_version(id, 1, 2);
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", second}));
    }

    // Edit keeps the message and what followed it as a version of the message; choosing the old
    // one brings all of it back, and the answer after it follows it.
    void editKeepsTheTail() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");
        const std::string a1 = session.send(id, "the cat sat", greedy(5)).text;
        const std::string a2 = session.send(id, "on the mat", greedy(5)).text;
        const std::string b1 = session.edit(id, 0, "the dog ran", greedy(5)).text;
        QCOMPARE(texts(session.messages(id)), (Texts{"the dog ran", b1}));
        QCOMPARE(session.versions(id).size(), size_t(1));
        QCOMPARE(session.versions(id)[0].ordinal, int64_t(0));
        QCOMPARE(texts(session.version(id, 0, 1)), (Texts{"the cat sat", a1, "on the mat", a2}));
        session.select_version(id, 0, 1);
        const std::vector<MessageRecord> chosen = session.messages(id);
        QCOMPARE(texts(chosen), (Texts{"the cat sat", a1, "on the mat", a2}));
        const TurnResult next = session.send(id, "and the bird", greedy(6));
        QCOMPARE(next.text, fresh_answer(s, chosen, "and the bird"));
    }

    // Versions are in the database: a new session on it lists them, chooses one, and answers
    // after it from the saved cache.
    void afterReopening() {
        Setup s;
        int64_t id = 0;
        std::string first, edited;
        {
            Store store(s.db);
            ChatSession session(store, *s.m, *s.be);
            id = session.create("");
            first = session.send(id, "the cat sat", greedy(5)).text;
            edited = session.edit(id, 0, "the dog ran", greedy(5)).text;
        }
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        QCOMPARE(session.versions(id).size(), size_t(1));
        QCOMPARE(session.versions(id)[0].count, int64_t(2));
        session.select_version(id, 0, 1);
        const std::vector<MessageRecord> chosen = session.messages(id);
        QCOMPARE(texts(chosen), (Texts{"the cat sat", first}));
        const TurnResult next = session.send(id, "on the mat", greedy(6));
        QVERIFY(next.figures.cached_tokens > 0);  // from the snapshot saved before the reopening
        QCOMPARE(next.text, fresh_answer(s, chosen, "on the mat"));
        // A session without a model chooses too (kvchat-cli versions --select).
        ChatSession browsing(store, nullptr, nullptr);
        browsing.select_version(id, 0, 2);
        QCOMPARE(texts(browsing.messages(id)).front(), std::string("the dog ran"));
        QCOMPARE(texts(session.messages(id)).front(), std::string("the dog ran"));
    }

    // A regenerate or an edit cancelled before its answer began leaves the transcript and the
    // versions as they were (no empty version, nothing lost), also a version chosen before.
    void failedTurnLeavesVersions() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");
        const std::string a = session.send(id, "the cat sat", greedy(5)).text;
        session.regenerate(id, greedy(5));
        session.select_version(id, 1, 1);
        std::atomic<bool> flag{false};
        TurnResult r = session.take_turn(id, TurnRequest::regenerate(), greedy(5), cancelled_at_once(flag));
        QCOMPARE(r.ending, TurnResult::Ending::Cancelled);
        QVERIFY(!r.changed);
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", a}));
        QCOMPARE(session.versions(id).size(), size_t(1));
        QCOMPARE(session.versions(id)[0].count, int64_t(2));
        QCOMPARE(session.versions(id)[0].shown, int64_t(1));
        r = session.take_turn(id, TurnRequest::edit(0, "the dog ran"), greedy(5), cancelled_at_once(flag));
        QCOMPARE(r.ending, TurnResult::Ending::Cancelled);
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", a}));
        QCOMPARE(session.versions(id).size(), size_t(1));
        QCOMPARE(session.versions(id)[0].ordinal, int64_t(1));
        // The stored answer keeps its ids: the next turn reuses the cache up to it.
        const std::vector<MessageRecord> stored = session.messages(id);
        QVERIFY(!stored[1].stats.token_ids.empty());
        // And the conversation goes on.
        QCOMPARE(session.regenerate(id, greedy(5)).ending, TurnResult::Ending::Answered);
        QCOMPARE(session.versions(id)[0].count, int64_t(3));
    }

    // A strategy switch is recorded at the number of messages it happened after; versions made
    // before and after it can still be chosen and answered after.
    void strategySwitchRecordedAndVersionsGoOn() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const int64_t id = session.create("");
        const std::string a = session.send(id, "the cat sat", greedy(5)).text;
        session.regenerate(id, greedy(5));
        session.switch_strategy(id, "quantized:nbits=4,residual=16,group=16");
        const auto changes = session.strategy_changes(id);
        QCOMPARE(changes.size(), size_t(1));
        QCOMPARE(changes[0].at, int64_t(2));
        QCOMPARE(changes[0].from, std::string("dynamic"));
        QVERIFY(changes[0].to.rfind("quantized", 0) == 0);
        session.select_version(id, 1, 1);
        QCOMPARE(texts(session.messages(id)), (Texts{"the cat sat", a}));
        QCOMPARE(session.send(id, "on the mat", greedy(5)).ending, TurnResult::Ending::Answered);
        session.regenerate(id, greedy(5));
        QCOMPARE(session.versions(id).size(), size_t(2));
        QCOMPARE(session.versions(id)[1].ordinal, int64_t(3));
        session.switch_strategy(id, "dynamic");
        QCOMPARE(session.strategy_changes(id).size(), size_t(2));
        QCOMPARE(session.strategy_changes(id)[1].at, int64_t(4));
        // Choosing the first answer again drops the later turn from view, not from the store.
        session.select_version(id, 1, 2);
        QCOMPARE(session.messages(id).size(), size_t(2));
        session.select_version(id, 1, 1);
        QCOMPARE(session.messages(id).size(), size_t(4));
    }
};

QTEST_GUILESS_MAIN(TestAnswerVersions)
#include "test_answer_versions.moc"
