// ChatSession::answer_messages on the installed models, as an OpenAI client drives it (issue 21's
// 10-turn test, at the engine): each turn's request carries the whole history, with the answers
// as text (the client has no token ids), and must reuse at least the previous turn's prompt;
// a session reopened on the same database (a restarted server) still does. On the reference model
// (Gemma 3, sliding-window layers, SentencePiece) and the app's chat model (SmolLM2, ChatML,
// byte-level BPE, where an answer's text often tokenizes otherwise than it was generated).
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/model/model_path.h"

#include <QTemporaryDir>
#include <QtTest>

#include <sys/stat.h>

using namespace kvchat;

namespace {

TurnOptions greedy(int n) {
    TurnOptions o;
    o.generation.max_new_tokens = n;
    o.generation.sampling.greedy = true;
    return o;
}

const char* const kQuestions[] = {
    "Hi! What is two plus two?", "And three plus three?", "Name a fruit that is yellow.", "And one that is red?",
    "What colour is the sky?", "Why is that?", "Name a large animal.", "Where does it live?",
    "Say something about rivers.", "Thank you, goodbye."};

}  // namespace

class TestAnswerMessagesModel : public QObject {
    Q_OBJECT
private slots:
    void tenTurnsReuseThePreviousPrompt_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("gemma-3-270m") << QString(kDefaultModelFile);
        QTest::newRow("smollm2-135m-instruct") << QString(kChatModelFile);
    }
    void tenTurnsReuseThePreviousPrompt() {
        QFETCH(QString, file);
        const std::string path = installed_model_path(file.toStdString());
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0)
            QSKIP(qPrintable(QString("%1 is not installed (packaging/kvchat.sh model)").arg(path.c_str())));
        auto model = Model::load(path);
        auto be = make_cpu_backend(0);
        QTemporaryDir dir;
        const std::string db = (dir.path() + "/kv.db").toStdString();
        std::vector<ChatMessage> history;
        int64_t id = 0, previous_prompt = 0;
        auto turn = [&](ChatSession& session, int k) {
            history.emplace_back(Role::User, kQuestions[k]);
            MessagesRequest request;
            request.messages = history;
            const MessagesResult r = session.answer_messages(request, greedy(24));
            QVERIFY2(r.turn.ending == TurnResult::Ending::Answered, r.turn.problem.c_str());
            if (k == 0) {
                id = r.conversation_id;
                QCOMPARE(r.reused_from, int64_t(0));
            } else {
                QCOMPARE(r.conversation_id, id);
                QCOMPARE(r.reused_from, id);
                QVERIFY2(r.turn.figures.cached_tokens >= previous_prompt,
                         qPrintable(QString("turn %1: %2 tokens reused, the previous prompt had %3")
                                        .arg(k + 1)
                                        .arg(r.turn.figures.cached_tokens)
                                        .arg(previous_prompt)));
                QCOMPARE(r.turn.figures.computed_tokens, r.turn.figures.prompt_tokens - r.turn.figures.cached_tokens);
            }
            previous_prompt = r.turn.figures.prompt_tokens;
            history.emplace_back(Role::Assistant, r.turn.text);
        };
        {
            Store store(db);
            ChatSession session(store, *model, *be);
            for (int k = 0; k < 9; ++k) {
                turn(session, k);
                if (QTest::currentTestFailed()) return;
            }
        }
        // The server restarted before the last turn: the snapshot on disk stands in.
        Store store(db);
        ChatSession session(store, *model, *be);
        turn(session, 9);
        QCOMPARE(store.list_conversations().size(), size_t(1));
        QCOMPARE(session.messages(id).size(), size_t(20));
    }
};

QTEST_GUILESS_MAIN(TestAnswerMessagesModel)
#include "test_answer_messages_model.moc"
