// The persistent store: schema and pragmas, CRUD of every table, refusals with clear messages,
// awkward text kept byte for byte, repair of invalid UTF-8, databases that are newer, foreign or
// damaged, and messages surviving a SIGKILL of the writer.
#include "engine/common/utf8.h"
#include "engine/error.h"
#include "engine/store/store.h"
#include "support/raw_sqlite.h"
#include "support/test_paths.h"

#include <QDir>
#include <QFile>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using kvchat::ConversationSettings;
using kvchat::Error;
using kvchat::Role;
using kvchat::StopReason;
using kvchat::Store;

namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const kvchat::Error& e) {
        return e.what();
    }
    return "<no error>";
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

QByteArray file_bytes(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return "<unreadable>";
    return f.readAll();
}

void write_bytes(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(bytes), bytes.size());
}

using kvchat::test::raw_exec;
using kvchat::test::raw_query;

// Bytes 1..255 once each, made valid: ASCII stays, and each of the 128 bytes 80..FF is its own
// ill-formed subpart (a continuation byte with no lead, or a lead followed by another lead), so
// each becomes one U+FFFD. Worked out from Unicode table 3-7 by hand.
std::string all_bytes_repaired() {
    std::string s;
    for (int b = 1; b < 0x80; ++b) s += static_cast<char>(b);
    for (int i = 0; i < 128; ++i) s += "\xEF\xBF\xBD";
    return s;
}

std::string all_bytes() {
    std::string s;
    for (int b = 1; b <= 255; ++b) s += static_cast<char>(b);
    return s;
}

// Valid text that looks binary: every code point U+0001..U+00FF.
std::string latin_code_points() {
    std::string s;
    for (int cp = 1; cp < 0x80; ++cp) s += static_cast<char>(cp);
    for (int cp = 0x80; cp <= 0xFF; ++cp) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

// A paste of `size` bytes mixing prose, code, quotes, percent signs and emoji.
std::string paste(size_t size) {
    static const char* const pieces[] = {
        "Lorem ipsum dolor sit amet, ", "printf(\"%s %d%%\\n\", s, n);\n", "'; DROP TABLE messages; --",
        "\"quoted\" and 'single' ", "\xF0\x9F\x98\x80 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD ", "caf\xC3\xA9 \xE2\x82\xAC 100% ",
        "\t\r\n", "\\ backslash \\\\ ", "%1$s %n %% ",
    };
    std::string s;
    size_t i = 0;
    while (s.size() < size) s += pieces[(i++ * 7) % std::size(pieces)];
    while (!kvchat::is_valid_utf8(s.substr(0, size))) --size;  // never cut an emoji in half
    return s.substr(0, size);
}

// The content of message `i` in the crash test: recognisable and checkable after a reopen.
std::string crash_content(int i, size_t size) {
    std::string s = "message " + std::to_string(i) + " ";
    while (s.size() < size) s += static_cast<char>('a' + (s.size() * 31 + static_cast<size_t>(i)) % 26);
    return s;
}

}  // namespace

class TestStore : public QObject {
    Q_OBJECT

private slots:
    // A file size limit (ulimit -f) stops a write with words that say so, and where; nothing
    // committed before it is lost. (A full disk takes the same path: ENOSPC instead of EFBIG.)
    void fileSizeLimitSaysSo() {
        QTemporaryDir dir;
        const std::string db = (dir.path() + "/kv.db").toStdString();
        Store store(db);
        const auto c = store.create_conversation("big", "", "");
        store.append_message(c.id, Role::User, "kept");
        struct rlimit old_limit {};
        QCOMPARE(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
        struct rlimit small = old_limit;
        small.rlim_cur = 256 * 1024;
        auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
        const std::string err = error_of([&] { store.append_message(c.id, Role::User, std::string(1 << 20, 'x')); });
        setrlimit(RLIMIT_FSIZE, &old_limit);
        std::signal(SIGXFSZ, old_handler);
        QVERIFY2(contains(err, "the file size limit was reached") && contains(err, db) &&
                     contains(err, dir.path().toStdString()),
                 err.c_str());
        QVERIFY2(!contains(err, "disk I/O error") || contains(err, "file size limit"), err.c_str());
        Store again(db);
        const auto msgs = again.list_messages(c.id);
        QCOMPARE(msgs.size(), size_t(1));
        QCOMPARE(msgs[0].content, std::string("kept"));
    }

    void createsSchemaWithPragmas() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/sub/folder/kvchat.db").toStdString();
        {
            Store store(path);
            QCOMPARE(store.path(), path);
            QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
            QCOMPARE(store.pragma("journal_mode"), std::string("wal"));
            QCOMPARE(store.pragma("foreign_keys"), std::string("1"));
            QCOMPARE(store.pragma("synchronous"), std::string("2"));  // FULL
            QVERIFY(std::stoi(store.pragma("busy_timeout")) >= 1000);
            QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
            QCOMPARE(store.snapshot_dir(), (dir.path() + "/sub/folder/snapshots").toStdString());
            QVERIFY(QFileInfo(QString::fromStdString(store.snapshot_dir())).isDir());
            QVERIFY(contains(error_of([&] { store.pragma("user_version; DROP TABLE messages"); }), "not a pragma name"));
        }
        QCOMPARE(raw_query(path, "PRAGMA user_version"), std::to_string(Store::kSchemaVersion));
        QCOMPARE(raw_query(path, "PRAGMA journal_mode"), std::string("wal"));  // WAL is kept in the file
        QCOMPARE(raw_query(path, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema "
                                 "WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%_fts%' "
                                 "ORDER BY name)"),
                 std::string("conversation_settings,conversations,message_versions,messages,prefix_messages,prefixes,settings,"
                             "strategy_changes,version_messages"));
        // The search index: two full-text tables (each with its FTS5 shadow tables).
        QCOMPARE(raw_query(path, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema "
                                 "WHERE sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name)"),
                 std::string("conversation_titles_fts,message_text_fts"));
        // Reopening a current database keeps what it holds.
        {
            Store store(path);
            store.create_conversation("kept", "", "");
        }
        Store again(path);
        QVERIFY(again.find_conversation("kept").has_value());
        QCOMPARE(again.pragma("user_version"), std::to_string(Store::kSchemaVersion));
    }

    void defaultPathFollowsXdgDataHome() {
        QTemporaryDir dir;
        const QByteArray old = qgetenv("XDG_DATA_HOME");
        qputenv("XDG_DATA_HOME", dir.path().toUtf8());
        const std::string expected = (dir.path() + "/kvchat/kvchat.db").toStdString();
        QCOMPARE(Store::default_path(), expected);
        {
            Store store;
            QCOMPARE(store.path(), expected);
        }
        if (old.isNull()) qunsetenv("XDG_DATA_HOME");
        else qputenv("XDG_DATA_HOME", old);
        QVERIFY(QFile::exists(QString::fromStdString(expected)));
        QVERIFY(QFileInfo(dir.path() + "/kvchat/snapshots").isDir());
    }

    void conversations() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kvchat.db").toStdString());
        QVERIFY(store.list_conversations().empty());
        const auto a = store.create_conversation("Alpha", "sha256:aaa", "dynamic");
        const auto b = store.create_conversation("Beta", "sha256:bbb", "static:4096");
        const auto c = store.create_conversation("Gamma", "sha256:ccc", "sink:4+252");
        QVERIFY(a.id > 0 && b.id > a.id && c.id > b.id);
        QCOMPARE(a.title, std::string("Alpha"));
        QCOMPARE(b.model_fingerprint, std::string("sha256:bbb"));
        QCOMPARE(c.cache_spec, std::string("sink:4+252"));
        QVERIFY(a.snapshot.empty());
        QVERIFY(a.created_ms > 1600000000000);  // a real clock reading, in milliseconds
        QCOMPARE(a.updated_ms, a.created_ms);

        const auto titles = [&] {
            std::vector<std::string> t;
            for (const auto& r : store.list_conversations()) t.push_back(r.title);
            return t;
        };
        QCOMPARE(titles(), (std::vector<std::string>{"Gamma", "Beta", "Alpha"}));
        store.touch_conversation(a.id);
        QCOMPARE(titles(), (std::vector<std::string>{"Alpha", "Gamma", "Beta"}));
        store.append_message(b.id, Role::User, "hello");
        QCOMPARE(titles(), (std::vector<std::string>{"Beta", "Alpha", "Gamma"}));

        const auto found = store.find_conversation("Gamma");
        QVERIFY(found.has_value());
        QCOMPARE(found->id, c.id);
        QCOMPARE(store.find_conversation_by_id(b.id)->title, std::string("Beta"));
        QVERIFY(!store.find_conversation("gamma").has_value());  // titles are exact
        QVERIFY(!store.find_conversation_by_id(9999).has_value());

        store.rename_conversation(c.id, "Delta");
        QVERIFY(!store.find_conversation("Gamma").has_value());
        QCOMPARE(store.find_conversation("Delta")->id, c.id);
        QCOMPARE(error_of([&] { store.rename_conversation(c.id, "Alpha"); }),
                 std::string("a conversation named 'Alpha' already exists"));
        QCOMPARE(error_of([&] { store.create_conversation("Beta", "", ""); }),
                 std::string("a conversation named 'Beta' already exists"));
        QCOMPARE(error_of([&] { store.create_conversation("", "", ""); }), std::string("a conversation needs a name"));
        QCOMPARE(error_of([&] { store.rename_conversation(4242, "x"); }), std::string("no conversation with id 4242"));
        QCOMPARE(store.list_conversations().size(), size_t(3));

