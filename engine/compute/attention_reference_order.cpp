// llama.cpp's non-flash attention over its f16 KV cache, bit for bit (attend_reference_order in
// attention.h).
//
// What llama.cpp computes for a batch of n tokens, per kv head, over the cells 0..n_kv-1 of its
// cache (one sequence filled in order: cell c holds position c), every cell included: the masked
// ones come out exactly zero and change no sum, so here they are skipped, but lanes and blocks
// still follow positions.
//   scores   s = q · k over head_dim, both f16: for n >= 2 (tinyBLAS) 16 lanes, dimension d in
//            lane d % 16, one FMA chain each, added by the tree of _mm512_reduce_add_ps; for n == 1
//            (ggml_vec_dot_f16) four 16-lane accumulators (d / 16 % 4), added (0 + 2) + (1 + 3)
//            before the same tree.
//   softmax  e = ggml_v_expf(s - max); the sum in double of each 16-column block's float sum
//            (the same tree), block after block; p = fp16(e * float(1 / sum)).
//   output   out[d] = sum_c p[c] v[c][d]: for n >= 2 sixteen lanes by column (c % 16), for n == 1
//            the four accumulators by c / 16 % 4, added as for the scores.
// 256-bit code (AVX2 + FMA): a 16-lane register of llama.cpp's is a pair lo (lanes 0-7), hi (8-15).
// Prefill's two dense steps also have AVX-512 kernels (attention_reference_order_avx512.cpp), used
// unless simd_level() is "avx2"; the values are the same.
#include "engine/compute/attention.h"

#include "engine/compute/attention_kernels.h"
#include "engine/compute/ggml_expf.h"
#include "engine/compute/matmul.h"
#include "engine/compute/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

namespace kvchat {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kTileRows = 64;  // query heads x queries per prefill work item

// The decode kernels of the level in use (defined below); the softmax also serves prefill.
const attention_kernels::DecodeKernels& decode_kernels();

// _mm512_reduce_add_ps's tree over lanes lo (0-7) and hi (8-15).
inline float tree16(__m256 lo, __m256 hi) {
    const __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

inline __m256 round_f16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

// Eight stored values as floats: f32, or f16 converted by F16C (exact).
inline __m256 ld8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 ld8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline float ld1(const float* p) { return *p; }
inline float ld1(const uint16_t* p) { return _cvtsh_ss(*p); }

// q · k as tinyBLAS sums it (n >= 2): 16 lanes, hd a multiple of 16.
template <class T>
inline float dot16(const float* q, const T* k, int hd) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int d = 0; d < hd; d += 16) {
        lo = _mm256_fmadd_ps(ld8(k + d), _mm256_loadu_ps(q + d), lo);
        hi = _mm256_fmadd_ps(ld8(k + d + 8), _mm256_loadu_ps(q + d + 8), hi);
    }
    return tree16(lo, hi);
}

// dot64's four 16-lane accumulators (halves a[s][0], a[s][1]) summed: (0 + 2) + (1 + 3), then
// the 16-lane tree.
inline float sum_chains(const __m256 (&a)[4][2]) {
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0][0], a[2][0]), _mm256_add_ps(a[1][0], a[3][0]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[0][1], a[2][1]), _mm256_add_ps(a[1][1], a[3][1]));
    return tree16(lo, hi);
}

// q · k as ggml_vec_dot_f16 sums it (n == 1): four 16-lane accumulators over the first hd / 64 * 64
// dimensions, the rest added in double.
template <class T>
inline float dot64(const float* q, const T* k, int hd) {
    const int np = hd & ~63;
    __m256 a[4][2];
    for (auto& s : a) s[0] = s[1] = _mm256_setzero_ps();
    for (int d = 0; d < np; d += 64)
        for (int s = 0; s < 4; ++s)
            for (int h = 0; h < 2; ++h) {
                const int i = d + 16 * s + 8 * h;
                a[s][h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld8(k + i), a[s][h]);
            }
    double sum = sum_chains(a);
    for (int d = np; d < hd; ++d) sum += static_cast<double>(q[d] * ld1(k + d));
    return static_cast<float>(sum);
}

