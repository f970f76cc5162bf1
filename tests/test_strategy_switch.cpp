// Switching a conversation's strategy mid-conversation through the session API, on a tiny model:
// after a lossless switch the next answer is the one a conversation that used the target strategy
// from its start gives; the switch returns the plan made beforehand; a cancelled rebuild leaves the
// old cache and strategy in use and the conversation goes on.
#include "engine/cache/cache_spec.h"
#include "engine/chat/conversation_registry.h"
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
        ConversationRegistry a(a_store, model, *backend_);
        OpenOptions dyn;
        dyn.cache_spec = "dynamic";
        const int64_t ia = a.create("switched", dyn);
        const TurnResult a1 = a.send(ia, "Name three colours of the rainbow.", greedy(16));
        const ConversionPlan plan = a.plan_switch(ia, to);
        QCOMPARE(plan.kind, ConversionPlan::Kind::Lossless);
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
        QCOMPARE(a2.cached_tokens > 0, true);  // the switched cache was used, not rebuilt

        Store b_store(db("b-" + tag));
        ConversationRegistry b(b_store, model, *backend_);
        OpenOptions target_opts;
        target_opts.cache_spec = to;
        const int64_t ib = b.create("from the start", target_opts);
        const TurnResult b1 = b.send(ib, "Name three colours of the rainbow.", greedy(16));
        QCOMPARE(b1.tokens, a1.tokens);
        const TurnResult b2 = b.send(ib, "And two more, please.", greedy(16));
        QCOMPARE(a2.tokens, b2.tokens);
        QCOMPARE(a2.text, b2.text);
        // The strategy is saved with the conversation.
        for (const auto& s : a.list())
            if (s.id == ia) QCOMPARE(s.cache_spec, to_string(parse_cache_spec(to)));
    }

    // A rebuild (a sink cache back to dynamic) cancelled half-way: the sink cache and strategy
    // stay, and the conversation continues under them.
    void cancelledRebuildKeepsTheOldCache() {
        Store store(db("cancel"));
        ConversationRegistry r(store, *model_, *backend_);
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
        QCOMPARE(next.cached_tokens > 0, true);
        QCOMPARE(r.telemetry(id)->spec, before->spec);
    }
};

QTEST_GUILESS_MAIN(TestStrategySwitch)
#include "test_strategy_switch.moc"