        store.set_conversation_cache_spec(a.id, "quantized:int4");
        store.set_conversation_model(a.id, "sha256:new");
        QCOMPARE(store.set_conversation_snapshot(a.id, "conversation-1.kvsnap"), std::string());
        QCOMPARE(store.set_conversation_snapshot(a.id, "conversation-1.kvsnap"), std::string());  // same name
        QCOMPARE(store.set_conversation_snapshot(a.id, "conversation-1-b.kvsnap"), std::string("conversation-1.kvsnap"));
        auto updated = *store.find_conversation_by_id(a.id);
        QCOMPARE(updated.cache_spec, std::string("quantized:int4"));
        QCOMPARE(updated.model_fingerprint, std::string("sha256:new"));
        QCOMPARE(updated.snapshot, std::string("conversation-1-b.kvsnap"));

        QCOMPARE(store.delete_conversation(a.id), std::string("conversation-1-b.kvsnap"));
        QCOMPARE(store.delete_conversation(b.id), std::string());
        QVERIFY(!store.find_conversation_by_id(a.id).has_value());
        QCOMPARE(titles(), (std::vector<std::string>{"Delta"}));
        QCOMPARE(error_of([&] { store.delete_conversation(a.id); }),
                 "no conversation with id " + std::to_string(a.id));
        // Ids are never reused, so a snapshot named after an id cannot be claimed by a newer row.
        QVERIFY(store.create_conversation("Alpha", "", "").id > c.id);
    }

    void messages() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kvchat.db").toStdString());
        const auto conv = store.create_conversation("chat", "fp", "dynamic");
        const auto other = store.create_conversation("other", "fp", "dynamic");
        const auto sys = store.append_message(conv.id, Role::System, "You are terse.");
        const auto user = store.append_message(conv.id, Role::User, "Hi!");
        kvchat::AnswerFigures stats;
        stats.prompt_tokens = 17;
        stats.generated_tokens = 5;
        stats.ttft_ms = 12.5;
        stats.tokens_per_second = 88.25;
        const auto reply = store.append_message(conv.id, Role::Assistant, "Hello.", stats);
        store.append_message(other.id, Role::User, "elsewhere");
        QCOMPARE(sys.ordinal, int64_t(0));
        QCOMPARE(user.ordinal, int64_t(1));
        QCOMPARE(reply.ordinal, int64_t(2));
        QVERIFY(reply.id > user.id && user.id > sys.id);
        QVERIFY(!reply.content_repaired);

        auto list = store.list_messages(conv.id);
        QCOMPARE(list.size(), size_t(3));
        QCOMPARE(list[0].role, Role::System);
        QCOMPARE(list[1].role, Role::User);
        QCOMPARE(list[2].role, Role::Assistant);
        QCOMPARE(list[0].content, std::string("You are terse."));
        QCOMPARE(list[2].content, std::string("Hello."));
        QCOMPARE(list[2].conversation_id, conv.id);
        QCOMPARE(list[2].stats.prompt_tokens, int64_t(17));
        QCOMPARE(list[2].stats.generated_tokens, int64_t(5));
        QCOMPARE(list[2].stats.ttft_ms, std::optional<double>(12.5));
        QCOMPARE(list[2].stats.tokens_per_second, std::optional<double>(88.25));
        QVERIFY(!list[1].stats.ttft_ms.has_value());
        QVERIFY(!list[1].stats.tokens_per_second.has_value());
        QCOMPARE(list[2].created_ms, reply.created_ms);
        QCOMPARE(store.list_messages(other.id).size(), size_t(1));
        QCOMPARE(kvchat::role_name(Role::Assistant), std::string_view("assistant"));

        // Edit the user message, then regenerate: everything after it goes.
        QVERIFY(!store.update_message_content(user.id, "Hi there!"));
        QCOMPARE(store.delete_messages_after(conv.id, user.ordinal), int64_t(1));
        list = store.list_messages(conv.id);
        QCOMPARE(list.size(), size_t(2));
        QCOMPARE(list[1].content, std::string("Hi there!"));
        const auto again = store.append_message(conv.id, Role::Assistant, "Hello again.");
        QCOMPARE(again.ordinal, int64_t(2));
        QCOMPARE(store.delete_messages_after(conv.id, 99), int64_t(0));
        QCOMPARE(store.delete_messages_after(conv.id, -1), int64_t(3));
        QVERIFY(store.list_messages(conv.id).empty());
        QCOMPARE(store.append_message(conv.id, Role::User, "fresh start").ordinal, int64_t(0));

        QCOMPARE(error_of([&] { store.append_message(777, Role::User, "x"); }), std::string("no conversation with id 777"));
        QCOMPARE(error_of([&] { store.update_message_content(555555, "x"); }),
                 std::string("no message with id 555555"));
        QCOMPARE(store.list_messages(other.id).size(), size_t(1));
    }

    // A conversation and its opening messages (a prefix's) are written together or not at all.
    void conversationWithOpeningIsOneTransaction() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        {
            Store store(path);
            std::vector<kvchat::MessageRecord> stored;
            const auto c = store.create_conversation("opened", "fp", "dynamic",
                                                     {{Role::System, "Be brief."}, {Role::User, "bad \xff byte"}}, &stored);
            QCOMPARE(stored.size(), size_t(2));
            const auto listed = store.list_messages(c.id);
            QCOMPARE(listed.size(), size_t(2));
            QCOMPARE(listed[0].ordinal, int64_t(0));
            QCOMPARE(listed[1].ordinal, int64_t(1));
            QCOMPARE(listed[1].content, std::string("bad \xEF\xBF\xBD byte"));
            QVERIFY(listed[1].content_repaired && stored[1].content_repaired);
            QCOMPARE(stored[1].id, listed[1].id);
        }
        // The second opening message fails to insert (a trigger stands in for a crash or a full
        // disk): neither the conversation nor the first message is left behind.
        QCOMPARE(raw_exec(path, "CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.content = 'boom' "
                                "BEGIN SELECT RAISE(ABORT, 'boom'); END"),
                 std::string("ok"));
        Store store(path);
        const std::string err = error_of([&] {
            store.create_conversation("half", "fp", "dynamic", {{Role::System, "fine"}, {Role::User, "boom"}});
        });
        QVERIFY2(err.find("boom") != std::string::npos, err.c_str());
        QVERIFY(!store.find_conversation("half"));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM messages WHERE content = 'fine'"), std::string("0"));
    }

    void cascadeDelete() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        {
            Store store(path);
            const auto doomed = store.create_conversation("doomed", "", "");
            const auto kept = store.create_conversation("kept", "", "");
            for (int i = 0; i < 10; ++i) store.append_message(doomed.id, Role::User, "m" + std::to_string(i));
            store.append_message(kept.id, Role::User, "stays");
            store.delete_conversation(doomed.id);
            QVERIFY(store.list_messages(doomed.id).empty());
            QCOMPARE(store.list_messages(kept.id).size(), size_t(1));
        }
        QCOMPARE(raw_query(path, "SELECT count(*) FROM messages"), std::string("1"));
    }

    void prefixes() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        Store store(path);
        kvchat::PrefixRecord p;
        p.name = "reviewer";
        p.text = "You are a careful code reviewer.";
        p.model_fingerprint = "sha256:abc";
        p.cache_spec = "dynamic";
        p.tokens = {1, -1, 0x01020304, 2147483647, -2147483647 - 1, 0};
        p.snapshot = "prefix-reviewer.kvsnap";
        const auto saved = store.save_prefix(p);
        QVERIFY(saved.id > 0);
        QCOMPARE(saved.name, p.name);
        QCOMPARE(saved.text, p.text);
        QCOMPARE(saved.tokens, p.tokens);
        QCOMPARE(saved.snapshot, p.snapshot);
        QCOMPARE(saved.use_count, int64_t(0));
        QVERIFY(!saved.last_used_ms.has_value());
        QVERIFY(saved.created_ms > 1600000000000);
        // The token list is int32 little-endian, whatever the machine.
        QCOMPARE(QByteArray::fromStdString(raw_query(path, "SELECT tokens FROM prefixes")).toHex(),
                 QByteArray("01000000ffffffff04030201ffffff7f0000008000000000"));

        kvchat::PrefixRecord q;
        q.name = "analyst";
        q.text = "Answer with numbers.";
        const auto second = store.save_prefix(q);
        QVERIFY(second.tokens.empty());
        QVERIFY(second.snapshot.empty());
        QCOMPARE(error_of([&] { store.save_prefix(q); }), std::string("a prefix named 'analyst' already exists"));
        q.name = "";
        QCOMPARE(error_of([&] { store.save_prefix(q); }), std::string("a prefix needs a name"));

        auto names = [&] {
            std::vector<std::string> n;
            for (const auto& r : store.list_prefixes()) n.push_back(r.name);
            return n;
        };
        QCOMPARE(names(), (std::vector<std::string>{"analyst", "reviewer"}));
        QCOMPARE(store.find_prefix("reviewer")->tokens, p.tokens);
        QCOMPARE(store.find_prefix_by_id(second.id)->name, std::string("analyst"));
        QVERIFY(!store.find_prefix("nobody").has_value());

        store.rename_prefix(saved.id, "critic");
        QCOMPARE(names(), (std::vector<std::string>{"analyst", "critic"}));
        QCOMPARE(error_of([&] { store.rename_prefix(saved.id, "analyst"); }),
                 std::string("a prefix named 'analyst' already exists"));
        QCOMPARE(error_of([&] { store.rename_prefix(31337, "x"); }), std::string("no prefix with id 31337"));

        // New text invalidates the snapshot: it is dropped and handed back for removal.
        const auto update = store.update_prefix_text(saved.id, "You are a blunt critic.", {5, 6, 7});
        QCOMPARE(update.dropped_snapshot, std::string("prefix-reviewer.kvsnap"));
        QVERIFY(!update.text_repaired);
        auto critic = *store.find_prefix("critic");
        QCOMPARE(critic.text, std::string("You are a blunt critic."));
        QCOMPARE(critic.tokens, (std::vector<int32_t>{5, 6, 7}));
        QVERIFY(critic.snapshot.empty());
        QCOMPARE(store.set_prefix_snapshot(saved.id, "prefix-critic.kvsnap", "sha256:def", "static:512"), std::string());
        critic = *store.find_prefix("critic");
        QCOMPARE(critic.snapshot, std::string("prefix-critic.kvsnap"));
        QCOMPARE(critic.model_fingerprint, std::string("sha256:def"));
        QCOMPARE(critic.cache_spec, std::string("static:512"));

        store.record_prefix_use(saved.id);
        store.record_prefix_use(saved.id);
        critic = *store.find_prefix("critic");
        QCOMPARE(critic.use_count, int64_t(2));
        QVERIFY(critic.last_used_ms.has_value() && *critic.last_used_ms >= critic.created_ms);
        QCOMPARE(store.find_prefix("analyst")->use_count, int64_t(0));

        const auto conv = store.create_conversation("c", "", "");
        store.set_conversation_snapshot(conv.id, "conversation-1.kvsnap");
        auto refs = store.snapshot_names();
        std::sort(refs.begin(), refs.end());
        QCOMPARE(refs, (std::vector<std::string>{"conversation-1.kvsnap", "prefix-critic.kvsnap"}));

        QCOMPARE(store.delete_prefix(saved.id), std::string("prefix-critic.kvsnap"));
        QCOMPARE(store.delete_prefix(second.id), std::string());
        QVERIFY(store.list_prefixes().empty());
        QCOMPARE(error_of([&] { store.delete_prefix(saved.id); }), "no prefix with id " + std::to_string(saved.id));
        QCOMPARE(error_of([&] { store.record_prefix_use(saved.id); }), "no prefix with id " + std::to_string(saved.id));
    }

    // A prefix holds the first messages of a conversation, in order, kept exactly; they go with it.
    void prefixMessages() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        Store store(path);
        kvchat::PrefixRecord p;
        p.name = "it's a \"few-shot\"'; DROP TABLE prefix_messages; --";
        p.messages = {{Role::System, "Answer in one word.", false},
                      {Role::User, "Capital of France? '; DROP TABLE prefixes; --", false},
                      {Role::Assistant, "Paris", false},
                      {Role::User, std::string("bad \xff byte"), false}};
        p.tokens = {2, 3, 4};
        const auto saved = store.save_prefix(p);
        QCOMPARE(saved.name, p.name);
        QCOMPARE(saved.messages.size(), size_t(4));
        QCOMPARE(saved.messages[0].role, Role::System);
        QCOMPARE(saved.messages[1].role, Role::User);
        QCOMPARE(saved.messages[1].content, p.messages[1].content);
        QCOMPARE(saved.messages[2].role, Role::Assistant);
        QCOMPARE(saved.messages[2].content, std::string("Paris"));
        QCOMPARE(saved.messages[3].content, std::string("bad \xEF\xBF\xBD byte"));
        QVERIFY(saved.messages[3].content_repaired);
        QVERIFY(!saved.messages[0].content_repaired);
        QVERIFY(saved.text_repaired);
        QCOMPARE(saved.text, std::string("Answer in one word."));  // the first message, as a preview
        QCOMPARE(store.list_prefixes().front().messages.size(), size_t(4));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM prefix_messages"), std::string("4"));

        // Without messages, the text is one system message (a prefix saved from text).
        kvchat::PrefixRecord q;
        q.name = "plain";
        q.text = "You are terse.";
        const auto plain = store.save_prefix(q);
        QCOMPARE(plain.messages.size(), size_t(1));
        QCOMPARE(plain.messages[0].role, Role::System);
        QCOMPARE(plain.messages[0].content, q.text);
        // A name in use saves nothing, messages included.
        QCOMPARE(error_of([&] { store.save_prefix(q); }), std::string("a prefix named 'plain' already exists"));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM prefix_messages"), std::string("5"));

        // Replacing the messages replaces all of them and drops the snapshot that no longer matches.
        store.set_prefix_snapshot(saved.id, "prefix-1.kvcache", "fp", "dynamic");
        const auto u = store.update_prefix_messages(saved.id, {{Role::User, "Hi", false}, {Role::Assistant, "Hello", false}},
                                                    {7, 8});
        QCOMPARE(u.dropped_snapshot, std::string("prefix-1.kvcache"));
        QVERIFY(!u.text_repaired);
        const auto edited = *store.find_prefix_by_id(saved.id);
        QCOMPARE(edited.messages.size(), size_t(2));
        QCOMPARE(edited.messages[0].role, Role::User);
        QCOMPARE(edited.messages[1].content, std::string("Hello"));
        QCOMPARE(edited.text, std::string("Hi"));
        QCOMPARE(edited.tokens, (std::vector<int32_t>{7, 8}));
        QVERIFY(edited.snapshot.empty());
        QVERIFY(!edited.text_repaired);
        QCOMPARE(error_of([&] { store.update_prefix_messages(saved.id, {}, {}); }),
                 std::string("a prefix needs at least one message"));
        QCOMPARE(error_of([&] { store.update_prefix_messages(31337, {{Role::User, "x", false}}, {}); }),
                 std::string("no prefix with id 31337"));
        QCOMPARE(store.find_prefix_by_id(saved.id)->messages.size(), size_t(2));  // the refusals changed nothing

        // Deleting a prefix deletes its messages.
        store.delete_prefix(saved.id);
        QCOMPARE(raw_query(path, "SELECT count(*) FROM prefix_messages"), std::string("1"));
        QCOMPARE(store.list_prefixes().size(), size_t(1));
    }

    // A database written by the previous schema (1: a prefix was one text) is migrated forward
    // keeping everything: each prefix becomes one system message with the same tokens, snapshot
    // and use figures, and conversations are untouched. Made here with schema 1's own statements.
    void migratesPrefixesFromSchema1() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/old.db").toStdString();
        // Schema 1 as its migration step creates it, then data of that time.
        QCOMPARE(raw_exec(path, Store::migration_sql(1)), std::string("ok"));
        const char* schema1 = R"sql(
