// kvchat-cli as a user runs it: exit codes and messages.
#include <QProcess>
#include <QTemporaryDir>
#include "support/cli_run.h"
#include "support/test_paths.h"

#include <QtTest>

using Run = kvchat::test::CliRun;
using kvchat::test::run_cli;

namespace {
Run cli(const QStringList& args) { return run_cli(args); }
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
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
