// kvchat-cli chat / conversations / prefix as a user runs them: a conversation that continues in
// a second process prefilling only the new turn, a process killed mid-turn, awkward names and
// text, the prefix commands. The default model where the numbers matter, tiny models elsewhere.
#include "engine/chat/chat_template.h"
#include "engine/compute/backend.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <filesystem>

using namespace kvchat;

namespace {

struct Run {
    int code;
    QByteArray out;
    QString err;
};

Run cli(const QStringList& args, const QByteArray& input = {}, int timeout_ms = 300000) {
    QProcess p;
    p.start(QString::fromUtf8(test::cli_path()), args);
    if (!input.isEmpty()) p.write(input);
    p.closeWriteChannel();
    if (!p.waitForFinished(timeout_ms)) {
        p.kill();
        p.waitForFinished();
        return {-1, {}, "timeout"};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
            QString::fromUtf8(p.readAllStandardError())};
}

QJsonObject json_of(const Run& r) { return QJsonDocument::fromJson(r.out).object(); }

QString tiny_model_path(const QTemporaryDir& dir) {
    test::TinyModelSpec spec;
    spec.n_layer = 6;
    spec.n_embd = 64;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.head_dim = 32;
    spec.n_ff = 128;
    spec.sliding_window = 8;
    const QString path = dir.path() + "/tiny.gguf";
    test::write_tiny_gguf(spec, path.toStdString());
    return path;
}

std::vector<int32_t> ids_of(const QJsonValue& v) {
    std::vector<int32_t> ids;
    for (const QJsonValue& x : v.toArray()) ids.push_back(x.toInt());
    return ids;
}

}  // namespace

