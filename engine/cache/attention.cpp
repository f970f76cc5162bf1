#include "engine/cache/attention.h"

#include "engine/compute/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

namespace kvchat {

namespace {

constexpr int kBlock = 64;     // f32 slots scored before the running softmax is updated
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

inline void scale(float* acc, float c, int n) {
    const __m256 vc = _mm256_set1_ps(c);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(vc, _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i) acc[i] *= c;
}

// One unit of work along the slots: 64 f32 slots of one view, or one quantized block.
struct Unit {
    int view;        // index into slots, or -1 for a block
    int64_t begin;   // first slot, or block index
    int count;
};

// Running softmax state of `group` query heads: max, sum and the weighted value sum.
struct Partial {
    float m[kMaxGroup], l[kMaxGroup];
    float* acc;  // group x head_dim
};

struct Kernel {
    const AttentionInput& in;
    const AttentionShape& s;
    int hd, n_kv, group;
    int64_t q_stride;
    float neg_inf = -std::numeric_limits<float>::infinity();

    float score_of(float raw) const {
        float x = raw * s.scale;
        if (s.softcap > 0.0f) x = s.softcap * std::tanh(x / s.softcap);
        return x;
    }

    // Folds scores[h][0..nv) into the running state; value(a, h, c, p) adds p * value of visible
    // slot a to acc row h after it was rescaled by c.
    template <class AddValues>
    void update(Partial& st, float (*scores)[kBlock], int nv, AddValues add_values) const {
        float cs[kMaxGroup], mx[kMaxGroup];
        for (int h = 0; h < group; ++h) {
            float bmax = neg_inf;
            for (int a = 0; a < nv; ++a) bmax = std::max(bmax, scores[h][a]);
            mx[h] = std::max(st.m[h], bmax);
            cs[h] = st.m[h] == neg_inf ? 0.0f : std::exp(st.m[h] - mx[h]);
            float lsum = st.l[h] * cs[h];
            for (int a = 0; a < nv; ++a) lsum += (scores[h][a] = std::exp(scores[h][a] - mx[h]));
            st.l[h] = lsum;
            st.m[h] = mx[h];
        }
        add_values(cs);
    }

    void run_slots(Partial& st, const float* qg, const float* qsg, int32_t p, const SlotView& sv, int64_t j0, int nb,
                   int g) const {
        float scores[kMaxGroup][kBlock];
        int visible[kBlock];
        int nv = 0;
        for (int j = 0; j < nb; ++j) {
            const int32_t sp = sv.pos[j0 + j];
            if (sp <= p && (sp < in.sink_end || in.window == 0 || p - sp < in.window)) visible[nv++] = j;
        }
        if (nv == 0) return;
        for (int h = 0; h < group; ++h)
            for (int a = 0; a < nv; ++a) {
                const int64_t j = j0 + visible[a];
                const float* qh = (sv.pos[j] < in.sink_end && qsg ? qsg : qg) + static_cast<int64_t>(h) * hd;
                scores[h][a] = score_of(dot(qh, sv.k + j * sv.stride + static_cast<int64_t>(g) * hd, hd));
            }
        update(st, scores, nv, [&](const float* cs) {
            for (int h = 0; h < group; ++h) {
                float* ah = st.acc + static_cast<size_t>(h) * hd;
                for (int a = 0; a < nv; ++a) {
                    const float* vj = sv.v + (j0 + visible[a]) * sv.stride + static_cast<int64_t>(g) * hd;
                    scale_add(ah, a == 0 ? cs[h] : 1.0f, scores[h][a], vj, hd);
                }
            }
        });
    }

    // tmp: head_dim floats, group x head_dim scaled queries, group x head_dim value-zero sums.
    void run_block(Partial& st, const float* qg, int32_t p, const QuantBlockView& b, int g, float* tmp) const {
        switch (in.kivi->nbits) {
            case 8: return run_block_group<8>(st, qg, p, b, g, tmp);
            case 4: return run_block_group<4>(st, qg, p, b, g, tmp);
            default: return run_block_group<2>(st, qg, p, b, g, tmp);
        }
    }

    // Common head groupings get their own copy, so the per-head accumulators stay in registers.
    template <int NB>
    void run_block_group(Partial& st, const float* qg, int32_t p, const QuantBlockView& b, int g, float* tmp) const {
        switch (group) {
            case 1: return run_block_bits<NB, 1>(st, qg, p, b, g, tmp);
            case 2: return run_block_bits<NB, 2>(st, qg, p, b, g, tmp);
            case 4: return run_block_bits<NB, 4>(st, qg, p, b, g, tmp);
            case 8: return run_block_bits<NB, 8>(st, qg, p, b, g, tmp);
            default: return run_block_bits<NB, 0>(st, qg, p, b, g, tmp);
        }
    }