// The columns of a call: positions [base, base + n), base and n multiples of 16, each with the
// slot holding it (kv head 0, stored as dt), or none.
struct Columns {
    int32_t base = 0;
    int32_t n = 0;
    KvDtype dt = KvDtype::F32;
    std::vector<const void*> k, v;
};

struct Rows {
    std::vector<const float*> q;
    std::vector<float*> o;
    std::vector<int32_t> pos;
};

// Row r of queries [t0, t1) for kv head g: query t0 + r / group, head g * group + r % group.
void make_rows(const AttentionInput& in, const AttentionShape& s, int64_t t0, int64_t t1, int g, float* out, Rows& rows) {
    const int group = s.n_head / s.n_head_kv, hd = s.head_dim;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * hd;
    const size_t R = static_cast<size_t>((t1 - t0) * group);
    rows.q.resize(R), rows.o.resize(R), rows.pos.resize(R);
    for (int64_t t = t0; t < t1; ++t)
        for (int h = 0; h < group; ++h) {
            const size_t r = static_cast<size_t>((t - t0) * group + h);
            const int64_t at = t * q_stride + static_cast<int64_t>(g * group + h) * hd;
            rows.q[r] = in.q + at;
            rows.o[r] = out + at;
            rows.pos[r] = in.qpos[t];
        }
}

// The first column (relative to cols.base) a query at p may see.
inline int32_t first_seen(const AttentionInput& in, const Columns& cols, int32_t p) {
    const int32_t lo = in.window > 0 ? std::max<int32_t>(0, p - in.window + 1) : 0;
    return std::max<int32_t>(0, lo - cols.base);
}

// V of kv head g transposed: vt[d * ld + c] for the call's columns (zero where absent).
template <class T>
void transpose_values(const Columns& cols, int goff, int hd, float* vt, int64_t ld, int c0, int c1) {
    for (int c = c0; c < c1; c += 8) {
        const T* src[8];
        for (int i = 0; i < 8; ++i) src[i] = static_cast<const T*>(cols.v[static_cast<size_t>(c + i)]);
        for (int d = 0; d < hd; d += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; ++i) r[i] = src[i] ? ld8(src[i] + goff + d) : _mm256_setzero_ps();
            // 8x8 transpose
            const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
            const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
            const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
            const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            const __m256 o[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                                 _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                                 _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                                 _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(vt + static_cast<int64_t>(d + i) * ld + c, o[i]);
        }
    }
}

// out[r][d] for rows r0, r0+1 (R2 of them) and channels d0, d0+1: P · V over columns [c0, c1)
// (multiples of 16), 16 lanes by column, as tinyBLAS.
template <int R2>
void pv_prefill(const float* S, int64_t ldc, const float* vt, int64_t ld, int c0, int c1, float* const* o, int d0) {
    __m256 acc[R2][2][2];
    for (auto& a : acc)
        for (auto& b : a) b[0] = b[1] = _mm256_setzero_ps();
    const float* v0 = vt + static_cast<int64_t>(d0) * ld;
    const float* v1 = v0 + ld;
    for (int c = c0; c < c1; c += 16) {
        const __m256 x0 = _mm256_loadu_ps(v0 + c), x1 = _mm256_loadu_ps(v0 + c + 8);
        const __m256 y0 = _mm256_loadu_ps(v1 + c), y1 = _mm256_loadu_ps(v1 + c + 8);
        for (int i = 0; i < R2; ++i) {
            const __m256 p0 = _mm256_loadu_ps(S + i * ldc + c), p1 = _mm256_loadu_ps(S + i * ldc + c + 8);
            acc[i][0][0] = _mm256_fmadd_ps(x0, p0, acc[i][0][0]);
            acc[i][0][1] = _mm256_fmadd_ps(x1, p1, acc[i][0][1]);
            acc[i][1][0] = _mm256_fmadd_ps(y0, p0, acc[i][1][0]);
            acc[i][1][1] = _mm256_fmadd_ps(y1, p1, acc[i][1][1]);
        }
    }
    for (int i = 0; i < R2; ++i) {
        o[i][d0] = tree16(acc[i][0][0], acc[i][0][1]);
        o[i][d0 + 1] = tree16(acc[i][1][0], acc[i][1][1]);
    }
}

