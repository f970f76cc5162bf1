// kvchat-cli chat / conversations / prefix as a user runs them: a conversation that continues in
// a second process prefilling only the new turn, a process killed mid-turn, awkward names and
// text, the prefix commands. The default model where the numbers matter, tiny models elsewhere.
#include "engine/cache/cache_spec.h"
#include "engine/chat/chat_settings.h"
#include "engine/chat/chat_template.h"
#include "engine/compute/backend.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <sys/resource.h>

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

// The messages of conversation `title` in `db` (none when it does not exist), read without writing.
std::vector<MessageRecord> stored_messages(const QString& db, const QString& title) {
    Store store(db.toStdString(), Store::Access::ReadOnly);
    const auto c = store.find_conversation(title.toStdString());
    return c ? store.list_messages(c->id) : std::vector<MessageRecord>{};
}

bool conversation_exists(const QString& db, const QString& title) {
    return Store(db.toStdString(), Store::Access::ReadOnly).find_conversation(title.toStdString()).has_value();
}

// Starts a chat turn on the default model that answers at length and waits until its answer is
// streaming (at least `bytes` of it printed).
bool start_long_answer(QProcess& p, const QString& db, const QString& title, QByteArray& streamed, int bytes = 8) {
    p.start(QString::fromUtf8(test::cli_path()),
            {"chat", "--db", db, "--conversation", title, "--message", "Tell me a very long story about a dragon.",
             "-n", "2000", "--greedy"});
    if (!p.waitForStarted()) return false;
    for (int i = 0; i < 1200 && streamed.size() < bytes && p.state() == QProcess::Running; ++i) {
        p.waitForReadyRead(100);
        streamed += p.readAllStandardOutput();
    }
    return streamed.size() >= bytes;
}

// Whether the bytes hold a control character other than tab and newline (ESC, BEL, BS, DEL, C1).
bool has_control_character(const QByteArray& bytes) {
    for (int i = 0; i < bytes.size(); ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) return true;
        if (c == 0xC2 && i + 1 < bytes.size() && static_cast<unsigned char>(bytes[i + 1]) >= 0x80 &&
            static_cast<unsigned char>(bytes[i + 1]) <= 0x9F)
            return true;
    }
    return false;
}

QString tiny_model_path(const QTemporaryDir& dir) {
    const QString path = dir.path() + "/tiny.gguf";
    test::write_tiny_gguf(test::chat_sized_spec(), path.toStdString());
    return path;
}

std::vector<int32_t> ids_of(const QJsonValue& v) {
    std::vector<int32_t> ids;
    for (const QJsonValue& x : v.toArray()) ids.push_back(x.toInt());
    return ids;
}

// The tokens of a Gemma user turn after a cached transcript, written out by hand:
// <start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n and nothing else.
int64_t gemma_user_turn_tokens(const Tokenizer& tok, const std::string& text) {
    auto n_of = [&](const std::string& t) { return static_cast<int64_t>(tok.encode(t, false).size()); };
    return 1 + n_of("user\n") + n_of(text) + 1 + n_of("\n") + 1 + n_of("model\n");
}

// The reference answer: the rendered chat on a fresh CPU cache, greedy, up to 16 tokens or the
// template's stop tokens (what the suites' `-n 16 --greedy` turns ask of kvchat-cli).
std::string fresh_greedy_answer(Model& model, const ChatTemplate& tmpl, const RenderedChat& r) {
    auto be = make_cpu_backend(0);
    auto cache = model.make_default_cache(*be);
    Generator gen(model, *be);
    GenerationConfig g;
    g.max_new_tokens = 16;
    g.sampling.greedy = true;
    g.stop_tokens = tmpl.stop_tokens();
    return gen.generate(*cache, r.tokens, g).text;
}

}  // namespace

