// kvchat-cli versions as a user runs it, on the tiny chat model: chat --regenerate keeps the old
// answer, `versions` lists where, `--at N` lists the versions, `--select K` shows one (the next
// chat turn answers it), and mistakes are refused naming what is wrong.
#include "engine/store/store.h"
#include "support/chat_turns.h"
#include "support/cli_run.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using kvchat::test::CliRun;
using kvchat::test::run_cli;

class TestCliVersions : public QObject {
    Q_OBJECT
private slots:
    void regenerateListSelect() {
        QTemporaryDir dir;
        const QString model = QString::fromStdString(kvchat::test::write_chat_model(dir));
        const QString db = dir.path() + "/kv.db";
        const QStringList common = {"--model", model, "--db", db, "--conversation", "notes"};
        const CliRun first = run_cli(QStringList{"chat"} + common + QStringList{"--message", "the cat sat", "-n", "5", "--greedy", "--json"});
        QVERIFY2(first.code == 0, qPrintable(first.err));
        const QString answer1 = QJsonDocument::fromJson(first.out.toUtf8()).object()["text"].toString();
        const CliRun again = run_cli(QStringList{"chat"} + common +
                                     QStringList{"--regenerate", "-n", "5", "--temp", "2", "--seed", "3", "--json"});
        QVERIFY2(again.code == 0, qPrintable(again.err));
        const QString answer2 = QJsonDocument::fromJson(again.out.toUtf8()).object()["text"].toString();

        const CliRun places = run_cli({"versions", "--db", db, "--conversation", "notes"});
        QVERIFY2(places.code == 0, qPrintable(places.err));
        QVERIFY2(places.out.startsWith("message 1\tversion 2 of 2\t"), qPrintable(places.out));
        const CliRun listed = run_cli({"versions", "--db", db, "--conversation", "notes", "--at", "1", "--json"});
        QVERIFY2(listed.code == 0, qPrintable(listed.err));
        const QJsonArray versions = QJsonDocument::fromJson(listed.out.toUtf8()).array();
        QCOMPARE(versions.size(), 2);
        QCOMPARE(versions[0].toObject()["shown"].toBool(), false);
        QCOMPARE(versions[0].toObject()["messages"].toArray()[0].toObject()["content"].toString(), answer1);
        QCOMPARE(versions[1].toObject()["shown"].toBool(), true);
        QCOMPARE(versions[1].toObject()["messages"].toArray()[0].toObject()["content"].toString(), answer2);

        const CliRun chosen = run_cli({"versions", "--db", db, "--conversation", "notes", "--at", "1", "--select", "1"});
        QVERIFY2(chosen.code == 0, qPrintable(chosen.err));
        QVERIFY2(chosen.out.contains("message 1 shows version 1 of 2"), qPrintable(chosen.out));
        {
            kvchat::Store store(db.toStdString(), kvchat::Store::Access::ReadOnly);
            const auto ms = store.list_messages(store.find_conversation("notes")->id);
            QCOMPARE(ms.size(), size_t(2));
            QCOMPARE(QString::fromStdString(ms[1].content), answer1);
        }
        // The next turn answers the version shown, reusing the cache up to where they differ.
        const CliRun next = run_cli(QStringList{"chat"} + common + QStringList{"--message", "on the mat", "-n", "3", "--greedy", "--json"});
        QVERIFY2(next.code == 0, qPrintable(next.err));
        QVERIFY(QJsonDocument::fromJson(next.out.toUtf8()).object()["cached_tokens"].toInt() > 0);

        // Mistakes name what is wrong.
        const CliRun no_at = run_cli({"versions", "--db", db, "--conversation", "notes", "--select", "1"});
        QVERIFY2(no_at.code != 0 && no_at.err.contains("--select K needs --at N"), qPrintable(no_at.err));
        const CliRun no_place = run_cli({"versions", "--db", db, "--conversation", "notes", "--at", "2"});
        QVERIFY2(no_place.code != 0 && no_place.err.contains("message 2") && no_place.err.contains("no earlier versions"),
                 qPrintable(no_place.err));
        const CliRun too_many = run_cli({"versions", "--db", db, "--conversation", "notes", "--at", "1", "--select", "3"});
        QVERIFY2(too_many.code != 0 && too_many.err.contains("has 2 versions"), qPrintable(too_many.err));
        const CliRun no_conv = run_cli({"versions", "--db", db, "--conversation", "nope"});
        QVERIFY2(no_conv.code != 0 && no_conv.err.contains("no conversation named 'nope'"), qPrintable(no_conv.err));
    }
};

QTEST_GUILESS_MAIN(TestCliVersions)
#include "test_cli_versions.moc"
