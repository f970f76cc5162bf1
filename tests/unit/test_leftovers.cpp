// Nothing left behind: an offloaded cache's spill file has no name on disk (so even kill -9
// leaves none), a snapshot write a killed process left half done is swept when the database is
// next opened (never one still being written), and chat-bench removes its temporary folder when
// it fails or is stopped. A snapshot whose conversation or prefix row was deleted (a crash
// between the row's delete and the file's) is swept on open too, unless a process holds it.
#include "engine/common/atomic_file.h"
#include "engine/store/conversation_lock.h"
#include "engine/store/store.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QDir>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <fstream>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

using namespace kvchat;

namespace {

QString tiny_model_path(const QTemporaryDir& dir) {
    const QString path = dir.path() + "/tiny.gguf";
    test::write_tiny_gguf(test::chat_sized_spec(), path.toStdString());
    return path;
}

void plant(const std::string& path, int age_s) {
    std::ofstream(path) << "half a snapshot";
    struct timeval t[2];
    ::gettimeofday(&t[0], nullptr);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    ::utimes(path.c_str(), t);
}

bool exists(const std::string& path) { return QFileInfo::exists(QString::fromStdString(path)); }

}  // namespace

class TestLeftovers : public QObject {
    Q_OBJECT
private slots:
    // A generation on an offloaded cache, killed with SIGKILL while it streams: at no moment,
    // before or after the kill, does the spill folder hold a file.
    void killedGenerationLeavesNoSpillFile() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        QTemporaryDir spill;
        QProcess p;
        p.start(QString::fromUtf8(test::cli_path()),
                {"generate", "--model", model, "--prompt", "the cat sat", "-n", "100000", "--greedy", "--cache",
                 "offloaded:dir=" + spill.path()});
        QVERIFY(p.waitForStarted());
        QByteArray streamed;
        for (int i = 0; i < 600 && streamed.size() < 16; ++i) {
            p.waitForReadyRead(100);
            streamed += p.readAllStandardOutput();
        }
        QVERIFY2(streamed.size() >= 16, qPrintable(p.readAllStandardError()));
        QVERIFY(p.state() == QProcess::Running);  // the cache (and its spill file) is live now
        QCOMPARE(QDir(spill.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden | QDir::System),
                 QStringList());
        QVERIFY2(test::signal_child(p.processId(), SIGKILL), "the process had already ended");
        p.waitForFinished();
        QCOMPARE(QDir(spill.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden | QDir::System),
                 QStringList());
    }

    // Opening a database removes the old, unlocked temporaries of snapshot writes, and keeps one
    // a live writer holds (however old it looks), a fresh one, and every other file.
    void staleSnapshotTemporariesAreSwept() {
        QTemporaryDir dir;
        const std::string db = (dir.path() + "/kv.db").toStdString();
        std::string snapshots;
        {
            Store store(db);
            snapshots = store.snapshot_dir();
        }
        const std::string stale = snapshots + "/.conversation-3.kvcache.tmp-AbC123";
        const std::string fresh = snapshots + "/.conversation-4.kvcache.tmp-XyZ789";
        const std::string other = snapshots + "/notes.tmp-AbC123";
        plant(stale, 3600);
        plant(fresh, 0);
        plant(other, 3600);
        AtomicFile writing(snapshots + "/conversation-5.kvcache");  // another writer, mid-write
        writing.write("part");
        struct timeval old[2];
        ::gettimeofday(&old[0], nullptr);
        old[0].tv_sec -= 3600;
        old[1] = old[0];
        QCOMPARE(::utimes(writing.temporary_path().c_str(), old), 0);

        Store reopened(db);
        QVERIFY(!exists(stale));
        QVERIFY(exists(fresh));
        QVERIFY(exists(other));
        QVERIFY(exists(writing.temporary_path()));
        writing.commit();
        QVERIFY(exists(snapshots + "/conversation-5.kvcache"));
    }

    // Opening a database removes the snapshot files kvchat named for rows that were deleted, and
    // nothing else: not a row's file, not one a process holds the conversation of, not one for
    // an id not handed out yet (another process may be creating that row), not other names.
    void orphanSnapshotsAreSwept() {
        QTemporaryDir dir;
        const std::string db = (dir.path() + "/kv.db").toStdString();
        std::string snapshots;
        std::vector<int64_t> conversations, prefixes;
        std::unique_ptr<ConversationLock> held;
        // This database's snapshot names start with its file name.
        const std::string own = Store::file_key("kv.db") + ".";
        {
            Store store(db);
            snapshots = store.snapshot_dir();
            for (const char* title : {"kept", "deleted", "held", "linked"})
                conversations.push_back(store.create_conversation(title, "fp", "dynamic").id);
            for (const char* name : {"kept prefix", "deleted prefix"}) {
                PrefixRecord p;
                p.name = name;
                p.text = "Be brief.";
                prefixes.push_back(store.save_prefix(p).id);
            }
            for (int64_t id : conversations) plant(snapshots + "/" + store.conversation_snapshot_name(id), 0);
            for (int64_t id : prefixes) plant(snapshots + "/" + store.prefix_snapshot_name(id), 0);
            // The rows go, the files stay: what a crash between the two deletes leaves.
            QVERIFY(store.delete_conversation(conversations[1]).empty());
            QVERIFY(store.delete_conversation(conversations[2]).empty());
            QVERIFY(store.delete_conversation(conversations[3]).empty());
            QVERIFY(store.delete_prefix(prefixes[1]).empty());
            // Another process holds the deleted conversation "held" (this lock is a descriptor of
            // its own, as another process's would be).
            QCOMPARE(::mkdir((dir.path() + "/locks").toStdString().c_str(), 0700), 0);
            held = std::make_unique<ConversationLock>(store.conversation_lock_path(conversations[2]), "held");
        }
        const auto file = [&](int64_t id) { return snapshots + "/" + own + Store::legacy_conversation_snapshot_name(id); };
        // Conversation 4's name is a symbolic link: kvchat never makes one, so it is not touched.
        const std::string target = (dir.path() + "/elsewhere").toStdString();
        plant(target, 0);
        QVERIFY(std::remove(file(conversations[3]).c_str()) == 0);
        QVERIFY(::symlink(target.c_str(), file(conversations[3]).c_str()) == 0);
        const std::string future = file(conversations.back() + 100);
        const std::string zero_padded = snapshots + "/" + own + "conversation-0" + std::to_string(conversations[1]) + ".kvcache";
        const std::string other = snapshots + "/notes.kvcache";
        for (const std::string& p : {future, zero_padded, other}) plant(p, 0);

        {
            Store store(db);
        }
        QVERIFY(exists(file(conversations[0])));
        QVERIFY(!exists(file(conversations[1])));
        QVERIFY(exists(snapshots + "/" + own + Store::legacy_prefix_snapshot_name(prefixes[0])));
        QVERIFY(!exists(snapshots + "/" + own + Store::legacy_prefix_snapshot_name(prefixes[1])));
        QVERIFY(exists(file(conversations[2])));  // held: left alone
        QVERIFY(QFileInfo(QString::fromStdString(file(conversations[3]))).isSymLink());
        QVERIFY(exists(target));
        for (const std::string& p : {future, zero_padded, other}) QVERIFY2(exists(p), p.c_str());
        held.reset();
        {
            Store store(db);
        }
        QVERIFY(!exists(file(conversations[2])));  // released: swept
        QVERIFY(exists(file(conversations[0])));
    }

    // chat-bench removes its folder when it fails (a model that cannot be loaded) and when it is
    // stopped with SIGTERM or Ctrl-C.
    void chatBenchCleansUp() {
        QTemporaryDir dir;
        const QString model = tiny_model_path(dir);
        QTemporaryDir tmp;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("TMPDIR", tmp.path());
        const auto leftovers = [&] {
            return QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);
        };
        {
            QProcess p;
            p.setProcessEnvironment(env);
            std::ofstream((dir.path() + "/broken.gguf").toStdString()) << "GGUF but not really";
            p.start(QString::fromUtf8(test::cli_path()), {"chat-bench", "--model", dir.path() + "/broken.gguf"});
            QVERIFY(p.waitForFinished(60000));
            QCOMPARE(p.exitCode(), 2);
            QCOMPARE(leftovers(), QStringList());
        }
        {
            // More history than the context holds: refused before any work, naming the option.
            QProcess p;
            p.setProcessEnvironment(env);
            p.start(QString::fromUtf8(test::cli_path()),
                    {"chat-bench", "--model", model, "--only", "reopen", "--history-tokens", "100000"});
            QVERIFY(p.waitForFinished(60000));
            QCOMPARE(p.exitCode(), 2);
            const QByteArray err = p.readAllStandardError();
            QVERIFY2(err.contains("--history-tokens 100000") && err.contains("context holds 2048"), err.constData());
            QCOMPARE(leftovers(), QStringList());
        }
        for (const int sig : {SIGTERM, SIGINT}) {
            QProcess p;
            p.setProcessEnvironment(env);
            // The longest run the tiny model's context allows (under a second here), so the signal is
            // sent the moment its folder appears.
            p.start(QString::fromUtf8(test::cli_path()),
                    {"chat-bench", "--model", model, "--only", "reopen", "--history-tokens", "1200", "-n", "64"});
            QVERIFY(p.waitForStarted());
            for (int i = 0; i < 30000 && leftovers().isEmpty() && p.state() == QProcess::Running; ++i) usleep(1000);
            QVERIFY(!leftovers().isEmpty());  // it is running, with its folder
            QVERIFY2(test::signal_child(p.processId(), sig),
                     qPrintable("chat-bench had already ended: " + p.readAllStandardError()));
            QVERIFY(p.waitForFinished(120000));
            QCOMPARE(p.exitCode(), 2);
            QVERIFY2(p.readAllStandardError().contains("interrupted"), "stopped some other way");
            QCOMPARE(leftovers(), QStringList());
        }
    }
};

QTEST_GUILESS_MAIN(TestLeftovers)
#include "test_leftovers.moc"