// The 256-bit prefill kernels (attention_kernels.h).
// dot16 of NR query rows against one key at once: each key vector is loaded (and converted from
// f16) once for all of them, and the 2 * NR chains are independent. Every dot keeps dot16's order.
template <int NR, class T>
void dots16(const float* const* q, const T* k, int hd, float* S, int64_t ldc) {
    __m256 lo[NR], hi[NR];
    for (int r = 0; r < NR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        const __m256 kl = ld8(k + d), kh = ld8(k + d + 8);
        for (int r = 0; r < NR; ++r) {
            lo[r] = _mm256_fmadd_ps(kl, _mm256_loadu_ps(q[r] + d), lo[r]);
            hi[r] = _mm256_fmadd_ps(kh, _mm256_loadu_ps(q[r] + d + 8), hi[r]);
        }
    }
    for (int r = 0; r < NR; ++r) S[r * ldc] = tree16(lo[r], hi[r]);
}

template <class T>
void scores_avx2_t(const float* const* q, int R, const T* const* k, int goff, int hd, int c0, int c1, float* S,
                   int64_t ldc) {
    for (int r = 0; r < R; r += 4) {
        const int nr = std::min(4, R - r);
        for (int c = c0; c < c1; ++c) {
            if (!k[c]) continue;
            float* out = S + r * ldc + c;
            switch (nr) {
                case 4: dots16<4>(q + r, k[c] + goff, hd, out, ldc); break;
                case 3: dots16<3>(q + r, k[c] + goff, hd, out, ldc); break;
                case 2: dots16<2>(q + r, k[c] + goff, hd, out, ldc); break;
                default: dots16<1>(q + r, k[c] + goff, hd, out, ldc); break;
            }
        }
    }
}

void scores_avx2(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1,
                 float* S, int64_t ldc) {
    if (dt == KvDtype::F16)
        scores_avx2_t(q, R, reinterpret_cast<const uint16_t* const*>(k), goff, hd, c0, c1, S, ldc);
    else
        scores_avx2_t(q, R, reinterpret_cast<const float* const*>(k), goff, hd, c0, c1, S, ldc);
}

void values_avx2(const float* S, int64_t ldc, int R, const float* vt, int64_t ld, int hd, int c0, int c1, float* const* o) {
    int r = 0;
    for (; r + 2 <= R; r += 2)
        for (int d = 0; d < hd; d += 2) pv_prefill<2>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
    for (; r < R; ++r)
        for (int d = 0; d < hd; d += 2) pv_prefill<1>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
}

const attention_kernels::PrefillKernels& prefill_kernels() {
    static const attention_kernels::PrefillKernels avx2{scores_avx2, values_avx2};
    return std::string_view(simd_level()) == "avx2" ? avx2 : attention_kernels::avx512_prefill_kernels();
}