    template <int NB>
    static inline __m256 unpack8(const uint8_t* row, int c) {
        if constexpr (NB == 8) {
            return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c))));
        } else if constexpr (NB == 4) {
            uint32_t w;
            std::memcpy(&w, row + c / 2, 4);
            const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
            return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh), _mm256_set1_epi32(15)));
        } else {
            uint16_t w;
            std::memcpy(&w, row + c / 4, 2);
            const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
            return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), _mm256_set1_epi32(3)));
        }
    }

    // Keys and values are read straight from their codes: q·k = (q ⊙ scale)·codes + q·zero, and
    // each value adds p·scale·codes to the accumulator, with p·zero summed per channel group and
    // added once per block.
    template <int NB, int GR>
    void run_block_bits(Partial& st, const float* qg, int32_t p, const QuantBlockView& b, int g, float* tmp) const {
        const int group = GR ? GR : this->group;
        const KiviFormat& f = *in.kivi;
        int32_t lo = b.first_pos, hi = std::min<int32_t>(b.first_pos + b.count - 1, p);
        if (in.window > 0) lo = std::max<int32_t>(lo, p - in.window + 1);
        if (lo > hi) return;
        const int c0 = g * hd;
        float* qk = tmp + hd;
        float bias[kMaxGroup];
        const float* ks = f.key_scale(b.data) + c0;
        const float* kz = f.key_zero(b.data) + c0;
        for (int h = 0; h < group; ++h) {
            const float* qh = qg + static_cast<int64_t>(h) * hd;
            float* o = qk + h * hd;
            for (int c = 0; c < hd; ++c) o[c] = qh[c] * ks[c];
            bias[h] = dot(qh, kz, hd);
        }
        const int vg = std::min(f.value_group, hd);
        const int n_vg = hd / vg;
        float scores[kMaxGroup][kBlock];
        float* zsum = qk + group * hd;  // group x n_vg
        const size_t rb = f.row_code_bytes();
        const uint8_t* krows = b.data + f.k_codes;
        const uint8_t* vrows = b.data + f.v_codes;
        for (int32_t s0 = lo; s0 <= hi; s0 += kBlock) {
            const int nv = std::min<int32_t>(kBlock, hi - s0 + 1);
            const int first = static_cast<int>(s0 - b.first_pos);
            for (int a = 0; a < nv; ++a) {
                const uint8_t* row = krows + (first + a) * rb;
                __m256 acc[kMaxGroup];
                for (int h = 0; h < group; ++h) acc[h] = _mm256_setzero_ps();
                for (int c = 0; c < hd; c += 8) {
                    const __m256 x = unpack8<NB>(row, c0 + c);
                    for (int h = 0; h < group; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qk + h * hd + c), x, acc[h]);
                }
                for (int h = 0; h < group; ++h) scores[h][a] = score_of(hsum(acc[h]) + bias[h]);
            }
            update(st, scores, nv, [&](const float* cs) {
                for (int h = 0; h < group; ++h) scale(st.acc + static_cast<size_t>(h) * hd, cs[h], hd);
                std::fill(zsum, zsum + group * n_vg, 0.0f);
                for (int a = 0; a < nv; ++a) {
                    const int j = first + a;
                    const uint8_t* row = vrows + j * rb;
                    const float* vs = f.value_scale(b.data, j) + c0 / f.value_group;
                    const float* vz = f.value_zero(b.data, j) + c0 / f.value_group;
                    for (int k = 0; k < n_vg; ++k) {
                        __m256 w[kMaxGroup];
                        for (int h = 0; h < group; ++h) {
                            w[h] = _mm256_set1_ps(scores[h][a] * vs[k]);
                            zsum[h * n_vg + k] += scores[h][a] * vz[k];
                        }
                        for (int c = k * vg; c < (k + 1) * vg; c += 8) {
                            const __m256 x = unpack8<NB>(row, c0 + c);
                            for (int h = 0; h < group; ++h) {
                                float* ah = st.acc + static_cast<size_t>(h) * hd + c;
                                _mm256_storeu_ps(ah, _mm256_fmadd_ps(w[h], x, _mm256_loadu_ps(ah)));
                            }
                        }
                    }
                }
                for (int h = 0; h < group; ++h)
                    for (int k = 0; k < n_vg; ++k) {
                        float* ah = st.acc + static_cast<size_t>(h) * hd + k * vg;
                        const float z = zsum[h * n_vg + k];
                        for (int c = 0; c < vg; ++c) ah[c] += z;
                    }
            });
        }
    }
};

