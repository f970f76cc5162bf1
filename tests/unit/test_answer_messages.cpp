// ChatSession::answer_messages, the local API server's request, on the tiny chat model: a client
// that sends the whole history each turn continues its conversation (each turn reusing at least
// the previous turn's prompt), after a restart too; a history that diverges is answered by a
// branch at the last common message; a saved prefix starts a new conversation from its cache;
// nothing matching makes a new one with the request's strategy; a conversation locked by another
// process is passed over; bad requests are refused before anything is stored; a cancelled turn
// leaves nothing, a stopped one keeps its answer.
#include "engine/chat/chat_session.h"
#include "engine/chat/conversation_cache.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/store/conversation_lock.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

using Setup = test::ChatSetup;

MessagesRequest request(std::vector<ChatMessage> messages, std::string cache_spec = {}) {
    MessagesRequest r;
    r.messages = std::move(messages);
    r.cache_spec = std::move(cache_spec);
    return r;
}

// What a client holds after an answer: its messages with the answer's text (no ids: it only has text).
std::vector<ChatMessage> with_answer(std::vector<ChatMessage> messages, const MessagesResult& r) {
    messages.emplace_back(Role::Assistant, r.turn.text);
    return messages;
}

}  // namespace

class TestAnswerMessages : public QObject {
    Q_OBJECT
private slots:
    // The 10-turn client of issue 21: turn k carries the whole history; the same conversation
    // answers every turn and reuses at least the previous turn's prompt. A new session on the
    // same database (a restarted server) still continues it from its snapshot.
    void wholeHistoryContinues() {
        Setup s;
        std::vector<ChatMessage> history = {{Role::System, "you are terse"}, {Role::User, "the cat sat"}};
        int64_t id = 0, previous_prompt = 0;
        {
            Store store(s.db);
            ChatSession session(store, *s.m, *s.be);
            const MessagesResult first = session.answer_messages(request(history), greedy(4));
            QCOMPARE(first.turn.ending, TurnResult::Ending::Answered);
            QVERIFY(first.conversation_id != 0);
            QCOMPARE(first.reused_from, int64_t(0));
            QCOMPARE(first.reused_prefix, int64_t(0));
            id = first.conversation_id;
            const auto row = *store.find_conversation_by_id(id);
            QCOMPARE(row.origin, std::string("api"));
            QCOMPARE(row.title, std::string("the cat sat"));
            QCOMPARE(session.summary(id)->origin, std::string("api"));
            history = with_answer(history, first);
            previous_prompt = first.turn.figures.prompt_tokens;
            for (int k = 2; k <= 5; ++k) {
                history.emplace_back(Role::User, "turn " + std::to_string(k) + " of the cat");
                const MessagesResult r = session.answer_messages(request(history), greedy(4));
                QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
                QCOMPARE(r.conversation_id, id);
                QCOMPARE(r.reused_from, id);
                QVERIFY2(r.turn.figures.cached_tokens >= previous_prompt,
                         qPrintable(QString("turn %1: %2 cached, previous prompt %3")
                                        .arg(k)
                                        .arg(r.turn.figures.cached_tokens)
                                        .arg(previous_prompt)));
                previous_prompt = r.turn.figures.prompt_tokens;
                history = with_answer(history, r);
            }
            QCOMPARE(session.messages(id).size(), history.size());
            QCOMPARE(store.list_conversations().size(), size_t(1));
        }
        // Restarted: nothing resident, the snapshot on disk stands in.
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        history.emplace_back(Role::User, "after the restart");
        const MessagesResult r = session.answer_messages(request(history), greedy(4));
        QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
        QCOMPARE(r.conversation_id, id);
        QCOMPARE(r.reused_from, id);
        QVERIFY2(r.turn.figures.cached_tokens >= previous_prompt,
                 qPrintable(
                     QString("%1 cached, previous prompt %2").arg(r.turn.figures.cached_tokens).arg(previous_prompt)));
        QCOMPARE(store.list_conversations().size(), size_t(1));
    }

    // A history that leaves a stored conversation after some messages (an edited question, a
    // client that regenerates) is answered by a branch at the last common message; the original
    // stays as it was.
    void divergingHistoryBranches() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::vector<ChatMessage> history = {{Role::User, "the cat sat"}};
        const MessagesResult first = session.answer_messages(request(history), greedy(4));
        history = with_answer(history, first);
        history.emplace_back(Role::User, "on the mat");
        const MessagesResult second = session.answer_messages(request(history), greedy(4));
        const int64_t parent = first.conversation_id;
        QCOMPARE(second.conversation_id, parent);
        const std::vector<MessageRecord> before = session.messages(parent);

