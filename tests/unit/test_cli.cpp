// kvchat-cli as a user runs it: exit codes and messages.
#include <QProcess>
#include <QTemporaryDir>
#include "support/cli_run.h"
#include "support/test_paths.h"
#include "engine/cache/cache_presets.h"
#include "support/tiny_model.h"

#include <QDir>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <sys/stat.h>

using Run = kvchat::test::CliRun;
using kvchat::test::run_cli;

namespace {
Run cli(const QStringList& args) { return run_cli(args); }

// A special file must be refused at once, so a generous limit here only bounds a hang.
constexpr int kNoHangMs = 30000;

bool make_fifo(const QString& path) { return ::mkfifo(QFile::encodeName(path).constData(), 0600) == 0; }

// A small model for the commands that need one to run.
QString tiny_model(const QTemporaryDir& dir) {
    kvchat::test::TinyModelSpec s;
    s.n_layer = 2;
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 32;
    s.n_ff = 128;
    const QString path = dir.path() + "/tiny.gguf";
    kvchat::test::write_tiny_gguf(s, path.toStdString());
    return path;
}
}  // namespace

class TestCli : public QObject {
    Q_OBJECT
private slots:
    void version() {
        const Run r = cli({"--version"});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.startsWith("kvchat-cli "));
        QVERIFY(r.out.contains(KVCHAT_VERSION));
    }
    void help() {
        const Run r = cli({"--help"});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("usage:"));
        QVERIFY(r.out.contains("--model"));
        // The strategies --cache takes are the engine's presets, each in the form it is written.
        for (const kvchat::CachePreset& p : kvchat::cache_presets())
            QVERIFY2(r.out.contains(QString::fromUtf8(p.usage.data(), static_cast<int>(p.usage.size()))),
                     p.usage.data());
        QVERIFY(!r.out.contains("%PRESETS%"));
    }
    void missingModel() {
        const Run r = cli({"info", "--model", "/nonexistent/m.gguf"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("/nonexistent/m.gguf") && r.err.contains("No such file"), qPrintable(r.err));
    }
    void notGguf() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/notes.txt";
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("these are my notes, not a model\n");
        f.close();
        const Run r = cli({"info", "--model", path});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(path) && r.err.contains("not a GGUF file"), qPrintable(r.err));
    }
    void unknownOption() {
        const Run r = cli({"info", "--frobnicate"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--frobnicate"));
    }
    // --simd holds for every command, and a level this CPU lacks or that does not exist is
    // refused by name before anything is loaded.
    void simdLevelEveryCommand() {
        const Run bogus = cli({"generate", "--model", "/nonexistent/m.gguf", "--prompt", "x", "--simd", "avx3"});
        QCOMPARE(bogus.code, 2);
        QVERIFY2(bogus.err.contains("--simd") && bogus.err.contains("'avx3'") && !bogus.err.contains("/nonexistent"),
                 qPrintable(bogus.err));
        const Run info = cli({"info", "--model", "/nonexistent/m.gguf", "--simd", "avx2"});
        QCOMPARE(info.code, 2);
        QVERIFY2(info.err.contains("/nonexistent/m.gguf"), qPrintable(info.err));  // avx2 taken, the model then missing
    }
    void modelFromEnvironment() {
        QProcess p;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("KVCHAT_MODEL", "/nonexistent/from-env.gguf");
        p.setProcessEnvironment(env);
        p.start(QString::fromUtf8(kvchat::test::cli_path()), {"info"});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("/nonexistent/from-env.gguf"));
    }

    // A FIFO (which would block open() forever) or a device (which never ends) given as the model
    // is refused at once by every command that opens one, naming the path and what it is.
    void specialFileAsModel() {
        QTemporaryDir dir;
        const QString fifo = dir.path() + "/model.gguf";
        QVERIFY(make_fifo(fifo));
        const QString db = dir.path() + "/kv.db";
        const QList<QStringList> commands = {{"info"},
                                             {"tokenize", "--text", "hello"},
                                             {"generate", "--prompt", "hello", "-n", "2"},
                                             {"chat", "--db", db, "--conversation", "c", "--message", "hello"}};
        for (const QStringList& command : commands) {
            const Run r = run_cli(command + QStringList{"--model", fifo}, kNoHangMs);
            QVERIFY2(r.code == 2 && r.err.contains(fifo) && r.err.contains("not a regular file (it is a FIFO)"),
                     qPrintable(command.first() + ": " + QString::number(r.code) + " " + r.err));
        }
        const QString zero = dir.path() + "/zero.gguf";
        QVERIFY(QFile::link("/dev/zero", zero));
        const Run r = run_cli({"generate", "--model", zero, "--prompt", "hello"}, kNoHangMs);
        QVERIFY2(r.code == 2 && r.err.contains("it is a character device"), qPrintable(r.err));
    }

    // The same for the files of a Hugging Face folder: an error, not "missing" and not a hang.
    void specialFileInModelFolder() {
        QTemporaryDir dir;
        kvchat::test::TinyModelSpec s;
        s.arch = "llama";
        s.n_layer = 1;
        s.n_embd = 64;
        s.n_head = 2;
        s.n_head_kv = 1;
        s.head_dim = 32;
        s.n_ff = 128;
        s.n_vocab = 420;
        s.sliding_window = 0;
        kvchat::test::write_tiny_hf(s, dir.path().toStdString(), "F32", kvchat::test::data_path("tiny_tokenizer.model"), 1);
        QCOMPARE(run_cli({"info", "--model", dir.path()}, kNoHangMs).code, 0);
        for (const char* name : {"tokenizer.model", "config.json"}) {
            const QString path = dir.path() + "/" + name;
            QVERIFY(QFile::remove(path));
            QVERIFY(make_fifo(path));
            const Run r = run_cli({"tokenize", "--model", dir.path(), "--text", "hi"}, kNoHangMs);
            QVERIFY2(r.code == 2 && r.err.contains(path) && r.err.contains("FIFO"), qPrintable(r.err));
        }
    }

    // A conversation's snapshot replaced by a FIFO or a link to a device: the cache is rebuilt from
    // the transcript (the snapshot is only a cache), without hanging or reading without end.
    void specialFileAsSnapshot() {
        QTemporaryDir dir;
        const QString model = tiny_model(dir);
        const QString db = dir.path() + "/kv.db";
        const QStringList turn = {"chat", "--model", model, "--db", db, "--conversation", "c", "-n", "2", "--greedy", "--message"};
        QCOMPARE(run_cli(turn + QStringList{"first"}, kNoHangMs).code, 0);
        const QStringList snapshots = QDir(dir.path() + "/snapshots").entryList({"*.kvcache"}, QDir::Files);
        QCOMPARE(snapshots.size(), 1);
        const QString snapshot = dir.path() + "/snapshots/" + snapshots.first();
        const QList<QPair<QString, QString>> replacements = {{"fifo", "FIFO"}, {"/dev/zero", "character device"}};
        for (const auto& [replacement, kind] : replacements) {
            QVERIFY(QFile::remove(snapshot));
            QVERIFY(replacement == "fifo" ? make_fifo(snapshot) : QFile::link(replacement, snapshot));
            const Run r = run_cli(turn + QStringList{"again"}, kNoHangMs);
            QVERIFY2(r.code == 0 && r.err.contains(kind), qPrintable(QString::number(r.code) + " " + r.err));
            // The turn saved a fresh snapshot in place of the special file.
            QVERIFY(QFileInfo(snapshot).isFile() && !QFileInfo(snapshot).isSymLink());
        }
    }

    // Only a regular file (or nothing yet) is a database; SQLite would otherwise open /dev/null and
    // create /dev/null-journal beside it (this suite runs as root in CI, where it could).
    void databaseMustBeARegularFile() {
        QTemporaryDir dir;
        QFile::remove("/dev/null-journal");  // left by an older kvchat, if any
        const Run null_db = run_cli({"chat", "--db", "/dev/null", "--conversation", "c", "--message", "hi"}, kNoHangMs);
        QVERIFY2(null_db.code == 2 && null_db.err.contains("'/dev/null': not a regular file (it is a character device)"),
                 qPrintable(null_db.err));
        QVERIFY(!QFile::exists("/dev/null-journal"));
        const QString fifo = dir.path() + "/kv.db";
        QVERIFY(make_fifo(fifo));
        const Run fifo_db = run_cli({"conversations", "--db", fifo}, kNoHangMs);
        QVERIFY2(fifo_db.code == 2 && fifo_db.err.contains("database") && fifo_db.err.contains("FIFO"),
                 qPrintable(fifo_db.err));
    }

    // Commands that read what is saved do not create a database (or its folders) that is not there.
    void readOnlyCommandsOnMissingDatabase() {
        QTemporaryDir dir;
        const QString db = dir.path() + "/typo/kv.db";
        const QList<QStringList> commands = {{"conversations"}, {"prefix", "list"}, {"prefix", "delete", "x"},
                                             {"prefix", "rename", "x", "y"},
                                             {"branch", "--conversation", "x", "--at", "1", "--title", "y"}};
        for (const QStringList& command : commands) {
            const Run r = run_cli(command + QStringList{"--db", db}, kNoHangMs);
            QVERIFY2(r.code == 2 && r.err.contains("'" + db + "' does not exist"), qPrintable(r.err));
        }
        QVERIFY(!QFileInfo::exists(dir.path() + "/typo"));
    }

    // --stop reads escapes as llama.cpp's tools do: the README's --stop "\n\n" reaches kvchat-cli as
    // a backslash and an n (the shell keeps them), and must stop at two newlines. Here: a character
    // of the unstopped text given as \xHH stops the text just before it.
    void stopStringEscapes() {
        QTemporaryDir dir;
        const QString model = tiny_model(dir);
        const QStringList args = {"generate", "--model", model, "--prompt", "the cat", "-n", "40", "--greedy", "--json"};
        const Run full = cli(args);
        QVERIFY2(full.code == 0, qPrintable(full.err));
        const QByteArray text = QJsonDocument::fromJson(full.out.toUtf8()).object()["text"].toString().toUtf8();
        int at = -1;
        for (int i = 1; i < text.size() && at < 0; ++i)
            if (text[i] > 0x20 && text[i] < 0x7f && text[i] != '\\') at = i;
        if (at < 0) QSKIP("the tiny model's text has no printable ASCII character to stop at");
        const int first = text.indexOf(text[at]);
        const QString escaped = QString::asprintf("\\x%02x", static_cast<unsigned char>(text[at]));
        const Run stopped = cli(args + QStringList{"--stop", escaped});
        QVERIFY2(stopped.code == 0, qPrintable(stopped.err));
        QCOMPARE(QJsonDocument::fromJson(stopped.out.toUtf8()).object()["text"].toString().toUtf8(), text.left(first));
        // The same character typed with an escaped backslash before it is a different stop string.
        const Run literal = cli(args + QStringList{"--stop", "\\\\" + escaped});
        QCOMPARE(QJsonDocument::fromJson(literal.out.toUtf8()).object()["text"].toString().toUtf8(), text);
    }

    // --json output stays valid JSON when a path holds bytes that are not UTF-8 (it used to abort
    // in nlohmann's dump): the bytes become U+FFFD.
    void jsonWithInvalidUtf8() {
        QTemporaryDir dir;
        const QString model = tiny_model(dir);
        // QTemporaryDir cannot remove a name that is not UTF-8; the shell can.
        const auto remove_link = qScopeGuard([&] {
            QProcess::execute("bash", {"-c", "rm -f -- \"$1/$(printf 'm\\377.gguf')\"", "rm", dir.path()});
        });
        // QProcess passes arguments as UTF-8, so the shell makes the name: "m\xff.gguf".
        QProcess p;
        p.setWorkingDirectory(dir.path());
        p.start("bash", {"-c", "ln -s tiny.gguf \"$(printf 'm\\377.gguf')\" && exec \"$0\" bench --json --model "
                               "\"$(printf 'm\\377.gguf')\" --prompt-tokens 8 --gen-tokens 2 --runs 1",
                         QString::fromUtf8(kvchat::test::cli_path())});
        QVERIFY(p.waitForFinished(kNoHangMs));
        const QByteArray out = p.readAllStandardOutput();
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, p.readAllStandardError().constData());
        QJsonParseError error{};
        const QJsonDocument doc = QJsonDocument::fromJson(out, &error);
        QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString() + ": " + out));
        QCOMPARE(doc.object().value("model").toString(), QString("m") + QChar(0xFFFD) + ".gguf");
        QVERIFY(QFileInfo::exists(model));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
