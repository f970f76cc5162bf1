// SmolLM2-135M-Instruct (Llama architecture, Q4_1 weights, tied Q8_0 embeddings, 9 query heads
// over 3 kv heads) against llama.cpp on chat prompts (golden data from
// tests/reference/make_golden_smollm2.py): the logits at every prompt position and 32 greedy
// tokens, fed llama.cpp's token ids. kvchat computes GGUF models in llama.cpp's CPU order (Q4_1:
// engine/compute/q4_1_product.h), so the logits are held to the golden file's rounding and the
// greedy answers to issue 20's bound (identical for 32 tokens on at least 11 of 12 prompts).
// Skipped where the model is not installed (packaging/kvchat.sh model installs it).
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/error.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/golden_greedy.h"
#include "support/test_paths.h"

#include <QtTest>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

using nlohmann::json;

namespace {

// The kernels at `level` for a scope (each level must give llama.cpp's values).
class LevelScope {
public:
    explicit LevelScope(const char* level) { kvchat::force_simd_level(level); }
    ~LevelScope() { kvchat::force_simd_level(nullptr); }
};

}  // namespace

class TestSmollm2Golden : public QObject {
    Q_OBJECT
    std::unique_ptr<kvchat::Model> model_;
    std::unique_ptr<kvchat::Backend> backend_;
    json golden_;

private slots:
    void initTestCase() {
        std::ifstream f(kvchat::test::data_path("golden_smollm2.json"));
        QVERIFY(f.good());
        golden_ = json::parse(f);
        QCOMPARE(golden_["prompts"].size(), size_t(12));
        const std::string path = kvchat::installed_model_path(kvchat::kChatModelFile);
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0)
            QSKIP(qPrintable(QString("SmolLM2 is not installed at %1 (packaging/kvchat.sh model)").arg(path.c_str())));
        try {
            model_ = kvchat::Model::load(path);
        } catch (const kvchat::Error& e) {
            // Until the byte-level BPE vocabulary reader is in (the forward pass needs only ids).
            if (std::string(e.what()).find("tokenizer type 'gpt2'") != std::string::npos)
                QSKIP(qPrintable(QString("kvchat does not read SmolLM2's vocabulary yet: %1").arg(e.what())));
            throw;
        }
        backend_ = kvchat::make_cpu_backend(0);
        const kvchat::ModelConfig& c = model_->config();
        QCOMPARE(c.arch, kvchat::Architecture::Llama);
        QCOMPARE(c.n_head, 9);
        QCOMPARE(c.n_head_kv, 3);
        QCOMPARE(c.n_layer, 30);
    }

    void logitsMatch() { logits_match(); }
    void logitsMatchAvx2() {
        if (QString(kvchat::simd_level()) == "avx2") QSKIP("this machine's own level is AVX2: logitsMatch");
        const LevelScope scope("avx2");
        logits_match();
    }
    void greedyMatches() {
        int same = 0;
        QStringList differing;
        int64_t forced_steps = 0, forced_same = 0;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            const auto want = p["greedy"].get<std::vector<int32_t>>();
            if (const auto k = kvchat::test::greedy_divergence(*model_, *backend_, ids, want))
                differing << QString("%1 (from token %2)").arg(QString::fromStdString(p["name"])).arg(*k);
            else
                ++same;
            forced_steps += static_cast<int64_t>(want.size());
            forced_same += kvchat::test::teacher_forced_agreement(*model_, *backend_, ids, want);
        }
        qInfo("greedy answers identical for 32 tokens: %d of 12; teacher-forced steps identical: %lld of %lld; "
              "differing: %s",
              same, static_cast<long long>(forced_same), static_cast<long long>(forced_steps),
              qPrintable(differing.join(", ")));
        QVERIFY2(same >= 11, qPrintable(QString("%1 of 12 greedy answers identical (issue 20: >= 11); differing: %2")
                                            .arg(same)
                                            .arg(differing.join(", "))));
        QVERIFY2(forced_same == forced_steps, "a teacher-forced step chose another token than llama.cpp");
    }

private:
    // Every position of every prompt: the top-1 token and llama.cpp's top-10 logits. The logits
    // are llama.cpp's bit for bit, so they differ only by the golden file's rounding to 4
    // decimals (a summation order of our own would be ~1e-2 off).
    void logits_match() {
        qInfo("SIMD level: %s", kvchat::simd_level());
        const int64_t n_vocab = model_->config().n_vocab;
        int64_t positions = 0, top1_same = 0, compared = 0;
        double abs_diff = 0.0, worst = 0.0;
        std::vector<float> logits;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            auto cache = model_->make_default_cache(*backend_);
            model_->forward(*backend_, *cache, ids.data(), static_cast<int64_t>(ids.size()), kvchat::Logits::All, logits);
            QCOMPARE(static_cast<int64_t>(logits.size()), static_cast<int64_t>(ids.size()) * n_vocab);
            for (size_t t = 0; t < ids.size(); ++t) {
                const float* row = logits.data() + t * n_vocab;
                const json& top_ids = p["top_ids"][t];
                const json& top_vals = p["top_logits"][t];
                ++positions;
                top1_same += std::max_element(row, row + n_vocab) - row == top_ids[0].get<int64_t>();
                for (size_t k = 0; k < top_ids.size(); ++k) {
                    const double d = std::fabs(row[top_ids[k].get<int64_t>()] - top_vals[k].get<double>());
                    abs_diff += d;
                    worst = std::max(worst, d);
                    ++compared;
                }
            }
        }
        const double mad = abs_diff / compared;
        qInfo("kvchat vs llama.cpp: top-1 identical at %lld of %lld positions; |top-10 logit difference| mean %.6f, "
              "largest %.6f",
              static_cast<long long>(top1_same), static_cast<long long>(positions), mad, worst);
        QCOMPARE(top1_same, positions);
        QVERIFY2(mad < 1e-4, qPrintable(QString("mean abs logit difference %1").arg(mad)));
    }
};

// Generous per-function time limit for busy machines (CTest's limit for the suite still applies).
int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QTEST_FUNCTION_TIMEOUT")) qputenv("QTEST_FUNCTION_TIMEOUT", "900000");
    QCoreApplication app(argc, argv);
    TestSmollm2Golden test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}
#include "test_smollm2_golden.moc"