// One prefill work item: rows of queries [t0, t1) for kv head g.
void prefill_item(const AttentionInput& in, const AttentionShape& s, const Columns& cols, const float* vt, int64_t ld,
                  int64_t t0, int64_t t1, int g, float* out, Rows& rows, std::vector<float>& S) {
    const attention_kernels::PrefillKernels& pk = prefill_kernels();
    const auto softmax_row = decode_kernels().softmax;
    const int hd = s.head_dim, goff = g * hd;
    make_rows(in, s, t0, t1, g, out, rows);
    const int R = static_cast<int>(rows.q.size());
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int r = 0; r < R; ++r) pmin = std::min(pmin, rows.pos[static_cast<size_t>(r)]), pmax = std::max(pmax, rows.pos[static_cast<size_t>(r)]);
    const int c0 = first_seen(in, cols, pmin) & ~15;
    const int c1 = std::min(cols.n, pmax - cols.base + 1);
    const int64_t ldc = cols.n;
    S.resize(static_cast<size_t>(R) * static_cast<size_t>(ldc));
    for (int r = 0; r < R; ++r) std::fill(S.data() + r * ldc + c0, S.data() + r * ldc + c1, kNegInf);
    pk.scores(rows.q.data(), R, cols.k.data(), cols.dt, goff, hd, c0, c1, S.data(), ldc);
    for (int r = 0; r < R; ++r) {
        float* sr = S.data() + r * ldc;
        const int32_t p = rows.pos[static_cast<size_t>(r)];
        const int lo = first_seen(in, cols, p), hi = std::min(c1, p - cols.base + 1);
        std::fill(sr + c0, sr + std::max(c0, lo), kNegInf);
        std::fill(sr + std::max(c0, hi), sr + c1, kNegInf);
        softmax_row(sr, c0, c1);
    }
    pk.values(S.data(), ldc, R, vt, ld, hd, c0, (c1 + 15) & ~15, rows.o.data());
}

// The chains of class k for NR rows (S's rows from sr on) and 16 channels from off, as two
// 8-lane halves: each column's value line is loaded once for all of them (a chain per row and
// lane, in column order).
template <int NR, class T>
inline void pv_class(const float* sr, int64_t ldc, const T* const* vcol, int off, int c0, int c1, int k,
                     float (*A)[64][16]) {
    __m256 a[NR][2];
    for (int i = 0; i < NR; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int c = c0 + k; c < c1; c += 64) {
        const T* v = vcol[c];
        if (!v) continue;
        const __m256 x[2] = {ld8(v + off), ld8(v + off + 8)};
        for (int i = 0; i < NR; ++i) {
            const __m256 p = _mm256_set1_ps(sr[i * ldc + c]);
            for (int h = 0; h < 2; ++h) a[i][h] = _mm256_fmadd_ps(x[h], p, a[i][h]);
        }
    }
    for (int i = 0; i < NR; ++i)
        for (int h = 0; h < 2; ++h) _mm256_store_ps(A[i][k] + 8 * h, a[i][h]);
}

// Decode: out[r][d0, d0 + 16) = P · V over columns [c0, c1) (multiples of 64) for rows [0, R), as
// ggml_vec_dot_f16 sums each channel: chains by column class c % 64, then per lane
// j = c % 16: (class j + class 32 + j) + (class 16 + j + class 48 + j), then the 16-lane tree.
template <class T>
void pv_decode16(const float* S, int64_t ldc, const T* const* vcol, int goff, int R, int c0, int c1, float* const* o,
                 int d0) {
    const int off = goff + d0;
    // A[row][class] for these 16 channels.
    alignas(32) float A[8][64][16];
    for (int r0 = 0; r0 < R; r0 += 8) {
        const int nr = std::min(8, R - r0);
        for (int k = 0; k < 64; ++k) {
            for (int i = 0; i < nr; i += 4) {
                const float* sr = S + (r0 + i) * ldc;
                switch (std::min(4, nr - i)) {  // 8 chains a pass for four rows
                    case 4: pv_class<4>(sr, ldc, vcol, off, c0, c1, k, A + i); break;
                    case 3: pv_class<3>(sr, ldc, vcol, off, c0, c1, k, A + i); break;
                    case 2: pv_class<2>(sr, ldc, vcol, off, c0, c1, k, A + i); break;
                    default: pv_class<1>(sr, ldc, vcol, off, c0, c1, k, A + i); break;
                }
            }
        }
        for (int i = 0; i < nr; ++i) {
            for (int h = 0; h < 2; ++h) {
                __m256 X[16];
                for (int j = 0; j < 16; ++j)
                    X[j] = _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(A[i][j] + 8 * h), _mm256_load_ps(A[i][32 + j] + 8 * h)),
                                         _mm256_add_ps(_mm256_load_ps(A[i][16 + j] + 8 * h), _mm256_load_ps(A[i][48 + j] + 8 * h)));
                // The 16-lane tree across j, for 8 channels at once.
                __m256 Y[8];
                for (int j = 0; j < 8; ++j) Y[j] = _mm256_add_ps(X[j], X[j + 8]);
                __m256 Z[4];
                for (int j = 0; j < 4; ++j) Z[j] = _mm256_add_ps(Y[j], Y[j + 4]);
                const __m256 res = _mm256_add_ps(_mm256_add_ps(Z[0], Z[2]), _mm256_add_ps(Z[1], Z[3]));
                _mm256_storeu_ps(o[r0 + i] + d0 + 8 * h, res);
            }
        }
    }
}

