// The default model against llama.cpp (golden data from tests/reference/make_golden_gemma3.py):
// tokenization, logits at every position, and greedy continuations. kvchat computes a GGUF model
// in llama.cpp's CPU rounding order (engine/compute/matmul_kernels.h, engine/compute/attention.h),
// so it is held to issue 3's bounds and to the logits themselves, up to the golden file's
// rounding to 4 decimals. How far llama.cpp's own two attention paths (default and flash) are
// from each other is printed for scale: that is what a kernel of its own order would get.
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/golden_greedy.h"
#include "support/test_paths.h"

#include <QtTest>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

struct Agreement {
    double top1 = 0.0;  // share of positions whose argmax is the same
    double mad = 0.0;   // mean |logit difference| over the reference's top-10 ids
    int64_t positions = 0;
};

// llama.cpp against itself: its default attention path (golden_gemma3.json) and its flash-attention
// path (golden_gemma3_flash.json) round differently in f16, and Gemma 3 270M amplifies rounding
// enough that the two disagree measurably. That disagreement is the noise floor kvchat is held to.
Agreement llama_cpp_self_agreement(const json& a, const json& b) {
    Agreement r;
    int64_t same = 0, compared = 0;
    double diff = 0.0;
    for (size_t p = 0; p < a["prompts"].size(); ++p) {
        const json& pa = a["prompts"][p];
        const json& pb = b["prompts"][p];
        for (size_t t = 0; t < pa["top_ids"].size(); ++t) {
            ++r.positions;
            same += pa["top_ids"][t][0] == pb["top_ids"][t][0];
            for (size_t i = 0; i < pa["top_ids"][t].size(); ++i)
                for (size_t j = 0; j < pb["top_ids"][t].size(); ++j)
                    if (pa["top_ids"][t][i] == pb["top_ids"][t][j]) {
                        diff += std::fabs(pa["top_logits"][t][i].get<double>() - pb["top_logits"][t][j].get<double>());
                        ++compared;
                    }
        }
    }
    r.top1 = static_cast<double>(same) / r.positions;
    r.mad = diff / compared;
    return r;
}

int identical_greedy(const json& a, const json& b) {
    int n = 0;
    for (size_t p = 0; p < a["prompts"].size(); ++p) n += a["prompts"][p]["greedy"] == b["prompts"][p]["greedy"];
    return n;
}

// Makes the kernels run at `level` for a scope: the checks below run at the machine's own level
// and again at AVX2, the path of the CPUs without AVX-512, so both are held to llama.cpp here (each
// level must give llama.cpp's values: engine/compute/matmul_kernels.h). Separate test functions,
// so each stays within QtTest's time limit per function on a busy machine.
class LevelScope {
public:
    explicit LevelScope(const QString& level) { kvchat::force_simd_level(level.toLatin1().constData()); }
    ~LevelScope() { kvchat::force_simd_level(nullptr); }
};

}  // namespace

