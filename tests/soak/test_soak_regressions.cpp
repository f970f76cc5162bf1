// Regression tests for what the soak test (kvchat_soak) found, each reduced to the fewest steps
// that show it. The seed and step that first showed each are named above it; DEVELOPERS.md ("The
// soak test") says how to replay one.
#include "engine/chat/conversation_registry.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "soak/soak_support.h"
#include "support/chat_turns.h"
#include "support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
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

std::vector<std::pair<Role, std::string>> transcript(const ConversationRegistry& reg, int64_t id) {
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
        int64_t id = 0;
        {
            Store store(s.db);
            ConversationRegistry reg(store, *s.m, *s.be);
            id = reg.create("c");
            reg.send(id, "the cat sat", greedy(4));
            // Regenerate answers a message a crash left unanswered: its tokens are still to prefill.
            if (verb == "regenerate") store.append_message(id, Role::User, "on the mat");
        }
        Store store(s.db);
        ConversationRegistry reg(store, *s.m, *s.be);
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
    // conversation answered (exit 0, possibly a stopped answer) or as it was (exit 130), never
    // with the message unanswered.
    void interruptedChatNeverLeavesTheMessageUnanswered() {
        Setup s;
        const std::string cli = test::cli_path();
        const auto chat = [&](int signal_after_ms) {
            soak::ProcessOptions p;
            p.args = {cli, "chat", "--db", s.db, "--model", s.model_path, "--threads", "1", "--conversation", "c",
                      "--message", "the cat sat on the mat and the dog ran far", "-n", "64", "--greedy", "--json"};
            p.signal = signal_after_ms >= 0 ? SIGINT : 0;
            p.signal_after_ms = signal_after_ms;
            return soak::run_process(p);
        };
        QCOMPARE(chat(-1).exit_code, 0);
        size_t answered = 2;
        for (int at = 0; at < 120; at += 3) {
            const soak::ProcessResult r = chat(at);
            QVERIFY2(r.term_signal == 0 || r.term_signal == SIGINT, r.status().c_str());
            const soak::DbView db = soak::read_db(s.db);
            const soak::DbConversation* c = db.conversation("c");
            QVERIFY(c);
            if (r.exit_code == 0) answered += 2;
            QVERIFY2(c->messages.size() == answered && c->messages.back().role == "assistant",
                     qPrintable(QString("SIGINT at %1 ms: %2, %3 messages, the last one %4's")
                                    .arg(at)
                                    .arg(QString::fromStdString(r.status()))
                                    .arg(c->messages.size())
                                    .arg(QString::fromStdString(c->messages.back().role))));
        }
    }
};

QTEST_GUILESS_MAIN(TestSoakRegressions)
#include "test_soak_regressions.moc"
