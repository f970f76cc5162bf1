// Two processes, one conversation: one writer at a time across processes (a lock that dies with
// its process), a second writer waits briefly and is then refused by name, a turn made after
// another process's reads that process's messages first (transcripts never interleave), and a
// snapshot never replaces a newer one. Different conversations keep working side by side.
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/load_model.h"
#include "support/test_paths.h"
#include "support/chat_turns.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvchat;

using test::contains;
using test::error_of;
using test::greedy;

namespace {

// Where the registry keeps conversation locks: a folder beside the database (made here when a
// test takes a lock before the registry has).
std::string lock_dir(const kvchat::Store& store) {
    const std::filesystem::path dir = std::filesystem::path(store.path()).parent_path() / "locks";
    std::filesystem::create_directories(dir);
    return dir.string();
}

void write_tiny(const QTemporaryDir& dir) { test::write_chat_model(dir); }


std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Text of more than one prefill chunk (512 tokens) on the tiny model.
std::string long_text() {
    std::string s;
    for (int i = 0; i < 40; ++i) s += "the cat sat on the mat " + std::to_string(i) + ". ";
    return s;
}

struct Setup {
    QTemporaryDir dir;
    Setup() { write_tiny(dir); }
    std::unique_ptr<Model> m = nullptr;
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    std::string db = (dir.path() + "/kv.db").toStdString();
    std::string model_path() const { return (dir.path() + "/m.gguf").toStdString(); }
    const Model& model() {
        if (!m) m = Model::load(model_path());
        return *m;
    }
};

// A child process that takes the lock on `path` as another kvchat would and holds it until it
// is killed. Only system calls after fork: the parent has threads.
pid_t hold_lock_in_child(const std::string& path) {
    int ready[2];
    if (::pipe(ready) != 0) return -1;
    const char* p = path.c_str();
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int fd = ::open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(3);
        const char ok = 1;
        if (::write(ready[1], &ok, 1) != 1) ::_exit(4);
        for (;;) ::pause();
    }
    ::close(ready[1]);
    char ok = 0;
    const bool locked = ::read(ready[0], &ok, 1) == 1;
    ::close(ready[0]);
    if (!locked) {
        ::waitpid(pid, nullptr, 0);
        return -1;
    }
    return pid;
}

}  // namespace

class TestTwoWriters : public QObject {
    Q_OBJECT
private slots:
    // While another process holds the conversation, a turn waits about two seconds, is refused
    // naming the conversation, and stores nothing; another conversation of the same database
    // answers meanwhile; once that process is killed (-9) its lock is gone and the turn goes on.
    void secondWriterWaitsThenIsRefused() {
        Setup s;
        Store store(s.db);
        ChatSession reg(store, s.model(), *s.be);
        const int64_t id = reg.create("shared talk");
        const int64_t other = reg.create("other");
        reg.send(id, "the cat", greedy(3));
        const size_t before = reg.messages(id).size();

        lock_dir(store);
        const pid_t child = hold_lock_in_child(store.conversation_lock_path(id));
        QVERIFY(child > 0);
        const auto t0 = std::chrono::steady_clock::now();
        const std::string err = error_of([&] { reg.send(id, "sat on", greedy(3)); });
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        QVERIFY2(contains(err, "'shared talk'") && contains(err, "another kvchat process"), err.c_str());
        QVERIFY2(waited >= 1.5 && waited < 30, std::to_string(waited).c_str());
        QCOMPARE(reg.messages(id).size(), before);
        QVERIFY(contains(error_of([&] { reg.regenerate(id, greedy(3)); }), "'shared talk'"));
        QCOMPARE(reg.messages(id).size(), before);

        // Side by side: another conversation is not held up.
        const auto t1 = std::chrono::steady_clock::now();
        reg.send(other, "the mat", greedy(3));
        QVERIFY(std::chrono::steady_clock::now() - t1 < std::chrono::milliseconds(1500));
        QCOMPARE(reg.messages(other).size(), size_t(2));

        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        reg.send(id, "sat on", greedy(3));
        QCOMPARE(reg.messages(id).size(), before + 2);
        // Deleting the conversation removes its lock file with its snapshot.
        const std::string lock = store.conversation_lock_path(id);
        QVERIFY(QFileInfo::exists(QString::fromStdString(lock)));
        reg.remove(id);
        QVERIFY(!QFileInfo::exists(QString::fromStdString(lock)));
    }

