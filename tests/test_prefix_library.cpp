// The prefix library on a tiny model: a conversation started from a saved prefix prefills only
// the suffix and answers as a fresh cache over the whole prompt does; automatic reuse; rename,
// edit and delete; another model's prefix is refused; a damaged snapshot is rebuilt.
#include "engine/chat/conversation_registry.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace kvchat;

namespace {

std::unique_ptr<Model> tiny_model(const QTemporaryDir& dir, uint32_t seed) {
    test::TinyModelSpec spec;
    spec.n_layer = 6;
    spec.n_embd = 64;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.head_dim = 32;
    spec.n_ff = 128 + 32 * static_cast<int>(seed - 1);  // another shape: another model fingerprint
    spec.sliding_window = 8;
    spec.seed = seed;
    const std::string path = (dir.path() + "/m" + QString::number(seed) + ".gguf").toStdString();
    test::write_tiny_gguf(spec, path);
    return Model::load(path);
}

TurnOptions greedy(int n) {
    TurnOptions o;
    o.generation.max_new_tokens = n;
    o.generation.sampling.greedy = true;
    return o;
}

std::string reference_reply(const Model& m, Backend& be, const std::vector<ChatMessage>& msgs, int n) {
    const ChatTemplate tmpl = ChatTemplate::for_model(m);
    const RenderedChat r = tmpl.render(msgs, true);
    auto cache = m.make_default_cache(be);
    Generator gen(m, be);
    GenerationConfig g = greedy(n).generation;
    g.stop_tokens = tmpl.stop_tokens();
    return gen.generate(*cache, r.tokens, g).text;
}

bool contains(const std::vector<std::string>& notices, const char* what) {
    for (const std::string& n : notices)
        if (n.find(what) != std::string::npos) return true;
    return false;
}

const char* kSystem = "the cat sat on the mat; a cat sat on a mat; the cat";

}  // namespace