// ---- llama.cpp-compatible path (in.f16_probs) ---------------------------------------------
// Two passes per (query, head): scores and their max, then exp, a double sum, and probabilities
// normalized and rounded to fp16 before P·V, the rounding points of ggml's soft_max + f16 mul_mat.

// Four dot products at once, each summed exactly as dot() sums it (n a multiple of 16).
inline void dot4(const float* const* q, const float* const* k, int n, float* out) {
    __m256 s[4][2];
    for (auto& r : s) r[0] = r[1] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16)
        for (int r = 0; r < 4; ++r) {
            s[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), _mm256_loadu_ps(k[r] + i), s[r][0]);
            s[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i + 8), _mm256_loadu_ps(k[r] + i + 8), s[r][1]);
        }
    for (int r = 0; r < 4; ++r) out[r] = hsum(_mm256_add_ps(s[r][0], s[r][1]));
}

void attend_f16_probs(const AttentionInput& in, const AttentionShape& s, float* out, ThreadPool& pool) {
    const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * hd;
    pool.parallel_for(in.n_q * s.n_head, [&](int64_t begin, int64_t end) {
        std::vector<float> sc;
        std::vector<const float*> qs, ks, vs;
        for (int64_t idx = begin; idx < end; ++idx) {
            const int64_t t = idx / s.n_head;
            const int h = static_cast<int>(idx % s.n_head), g = h / group;
            const int32_t p = in.qpos[t];
            const float* qh = in.q + t * q_stride + static_cast<int64_t>(h) * hd;
            const float* qsh = in.q_sink ? in.q_sink + t * q_stride + static_cast<int64_t>(h) * hd : nullptr;
            qs.clear();
            ks.clear();
            vs.clear();
            for (const SlotView& sv : in.slots)
                for (int64_t j = 0; j < sv.n; ++j) {
                    const int32_t sp = sv.pos[j];
                    if (!(sp <= p && (sp < in.sink_end || in.window == 0 || p - sp < in.window))) continue;
                    qs.push_back(sp < in.sink_end && qsh ? qsh : qh);
                    ks.push_back(sv.k + j * sv.stride + static_cast<int64_t>(g) * hd);
                    vs.push_back(sv.v + j * sv.stride + static_cast<int64_t>(g) * hd);
                }
            const size_t nv = ks.size();
            sc.resize(nv);
            size_t a = 0;
            if (hd % 16 == 0)
                for (; a + 4 <= nv; a += 4) dot4(&qs[a], &ks[a], hd, &sc[a]);
            for (; a < nv; ++a) sc[a] = dot(qs[a], ks[a], hd);
            float mx = -std::numeric_limits<float>::infinity();
            for (float& x : sc) {
                if (s.softcap > 0.0f) x = s.softcap * std::tanh(x / s.softcap);
                mx = std::max(mx, x);
            }
            double sum = 0.0;
            for (float& x : sc) sum += (x = std::exp(x - mx));
            const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
            for (float& x : sc) x = _cvtsh_ss(_cvtss_sh(x * inv, _MM_FROUND_TO_NEAREST_INT));
            // P·V 32 dimensions at a time, the accumulators in registers.
            float* o = out + t * q_stride + static_cast<int64_t>(h) * hd;
            int c = 0;
            for (; c + 32 <= hd; c += 32) {
                __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
                for (size_t j = 0; j < nv; ++j) {
                    const __m256 pr = _mm256_set1_ps(sc[j]);
                    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(pr, _mm256_loadu_ps(vs[j] + c + 8 * r), acc[r]);
                }
                for (int r = 0; r < 4; ++r) _mm256_storeu_ps(o + c + 8 * r, acc[r]);
            }
            for (; c < hd; ++c) {
                float acc = 0.0f;
                for (size_t j = 0; j < nv; ++j) acc = std::fma(sc[j], vs[j][c], acc);
                o[c] = acc;
            }
        }
    });
}

}  // namespace

