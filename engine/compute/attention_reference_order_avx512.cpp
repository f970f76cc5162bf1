// AVX-512 kernels of the llama.cpp-order prefill attention (attention_kernels.h): 16 lanes are one
// register, tiles of 4 x 4 outputs, and four outputs' lane trees reduced together with the same
// pairings as _mm512_reduce_add_ps. Called only after a run-time CPU check; this file must not
// instantiate templates that other files also instantiate.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/attention_kernels.h"
#include "engine/compute/ggml_expf.h"
#include "engine/compute/unroll.h"

#include <immintrin.h>

namespace kvchat::attention_kernels {
namespace {

// Sixteen stored values as floats: f32, or f16 converted by the hardware (exact).
inline __m512 ld16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 ld16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline float ld1(const float* p) { return *p; }
inline float ld1(const uint16_t* p) { return _cvtsh_ss(*p); }

// _mm512_reduce_add_ps of a, b, c, d (lane i + i + 8, then + 4, then (0 + 2) + (1 + 3)), four at once.
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4e));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xb1));
    // Lane 0 of each 128-bit quarter: a, b, c, d.
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

// RI rows x RJ columns of scores.
template <class T, int RI, int RJ>
void scores_tile(const float* const* q, const T* const* k, int goff, int hd, float* S, int64_t ldc, int c) {
    __m512 acc[RI][RJ];
    unroll<RI>([&](auto i) { unroll<RJ>([&](auto j) { acc[i][j] = _mm512_setzero_ps(); }); });
    for (int d = 0; d < hd; d += 16) {
        __m512 kv[RJ];
        unroll<RJ>([&](auto j) { kv[j] = ld16(k[j] + goff + d); });
        unroll<RI>([&](auto i) {
            const __m512 qv = _mm512_loadu_ps(q[i] + d);
            unroll<RJ>([&](auto j) { acc[i][j] = _mm512_fmadd_ps(kv[j], qv, acc[i][j]); });
        });
    }
    unroll<RI>([&](auto i) {
        alignas(16) float out[4];
        _mm_store_ps(out, reduce4(acc[i][0], acc[i][RJ > 1 ? 1 : 0], acc[i][RJ > 2 ? 2 : 0], acc[i][RJ > 3 ? 3 : 0]));
        for (int j = 0; j < RJ; ++j) S[i * ldc + c + j] = out[j];
    });
}

// RI rows x n (1 to 4) columns.
template <class T, int RI>
void scores_tiles(int n, const float* const* q, const T* const* k, int goff, int hd, float* S, int64_t ldc, int c) {
    switch (n) {
        case 4: scores_tile<T, RI, 4>(q, k, goff, hd, S, ldc, c); break;
        case 3: scores_tile<T, RI, 3>(q, k, goff, hd, S, ldc, c); break;
        case 2: scores_tile<T, RI, 2>(q, k, goff, hd, S, ldc, c); break;
        default: scores_tile<T, RI, 1>(q, k, goff, hd, S, ldc, c); break;
    }
}

template <class T>
void scores_t(const float* const* q, int R, const T* const* k, int goff, int hd, int c0, int c1, float* S, int64_t ldc) {
    for (int c = c0; c < c1;) {
        // The next run of up to 4 present columns.
        if (!k[c]) {
            ++c;
            continue;
        }
        int n = 1;
        while (n < 4 && c + n < c1 && k[c + n]) ++n;
        const T* const* kc = k + c;
        int r = 0;
        for (; r + 4 <= R; r += 4) scores_tiles<T, 4>(n, q + r, kc, goff, hd, S + r * ldc, ldc, c);
        for (; r < R; ++r) scores_tiles<T, 1>(n, q + r, kc, goff, hd, S + r * ldc, ldc, c);
        c += n;
    }
}