PRAGMA journal_mode = WAL;
INSERT INTO conversations (title, model_fingerprint, cache_spec, snapshot, created_ms, updated_ms)
    VALUES ('trip', 'sha256:m', 'dynamic', 'conversation-1.kvcache', 1700000000000, 1700000000001);
INSERT INTO messages (conversation_id, ordinal, role, content, created_ms) VALUES
    (1, 0, 'user', 'Plan a day in Lyon.', 1700000000000),
    (1, 1, 'assistant', 'Start at Fourviere.', 1700000000001);
INSERT INTO prefixes (name, text, text_repaired, model_fingerprint, cache_spec, tokens, snapshot, created_ms,
                      last_used_ms, use_count) VALUES
    ('legal', 'You are a careful contracts lawyer.', 0, 'sha256:m', 'dynamic', X'0200000069000000ffffffff',
     'prefix-1.kvcache', 1700000000000, 1700000000500, 3),
    ('it''s "odd"; DROP TABLE prefixes; --', 'O''Brien: ' || char(65533), 1, 'sha256:m', 'quantized:nbits=4',
     X'', NULL, 1700000000002, NULL, 0);
INSERT INTO settings (key, value) VALUES ('chat.context_policy', 'sink');
PRAGMA user_version = 1;
)sql";
        QCOMPARE(raw_exec(path, schema1), std::string("ok"));
        QCOMPARE(raw_query(path, "PRAGMA user_version"), std::string("1"));
        {
            Store store(path);
            QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
            QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
            QCOMPARE(store.pragma("foreign_key_check"), std::string());
            const auto prefixes = store.list_prefixes();
            QCOMPARE(prefixes.size(), size_t(2));
            const auto legal = *store.find_prefix("legal");
            QCOMPARE(legal.messages.size(), size_t(1));
            QCOMPARE(legal.messages[0].role, Role::System);
            QCOMPARE(legal.messages[0].content, std::string("You are a careful contracts lawyer."));
            QCOMPARE(legal.text, std::string("You are a careful contracts lawyer."));
            QCOMPARE(legal.tokens, (std::vector<int32_t>{2, 105, -1}));
            QCOMPARE(legal.snapshot, std::string("prefix-1.kvcache"));
            QCOMPARE(legal.model_fingerprint, std::string("sha256:m"));
            QCOMPARE(legal.use_count, int64_t(3));
            QCOMPARE(legal.last_used_ms, std::optional<int64_t>(1700000000500));
            QCOMPARE(legal.created_ms, int64_t(1700000000000));
            const auto odd = *store.find_prefix("it's \"odd\"; DROP TABLE prefixes; --");
            QCOMPARE(odd.messages.size(), size_t(1));
            QCOMPARE(odd.messages[0].content, std::string("O'Brien: \xEF\xBF\xBD"));
            QVERIFY(odd.messages[0].content_repaired);  // the flag came along
            QVERIFY(odd.tokens.empty());
            QCOMPARE(odd.cache_spec, std::string("quantized:nbits=4"));
            // Conversations, messages and settings are as they were.
            const auto trip = store.find_conversation("trip");
            QVERIFY(trip.has_value());
            QCOMPARE(trip->snapshot, std::string("conversation-1.kvcache"));
            const auto msgs = store.list_messages(trip->id);
            QCOMPARE(msgs.size(), size_t(2));
            QCOMPARE(msgs[1].content, std::string("Start at Fourviere."));
            QCOMPARE(store.setting("chat.context_policy"), std::optional<std::string>("sink"));
            // The migrated database takes prefixes of several messages.
            kvchat::PrefixRecord p;
            p.name = "few-shot";
            p.messages = {{Role::User, "2+2?", false}, {Role::Assistant, "4", false}};
            QCOMPARE(store.save_prefix(p).messages.size(), size_t(2));
        }
        // Opening it again runs no migration twice.
        Store again(path);
        QCOMPARE(again.list_prefixes().size(), size_t(3));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM prefix_messages"), std::string("4"));
        QCOMPARE(raw_query(path, "PRAGMA user_version"), std::to_string(Store::kSchemaVersion));
    }

    // An answer's generated ids (schema 4) come back as stored; an edit drops them (they spelled
    // the old text); a list that cannot be whole 4-byte ids is dropped on reading, and the
    // conversation still opens.
    void answerIdsSurviveReopening() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        kvchat::AnswerFigures stats;
        stats.token_ids = {5, 300, 70000, 2};
        int64_t id = 0, answer = 0;
        {
            Store store(path);
            id = store.create_conversation("ids", "fp", "dynamic").id;
            store.append_message(id, Role::User, "question");
            answer = store.append_message(id, Role::Assistant, "answer", stats).id;
            store.append_message(id, Role::User, "again");
            store.append_message(id, Role::Assistant, "answer 2", stats);
        }
        {
            Store store(path);
            const auto msgs = store.list_messages(id);
            QCOMPARE(msgs[1].stats.token_ids, stats.token_ids);
            QVERIFY(msgs[0].stats.token_ids.empty());
            store.update_message_content(answer, "edited");
        }
        QCOMPARE(raw_query(path, "SELECT length(token_ids) FROM messages WHERE ordinal = 3"), std::string("16"));
        {
            Store store(path);
            QVERIFY(store.list_messages(id)[1].stats.token_ids.empty());
        }
        QCOMPARE(raw_exec(path, "UPDATE messages SET token_ids = x'0102030405' WHERE ordinal = 3"), std::string("ok"));
        Store store(path);
        const auto msgs = store.list_messages(id);
        QCOMPARE(msgs.size(), size_t(4));
        QCOMPARE(msgs[3].content, std::string("answer 2"));
        QVERIFY(msgs[3].stats.token_ids.empty());
    }

    // Each answer's cache figures (schema 3) are stored with it and read back after reopening.
    void answerFiguresSurviveReopening() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        kvchat::AnswerFigures stats;
        stats.prompt_tokens = 900;
        stats.generated_tokens = 40;
        stats.ttft_ms = 31.5;
        stats.tokens_per_second = 42.75;
        stats.cached_tokens = 850;
        stats.prefix_tokens = 600;
        stats.computed_tokens = 50;
        stats.prefill_saved_ms = 1234.5;
        int64_t id = 0;
        {
            Store store(path);
            id = store.create_conversation("figures", "fp", "dynamic").id;
            store.append_message(id, Role::User, "question");
            store.append_message(id, Role::Assistant, "answer", stats);
        }
        Store store(path);
        const auto msgs = store.list_messages(id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[1].stats.cached_tokens, int64_t(850));
        QCOMPARE(msgs[1].stats.prefix_tokens, int64_t(600));
        QCOMPARE(msgs[1].stats.computed_tokens, int64_t(50));
        QCOMPARE(msgs[1].stats.prefill_saved_ms, std::optional<double>(1234.5));
        QCOMPARE(msgs[1].stats.ttft_ms, std::optional<double>(31.5));
        // A typed message has none.
        QCOMPARE(msgs[0].stats.cached_tokens, int64_t(0));
        QVERIFY(!msgs[0].stats.prefill_saved_ms.has_value());
        // The list's figures: two messages, the last answer's prompt + reply tokens, answered.
        const auto overview = store.list_conversation_overviews();
        QCOMPARE(overview.size(), size_t(1));
        QCOMPARE(overview[0].message_count, int64_t(2));
        QCOMPARE(overview[0].tokens, int64_t(940));
        QVERIFY(!overview[0].last_unanswered);
        store.append_message(id, Role::User, "and then?");
        QVERIFY(store.list_conversation_overviews()[0].last_unanswered);
    }

    // A schema 2 database gains the figures (zero, no saving) and a search index over what it
    // already held.
    void migratesFromSchema2() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/old.db").toStdString();
        QCOMPARE(raw_exec(path, std::string(Store::migration_sql(1)) + Store::migration_sql(2)), std::string("ok"));
        const char* schema2 = R"sql(
