// The prefix library on a tiny model: a conversation started from a saved prefix (a system
// prompt, or the first messages of a conversation) prefills only the suffix and answers as a
// fresh cache over the whole prompt does; automatic reuse; rename, edit and delete; another
// model's prefix is refused; a damaged snapshot is rebuilt.
#include "engine/chat/chat_session.h"
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
    test::TinyModelSpec spec = test::chat_sized_spec();
    spec.n_ff = 128 + 32 * static_cast<int>(seed - 1);  // another shape: another model fingerprint
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

// What most cases start from: a temporary folder, the tiny model, two threads, a store.
struct Setup {
    QTemporaryDir dir;
    std::unique_ptr<Model> m = tiny_model(dir, 1);
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    Store store{(dir.path() + "/kv.db").toStdString()};
};

}  // namespace

class TestPrefixLibrary : public QObject {
    Q_OBJECT
private slots:
    void conversationFromPrefixPrefillsOnlySuffix() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        ChatSession reg(store, *m, *be);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("cats", kSystem, "", notices);
        QVERIFY(p.tokens.size() > 10);
        OpenOptions open;
        open.prefix = "cats";
        reg.open("c", open);
        const TurnResult r = reg.send("c", "on the mat", greedy(8));
        QCOMPARE(r.figures.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.figures.computed_tokens, r.figures.prompt_tokens - r.figures.cached_tokens);
        QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "on the mat"}}, 8));
        QCOMPARE(store.find_prefix("cats")->use_count, int64_t(1));
        // The system message is part of the stored transcript.
        const auto msgs = store.list_messages(reg.id_of("c"));
        QCOMPARE(msgs.size(), size_t(3));
        QCOMPARE(msgs[0].content, std::string(kSystem));
    }

    void promptStartingWithPrefixReusesIt() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        ChatSession reg(store, *m, *be);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("cats", kSystem, "", notices);
        OpenOptions open;
        open.system = kSystem;
        reg.open("d", open);
        const TurnResult r = reg.send("d", "the mat", greedy(8));
        QVERIFY2(contains(r.notices, "reused the cache of prefix 'cats'"), "no notice of reuse");
        QCOMPARE(r.figures.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "the mat"}}, 8));
        // A different system prompt reuses nothing.
        OpenOptions other;
        other.system = "a mat";
        reg.open("e", other);
        QCOMPARE(reg.send("e", "the mat", greedy(4)).figures.cached_tokens, int64_t(0));
    }

    // The first messages of a conversation (system, user, assistant) as a prefix: a conversation
    // started from it holds those messages, copies the cache and prefills only its own turn.
    void conversationFromMultiMessagePrefix() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        ChatSession reg(store, *m, *be);
        OpenOptions sys;
        sys.system = kSystem;
        reg.open("src", sys);
        reg.send("src", "the cat", greedy(6));
        reg.send("src", "a mat", greedy(6));
        const auto src = store.list_messages(reg.id_of("src"));
        QCOMPARE(src.size(), size_t(5));
        const std::vector<ChatMessage> opening = {{src[0].role, src[0].content}, {src[1].role, src[1].content},
                                                  {src[2].role, src[2].content}};
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save_messages("opening", opening, "", notices);
        QCOMPARE(p.messages.size(), size_t(3));
        QCOMPARE(p.messages[2].role, Role::Assistant);
        QCOMPARE(p.messages[2].content, src[2].content);
        // Exactly the tokens a conversation holding these messages renders before what follows.
        const RenderedChat whole = reg.chat_template().render(opening, false);
        QCOMPARE(p.tokens, whole.tokens);
        QVERIFY(!p.snapshot.empty());

        OpenOptions open;
        open.prefix = "opening";
        reg.open("new", open);
        const TurnResult r = reg.send("new", "on the mat", greedy(8));
        std::vector<ChatMessage> expected = opening;
        expected.push_back({Role::User, "on the mat"});
        const RenderedChat prompt = reg.chat_template().render(expected, true);
        QCOMPARE(r.figures.prompt_tokens, static_cast<int64_t>(prompt.tokens.size()));
        QCOMPARE(r.figures.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        // Only the new message's turn and the reply's opening are computed.
        QCOMPARE(r.figures.computed_tokens, static_cast<int64_t>(prompt.tokens.size() - p.tokens.size()));
        QCOMPARE(r.text, reference_reply(*m, *be, expected, 8));
        // The transcript opens with the prefix's messages, in order, so later turns render them.
        const auto msgs = store.list_messages(reg.id_of("new"));
        QCOMPARE(msgs.size(), size_t(5));
        for (size_t i = 0; i < 3; ++i) {
            QCOMPARE(msgs[i].role, opening[i].role);
            QCOMPARE(msgs[i].content, opening[i].content);
        }
        QCOMPARE(msgs[3].content, std::string("on the mat"));
        QCOMPARE(store.find_prefix("opening")->use_count, int64_t(1));
        // A second turn continues from the conversation's own cache.
        expected.push_back({Role::Assistant, r.text});
        expected.push_back({Role::User, "the cat"});
        const TurnResult r2 = reg.send("new", "the cat", greedy(8));
        QCOMPARE(r2.text, reference_reply(*m, *be, expected, 8));
    }

    // Automatic reuse of a prefix of several messages: a conversation with nothing cached whose
    // prompt starts with the prefix's tokens copies its cache.
    void promptStartingWithMultiMessagePrefixReusesIt() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        {
            ChatSession reg(store, *m, *be);
            std::vector<std::string> notices;
            // A system prompt and a first question.
            reg.prefixes().save_messages("asked", {{Role::System, kSystem}, {Role::User, "the mat"}}, "", notices);
            OpenOptions sys;
            sys.system = kSystem;
            reg.open("d", sys);
            const TurnResult r = reg.send("d", "the mat", greedy(6));
            QVERIFY2(contains(r.notices, "reused the cache of prefix 'asked'"), "no notice of reuse");
            const PrefixRecord p = *store.find_prefix("asked");
            QCOMPARE(r.figures.cached_tokens, static_cast<int64_t>(p.tokens.size()));
            QCOMPARE(r.figures.computed_tokens, r.figures.prompt_tokens - static_cast<int64_t>(p.tokens.size()));
            QCOMPARE(r.text, reference_reply(*m, *be, {{Role::System, kSystem}, {Role::User, "the mat"}}, 6));
            reg.send("d", "a cat", greedy(6));
            // The whole conversation so far, assistant turns included, saved as a prefix.
            std::vector<ChatMessage> all;
            for (const MessageRecord& x : store.list_messages(reg.id_of("d"))) all.push_back({x.role, x.content});
            QCOMPARE(all.size(), size_t(5));
            reg.prefixes().save_messages("all of d", all, "", notices);
        }
        // Next session, the conversation's own snapshot gone: the prefix stands in for it.
        const int64_t id = store.find_conversation("d")->id;
        const std::string snapshot = store.set_conversation_snapshot(id, "");
        std::filesystem::remove(store.snapshot_path(snapshot));
        ChatSession reg(store, *m, *be);
        const PrefixRecord p = *store.find_prefix("all of d");
        std::vector<ChatMessage> expected = PrefixLibrary::messages_of(p);
        expected.push_back({Role::User, "on the mat"});
        const TurnResult r = reg.send("d", "on the mat", greedy(8));
        QVERIFY2(contains(r.notices, "reused the cache of prefix 'all of d'"), "no notice of reuse");
        QCOMPARE(r.figures.cached_tokens, static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.figures.computed_tokens, r.figures.prompt_tokens - static_cast<int64_t>(p.tokens.size()));
        QCOMPARE(r.text, reference_reply(*m, *be, expected, 8));
    }

    // edit --text on a prefix of several messages is refused (it would drop them); replacing the
    // messages re-prefills. Bad input is refused with a message and changes nothing.
    void multiMessageEditAndBadInput() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        const ChatTemplate tmpl = ChatTemplate::for_model(*m);
        PrefixLibrary lib(store, *m, *be, tmpl);
        std::vector<std::string> notices;
        const std::string name = "it's \"shots\"'; DROP TABLE prefix_messages; --";
        const std::vector<ChatMessage> shots = {{Role::User, "the cat"}, {Role::Assistant, "sat"}, {Role::User, "a mat"}};
        const PrefixRecord p = lib.save_messages(name, shots, "", notices);
        QCOMPARE(p.name, name);
        QCOMPARE(p.messages.size(), size_t(3));
        QCOMPARE(p.tokens, lib.tokens_for(shots));
        try {
            lib.edit(name, "the cat", notices);
            QFAIL("edit --text replaced three messages");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("holds 3 messages"), e.what());
        }
        QCOMPARE(lib.find(name).messages.size(), size_t(3));
        QCOMPARE(lib.find(name).snapshot, p.snapshot);
        QVERIFY(std::filesystem::exists(store.snapshot_path(p.snapshot)));

        const std::vector<ChatMessage> other = {{Role::System, "a mat"}, {Role::User, "the cat"}};
        const PrefixRecord e = lib.edit_messages(name, other, notices);
        QCOMPARE(e.messages.size(), size_t(2));
        QCOMPARE(e.tokens, lib.tokens_for(other));
        QVERIFY(!e.snapshot.empty());
        std::vector<std::string> load_notices;
        auto cache = lib.load_cache(e, "", load_notices);
        QCOMPARE(cache->tokens(), e.tokens);  // the new snapshot, not a rebuild
        QVERIFY(!contains(load_notices, "could not be used"));

        QVERIFY_THROWS_EXCEPTION(Error, lib.save_messages(name, shots, "", notices));  // the name is in use
        QVERIFY_THROWS_EXCEPTION(Error, lib.save_messages("empty", {}, "", notices));
        QVERIFY_THROWS_EXCEPTION(Error, lib.save_messages("", shots, "", notices));
        QVERIFY_THROWS_EXCEPTION(Error, lib.edit_messages(name, {}, notices));
        QVERIFY_THROWS_EXCEPTION(Error, lib.edit_messages("nobody", shots, notices));
        QVERIFY(!store.find_prefix("empty"));
        QCOMPARE(lib.list().size(), size_t(1));
        QCOMPARE(lib.find(name).messages.size(), size_t(2));

        // A prefix of one system message, as schema 1 stored it (the tokens up to the end of the
        // system text), renders the same as its migrated form: old snapshots stay valid.
        const RenderedChat old = tmpl.render({{Role::System, kSystem}}, false);
        QCOMPARE(lib.tokens_for(kSystem), std::vector<int32_t>(old.tokens.begin(), old.tokens.begin() + old.system_end));
    }

    void renameEditDelete() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
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
        Setup setup;
        auto& [dir, m, be, store] = setup;
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
            ChatSession reg(store, *a, *be);
            std::vector<std::string> notices;
            reg.prefixes().save("cats", kSystem, "", notices);
        }
        ChatSession reg(store, *b, *be);
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
        QCOMPARE(reg.send("d", "the mat", greedy(4)).figures.cached_tokens, int64_t(0));
    }

    void damagedSnapshotIsRebuilt() {
        Setup setup;
        auto& [dir, m, be, store] = setup;
        std::string snapshot;
        {
            ChatSession reg(store, *m, *be);
            std::vector<std::string> notices;
            snapshot = reg.prefixes().save("cats", kSystem, "", notices).snapshot;
        }
        if (snapshot.empty()) QSKIP("this build writes no cache snapshots");
        {
            std::ofstream f(store.snapshot_path(snapshot), std::ios::binary | std::ios::trunc);
            f << "this is not a cache snapshot";
        }
        ChatSession reg(store, *m, *be);
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