class TestCliChat : public QObject {
    Q_OBJECT
private slots:
    // Two processes, one conversation: the second prefills only its own turn (the closing of the
    // first answer, the message, its markers) and answers as a fresh cache over the whole
    // transcript does.
    void secondProcessPrefillsOnlyTheNewTurn() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        const QString first = "Hi! What is two plus two?", second = "And three plus three?";
        const Run a = cli({"chat", "--db", db, "--conversation", "sums", "--message", first, "-n", "24", "--greedy", "--json"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        const QJsonObject ja = json_of(a);
        const Run b = cli({"chat", "--conversation", "sums", "--message", second, "--db", db, "-n", "24", "--greedy", "--json"});
        QVERIFY2(b.code == 0, qPrintable(b.err));
        const QJsonObject jb = json_of(b);

        auto model = Model::load(resolve_model_path(""));
        const Tokenizer& tok = model->tokenizer();
        const SpecialTokens& sp = tok.special();
        // The Gemma turn written out by hand: <start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n
        // (the first answer's <end_of_turn>\n went into the cache when it ended).
        auto n_of = [&](const std::string& text) { return static_cast<int64_t>(tok.encode(text, false).size()); };
        const int64_t new_turn = 1 + n_of("user\n") + n_of(second.toStdString()) + 1 + n_of("\n") + 1 + n_of("model\n");
        QVERIFY(sp.start_of_turn >= 0 && sp.end_of_turn >= 0);
        QCOMPARE(jb["cached_tokens"].toInteger(),
                 ja["prompt_tokens"].toInteger() + static_cast<int64_t>(ids_of(ja["tokens"]).size()) + 1 + n_of("\n"));
        QCOMPARE(jb["prefill_tokens"].toInteger(), new_turn);
        QVERIFY(jb["ttft_ms"].toDouble() > 0);
        QVERIFY(jb["kv_bytes"].toInteger() > 0);

        // The reference for the second answer: the whole transcript on a fresh cache.
        auto be = make_cpu_backend(0);
        const ChatTemplate tmpl = ChatTemplate::for_model(*model);
        const RenderedChat r = tmpl.render({{Role::User, first.toStdString()},
                                            {Role::Assistant, ja["text"].toString().toStdString()},
                                            {Role::User, second.toStdString()}},
                                           true);
        QCOMPARE(jb["prompt_tokens"].toInteger(), static_cast<qint64>(r.tokens.size()));
        auto cache = model->make_default_cache(*be);
        Generator gen(*model, *be);
        GenerationConfig g;
        g.max_new_tokens = 24;
        g.sampling.greedy = true;
        QCOMPARE(jb["text"].toString().toStdString(), gen.generate(*cache, r.tokens, g).text);

        const Run list = cli({"conversations", "--db", db, "--json"});
        QCOMPARE(list.code, 0);
        const QJsonArray arr = QJsonDocument::fromJson(list.out).array();
        QCOMPARE(arr.size(), 1);
        QCOMPARE(arr[0].toObject()["title"].toString(), QString("sums"));
        QCOMPARE(arr[0].toObject()["messages"].toInt(), 4);
    }

    // SIGKILL while the model is answering: the database opens, every earlier message is there,
    // and the conversation goes on.
    void killedMidTurnLosesNothing() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        const Run a = cli({"chat", "--db", db, "--conversation", "story", "--message", "Name a colour.", "-n", "8", "--greedy"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        QProcess p;
        p.start(QString::fromUtf8(test::cli_path()),
                {"chat", "--db", db, "--conversation", "story", "--message", "Tell me a very long story about a dragon.",
                 "-n", "2000", "--greedy"});
        QVERIFY(p.waitForStarted());
        // Wait until the answer is streaming, then kill without warning.
        QByteArray streamed;
        for (int i = 0; i < 600 && streamed.size() < 8; ++i) {
            p.waitForReadyRead(100);
            streamed += p.readAllStandardOutput();
        }
        QVERIFY2(streamed.size() >= 8, "the answer never started");
        ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
        p.waitForFinished();
        {
            Store store(db.toStdString());
            QCOMPARE(QString::fromStdString(store.pragma("integrity_check")), QString("ok"));
            const auto c = store.find_conversation("story");
            QVERIFY(c);
            const auto msgs = store.list_messages(c->id);
            QCOMPARE(msgs.size(), size_t(3));  // the first turn, and the user's message of the killed one
            QCOMPARE(msgs[0].content, std::string("Name a colour."));
            QCOMPARE(msgs[2].content, std::string("Tell me a very long story about a dragon."));
        }
        const Run b = cli({"chat", "--db", db, "--conversation", "story", "--message", "Shorter, please.", "-n", "8",
                           "--greedy", "--json"});
        QVERIFY2(b.code == 0, qPrintable(b.err));
        Store store(db.toStdString());
        QCOMPARE(store.list_messages(store.find_conversation("story")->id).size(), size_t(5));
    }

    // Names and text that could trip SQL, the shell or UTF-8 handling come back exactly; invalid
    // UTF-8 (typed into the interactive session) is replaced, with a notice.
    void awkwardNamesAndText() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const QString name = "it's \"quoted\"'; DROP TABLE conversations; --";
        const QString text = "O'Brien said \"hi\"; DROP TABLE messages; -- \\x00 <start_of_turn> ∑ 🐈";
        const Run a = cli({"chat", "--model", model, "--db", db, "--conversation", name, "--message", text, "-n", "4",
                           "--greedy", "--json"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        const QByteArray bad("the \xff cat \xc3\n/quit\n");
        const Run b = cli({"chat", "--model", model, "--db", db, "--conversation", name, "-n", "4", "--greedy"}, bad);
        QVERIFY2(b.code == 0, qPrintable(b.err));
        QVERIFY2(b.err.contains("invalid UTF-8"), qPrintable(b.err));
        Store store(db.toStdString());
        const auto c = store.find_conversation(name.toStdString());
        QVERIFY(c);
        const auto msgs = store.list_messages(c->id);
        QCOMPARE(msgs.size(), size_t(4));
        QCOMPARE(QString::fromStdString(msgs[0].content), text);
        QCOMPARE(msgs[2].content, std::string("the \xef\xbf\xbd cat \xef\xbf\xbd"));
        QVERIFY(msgs[2].content_repaired);
        const Run list = cli({"conversations", "--db", db, "--json"});
        QCOMPARE(QJsonDocument::fromJson(list.out).array()[0].toObject()["title"].toString(), name);
    }

    void prefixCommands() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const Run s = cli({"prefix", "save", "cats", "--text", "the cat sat on the mat", "--model", model, "--db", db});
        QVERIFY2(s.code == 0, qPrintable(s.err));
        QVERIFY(cli({"prefix", "--db", db, "save", "cats", "--text", "again", "--model", model}).code != 0);
        const Run c = cli({"chat", "--model", model, "--db", db, "--conversation", "x", "--prefix", "cats", "--message",
                           "a mat", "-n", "4", "--greedy", "--json"});
        QVERIFY2(c.code == 0, qPrintable(c.err));
        const QJsonObject jc = json_of(c);
        QVERIFY(jc["cached_tokens"].toInteger() > 5);
        QCOMPARE(jc["prefill_tokens"].toInteger(), jc["prompt_tokens"].toInteger() - jc["cached_tokens"].toInteger());
        QCOMPARE(cli({"prefix", "rename", "cats", "felines", "--db", db}).code, 0);
        Run l = cli({"prefix", "list", "--db", db, "--json"});
        QCOMPARE(l.code, 0);
        QJsonArray arr = QJsonDocument::fromJson(l.out).array();
        QCOMPARE(arr.size(), 1);
        QCOMPARE(arr[0].toObject()["name"].toString(), QString("felines"));
        QCOMPARE(arr[0].toObject()["use_count"].toInt(), 1);
        const std::string snapshot = Store(db.toStdString()).find_prefix("felines")->snapshot;
        QCOMPARE(cli({"--db", db, "prefix", "delete", "felines"}).code, 0);
        if (!snapshot.empty())
            QVERIFY(!std::filesystem::exists((dir.path() + "/snapshots/").toStdString() + snapshot));
        l = cli({"prefix", "list", "--db", db, "--json"});
        QCOMPARE(QJsonDocument::fromJson(l.out).array().size(), 0);
        const Run missing = cli({"prefix", "delete", "felines", "--db", db});
        QCOMPARE(missing.code, 2);
        QVERIFY(missing.err.contains("felines"));
        const Run bad = cli({"prefix", "frobnicate", "--db", db});
        QCOMPARE(bad.code, 2);
        // A conversation's opening system message saved as a prefix.
        QCOMPARE(cli({"chat", "--model", model, "--db", db, "--conversation", "s", "--system", "a cat on a mat",
                      "--message", "the", "-n", "2", "--greedy"}).code, 0);
        const Run fc = cli({"prefix", "save", "opening", "--conversation", "s", "--model", model, "--db", db});
        QVERIFY2(fc.code == 0, qPrintable(fc.err));
        QCOMPARE(Store(db.toStdString()).find_prefix("opening")->text, std::string("a cat on a mat"));
        QCOMPARE(cli({"prefix", "save", "none", "--conversation", "nosuch", "--model", model, "--db", db}).code, 2);
    }

    // The interactive session: a message, then /regenerate replaces its answer.
    void interactiveRegenerate() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const Run r = cli({"chat", "--model", model, "--db", db, "--conversation", "i", "-n", "4", "--greedy"},
                          "the cat\n/regenerate\n/quit\n");
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QCOMPARE(r.err.count("tokens prefilled"), 2);
        Store store(db.toStdString());
        const auto msgs = store.list_messages(store.find_conversation("i")->id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[0].content, std::string("the cat"));
        QCOMPARE(msgs[1].role, Role::Assistant);
    }

    void chatNeedsConversation() {
        const Run r = cli({"chat", "--message", "hi"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--conversation"));
        QCOMPARE(cli({"chat", "extra", "--conversation", "x"}).code, 2);
    }
};

QTEST_GUILESS_MAIN(TestCliChat)
#include "test_cli_chat.moc"