void scores(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1, float* S,
            int64_t ldc) {
    if (dt == KvDtype::F16)
        scores_t(q, R, reinterpret_cast<const uint16_t* const*>(k), goff, hd, c0, c1, S, ldc);
    else
        scores_t(q, R, reinterpret_cast<const float* const*>(k), goff, hd, c0, c1, S, ldc);
}

// RI rows x 4 channels [d, d + 4) of P · V.
template <int RI>
void values_tile(const float* S, int64_t ldc, const float* vt, int64_t ld, int c0, int c1, float* const* o, int d) {
    __m512 acc[RI][4];
    unroll<RI>([&](auto i) { unroll<4>([&](auto j) { acc[i][j] = _mm512_setzero_ps(); }); });
    const float* v = vt + static_cast<int64_t>(d) * ld;
    for (int c = c0; c < c1; c += 16) {
        __m512 x[4];
        unroll<4>([&](auto j) { x[j] = _mm512_loadu_ps(v + j * ld + c); });
        unroll<RI>([&](auto i) {
            const __m512 p = _mm512_loadu_ps(S + i * ldc + c);
            unroll<4>([&](auto j) { acc[i][j] = _mm512_fmadd_ps(x[j], p, acc[i][j]); });
        });
    }
    unroll<RI>([&](auto i) { _mm_storeu_ps(o[i] + d, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3])); });
}

void values(const float* S, int64_t ldc, int R, const float* vt, int64_t ld, int hd, int c0, int c1, float* const* o) {
    int r = 0;
    for (; r + 4 <= R; r += 4)
        for (int d = 0; d < hd; d += 4) values_tile<4>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
    for (; r < R; ++r)
        for (int d = 0; d < hd; d += 4) values_tile<1>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
}

// --- decode --------------------------------------------------------------------------------

// Rows [r, r + RI) against column c: four accumulators by dimension / 16 % 4.
template <class T, int RI>
void decode_scores_tile(const float* const* q, const T* k, int hd, float* S, int64_t ldc, int c) {
    __m512 a[RI][4];
    unroll<RI>([&](auto i) { unroll<4>([&](auto j) { a[i][j] = _mm512_setzero_ps(); }); });
    const int np = hd & ~63;
    for (int d = 0; d < np; d += 64) {
        __m512 kv[4];
        unroll<4>([&](auto j) { kv[j] = ld16(k + d + 16 * j); });
        unroll<RI>([&](auto i) {
            unroll<4>([&](auto j) { a[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(q[i] + d + 16 * j), kv[j], a[i][j]); });
        });
    }
    __m512 x[4];
    unroll<4>([&](auto i) {
        constexpr int ii = i < RI ? i : 0;
        x[i] = _mm512_add_ps(_mm512_add_ps(a[ii][0], a[ii][2]), _mm512_add_ps(a[ii][1], a[ii][3]));
    });
    alignas(16) float out[4];
    _mm_store_ps(out, reduce4(x[0], x[1], x[2], x[3]));
    for (int i = 0; i < RI; ++i) {
        double sum = out[i];
        for (int d = np; d < hd; ++d) sum += static_cast<double>(q[i][d] * ld1(k + d));
        S[i * ldc + c] = static_cast<float>(sum);
    }
}

// One column's 16-lane vectors for rows [0, RI): four accumulators by dimension / 16 % 4 over
// dimensions [0, np) (a multiple of 64), added (0 + 2) + (1 + 3), before the lane tree.
template <class T, int RI>
inline void column_lanes(const float* const* q, const T* kc, int np, __m512* X) {
    __m512 a[RI][4];
    for (int i = 0; i < RI; ++i)
        for (int m = 0; m < 4; ++m) a[i][m] = _mm512_setzero_ps();
    for (int d = 0; d < np; d += 64) {
        __m512 kv[4];
        for (int m = 0; m < 4; ++m) kv[m] = ld16(kc + d + 16 * m);
        for (int i = 0; i < RI; ++i)
            for (int m = 0; m < 4; ++m) a[i][m] = _mm512_fmadd_ps(_mm512_loadu_ps(q[i] + d + 16 * m), kv[m], a[i][m]);
    }
    for (int i = 0; i < RI; ++i) X[i] = _mm512_add_ps(_mm512_add_ps(a[i][0], a[i][2]), _mm512_add_ps(a[i][1], a[i][3]));
}