PRAGMA journal_mode = WAL;
INSERT INTO conversations (title, model_fingerprint, cache_spec, created_ms, updated_ms)
    VALUES ('Lyon trip', 'sha256:m', 'dynamic', 1700000000000, 1700000000001),
           ('taxes', 'sha256:m', 'dynamic', 1700000000000, 1700000000002);
INSERT INTO messages (conversation_id, ordinal, role, content, prompt_tokens, generated_tokens, ttft_ms,
                      tokens_per_second, created_ms) VALUES
    (1, 0, 'user', 'Plan a day among the traboules.', 0, 0, NULL, NULL, 1700000000000),
    (1, 1, 'assistant', 'Start at Fourviere.', 30, 5, 12.0, 50.0, 1700000000001),
    (2, 0, 'user', 'Which forms are due in April?', 0, 0, NULL, NULL, 1700000000002);
PRAGMA user_version = 2;
)sql";
        QCOMPARE(raw_exec(path, schema2), std::string("ok"));
        Store store(path);
        QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
        QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
        const auto lyon = *store.find_conversation("Lyon trip");
        const auto msgs = store.list_messages(lyon.id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[1].stats.prompt_tokens, int64_t(30));
        QCOMPARE(msgs[1].stats.cached_tokens, int64_t(0));
        QCOMPARE(msgs[1].stats.computed_tokens, int64_t(0));
        QVERIFY(!msgs[1].stats.prefill_saved_ms.has_value());
        // The index was filled from the rows already there: titles and message text.
        auto found = store.search_conversations("traboules");
        QCOMPARE(found.size(), size_t(1));
        QCOMPARE(found[0].conversation.title, std::string("Lyon trip"));
        found = store.search_conversations("lyon");
        QCOMPARE(found.size(), size_t(1));
        QCOMPARE(found[0].conversation.id, lyon.id);
        found = store.search_conversations("april");
        QCOMPARE(found.size(), size_t(1));
        QCOMPARE(found[0].conversation.title, std::string("taxes"));
        QCOMPARE(raw_exec(path, "INSERT INTO message_text_fts (message_text_fts) VALUES ('integrity-check')"),
                 std::string("ok"));
    }

    // Schema 5 adds origin, parent_id and branch_at to conversations: a schema-4 database keeps its
    // rows (messages with their generated ids), and they read as the app's, no branch.
    void migratesFromSchema4() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/old.db").toStdString();
        std::string up_to_4;
        for (int v = 1; v <= 4; ++v) up_to_4 += Store::migration_sql(v);
        QCOMPARE(raw_exec(path, up_to_4), std::string("ok"));
        const char* schema4 = R"sql(
PRAGMA journal_mode = WAL;
INSERT INTO conversations (title, model_fingerprint, cache_spec, snapshot, created_ms, updated_ms)
    VALUES ('Lyon trip', 'sha256:m', 'dynamic', 'kv.db.conversation-1.kvcache', 1700000000000, 1700000000001);
INSERT INTO messages (conversation_id, ordinal, role, content, prompt_tokens, generated_tokens, created_ms,
                      cached_tokens, token_ids) VALUES
    (1, 0, 'user', 'Plan a day among the traboules.', 0, 0, 1700000000000, 0, NULL),
    (1, 1, 'assistant', 'Start at Fourviere.', 30, 2, 1700000000001, 12, X'0700000009000000');