class TestCliChat : public QObject {
    Q_OBJECT
    // switchOnReopenedConversation's answers without a switch (a new message, a regenerate).
    std::vector<int32_t> want_more_, want_regenerated_;

private slots:
    // chat samples as the window does: the chat defaults issue 20 chose (temperature 0.7, top-k 40,
    // top-p 0.9, min-p 0.05, repetition penalty 1.1, 1,024 tokens), not generate's text-completion
    // ones; an option given wins, and a setting the window saved is used.
    void chatSamplesWithTheChatSettings() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir), db = dir.path() + "/kv.db";
        const auto sampling = [&](const QStringList& extra) {
            const Run r = cli(QStringList{"chat", "--model", model, "--db", db, "--conversation", "s", "--message",
                                          "hello there", "--json"} + extra);
            if (r.code != 0) qWarning() << r.err;
            return json_of(r)["sampling"].toObject();
        };
        QJsonObject s = sampling({"-n", "2"});
        QCOMPARE(s["greedy"].toBool(), false);
        QCOMPARE(float(s["temperature"].toDouble()), 0.7f);
        QCOMPARE(s["top_k"].toInt(), 40);
        QCOMPARE(float(s["top_p"].toDouble()), 0.9f);
        QCOMPARE(float(s["min_p"].toDouble()), 0.05f);
        QCOMPARE(float(s["repeat_penalty"].toDouble()), 1.1f);
        QCOMPARE(s["max_new_tokens"].toInt(), 2);
        s = sampling({"-n", "2", "--temp", "0.2", "--repeat-penalty", "1.3"});
        QCOMPARE(float(s["temperature"].toDouble()), 0.2f);
        QCOMPARE(float(s["repeat_penalty"].toDouble()), 1.3f);
        QCOMPARE(s["top_k"].toInt(), 40);
        s = sampling({"-n", "2", "--greedy"});
        QCOMPARE(s["greedy"].toBool(), true);
        QCOMPARE(float(s["repeat_penalty"].toDouble()), 1.0f);  // the plain argmax
        s = sampling({"-n", "2", "--greedy", "--repeat-penalty", "1.2"});
        QCOMPARE(float(s["repeat_penalty"].toDouble()), 1.2f);
        // Without -n the settings' answer length.
        {
            Store store(db.toStdString());
            ChatSettings c = ChatSettings::load(store);
            c.max_new_tokens = 3;
            c.sampling.top_k = 7;
            c.save(store);
        }
        s = sampling({});
        QCOMPARE(s["max_new_tokens"].toInt(), 3);
        QCOMPARE(s["top_k"].toInt(), 7);
    }

    // A conversation's own values (the window's chat panel stores them) are the defaults of its
    // turns in kvchat-cli too, shown in "sampling"; an option given still wins; another
    // conversation keeps the global ones. A second turn reports the prefill its reuse saved,
    // priced at the measured batch speed (kept in the settings).
    void chatUsesTheConversationsOwnSettings() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir), db = dir.path() + "/kv.db";
        auto chat = [&](const QString& title, const QStringList& extra) {
            const Run r = cli(QStringList{"chat", "--model", model, "--db", db, "--conversation", title, "--message",
                                          "hello there", "--json"} + extra);
            if (r.code != 0) qWarning() << r.err;
            return json_of(r);
        };
        QCOMPARE(chat("own", {"-n", "2"})["sampling"].toObject()["context_length"].type(), QJsonValue::Null);
        {
            Store store(db.toStdString());
            ConversationSettings own;
            own.temperature = 0.3;
            own.top_k = 5;
            own.seed = 77;
            own.max_new_tokens = 3;
            own.context_length = 512;
            store.set_conversation_settings(store.find_conversation("own")->id, own);
        }
        QJsonObject j = chat("own", {});
        QJsonObject s = j["sampling"].toObject();
        QCOMPARE(float(s["temperature"].toDouble()), 0.3f);
        QCOMPARE(s["top_k"].toInt(), 5);
        QCOMPARE(s["seed"].toInteger(), 77);
        QCOMPARE(s["max_new_tokens"].toInt(), 3);
        QCOMPARE(s["context_length"].toInteger(), 512);
        QCOMPARE(float(s["top_p"].toDouble()), 0.9f);  // not set: the global value
        QVERIFY(j["cached_tokens"].toInteger() > 0);
        QVERIFY2(j["prefill_saved_ms"].isDouble() && j["prefill_saved_ms"].toDouble() > 0,
                 qPrintable(QJsonDocument(j).toJson()));
        s = chat("own", {"-n", "2", "--temp", "0.9"})["sampling"].toObject();
        QCOMPARE(float(s["temperature"].toDouble()), 0.9f);
        QCOMPARE(s["max_new_tokens"].toInt(), 2);
        QCOMPARE(s["top_k"].toInt(), 5);
        s = chat("other", {"-n", "2"})["sampling"].toObject();
        QCOMPARE(s["top_k"].toInt(), 40);
        QCOMPARE(s["context_length"].type(), QJsonValue::Null);
        // The stored answers keep how they ended, as the JSON said.
        const auto msgs = stored_messages(db, "own");
        QVERIFY(msgs.back().stats.stop_reason.has_value());
    }

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
        QVERIFY2(test::signal_child(p.processId(), SIGKILL), "the process had already ended");
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
        // The unanswered message is shown as such, and a new message is not stacked on it.
        const Run list = cli({"conversations", "--db", db});
        QCOMPARE(list.code, 0);
        QVERIFY2(list.out.contains("\tunanswered"), list.out.constData());
        QVERIFY(QJsonDocument::fromJson(cli({"conversations", "--db", db, "--json"}).out)[0]["unanswered"].toBool());
        const Run refused = cli({"chat", "--db", db, "--conversation", "story", "--message", "Shorter, please.", "-n",
                                 "8", "--greedy"});
        QCOMPARE(refused.code, 2);
        QVERIFY2(refused.err.contains("has no answer") && refused.err.contains("--regenerate"), qPrintable(refused.err));
        {
            Store store(db.toStdString());
            QCOMPARE(store.list_messages(store.find_conversation("story")->id).size(), size_t(3));
        }
        // --regenerate answers it; then the conversation goes on.
        const Run answered = cli({"chat", "--db", db, "--conversation", "story", "--regenerate", "-n", "8", "--greedy"});
        QVERIFY2(answered.code == 0, qPrintable(answered.err));
        QVERIFY(!cli({"conversations", "--db", db}).out.contains("unanswered"));
        const Run b = cli({"chat", "--db", db, "--conversation", "story", "--message", "Shorter, please.", "-n", "8",
                           "--greedy", "--json"});
        QVERIFY2(b.code == 0, qPrintable(b.err));
        Store store(db.toStdString());
        const auto msgs = store.list_messages(store.find_conversation("story")->id);
        QCOMPARE(msgs.size(), size_t(6));
        QCOMPARE(msgs[2].content, std::string("Tell me a very long story about a dragon."));
        QCOMPARE(msgs[3].role, Role::Assistant);
        QCOMPARE(msgs[4].content, std::string("Shorter, please."));
    }

    // Issue 25's sequence: a conversation answered in one process, then reopened from its snapshot
    // in another with --cache STRATEGY (a new message, or --regenerate). It crashed (exit 139) and
    // left the message unanswered. Now the turn answers, nothing is left unanswered, the strategy
    // is the conversation's, and where the switch loses nothing (offloaded and static are
    // lossless; quantized:nbits=4 holds these ~90 tokens in its 128-token residual; the sink window
    // of 64 still holds a regenerated answer) the tokens are those of the same conversation
    // without a switch.
    void switchOnReopenedConversation_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<bool>("regenerate");
        QTest::addColumn<bool>("exact");
        for (bool regen : {false, true}) {
            const QString how = regen ? " --regenerate" : " --message more";
            QTest::newRow(qPrintable("offloaded" + how)) << "offloaded" << regen << true;
            QTest::newRow(qPrintable("quantized:nbits=4" + how)) << "quantized:nbits=4" << regen << true;
            QTest::newRow(qPrintable("sink:window=64,sinks=4" + how)) << "sink:window=64,sinks=4" << regen << regen;
            QTest::newRow(qPrintable("static:max_len=512" + how)) << "static:max_len=512" << regen << true;
        }
    }
    void switchOnReopenedConversation() {
        QFETCH(QString, spec);
        QFETCH(bool, regenerate);
        QFETCH(bool, exact);
        if (!QFileInfo::exists(QString::fromStdString(resolve_model_path(""))))
            QSKIP("default model not installed (packaging/kvchat.sh model)");
        const QStringList first = {"--message", "Write a story about a dragon", "-n", "40", "--greedy", "--json"};
        const QStringList second = regenerate ? QStringList{"--regenerate", "-n", "20", "--greedy", "--json"}
                                              : QStringList{"--message", "more", "-n", "20", "--greedy", "--json"};
        auto turn = [](const QString& db, const QStringList& args) {
            const Run r = cli(QStringList{"chat", "--db", db, "--conversation", "o"} + args);
            if (r.code != 0) qWarning("exit %d: %s", r.code, qPrintable(r.err));
            return r;
        };
        QTemporaryDir dir;
        // The same two turns without a switch.
        std::vector<int32_t>& want = regenerate ? want_regenerated_ : want_more_;
        if (want.empty()) {
            const QString ref = dir.path() + "/ref.db";
            QCOMPARE(turn(ref, first).code, 0);
            const Run r = turn(ref, second);
            QCOMPARE(r.code, 0);
            want = ids_of(json_of(r)["tokens"]);
            QCOMPARE(want.size(), size_t(20));
        }
        const QString db = dir.path() + "/k.db";
        QCOMPARE(turn(db, first).code, 0);
        const Run r = turn(db, QStringList{"--cache", spec} + second);
        QCOMPARE(r.code, 0);
        QVERIFY2(!r.err.contains("could not be"), qPrintable(r.err));
        const std::vector<int32_t> got = ids_of(json_of(r)["tokens"]);
        QCOMPARE(got.size(), size_t(20));
        if (exact) QCOMPARE(got, want);
        const QJsonObject listed = QJsonDocument::fromJson(cli({"conversations", "--db", db, "--json"}).out)[0].toObject();
        QVERIFY(!listed["unanswered"].toBool());
        // The next message is taken, under the new strategy.
        QCOMPARE(turn(db, {"--message", "Thanks.", "-n", "4", "--greedy"}).code, 0);
        Store store(db.toStdString());
        QCOMPARE(QString::fromStdString(store.find_conversation("o")->cache_spec),
                 QString::fromStdString(to_string(parse_cache_spec(spec.toStdString()))));
    }

    // Issue 25: a turn fails on a full slow-tier disk (a file size limit stands in for it, with
    // SIGXFSZ ignored so writes fail with EFBIG as with ENOSPC) and leaves the conversation as it
    // was; then the message sent again with --cache offloaded:dir=<another folder> reopens the
    // conversation from its snapshot, converts it and answers (it crashed).
    void switchAfterAFullDisk() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir), db = dir.path() + "/k.db";
        QVERIFY(QDir(dir.path()).mkpath("a") && QDir(dir.path()).mkpath("b"));
        const QString a = "offloaded:dir=" + dir.path() + "/a", b = "offloaded:dir=" + dir.path() + "/b";
        const QStringList chat = {"chat", "--model", model, "--db", db, "--conversation", "o", "-n", "4", "--greedy"};
        const Run first = cli(chat + QStringList{"--cache", a, "--message", "the cat sat"});
        QVERIFY2(first.code == 0, qPrintable(first.err));

        QProcess p;
        p.setChildProcessModifier([] {
            std::signal(SIGXFSZ, SIG_IGN);
            const rlimit rl{8 << 20, 8 << 20};  // the database fits; a spill file's second layer (at 64 GiB) does not
            ::setrlimit(RLIMIT_FSIZE, &rl);
        });
        p.start(QString::fromUtf8(test::cli_path()), chat + QStringList{"--message", "on the mat"});
        QVERIFY(p.waitForFinished(120000));
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 2);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains("disk is full"), qPrintable(err));
        const QJsonObject failed = QJsonDocument::fromJson(cli({"conversations", "--db", db, "--json"}).out)[0].toObject();
        QVERIFY(!failed["unanswered"].toBool());
        QCOMPARE(failed["messages"].toInt(), 2);

        const Run answered = cli(chat + QStringList{"--cache", b, "--message", "on the mat", "--json"});
        QVERIFY2(answered.code == 0, qPrintable(answered.err));
        const QJsonObject j = json_of(answered);
        QVERIFY2(QJsonDocument(j["notices"].toArray()).toJson().contains("converted"), answered.out.constData());
        QCOMPARE(ids_of(j["tokens"]).empty(), false);
        const QJsonObject listed = QJsonDocument::fromJson(cli({"conversations", "--db", db, "--json"}).out)[0].toObject();
        QVERIFY(!listed["unanswered"].toBool());
        Store store(db.toStdString());
        QCOMPARE(QString::fromStdString(store.find_conversation("o")->cache_spec),
                 QString::fromStdString(to_string(parse_cache_spec(b.toStdString()))));
    }

    // A title with a tab or a newline stays one field of one line in `conversations`; blank
    // messages and blank prefix texts are refused.
    void titlesAndBlankText() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const QString name = "two\nlines\tand a tab \\ slash";
        const Run a = cli({"chat", "--model", model, "--db", db, "--conversation", name, "--message", "hi", "-n", "2",
                           "--greedy"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        const Run list = cli({"conversations", "--db", db});
        QCOMPARE(list.code, 0);
        const QList<QByteArray> lines = list.out.trimmed().split('\n');
        QCOMPARE(lines.size(), 1);
        const QList<QByteArray> fields = lines[0].split('\t');
        QVERIFY2(fields.size() >= 3, list.out.constData());
        QCOMPARE(fields[0], QByteArray("two\\nlines\\tand a tab \\\\ slash"));
        QCOMPARE(fields[1], QByteArray("2 messages"));
        for (const QString& blank : {QString("   "), QString(" \n\t ")}) {
            const Run r = cli({"chat", "--model", model, "--db", db, "--conversation", name, "--message", blank});
            QCOMPARE(r.code, 2);
            QVERIFY2(r.err.contains("empty"), qPrintable(r.err));
            const Run p = cli({"prefix", "save", "blank", "--text", blank, "--model", model, "--db", db});
            QCOMPARE(p.code, 2);
            QVERIFY2(p.err.contains("empty"), qPrintable(p.err));
        }
        Store store(db.toStdString());
        QCOMPARE(store.list_messages(store.find_conversation(name.toStdString())->id).size(), size_t(2));
        QVERIFY(store.list_prefixes().empty());
    }

    // kvchat-cli storage: lists every conversation and prefix with its saved cache (the same
    // sizes the files have), prune --budget removes the least recently used first and keeps the
    // messages, budget sets the setting later saves obey, drop removes one; bad input is named.
    void storageCommands() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        for (const QString& name : {QString("old"), QString("mid"), QString("new")}) {
            const Run a = cli({"chat", "--model", model, "--db", db, "--conversation", name, "--message",
                               "the cat sat on the mat", "-n", "4", "--greedy"});
            QVERIFY2(a.code == 0, qPrintable(a.err));
        }
        QCOMPARE(cli({"prefix", "save", "sys", "--text", "You are a cat.", "--model", model, "--db", db}).code, 0);
        Run list = cli({"storage", "--db", db, "--json"});
        QVERIFY2(list.code == 0, qPrintable(list.err));
        QJsonObject o = json_of(list);
        const QJsonArray rows = o["caches"].toArray();
        QCOMPARE(rows.size(), 4);
        qint64 total = 0;
        Store store(db.toStdString(), Store::Access::ReadOnly);
        for (const QJsonValue& v : rows) {
            const QJsonObject r = v.toObject();
            QVERIFY(r["saved"].toBool());
            QVERIFY(r["tokens"].toInteger() > 0);
            QCOMPARE(r["cache"].toString(), QString("dynamic"));
            const bool conv = r["kind"].toString() == "conversation";
            const std::string file = conv ? store.find_conversation(r["name"].toString().toStdString())->snapshot
                                          : store.find_prefix(r["name"].toString().toStdString())->snapshot;
            QCOMPARE(r["bytes"].toInteger(), qint64(std::filesystem::file_size(store.snapshot_path(file))));
            total += r["bytes"].toInteger();
        }
        QCOMPARE(o["total_bytes"].toInteger(), total);
        QVERIFY(o["budget_is_default"].toBool());
        QCOMPARE(rows[0].toObject()["name"].toString(), QString("sys"));  // most recently used first
        // The text form: one line each, then the total.
        list = cli({"storage", "--db", db});
        QCOMPARE(list.code, 0);
        QCOMPARE(list.out.trimmed().split('\n').size(), 5);
        QVERIFY(list.out.contains("conversation\told\t"));
        QVERIFY(list.out.contains("total\t" + QByteArray::number(total) + " bytes"));
        // Prune to what holds the two most recent: "old" and "mid" go, oldest first.
        const qint64 keep = rows[0].toObject()["bytes"].toInteger() + rows[1].toObject()["bytes"].toInteger();
        const Run prune = cli({"storage", "prune", "--budget", QString::number(keep), "--db", db, "--json"});
        QVERIFY2(prune.code == 0, qPrintable(prune.err));
        const QJsonArray removed = json_of(prune)["removed"].toArray();
        QCOMPARE(removed.size(), 2);
        QCOMPARE(removed[0].toObject()["name"].toString(), QString("old"));
        QCOMPARE(removed[1].toObject()["name"].toString(), QString("mid"));
        QCOMPARE(json_of(prune)["total_bytes"].toInteger(), keep);
        QCOMPARE(stored_messages(db, "old").size(), size_t(2));
        QVERIFY(store.find_conversation("old")->snapshot.empty());
        // The budget setting: a turn in "old" saves its cache again and evicts the least recent.
        QCOMPARE(cli({"storage", "budget", QString::number(keep), "--db", db}).code, 0);
        const Run again = cli({"chat", "--model", model, "--db", db, "--conversation", "old", "--message", "and the dog",
                               "-n", "2", "--greedy"});
        QVERIFY2(again.code == 0, qPrintable(again.err));
        o = json_of(cli({"storage", "--db", db, "--json"}));
        QVERIFY(!o["budget_is_default"].toBool());
        QCOMPARE(o["budget_bytes"].toInteger(), keep);
        QVERIFY(o["total_bytes"].toInteger() <= keep);
        QVERIFY(!store.find_conversation("old")->snapshot.empty());
        QVERIFY(store.find_conversation("new")->snapshot.empty());  // least recently used by then
        QCOMPARE(cli({"storage", "budget", "default", "--db", db}).code, 0);
        QVERIFY(json_of(cli({"storage", "--db", db, "--json"}))["budget_is_default"].toBool());
        // drop one.
        const Run drop = cli({"storage", "drop", "--conversation", "old", "--db", db});
        QVERIFY2(drop.code == 0 && drop.out.contains("removed"), qPrintable(drop.err));
        QVERIFY(store.find_conversation("old")->snapshot.empty());
        QCOMPARE(stored_messages(db, "old").size(), size_t(4));
        // Bad input.
        for (const QStringList& bad : {QStringList{"storage", "prune", "--budget", "lots", "--db", db},
                                       QStringList{"storage", "prune", "--budget", "-5", "--db", db},
                                       QStringList{"storage", "budget", "--db", db},
                                       QStringList{"storage", "drop", "--db", db},
                                       QStringList{"storage", "drop", "--conversation", "nope", "--db", db},
                                       QStringList{"storage", "shrink", "--db", db},
                                       QStringList{"storage", "--db", dir.path() + "/missing.db"}}) {
            const Run r = cli(bad);
            QVERIFY2(r.code != 0 && !r.err.isEmpty(), qPrintable(bad.join(' ')));
        }
        QVERIFY(cli({"storage", "prune", "--budget", "lots", "--db", db}).err.contains("number of bytes"));
        QVERIFY(cli({"storage", "drop", "--conversation", "nope", "--db", db}).err.contains("no conversation named"));
        QVERIFY(!std::filesystem::exists((dir.path() + "/missing.db").toStdString()));
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
        // A conversation saved as a prefix: all its messages unless --messages says how many.
        QCOMPARE(cli({"chat", "--model", model, "--db", db, "--conversation", "s", "--system", "a cat on a mat",
                      "--message", "the", "-n", "2", "--greedy"}).code, 0);
        const Run fc = cli({"prefix", "save", "opening", "--conversation", "s", "--model", model, "--db", db});
        QVERIFY2(fc.code == 0, qPrintable(fc.err));
        QVERIFY2(fc.out.contains("3 messages"), fc.out.constData());
        const auto opening = Store(db.toStdString()).find_prefix("opening");
        QCOMPARE(opening->text, std::string("a cat on a mat"));
        QCOMPARE(opening->messages.size(), size_t(3));
        QCOMPARE(opening->messages[1].content, std::string("the"));
        QCOMPARE(cli({"prefix", "save", "none", "--conversation", "nosuch", "--model", model, "--db", db}).code, 2);
    }

    // `prefix save NAME --conversation CONV --messages N` on a tiny model: the count, the list,
    // edit, and every kind of bad input refused with a message that says what is wrong.
    void prefixFromConversationMessages() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const QString conv = "Bob's \"few-shot\"'; DROP TABLE messages; --";
        const QString name = "it's a 'prefix' \"too\"";
        auto chat = [&](const QString& c, const QString& message, const QStringList& more = {}) {
            return cli(QStringList{"chat", "--model", model, "--db", db, "--conversation", c, "--message", message, "-n",
                                   "3", "--greedy", "--json"} + more);
        };
        QCOMPARE(chat(conv, "the cat", {"--system", "a cat on a mat"}).code, 0);
        QCOMPARE(chat(conv, "a mat").code, 0);  // five messages: system, user, assistant, user, assistant
        auto save = [&](const QStringList& more) {
            return cli(QStringList{"prefix", "--model", model, "--db", db, "--json"} + more);
        };
        const Run s3 = save({"save", name, "--conversation", conv, "--messages", "3"});
        QVERIFY2(s3.code == 0, qPrintable(s3.err));
        QCOMPARE(json_of(s3)["messages"].toInt(), 3);
        const Run all = save({"save", "all", "--conversation", conv});
        QVERIFY2(all.code == 0, qPrintable(all.err));
        QCOMPARE(json_of(all)["messages"].toInt(), 5);
        QVERIFY(json_of(all)["tokens"].toInt() > json_of(s3)["tokens"].toInt());

        // Bad input: each refused with exit code 2 and a message naming the problem.
        const struct {
            QStringList args;
            const char* says;
        } bad[] = {
            {{"save", "n0", "--conversation", conv, "--messages", "0"}, "--messages must be at least 1"},
            {{"save", "n-1", "--conversation", conv, "--messages", "-1"}, "--messages must be at least 1"},
            {{"save", "n6", "--conversation", conv, "--messages", "6"}, "has 5 messages; --messages 6 asks for more"},
            {{"save", "nx", "--conversation", conv, "--messages", "three"}, "--messages expects a whole number"},
            {{"save", "nbig", "--conversation", conv, "--messages", "99999999999999999999"}, "expects a whole number"},
            {{"save", "nc", "--conversation", "nosuch"}, "there is no conversation named 'nosuch'"},
            {{"save", "nt", "--text", "x", "--messages", "2"}, "--messages counts the messages taken from --conversation"},
            {{"save", "both", "--text", "x", "--conversation", conv}, "--text TEXT or --conversation NAME"},
            {{"save", "neither"}, "--text TEXT or --conversation NAME"},
            {{"save", name, "--conversation", conv, "--messages", "2"}, "already exists"},
            {{"edit", name, "--text", "just a system prompt"}, "holds 3 messages, not one system prompt"},
            {{"edit", "nobody", "--conversation", conv}, "there is no prefix named 'nobody'"},
        };
        for (const auto& b : bad) {
            const Run r = save(b.args);
            QVERIFY2(r.code == 2, qPrintable(b.args.join(' ')));
            QVERIFY2(r.err.contains(QString::fromUtf8(b.says)), qPrintable(b.args.join(' ') + " -> " + r.err));
        }
        // A conversation with no messages has nothing to save.
        {
            Store store(db.toStdString());
            store.create_conversation("empty", "", "");
        }
        QVERIFY(save({"save", "e", "--conversation", "empty"}).err.contains("has no messages"));

        // The list shows how many messages each prefix holds; nothing the refusals touched changed.
        const Run l = cli({"prefix", "list", "--db", db, "--json"});
        const QJsonArray arr = QJsonDocument::fromJson(l.out).array();
        QCOMPARE(arr.size(), 2);
        QCOMPARE(arr[0].toObject()["name"].toString(), QString("all"));
        QCOMPARE(arr[0].toObject()["messages"].toInt(), 5);
        QCOMPARE(arr[1].toObject()["name"].toString(), name);
        QCOMPARE(arr[1].toObject()["messages"].toInt(), 3);
        QCOMPARE(arr[1].toObject()["roles"].toArray(), (QJsonArray{"system", "user", "assistant"}));
        const Run lt = cli({"prefix", "list", "--db", db});
        QVERIFY2(lt.out.contains("\t3 messages\t") && lt.out.contains("\t5 messages\t"), lt.out.constData());

        // edit --conversation replaces the messages (here: the first user message alone).
        Store store(db.toStdString());
        const Run ed = save({"edit", name, "--conversation", conv, "--messages", "2"});
        QVERIFY2(ed.code == 0, qPrintable(ed.err));
        QCOMPARE(store.find_prefix(name.toStdString())->messages.size(), size_t(2));

        // A conversation started from it opens with its messages and prefills only the new turn.
        const Run c = chat("from prefix", "on the mat", {"--prefix", name});
        QVERIFY2(c.code == 0, qPrintable(c.err));
        const QJsonObject jc = json_of(c);
        const auto p = store.find_prefix(name.toStdString());
        QCOMPARE(jc["cached_tokens"].toInteger(), static_cast<qint64>(p->tokens.size()));
        QCOMPARE(jc["prefill_tokens"].toInteger(), jc["prompt_tokens"].toInteger() - jc["cached_tokens"].toInteger());
        const auto msgs = store.list_messages(store.find_conversation("from prefix")->id);
        QCOMPARE(msgs.size(), size_t(4));
        QCOMPARE(msgs[0].content, std::string("a cat on a mat"));
        QCOMPARE(msgs[1].content, std::string("the cat"));
        QCOMPARE(msgs[2].content, std::string("on the mat"));
    }

    // On the default model (Gemma's template): a conversation started from a prefix that ends
    // with an assistant turn prefills exactly its own turn (the assistant's end marker and the
    // next user turn's opening render the same with or without the prefix) and answers as a
    // fresh cache over the same messages does.
    void multiMessagePrefixOnDefaultModel() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        const QString first = "Name a fruit that is yellow.", second = "And one that is red?";
        const Run a = cli({"chat", "--db", db, "--conversation", "fruit", "--message", first, "-n", "16", "--greedy", "--json"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        const QString answer = json_of(a)["text"].toString();
        const Run s = cli({"prefix", "save", "fruit opening", "--conversation", "fruit", "--messages", "2", "--db", db, "--json"});
        QVERIFY2(s.code == 0, qPrintable(s.err));
        const Run b = cli({"chat", "--db", db, "--conversation", "fruit again", "--prefix", "fruit opening", "--message",
                           second, "-n", "16", "--greedy", "--json"});
        QVERIFY2(b.code == 0, qPrintable(b.err));
        const QJsonObject jb = json_of(b);

        auto model = Model::load(resolve_model_path(""));
        const ChatTemplate tmpl = ChatTemplate::for_model(*model);
        const std::vector<ChatMessage> opening = {{Role::User, first.toStdString()}, {Role::Assistant, answer.toStdString()}};
        const int64_t prefix_tokens = static_cast<int64_t>(tmpl.render(opening, false).tokens.size());
        QCOMPARE(json_of(s)["tokens"].toInteger(), prefix_tokens);
        const int64_t new_turn = gemma_user_turn_tokens(model->tokenizer(), second.toStdString());
        QCOMPARE(jb["cached_tokens"].toInteger(), prefix_tokens);
        QCOMPARE(jb["prefill_tokens"].toInteger(), new_turn);

        std::vector<ChatMessage> all = opening;
        all.push_back({Role::User, second.toStdString()});
        const RenderedChat r = tmpl.render(all, true);
        QCOMPARE(jb["prompt_tokens"].toInteger(), static_cast<qint64>(r.tokens.size()));
        QCOMPARE(jb["text"].toString().toStdString(), fresh_greedy_answer(*model, tmpl, r));
    }

    // kvchat-cli branch on the default model: the branch holds the first N messages, and its first
    // turn (another process) reuses exactly their tokens from the cache `branch` saved, prefills
    // only its own turn, and answers as a fresh cache over the same messages does. Bad counts and
    // a taken title are refused, creating nothing.
    void branchReusesTheParentsCache() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        const QString first = "Name a fruit that is yellow.", second = "And one that is red?", third = "And a green one?";
        const Run a = cli({"chat", "--db", db, "--conversation", "fruit", "--message", first, "-n", "16", "--greedy", "--json"});
        QVERIFY2(a.code == 0, qPrintable(a.err));
        const Run a2 = cli({"chat", "--db", db, "--conversation", "fruit", "--message", second, "-n", "16", "--greedy", "--json"});
        QVERIFY2(a2.code == 0, qPrintable(a2.err));
        const QJsonObject ja = json_of(a);

        for (const QStringList& bad : {QStringList{"--at", "0", "--title", "b"}, QStringList{"--at", "5", "--title", "b"},
                                       QStringList{"--at", "2", "--title", "fruit"}}) {
            const Run r = cli(QStringList{"branch", "--db", db, "--conversation", "fruit"} + bad);
            QVERIFY2(r.code != 0, qPrintable(bad.join(' ')));
            QVERIFY2(r.err.contains("--at must be 1 to 4") || r.err.contains("already exists"), qPrintable(r.err));
        }
        QVERIFY(!conversation_exists(db, "b"));

        const Run b = cli({"branch", "--db", db, "--conversation", "fruit", "--at", "2", "--title", "fruit green", "--json"});
        QVERIFY2(b.code == 0, qPrintable(b.err));
        auto model = Model::load(resolve_model_path(""));
        const ChatTemplate tmpl = ChatTemplate::for_model(*model);
        const std::vector<ChatMessage> copied = {
            {Role::User, first.toStdString()}, {Role::Assistant, ja["text"].toString().toStdString(), ids_of(ja["tokens"])}};
        const int64_t copied_tokens = static_cast<int64_t>(tmpl.render(copied, false).tokens.size());
        QCOMPARE(json_of(b)["cached_tokens"].toInteger(), copied_tokens);
        QCOMPARE(stored_messages(db, "fruit green").size(), size_t(2));

        const Run c = cli({"chat", "--db", db, "--conversation", "fruit green", "--message", third, "-n", "16", "--greedy", "--json"});
        QVERIFY2(c.code == 0, qPrintable(c.err));
        const QJsonObject jc = json_of(c);
        const int64_t new_turn = gemma_user_turn_tokens(model->tokenizer(), third.toStdString());
        QCOMPARE(jc["cached_tokens"].toInteger(), copied_tokens);
        QCOMPARE(jc["prefill_tokens"].toInteger(), new_turn);

        std::vector<ChatMessage> all = copied;
        all.push_back({Role::User, third.toStdString()});
        const RenderedChat r = tmpl.render(all, true);
        QCOMPARE(jc["prompt_tokens"].toInteger(), static_cast<qint64>(r.tokens.size()));
        QCOMPARE(jc["text"].toString().toStdString(), fresh_greedy_answer(*model, tmpl, r));
        QCOMPARE(stored_messages(db, "fruit").size(), size_t(4));  // the parent is as it was
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

    // The window's settings in the database apply to the terminal too: a context policy that
    // lets a long turn through, and a value it cannot use named in a note (the turn still runs).
    void usesTheWindowsSettings() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);  // a context of 2048 tokens
        const QString db = dir.path() + "/kv.db";
        QString text;
        for (int i = 0; i < 90; ++i) text += "the cat sat on the mat " + QString::number(i) + ". ";
        const QStringList args = {"chat", "--model", model, "--db", db, "--conversation", "long", "-n", "2", "--greedy",
                                  "--json", "--message", text};
        // Refused under the default policy.
        Run r = cli(args);
        QVERIFY2(r.code != 0 && r.err.contains("context holds"), qPrintable(r.err));
        {
            Store store(db.toStdString());
            store.set_setting("chat.context_policy", "sliding");
            store.set_setting("chat.resident_caches", "zero");
        }
        r = cli(args);
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains("chat.resident_caches"), qPrintable(r.err));
        QVERIFY(json_of(r)["prompt_tokens"].toInt() > 2048);
        // The command line wins.
        r = cli(args + QStringList{"--policy", "refuse"});
        QVERIFY2(r.code != 0 && r.err.contains("context holds"), qPrintable(r.err));
    }

    // SIGTERM (systemd, `timeout`) and SIGHUP (a closed terminal) during an answer stop it as
    // Ctrl-C does: what was printed is stored as the answer, the conversation is answered, and the
    // exit status is the shell's 128 + the signal.
    void terminationSignalsKeepTheAnswer() {
        for (const int sig : {SIGTERM, SIGHUP}) {
            QTemporaryDir dir;
            const QString db = dir.path() + "/kv.db";
            QProcess p;
            QByteArray streamed;
            QVERIFY2(start_long_answer(p, db, "story", streamed), "the answer never started");
            QVERIFY2(test::signal_child(p.processId(), sig), "the process had already ended");
            QVERIFY(p.waitForFinished(120000));
            streamed += p.readAllStandardOutput();
            const QString err = QString::fromUtf8(p.readAllStandardError());
            QCOMPARE(p.exitStatus(), QProcess::NormalExit);
            QCOMPARE(p.exitCode(), 128 + sig);
            const auto msgs = stored_messages(db, "story");
            QCOMPARE(msgs.size(), size_t(2));
            QCOMPARE(msgs[1].role, Role::Assistant);
            QVERIFY(!msgs[1].content.empty());
            // Everything printed is what was stored (and the line end the command adds).
            QCOMPARE(QString::fromUtf8(streamed).trimmed(), QString::fromStdString(msgs[1].content).trimmed());
            QVERIFY2(!cli({"conversations", "--db", db}).out.contains("unanswered"), qPrintable(err));
        }
    }

    // A reader that goes away (`| head -c 20`) and a full disk (`> /dev/full`): the answer stops,
    // is kept, and the command says why and exits non-zero instead of dying silently by SIGPIPE.
    void outputFailuresStopAndKeepTheAnswer() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        {
            QProcess sh;
            sh.start("bash", {"-c", "\"$0\" chat --db \"$1\" --conversation piped --message 'Tell me a very long story "
                                    "about a dragon.' -n 2000 --greedy | head -c 20 >/dev/null; echo \"${PIPESTATUS[0]}\"",
                              QString::fromUtf8(test::cli_path()), db});
            QVERIFY(sh.waitForFinished(300000));
            const QString err = QString::fromUtf8(sh.readAllStandardError());
            QCOMPARE(sh.readAllStandardOutput().trimmed(), QByteArray("2"));
            QVERIFY2(err.contains("cannot write the answer to standard output") && err.contains("is kept"),
                     qPrintable(err));
            const auto msgs = stored_messages(db, "piped");
            QCOMPARE(msgs.size(), size_t(2));
            QCOMPARE(msgs[1].role, Role::Assistant);
            QVERIFY(!msgs[1].content.empty());
        }
        for (const bool as_json : {false, true}) {
            QProcess p;
            p.setStandardOutputFile("/dev/full");
            const QString title = as_json ? "full json" : "full";
            QStringList args = {"chat", "--db", db, "--conversation", title, "--message", "Name a colour.", "-n", "16",
                                "--greedy"};
            if (as_json) args << "--json";
            p.start(QString::fromUtf8(test::cli_path()), args);
            QVERIFY(p.waitForFinished(300000));
            const QString err = QString::fromUtf8(p.readAllStandardError());
            QCOMPARE(p.exitStatus(), QProcess::NormalExit);
            QVERIFY2(p.exitCode() == 2, qPrintable(err));
            QVERIFY2(err.contains("cannot write") && err.contains("standard output"), qPrintable(err));
            const auto msgs = stored_messages(db, title);
            QCOMPARE(msgs.size(), size_t(2));
            QCOMPARE(msgs[1].role, Role::Assistant);
        }
        // A listing to a full disk fails too, rather than exiting 0 with nothing written.
        QProcess l;
        l.setStandardOutputFile("/dev/full");
        l.start(QString::fromUtf8(test::cli_path()), {"conversations", "--db", db});
        QVERIFY(l.waitForFinished(60000));
        QCOMPARE(l.exitCode(), 2);
    }

    // A turn refused because the conversation no longer fits its static cache (each turn a new
    // process, so the cache is read from its snapshot) leaves the conversation as it was: no
    // unanswered message, and the next message is refused for the same reason, not as left by a crash.
    void refusedTurnLeavesTheConversation() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const QString message = "the cat sat on the mat and looked at the dog for a while.";
        auto turn = [&] {
            return cli({"chat", "--model", model, "--db", db, "--conversation", "small", "--cache",
                        "static:max_len=256", "--message", message, "-n", "12", "--greedy", "--json"});
        };
        Run refused{0, {}, {}};
        size_t answered = 0;
        for (int i = 0; i < 20; ++i) {
            const Run r = turn();
            if (r.code != 0) {
                refused = r;
                break;
            }
            answered += 2;
        }
        QVERIFY2(refused.code == 2, "no turn was refused");
        QVERIFY2(answered >= 2, "the first turn was refused");
        QVERIFY2(refused.err.contains("context holds") && refused.err.contains("left as it was"), qPrintable(refused.err));
        QCOMPARE(stored_messages(db, "small").size(), answered);
        QVERIFY(!cli({"conversations", "--db", db}).out.contains("unanswered"));
        const Run again = turn();
        QCOMPARE(again.code, 2);
        QVERIFY2(again.err.contains("context holds") && !again.err.contains("has no answer"), qPrintable(again.err));
        QCOMPARE(stored_messages(db, "small").size(), answered);
    }

    // A title or prefix name holding ESC, BEL, BS, DEL or a C1 control (a pasted first message
    // titles a chat in the window) is printed escaped: it cannot retitle or clear the terminal.
    void controlCharactersAreEscaped() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        const QString title = QString::fromUtf8("\x1b]0;owned\x07 title\x08\x7f \xc2\x9b" "2J end");
        QVERIFY(cli({"chat", "--model", model, "--db", db, "--conversation", title, "--message", "hi", "-n", "2",
                     "--greedy"}).code == 0);
        QVERIFY(cli({"prefix", "save", title, "--text", "be brief", "--model", model, "--db", db}).code == 0);
        const Run list = cli({"conversations", "--db", db});
        QCOMPARE(list.code, 0);
        QVERIFY2(!has_control_character(list.out), list.out.toHex().constData());
        QVERIFY2(list.out.startsWith("\\x1b]0;owned\\x07 title\\x08\\x7f \\u009b2J end\t"), list.out.constData());
        const Run prefixes = cli({"prefix", "list", "--db", db});
        QCOMPARE(prefixes.code, 0);
        QVERIFY2(!has_control_character(prefixes.out), prefixes.out.toHex().constData());
        QVERIFY2(prefixes.out.startsWith("\\x1b]0;owned\\x07 title"), prefixes.out.constData());
        // Messages that quote the name, too.
        const Run dup = cli({"prefix", "save", title, "--text", "again", "--model", model, "--db", db});
        QCOMPARE(dup.code, 2);
        QVERIFY2(!has_control_character(dup.err.toUtf8()), qPrintable(dup.err));
        // The JSON list keeps the title exactly.
        QCOMPARE(QJsonDocument::fromJson(cli({"conversations", "--db", db, "--json"}).out)[0]["title"].toString(), title);
    }

    // A message of Unicode white space only is as blank as one of ASCII white space: refused, and
    // a new conversation is not left behind (nor by a blank ASCII one).
    void unicodeBlankMessagesAreRefused() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString db = dir.path() + "/kv.db";
        for (const QString& blank : {QString::fromUtf8("\u00a0\u3000\u2003"), QString("  \t"), QString()}) {
            const Run r = cli({"chat", "--model", model, "--db", db, "--conversation", "new one", "--message", blank});
            QCOMPARE(r.code, 2);
            QVERIFY2(r.err.contains("empty") && r.err.contains("nothing was sent"), qPrintable(r.err));
            QVERIFY(!std::filesystem::exists(db.toStdString()) || !conversation_exists(db, "new one"));
            const Run p = cli({"prefix", "save", "blank", "--text", blank.isEmpty() ? QString(" ") : blank, "--model",
                               model, "--db", db});
            QCOMPARE(p.code, 2);
        }
        // Typed into the interactive session, it sends nothing either.
        const Run i = cli({"chat", "--model", model, "--db", db, "--conversation", "typed", "-n", "2", "--greedy"},
                          QByteArray("\xc2\xa0\xe3\x80\x80\xe2\x80\x83\nthe cat\n/quit\n"));
        QVERIFY2(i.code == 0, qPrintable(i.err));
        const auto msgs = stored_messages(db, "typed");
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[0].content, std::string("the cat"));
        // An interactive session left without a message leaves no conversation.
        QCOMPARE(cli({"chat", "--model", model, "--db", db, "--conversation", "left at once"}, "/quit\n").code, 0);
        QVERIFY(!conversation_exists(db, "left at once"));
    }

    // Ctrl-C before the first token of a new conversation (here: during the prefill of a long
    // first message) takes the message back and leaves no conversation behind.
    void interruptedFirstTurnLeavesNoConversation() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/kv.db";
        QString text;
        for (int i = 0; i < 300; ++i) text += "The quick brown fox jumps over the lazy dog number " + QString::number(i) + ". ";
        QProcess p;
        p.start(QString::fromUtf8(test::cli_path()),
                {"chat", "--db", db, "--conversation", "long first", "--message", text, "-n", "8", "--greedy"});
        QVERIFY(p.waitForStarted());
        // The conversation's row exists once the model is loaded and the turn begins its prefill.
        bool created = false;
        for (int i = 0; i < 1200 && !created && p.state() == QProcess::Running; ++i) {
            QTest::qWait(50);
            try {
                created = std::filesystem::exists(db.toStdString()) && conversation_exists(db, "long first");
            } catch (const std::exception&) {
                // The database is being created: look again.
            }
        }
        QVERIFY2(created, "the turn never began");
        QTest::qWait(300);
        QVERIFY2(test::signal_child(p.processId(), SIGINT), "the process had already ended");
        QVERIFY(p.waitForFinished(120000));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(p.exitCode() == 130, qPrintable(err));
        QVERIFY2(err.contains("stopped before the answer began"), qPrintable(err));
        QVERIFY2(!conversation_exists(db, "long first"), qPrintable(err));
    }

    // Two databases in one folder keep their conversations' snapshots (and locks) apart: a turn in
    // one no longer overwrites the other's cache, so the next turn there reuses its whole history.
    void twoDatabasesInOneFolder() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString a = dir.path() + "/a.db", b = dir.path() + "/b.db";
        auto turn = [&](const QString& db, const QString& message) {
            const Run r = cli({"chat", "--model", model, "--db", db, "--conversation", "one", "--message", message, "-n",
                               "8", "--greedy", "--json"});
            return r;
        };
        const Run a1 = turn(a, "the cat sat on the mat and the dog sat on the log.");
        QVERIFY2(a1.code == 0, qPrintable(a1.err));
        const Run b1 = turn(b, "a completely different opening about ships at sea.");
        QVERIFY2(b1.code == 0, qPrintable(b1.err));
        const Run a2 = turn(a, "and then?");
        QVERIFY2(a2.code == 0, qPrintable(a2.err));
        const QJsonObject j1 = json_of(a1), j2 = json_of(a2);
        // The first turn's prompt and answer come from the cache (the answer's closing marker too).
        QVERIFY2(j2["cached_tokens"].toInteger() >= j1["prompt_tokens"].toInteger() + static_cast<qint64>(ids_of(j1["tokens"]).size()),
                 qPrintable(QString("reused %1 of %2").arg(j2["cached_tokens"].toInteger()).arg(j2["prompt_tokens"].toInteger())));
        const std::string snap_a = Store(a.toStdString()).find_conversation("one")->snapshot;
        const std::string snap_b = Store(b.toStdString()).find_conversation("one")->snapshot;
        QVERIFY(!snap_a.empty() && !snap_b.empty());
        QVERIFY(snap_a != snap_b);
        QVERIFY(std::filesystem::exists((dir.path() + "/snapshots/").toStdString() + snap_a));
        QVERIFY(std::filesystem::exists((dir.path() + "/snapshots/").toStdString() + snap_b));
    }

    // A database that cannot be written (a read-only mount, no write permission) is named as
    // read-only, and the commands that only read it work. Root writes whatever the permissions
    // say, so as root the commands run as the unprivileged user "nobody".
    void readOnlyDatabase() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QString folder = dir.path() + "/ro";
        QVERIFY(QDir().mkpath(folder));
        const QString db = folder + "/kv.db";
        QCOMPARE(cli({"chat", "--model", model, "--db", db, "--conversation", "kept", "--message", "hi", "-n", "2",
                      "--greedy"}).code, 0);
        QCOMPARE(cli({"prefix", "save", "brief", "--text", "be brief", "--model", model, "--db", db}).code, 0);
        const bool root = ::geteuid() == 0;
        struct passwd* nobody = root ? ::getpwnam("nobody") : nullptr;
        if (root && !nobody) QSKIP("running as root and there is no user 'nobody' to run the commands as");
        const uid_t uid = nobody ? nobody->pw_uid : 0;
        const gid_t gid = nobody ? nobody->pw_gid : 0;
        // Readable by all, writable by none.
        std::filesystem::permissions(dir.path().toStdString(), std::filesystem::perms(0755));
        for (const auto& e : std::filesystem::recursive_directory_iterator(folder.toStdString()))
            std::filesystem::permissions(e.path(), e.is_directory() ? std::filesystem::perms(0555) : std::filesystem::perms(0444));
        std::filesystem::permissions(folder.toStdString(), std::filesystem::perms(0555));
        std::filesystem::permissions(model.toStdString(), std::filesystem::perms(0444));
        auto as_reader = [&](const QStringList& args) {
            QProcess p;
            if (root)
                p.setChildProcessModifier([uid, gid] {
                    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(120);
                });
            p.start(QString::fromUtf8(test::cli_path()), args);
            p.waitForFinished(120000);
            return Run{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
                       QString::fromUtf8(p.readAllStandardError())};
        };
        const Run list = as_reader({"conversations", "--db", db});
        QVERIFY2(list.code == 0, qPrintable(list.err));
        QVERIFY2(list.out.startsWith("kept\t2 messages"), list.out.constData());
        const Run prefixes = as_reader({"prefix", "list", "--db", db});
        QVERIFY2(prefixes.code == 0, qPrintable(prefixes.err));
        QVERIFY2(prefixes.out.startsWith("brief\t"), prefixes.out.constData());
        const Run chat = as_reader({"chat", "--model", model, "--db", db, "--conversation", "kept", "--message", "more",
                                    "-n", "2", "--greedy"});
        QCOMPARE(chat.code, 2);
        QVERIFY2(chat.err.contains("read-only") && !chat.err.contains("unable to open"), qPrintable(chat.err));
        std::filesystem::permissions(folder.toStdString(), std::filesystem::perms(0755));
    }

    // chat-bench prints lines of text, and JSON only with --json (tiny model, short runs).
    void chatBenchPrintsJsonOnlyWhenAsked() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        const QStringList args = {"chat-bench", "--model", model, "--only", "turns", "--turns", "2", "-n", "2"};
        const Run text = cli(args);
        QVERIFY2(text.code == 0, qPrintable(text.err));
        QVERIFY2(!text.out.trimmed().startsWith('{') && text.out.contains("turn  1:"), text.out.constData());
        const Run js = cli(args + QStringList{"--json"});
        QVERIFY2(js.code == 0, qPrintable(js.err));
        QVERIFY(QJsonDocument::fromJson(js.out).object().contains("turns"));
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