// Fewer than 4 rows: the same sums, but the lane trees of 16 columns are reduced together, one
// level of _mm512_reduce_add_ps's tree per step, so that the 16 scores of a row end in one
// register (lane i + i + 8: pairs of columns; + 4: fours; then 0 + 2 and 1 + 3: eights; then their
// sum: sixteen), stored at once. A level's adds take two vectors that each hold half-done trees,
// and add the same lanes as the tree would: each column's sum is bit for bit reduce4's. The
// columns' keys are converted once for all rows.
template <int RI>
struct Block16 {
    // The tree's pending vectors: level[l] holds 2^l columns' partial trees of each row.
    __m512 level[4][RI];
    int count = 0;  // columns pushed

    // One column's 16-lane vectors X[i] = (a0 + a2) + (a1 + a3).
    void push(const __m512* x) {
        __m512 cur[RI];
        for (int i = 0; i < RI; ++i) cur[i] = x[i];
        ++count;
        // Column `count - 1` completes levels while the count's low bits carry.
        if (count & 1) {
            for (int i = 0; i < RI; ++i) level[0][i] = cur[i];
            return;
        }
        for (int i = 0; i < RI; ++i)  // pairs: [a: x_i + x_i+8 | b: the same]
            cur[i] = _mm512_add_ps(_mm512_shuffle_f32x4(level[0][i], cur[i], 0x44), _mm512_shuffle_f32x4(level[0][i], cur[i], 0xee));
        if (count & 2) {
            for (int i = 0; i < RI; ++i) level[1][i] = cur[i];
            return;
        }
        for (int i = 0; i < RI; ++i)  // fours: per quarter t_j = p_j + p_j+4
            cur[i] = _mm512_add_ps(_mm512_shuffle_f32x4(level[1][i], cur[i], 0x88), _mm512_shuffle_f32x4(level[1][i], cur[i], 0xdd));
        if (count & 4) {
            for (int i = 0; i < RI; ++i) level[2][i] = cur[i];
            return;
        }
        for (int i = 0; i < RI; ++i) {  // eights: per quarter t0 + t2, t1 + t3
            const __m512d a = _mm512_castps_pd(level[2][i]), b = _mm512_castps_pd(cur[i]);
            cur[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
        }
        if (count & 8) {
            for (int i = 0; i < RI; ++i) level[3][i] = cur[i];
            return;
        }
        for (int i = 0; i < RI; ++i)  // sixteen: (t0 + t2) + (t1 + t3)
            level[3][i] = _mm512_add_ps(_mm512_shuffle_ps(level[3][i], cur[i], 0x88), _mm512_shuffle_ps(level[3][i], cur[i], 0xdd));
    }
    // After 16 pushes: row i's score of column c of the block is lane 4 (c % 4) + c / 4 of
    // level[3][i]; the permutation puts it in lane c.
    __m512 scores(int i) const {
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), level[3][i]);
    }
};

template <class T, int RI>
void decode_scores_columns(const float* const* q, const T* const* k, int goff, int hd, int c0, int c1, float* S,
                           int64_t ldc, const DecodeAhead* ahead) {
    static_assert(RI < 4);
    for (int cb = c0; cb < c1; cb += 16) {
        Block16<RI> tree;
        uint32_t present = 0;
        for (int j = 0; j < 16; ++j) {
            const int c = cb + j;
            request_ahead(ahead, c, c1);
            __m512 X[RI];
            if (c < c1 && k[c]) {
                present |= 1u << j;
                column_lanes<T, RI>(q, k[c] + goff, hd, X);
            } else {
                for (int i = 0; i < RI; ++i) X[i] = _mm512_setzero_ps();
            }
            tree.push(X);
        }
        for (int i = 0; i < RI; ++i) _mm512_mask_storeu_ps(S + i * ldc + cb, __mmask16(present), tree.scores(i));
    }
}

