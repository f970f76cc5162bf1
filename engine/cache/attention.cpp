#include "engine/cache/attention.h"

#include "engine/compute/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kvchat {

namespace {

constexpr int kBlock = 64;     // slots scored before the running softmax is updated
constexpr int kMaxGroup = 16;  // query heads per kv head handled together

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

inline float dot(const float* a, const float* b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// acc = acc * c + p * v
inline void scale_add(float* acc, float c, float p, const float* v, int n) {
    const __m256 vc = _mm256_set1_ps(c), vp = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + i), _mm256_mul_ps(vc, _mm256_loadu_ps(acc + i))));
    for (; i < n; ++i) acc[i] = acc[i] * c + p * v[i];
}

}  // namespace

void attend_slots(const float* q, const int32_t* qpos, int64_t n_q, const SlotView& slots,
                  const AttentionShape& shape, int window, float* out, ThreadPool& pool) {
    const int hd = shape.head_dim;
    const int n_kv = shape.n_head_kv;
    const int group = shape.n_head / n_kv;
    const int64_t q_stride = static_cast<int64_t>(shape.n_head) * hd;
    const float neg_inf = -std::numeric_limits<float>::infinity();

    pool.parallel_for(n_q * n_kv, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(group) * hd);
        float scores[kMaxGroup][kBlock];
        int visible[kBlock];
        for (int64_t idx = begin; idx < end; ++idx) {
            const int64_t t = idx / n_kv;
            const int g = static_cast<int>(idx % n_kv);
            const int32_t p = qpos[t];
            const float* qg = q + t * q_stride + static_cast<int64_t>(g) * group * hd;
            float m[kMaxGroup], l[kMaxGroup];
            std::fill(m, m + group, neg_inf);
            std::fill(l, l + group, 0.0f);
            std::fill(acc.begin(), acc.end(), 0.0f);

            for (int64_t j0 = 0; j0 < slots.n; j0 += kBlock) {
                const int nb = static_cast<int>(std::min<int64_t>(kBlock, slots.n - j0));
                int nv = 0;
                for (int j = 0; j < nb; ++j) {
                    const int32_t sp = slots.pos[j0 + j];
                    if (sp <= p && (window == 0 || p - sp < window)) visible[nv++] = j;
                }
                if (nv == 0) continue;
                for (int h = 0; h < group; ++h) {
                    float bmax = neg_inf;
                    for (int a = 0; a < nv; ++a) {
                        const float* kj = slots.k + (j0 + visible[a]) * slots.stride + static_cast<int64_t>(g) * hd;
                        float s = dot(qg + static_cast<int64_t>(h) * hd, kj, hd) * shape.scale;
                        if (shape.softcap > 0.0f) s = shape.softcap * std::tanh(s / shape.softcap);
                        scores[h][a] = s;
                        bmax = std::max(bmax, s);
                    }
                    const float new_m = std::max(m[h], bmax);
                    const float c = m[h] == neg_inf ? 0.0f : std::exp(m[h] - new_m);
                    float* ah = acc.data() + static_cast<size_t>(h) * hd;
                    float lsum = l[h] * c;
                    bool first = true;
                    for (int a = 0; a < nv; ++a) {
                        const float pr = std::exp(scores[h][a] - new_m);
                        lsum += pr;
                        const float* vj = slots.v + (j0 + visible[a]) * slots.stride + static_cast<int64_t>(g) * hd;
                        scale_add(ah, first ? c : 1.0f, pr, vj, hd);
                        first = false;
                    }
                    l[h] = lsum;
                    m[h] = new_m;
                }
            }
            float* og = out + t * q_stride + static_cast<int64_t>(g) * group * hd;
            for (int h = 0; h < group; ++h) {
                const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
                for (int i = 0; i < hd; ++i) og[h * hd + i] = acc[static_cast<size_t>(h) * hd + i] * inv;
            }
        }
    });
}

}  // namespace kvchat
