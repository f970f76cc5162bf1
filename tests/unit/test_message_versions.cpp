// The store's versions of an answer and its record of strategy changes (schema 6 on this branch, after the branches of schema 5):
// a database of the schema before migrates and keeps what it held; a version kept aside and
// shown again comes back byte for byte with its figures and ids; places with versions inside a
// version kept aside go with it and come back with it; a failed turn's undo brings back what it
// replaced; deleting a conversation deletes its versions.
#include "engine/error.h"
#include "engine/store/store.h"
#include "support/raw_sqlite.h"

#include <QTemporaryDir>
#include <QtTest>

#include <string>
#include <vector>

using namespace kvchat;

namespace {

using test::raw_exec;
using test::raw_query;

std::vector<std::string> texts(const std::vector<MessageRecord>& ms) {
    std::vector<std::string> out;
    for (const MessageRecord& m : ms) out.push_back(m.content);
    return out;
}

using Texts = std::vector<std::string>;

AnswerFigures answer_stats(int64_t cached, std::vector<int32_t> ids) {
    AnswerFigures s;
    s.prompt_tokens = 40;
    s.generated_tokens = static_cast<int64_t>(ids.size());
    s.ttft_ms = 12.5;
    s.tokens_per_second = 33.0;
    s.cached_tokens = cached;
    s.computed_tokens = 40 - cached;
    s.prefill_saved_ms = 7.25;
    s.token_ids = std::move(ids);
    return s;
}

}  // namespace