// Fewer than 4 rows and a head dimension that is not a multiple of 64: each row's lane trees
// reduced four columns at a time, the dimensions past the last 64 added in double.
template <class T, int RI>
void decode_scores_columns_tail(const float* const* q, const T* const* k, int goff, int hd, int c0, int c1, float* S,
                                int64_t ldc, const DecodeAhead* ahead) {
    static_assert(RI < 4);
    const int np = hd & ~63;
    __m512 X[RI][4];
    int col[4];
    int n = 0;
    auto flush = [&] {
        for (int i = 0; i < RI; ++i) {
            alignas(16) float out[4];
            _mm_store_ps(out, reduce4(X[i][0], X[i][n > 1 ? 1 : 0], X[i][n > 2 ? 2 : 0], X[i][n > 3 ? 3 : 0]));
            for (int j = 0; j < n; ++j) {
                double sum = out[j];
                for (int d = np; d < hd; ++d) sum += static_cast<double>(q[i][d] * ld1(k[col[j]] + goff + d));
                S[i * ldc + col[j]] = static_cast<float>(sum);
            }
        }
        n = 0;
    };
    for (int c = c0; c < c1; ++c) {
        request_ahead(ahead, c, c1);
        if (!k[c]) continue;
        __m512 x[RI];
        column_lanes<T, RI>(q, k[c] + goff, np, x);
        for (int i = 0; i < RI; ++i) X[i][n] = x[i];
        col[n++] = c;
        if (n == 4) flush();
    }
    if (n > 0) flush();
}

template <class T>
void decode_scores_t(const float* const* q, int R, const T* const* k, int goff, int hd, int c0, int c1, float* S,
                     int64_t ldc, const DecodeAhead* ahead) {
    if (hd % 64 == 0) {
        switch (R) {
            case 3: return decode_scores_columns<T, 3>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            case 2: return decode_scores_columns<T, 2>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            case 1: return decode_scores_columns<T, 1>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            default: break;
        }
    } else {
        switch (R) {
            case 3: return decode_scores_columns_tail<T, 3>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            case 2: return decode_scores_columns_tail<T, 2>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            case 1: return decode_scores_columns_tail<T, 1>(q, k, goff, hd, c0, c1, S, ldc, ahead);
            default: break;
        }
    }
    for (int c = c0; c < c1; ++c) {
        request_ahead(ahead, c, c1);
        if (!k[c]) continue;
        int r = 0;
        for (; r + 4 <= R; r += 4) decode_scores_tile<T, 4>(q + r, k[c] + goff, hd, S + r * ldc, ldc, c);
        // The last rows together too (a group of 3 query heads per kv head is common): each key
        // converted once for them, and one reduction for all of them.
        switch (R - r) {
            case 3: decode_scores_tile<T, 3>(q + r, k[c] + goff, hd, S + r * ldc, ldc, c); break;
            case 2: decode_scores_tile<T, 2>(q + r, k[c] + goff, hd, S + r * ldc, ldc, c); break;
            case 1: decode_scores_tile<T, 1>(q + r, k[c] + goff, hd, S + r * ldc, ldc, c); break;
            default: break;
        }
    }
}

void decode_scores(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1,
                   float* S, int64_t ldc, const DecodeAhead* ahead) {
    if (dt == KvDtype::F16)
        decode_scores_t(q, R, reinterpret_cast<const uint16_t* const*>(k), goff, hd, c0, c1, S, ldc, ahead);
    else
        decode_scores_t(q, R, reinterpret_cast<const float* const*>(k), goff, hd, c0, c1, S, ldc, ahead);
}

