// AVX2 (a kernel file): the selections of logit_select.h.
#include "engine/compute/logit_select.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvchat {

namespace {

// (value, index) with the better first: larger value, then smaller index.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

int64_t first_max_index(const float* x, int64_t n) {
    if (n <= 0) return 0;
    __m256 m[4], nan = _mm256_setzero_ps();
    for (auto& v : m) v = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; ++j) {
            const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
            m[j] = _mm256_max_ps(m[j], v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    float best = -std::numeric_limits<float>::infinity();
    for (; i < n; ++i) {
        if (std::isnan(x[i])) nan = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        best = std::max(best, x[i]);
    }
    // NaNs make max_element's answer depend on where they lie: take its own.
    if (_mm256_movemask_ps(nan)) return std::max_element(x, x + n) - x;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
    for (float v : lanes) best = std::max(best, v);
    // The first value equal to the largest (-0 and +0 compare equal: max_element keeps the first).
    const __m256 b = _mm256_set1_ps(best);
    i = 0;
    for (; i + 8 <= n; i += 8)
        if (const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ)))
            return i + __builtin_ctz(unsigned(hit));
    for (; i < n; ++i)
        if (x[i] == best) return i;
    return 0;  // not reached: best is one of the values
}

void top_k_scaled(const float* x, int64_t n, float scale, int64_t k, std::vector<std::pair<float, int32_t>>& out) {
    out.clear();
    k = std::min(k, n);
    if (k <= 0) return;
    // A heap of the k best so far, the worst on top; a value enters only above the worst's.
    auto worse_on_top = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) { return better(a, b); };
    out.reserve(size_t(k));
    int64_t i = 0;
    bool nan = false;
    for (; i < k; ++i) {
        const float v = x[i] * scale;
        nan |= std::isnan(v);
        out.emplace_back(v, int32_t(i));
    }
    std::make_heap(out.begin(), out.end(), worse_on_top);
    auto offer = [&](int64_t j, float v) {
        // Scanning forward, an equal value has a larger index: it does not enter.
        if (!(v > out.front().first)) return;
        std::pop_heap(out.begin(), out.end(), worse_on_top);
        out.back() = {v, int32_t(j)};
        std::push_heap(out.begin(), out.end(), worse_on_top);
    };
    const __m256 s = _mm256_set1_ps(scale);
    __m256 unord = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(out.front().first), _CMP_GT_OQ));
        if (!hit) continue;
        alignas(32) float vs[8];
        _mm256_store_ps(vs, v);
        for (; hit; hit &= hit - 1) {
            const int l = __builtin_ctz(unsigned(hit));
            offer(i + l, vs[l]);
        }
    }
    for (; i < n; ++i) {
        nan |= std::isnan(x[i] * scale);
        offer(i, x[i] * scale);
    }
    if (nan || _mm256_movemask_ps(unord)) {
        // NaNs: every value ranked by a plain sort, NaNs last.
        out.clear();
        out.reserve(size_t(n));
        for (int64_t j = 0; j < n; ++j) out.emplace_back(x[j] * scale, int32_t(j));
        std::stable_partition(out.begin(), out.end(), [](const auto& p) { return !std::isnan(p.first); });
        const auto numbers = std::find_if(out.begin(), out.end(), [](const auto& p) { return std::isnan(p.first); });
        std::sort(out.begin(), numbers, better);
        out.resize(size_t(k));
        return;
    }
    std::sort(out.begin(), out.end(), better);
}

}  // namespace kvchat