PRAGMA user_version = 4;
)sql";
        QCOMPARE(raw_exec(path, schema4), std::string("ok"));
        Store store(path);
        QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
        QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
        const auto lyon = *store.find_conversation("Lyon trip");
        QCOMPARE(lyon.origin, std::string("app"));
        QVERIFY(!lyon.parent_id.has_value());
        QCOMPARE(lyon.branch_at, int64_t(0));
        QCOMPARE(lyon.snapshot, std::string("kv.db.conversation-1.kvcache"));
        const auto msgs = store.list_messages(lyon.id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[1].stats.cached_tokens, int64_t(12));
        QCOMPARE(msgs[1].stats.token_ids, (std::vector<int32_t>{7, 9}));
        const auto overview = store.list_conversation_overviews();
        QCOMPARE(overview.size(), size_t(1));
        QCOMPARE(overview[0].message_count, int64_t(2));
        QCOMPARE(overview[0].tokens, int64_t(32));
        QCOMPARE(overview[0].conversation.origin, std::string("app"));
    }

    // A branch copies its parent's first messages with every figure, knows its parent and where it
    // branched, and outlives the parent (parent_id becomes NULL); bad counts, titles and origins are
    // refused without a row.
    void branches() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kv.db").toStdString());
        const auto parent = store.create_conversation("parent", "sha256:m", "dynamic", {}, nullptr, "api");
        QCOMPARE(parent.origin, std::string("api"));
        kvchat::AnswerFigures stats;
        stats.prompt_tokens = 9;
        stats.cached_tokens = 4;
        stats.token_ids = {11, 12, 13};
        store.append_message(parent.id, Role::User, "one");
        store.append_message(parent.id, Role::Assistant, "two", stats);
        store.append_message(parent.id, Role::User, "three");
        const auto b = store.create_branch("child", parent.id, 2, "app", "sha256:m", "sliding_window:window=8");
        QCOMPARE(b.parent_id, std::optional<int64_t>(parent.id));
        QCOMPARE(b.branch_at, int64_t(2));
        QCOMPARE(b.origin, std::string("app"));
        QCOMPARE(b.cache_spec, std::string("sliding_window:window=8"));
        const auto copied = store.list_messages(b.id);
        QCOMPARE(copied.size(), size_t(2));
        QCOMPARE(copied[0].content, std::string("one"));
        QCOMPARE(copied[1].content, std::string("two"));
        QCOMPARE(copied[1].ordinal, int64_t(1));
        QCOMPARE(copied[1].stats.token_ids, stats.token_ids);
        QCOMPARE(copied[1].stats.cached_tokens, int64_t(4));
        QVERIFY(copied[1].id != store.list_messages(parent.id)[1].id);
        // The branch is an ordinary conversation: its own messages do not reach the parent.
        store.append_message(b.id, Role::User, "elsewhere");
        QCOMPARE(store.list_messages(parent.id).size(), size_t(3));

        const auto before = store.list_conversations().size();
        QVERIFY(contains(error_of([&] { store.create_branch("c0", parent.id, 0, "app", "", ""); }), "1 to 3"));
        QVERIFY(contains(error_of([&] { store.create_branch("c4", parent.id, 4, "app", "", ""); }), "1 to 3"));
        QVERIFY(contains(error_of([&] { store.create_branch("child", parent.id, 1, "app", "", ""); }), "already exists"));
        QVERIFY(contains(error_of([&] { store.create_branch("c", parent.id, 1, "web", "", ""); }), "origin"));
        QVERIFY(contains(error_of([&] { store.create_branch("c", 999, 1, "app", "", ""); }), "no conversation"));
        QVERIFY(contains(error_of([&] { store.create_conversation("c", "", "", {}, nullptr, "web"); }), "origin"));
        QCOMPARE(store.list_conversations().size(), before);

        // The conversations a message list opening with "one" can share messages with.
        const auto other = store.create_conversation("other", "", "");
        store.append_message(other.id, Role::System, "one");
        auto opening = store.conversations_opening_with(Role::User, "one");
        QCOMPARE(opening.size(), size_t(2));
        QCOMPARE(opening[0].id, b.id);  // the most recent first
        QCOMPARE(opening[1].id, parent.id);
        QCOMPARE(store.conversations_opening_with(Role::System, "one").size(), size_t(1));
        QVERIFY(store.conversations_opening_with(Role::User, "two").empty());

        store.delete_conversation(parent.id);
        const auto orphan = *store.find_conversation_by_id(b.id);
        QVERIFY(!orphan.parent_id.has_value());
        QCOMPARE(orphan.branch_at, int64_t(2));
        QCOMPARE(store.list_messages(b.id).size(), size_t(3));
        QCOMPARE(store.pragma("foreign_key_check"), std::string());
    }

    // A search says where it matched: the first matching message of each conversation (its id
    // and place) with the words around the match, the matched words marked as typed in the
    // message (case and accents kept), long text cut with an ellipsis; a title-only match and
    // search syntax give no entry and no error.
    void searchMatchesCarrySnippets() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kvchat.db").toStdString());
        const auto a = store.create_conversation("Bread baking", "", "");
        const auto b = store.create_conversation("Sourdough title only", "", "");
        store.append_message(a.id, Role::User, "What flour should I buy?");
        store.append_message(a.id, Role::Assistant, "Strong white flour works for most loaves.");
        const auto hit = store.append_message(
            a.id, Role::User,
            "My starter is bubbly after two days and smells sour. Can I bake a Sourdough loaf with it tomorrow "
            "morning, or should I keep feeding it for another week before the first bake?");
        store.append_message(a.id, Role::Assistant, "Sourdough starters usually need about a week.");
        store.append_message(b.id, Role::User, "Nothing about bread here.");
        const auto matches = store.search_message_matches("sourdough", 6);
        QCOMPARE(matches.size(), size_t(1));
        const auto& m = matches.front();
        QCOMPARE(m.conversation_id, a.id);
        QCOMPARE(m.message_id, hit.id);
        QCOMPARE(m.ordinal, int64_t(2));
        const std::string marked = std::string(1, Store::kMatchBegin) + "Sourdough" + std::string(1, Store::kMatchEnd);
        QVERIFY2(m.snippet.find(marked) != std::string::npos, m.snippet.c_str());
        QVERIFY2(m.snippet.find("…") != std::string::npos, m.snippet.c_str());  // cut: the message is longer
        QVERIFY(m.snippet.size() < 120);
        // Every word, in one message.
        QCOMPARE(store.search_message_matches("flour strong").front().message_id, store.list_messages(a.id)[1].id);
        QVERIFY(store.search_message_matches("flour sourdough").empty());
        for (const char* q : {"\"", "*", "NEAR(a b)", "'; DROP TABLE messages; --", "  "})
            QCOMPARE(error_of([&] { store.search_message_matches(q); }), std::string("<no error>"));
        QVERIFY(store.search_message_matches("  ").empty());
    }

    // A database of the schema before 7 keeps its answers (how they ended: not recorded) and gains
    // per-conversation settings; answers stored now keep their stop reason.
    void migratesToSchema7() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/old.db").toStdString();
        std::string sql;
        for (int v = 1; v <= 6; ++v) sql += Store::migration_sql(v);
        sql += R"sql(
INSERT INTO conversations (title, model_fingerprint, cache_spec, created_ms, updated_ms)
    VALUES ('old', 'sha256:m', 'dynamic', 1700000000000, 1700000000001);
INSERT INTO messages (conversation_id, ordinal, role, content, prompt_tokens, generated_tokens, created_ms) VALUES
    (1, 0, 'user', 'hello', 0, 0, 1700000000000),
    (1, 1, 'assistant', 'hi', 10, 2, 1700000000001);