// Rows [r, r + RI), NS slices of 16 channels from off: chains for the column classes
// [k0, k0 + KC), each over c = c0 + class + 64 i, into A[slice][row][class]. A column's value
// row is loaded once for every row and slice (two slices are one cache line of f16 values).
template <class T, int RI, int KC, int NS>
void decode_values_pass(const float* S, int64_t ldc, const T* const* v, int off, int c0, int c1, int k0,
                        float (*A)[4][64][16]) {
    __m512 acc[NS][RI][KC];
    for (int sl = 0; sl < NS; ++sl)
        for (int i = 0; i < RI; ++i)
            for (int j = 0; j < KC; ++j) acc[sl][i][j] = _mm512_setzero_ps();
    for (int c = c0 + k0; c < c1; c += 64)
        for (int j = 0; j < KC; ++j) {
            const T* vc = v[c + j];
            if (!vc) continue;
            __m512 x[NS];
            for (int sl = 0; sl < NS; ++sl) x[sl] = ld16(vc + off + 16 * sl);
            for (int i = 0; i < RI; ++i) {
                const __m512 p = _mm512_set1_ps(S[i * ldc + c + j]);
                for (int sl = 0; sl < NS; ++sl) acc[sl][i][j] = _mm512_fmadd_ps(x[sl], p, acc[sl][i][j]);
            }
        }
    for (int sl = 0; sl < NS; ++sl)
        for (int i = 0; i < RI; ++i)
            for (int j = 0; j < KC; ++j) _mm512_store_ps(A[sl][i][k0 + j], acc[sl][i][j]);
}

// All 64 classes of rows [r, r + RI) for NS slices: passes of as many classes as the registers
// hold (at most 24 chains).
template <class T, int RI, int NS>
void decode_values_passes(const float* S, int64_t ldc, const T* const* v, int off, int c0, int c1, float (*A)[4][64][16]) {
    constexpr int KC = RI * 4 * NS <= 24 ? 4 : 2;
    for (int k0 = 0; k0 < 64; k0 += KC) decode_values_pass<T, RI, KC, NS>(S, ldc, v, off, c0, c1, k0, A);
}

template <class T>
void decode_values_t(const float* S, int64_t ldc, int R, const T* const* v, int goff, int c0, int c1, float* const* o,
                     int d0, int d1) {
    alignas(64) float A[2][4][64][16];
    for (int d = d0; d < d1;) {
        const int ns = d1 - d >= 32 ? 2 : 1;
        for (int r = 0; r < R; r += 4) {
            const int nr = R - r < 4 ? R - r : 4;
            const float* Sr = S + r * ldc;
            const int off = goff + d;
            if (ns == 2) {
                switch (nr) {
                    case 4: decode_values_passes<T, 4, 2>(Sr, ldc, v, off, c0, c1, A); break;
                    case 3: decode_values_passes<T, 3, 2>(Sr, ldc, v, off, c0, c1, A); break;
                    case 2: decode_values_passes<T, 2, 2>(Sr, ldc, v, off, c0, c1, A); break;
                    default: decode_values_passes<T, 1, 2>(Sr, ldc, v, off, c0, c1, A); break;
                }
            } else {
                switch (nr) {
                    case 4: decode_values_passes<T, 4, 1>(Sr, ldc, v, off, c0, c1, A); break;
                    case 3: decode_values_passes<T, 3, 1>(Sr, ldc, v, off, c0, c1, A); break;
                    case 2: decode_values_passes<T, 2, 1>(Sr, ldc, v, off, c0, c1, A); break;
                    default: decode_values_passes<T, 1, 1>(Sr, ldc, v, off, c0, c1, A); break;
                }
            }
            for (int sl = 0; sl < ns; ++sl)
                for (int i = 0; i < nr; ++i) {
                    __m512 X[16];
                    for (int j = 0; j < 16; ++j)
                        X[j] = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(A[sl][i][j]), _mm512_load_ps(A[sl][i][32 + j])),
                                             _mm512_add_ps(_mm512_load_ps(A[sl][i][16 + j]), _mm512_load_ps(A[sl][i][48 + j])));
                    // The 16-lane tree across j, for 16 channels at once.
                    for (int j = 0; j < 8; ++j) X[j] = _mm512_add_ps(X[j], X[j + 8]);
                    for (int j = 0; j < 4; ++j) X[j] = _mm512_add_ps(X[j], X[j + 4]);
                    _mm512_storeu_ps(o[r + i] + d + 16 * sl, _mm512_add_ps(_mm512_add_ps(X[0], X[2]), _mm512_add_ps(X[1], X[3])));
                }
        }
        d += 16 * ns;
    }
}