class TestGemma3Golden : public QObject {
    Q_OBJECT
    std::unique_ptr<kvchat::Model> model_;
    std::unique_ptr<kvchat::Backend> backend_;
    json golden_, flash_;
    Agreement floor_;

private slots:
    void initTestCase() {
        // The kernels take the best SIMD level this CPU has; the figures below hold for it.
        qInfo("kernels on this machine's SIMD level: %s", kvchat::simd_level());
        std::ifstream f(kvchat::test::data_path("golden_gemma3.json"));
        std::ifstream g(kvchat::test::data_path("golden_gemma3_flash.json"));
        QVERIFY(f.good() && g.good());
        golden_ = json::parse(f);
        flash_ = json::parse(g);
        QVERIFY(golden_["prompts"].size() >= 12);
        QCOMPARE(flash_["prompts"].size(), golden_["prompts"].size());
        floor_ = llama_cpp_self_agreement(golden_, flash_);
        qInfo("llama.cpp default vs flash attention: top-1 %.4f, mean |top-10 logit difference| %.4f, greedy "
              "identical %d of %d",
              floor_.top1, floor_.mad, identical_greedy(golden_, flash_), int(golden_["prompts"].size()));
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
    // position of every prompt (and per prompt, printed). Issue 3 asks top-1 >= 99%; the logits
    // are llama.cpp's bit for bit, so their mean difference is only the golden file's rounding to
    // 4 decimals (about 0.000025; asserted below 0.0001). A summation order of our own would give
    // about 0.25, as llama.cpp's flash path does against its default one.
    //
    // The prompts go through in chunks of 128 tokens (the logits of 512 would take 512 MB), where
    // llama.cpp took ubatches of 512: the same arithmetic here, because every product rounds alike
    // for any chunk of 8 tokens or more except Q4_K's, which takes tokens in groups of four, and
    // 1227 - 1152 = 75 leaves the same last three (1224-1226) outside a group as 1227 - 1024 = 203.
    void logitsMatch() { logits_match(); }
    void logitsMatchAvx2() {
        if (QString(kvchat::simd_level()) == "avx2") QSKIP("this machine's own level is AVX2: logitsMatch");
        const LevelScope scope("avx2");
        logits_match();
    }
    void greedyMatches() { greedy_matches(true); }
    // At AVX2 only the teacher-forced steps (the stricter check: every step must pick llama.cpp's
    // token), which halves the time the free-running continuations would add.
    void greedyMatchesAvx2() {
        if (QString(kvchat::simd_level()) == "avx2") QSKIP("this machine's own level is AVX2: greedyMatches");
        const LevelScope scope("avx2");
        greedy_matches(false);
    }

private:
    void logits_match() {
        qInfo("SIMD level: %s", kvchat::simd_level());
        const int64_t n_vocab = model_->config().n_vocab;
        int64_t positions = 0, top1_same = 0, compared = 0;
        double abs_diff = 0.0;
        std::vector<float> logits;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            auto cache = model_->make_default_cache(*backend_);
            const int64_t pos0 = positions, same0 = top1_same, cmp0 = compared;
            const double diff0 = abs_diff;
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
            qInfo("  %s: top-1 identical at %lld of %lld positions, mean |top-10 logit difference| %.4f",
                  p["name"].get<std::string>().c_str(), static_cast<long long>(top1_same - same0),
                  static_cast<long long>(positions - pos0), (abs_diff - diff0) / (compared - cmp0));
        }
        const double agreement = static_cast<double>(top1_same) / positions;
        const double mad = abs_diff / compared;
        qInfo("kvchat vs llama.cpp: top-1 agreement %.4f over %lld positions; mean |top-10 logit difference| %.6f",
              agreement, static_cast<long long>(positions), mad);
        QVERIFY2(agreement >= 0.99, qPrintable(QString("top-1 agreement %1 (issue 3: >= 0.99)").arg(agreement)));
        QVERIFY2(mad < 1e-4, qPrintable(QString("mean abs logit difference %1 (llama.cpp's own two paths: %2)")
                                            .arg(mad)
                                            .arg(floor_.mad)));
    }

    // Free-running greedy continuations diverge wherever two candidates are within rounding of
    // each other (llama.cpp's own two paths share only 4 of 12). Rounding as llama.cpp does, for
    // the prefill batch and for each decode step, kvchat continues all 12 as it does; issue 3 asks
    // 11 of 12, and teacher-forced every step must pick llama.cpp's token.
    void greedy_matches(bool free_running) {
        qInfo("SIMD level: %s", kvchat::simd_level());
        int same = 0;
        QStringList differing;
        int64_t forced_steps = 0, forced_same = 0;
        for (const json& p : golden_["prompts"]) {
            const auto ids = p["tokens"].get<std::vector<int32_t>>();
            const auto want = p["greedy"].get<std::vector<int32_t>>();
            if (free_running) {
                if (const auto k = kvchat::test::greedy_divergence(*model_, *backend_, ids, want))
                    differing << QString("%1 (from token %2)").arg(QString::fromStdString(p["name"])).arg(*k);
                else
                    ++same;
            }
            forced_steps += static_cast<int64_t>(want.size());
            forced_same += kvchat::test::teacher_forced_agreement(*model_, *backend_, ids, want);
        }
        const int floor_same = identical_greedy(golden_, flash_);
        const double forced = static_cast<double>(forced_same) / forced_steps;
        qInfo("teacher-forced greedy steps identical: %lld of %lld (%.4f)", static_cast<long long>(forced_same),
              static_cast<long long>(forced_steps), forced);
        if (free_running) {
            qInfo("greedy continuations identical for %d of %d prompts (llama.cpp's own paths: %d); differing: %s",
                  same, int(golden_["prompts"].size()), floor_same, qPrintable(differing.join(", ")));
            QVERIFY2(same >= 11, qPrintable(QString("%1 of 12 greedy continuations identical (issue 3: >= 11); differing: %2")
                                                .arg(same)
                                                .arg(differing.join(", "))));
        }
        QVERIFY2(forced_same == forced_steps, qPrintable(QString("teacher-forced agreement %1").arg(forced)));
    }
};

// QtTest stops a test function after 5 minutes; on a machine running several builds at once the
// twelve prompts can take longer than that, so the limit is 15 minutes unless the caller set one
// (CTest's limit for the whole suite still applies).
int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QTEST_FUNCTION_TIMEOUT")) qputenv("QTEST_FUNCTION_TIMEOUT", "900000");
    QCoreApplication app(argc, argv);
    TestGemma3Golden test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}
#include "test_gemma3_golden.moc"
