// The README's commands, run as written: every line of its ```sh blocks that starts a program
// from build/bin/ goes through bash (so quoting, `~` and comments mean what they mean to a user)
// with a fresh home, data and config folder, on a tiny model ($KVCHAT_MODEL, as the README says)
// so the long ones take seconds. A command the README shows must exit 0; a --json one must print
// JSON. The installed programs (`kvchat-cli --version`) run from the build too; the other lines
// (the setup script, apt) are listed as not run.
// Also here: what a start without a screen does when the database is held by another kvchat.
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLockFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

namespace {

// The lines of the README's ```sh blocks, continuation lines joined.
QStringList readme_commands() {
    QFile f(QStringLiteral(KVCHAT_SOURCE_DIR "/README.md"));
    if (!f.open(QIODevice::ReadOnly)) return {};
    QStringList out;
    bool in_sh = false;
    QString pending;
    for (const QString& raw : QString::fromUtf8(f.readAll()).split('\n')) {
        const QString line = raw.trimmed();
        if (line.startsWith("```")) {
            in_sh = !in_sh && line == "```sh";
            continue;
        }
        if (!in_sh || line.isEmpty()) continue;
        pending += line;
        if (pending.endsWith('\\')) {
            pending.chop(1);
            continue;
        }
        out << pending;
        pending.clear();
    }
    return out;
}

struct Ran {
    int code = -1;
    QByteArray out;
    QString err;
};

}  // namespace

class TestReadmeCommands : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QProcessEnvironment env_;

    Ran run(const QString& command, int timeout_ms = 600000) {
        QProcess p;
        p.setProcessEnvironment(env_);
        p.setWorkingDirectory(dir_.path());
        p.start("bash", {"-c", command});
        p.closeWriteChannel();  // the interactive session meets the end of its input
        if (!p.waitForFinished(timeout_ms)) {
            p.kill();
            p.waitForFinished();
            return {-1, {}, "timed out after " + QString::number(timeout_ms / 1000) + " s"};
        }
        return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, p.readAllStandardOutput(),
                QString::fromUtf8(p.readAllStandardError())};
    }

private slots:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        for (const char* sub : {"home", "data", "config", "tmp"}) QVERIFY(QDir(dir_.path()).mkpath(sub));
        const QString model = dir_.path() + "/tiny.gguf";
        kvchat::test::write_tiny_gguf(kvchat::test::chat_sized_spec(), model.toStdString());
        env_ = QProcessEnvironment::systemEnvironment();
        env_.insert("HOME", dir_.path() + "/home");
        env_.insert("XDG_DATA_HOME", dir_.path() + "/data");
        env_.insert("XDG_CONFIG_HOME", dir_.path() + "/config");
        env_.insert("TMPDIR", dir_.path() + "/tmp");
        env_.insert("KVCHAT_MODEL", model);
        env_.insert("QT_QPA_PLATFORM", "offscreen");
        // The messages file the README's `template --messages chat.json` line reads: the README's own example.
        QFile messages(dir_.path() + "/chat.json");
        QVERIFY(messages.open(QIODevice::WriteOnly));
        messages.write(R"([{"role": "user", "content": "Hello! Who are you?"}])");
    }

    void commandsRunAsWritten() {
        const QStringList commands = readme_commands();
        QVERIFY2(commands.size() >= 20, "the README's sh blocks were not found");
        const QString bin = QStringLiteral(KVCHAT_BINARY_DIR "/bin/");
        int ran = 0;
        for (const QString& command : commands) {
            // The installed programs are the ones the build made.
            const QString from = command.startsWith("build/bin/") ? QStringLiteral("build/bin/") : QString();
            const bool cli = command.startsWith(from + "kvchat-cli ");
            const bool app = command.startsWith(from + "kvchat ");
            if (!cli && !app) {
                qInfo("not run (setup: installs packages, the model, the build): %s", qPrintable(command));
                continue;
            }
            // The window stays open until someone closes it: only --startup-report ends by itself.
            if (app && !command.contains("--startup-report")) {
                qInfo("not run (opens a window that waits for a user): %s", qPrintable(command));
                continue;
            }
            if (app && !QFileInfo::exists(bin + "kvchat")) {
                qInfo("not run (the desktop app is not built): %s", qPrintable(command));
                continue;
            }
            QString line = command;
            line.replace(0, from.size(), bin);
            const Ran r = run(line);
            qInfo("ran (exit %d): %s", r.code, qPrintable(command));
            ++ran;
            QVERIFY2(r.code == 0, qPrintable(command + "\n-> exit " + QString::number(r.code) + "\n" + r.err));
            // What precedes a comment is the command; --json there means one JSON object or array.
            const QString words = command.section(QRegularExpression("\\s#\\s"), 0, 0);
            QJsonParseError error{};
            const QJsonDocument doc = QJsonDocument::fromJson(r.out, &error);
            if (words.contains("--json") || app) {
                QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(command + "\n-> " + r.out));
            } else if (words.contains(" chat-bench")) {
                QVERIFY2(error.error != QJsonParseError::NoError, qPrintable(command + " printed JSON without --json"));
            }
            // A stop string never appears in the text it stopped.
            if (words.contains("--stop \"\\n\\n\""))
                QVERIFY2(!doc.object()["text"].toString().contains("\n\n"), qPrintable(command + "\n-> " + r.out));
        }
        QVERIFY(ran >= 15);
    }

    // kvchat --startup-report (no screen to answer on) when another kvchat has the database open:
    // the refusal is printed and the app exits, instead of waiting on a dialog no one sees.
    void startupReportWithDatabaseInUse() {
        const QString app = QStringLiteral(KVCHAT_BINARY_DIR "/bin/kvchat");
        if (!QFileInfo::exists(app)) QSKIP("the desktop app is not built");
        const QString db = dir_.path() + "/held/kvchat.db";
        QVERIFY(QDir().mkpath(dir_.path() + "/held"));
        QLockFile held(db + ".lock");  // what a running window holds
        QVERIFY(held.tryLock(0));
        const Ran r = run("\"" + app + "\" --startup-report --db \"" + db + "\"", 120000);
        QVERIFY2(r.code == 2, qPrintable(QString("exit %1: %2").arg(r.code).arg(r.err)));
        QVERIFY2(r.err.contains("Another kvchat") && r.err.contains(db), qPrintable(r.err));
    }
};

QTEST_GUILESS_MAIN(TestReadmeCommands)
#include "test_readme_commands.moc"
