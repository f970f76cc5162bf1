// The default model against llama.cpp (golden data from tests/reference/make_golden_gemma3.py):
// tokenization, logits at every position, and greedy continuations.
#include "engine/compute/backend.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/test_paths.h"

#include <QtTest>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

using nlohmann::json;

class TestGemma3Golden : public QObject {
    Q_OBJECT
    std::unique_ptr<kvchat::Model> model_;
    std::unique_ptr<kvchat::Backend> backend_;
    json golden_;

private slots:
    void initTestCase() {
        std::ifstream f(kvchat::test::data_path("golden_gemma3.json"));
        QVERIFY(f.good());
        golden_ = json::parse(f);
        QVERIFY(golden_["prompts"].size() >= 12);
        model_ = kvchat::Model::load(kvchat::resolve_model_path(""));
        backend_ = kvchat::make_cpu_backend(0);
    }

    void tokenizationMatches() {
        for (const json& p : golden_["prompts"]) {
            const auto ids = model_->tokenizer().encode(p["text"].get<std::string>(), true);
            const auto want = p["tokens"].get<std::vector<int32_t>>();
            QVERIFY2(ids == want, qPrintable("prompt '" + QString::fromStdString(p["name"]) + "' tokenizes differently"));
        }
    }

    // Top-1 agreement and the mean absolute difference of llama.cpp's top-10 logits, over every
    // position of every prompt.
    void logitsMatch() {
        const int64_t n_vocab = model_->config().n_vocab;
        int64_t positions = 0, top1_same = 0, compared = 0;
        double abs_diff = 0.0;
        std::vector<float> logits;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            auto cache = model_->make_default_cache(*backend_);
            // 128 positions at a time keeps the logits of a 1,500-token prompt out of memory.
            for (size_t off = 0; off < ids.size(); off += 128) {
                const int64_t n = std::min<int64_t>(128, static_cast<int64_t>(ids.size() - off));
                model_->forward(*backend_, *cache, ids.data() + off, n, kvchat::Logits::All, logits);
                QCOMPARE(static_cast<int64_t>(logits.size()), n * n_vocab);
                for (int64_t t = 0; t < n; ++t) {
                    const float* row = logits.data() + t * n_vocab;
                    const json& top_ids = p["top_ids"][off + t];
                    const json& top_vals = p["top_logits"][off + t];
                    const int64_t ours = std::max_element(row, row + n_vocab) - row;
                    ++positions;
                    top1_same += ours == top_ids[0].get<int64_t>();
                    for (size_t k = 0; k < top_ids.size(); ++k) {
                        abs_diff += std::fabs(row[top_ids[k].get<int64_t>()] - top_vals[k].get<double>());
                        ++compared;
                    }
                }
            }
        }
        const double agreement = static_cast<double>(top1_same) / positions;
        const double mad = abs_diff / compared;
        qInfo("top-1 agreement %.4f over %lld positions; mean |top-10 logit difference| %.4f", agreement,
              static_cast<long long>(positions), mad);
        QVERIFY2(agreement >= 0.99, qPrintable(QString("top-1 agreement %1").arg(agreement)));
        QVERIFY2(mad < 0.05, qPrintable(QString("mean abs logit difference %1").arg(mad)));
    }

    void greedyMatches() {
        int same = 0;
        QStringList differing;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            const auto want = p["greedy"].get<std::vector<int32_t>>();
            auto cache = model_->make_default_cache(*backend_);
            kvchat::Generator gen(*model_, *backend_);
            kvchat::GenerationConfig g;
            g.max_new_tokens = static_cast<int>(want.size());
            g.sampling.greedy = true;
            g.stop_at_eos = false;  // the golden tokens are plain argmax steps
            const auto r = gen.generate(*cache, ids, g);
            if (r.tokens == want)
                ++same;
            else
                differing << QString::fromStdString(p["name"]);
        }
        qInfo("greedy continuations identical for %d of %d prompts; differing: %s", same,
              int(golden_["prompts"].size()), qPrintable(differing.join(", ")));
        QVERIFY(same >= static_cast<int>(golden_["prompts"].size()) - 1);
    }
};

QTEST_GUILESS_MAIN(TestGemma3Golden)
#include "test_gemma3_golden.moc"