void attend(const AttentionInput& in, const AttentionShape& shape, float* out, ThreadPool& pool) {
    if (in.f16_probs && in.blocks.empty()) return attend_f16_probs(in, shape, out, pool);
    Kernel kr{in, shape, shape.head_dim, shape.n_head_kv, shape.n_head / shape.n_head_kv,
              static_cast<int64_t>(shape.n_head) * shape.head_dim};
    const int hd = kr.hd, group = kr.group, n_kv = kr.n_kv;
    std::vector<Unit> units;
    for (size_t v = 0; v < in.slots.size(); ++v)
        for (int64_t j = 0; j < in.slots[v].n; j += kBlock)
            units.push_back({static_cast<int>(v), j, static_cast<int>(std::min<int64_t>(kBlock, in.slots[v].n - j))});
    for (size_t b = 0; b < in.blocks.size(); ++b) units.push_back({-1, static_cast<int64_t>(b), in.blocks[b].count});
    const int64_t n_units = static_cast<int64_t>(units.size());

    // Few (query, kv head) pairs (decode): split the slots across threads too, and merge.
    const int64_t pairs = in.n_q * n_kv;
    int64_t parts = 1;
    if (pairs < 2 * pool.size() && n_units > 1)
        parts = std::min<int64_t>(n_units, (2 * pool.size() + pairs - 1) / pairs);
    const size_t state_floats = static_cast<size_t>(group) * (hd + 2);
    std::vector<float> partials(parts > 1 ? static_cast<size_t>(pairs * parts) * state_floats : 0);

    pool.parallel_for(pairs * parts, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(group) * hd);
        std::vector<float> tmp(static_cast<size_t>(hd) * (2 * group + 1));
        for (int64_t idx = begin; idx < end; ++idx) {
            const int64_t pair = idx / parts, part = idx % parts;
            const int64_t t = pair / n_kv;
            const int g = static_cast<int>(pair % n_kv);
            const int32_t p = in.qpos[t];
            const float* qg = in.q + t * kr.q_stride + static_cast<int64_t>(g) * group * hd;
            const float* qsg = in.q_sink ? in.q_sink + t * kr.q_stride + static_cast<int64_t>(g) * group * hd : nullptr;
            Partial st;
            st.acc = acc.data();
            std::fill(st.m, st.m + group, kr.neg_inf);
            std::fill(st.l, st.l + group, 0.0f);
            std::fill(acc.begin(), acc.end(), 0.0f);
            const int64_t u0 = n_units * part / parts, u1 = n_units * (part + 1) / parts;
            for (int64_t u = u0; u < u1; ++u) {
                const Unit& un = units[static_cast<size_t>(u)];
                if (un.view >= 0)
                    kr.run_slots(st, qg, qsg, p, in.slots[static_cast<size_t>(un.view)], un.begin, un.count, g);
                else
                    kr.run_block(st, qg, p, in.blocks[static_cast<size_t>(un.begin)], g, tmp.data());
            }
            if (parts == 1) {
                float* og = out + t * kr.q_stride + static_cast<int64_t>(g) * group * hd;
                for (int h = 0; h < group; ++h) {
                    const float inv = st.l[h] > 0.0f ? 1.0f / st.l[h] : 0.0f;
                    for (int i = 0; i < hd; ++i) og[h * hd + i] = acc[static_cast<size_t>(h) * hd + i] * inv;
                }
            } else {
                float* dst = partials.data() + static_cast<size_t>(idx) * state_floats;
                for (int h = 0; h < group; ++h) {
                    dst[h * (hd + 2)] = st.m[h];
                    dst[h * (hd + 2) + 1] = st.l[h];
                    std::copy(acc.begin() + h * hd, acc.begin() + (h + 1) * hd, dst + h * (hd + 2) + 2);
                }
            }
        }
    });
    if (parts == 1) return;
    for (int64_t pair = 0; pair < pairs; ++pair) {
        const int64_t t = pair / n_kv;
        const int g = static_cast<int>(pair % n_kv);
        float* og = out + t * kr.q_stride + static_cast<int64_t>(g) * group * hd;
        for (int h = 0; h < group; ++h) {
            float m = kr.neg_inf;
            for (int64_t part = 0; part < parts; ++part)
                m = std::max(m, partials[static_cast<size_t>(pair * parts + part) * state_floats + h * (hd + 2)]);
            float l = 0.0f;
            float* o = og + h * hd;
            std::fill(o, o + hd, 0.0f);
            for (int64_t part = 0; part < parts; ++part) {
                const float* src = partials.data() + static_cast<size_t>(pair * parts + part) * state_floats + h * (hd + 2);
                if (src[0] == kr.neg_inf) continue;
                const float c = std::exp(src[0] - m);
                l += src[1] * c;
                for (int i = 0; i < hd; ++i) o[i] += src[2 + i] * c;
            }
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int i = 0; i < hd; ++i) o[i] *= inv;
        }
    }
}

}  // namespace kvchat
