// Switching a conversation's strategy mid-conversation through the session API, on a tiny model:
// after a lossless switch the next answer is the one a conversation that used the target strategy
// from its start gives; the switch returns the plan made beforehand; a switch after the session
// reopened the conversation from its snapshot answers; a cancelled rebuild leaves the old cache
// and strategy in use and the conversation goes on.
#include "engine/cache/cache_spec.h"
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"

#include <QFileInfo>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

using namespace kvchat;

namespace {

TurnOptions greedy(int n) {
    TurnOptions o;
    o.generation.max_new_tokens = n;
    o.generation.sampling.greedy = true;
    o.generation.stop_at_eos = false;  // every answer as long, whatever the random weights pick
    return o;
}

}  // namespace

class TestStrategySwitch : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Model> default_;  // the default model when installed: answers that depend on the cache
    std::unique_ptr<Backend> backend_;

    std::string db(const QString& name) const { return (dir_.path() + "/" + name + ".db").toStdString(); }

private slots:
    void initTestCase() {
        test::TinyModelSpec s;
        s.sliding_window = 8;
        const std::string path = (dir_.path() + "/m.gguf").toStdString();
        test::write_tiny_gguf(s, path);
        model_ = Model::load(path);
        backend_ = make_cpu_backend(2);
        const std::string def = resolve_model_path("");
        if (QFileInfo::exists(QString::fromStdString(def))) default_ = Model::load(def);
    }

    void losslessSwitchContinuesAsIfFromTheStart_data() {
        QTest::addColumn<QString>("target");
        QTest::addColumn<bool>("real");  // on the default model (skipped when it is not installed)
        for (bool real : {false, true}) {
            const char* m = real ? " (default model)" : " (tiny model)";
            QTest::newRow(qPrintable(QString("static") + m)) << "static:max_len=512" << real;
            QTest::newRow(qPrintable(QString("offloaded") + m)) << "offloaded:dir=" + dir_.path() << real;
            QTest::newRow(qPrintable(QString("hybrid") + m)) << "hybrid" << real;
            QTest::newRow(qPrintable(QString("offloaded_static") + m)) << "offloaded_static:max_len=512,dir=" + dir_.path() << real;
        }
    }
    void losslessSwitchContinuesAsIfFromTheStart() {
        QFETCH(QString, target);
        QFETCH(bool, real);
        if (real && !default_) QSKIP("default model not installed (packaging/kvchat.sh model)");
        const Model& model = real ? *default_ : *model_;
        const std::string to = target.toStdString();
        const QString tag = QString::fromUtf8(QTest::currentDataTag()).replace(' ', '-').remove('(').remove(')');
        Store a_store(db("a-" + tag));
        ChatSession a(a_store, model, *backend_);
        OpenOptions dyn;
        dyn.cache_spec = "dynamic";
        const int64_t ia = a.create("switched", dyn);
        const TurnResult a1 = a.send(ia, "Name three colours of the rainbow.", greedy(16));
        const ConversionPlan plan = a.plan_switch(ia, to);
        QCOMPARE(plan.kind, ConversionPlan::Kind::Lossless);
        // Where each message begins in the cache (for the preview's "which messages").
        QCOMPARE(plan.message_starts.size(), a.messages(ia).size());
        for (size_t i = 1; i < plan.message_starts.size(); ++i) QVERIFY(plan.message_starts[i] > plan.message_starts[i - 1]);
        QVERIFY(plan.message_starts.back() < plan.tokens);
        const auto before = a.telemetry(ia);
        QVERIFY(before.has_value());
        QCOMPARE(plan.tokens, before->tokens);
        const ConversionPlan done = a.switch_strategy(ia, to);
        QCOMPARE(done.kind, plan.kind);
        QCOMPARE(done.bytes_after, plan.bytes_after);
        const auto after = a.telemetry(ia);
        QVERIFY(after.has_value());
        QCOMPARE(after->spec, to_string(parse_cache_spec(to)));
        QCOMPARE(after->total_bytes, plan.bytes_after);
        const TurnResult a2 = a.send(ia, "And two more, please.", greedy(16));
        QCOMPARE(a2.figures.cached_tokens > 0, true);  // the switched cache was used, not rebuilt

        Store b_store(db("b-" + tag));
        ChatSession b(b_store, model, *backend_);
        OpenOptions target_opts;
        target_opts.cache_spec = to;
        const int64_t ib = b.create("from the start", target_opts);
        const TurnResult b1 = b.send(ib, "Name three colours of the rainbow.", greedy(16));
        QCOMPARE(b1.figures.token_ids, a1.figures.token_ids);
        const TurnResult b2 = b.send(ib, "And two more, please.", greedy(16));
        QCOMPARE(a2.figures.token_ids, b2.figures.token_ids);
        QCOMPARE(a2.text, b2.text);
        // The strategy is saved with the conversation.
        for (const auto& s : a.list())
            if (s.id == ia) QCOMPARE(s.cache_spec, to_string(parse_cache_spec(to)));
    }

    // Issue 25: a conversation reopened from its snapshot (a new session over the same database,
    // as after a restart) and then switched crashed: the loaded cache computed with a backend of
    // its own, which the switch freed. Four ways in: the switch verb the window's worker calls,
    // opening the conversation with another strategy (kvchat-cli chat --cache), and each followed
    // by a regenerate instead of a new message. The next turn answers (a new message from the switched
    // cache, not from a transcript prefilled again), the conversation is not left unanswered, and where the
    // target loses nothing (lossless, or a residual or window that still holds every token) the
    // answer is the one the same conversation gives live, without a restart or a switch.
    void switchAfterReopening_data() {
        QTest::addColumn<QString>("target");
        QTest::addColumn<QString>("way");
        QTest::addColumn<bool>("exact");
        const std::vector<std::pair<QString, bool>> targets = {
            {"static:max_len=512", true},
            {"offloaded:dir=" + dir_.path(), true},
            {"hybrid", true},
            {"quantized:nbits=4", true},      // a residual of 128: nothing quantized in these turns
            {"sink:window=256,sinks=4", true},  // nothing outside the window yet
            {"quantized:nbits=4,residual=8,group=8", false},
            {"sink:window=16,sinks=4", false},
            {"sliding_window:window=16", false},
            {"sink:window=16,sinks=4+quantized:nbits=8,residual=8,group=8+offloaded:dir=" + dir_.path(), false}};
        for (const char* way : {"switch", "open", "switch-regenerate", "open-regenerate"})
            for (const auto& [target, exact] : targets)
                QTest::newRow(qPrintable(QString(way) + " " + target.section(":dir=", 0, 0))) << target << way << exact;
    }
    void switchAfterReopening() {
        QFETCH(QString, target);
        QFETCH(QString, way);
        QFETCH(bool, exact);
        const std::string to = target.toStdString();
        const bool regen = way.endsWith("regenerate");
        const std::string first = "Name three colours of the rainbow.", second = "And two more, please.";
        static int row = 0;
        const QString tag = QString::number(++row);

        // The same conversation live: no restart, no switch.
        Store live_store(db("live-" + tag));
        ChatSession live(live_store, *model_, *backend_);
        const int64_t il = live.create("o");
        const TurnResult l1 = live.send(il, first, greedy(16));
        const TurnResult want = regen ? l1 : live.send(il, second, greedy(16));

        const std::string path = db("reopened-" + tag);
        int64_t id = 0;
        {
            Store store(path);
            ChatSession reg(store, *model_, *backend_);
            id = reg.create("o");
            QCOMPARE(reg.send(id, first, greedy(16)).figures.token_ids, l1.figures.token_ids);
        }
        Store store(path);
        ChatSession reg(store, *model_, *backend_);
        if (way.startsWith("switch")) {
            reg.switch_strategy(id, to);
        } else {
            OpenOptions o;
            o.cache_spec = to;
            reg.open("o", o);
        }
        const TurnResult got = regen ? reg.regenerate(id, greedy(16)) : reg.send(id, second, greedy(16));
        QCOMPARE(got.figures.token_ids.size(), size_t(16));
        // The snapshot was loaded and converted. (A regenerate crops back past the sliding layers'
        // windows, which takes the per-turn checkpoints a switch drops as being of the old
        // strategy: it prefills again, as it says.)
        for (const std::string& n : got.notices)
            QVERIFY2(n.find("could not be") == std::string::npos && (regen || n.find("prefilled again") == std::string::npos),
                     n.c_str());
        if (!regen) QVERIFY2(got.figures.cached_tokens > 0, "the switched cache should have been used");
        const auto tel = reg.telemetry(id);
        QVERIFY(tel.has_value());
        QCOMPARE(tel->spec, to_string(parse_cache_spec(to)));
        const auto list = reg.list();
        QCOMPARE(list.size(), size_t(1));
        QVERIFY(!list[0].last_unanswered);
        QCOMPARE(list[0].message_count, int64_t(regen ? 2 : 4));
        QCOMPARE(list[0].cache_spec, tel->spec);
        if (exact) {
            for (const auto& l : tel->layers) QCOMPARE(l.quantized_tokens, int64_t(0));
            QCOMPARE(got.figures.token_ids, want.figures.token_ids);
            QCOMPARE(got.text, want.text);
        }
        // And the conversation goes on under the new strategy.
        QCOMPARE(reg.send(id, "Thanks.", greedy(4)).figures.token_ids.size(), size_t(4));
    }

    // The sink context policy on a conversation reopened from its snapshot, once the conversation
    // outgrows the context (issue 25 saw it crash at 318k tokens; a model of a 96-token context
    // gets there in a few turns): the reloaded cache is converted to a sink window and answers.
    void sinkPolicyAfterReopening() {
        test::TinyModelSpec spec = test::chat_sized_spec();
        spec.n_ctx = 96;
        const std::string model_path = (dir_.path() + "/short.gguf").toStdString();
        test::write_tiny_gguf(spec, model_path);
        const auto model = Model::load(model_path);
        const std::string path = db("sink-policy");
        int64_t id = 0;
        int64_t tokens = 0;
        {
            Store store(path);
            ChatSession reg(store, *model, *backend_);
            id = reg.create("long");
            for (int turn = 0; turn < 3; ++turn) reg.send(id, "word " + std::to_string(turn), greedy(8));
            tokens = reg.list()[0].tokens;
        }
        QVERIFY2(tokens > 40 && tokens < 96, qPrintable(QString::number(tokens)));
        Store store(path);
        ChatSession reg(store, *model, *backend_);
        TurnOptions o = greedy(8);
        o.policy = ContextPolicy::Sink;
        std::string words;
        for (int i = 0; i < 12; ++i) words += "more words " + std::to_string(i) + " ";
        const TurnResult r = reg.send(id, words, o);
        QCOMPARE(r.figures.token_ids.size(), size_t(8));
        QVERIFY(r.figures.prompt_tokens > 96);
        QVERIFY(r.figures.cached_tokens > 0);
        bool outgrew = false;
        for (const std::string& n : r.notices) outgrew = outgrew || n.find("outgrew the context") != std::string::npos;
        QVERIFY(outgrew);
        QCOMPARE(parse_cache_spec(reg.telemetry(id)->spec).retention(), RetentionKind::Sink);
        QVERIFY(!reg.list()[0].last_unanswered);
        QCOMPARE(reg.send(id, "and on", o).figures.token_ids.size(), size_t(8));
    }

    // A rebuild (a sink cache back to dynamic) cancelled half-way: the sink cache and strategy
    // stay, and the conversation continues under them.
    void cancelledRebuildKeepsTheOldCache() {
        Store store(db("cancel"));
        ChatSession r(store, *model_, *backend_);
        OpenOptions sink;
        sink.cache_spec = "sink:window=16,sinks=2";
        const int64_t id = r.create("sink", sink);
        // Longer than one re-prefill chunk (256 tokens), so the cancel lands between chunks.
        std::string words;
        for (int i = 0; i < 120; ++i) words += "word" + std::to_string(i) + " ";
        r.send(id, words, greedy(8));
        const auto before = r.telemetry(id);
        QVERIFY(before.has_value());
        const ConversionPlan plan = r.plan_switch(id, "dynamic");
        QCOMPARE(plan.kind, ConversionPlan::Kind::Rebuild);
        QCOMPARE(plan.tokens_rebuilt, before->tokens);
        QVERIFY2(before->tokens > 256, qPrintable(QString::number(before->tokens)));
        std::atomic<bool> cancel{false};
        Progress progress;
        progress.cancel = &cancel;
        int64_t reported = 0;
        progress.report = [&](std::string_view, int64_t done, int64_t) {
            reported = done;
            cancel = true;  // after the first chunk
        };
        bool cancelled = false;
        try {
            r.switch_strategy(id, "dynamic", progress);
        } catch (const Cancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QVERIFY(reported < before->tokens);
        const auto after = r.telemetry(id);
        QVERIFY(after.has_value());
        QCOMPARE(after->spec, before->spec);
        QCOMPARE(after->tokens, before->tokens);
        QCOMPARE(after->total_bytes, before->total_bytes);
        for (const auto& s : r.list())
            if (s.id == id) QCOMPARE(s.cache_spec, before->spec);
        const TurnResult next = r.send(id, "go on", greedy(6));
        QCOMPARE(next.figures.cached_tokens > 0, true);
        QCOMPARE(r.telemetry(id)->spec, before->spec);
    }
};

QTEST_GUILESS_MAIN(TestStrategySwitch)
#include "test_strategy_switch.moc"