// The 256-bit decode kernels (attention_kernels.h).
template <class T>
void decode_scores_avx2_t(const float* const* q, int R, const T* const* k, int goff, int hd, int c0, int c1, float* S,
                          int64_t ldc, const attention_kernels::DecodeAhead* ahead) {
    if (hd == 64 && R > 1) {
        // dot64's arithmetic with each column's keys converted once, in registers, for every row.
        for (int c = c0; c < c1; ++c) {
            attention_kernels::request_ahead(ahead, c, c1);
            if (!k[c]) continue;
            __m256 kv[4][2];
            for (int i = 0; i < 4; ++i)
                for (int h = 0; h < 2; ++h) kv[i][h] = ld8(k[c] + goff + 16 * i + 8 * h);
            for (int r = 0; r < R; ++r) {
                __m256 a[4][2];
                for (int i = 0; i < 4; ++i)
                    for (int h = 0; h < 2; ++h) a[i][h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + 16 * i + 8 * h), kv[i][h], _mm256_setzero_ps());
                S[r * ldc + c] = sum_chains(a);
            }
        }
        return;
    }
    for (int c = c0; c < c1; ++c) {
        attention_kernels::request_ahead(ahead, c, c1);
        if (k[c])
            for (int r = 0; r < R; ++r) S[r * ldc + c] = dot64(q[r], k[c] + goff, hd);
    }
}

void decode_scores_avx2(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1,
                        float* S, int64_t ldc, const attention_kernels::DecodeAhead* ahead) {
    if (dt == KvDtype::F16)
        decode_scores_avx2_t(q, R, reinterpret_cast<const uint16_t* const*>(k), goff, hd, c0, c1, S, ldc, ahead);
    else
        decode_scores_avx2_t(q, R, reinterpret_cast<const float* const*>(k), goff, hd, c0, c1, S, ldc, ahead);
}

void decode_values_avx2(const float* S, int64_t ldc, int R, const void* const* v, KvDtype dt, int goff, int c0, int c1,
                        float* const* o, int d0, int d1) {
    for (int d = d0; d < d1; d += 16) {  // multiples of 16 (attention_kernels.h)
        if (dt == KvDtype::F16) pv_decode16(S, ldc, reinterpret_cast<const uint16_t* const*>(v), goff, R, c0, c1, o, d);
        else pv_decode16(S, ldc, reinterpret_cast<const float* const*>(v), goff, R, c0, c1, o, d);
    }
}

const attention_kernels::DecodeKernels& decode_kernels() {
    static const attention_kernels::DecodeKernels avx2{decode_scores_avx2, decode_values_avx2,
                                                       attention_kernels::softmax_row_avx2};
    return std::string_view(simd_level()) == "avx2" ? avx2 : attention_kernels::avx512_decode_kernels();
}