class TestMessageVersions : public QObject {
    Q_OBJECT
private slots:
    // A database of the schema before the versions (5) gains the versions and the strategy record, keeps its
    // messages, and its answers can then be kept as versions and shown again.
    void migratesFromPreviousSchema() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/old.db").toStdString();
        std::string sql;
        for (int v = 1; v <= 5; ++v) sql += Store::migration_sql(v);
        QCOMPARE(raw_exec(path, sql), std::string("ok"));
        const std::string data = R"sql(
PRAGMA journal_mode = WAL;
INSERT INTO conversations (title, model_fingerprint, cache_spec, created_ms, updated_ms)
    VALUES ('Lyon trip', 'sha256:m', 'dynamic', 1700000000000, 1700000000001);
INSERT INTO messages (conversation_id, ordinal, role, content, prompt_tokens, generated_tokens, ttft_ms,
                      tokens_per_second, created_ms, cached_tokens, computed_tokens, token_ids) VALUES
    (1, 0, 'user', 'Plan a day among the traboules.', 0, 0, NULL, NULL, 1700000000000, 0, 0, NULL),
    (1, 1, 'assistant', 'Start at Fourviere.', 30, 2, 12.0, 50.0, 1700000000001, 0, 30, x'0700000009000000');
PRAGMA user_version = 5;)sql";
        QCOMPARE(raw_exec(path, data), std::string("ok"));
        {
            Store store(path);
            QCOMPARE(store.pragma("user_version"), std::to_string(Store::kSchemaVersion));
            QCOMPARE(store.pragma("integrity_check"), std::string("ok"));
            const int64_t id = store.find_conversation("Lyon trip")->id;
            QVERIFY(store.version_sets(id).empty());
            QVERIFY(store.strategy_changes(id).empty());
            const KeptVersion k = store.keep_version(id, 1);
            QCOMPARE(k.kept, int64_t(1));
            QCOMPARE(k.number, int64_t(2));
            store.append_message(id, Role::Assistant, "Start at the Saone.", answer_stats(20, {11, 12}));
            store.set_conversation_cache_spec(id, "quantized:nbits=4");
        }
        Store store(path);  // reopened from disk
        const int64_t id = store.find_conversation("Lyon trip")->id;
        QCOMPARE(store.version_sets(id).size(), size_t(1));
        store.show_version(id, 1, 1);
        const std::vector<MessageRecord> back = store.list_messages(id);
        QCOMPARE(texts(back), (Texts{"Plan a day among the traboules.", "Start at Fourviere."}));
        // The migrated answer's figures and ids come back as schema 4 stored them.
        QCOMPARE(back[1].stats.prompt_tokens, int64_t(30));
        QCOMPARE(back[1].stats.ttft_ms.value_or(-1), 12.0);
        QCOMPARE(back[1].stats.token_ids, (std::vector<int32_t>{7, 9}));
        QCOMPARE(back[1].created_ms, int64_t(1700000000001));
        const auto changes = store.strategy_changes(id);
        QCOMPARE(changes.size(), size_t(1));
        QCOMPARE(changes[0].at, int64_t(2));
        QCOMPARE(changes[0].from, std::string("dynamic"));
        QCOMPARE(changes[0].to, std::string("quantized:nbits=4"));
        QCOMPARE(raw_query(path, "PRAGMA foreign_key_check"), std::string());
    }

    // Regenerating twice: three versions of the answer, any of which can be shown; what is shown
    // is the transcript (list_messages), and each keeps its figures and token ids.
    void keepAndShow() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kv.db").toStdString());
        const int64_t id = store.create_conversation("c", "", "dynamic").id;
        store.append_message(id, Role::User, "question");
        store.append_message(id, Role::Assistant, "first", answer_stats(0, {1, 2, 3}));
        QCOMPARE(store.keep_version(id, 1).number, int64_t(2));
        store.append_message(id, Role::Assistant, "second", answer_stats(10, {4}));
        const KeptVersion third = store.keep_version(id, 1);
        QCOMPARE(third.kept, int64_t(2));
        QCOMPARE(third.number, int64_t(3));
        store.append_message(id, Role::Assistant, "third", answer_stats(20, {}));
        auto sets = store.version_sets(id);
        QCOMPARE(sets.size(), size_t(1));
        QCOMPARE(sets[0].ordinal, int64_t(1));
        QCOMPARE(sets[0].count, int64_t(3));
        QCOMPARE(sets[0].shown, int64_t(3));
        QCOMPARE(texts(store.version_messages(id, 1, 1)), (Texts{"first"}));
        QCOMPARE(texts(store.version_messages(id, 1, 3)), (Texts{"third"}));

        store.show_version(id, 1, 1);
        auto ms = store.list_messages(id);
        QCOMPARE(texts(ms), (Texts{"question", "first"}));
        QCOMPARE(ms[1].ordinal, int64_t(1));
        QCOMPARE(ms[1].stats.token_ids, (std::vector<int32_t>{1, 2, 3}));
        QCOMPARE(ms[1].stats.cached_tokens, int64_t(0));
        QCOMPARE(ms[1].stats.prefill_saved_ms.value_or(-1), 7.25);
        QCOMPARE(store.version_sets(id)[0].shown, int64_t(1));
        store.show_version(id, 1, 2);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"question", "second"}));
        QCOMPARE(store.list_messages(id)[1].stats.cached_tokens, int64_t(10));
        store.show_version(id, 1, 2);  // the one shown: nothing changes
        QCOMPARE(texts(store.list_messages(id)), (Texts{"question", "second"}));
        // The search index follows the transcript shown.
        QCOMPARE(store.search_conversations("second").size(), size_t(1));
        QCOMPARE(store.search_conversations("third").size(), size_t(0));

        // Refusals name what is missing and change nothing.
        QVERIFY_THROWS_EXCEPTION(Error, store.show_version(id, 1, 4));
        QVERIFY_THROWS_EXCEPTION(Error, store.show_version(id, 0, 1));
        QVERIFY_THROWS_EXCEPTION(Error, store.keep_version(id, 2));
        QCOMPARE(texts(store.list_messages(id)), (Texts{"question", "second"}));
        QCOMPARE(store.version_sets(id)[0].count, int64_t(3));
    }

    // An edit keeps its message and everything after it, and the versions of a later answer made
    // under it go with it: they are not shown under the new version and come back with the old.
    void nestedPlaces() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kv.db").toStdString());
        const int64_t id = store.create_conversation("c", "", "dynamic").id;
        for (const char* t : {"u0", "a1", "u2", "a3"})
            store.append_message(id, t[0] == 'u' ? Role::User : Role::Assistant, t);
        store.keep_version(id, 3);
        store.append_message(id, Role::Assistant, "a3 again");
        // Edit u2: u2, a3 again (with a3 kept under it) are one version.
        const KeptVersion edit = store.keep_version(id, 2);
        QCOMPARE(edit.number, int64_t(2));
        store.append_message(id, Role::User, "u2 edited");
        store.append_message(id, Role::Assistant, "a3 edited");
        auto sets = store.version_sets(id);
        QCOMPARE(sets.size(), size_t(1));
        QCOMPARE(sets[0].ordinal, int64_t(2));
        QCOMPARE(texts(store.list_messages(id)), (Texts{"u0", "a1", "u2 edited", "a3 edited"}));
        QCOMPARE(texts(store.version_messages(id, 2, 1)), (Texts{"u2", "a3 again"}));

        store.show_version(id, 2, 1);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"u0", "a1", "u2", "a3 again"}));
        sets = store.version_sets(id);
        QCOMPARE(sets.size(), size_t(2));
        QCOMPARE(sets[1].ordinal, int64_t(3));
        QCOMPARE(sets[1].count, int64_t(2));
        QCOMPARE(sets[1].shown, int64_t(2));
        store.show_version(id, 3, 1);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"u0", "a1", "u2", "a3"}));
        store.show_version(id, 2, 2);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"u0", "a1", "u2 edited", "a3 edited"}));
        QCOMPARE(store.version_sets(id).size(), size_t(1));
        // Back again: the inner place remembers which of its versions was shown.
        store.show_version(id, 2, 1);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"u0", "a1", "u2", "a3"}));
    }

    // A turn that failed after keeping a version undoes it: the version it replaced is shown
    // again as it was, and a place left with one version has none.
    void dropShownVersion() {
        QTemporaryDir dir;
        Store store((dir.path() + "/kv.db").toStdString());
        const int64_t id = store.create_conversation("c", "", "dynamic").id;
        store.append_message(id, Role::User, "q");
        store.append_message(id, Role::Assistant, "a", answer_stats(5, {9}));
        KeptVersion k = store.keep_version(id, 1);
        store.append_message(id, Role::Assistant, "partial");
        store.drop_shown_version(id, 1, k.kept);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"q", "a"}));
        QCOMPARE(store.list_messages(id)[1].stats.token_ids, (std::vector<int32_t>{9}));
        QVERIFY(store.version_sets(id).empty());
        // With versions before it, the place keeps them.
        store.keep_version(id, 1);
        store.append_message(id, Role::Assistant, "b");
        store.show_version(id, 1, 1);
        k = store.keep_version(id, 1);
        QCOMPARE(k.kept, int64_t(1));
        QCOMPARE(k.number, int64_t(3));
        store.drop_shown_version(id, 1, k.kept);
        QCOMPARE(texts(store.list_messages(id)), (Texts{"q", "a"}));
        QCOMPARE(store.version_sets(id).size(), size_t(1));
        QCOMPARE(store.version_sets(id)[0].count, int64_t(2));
        QCOMPARE(store.version_sets(id)[0].shown, int64_t(1));
    }

    // Deleting a conversation deletes its versions and strategy record; deleting messages (a
    // send taken back) drops the places among them.
    void deletions() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/kv.db").toStdString();
        Store store(path);
        const int64_t id = store.create_conversation("c", "", "dynamic").id;
        store.append_message(id, Role::User, "q");
        store.append_message(id, Role::Assistant, "a");
        store.keep_version(id, 1);
        store.append_message(id, Role::Assistant, "b");
        store.set_conversation_cache_spec(id, "static");
        store.set_conversation_cache_spec(id, "static");  // no change: not recorded
        QCOMPARE(store.strategy_changes(id).size(), size_t(1));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM version_messages"), std::string("1"));
        store.delete_messages_after(id, 0);
        QVERIFY(store.version_sets(id).empty());
        store.append_message(id, Role::Assistant, "a");
        store.keep_version(id, 1);
        store.delete_conversation(id);
        QCOMPARE(raw_query(path, "SELECT count(*) FROM message_versions"), std::string("0"));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM version_messages"), std::string("0"));
        QCOMPARE(raw_query(path, "SELECT count(*) FROM strategy_changes"), std::string("0"));
    }
};

QTEST_GUILESS_MAIN(TestMessageVersions)
#include "test_message_versions.moc"
