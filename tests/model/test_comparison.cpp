// The strategy comparison (engine/generate/comparison.h): its rows against what they claim
// (divergence and agreement against dynamic's tokens, memory against a cache filled directly),
// the same rows from `kvchat-cli bench --cache`, cancellation and up-front refusals.
#include "engine/cache/cache_spec.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/cli_run.h"
#include "support/tiny_model.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

namespace {
const std::vector<std::string> kSpecs = {"dynamic", "sink:window=8,sinks=2", "quantized:nbits=2,residual=8,group=8",
                                         "sliding_window:window=6"};
}

class TestComparison : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    QString path_;
    std::unique_ptr<kvchat::Model> model_;
    std::unique_ptr<kvchat::Backend> backend_;

private slots:
    void initTestCase() {
        path_ = dir_.path() + "/tiny.gguf";
        kvchat::test::TinyModelSpec s;  // gemma3, six layers, sliding window 4
        kvchat::test::write_tiny_gguf(s, path_.toStdString());
        model_ = kvchat::Model::load(path_.toStdString());
        backend_ = kvchat::make_cpu_backend(2);
    }

    // Each row's claims checked against its own tokens and against a cache filled directly.
    // Returns how many rows part from dynamic's tokens.
    static int checkRows(const std::vector<kvchat::ComparisonRow>& rows, const std::vector<std::string>& specs,
                         const std::vector<int32_t>& prompt, int gen, const kvchat::Model& model, kvchat::Backend& backend) {
        int diverging = 0;
        [&] {
            QCOMPARE(rows.size(), specs.size());
            const auto& dyn = rows[0];
            QCOMPARE(dyn.strategy, std::string("dynamic"));
            QCOMPARE(dyn.first_divergence, int64_t(-1));
            QCOMPARE(dyn.agreement, 1.0);
            const int64_t ctx = static_cast<int64_t>(prompt.size());
            for (size_t k = 0; k < rows.size(); ++k) {
                const auto& r = rows[k];
                QCOMPARE(r.strategy, kvchat::to_string(kvchat::parse_cache_spec(specs[k])));
                QCOMPARE(r.context, ctx);
                QCOMPARE(r.tokens.size(), size_t(gen));
                QCOMPARE(r.pieces.size(), size_t(gen));
                int64_t first = -1;
                int same = 0;
                for (int i = 0; i < gen; ++i) {
                    if (r.tokens[i] == dyn.tokens[i])
                        ++same;
                    else if (first < 0)
                        first = i;
                }
                QCOMPARE(r.first_divergence, first);
                int64_t end = gen;
                for (int i = gen - 1; i >= 0; --i)
                    if (r.tokens[i] == model.tokenizer().special().eos || r.tokens[i] == model.tokenizer().special().end_of_turn) end = i;
                QCOMPARE(r.answer_end, end);
                QCOMPARE(r.agreement, double(same) / gen);
                diverging += first >= 0;
                // Memory: from empty, through the prompt, to prompt + every token but the last.
                QCOMPARE(r.kv_series.front(), (std::pair<int64_t, int64_t>(0, 0)));
                QCOMPARE(r.kv_series.back().first, ctx + gen - 1);
                QCOMPARE(r.kv_series.back().second, r.kv_bytes);
                int64_t peak = 0;
                for (const auto& [t, b] : r.kv_series) peak = std::max(peak, b);
                QCOMPARE(r.peak_kv_bytes, peak);
                // The same tokens through a cache of this strategy filled directly hold the same bytes.
                auto cache = model.make_cache(backend, r.strategy);
                std::vector<int32_t> all = prompt;
                all.insert(all.end(), r.tokens.begin(), r.tokens.end() - 1);
                std::vector<float> lg;
                model.forward(backend, *cache, all.data(), static_cast<int64_t>(all.size()), kvchat::Logits::Last, lg);
                QCOMPARE(cache->bytes(), r.kv_bytes);
                QVERIFY(r.ttft_ms > 0 && r.prefill_tok_s > 0 && r.decode_tok_s > 0);
                QCOMPARE(r.convert_ms > 0, k > 0);
            }
        }();
        return diverging;
    }

    void rowsSayWhatTheyMeasure() {
        const auto prompt = kvchat::benchmark_prompt(*model_, 24);
        QCOMPARE(prompt.size(), size_t(24));
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 12;
        std::vector<std::string> tasks;
        opt.progress.report = [&](std::string_view task, int64_t, int64_t) {
            if (tasks.empty() || tasks.back() != task) tasks.emplace_back(task);
        };
        const auto rows = kvchat::compare_strategies(*model_, *backend_, prompt, kSpecs, opt);
        checkRows(rows, kSpecs, prompt, 12, *model_, *backend_);
        if (QTest::currentTestFailed()) return;
        QVERIFY(std::find(tasks.begin(), tasks.end(), "Decoding") != tasks.end());
        QVERIFY(std::find(tasks.begin(), tasks.end(), "Prefilling sink:window=8,sinks=2") != tasks.end());
        // Nothing is timed cold: the warm-up comes before the first strategy's prefill.
        QVERIFY(!tasks.empty());
        QCOMPARE(tasks.front(), std::string("Warming up"));
    }

    // The tiny random models settle on one token whatever the cache holds; the default model's
    // answers part ways under a narrow sink and 2-bit keys, which is what the divergence is for.
    void defaultModelDiverges() {
        const std::string path = kvchat::resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(path))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        auto model = kvchat::Model::load(path);
        const std::vector<std::string> specs = {"dynamic", "sink:window=8,sinks=2", "quantized:nbits=2,residual=32,group=32"};
        const auto prompt = model->tokenizer().encode(
            "Here is a list of the planets of the solar system in order from the Sun: Mercury, Venus, Earth, Mars,", true);
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 16;
        const auto rows = kvchat::compare_strategies(*model, *backend_, prompt, specs, opt);
        for (const auto& r : rows) qInfo("%s: first divergence %lld, agreement %.2f: %s", r.strategy.c_str(),
                                         static_cast<long long>(r.first_divergence), r.agreement, r.text.c_str());
        const int diverging = checkRows(rows, specs, prompt, 16, *model, *backend_);
        if (QTest::currentTestFailed()) return;
        QVERIFY(diverging > 0);
    }

    // kvchat-cli bench --cache reports the same rows for the same setup.
    void benchReportsTheSameRows() {
        QString list;
        for (const auto& s : kSpecs) list += (list.isEmpty() ? "" : ",") + QString::fromStdString(s);
        const auto r = kvchat::test::run_cli({"bench", "--model", path_, "--cache", list, "--context", "16,24",
                                              "--gen-tokens", "10", "--json", "--threads", "2"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonArray rows = QJsonDocument::fromJson(r.out.toUtf8()).array();
        QCOMPARE(rows.size(), int(2 * kSpecs.size()));
        int at = 0;
        for (int ctx : {16, 24}) {
            kvchat::ComparisonOptions opt;
            opt.gen_tokens = 10;
            const auto mine = kvchat::compare_strategies(*model_, *backend_, kvchat::benchmark_prompt(*model_, ctx), kSpecs, opt);
            for (const auto& m : mine) {
                const QJsonObject row = rows[at++].toObject();
                QCOMPARE(row["strategy"].toString().toStdString(), m.strategy);
                QCOMPARE(row["context"].toInt(), ctx);
                QCOMPARE(static_cast<int64_t>(row["kv_bytes"].toDouble()), m.kv_bytes);
                QCOMPARE(static_cast<int64_t>(row["peak_kv_bytes"].toDouble()), m.peak_kv_bytes);
                QCOMPARE(row["agreement"].toDouble(), m.agreement);
                QCOMPARE(static_cast<int64_t>(row["first_divergence"].toDouble()), m.first_divergence);
                const QJsonArray toks = row["tokens"].toArray();
                QCOMPARE(toks.size(), int(m.tokens.size()));
                for (int i = 0; i < toks.size(); ++i) QCOMPARE(toks[i].toInt(), m.tokens[static_cast<size_t>(i)]);
            }
        }
    }

    void cancelStopsBetweenSteps() {
        std::atomic<bool> cancel{false};
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 20;
        opt.progress.cancel = &cancel;
        int64_t last_step = -1;
        opt.progress.report = [&](std::string_view task, int64_t done, int64_t) {
            if (task != "Decoding") return;
            last_step = done;
            if (done == 3) cancel = true;
        };
        QString msg;
        try {
            kvchat::compare_strategies(*model_, *backend_, kvchat::benchmark_prompt(*model_, 16), kSpecs, opt);
        } catch (const kvchat::Cancelled& e) {
            msg = e.what();
        }
        QVERIFY2(msg.contains("cancelled"), qPrintable(msg));
        QCOMPARE(last_step, int64_t(3));
    }

    // A strategy that cannot hold the prompt and the answer is refused before any prefill; a bad
    // spec names its parameter; rows follow the order asked for, dynamic only when listed.
    void refusalsAndOrder() {
        bool prefilled = false;
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 8;
        opt.progress.report = [&](std::string_view task, int64_t, int64_t) { prefilled = prefilled || task.starts_with("Prefilling"); };
        QString msg;
        try {
            kvchat::compare_strategies(*model_, *backend_, kvchat::benchmark_prompt(*model_, 16), {"dynamic", "static:max_len=20"}, opt);
        } catch (const kvchat::Error& e) {
            msg = e.what();
        }
        QVERIFY2(msg.contains("static:max_len=20") && msg.contains("max_len=20 tokens, but 23"), qPrintable(msg));
        QVERIFY(!prefilled);
        try {
            msg.clear();
            kvchat::compare_strategies(*model_, *backend_, {2, 50, 60}, {"quantized:nbits=3"}, opt);
        } catch (const kvchat::Error& e) {
            msg = e.what();
        }
        QVERIFY2(msg.contains("nbits=3"), qPrintable(msg));
        opt.progress = {};
        opt.measure_conversion = false;
        const auto rows = kvchat::compare_strategies(*model_, *backend_, kvchat::benchmark_prompt(*model_, 12),
                                                     {"sink:window=8,sinks=2", "hybrid", "sink:window=8,sinks=2"}, opt);
        QCOMPARE(rows.size(), size_t(2));
        QCOMPARE(rows[0].strategy, std::string("sink:window=8,sinks=2"));
        QCOMPARE(rows[1].strategy, std::string("hybrid"));
        QCOMPARE(rows[1].convert_ms, 0.0);
    }
};

QTEST_GUILESS_MAIN(TestComparison)
#include "test_comparison.moc"
