// plan_conversion against convert(): for every pair of strategies at several lengths, the plan
// made beforehand says what the conversion then does (rebuilt or not, tokens evicted and
// quantized per layer, bytes after), and making it changes nothing in the cache.
#include "engine/cache/cache_spec.h"
#include "engine/cache/conversion_plan.h"
#include "engine/cache/convert.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>
#include <QtTest>

#include <random>

using kvchat::Cache;
using kvchat::ConversionPlan;
using kvchat::LayerConversion;
using kvchat::Logits;

namespace {

std::vector<int32_t> tokens(int n) {
    std::mt19937 rng(11);
    std::vector<int32_t> t = {2};
    while (static_cast<int>(t.size()) < n) t.push_back(static_cast<int32_t>(6 + rng() % 270));
    return t;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const kvchat::Error& e) {
        return e.what();
    }
    return "(no error)";
}

// Gemma-like: five sliding layers of window 4, then a global one.
struct Tiny {
    QTemporaryDir dir;
    std::unique_ptr<kvchat::Model> model;
    std::unique_ptr<kvchat::Backend> backend;
    Tiny() {
        kvchat::test::TinyModelSpec s;
        s.arch = "gemma3";
        s.n_layer = 6;
        s.sliding_window = 4;
        const std::string path = (dir.path() + "/tiny.gguf").toStdString();
        kvchat::test::write_tiny_gguf(s, path);
        model = kvchat::Model::load(path);
        backend = kvchat::make_cpu_backend(2);
    }
    std::unique_ptr<Cache> filled(const std::string& spec, int n) {
        auto c = model->make_cache(*backend, spec);
        std::vector<float> lg;
        const auto t = tokens(n);
        model->forward(*backend, *c, t.data(), n, Logits::None, lg);
        return c;
    }
    std::vector<float> next_logits(Cache& c) {
        std::vector<float> lg;
        int32_t tok = 42;
        model->forward(*backend, c, &tok, 1, Logits::Last, lg);
        return lg;
    }
    kvchat::ConvertResult convert(Cache& c, const std::string& to) {
        kvchat::ConvertOptions opt;
        std::vector<float> scratch;
        opt.reprefill = [&](Cache& cc, const std::vector<int32_t>& ids) {
            model->forward(*backend, cc, ids.data(), static_cast<int64_t>(ids.size()), Logits::None, scratch);
        };
        opt.chunk = 7;
        return kvchat::convert(c, to, opt);
    }
};

// The parts of a layer's telemetry that a plan must leave alone (offload traffic aside: reading
// an offloaded layer to look at it moves bytes).
QString held(const Cache& c) {
    QString s = QString::fromStdString(c.spec_text()) + " " + QString::number(c.seq_length());
    for (const auto& l : c.telemetry().layers)
        s += QString(" [%1 %2 %3 %4 %5 %6 %7 %8 %9]")
                 .arg(l.tokens_held)
                 .arg(l.bytes_fast)
                 .arg(l.bytes_slow)
                 .arg(l.quantized_tokens)
                 .arg(l.residual_tokens)
                 .arg(l.evicted)
                 .arg(l.window_begin)
                 .arg(l.window_end)
                 .arg(l.sink_end);
    return s;
}

bool lossless(const std::string& spec) { return kvchat::parse_cache_spec(spec).lossless(); }

}  // namespace

class TestConversionPlan : public QObject {
    Q_OBJECT

    Tiny tiny_;
    QTemporaryDir spill_;