class TestPrefixLibrary : public QObject {
    Q_OBJECT
private slots:
    void conversationFromPrefixPrefillsOnlySuffix() {
        QTemporaryDir dir;
        auto m = tiny_model(dir, 1);
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        ConversationRegistry reg(store, *m, *be);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("cats", kSystem, "", notices);
        QVERIFY(p.tokens.size() > 10);
        OpenOptions open;
        open.prefix = "cats";
        reg.open("c", open);
        const TurnResult r = reg.send("c", "on the mat", greedy(8));
        QCOMPARE(r.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.prefill_tokens, r.prompt_tokens - r.cached_tokens);
        QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "on the mat"}}, 8));
        QCOMPARE(store.find_prefix("cats")->use_count, int64_t(1));
        // The system message is part of the stored transcript.
        const auto msgs = store.list_messages(reg.id_of("c"));
        QCOMPARE(msgs.size(), size_t(3));
        QCOMPARE(msgs[0].content, std::string(kSystem));
    }

    void promptStartingWithPrefixReusesIt() {
        QTemporaryDir dir;
        auto m = tiny_model(dir, 1);
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        ConversationRegistry reg(store, *m, *be);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("cats", kSystem, "", notices);
        OpenOptions open;
        open.system = kSystem;
        reg.open("d", open);
        const TurnResult r = reg.send("d", "the mat", greedy(8));
        QVERIFY2(contains(r.notices, "reused the cache of prefix 'cats'"), "no notice of reuse");
        QCOMPARE(r.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "the mat"}}, 8));
        // A different system prompt reuses nothing.
        OpenOptions other;
        other.system = "a mat";
        reg.open("e", other);
        QCOMPARE(reg.send("e", "the mat", greedy(4)).cached_tokens, int64_t(0));
    }

    void renameEditDelete() {
        QTemporaryDir dir;
        auto m = tiny_model(dir, 1);
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        const ChatTemplate tmpl = ChatTemplate::for_model(*m);
        PrefixLibrary lib(store, *m, *be, tmpl);
        std::vector<std::string> notices;
        lib.save("a 'quoted' name", "the cat", "", notices);
        lib.save("'; DROP TABLE prefixes; --", "a mat", "", notices);
        QVERIFY_THROWS_EXCEPTION(Error, lib.save("a 'quoted' name", "x", "", notices));
        lib.rename("a 'quoted' name", "renamed");
        QVERIFY(!store.find_prefix("a 'quoted' name"));
        QVERIFY(store.find_prefix("renamed"));
        QVERIFY_THROWS_EXCEPTION(Error, lib.rename("renamed", "'; DROP TABLE prefixes; --"));
        const PrefixRecord before = lib.find("renamed");
        const PrefixRecord after = lib.edit("renamed", "the cat sat on the mat", notices);
        QCOMPARE(after.text, std::string("the cat sat on the mat"));
        QCOMPARE(after.tokens, lib.tokens_for("the cat sat on the mat"));
        QVERIFY(after.tokens != before.tokens);
        QCOMPARE(lib.list().size(), size_t(2));
        const std::string snapshot = after.snapshot;
        lib.remove("renamed");
        QVERIFY(!store.find_prefix("renamed"));
        if (!snapshot.empty()) QVERIFY(!std::filesystem::exists(store.snapshot_path(snapshot)));
        QCOMPARE(lib.find("'; DROP TABLE prefixes; --").text, std::string("a mat"));
        QVERIFY_THROWS_EXCEPTION(Error, lib.remove("renamed"));
    }

    void invalidUtf8TextIsRepairedWithNotice() {
        QTemporaryDir dir;
        auto m = tiny_model(dir, 1);
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        const ChatTemplate tmpl = ChatTemplate::for_model(*m);
        PrefixLibrary lib(store, *m, *be, tmpl);
        std::vector<std::string> notices;
        const PrefixRecord p = lib.save("bad", std::string("the \xff\xfe cat \xc3"), "", notices);
        QCOMPARE(p.text, std::string("the \xef\xbf\xbd\xef\xbf\xbd cat \xef\xbf\xbd"));
        QVERIFY(contains(notices, "invalid UTF-8"));
    }

    void anotherModelsPrefixIsRefused() {
        QTemporaryDir dir;
        auto a = tiny_model(dir, 1);
        auto b = tiny_model(dir, 2);
        QVERIFY(a->fingerprint() != b->fingerprint());
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        {
            ConversationRegistry reg(store, *a, *be);
            std::vector<std::string> notices;
            reg.prefixes().save("cats", kSystem, "", notices);
        }
        ConversationRegistry reg(store, *b, *be);
        OpenOptions open;
        open.prefix = "cats";
        try {
            reg.open("c", open);
            QFAIL("another model's prefix was used");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("another model"), e.what());
        }
        QVERIFY(!store.find_conversation("c"));
        // Nor is it picked automatically.
        OpenOptions sys;
        sys.system = kSystem;
        reg.open("d", sys);
        QCOMPARE(reg.send("d", "the mat", greedy(4)).cached_tokens, int64_t(0));
    }

    void damagedSnapshotIsRebuilt() {
        QTemporaryDir dir;
        auto m = tiny_model(dir, 1);
        auto be = make_cpu_backend(2);
        Store store((dir.path() + "/kv.db").toStdString());
        std::string snapshot;
        {
            ConversationRegistry reg(store, *m, *be);
            std::vector<std::string> notices;
            snapshot = reg.prefixes().save("cats", kSystem, "", notices).snapshot;
        }
        if (snapshot.empty()) QSKIP("this build writes no cache snapshots");
        {
            std::ofstream f(store.snapshot_path(snapshot), std::ios::binary | std::ios::trunc);
            f << "this is not a cache snapshot";
        }
        ConversationRegistry reg(store, *m, *be);
        OpenOptions open;
        open.prefix = "cats";
        reg.open("c", open);
        const TurnResult r = reg.send("c", "on the mat", greedy(8));
        QVERIFY(contains(r.notices, "could not be used"));
        QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "on the mat"}}, 8));
    }
};

QTEST_GUILESS_MAIN(TestPrefixLibrary)
#include "test_prefix_library.moc"