        // The same question again (a client regenerating): a branch before it, not a stacked question.
        const MessagesResult again = session.answer_messages(request(history), greedy(4));
        QCOMPARE(again.turn.ending, TurnResult::Ending::Answered);
        QVERIFY(again.conversation_id != parent);
        QCOMPARE(again.reused_from, parent);
        QCOMPARE(session.messages(again.conversation_id).size(), size_t(4));
        QCOMPARE(session.messages(parent).size(), before.size());
        session.remove(again.conversation_id);  // (else it ties with the parent below, and is newer)

        std::vector<ChatMessage> other(history.begin(), history.begin() + 2);
        other.emplace_back(Role::User, "under the table");
        const MessagesResult r = session.answer_messages(request(other), greedy(4));
        QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
        QVERIFY(r.conversation_id != parent);
        QCOMPARE(r.reused_from, parent);
        const auto row = *store.find_conversation_by_id(r.conversation_id);
        QCOMPARE(row.parent_id, std::optional<int64_t>(parent));
        QCOMPARE(row.branch_at, int64_t(2));
        QCOMPARE(row.origin, std::string("api"));
        // The two common messages came from the parent's cache.
        QVERIFY2(r.turn.figures.cached_tokens >= first.turn.figures.prompt_tokens,
                 qPrintable(QString("%1 cached, first prompt %2")
                                .arg(r.turn.figures.cached_tokens)
                                .arg(first.turn.figures.prompt_tokens)));
        const std::vector<MessageRecord> branch = session.messages(r.conversation_id);
        QCOMPARE(branch.size(), size_t(4));
        QCOMPARE(branch[2].content, std::string("under the table"));
        const std::vector<MessageRecord> after = session.messages(parent);
        QCOMPARE(after.size(), before.size());
        for (size_t i = 0; i < after.size(); ++i) QCOMPARE(after[i].content, before[i].content);
    }

    // A restarted server branches from the parent's snapshot on disk.
    void divergingHistoryBranchesAfterRestart() {
        Setup s;
        std::vector<ChatMessage> history = {{Role::User, "the cat sat"}};
        int64_t parent = 0, first_prompt = 0;
        {
            Store store(s.db);
            ChatSession session(store, *s.m, *s.be);
            const MessagesResult first = session.answer_messages(request(history), greedy(4));
            parent = first.conversation_id;
            first_prompt = first.turn.figures.prompt_tokens;
            history = with_answer(history, first);
            history.emplace_back(Role::User, "on the mat");
            session.answer_messages(request(history), greedy(4));
        }
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        history.back().content = "under the table";
        const MessagesResult r = session.answer_messages(request(history), greedy(4));
        QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
        QCOMPARE(r.reused_from, parent);
        QCOMPARE(store.find_conversation_by_id(r.conversation_id)->parent_id, std::optional<int64_t>(parent));
        QVERIFY2(r.turn.figures.cached_tokens >= first_prompt,
                 qPrintable(QString("%1 cached, first prompt %2").arg(r.turn.figures.cached_tokens).arg(first_prompt)));
        QCOMPARE(session.messages(parent).size(), size_t(4));
    }

    // A saved prefix that begins the request starts a new conversation from its cache.
    void prefixStartsNewConversation() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::vector<std::string> notices;
        const std::string system = "you answer questions about cats and their mats, tersely";
        const PrefixRecord p = session.prefixes().save("cats", system, "", notices);
        const MessagesResult r =
            session.answer_messages(request({{Role::System, system}, {Role::User, "where did it sit"}}), greedy(4));
        QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
        QCOMPARE(r.reused_prefix, p.id);
        QCOMPARE(r.reused_from, int64_t(0));
        QCOMPARE(r.turn.figures.prefix_tokens, static_cast<int64_t>(p.tokens.size()));
        QVERIFY(r.turn.figures.cached_tokens >= static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(store.find_conversation_by_id(r.conversation_id)->origin, std::string("api"));
    }

    // Nothing in common: a new conversation under the request's strategy (and its own title).
    void noMatchMakesNewConversation() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        const MessagesResult a = session.answer_messages(request({{Role::User, "the cat sat"}}), greedy(4));
        MessagesRequest other = request({{Role::User, "a dog ran"}}, "sliding_window:window=16");
        other.title = "  dogs  ";
        other.origin = "app";
        const MessagesResult b = session.answer_messages(other, greedy(4));
        QCOMPARE(b.turn.ending, TurnResult::Ending::Answered);
        QVERIFY(b.conversation_id != a.conversation_id);
        QCOMPARE(b.reused_from, int64_t(0));
        QCOMPARE(b.turn.figures.cached_tokens, int64_t(0));
        const auto row = *store.find_conversation_by_id(b.conversation_id);
        QCOMPARE(row.cache_spec, canonical_cache_spec("sliding_window:window=16"));
        QCOMPARE(row.title, std::string("dogs"));
        QCOMPARE(row.origin, std::string("app"));
        // The same first question in a one-message request: the answer is new, never the stored one.
        const MessagesResult c = session.answer_messages(request({{Role::User, "the cat sat"}}), greedy(4));
        QVERIFY(c.conversation_id != a.conversation_id);
        QCOMPARE(store.find_conversation_by_id(c.conversation_id)->title, std::string("the cat sat 2"));
    }

    // A conversation another process is answering is passed over, without waiting: the request is
    // answered elsewhere and the locked one is left alone.
    void lockedConversationSkipped() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::vector<ChatMessage> history = {{Role::User, "the cat sat"}};
        const MessagesResult first = session.answer_messages(request(history), greedy(4));
        const int64_t id = first.conversation_id;
        const size_t count = session.messages(id).size();
        history = with_answer(history, first);
        history.emplace_back(Role::User, "on the mat");
        {
            // (flock locks of two descriptions conflict within one process as between two.)
            ConversationLock other(store.conversation_lock_path(id), "other");
            const MessagesResult r = session.answer_messages(request(history), greedy(4));
            QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
            QVERIFY(r.conversation_id != id);
            QVERIFY(r.reused_from != id);
            QCOMPARE(session.messages(r.conversation_id).size(), size_t(4));  // the history, the question, the answer
            QCOMPARE(session.messages(id).size(), count);
        }
        // Unlocked, it is continued again (it ties with the newer copy, which would need a branch).
        history.back().content = "on the chair";
        const MessagesResult r = session.answer_messages(request(history), greedy(4));
        QCOMPARE(r.conversation_id, id);
        QCOMPARE(session.messages(id).size(), count + 2);
    }

    // A conversation that ends with a question left unanswered (a crash, a failed turn elsewhere)
    // is continued by a request that carries that question and a new one: the client's exchange.
    void unansweredConversationContinued() {
        Setup s;
        Store store(s.db);
        const auto row = store.create_conversation("left", s.m->fingerprint(), "dynamic");
        store.append_message(row.id, Role::User, "the cat sat");
        ChatSession session(store, *s.m, *s.be);
        const MessagesResult r =
            session.answer_messages(request({{Role::User, "the cat sat"}, {Role::User, "on the mat"}}), greedy(4));
        QCOMPARE(r.turn.ending, TurnResult::Ending::Answered);
        QCOMPARE(r.conversation_id, row.id);
        QCOMPARE(session.messages(row.id).size(), size_t(3));
        QCOMPARE(store.list_conversations().size(), size_t(1));
        // The app's own send still refuses to stack a question on it.
        store.append_message(row.id, Role::User, "and then");
        QVERIFY(contains(error_of([&] { session.send(row.id, "again", greedy(2)); }), "has no answer"));
    }

    // Refused with a clear error before anything is stored.
    void badRequestsRefused_data() {
        QTest::addColumn<int>("which");
        QTest::addColumn<QString>("says");
        QTest::newRow("no messages") << 0 << "no messages";
        QTest::newRow("last is the assistant's") << 1 << "not the user's";
        QTest::newRow("last is the system's") << 2 << "not the user's";
        QTest::newRow("empty user message") << 3 << "message 2 (user) is empty";
        QTest::newRow("blank system message") << 4 << "message 1 (system) is empty";
        QTest::newRow("bad strategy") << 5 << "nosuch";
        QTest::newRow("bad origin") << 6 << "origin";
    }
    void badRequestsRefused() {
        QFETCH(int, which);
        QFETCH(QString, says);
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        session.answer_messages(request({{Role::User, "the cat sat"}}), greedy(2));
        MessagesRequest r;
        switch (which) {
            case 0: break;
            case 1: r = request({{Role::User, "the cat sat"}, {Role::Assistant, "yes"}}); break;
            case 2: r = request({{Role::System, "terse"}}); break;
            case 3: r = request({{Role::User, "the cat sat"}, {Role::User, " \n\t"}}); break;
            case 4: r = request({{Role::System, "  "}, {Role::User, "the cat sat"}}); break;
            case 5: r = request({{Role::User, "the cat sat"}}, "nosuch"); break;
            case 6:
                r = request({{Role::User, "the cat sat"}});
                r.origin = "web";
                break;
        }
        const int64_t messages_before = static_cast<int64_t>(store.list_messages(1).size());
        const std::string err = error_of([&] { session.answer_messages(r, greedy(2)); });
        QVERIFY2(contains(err, says.toStdString()), err.c_str());
        QCOMPARE(store.list_conversations().size(), size_t(1));
        QCOMPARE(static_cast<int64_t>(store.list_messages(1).size()), messages_before);
    }

    // Cancelled before the first token: nothing is left (the conversation made for it goes, a
    // continued one is as it was). Stopped while streaming: the partial answer is kept, as the
    // server keeps it for a client that went away.
    void cancelledAndStopped() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::atomic<bool> cancel{true};
        TurnCallbacks early;
        early.progress.cancel = &cancel;
        const MessagesResult none = session.answer_messages(request({{Role::User, "the cat sat"}}), greedy(4), early);
        QCOMPARE(none.turn.ending, TurnResult::Ending::Cancelled);
        QCOMPARE(none.conversation_id, int64_t(0));
        QVERIFY(store.list_conversations().empty());

        std::vector<ChatMessage> history = {{Role::User, "the cat sat"}};
        const MessagesResult first = session.answer_messages(request(history), greedy(4));
        history = with_answer(history, first);
        history.emplace_back(Role::User, "on the mat");
        const size_t count = session.messages(first.conversation_id).size();
        const MessagesResult cancelled = session.answer_messages(request(history), greedy(4), early);
        QCOMPARE(cancelled.turn.ending, TurnResult::Ending::Cancelled);
        QCOMPARE(session.messages(first.conversation_id).size(), count);

        std::atomic<bool> stop{false};
        TurnCallbacks stopping;
        stopping.progress.cancel = &stop;
        stopping.on_text = [&](std::string_view) { stop = true; };
        const MessagesResult stopped = session.answer_messages(request(history), greedy(40), stopping);
        QCOMPARE(stopped.turn.ending, TurnResult::Ending::Stopped);
        QCOMPARE(stopped.conversation_id, first.conversation_id);
        const std::vector<MessageRecord> msgs = session.messages(first.conversation_id);
        QCOMPARE(msgs.size(), count + 2);
        QCOMPARE(msgs.back().content, stopped.turn.text);
    }

    // A turn that fails (the history no longer fits the context) stores nothing: a branch or a new
    // conversation made for it goes again, a continued conversation is as it was.
    void failedTurnLeavesNothing() {
        Setup s;
        Store store(s.db);
        ChatSession session(store, *s.m, *s.be);
        std::vector<ChatMessage> history = {{Role::User, "the cat sat"}};
        const MessagesResult first = session.answer_messages(request(history), greedy(4));
        history = with_answer(history, first);
        std::string long_text;
        for (int i = 0; i < 1200; ++i) long_text += "cat mat ";
        const size_t count = session.messages(first.conversation_id).size();
        const std::vector<ChatMessage> continued = history;  // the whole conversation
        const std::vector<ChatMessage> diverging = {history[0], {Role::Assistant, "another answer"}};  // a branch at 1
        const std::vector<ChatMessage> cases[] = {continued, diverging, {}};
        for (const std::vector<ChatMessage>& h : cases) {
            std::vector<ChatMessage> too_long = h;
            too_long.emplace_back(Role::User, long_text);
            const MessagesResult r = session.answer_messages(request(too_long), greedy(4));
            QCOMPARE(r.turn.ending, TurnResult::Ending::Failed);
            QVERIFY2(contains(r.turn.problem, "tokens but the context holds"), r.turn.problem.c_str());
            QVERIFY(!r.turn.changed);
            // The continued conversation is named; a conversation made for the request is gone.
            QCOMPARE(r.conversation_id, &h == &cases[0] ? first.conversation_id : int64_t(0));
            QCOMPARE(store.list_conversations().size(), size_t(1));
            QCOMPARE(session.messages(first.conversation_id).size(), count);
        }
    }
};

QTEST_GUILESS_MAIN(TestAnswerMessages)
#include "test_answer_messages.moc"