void attend_decode(const AttentionInput& in, const AttentionShape& s, const Columns& cols, float* out, ThreadPool& pool) {
    const attention_kernels::DecodeKernels& dk = decode_kernels();
    const int hd = s.head_dim, n_kv = s.n_head_kv, group = s.n_head / s.n_head_kv;
    const int32_t p = in.qpos[0];
    const int lo = first_seen(in, cols, p), hi = std::min(cols.n, p - cols.base + 1);
    const int c0 = lo & ~63, c1 = (hi + 63) & ~63;
    const int64_t ldc = cols.n;
    thread_local std::vector<float> tls_S;
    std::vector<float>& S = tls_S;
    S.resize(static_cast<size_t>(n_kv) * group * ldc);
    const int threads = pool.size();
    // A short context's work costs less than waking the other threads.
    constexpr int64_t kSerialWork = int64_t(1) << 16;  // multiply-adds of the scores
    const bool parallel = threads > 1 && int64_t(hi - c0) * s.n_head * hd >= kSerialWork;
    const int n_slices = hd / 16;
    const int64_t head_bytes = int64_t(hd) * int64_t(kv_dtype_bytes(cols.dt));
    // The three steps of kv head g, each of them the same whichever thread runs it or how the
    // work is cut: scores of columns [cs, ce), one row's softmax, one 16-channel slice of P.V.
    auto scores = [&](int g, int cs, int ce, Rows& rows) {
        make_rows(in, s, 0, 1, g, out, rows);
        float* sg = S.data() + int64_t(g) * group * ldc;
        for (int r = 0; r < group; ++r) std::fill(sg + r * ldc + cs, sg + r * ldc + ce, kNegInf);
        const int bs = std::max(cs, lo);
        const attention_kernels::DecodeAhead ahead{cols.k.data(), cols.v.data(), g * head_bytes, head_bytes};
        if (bs < ce) dk.scores(rows.q.data(), group, cols.k.data(), cols.dt, g * hd, hd, bs, ce, sg, ldc, &ahead);
    };
    auto softmax = [&](int64_t row) {
        float* sr = S.data() + row * ldc;
        dk.softmax(sr, c0, hi);
        // Columns past the softmax's last 16-column block, up to the values' 64: no slot there.
        std::fill(sr + std::min(c1, (hi + 15) & ~15), sr + c1, 0.0f);
    };
    auto values = [&](int g, int sl0, int sl1, const Rows& rows) {
        dk.values(S.data() + int64_t(g) * group * ldc, ldc, group, cols.v.data(), cols.dt, g * hd, c0, c1,
                  rows.o.data(), sl0 * 16, sl1 * 16);
    };
    if (!parallel) {
        // One kv head at a time: its rows' scores (one tile for up to 4 rows), softmax and P.V.
        thread_local Rows rows;
        for (int g = 0; g < n_kv; ++g) {
            scores(g, c0, hi, rows);
            for (int r = 0; r < group; ++r) softmax(int64_t(g) * group + r);
            values(g, 0, n_slices, rows);
        }
        return;
    }
    // Threads: one parallel step (a hand-over costs about as much as a kv head's scores at a few
    // hundred tokens, and more where the two cores sit far apart). The kv heads that divide evenly
    // among the threads go whole: scores, softmax and P.V on one thread, reading the keys and
    // values it requested itself. The rest (fewer than the threads: SmolLM2's third kv head of
    // three on two threads, Gemma 3's only one) are cut: their scores by columns, the thread that
    // completes a head's last part doing its softmax; their P.V by runs of 16-channel slices,
    // which wait for that softmax. Items are taken in order, so every scores part has been taken
    // by a running thread before any P.V run waits on it.
    const int n_whole = n_kv / threads * threads, n_split = n_kv - n_whole;
    const int parts = threads;
    const int runs = std::min(threads, n_slices);
    std::vector<PartsGate> split(static_cast<size_t>(n_split));
    for (PartsGate& h : split) h.expect(parts);
    const int64_t score_items = int64_t(n_split) * parts, whole_end = score_items + n_whole;
    const int64_t n_items = whole_end + int64_t(n_split) * runs;
    pool.parallel_for_dynamic(n_items, 1, [&](int64_t b, int64_t e) {
        thread_local Rows rows;
        for (int64_t i = b; i < e; ++i) {
            if (i < score_items) {
                const int h = int(i / parts), part = int(i % parts), g = n_whole + h;
                split[static_cast<size_t>(h)].part(
                    [&] { scores(g, c0 + int(int64_t(hi - c0) * part / parts), c0 + int(int64_t(hi - c0) * (part + 1) / parts), rows); },
                    [&] {
                        for (int r = 0; r < group; ++r) softmax(int64_t(g) * group + r);
                    });
            } else if (i < whole_end) {
                const int g = int(i - score_items);
                scores(g, c0, hi, rows);
                for (int r = 0; r < group; ++r) softmax(int64_t(g) * group + r);
                values(g, 0, n_slices, rows);
            } else {
                const int h = int((i - whole_end) / runs), run = int((i - whole_end) % runs), g = n_whole + h;
                split[static_cast<size_t>(h)].wait();
                make_rows(in, s, 0, 1, g, out, rows);
                values(g, n_slices * run / runs, n_slices * (run + 1) / runs, rows);
            }
        }
    });
}

}  // namespace

