// A user message left without an answer (a crash between its commit and the reply): the list
// marks it, a new message is refused rather than stacked on it (the refusal says regenerate
// answers it), regenerate answers it, and blank messages are refused before anything is stored.
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/load_model.h"
#include "support/chat_turns.h"

#include <QTemporaryDir>
#include <QtTest>

#include <functional>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

std::unique_ptr<Model> tiny_model(const QTemporaryDir& dir) { return test::chat_model(dir); }


const ConversationSummary* find(const std::vector<ConversationSummary>& list, int64_t id) {
    for (const ConversationSummary& s : list)
        if (s.id == id) return &s;
    return nullptr;
}

}  // namespace

class TestUnansweredMessage : public QObject {
    Q_OBJECT
private slots:
    void answeredBeforeAnythingIsStacked() {
        QTemporaryDir dir;
        auto model = tiny_model(dir);
        auto be = make_cpu_backend(2);
        const std::string db = (dir.path() + "/kv.db").toStdString();
        // What a process killed while answering leaves behind: a question with no answer.
        const int64_t id =
            test::conversation_answered_once(db, *model, *be, "notes", "the cat", 3, [](Store& store, int64_t c) {
                store.append_message(c, Role::User, "sat on the mat and then a very long question follows it here");
            });
        Store store(db);
        ChatSession reg(store, *model, *be);
        QVERIFY(find(reg.list(), id)->last_unanswered);
        const std::string err = error_of([&] { reg.send(id, "another question", greedy(3)); });
        QVERIFY2(contains(err, "'notes'") && contains(err, "no answer") && contains(err, "regenerate"), err.c_str());
        QVERIFY2(contains(err, "sat on the mat"), err.c_str());  // it quotes the waiting message
        QCOMPARE(reg.messages(id).size(), size_t(3));
        const TurnResult r = reg.regenerate(id, greedy(3));
        QVERIFY(!r.figures.token_ids.empty());
        const auto msgs = reg.messages(id);
        QCOMPARE(msgs.size(), size_t(4));
        QCOMPARE(msgs[3].role, Role::Assistant);
        QVERIFY(!find(reg.list(), id)->last_unanswered);
        reg.send(id, "another question", greedy(3));
        QCOMPARE(reg.messages(id).size(), size_t(6));

        // Blank messages are refused and store nothing; so is a blank edit.
        for (const char* blank : {"", "   ", "\n\t \r\n"}) {
            QVERIFY(contains(error_of([&] { reg.send(id, blank, greedy(3)); }), "empty"));
            QVERIFY(contains(error_of([&] { reg.edit(id, 4, blank, greedy(3)); }), "empty"));
        }
        QCOMPARE(reg.messages(id).size(), size_t(6));
        QCOMPARE(reg.messages(id)[4].content, std::string("another question"));
    }
};

QTEST_GUILESS_MAIN(TestUnansweredMessage)
#include "test_unanswered_message.moc"