    // Two connections (as two processes have): the one that answers second reads the other's
    // turn first, so the stored order is question, answer, question, answer, and its prompt is
    // the whole transcript.
    void aTurnReadsTheOtherWritersMessagesFirst() {
        Setup s;
        Store store_a(s.db);
        ChatSession a(store_a, s.model(), *s.be);
        const int64_t id = a.create("c");
        a.send(id, "the cat", greedy(3));
        Store store_b(s.db);
        ChatSession b(store_b, s.model(), *s.be);
        b.send(id, "sat on", greedy(3));  // a still holds the transcript of one turn

        const TurnResult r = a.send(id, "the mat", greedy(3));
        bool told = false;
        for (const std::string& n : r.notices) told = told || contains(n, "changed by another kvchat process");
        QVERIFY(told);
        const std::vector<MessageRecord> msgs = store_a.list_messages(id);
        QCOMPARE(msgs.size(), size_t(6));
        const Role want[] = {Role::User, Role::Assistant, Role::User, Role::Assistant, Role::User, Role::Assistant};
        for (size_t i = 0; i < msgs.size(); ++i) QCOMPARE(msgs[i].role, want[i]);
        QCOMPARE(msgs[2].content, std::string("sat on"));
        QCOMPARE(msgs[4].content, std::string("the mat"));
        std::vector<ChatMessage> transcript;
        for (size_t i = 0; i < 5; ++i) transcript.push_back({msgs[i].role, msgs[i].content});
        QCOMPARE(r.figures.prompt_tokens,
                 static_cast<int64_t>(a.chat_template().render(transcript, true).tokens.size()));
    }

    // A cache left unsaved in one process (a cancelled turn) is not written over the snapshot
    // that another process saved after a newer turn.
    void staleSnapshotNeverReplacesNewer() {
        Setup s;
        std::string newer;
        std::string snapshot_path;
        int64_t id = 0;
        {
            Store store_a(s.db);
            auto a = std::make_unique<ChatSession>(store_a, s.model(), *s.be);
            id = a->create("c");
            a->send(id, "the cat", greedy(3));
            std::atomic<bool> cancel{false};
            TurnCallbacks cb;
            cb.progress.cancel = &cancel;
            cb.progress.report = [&](std::string_view task, int64_t, int64_t) {
                if (task == "Prefilling") cancel = true;
            };
            bool cancelled = false;
            try {
                a->send(id, long_text(), greedy(3), cb);
            } catch (const Cancelled&) {
                cancelled = true;
            }
            QVERIFY(cancelled);  // a's cache changed and is unsaved
            {
                Store store_b(s.db);
                ChatSession b(store_b, s.model(), *s.be);
                b.send(id, "sat on", greedy(3));
            }
            const auto rec = store_a.find_conversation_by_id(id);
            QVERIFY(rec && !rec->snapshot.empty());
            snapshot_path = store_a.snapshot_path(rec->snapshot);
            newer = file_bytes(snapshot_path);
            QVERIFY(!newer.empty());
            a.reset();  // saves what changed: a's cache is of an older transcript
        }
        QCOMPARE(file_bytes(snapshot_path).size(), newer.size());
        QVERIFY(file_bytes(snapshot_path) == newer);
        // And the conversation goes on from the newer snapshot.
        Store store(s.db);
        ChatSession reg(store, s.model(), *s.be);
        const TurnResult r = reg.send(id, "the mat", greedy(3));
        QVERIFY(r.figures.cached_tokens > 0);
        QCOMPARE(store.list_messages(id).size(), size_t(6));
    }

    // Two kvchat-cli runs on one conversation at the same time: both answer, one after the
    // other, and the stored transcript alternates.
    void twoCliRunsAtOnce() {
        Setup s;
        const QString db = QString::fromStdString(s.db), model = QString::fromStdString(s.model_path());
        QProcess p1, p2;
        const QStringList common = {"chat", "--db", db, "--model", model, "--conversation", "both", "-n", "24", "--greedy",
                                    "--json"};
        // The conversation exists first, so both runs open the same row.
        QProcess p0;
        p0.start(QString::fromUtf8(test::cli_path()), common + QStringList{"--message", "hello"});
        QVERIFY(p0.waitForFinished(120000) && p0.exitCode() == 0);
        p1.start(QString::fromUtf8(test::cli_path()), common + QStringList{"--message", "first question"});
        p2.start(QString::fromUtf8(test::cli_path()), common + QStringList{"--message", "second question"});
        QVERIFY(p1.waitForFinished(120000) && p2.waitForFinished(120000));
        // The second writer waits up to 2 s for the first turn and then takes its own. On a machine
        // so busy that the first turn outlasts the wait, the second is refused, naming the
        // conversation; either way the transcript never interleaves.
        int refused = 0;
        for (QProcess* p : {&p1, &p2}) {
            if (p->exitCode() == 0) continue;
            const QByteArray err = p->readAllStandardError();
            QVERIFY2(err.contains("both"), err.constData());
            ++refused;
        }
        QVERIFY2(refused < 2, "both writers were refused");
        Store store(s.db);
        const auto msgs = store.list_messages(store.find_conversation("both")->id);
        QCOMPARE(msgs.size(), size_t(refused ? 4 : 6));
        for (size_t i = 0; i < msgs.size(); ++i) QCOMPARE(msgs[i].role, i % 2 == 0 ? Role::User : Role::Assistant);
        if (refused) {
            QVERIFY(msgs[2].content == "first question" || msgs[2].content == "second question");
            return;
        }
        QVERIFY((msgs[2].content == "first question" && msgs[4].content == "second question") ||
                (msgs[2].content == "second question" && msgs[4].content == "first question"));
        // The later answer's prompt holds the earlier turn.
        QVERIFY(msgs[5].stats.prompt_tokens > msgs[3].stats.prompt_tokens + msgs[3].stats.generated_tokens);
    }
};

QTEST_GUILESS_MAIN(TestTwoWriters)
#include "test_two_writers.moc"