    std::vector<std::string> specs() const {
        const std::string dir = spill_.path().toStdString();
        return {"dynamic",
                "static:max_len=64",
                "offloaded:dir=" + dir,
                "offloaded_static:max_len=64,dir=" + dir,
                "hybrid",
                "quantized:nbits=4,residual=8,group=8",
                "quantized:nbits=8,residual=8,group=8",
                "quantized:nbits=4,residual=8,group=8+offloaded:dir=" + dir,
                "sliding_window:window=6",
                "sink:window=8,sinks=2",
                "hybrid+quantized:nbits=8,residual=8,group=8",
                "sliding_window:window=6+quantized:nbits=4,residual=8,group=8",
                "sink:window=8,sinks=2+quantized:nbits=8,residual=8,group=8"};
    }

private slots:
    // Dynamic to every strategy and back, and a few pairs between others, at lengths inside and
    // past the windows and residuals: the plan's kind and figures are what convert() then does.
    void planMatchesConversion_data() {
        QTest::addColumn<QString>("from");
        QTest::addColumn<QString>("to");
        QTest::addColumn<int>("length");
        const auto all = specs();
        std::vector<std::pair<std::string, std::string>> pairs;
        for (const auto& s : all)
            if (s != "dynamic") pairs.push_back({"dynamic", s}), pairs.push_back({s, "dynamic"});
        pairs.push_back({all[6], all[5]});    // 8 -> 4 bits: quantized again
        pairs.push_back({all[5], all[6]});    // 4 -> 8 bits: rebuilt
        pairs.push_back({all[5], all[7]});    // the same layout, offloaded: verbatim
        pairs.push_back({all[4], all[9]});    // hybrid -> sink
        pairs.push_back({all[9], all[12]});   // sink -> sink + quantized
        pairs.push_back({all[8], all[11]});   // window -> window + quantized
        pairs.push_back({all[1], all[1]});    // unchanged
        for (int length : {3, 9, 20, 40})
            for (const auto& [from, to] : pairs)
                QTest::newRow(qPrintable(QString("%1 -> %2 @%3").arg(QString::fromStdString(from), QString::fromStdString(to)).arg(length)))
                    << QString::fromStdString(from) << QString::fromStdString(to) << length;
    }
    void planMatchesConversion() {
        QFETCH(QString, from);
        QFETCH(QString, to);
        QFETCH(int, length);
        auto c = tiny_.filled(from.toStdString(), length);
        auto twin = tiny_.filled(from.toStdString(), length);
        const QString before = held(*c);
        const int64_t bytes_before = c->bytes();
        const auto tel_before = c->telemetry();

        const ConversionPlan plan = kvchat::plan_conversion(*c, to.toStdString(), 2000.0);

        // Nothing changed: the same holdings, and the next token sees what the twin sees.
        QCOMPARE(held(*c), before);
        QCOMPARE(plan.bytes_before, bytes_before);
        QCOMPARE(plan.tokens, int64_t(length));
        QCOMPARE(plan.from_spec, c->spec_text());
        QCOMPARE(plan.to_spec, kvchat::to_string(kvchat::parse_cache_spec(to.toStdString())));
        QVERIFY(!plan.summary.empty());

        if (plan.kind == ConversionPlan::Kind::Unchanged) {
            QCOMPARE(from, to);
            QCOMPARE(plan.bytes_after, bytes_before);
            QVERIFY(tiny_.next_logits(*c) == tiny_.next_logits(*twin));
            return;
        }
        QCOMPARE(plan.layers.size(), c->n_layers());

        const auto r = tiny_.convert(*c, to.toStdString());
        const QString label = from + " -> " + to;
        QCOMPARE(r.rebuilt, plan.kind == ConversionPlan::Kind::Rebuild);
        QCOMPARE(plan.tokens_rebuilt, r.rebuilt ? int64_t(length) : int64_t(0));
        if (r.rebuilt) QCOMPARE(plan.rebuild_ms_estimate, 1000.0 * length / 2000.0);
        QCOMPARE(c->bytes(), plan.bytes_after);
        const auto tel = c->telemetry();
        int64_t imported_evicted = 0;
        for (size_t i = 0; i < tel.layers.size(); ++i) {
            const LayerConversion& lc = plan.layers[i];
            const auto& l = tel.layers[i];
            QCOMPARE(lc.tokens_before, tel_before.layers[i].tokens_held);
            QCOMPARE(l.tokens_held, lc.tokens_after);
            QCOMPARE(l.quantized_tokens, lc.quantized_after);
            QCOMPARE(l.evicted, lc.evicted_after);
            QCOMPARE(l.bytes_fast + l.bytes_slow, lc.bytes_after);
            QCOMPARE(lc.mode == LayerConversion::Mode::Rebuilt, r.rebuilt);
            // Tokens held before and after balance: what stays plus what leaves or returns.
            QCOMPARE(lc.tokens_before - lc.tokens_evicted + lc.tokens_restored, lc.tokens_after);
            if (lc.mode == LayerConversion::Mode::Imported) imported_evicted = std::max(imported_evicted, l.evicted);
            // An import only drops what the target does not keep; nothing comes back without a rebuild.
            if (lc.mode != LayerConversion::Mode::Rebuilt) QCOMPARE(lc.tokens_restored, int64_t(0));
        }
        if (!r.rebuilt) QCOMPARE(plan.tokens_evicted, imported_evicted);
        if (from == "dynamic") {
            // Everything was exact: what the target quantizes is all newly quantized.
            int64_t most = 0;
            for (const auto& l : tel.layers) most = std::max(most, l.quantized_tokens);
            QCOMPARE(plan.tokens_quantized, most);
        }
        if (lossless(from.toStdString()) && lossless(to.toStdString()))
            QVERIFY2(plan.kind == ConversionPlan::Kind::Lossless, qPrintable(label));
        // Past every window and residual used here (6, 8), a lossy source has lost what a lossless
        // target needs.
        if (length >= 9 && lossless(to.toStdString()) && !lossless(from.toStdString()))
            QVERIFY2(plan.kind == ConversionPlan::Kind::Rebuild, qPrintable(label));
        if (plan.kind == ConversionPlan::Kind::Lossy)
            QVERIFY(plan.tokens_quantized + plan.tokens_requantized + plan.tokens_evicted > 0);
    }