bool reference_order_applies(const AttentionInput& in, const AttentionShape& s) {
    return in.f16_probs && in.dtype != KvDtype::BF16 && in.q_sink == nullptr && in.sink_end == 0 && in.blocks.empty() && s.head_dim % 16 == 0 &&
           s.softcap == 0.0f && s.scale == 1.0f;
}

void attend_reference_order(const AttentionInput& in, const AttentionShape& s, float* out, ThreadPool& pool) {
    const int hd = s.head_dim, n_kv = s.n_head_kv, group = s.n_head / s.n_head_kv;
    const int64_t n_q = in.n_q;
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int64_t t = 0; t < n_q; ++t) pmin = std::min(pmin, in.qpos[t]), pmax = std::max(pmax, in.qpos[t]);
    // Columns: every position some query may see, from a multiple of 64 (decode's blocks) on,
    // padded with empty positions to a multiple of 64.
    thread_local Columns tls_cols;
    Columns& cols = tls_cols;
    cols.base = (in.window > 0 ? std::max<int32_t>(0, pmin - in.window + 1) : 0) & ~63;
    cols.n = ((pmax + 1 - cols.base) + 63) & ~63;
    cols.dt = in.dtype;
    cols.k.assign(static_cast<size_t>(cols.n), nullptr);
    cols.v.assign(static_cast<size_t>(cols.n), nullptr);
    const int64_t es = static_cast<int64_t>(kv_dtype_bytes(in.dtype));
    for (const SlotView& sv : in.slots) {
        if (sv.n <= 0) continue;
        const auto* k = static_cast<const char*>(sv.k);
        const auto* v = static_cast<const char*>(sv.v);
        const int64_t step = sv.stride * es;
        // A view of consecutive positions inside the columns (a layer that keeps every token, a
        // ring's runs, the new tokens): its pointers in one pass without a test per slot.
        const int64_t first = int64_t(sv.pos[0]) - cols.base;
        int64_t apart = 0;
        for (int64_t j = 0; j < sv.n; ++j) apart += int64_t(sv.pos[j]) != int64_t(sv.pos[0]) + j;
        if (apart == 0 && first >= 0 && first + sv.n <= cols.n) {
            const void** kd = cols.k.data() + first;
            const void** vd = cols.v.data() + first;
            for (int64_t j = 0; j < sv.n; ++j) kd[j] = k + j * step, vd[j] = v + j * step;
            continue;
        }
        for (int64_t j = 0; j < sv.n; ++j) {
            const int32_t p = sv.pos[j];
            if (p >= cols.base && p - cols.base < cols.n) {
                cols.k[static_cast<size_t>(p - cols.base)] = k + j * step;
                cols.v[static_cast<size_t>(p - cols.base)] = v + j * step;
            }
        }
    }
    if (n_q == 1) return attend_decode(in, s, cols, out, pool);

    // V transposed per kv head, shared by every work item.
    thread_local std::vector<float> tls_vt;
    std::vector<float>& vt = tls_vt;
    const int64_t ld = cols.n;
    vt.resize(static_cast<size_t>(n_kv) * hd * ld);
    const int n_blocks = cols.n / 64;
    pool.parallel_for(static_cast<int64_t>(n_kv) * n_blocks, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            if (in.cancelled()) return;
            const int g = static_cast<int>(i / n_blocks), c = static_cast<int>(i % n_blocks) * 64;
            if (cols.dt == KvDtype::F16)
                transpose_values<uint16_t>(cols, g * hd, hd, vt.data() + static_cast<int64_t>(g) * hd * ld, ld, c, c + 64);
            else
                transpose_values<float>(cols, g * hd, hd, vt.data() + static_cast<int64_t>(g) * hd * ld, ld, c, c + 64);
        }
    });

    if (in.cancelled()) return;
    const QueryTiles tiles(n_q, group, n_kv, pool.size(), kTileRows);
    pool.parallel_for(tiles.items(), [&](int64_t b, int64_t e) {
        Rows rows;
        thread_local std::vector<float> S;
        for (int64_t i = b; i < e; ++i) {
            if (in.cancelled()) return;
            const QueryTiles::Item it = tiles.item(i);
            prefill_item(in, s, cols, vt.data() + static_cast<int64_t>(it.g) * hd * ld, ld, it.t0, it.t1, it.g, out, rows, S);
        }
    });
}