void decode_values(const float* S, int64_t ldc, int R, const void* const* v, KvDtype dt, int goff, int c0, int c1,
                   float* const* o, int d0, int d1) {
    if (dt == KvDtype::F16)
        decode_values_t(S, ldc, R, reinterpret_cast<const uint16_t* const*>(v), goff, c0, c1, o, d0, d1);
    else
        decode_values_t(S, ldc, R, reinterpret_cast<const float* const*>(v), goff, c0, c1, o, d0, d1);
}

// ggml_v_expf of llama.cpp's AVX-512 build: ggml_expf8's steps (ggml_expf.h) on 16 lanes, with
// the final scaling by 2^n as one _mm512_scalef_ps (which ggml_expf8 does as two exact
// multiplications rounded once: the same bits).
inline __m512 expf16(__m512 x) {
    __m512 n, j;
    ggml_expf_parts(x, n, j);
    const __m512 res = _mm512_scalef_ps(j, n);
    // |n| > 192: 0 below, infinity above (x = -inf gives 0).
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (big == 0) return res;
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                            _mm512_set1_ps(__builtin_inff()), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

// _mm512_reduce_add_ps's tree of the 16 lanes (attention_reference_order.cpp's tree16 of the two
// halves).
inline float tree16(__m512 x) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

// softmax_row_avx2's steps, 16 columns a step.
void softmax_row(float* sr, int c0, int c1) {
    constexpr float kNegInf = -__builtin_inff();
    __m512 vmax = _mm512_set1_ps(kNegInf);
    int c = c0;
    for (; c + 16 <= c1; c += 16) vmax = _mm512_max_ps(_mm512_loadu_ps(sr + c), vmax);
    float m = _mm512_reduce_max_ps(vmax);
    for (; c < c1; ++c) m = sr[c] > m ? sr[c] : m;
    const int c_end = (c1 + 15) & ~15;
    for (int k = c1; k < c_end; ++k) sr[k] = kNegInf;
    if (m == kNegInf) {
        for (int k = c0; k < c_end; ++k) sr[k] = 0.0f;
        return;
    }
    const __m512 vm = _mm512_set1_ps(m);
    double sum = 0.0;
    for (int k = c0; k < c_end; k += 16) {
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(sr + k), vm));
        _mm512_storeu_ps(sr + k, e);
        sum += static_cast<double>(tree16(e));
    }
    const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
    for (int k = c0; k < c_end; k += 16)
        _mm512_storeu_ps(sr + k, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(_mm512_loadu_ps(sr + k), inv), _MM_FROUND_TO_NEAREST_INT)));
}

}  // namespace

void expf_avx512(const float* x, float* y, int n) {
    for (int i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf16(_mm512_loadu_ps(x + i)));
}

const DecodeKernels& avx512_decode_kernels() {
    static const DecodeKernels k{decode_scores, decode_values, softmax_row};
    return k;
}

const PrefillKernels& avx512_prefill_kernels() {
    static const PrefillKernels k{scores, values};
    return k;
}

}  // namespace kvchat::attention_kernels