    // Figures worked out by hand from the strategies' rules at 20 tokens (global layer 5; the
    // sliding layers keep the model's window of 4).
    void countsByHand() {
        const std::string q4 = "quantized:nbits=4,residual=8,group=8";
        {
            auto c = tiny_.filled("dynamic", 20);
            auto p = kvchat::plan_conversion(*c, "sliding_window:window=6");
            QCOMPARE(p.kind, ConversionPlan::Kind::Lossy);
            QCOMPARE(p.tokens_evicted, int64_t(14));  // 20 - 6 on the global layer
            QCOMPARE(p.layers[5].tokens_after, int64_t(6));
            QCOMPARE(p.layers[0].tokens_evicted, int64_t(0));  // a ring of 4 already
            p = kvchat::plan_conversion(*c, "sink:window=8,sinks=2");
            QCOMPARE(p.tokens_evicted, int64_t(12));  // keeps 2 sinks + the last 6
            // Past the residual of 8, blocks of 8 are quantized whenever it overflows: 2 blocks.
            p = kvchat::plan_conversion(*c, q4);
            QCOMPARE(p.kind, ConversionPlan::Kind::Lossy);
            QCOMPARE(p.tokens_quantized, int64_t(16));
            QCOMPARE(p.tokens_evicted, int64_t(0));
            p = kvchat::plan_conversion(*c, "static:max_len=64");
            QCOMPARE(p.kind, ConversionPlan::Kind::Lossless);
            QCOMPARE(p.bytes_after, p.bytes_before);  // held bytes: the same tokens in f32
        }
        {
            auto c = tiny_.filled("sink:window=8,sinks=2", 20);
            const auto p = kvchat::plan_conversion(*c, "dynamic", 500.0);
            QCOMPARE(p.kind, ConversionPlan::Kind::Rebuild);
            QCOMPARE(p.tokens_rebuilt, int64_t(20));
            QCOMPARE(p.tokens_restored, int64_t(12));
            QCOMPARE(p.rebuild_ms_estimate, 40.0);
            QVERIFY2(QString::fromStdString(p.summary).contains("20 tokens"), p.summary.c_str());
        }
        {
            // 8 -> 4 bits: the 16 quantized tokens are quantized again; the 4 of the residual now.
            auto c = tiny_.filled("quantized:nbits=8,residual=8,group=8", 20);
            const auto p = kvchat::plan_conversion(*c, q4);
            QCOMPARE(p.kind, ConversionPlan::Kind::Lossy);
            QCOMPARE(p.tokens_requantized, int64_t(16));
            QCOMPARE(p.tokens_quantized, int64_t(0));
        }
        {
            auto c = tiny_.filled(q4, 20);
            const auto p = kvchat::plan_conversion(*c, q4 + "+offloaded:dir=" + spill_.path().toStdString());
            QCOMPARE(p.kind, ConversionPlan::Kind::Lossless);
            for (const auto& l : p.layers) QCOMPARE(l.mode, LayerConversion::Mode::Verbatim);
            QCOMPARE(p.bytes_after, p.bytes_before);
        }
    }