namespace attention_kernels {

// Row r's softmax over columns [c0, c1) of its scores sr (masked: -inf); leaves p = fp16(e / sum)
// there, zero where masked. c0 is a multiple of 16; sr has room up to c1 rounded up to 16.
void softmax_row_avx2(float* sr, int c0, int c1) {
    // The maximum in eight lanes, not one chain of dependent scalar steps. (max(x, m) keeps m on
    // ties and NaN, as std::max(m, x) does; the order of the steps cannot change the value beyond
    // the sign of a zero maximum, which subtracts alike.)
    __m256 vmax = _mm256_set1_ps(kNegInf);
    int c = c0;
    for (; c + 8 <= c1; c += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(sr + c), vmax);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float m = _mm_cvtss_f32(m4);
    for (; c < c1; ++c) m = std::max(m, sr[c]);
    const int c_end = (c1 + 15) & ~15;
    for (int c = c1; c < c_end; ++c) sr[c] = kNegInf;
    if (m == kNegInf) {
        std::fill(sr + c0, sr + c_end, 0.0f);
        return;
    }
    const __m256 vm = _mm256_set1_ps(m);
    double sum = 0.0;
    for (int c = c0; c < c_end; c += 16) {
        const __m256 lo = ggml_expf8(_mm256_sub_ps(_mm256_loadu_ps(sr + c), vm));
        const __m256 hi = ggml_expf8(_mm256_sub_ps(_mm256_loadu_ps(sr + c + 8), vm));
        _mm256_storeu_ps(sr + c, lo);
        _mm256_storeu_ps(sr + c + 8, hi);
        sum += static_cast<double>(tree16(lo, hi));
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    for (int c = c0; c < c_end; c += 8) _mm256_storeu_ps(sr + c, round_f16(_mm256_mul_ps(_mm256_loadu_ps(sr + c), inv)));
}

void expf_avx2(const float* x, float* y, int n) {
    for (int i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ggml_expf8(_mm256_loadu_ps(x + i)));
}

}  // namespace attention_kernels

}  // namespace kvchat