PRAGMA user_version = 6;
)sql";
        QCOMPARE(raw_exec(path, sql), std::string("ok"));
        Store store(path);
        QCOMPARE(store.pragma("user_version"), std::string("7"));
        const auto old = *store.find_conversation("old");
        auto msgs = store.list_messages(old.id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[1].content, std::string("hi"));
        QCOMPARE(msgs[1].stats.generated_tokens, int64_t(2));
        QVERIFY(!msgs[1].stats.stop_reason.has_value());
        QVERIFY(store.conversation_settings(old.id).empty());
        // Each reason is stored and read back as itself.
        for (StopReason r : {StopReason::EndOfSequence, StopReason::EndOfTurn, StopReason::StopString,
                             StopReason::MaxNewTokens, StopReason::ContextFull, StopReason::Stopped}) {
            kvchat::AnswerFigures f;
            f.generated_tokens = 1;
            f.stop_reason = r;
            store.append_message(old.id, Role::Assistant, "x", f);
            QCOMPARE(store.list_messages(old.id).back().stats.stop_reason, std::optional<StopReason>(r));
        }
        // A name a newer kvchat might write reads as not recorded, never as another reason.
        QCOMPARE(raw_exec(path, "UPDATE messages SET stop_reason = 'mystery' WHERE ordinal = 2"), std::string("ok"));
        QVERIFY(!store.list_messages(old.id)[2].stats.stop_reason.has_value());
    }

    // A conversation's own settings: set, read back (after reopening), changed, dropped, and
    // deleted with the conversation.
    void conversationSettingsKept() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/s.db").toStdString();
        int64_t id = 0;
        ConversationSettings own;
        own.temperature = 0.25;
        own.top_k = 7;
        own.seed = 42;
        own.max_new_tokens = 3;
        own.context_length = 300;
        {
            Store store(path);
            id = store.create_conversation("chat", "sha256:m", "dynamic").id;
            const int64_t other = store.create_conversation("other", "sha256:m", "dynamic").id;
            store.set_conversation_settings(id, own);
            QVERIFY(store.conversation_settings(other).empty());
        }
        Store store(path);
        QCOMPARE(store.conversation_settings(id), own);
        QVERIFY(!store.conversation_settings(id).top_p.has_value());
        own.top_k.reset();
        own.min_p = 0.1;
        store.set_conversation_settings(id, own);
        QCOMPARE(store.conversation_settings(id), own);
        store.set_conversation_settings(id, {});
        QVERIFY(store.conversation_settings(id).empty());
        store.set_conversation_settings(id, own);
        store.delete_conversation(id);
        QVERIFY(store.conversation_settings(id).empty());
        bool refused = false;
        try {
            store.set_conversation_settings(id, own);
        } catch (const Error&) {
            refused = true;
        }
        QVERIFY(refused);
    }

    // The system prompt: put before the messages (ordinals move up), changed in place, removed
    // (ordinals move back); appending goes on after the last message.
    void systemMessageSetChangedRemoved() {
        QTemporaryDir dir;
        Store store((dir.path() + "/p.db").toStdString());
        const int64_t id = store.create_conversation("chat", "sha256:m", "dynamic").id;
        store.append_message(id, Role::User, "q1");
        store.append_message(id, Role::Assistant, "a1");
        QVERIFY(!store.set_system_message(id, ""));  // none to remove
        QVERIFY(store.set_system_message(id, "Be brief."));
        auto msgs = store.list_messages(id);
        QCOMPARE(msgs.size(), size_t(3));
        QCOMPARE(msgs[0].role, Role::System);
        QCOMPARE(msgs[0].content, std::string("Be brief."));
        for (size_t i = 0; i < msgs.size(); ++i) QCOMPARE(msgs[i].ordinal, static_cast<int64_t>(i));
        QCOMPARE(msgs[1].content, std::string("q1"));
        QVERIFY(!store.set_system_message(id, "Be brief."));  // the same: nothing changes
        QVERIFY(store.set_system_message(id, "Be thorough."));
        QCOMPARE(store.list_messages(id)[0].content, std::string("Be thorough."));
        QCOMPARE(store.list_messages(id).size(), size_t(3));
        QVERIFY(store.set_system_message(id, ""));
        msgs = store.list_messages(id);
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(msgs[0].content, std::string("q1"));
        QCOMPARE(msgs[0].ordinal, int64_t(0));
        QCOMPARE(msgs[1].ordinal, int64_t(1));
        store.append_message(id, Role::User, "q2");
        QCOMPARE(store.list_messages(id).back().ordinal, int64_t(2));
        QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
    }

    // Search over titles and message text follows every change: new messages, edits, renames,
    // deletions; the query is plain text, never search syntax.
    void searchFollowsChanges() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kvchat.db").toStdString());
        const auto a = store.create_conversation("Bread baking", "", "");
        const auto b = store.create_conversation("Garden", "", "");
        const auto c = store.create_conversation("Misc", "", "");
        store.append_message(a.id, Role::User, "How long should sourdough proof?");
        const auto tomato = store.append_message(b.id, Role::User, "When do I plant tomatoes?");
        store.append_message(c.id, Role::User, "Crème brûlée for dessert, and sourdough too.");
        auto titles = [&](std::string_view q) {
            std::vector<std::string> out;
            for (const auto& o : store.search_conversations(q)) out.push_back(o.conversation.title);
            return out;
        };
        using V = std::vector<std::string>;
        QCOMPARE(titles("sourdough"), (V{"Misc", "Bread baking"}));  // most recent first
        QCOMPARE(titles("SOURDOUGH proof"), (V{"Bread baking"}));    // every word, any case
        QCOMPARE(titles("sour"), (V{"Misc", "Bread baking"}));       // the start of a word
        QCOMPARE(titles("creme"), (V{"Misc"}));                      // accents folded
        QCOMPARE(titles("bread"), (V{"Bread baking"}));              // the title
        QCOMPARE(titles("nothing-like-this"), V{});
        // Syntax characters are text: no error, no operator.
        for (const char* q : {"\"", "tomatoes\" OR \"bread", "*", "NEAR(a b)", "a:b", "(", "-", "'; DROP TABLE messages; --"})
            QCOMPARE(error_of([&] { store.search_conversations(q); }), std::string("<no error>"));
        QCOMPARE(titles("tomatoes\" OR \"bread"), V{});
        // No words: every conversation.
        QCOMPARE(titles("  ").size(), size_t(3));
        // An edit replaces the indexed text; a rename the indexed title.
        store.update_message_content(tomato.id, "When do I plant peppers?");
        QCOMPARE(titles("tomatoes"), V{});
        QCOMPARE(titles("peppers"), (V{"Garden"}));
        store.rename_conversation(b.id, "Vegetable patch");
        QCOMPARE(titles("garden"), V{});
        QCOMPARE(titles("vegetable"), (V{"Vegetable patch"}));
        // Deleted messages and conversations are no longer found.
        store.delete_messages_after(c.id, -1);
        QCOMPARE(titles("sourdough"), (V{"Bread baking"}));
        store.delete_conversation(a.id);
        QCOMPARE(titles("sourdough"), V{});
        QCOMPARE(titles("bread"), V{});
    }

    void snapshotNamesArePlainFileNames() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kvchat.db").toStdString());
        QCOMPARE(store.snapshot_path("conversation-3.kvsnap"), store.snapshot_dir() + "/conversation-3.kvsnap");
        for (const char* bad : {"", "../kvchat.db", "a/b", "/etc/passwd", ".hidden", "..", "name with space", "x\ny"}) {
            const std::string msg = error_of([&] { store.snapshot_path(bad); });
            QVERIFY2(contains(msg, "is not a plain file name"), bad);
        }
        const auto conv = store.create_conversation("c", "", "");
        QVERIFY(contains(error_of([&] { store.set_conversation_snapshot(conv.id, "../escape"); }), "not a plain file name"));
        QVERIFY(store.find_conversation_by_id(conv.id)->snapshot.empty());
        kvchat::PrefixRecord p;
        p.name = "p";
        p.snapshot = "../../x";
        QVERIFY(contains(error_of([&] { store.save_prefix(p); }), "not a plain file name"));
        QVERIFY(store.list_prefixes().empty());
    }

    void settings() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        {
            Store store(path);
            QVERIFY(!store.setting("theme").has_value());
            store.set_setting("theme", "dark");
            store.set_setting("cache", "sink:4+1020");
            QCOMPARE(store.setting("theme"), std::optional<std::string>("dark"));
            store.set_setting("theme", "light");
            QCOMPARE(store.setting("theme"), std::optional<std::string>("light"));
            store.set_setting("empty", "");
            QCOMPARE(store.setting("empty"), std::optional<std::string>(""));
            store.remove_setting("cache");
            QVERIFY(!store.setting("cache").has_value());
            QCOMPARE(error_of([&] { store.set_setting("", "x"); }), std::string("a setting needs a name"));
        }
        Store reopened(path);
        QCOMPARE(reopened.setting("theme"), std::optional<std::string>("light"));
    }

    void awkwardTextKeptExactly_data() {
        QTest::addColumn<QByteArray>("text");
        auto row = [](const char* name, const std::string& s) { QTest::newRow(name) << QByteArray::fromStdString(s); };
        row("double quotes", "say \"hello\" \"\"");
        row("single quotes", "it's 'quoted' ''");
        row("sql injection", "'; DROP TABLE messages; --");
        row("sql injection 2", "\"); DELETE FROM conversations; SELECT (\"");
        row("percent signs", "100% %s %d %n %% %1$s");
        row("backslashes and escapes", "C:\\path\\n \\x00 \\' \t tab");
        row("binary-looking latin", latin_code_points());
        row("all bytes repaired", all_bytes_repaired());
        row("emoji", "\xF0\x9F\x98\x80\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5");
        row("right to left", "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD8\xB3\xD9\x84\xD8\xA7\xD9\x85");
        row("only whitespace", " \n\t ");
        row("1 MB paste", paste(1 << 20));
        row("4 MB paste", paste(4 << 20));
    }

    void awkwardTextKeptExactly() {
        QFETCH(QByteArray, text);
        const std::string s = text.toStdString();
        QVERIFY(kvchat::is_valid_utf8(s));
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        // Names stay short; content takes every row.
        const bool short_text = s.size() < 4096 && !s.empty();
        int64_t conv_id = 0, message_id = 0, prefix_id = 0;
        {
            Store store(path);
            const auto conv = store.create_conversation(short_text ? s : "conversation", "fp", "dynamic");
            conv_id = conv.id;
            const auto m = store.append_message(conv.id, Role::User, s);
            message_id = m.id;
            QCOMPARE(m.content, s);
            QVERIFY(!m.content_repaired);
            store.append_message(conv.id, Role::Assistant, "after");
            kvchat::PrefixRecord p;
            p.name = short_text ? s : "prefix";
            p.text = s;
            prefix_id = store.save_prefix(p).id;
            store.set_setting(short_text ? s : "key", s);
        }
        Store store(path);  // read back from the file, not from anything cached
        const auto conv = store.find_conversation(short_text ? s : "conversation");
        QVERIFY(conv.has_value());
        QCOMPARE(conv->id, conv_id);
        QVERIFY(conv->title == (short_text ? s : "conversation"));
        const auto list = store.list_messages(conv_id);
        QCOMPARE(list.size(), size_t(2));
        QCOMPARE(list[0].id, message_id);
        QVERIFY(list[0].content == s);  // byte for byte
        QVERIFY(!list[0].content_repaired);
        QCOMPARE(list[1].content, std::string("after"));
        const auto prefix = store.find_prefix(short_text ? s : "prefix");
        QVERIFY(prefix.has_value());
        QCOMPARE(prefix->id, prefix_id);
        QVERIFY(prefix->text == s);
        QVERIFY(store.setting(short_text ? s : "key") == s);
        // Every table is still there and whole.
        QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN "
                                 "('conversations', 'messages', 'prefixes', 'settings')"),
                 std::string("4"));
        // Editing to the same awkward text keeps it exactly too.
        QVERIFY(!store.update_message_content(message_id, s + s));
        QVERIFY(store.list_messages(conv_id)[0].content == s + s);
    }

    void invalidUtf8IsRepairedAndFlagged() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        const std::string fffd = "\xEF\xBF\xBD";
        int64_t conv_id = 0;
        {
            Store store(path);
            const auto conv = store.create_conversation("bad \xFF title", "", "");
            conv_id = conv.id;
            QCOMPARE(conv.title, "bad " + fffd + " title");
            QVERIFY(store.find_conversation("bad \xFF title").has_value());  // the lookup is repaired alike
            const auto m = store.append_message(conv.id, Role::User, "ok \xC0\xAF and \xED\xA0\x80 end\xE2\x82");
            QCOMPARE(m.content, "ok " + fffd + fffd + " and " + fffd + fffd + fffd + " end" + fffd);
            QVERIFY(m.content_repaired);
            const auto good = store.append_message(conv.id, Role::Assistant, "fine");
            QVERIFY(!good.content_repaired);
            QVERIFY(store.update_message_content(good.id, "now \x80 broken"));
            // All bytes 1..255 in order.
            const auto all = store.append_message(conv.id, Role::User, all_bytes());
            QVERIFY(all.content_repaired);
            QVERIFY(all.content == all_bytes_repaired());

            kvchat::PrefixRecord p;
            p.name = "prefix";
            p.text = "tail \xF0\x9F\x98";
            const auto saved = store.save_prefix(p);
            QVERIFY(saved.text_repaired);
            QCOMPARE(saved.text, "tail " + fffd);
            const auto update = store.update_prefix_text(saved.id, "clean", {});
            QVERIFY(!update.text_repaired);
            QVERIFY(!store.find_prefix("prefix")->text_repaired);
            QVERIFY(store.update_prefix_text(saved.id, "\xFE", {}).text_repaired);
        }
        Store store(path);
        const auto list = store.list_messages(conv_id);
        QCOMPARE(list.size(), size_t(3));
        QVERIFY(list[0].content_repaired);  // the flag is kept with the row
        QVERIFY(list[1].content_repaired);
        QCOMPARE(list[1].content, "now " + fffd + " broken");
        QVERIFY(list[2].content == all_bytes_repaired());
        QVERIFY(store.find_prefix("prefix")->text_repaired);
        QCOMPARE(store.find_prefix("prefix")->text, fffd);

        // Random bytes never crash and always come back as the repaired text.
        std::mt19937 rng(12345);
        for (int i = 0; i < 300; ++i) {
            std::string junk(rng() % 64, '\0');
            for (char& ch : junk) ch = static_cast<char>(1 + rng() % 255);
            const auto m = store.append_message(conv_id, Role::User, junk);
            QVERIFY(kvchat::is_valid_utf8(m.content));
            QVERIFY(m.content == kvchat::repair_utf8(junk).text);
        }
        const auto all = store.list_messages(conv_id);
        QCOMPARE(all.size(), size_t(303));
        for (const auto& m : all) QVERIFY(kvchat::is_valid_utf8(m.content));
    }

    void newerDatabaseRefusedUnchanged() {
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        const std::string path = qpath.toStdString();
        { Store(path).create_conversation("from the future", "", ""); }
        const std::string future = std::to_string(Store::kSchemaVersion + 1);
        QCOMPARE(raw_exec(path, "PRAGMA user_version = " + future), std::string("ok"));
        const QByteArray before = file_bytes(qpath);
        QVERIFY(before.size() > 0);
        const std::string msg = error_of([&] { Store s(path); });
        QCOMPARE(msg, "database '" + path +
                          "' is from a newer kvchat (schema " + future + ", this build knows " + std::to_string(Store::kSchemaVersion) + "); it was left unchanged: open it "
                          "with a newer kvchat or choose another database");
        QCOMPARE(file_bytes(qpath), before);
        QCOMPARE(raw_query(path, "PRAGMA user_version"), future);
    }

    void newerDatabaseWithPendingLogRefusedUnchanged() {
        // A newer kvchat crashed with commits still in its write-ahead log: refusing must not
        // checkpoint them into the main file.
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        const std::string path = qpath.toStdString();
        { Store(path).create_conversation("x", "", ""); }
        QCOMPARE(raw_exec(path, "PRAGMA user_version = 9"), std::string("ok"));
        sqlite3* holder = nullptr;
        QCOMPARE(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
        sqlite3_db_config(holder, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
        QCOMPARE(sqlite3_exec(holder, "PRAGMA wal_autocheckpoint = 0; CREATE TABLE newer (x); INSERT INTO newer VALUES (1)",
                              nullptr, nullptr, nullptr),
                 SQLITE_OK);
        sqlite3_close(holder);
        QVERIFY(QFileInfo(qpath + "-wal").size() > 0);
        const QByteArray before = file_bytes(qpath);
        const QByteArray wal_before = file_bytes(qpath + "-wal");
        QVERIFY(contains(error_of([&] { Store s(path); }), "is from a newer kvchat (schema 9, this build knows " + std::to_string(Store::kSchemaVersion) + ")"));
        QCOMPARE(file_bytes(qpath), before);
        QCOMPARE(file_bytes(qpath + "-wal"), wal_before);
    }

    void foreignDatabaseRefusedUnchanged() {
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/notes.db";
        const std::string path = qpath.toStdString();
        QCOMPARE(raw_exec(path, "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')"), std::string("ok"));
        QByteArray before = file_bytes(qpath);
        std::string msg = error_of([&] { Store s(path); });
        QVERIFY2(contains(msg, "'" + path + "' is not a kvchat database"), msg.c_str());
        QCOMPARE(file_bytes(qpath), before);

        // Another program's application id.
        QCOMPARE(raw_exec(path, "PRAGMA application_id = 42; PRAGMA user_version = 1"), std::string("ok"));
        before = file_bytes(qpath);
        msg = error_of([&] { Store s(path); });
        QVERIFY2(contains(msg, "belongs to another program (application id 42)"), msg.c_str());
        QCOMPARE(file_bytes(qpath), before);
    }

    void migratesFromEmpty() {
        // Version 0 is an empty file, or none at all; the migration steps run from there.
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/empty.db";
        write_bytes(qpath, QByteArray());
        {
            Store store(qpath.toStdString());
            QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
            QCOMPARE(store.pragma("application_id"), std::to_string(0x4B564348));
            store.create_conversation("works", "", "");
        }
        QCOMPARE(raw_query(qpath.toStdString(), "SELECT title FROM conversations"), std::string("works"));
        // An empty SQLite database made by someone else (header written, no tables) is adopted.
        const std::string blank = (dir.path() + "/blank.db").toStdString();
        QCOMPARE(raw_exec(blank, "PRAGMA page_size = 4096; VACUUM"), std::string("ok"));
        QVERIFY(QFileInfo(QString::fromStdString(blank)).size() > 0);
        Store store(blank);
        QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
    }

    void damagedRandomBytesRefused() {
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        QByteArray junk(64 * 1024, '\0');
        auto* rng = QRandomGenerator::global();
        for (auto& b : junk) b = static_cast<char>(rng->bounded(256));
        write_bytes(qpath, junk);
        const std::string msg = error_of([&] { Store s(qpath.toStdString()); });
        QVERIFY2(contains(msg, "database '" + qpath.toStdString() + "' is damaged: "), msg.c_str());
        QCOMPARE(file_bytes(qpath), junk);
    }

    void damagedTruncatedRefused_data() {
        QTest::addColumn<double>("keep");
        QTest::newRow("half") << 0.5;
        QTest::newRow("a tenth") << 0.1;
        QTest::newRow("most") << 0.9;
        QTest::newRow("header only") << 0.0;
    }

    void damagedTruncatedRefused() {
        QFETCH(double, keep);
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        const std::string path = qpath.toStdString();
        {
            Store store(path);
            const auto conv = store.create_conversation("long", "", "");
            for (int i = 0; i < 300; ++i) store.append_message(conv.id, Role::User, paste(3000 + i));
        }
        QVERIFY(!QFile::exists(qpath + "-wal"));  // checkpointed on close: the main file is whole
        const qint64 size = QFileInfo(qpath).size();
        QVERIFY(size > 500 * 1024);
        // Whole pages or a ragged cut, but never below the 100-byte header, which is a different case.
        const qint64 cut = keep == 0.0 ? 100 : static_cast<qint64>(size * keep) + 123;
        QVERIFY(QFile::resize(qpath, cut));
        const std::string msg = error_of([&] {
            Store s(path);
            s.list_messages(1);
        });
        QVERIFY2(contains(msg, "database '" + path + "' is damaged"), msg.c_str());
    }

    void damagedPagesRefused() {
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        const std::string path = qpath.toStdString();
        {
            Store store(path);
            const auto conv = store.create_conversation("long", "", "");
            for (int i = 0; i < 200; ++i) store.append_message(conv.id, Role::User, paste(2000));
        }
        QByteArray bytes = file_bytes(qpath);
        // Scribble over the b-tree pages past the first (page 1 keeps the header readable).
        for (qint64 i = 4096; i < bytes.size(); i += 4096)
            for (int k = 0; k < 64; ++k) bytes[i + k] = static_cast<char>(0xA5 ^ k);
        write_bytes(qpath, bytes);
        const std::string msg = error_of([&] { Store s(path); });
        QVERIFY2(contains(msg, "database '" + path + "' is damaged: "), msg.c_str());
        QVERIFY2(!contains(msg, "***"), msg.c_str());  // a finding, not integrity_check's heading
    }

    // Found by fuzz_store: pages intact, but an index entry of message 2 moved to conversation 2,
    // so a new conversation (id 2) was handed conversation 1's reply. Refused as damaged, unchanged.
    void damagedIndexRefused() {
        QTemporaryDir dir;
        const QString qpath = dir.path() + "/kvchat.db";
        const std::string path = qpath.toStdString();
        QVERIFY(QFile::copy(QString::fromStdString(kvchat::test::data_path("fuzz_regressions/store/index_entry_moved.db")), qpath));
        QFile::setPermissions(qpath, QFile::ReadOwner | QFile::WriteOwner);
        const QByteArray before = file_bytes(qpath);
        const std::string msg = error_of([&] { Store s(path); });
        QVERIFY2(contains(msg, "database '" + path + "' is damaged: ") && contains(msg, "missing from index"),
                 msg.c_str());
        QCOMPARE(file_bytes(qpath), before);
    }

    // The words for a database that cannot be written: what the read-only commands still do.
    void readOnlyProblemWords() {
        const std::string rofs = kvchat::read_only_problem("/mnt/kv.db", EROFS);
        QVERIFY2(contains(rofs, "'/mnt/kv.db' is on a read-only file system") && contains(rofs, "conversations"),
                 rofs.c_str());
        for (int err : {EACCES, EPERM}) {
            const std::string denied = kvchat::read_only_problem("/mnt/kv.db", err);
            QVERIFY2(contains(denied, "is read-only (no permission to write"), denied.c_str());
        }
        QVERIFY(kvchat::read_only_problem("/mnt/kv.db", EIO).empty());
    }

    // Opened to read only: the lists work, nothing is created, and a database of an earlier schema
    // is refused unchanged (it needs a migration, which writes).
    void readOnlyAccess() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kv.db").toStdString();
        {
            Store store(path);
            const int64_t id = store.create_conversation("kept", "fp", "dynamic").id;
            store.append_message(id, Role::User, "hello");
        }
        std::filesystem::remove_all((dir.path() + "/snapshots").toStdString());
        {
            Store store(path, Store::Access::ReadOnly);
            const auto list = store.list_conversation_overviews();
            QCOMPARE(list.size(), size_t(1));
            QCOMPARE(list[0].message_count, int64_t(1));
            QVERIFY(list[0].last_unanswered);
            QVERIFY(!error_of([&] { store.append_message(list[0].conversation.id, Role::User, "x"); }).empty());
        }
        QVERIFY(!QFileInfo::exists(dir.path() + "/snapshots"));
        const std::string missing = error_of([&] { Store s((dir.path() + "/none.db").toStdString(), Store::Access::ReadOnly); });
        QVERIFY2(contains(missing, "does not exist"), missing.c_str());
        QVERIFY(!QFileInfo::exists(dir.path() + "/none.db"));
        const std::string old = (dir.path() + "/old.db").toStdString();
        QCOMPARE(raw_exec(old, std::string(Store::migration_sql(1)) + Store::migration_sql(2) + "PRAGMA user_version = 2;"),
                 std::string("ok"));
        const std::string refused = error_of([&] { Store s(old, Store::Access::ReadOnly); });
        QVERIFY2(contains(refused, "earlier kvchat") && contains(refused, "upgrade"), refused.c_str());
        QCOMPARE(raw_exec(old, "SELECT 1"), std::string("ok"));
        QCOMPARE(Store(old).pragma("user_version"), std::to_string(Store::kSchemaVersion));
    }

    // Snapshot and lock names carry the database's file name, as a plain file name.
    void fileKeys() {
        QCOMPARE(Store::file_key("kvchat.db"), std::string("kvchat.db"));
        const std::string spaced = Store::file_key("my chats.db"), other = Store::file_key("my_chats.db");
        QVERIFY(spaced != other);
        QVERIFY(spaced.starts_with("my_chats.db-"));
        QVERIFY(Store::file_key(".hidden.db") != ".hidden.db" && Store::file_key(".hidden.db")[0] != '.');
        QVERIFY(Store::file_key(std::string(500, 'x')).size() <= 120);
        QVERIFY(Store::file_key(std::string(500, 'x')) != Store::file_key(std::string(501, 'x')));
        QTemporaryDir dir;
        for (const char* name : {"kvchat.db", "my chats.db", "\xc3\xa9t\xc3\xa9.db", ".hidden.db"}) {
            Store store((dir.path() + "/" + name).toStdString());
            // Accepted by snapshot_path (plain names only) and distinct from every other database's.
            QVERIFY(!store.snapshot_path(store.conversation_snapshot_name(1)).empty());
            QVERIFY(!store.snapshot_path(store.prefix_snapshot_name(1)).empty());
            QVERIFY(store.conversation_snapshot_name(1) != Store::legacy_conversation_snapshot_name(1));
        }
    }

    // kvchat_soak seed 1, step 39: opening a second store on a database this process already had
    // open (the window's registry, a restart) read the header of every file in the folder to see
    // whether another database shares it, the database's own -shm included. Closing that file
    // dropped the lock SQLite holds on the -shm (POSIX locks belong to the process, and any close
    // releases them), so the next kvchat-cli took itself for the only user, truncated the -shm
    // and the window died of SIGBUS reading its mapping. The lock must still be held after the
    // second open, asked from another process (a process never sees its own locks).
    void openingAgainKeepsTheSharedMemoryLock() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kv.db").toStdString();
        Store first(path);
        first.append_message(first.create_conversation("c", "fp", "dynamic").id, Role::User, "hello");
        // A snapshot of the shared name earlier versions wrote, so the folder is looked at.
        write_bytes(dir.path() + "/snapshots/conversation-99.kvcache", "old");
        const auto shm_locked = [&] {
            const pid_t child = ::fork();
            if (child == 0) {
                const int fd = ::open((path + "-shm").c_str(), O_RDWR);
                struct flock lk {};
                lk.l_type = F_WRLCK;
                lk.l_whence = SEEK_SET;
                lk.l_start = 128;  // SQLite's "DMS" byte: shared-locked by every connection using the -shm
                lk.l_len = 1;
                ::_exit(fd >= 0 && ::fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK ? 0 : 1);
            }
            int status = 0;
            ::waitpid(child, &status, 0);
            return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        };
        QVERIFY(shm_locked());
        {
            Store second(path);
            QCOMPARE(second.list_conversation_overviews().size(), size_t(1));
            QVERIFY2(shm_locked(), "opening the store again dropped the lock on the -shm");
        }
        first.append_message(first.list_conversation_overviews()[0].conversation.id, Role::User, "again");
        QVERIFY(shm_locked());
    }

    // Unicode white space is white space, for every front end's "blank message" rule.
    void blankText() {
        for (const char* blank : {"", " \t\r\n\f\v", "\u00a0\u3000\u2003", "\u0085\u1680\u2000\u200a\u2028\u2029\u202f\u205f"})
            QVERIFY2(kvchat::is_blank_text(blank), blank);
        for (const char* text : {"a", "\u00a0a", "\u200b", "\xe2\x80", "\xe2\x80\x41", "\xc2", "\u2030"})
            QVERIFY2(!kvchat::is_blank_text(text), text);
    }

    void unopenablePathNamed() {
        QTemporaryDir dir;
        // A folder where the database file should be.
        QVERIFY(QDir(dir.path()).mkdir("kvchat.db"));
        const std::string path = (dir.path() + "/kvchat.db").toStdString();
        std::string msg = error_of([&] { Store s(path); });
        QVERIFY2(contains(msg, "'" + path + "'"), msg.c_str());
        // A regular file where its folder should be.
        write_bytes(dir.path() + "/file", "x");
        const std::string under_file = (dir.path() + "/file/kvchat.db").toStdString();
        msg = error_of([&] { Store s(under_file); });
        QVERIFY2(contains(msg, "'" + (dir.path() + "/file").toStdString() + "'"), msg.c_str());
    }

    void crashWhileAppending_data() {
        QTest::addColumn<int>("message_bytes");
        QTest::addColumn<int>("rounds");
        QTest::newRow("small messages") << 200 << 4;
        QTest::newRow("1 MB messages") << (1 << 20) << 3;
    }

    void crashWhileAppending() {
        QFETCH(int, message_bytes);
        QFETCH(int, rounds);
        const quint32 seed = QRandomGenerator::global()->generate();
        qInfo("seed %u", seed);
        std::mt19937 rng(seed);
        for (int round = 0; round < rounds; ++round) {
            QTemporaryDir dir;
            const std::string path = (dir.path() + "/kvchat.db").toStdString();
            int64_t conv_id = 0;
            { conv_id = Store(path).create_conversation("crash", "", "").id; }

            int fds[2];
            QCOMPARE(pipe(fds), 0);
            const pid_t child = fork();
            QVERIFY(child >= 0);
            if (child == 0) {
                // The child appends one message at a time and reports each after its commit
                // returns. It never returns into the test framework.
                ::close(fds[0]);
                try {
                    Store store(path);
                    for (int i = 0; i < 100000; ++i) {
                        store.append_message(conv_id, i % 2 ? Role::Assistant : Role::User,
                                             crash_content(i, static_cast<size_t>(message_bytes)));
                        if (::write(fds[1], &i, sizeof i) != sizeof i) _exit(3);
                    }
                } catch (...) {
                    _exit(2);
                }
                _exit(0);
            }
            ::close(fds[1]);
            const int kill_after = 1 + static_cast<int>(rng() % (message_bytes > 100000 ? 12 : 300));
            int reported = 0, value = 0;
            while (reported < kill_after && ::read(fds[0], &value, sizeof value) == sizeof value) {
                QCOMPARE(value, reported);
                ++reported;
            }
            // Land somewhere inside the next append (or the one after).
            usleep(static_cast<useconds_t>(rng() % 5000));
            ::kill(child, SIGKILL);
            while (::read(fds[0], &value, sizeof value) == sizeof value) ++reported;  // sent before the kill
            ::close(fds[0]);
            int status = 0;
            QCOMPARE(waitpid(child, &status, 0), child);
            QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                     qPrintable(QString("child ended otherwise: status %1").arg(status)));

            Store store(path);
            QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
            const auto list = store.list_messages(conv_id);
            // Every reported message is there; one more may have committed before its report.
            QVERIFY2(list.size() >= size_t(reported) && list.size() <= size_t(reported) + 1,
                     qPrintable(QString("reported %1, found %2").arg(reported).arg(list.size())));
            for (size_t i = 0; i < list.size(); ++i) {
                QCOMPARE(list[i].ordinal, int64_t(i));
                if (list[i].content != crash_content(static_cast<int>(i), static_cast<size_t>(message_bytes)))
                    QFAIL(qPrintable(QString("message %1 differs after the crash").arg(i)));
            }
            // The store goes on working after the crash.
            QCOMPARE(store.append_message(conv_id, Role::User, "after").ordinal, int64_t(list.size()));
        }
    }
};

QTEST_GUILESS_MAIN(TestStore)
#include "test_store.moc"
