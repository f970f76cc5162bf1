// The architectures beside Gemma 3 and Llama 2 on tiny models written by the gguf package, against
// llama.cpp on the same files (tests/reference/make_tiny_arch_models.py writes both): Llama 3's
// RoPE frequency factors, Qwen 2's q/k/v biases, Qwen 3's per-head q/k norms, Phi-3's fused
// matrices. Every model has grouped-query attention with 3 query heads per kv head, so the cache
// strategies run here on that layout too: the lossless ones give the no-cache tokens and, fed the
// same chunks, dynamic's logits bit for bit; snapshots and conversions keep them exact.
#include "engine/cache/convert.h"
#include "engine/cache/snapshot.h"
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

const char* const kModels[] = {"tiny_llama3.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf", "tiny_phi3.gguf"};

std::string model_path(const QString& name) { return kvchat::test::data_path("tiny_archs/" + name.toStdString()); }

class LevelScope {
public:
    explicit LevelScope(const char* level) { kvchat::force_simd_level(level); }
    ~LevelScope() { kvchat::force_simd_level(nullptr); }
};

void add_model_rows() {
    QTest::addColumn<QString>("file");
    for (const char* m : kModels) QTest::newRow(m) << QString(m);
}

// Logits of tokens fed in chunks of `chunk` (all positions).
std::vector<float> chunked_logits(const kvchat::Model& m, kvchat::Backend& be, kvchat::Cache& cache,
                                  const std::vector<int32_t>& tokens, int64_t chunk) {
    std::vector<float> all, part;
    for (size_t off = 0; off < tokens.size(); off += static_cast<size_t>(chunk)) {
        const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size() - off));
        m.forward(be, cache, tokens.data() + off, n, kvchat::Logits::All, part);
        all.insert(all.end(), part.begin(), part.end());
    }
    return all;
}

}  // namespace

class TestTinyArchs : public QObject {
    Q_OBJECT
    json golden_;
    std::unique_ptr<kvchat::Backend> backend_;

private slots:
    void initTestCase() {
        std::ifstream f(kvchat::test::data_path("tiny_archs/golden.json"));
        QVERIFY(f.good());
        golden_ = json::parse(f);
        backend_ = kvchat::make_cpu_backend(2);
    }

    // What each file must have been read as: the architecture, grouped-query attention 3:1, and
    // the part that makes it that architecture.
    void loadsAsItsArchitecture_data() { add_model_rows(); }
    void loadsAsItsArchitecture() {
        QFETCH(QString, file);
        auto m = kvchat::Model::load(model_path(file));
        const kvchat::ModelConfig& c = m->config();
        QCOMPARE(c.arch_name, golden_["models"][file.toStdString()]["arch"].get<std::string>());
        QCOMPARE(c.n_head, 3);
        QCOMPARE(c.n_head_kv, 1);
        const kvchat::LayerWeights& w = m->layer(1);
        if (file == "tiny_llama3.gguf") {
            QCOMPARE(c.arch, kvchat::Architecture::Llama);
            QCOMPARE(c.rope_global.freq_factors.size(), size_t(32));
            QCOMPARE(c.rope_global.freq_factors.back(), 8.0f);
        } else {
            QVERIFY(c.rope_global.freq_factors.empty());
            QCOMPARE(c.rope_global.style, kvchat::RopeStyle::HalfSplit);
        }
        if (file == "tiny_qwen2.gguf") QCOMPARE(w.bk.size, int64_t(64));
        if (file == "tiny_qwen3.gguf") QCOMPARE(w.k_norm.size, int64_t(64));
        if (file == "tiny_phi3.gguf") {
            // Parts of the fused tensors, in place: k follows q, up follows gate.
            const size_t q_bytes = kvchat::row_bytes(w.wq.type, w.wq.cols) * static_cast<size_t>(w.wq.rows);
            QCOMPARE(static_cast<const uint8_t*>(w.wk.data), static_cast<const uint8_t*>(w.wq.data) + q_bytes);
            const size_t gate_bytes = kvchat::row_bytes(w.w_gate.type, w.w_gate.cols) * static_cast<size_t>(w.w_gate.rows);
            QCOMPARE(static_cast<const uint8_t*>(w.w_up.data), static_cast<const uint8_t*>(w.w_gate.data) + gate_bytes);
        }
    }