    // Where the lost tokens lie, by the retention rule: a sink of S tokens with a window of W keeps
    // [0, S) and the last W - S of n, so the global layer evicts [S, n - (W - S)); the sliding
    // layers (window 4) already held less and lose nothing more. Quantizing keeps the recent
    // residual exact and quantizes from position 0.
    void lossPositions() {
        Tiny t;
        auto c = t.filled("dynamic", 40);
        const ConversionPlan sink = kvchat::plan_conversion(*c, "sink:window=24,sinks=2");
        QCOMPARE(sink.kind, ConversionPlan::Kind::Lossy);
        QCOMPARE(sink.evicted_first, int64_t(2));
        QCOMPARE(sink.evicted_last, int64_t(40 - 22 - 1));
        QCOMPARE(sink.tokens_evicted, sink.evicted_last - sink.evicted_first + 1);
        QCOMPARE(sink.quantized_first, int64_t(-1));
        const ConversionPlan q = kvchat::plan_conversion(*c, "quantized:nbits=4,residual=8,group=8");
        QVERIFY(q.tokens_quantized > 0);
        QCOMPARE(q.quantized_first, int64_t(0));
        QVERIFY(q.quantized_last <= 40 - 8 - 1);
        QCOMPARE(q.evicted_first, int64_t(-1));
        const ConversionPlan same = kvchat::plan_conversion(*c, "dynamic");
        QCOMPARE(same.evicted_first, int64_t(-1));
        QCOMPARE(same.quantized_first, int64_t(-1));
    }

    // Positions to messages: the last message starting at or before a position holds it.
    void messagesSpanning() {
        const std::vector<int64_t> starts = {0, 5, 12, 20, 30};
        using P = std::pair<int64_t, int64_t>;
        QCOMPARE(kvchat::messages_spanning(starts, 2, 17), (P{0, 2}));
        QCOMPARE(kvchat::messages_spanning(starts, 5, 11), (P{1, 1}));
        QCOMPARE(kvchat::messages_spanning(starts, 12, 12), (P{2, 2}));
        QCOMPARE(kvchat::messages_spanning(starts, 29, 90), (P{3, 4}));
        QCOMPARE(kvchat::messages_spanning({}, 2, 17), (P{-1, -1}));
        QCOMPARE(kvchat::messages_spanning(starts, -1, -1), (P{-1, -1}));
        QCOMPARE(kvchat::messages_spanning({3, 9}, 0, 1), (P{0, 0}));  // before the first message (a BOS)
    }

    void refusals() {
        auto c = tiny_.filled("dynamic", 20);
        QString m = QString::fromStdString(error_of([&] { kvchat::plan_conversion(*c, "static:max_len=10"); }));
        QVERIFY2(m.contains("max_len=10"), qPrintable(m));
        m = QString::fromStdString(error_of([&] { kvchat::plan_conversion(*c, "quantized:nbits=5"); }));
        QVERIFY2(m.contains("nbits=5"), qPrintable(m));
        m = QString::fromStdString(error_of([&] { kvchat::plan_conversion(*c, "offloaded:dir=/nonexistent/x"); }));
        QVERIFY2(m.contains("/nonexistent/x"), qPrintable(m));
        QCOMPARE(c->seq_length(), int64_t(20));
        QCOMPARE(QString::fromStdString(std::string(kvchat::conversion_kind_name(ConversionPlan::Kind::Rebuild))), QString("rebuild"));
    }
};

QTEST_GUILESS_MAIN(TestConversionPlan)
#include "test_conversion_plan.moc"
