// AVX-512 kernels of the llama.cpp-order prefill attention (attention_kernels.h): 16 lanes are one
// register, tiles of 4 x 4 outputs, and four outputs' lane trees reduced together with the same
// pairings as _mm512_reduce_add_ps. Called only after a run-time CPU check; this file must not
// instantiate templates that other files also instantiate.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/cache/attention_kernels.h"

#include <immintrin.h>

namespace kvchat::attention_kernels {
namespace {

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
template <int RI, int RJ>
void scores_tile(const float* const* q, const float* const* k, int goff, int hd, float* S, int64_t ldc, int c) {
    __m512 acc[RI][RJ];
    for (int i = 0; i < RI; ++i)
        for (int j = 0; j < RJ; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        __m512 kv[RJ];
        for (int j = 0; j < RJ; ++j) kv[j] = _mm512_loadu_ps(k[j] + goff + d);
        for (int i = 0; i < RI; ++i) {
            const __m512 qv = _mm512_loadu_ps(q[i] + d);
            for (int j = 0; j < RJ; ++j) acc[i][j] = _mm512_fmadd_ps(kv[j], qv, acc[i][j]);
        }
    }
    for (int i = 0; i < RI; ++i) {
        alignas(16) float out[4];
        _mm_store_ps(out, reduce4(acc[i][0], acc[i][RJ > 1 ? 1 : 0], acc[i][RJ > 2 ? 2 : 0], acc[i][RJ > 3 ? 3 : 0]));
        for (int j = 0; j < RJ; ++j) S[i * ldc + c + j] = out[j];
    }
}

void scores(const float* const* q, int R, const float* const* k, int goff, int hd, int c0, int c1, float* S, int64_t ldc) {
    for (int c = c0; c < c1;) {
        // The next run of up to 4 present columns.
        if (!k[c]) {
            ++c;
            continue;
        }
        int n = 1;
        while (n < 4 && c + n < c1 && k[c + n]) ++n;
        const float* const* kc = k + c;
        int r = 0;
        for (; r + 4 <= R; r += 4) {
            float* s = S + r * ldc;
            switch (n) {
                case 4: scores_tile<4, 4>(q + r, kc, goff, hd, s, ldc, c); break;
                case 3: scores_tile<4, 3>(q + r, kc, goff, hd, s, ldc, c); break;
                case 2: scores_tile<4, 2>(q + r, kc, goff, hd, s, ldc, c); break;
                default: scores_tile<4, 1>(q + r, kc, goff, hd, s, ldc, c); break;
            }
        }
        for (; r < R; ++r) {
            float* s = S + r * ldc;
            switch (n) {
                case 4: scores_tile<1, 4>(q + r, kc, goff, hd, s, ldc, c); break;
                case 3: scores_tile<1, 3>(q + r, kc, goff, hd, s, ldc, c); break;
                case 2: scores_tile<1, 2>(q + r, kc, goff, hd, s, ldc, c); break;
                default: scores_tile<1, 1>(q + r, kc, goff, hd, s, ldc, c); break;
            }
        }
        c += n;
    }
}

// RI rows x 4 channels [d, d + 4) of P · V.
template <int RI>
void values_tile(const float* S, int64_t ldc, const float* vt, int64_t ld, int c0, int c1, float* const* o, int d) {
    __m512 acc[RI][4];
    for (int i = 0; i < RI; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
    const float* v = vt + static_cast<int64_t>(d) * ld;
    for (int c = c0; c < c1; c += 16) {
        __m512 x[4];
        for (int j = 0; j < 4; ++j) x[j] = _mm512_loadu_ps(v + j * ld + c);
        for (int i = 0; i < RI; ++i) {
            const __m512 p = _mm512_loadu_ps(S + i * ldc + c);
            for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_fmadd_ps(x[j], p, acc[i][j]);
        }
    }
    for (int i = 0; i < RI; ++i) _mm_storeu_ps(o[i] + d, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
}

void values(const float* S, int64_t ldc, int R, const float* vt, int64_t ld, int hd, int c0, int c1, float* const* o) {
    int r = 0;
    for (; r + 4 <= R; r += 4)
        for (int d = 0; d < hd; d += 4) values_tile<4>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
    for (; r < R; ++r)
        for (int d = 0; d < hd; d += 4) values_tile<1>(S + r * ldc, ldc, vt, ld, c0, c1, o + r, d);
}

}  // namespace

const PrefillKernels& avx512_prefill_kernels() {
    static const PrefillKernels k{scores, values};
    return k;
}

}  // namespace kvchat::attention_kernels