    // Every logit of every prompt position is llama.cpp's (up to the golden file's rounding to 4
    // decimals), at this machine's SIMD level and at AVX2.
    void logitsMatchLlamaCpp_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("level");
        for (const char* m : kModels)
            for (const char* level : {"auto", "avx2"}) QTest::newRow(qPrintable(QString("%1 %2").arg(m).arg(level))) << QString(m) << QString(level);
    }
    void logitsMatchLlamaCpp() {
        QFETCH(QString, file);
        QFETCH(QString, level);
        const LevelScope scope(level.toLatin1().constData());
        const json& g = golden_["models"][file.toStdString()];
        auto m = kvchat::Model::load(model_path(file));
        const auto tokens = g["tokens"].get<std::vector<int32_t>>();
        auto cache = m->make_default_cache(*backend_);
        std::vector<float> logits;
        m->forward(*backend_, *cache, tokens.data(), static_cast<int64_t>(tokens.size()), kvchat::Logits::All, logits);
        const int64_t n_vocab = m->config().n_vocab;
        double worst = 0.0;
        for (size_t t = 0; t < tokens.size(); ++t)
            for (int64_t i = 0; i < n_vocab; ++i)
                worst = std::max(worst, std::fabs(logits[t * n_vocab + i] - g["logits"][t][i].get<double>()));
        qInfo("largest |logit - llama.cpp's| %.6f over %lld logits", worst, static_cast<long long>(tokens.size() * n_vocab));
        QVERIFY2(worst <= 6e-5, qPrintable(QString("largest logit difference %1").arg(worst)));
    }

    // Greedy decoding through the generator (a prefill, then one token per step) picks llama.cpp's
    // 24 tokens.
    void greedyMatchesLlamaCpp_data() { add_model_rows(); }
    void greedyMatchesLlamaCpp() {
        QFETCH(QString, file);
        const json& g = golden_["models"][file.toStdString()];
        auto m = kvchat::Model::load(model_path(file));
        kvchat::Generator gen(*m, *backend_);
        kvchat::GenerationConfig config;
        config.max_new_tokens = 24;
        config.sampling.greedy = true;
        config.stop_at_eos = false;
        auto cache = m->make_default_cache(*backend_);
        QCOMPARE(gen.generate(*cache, g["tokens"].get<std::vector<int32_t>>(), config).tokens,
                 g["greedy"].get<std::vector<int32_t>>());
    }

    // Every lossless strategy and combination on grouped-query attention 3:1: the tokens of
    // recomputing the whole context at every step (--no-cache), and, fed the same chunks, the
    // logits of the dynamic cache bit for bit.
    void losslessStrategiesExact_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("spec");
        for (const char* m : {"tiny_llama3.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf", "tiny_phi3.gguf"})
            for (const char* s : {"static:max_len=64", "offloaded", "offloaded_static:max_len=64", "hybrid",
                                  "hybrid+offloaded", "sliding_window:window=600", "sink:window=600,sinks=4",
                                  "dynamic:dtype=f32"})
                QTest::newRow(qPrintable(QString("%1 %2").arg(m).arg(s))) << QString(m) << QString(s);
    }
    void losslessStrategiesExact() {
        QFETCH(QString, file);
        QFETCH(QString, spec);
        auto m = kvchat::Model::load(model_path(file));
        const auto prompt = golden_["models"][file.toStdString()]["tokens"].get<std::vector<int32_t>>();
        kvchat::Generator gen(*m, *backend_);
        kvchat::GenerationConfig config;
        config.max_new_tokens = 16;
        config.sampling.greedy = true;
        config.stop_at_eos = false;
        config.prefill_chunk = 5;
        auto with = m->make_cache(*backend_, spec.toStdString());
        const auto got = gen.generate(*with, prompt, config).tokens;
        config.use_cache = false;
        auto without = m->make_default_cache(*backend_);
        QCOMPARE(got, gen.generate(*without, prompt, config).tokens);

        std::vector<int32_t> fed = prompt;
        fed.insert(fed.end(), got.begin(), got.end());
        auto dynamic = m->make_cache(*backend_, "dynamic");
        auto other = m->make_cache(*backend_, spec.toStdString());
        const auto want = chunked_logits(*m, *backend_, *dynamic, fed, 5);
        const auto have = chunked_logits(*m, *backend_, *other, fed, 5);
        QCOMPARE(have.size(), want.size());
        QVERIFY2(std::memcmp(have.data(), want.data(), sizeof(float) * want.size()) == 0, "logits differ from dynamic's");
    }

    // Lossy strategies stay close: 8-bit KIVI blocks, resident and offloaded.
    void lossyStrategiesAgree_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("spec");
        for (const char* m : {"tiny_qwen2.gguf", "tiny_phi3.gguf"})
            for (const char* s : {"quantized:nbits=8,residual=8,group=8", "quantized:nbits=8,residual=8,group=8+offloaded"})
                QTest::newRow(qPrintable(QString("%1 %2").arg(m).arg(s))) << QString(m) << QString(s);
    }
    void lossyStrategiesAgree() {
        QFETCH(QString, file);
        QFETCH(QString, spec);
        auto m = kvchat::Model::load(model_path(file));
        const json& g = golden_["models"][file.toStdString()];
        auto prompt = g["tokens"].get<std::vector<int32_t>>();  // with the greedy tokens: 38, most quantized
        for (const json& t : g["greedy"]) prompt.push_back(t.get<int32_t>());
        auto exact = m->make_cache(*backend_, "dynamic");
        auto lossy = m->make_cache(*backend_, spec.toStdString());
        const auto want = chunked_logits(*m, *backend_, *exact, prompt, 4);
        const auto have = chunked_logits(*m, *backend_, *lossy, prompt, 4);
        double worst = 0.0, spread = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
            worst = std::max(worst, double(std::fabs(have[i] - want[i])));
            spread = std::max(spread, double(std::fabs(want[i])));
        }
        int64_t quantized = 0;
        for (const auto& l : lossy->telemetry().layers) quantized += l.quantized_tokens;
        QVERIFY(quantized > 0);
        qInfo("largest logit difference %.4f (largest logit %.2f)", worst, spread);
        QVERIFY2(worst < 0.05 * spread, qPrintable(QString("logits %1 off").arg(worst)));
    }

    // A conversion between strategies and a snapshot written and read back continue exactly as the
    // cache they came from.
    void conversionAndSnapshotAreExact_data() { add_model_rows(); }
    void conversionAndSnapshotAreExact() {
        QFETCH(QString, file);
        auto m = kvchat::Model::load(model_path(file));
        const auto prompt = golden_["models"][file.toStdString()]["tokens"].get<std::vector<int32_t>>();
        std::vector<float> lg;
        auto c = m->make_cache(*backend_, "dynamic");
        m->forward(*backend_, *c, prompt.data(), static_cast<int64_t>(prompt.size()), kvchat::Logits::None, lg);
        kvchat::convert(*c, "static:max_len=64");
        auto direct = m->make_cache(*backend_, "static:max_len=64");
        m->forward(*backend_, *direct, prompt.data(), static_cast<int64_t>(prompt.size()), kvchat::Logits::None, lg);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/c.kvc").toStdString();
        kvchat::save_snapshot(path, *c, m->fingerprint());
        auto loaded = kvchat::load_snapshot(path, m->layer_specs(), m->fingerprint(), *backend_);
        const int32_t next = 100;
        std::vector<float> a, b, d;
        m->forward(*backend_, *c, &next, 1, kvchat::Logits::Last, a);
        m->forward(*backend_, *direct, &next, 1, kvchat::Logits::Last, b);
        m->forward(*backend_, *loaded.cache, &next, 1, kvchat::Logits::Last, d);
        QVERIFY(a == b);
        QVERIFY(a == d);
    }
};

QTEST_GUILESS_MAIN(TestTinyArchs)
#include "test_tiny_archs.moc"
