// The vectorised token selections (engine/compute/logit_select.h) against the standard library
// they replace: std::max_element for greedy decoding, std::partial_sort for top-k sampling. The
// vectors are random, full of ties, short and long (every tail length), and hold -0/+0, infinities
// and NaNs where the answer depends on order.
#include "engine/compute/logit_select.h"
#include "engine/generate/sampler.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace kvchat;

namespace {

using Pair = std::pair<float, int32_t>;

std::vector<Pair> top_k_reference(const std::vector<float>& x, float scale, int64_t k) {
    std::vector<Pair> all;
    for (size_t i = 0; i < x.size(); ++i) all.emplace_back(x[i] * scale, int32_t(i));
    auto better = [](const Pair& a, const Pair& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    std::partial_sort(all.begin(), all.begin() + k, all.end(), better);
    all.resize(size_t(k));
    return all;
}

// Random values, some vectors drawn from a few levels so that the largest is tied many times.
std::vector<float> draw(std::mt19937& rng, int64_t n, bool ties) {
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::uniform_int_distribution<int> level(0, 5);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = ties ? float(level(rng)) : normal(rng);
    return x;
}

}  // namespace

class TestLogitSelect : public QObject {
    Q_OBJECT
private slots:
    void firstMaxIndexIsMaxElements() {
        std::mt19937 rng(7);
        for (int64_t n : {1, 2, 7, 8, 9, 31, 32, 33, 63, 100, 1000, 49152, 262144}) {
            for (bool ties : {false, true}) {
                const std::vector<float> x = draw(rng, n, ties);
                QCOMPARE(first_max_index(x.data(), n), int64_t(std::max_element(x.begin(), x.end()) - x.begin()));
            }
        }
        const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
        const std::vector<std::vector<float>> special = {
            {-0.0f, 0.0f, -1.0f},                    // equal zeros: the first
            {-1.0f, 0.0f, -0.0f, 0.0f},
            std::vector<float>(40, -inf),            // all -inf: index 0
            {1.0f, inf, 3.0f, inf},
            {nan, 1.0f, 2.0f},                       // NaN first: max_element keeps it
            {1.0f, nan, 2.0f, 0.5f},                 // NaN inside: skipped
            [] { std::vector<float> v(100, 1.0f); v[77] = std::nanf(""); v[90] = 2.0f; return v; }(),
        };
        for (const auto& x : special)
            QCOMPARE(first_max_index(x.data(), int64_t(x.size())), int64_t(std::max_element(x.begin(), x.end()) - x.begin()));
    }

    void topKIsPartialSorts() {
        std::mt19937 rng(11);
        std::vector<Pair> got;
        for (int64_t n : {1, 5, 8, 40, 41, 100, 4097, 49152}) {
            for (bool ties : {false, true}) {
                const std::vector<float> x = draw(rng, n, ties);
                for (int64_t k : {int64_t(1), int64_t(3), int64_t(40), n}) {
                    if (k > n) continue;
                    for (float scale : {1.0f, 1.0f / 0.7f, 0.3f}) {
                        top_k_scaled(x.data(), n, scale, k, got);
                        const QByteArray where = QString("n %1 k %2 scale %3 ties %4").arg(n).arg(k).arg(scale).arg(ties).toLatin1();
                        QVERIFY2(got == top_k_reference(x, scale, k), where.constData());
                    }
                }
            }
        }
        // NaNs are never chosen before numbers.
        std::vector<float> x = {3.0f, std::nanf(""), 5.0f, std::nanf(""), 1.0f, 4.0f, 2.0f, 0.0f, 6.0f, -1.0f};
        top_k_scaled(x.data(), int64_t(x.size()), 1.0f, 3, got);
        QCOMPARE(got, (std::vector<Pair>{{6.0f, 8}, {5.0f, 2}, {4.0f, 5}}));
    }

    // The sampler's draws are what they were with the sort: seeded draws equal a plain
    // implementation of the same steps over std::partial_sort's candidates (greedy: max_element).
    void samplerKeepsItsChoices() {
        std::mt19937 rng(3);
        const std::vector<float> logits = draw(rng, 262144, false);
        SamplerConfig greedy;
        greedy.greedy = true;
        Sampler g(greedy);
        QCOMPARE(int64_t(g.sample(logits.data(), int64_t(logits.size()), {})),
                 int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        // With top-k 40 the candidates are the 40 best: every draw is one of them.
        SamplerConfig c;
        c.temperature = 0.7f;
        c.top_k = 40;
        c.top_p = 1.0f;
        c.min_p = 0.0f;
        c.seed = 5;
        Sampler s(c);
        const std::vector<Pair> best = top_k_reference(logits, 1.0f / 0.7f, 40);
        for (int i = 0; i < 200; ++i) {
            const int32_t t = s.sample(logits.data(), int64_t(logits.size()), {});
            QVERIFY(std::any_of(best.begin(), best.end(), [&](const Pair& p) { return p.second == t; }));
        }
    }
};

QTEST_GUILESS_MAIN(TestLogitSelect)
#include "test_logit_select.moc"
