// AVX-512 kernels of attention over KIVI blocks (attention_kernels.h): the same values as
// attention.cpp's 256-bit loops, bit for bit, with twice the lanes. A score is one 8-lane chain
// over head_dim, so a 512-bit register carries two scores' chains side by side (two columns);
// an output channel is one chain over the columns, so a register carries 16 channels. Called
// only after a run-time CPU check; this file must not instantiate templates that other files
// also instantiate.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/attention_kernels.h"

#include <immintrin.h>

namespace kvchat::attention_kernels {
namespace {

// attention.cpp's hsum_tree: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline float hsum_tree(__m256 v) {
    __m128 h = _mm_hadd_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_movehdup_ps(h));
}

// Codes of 8 channels (NB bits each) of a packed row starting at channel c, as bytes: 1, 2 or 4
// of them, read with a masked load (never past them).
template <int NB>
inline __m128i code_bytes8(const uint8_t* row, int c) {
    return _mm_maskz_loadu_epi8(__mmask16((1u << NB) - 1), row + c * NB / 8);
}

// The lanes' dword index and shift: lanes 0-7 take the 8 codes of the bytes at 0, lanes 8-15
// those of the bytes at 8 (pair), or all 16 lanes 16 consecutive codes from byte 0 (run).
template <int NB>
struct CodeLanes {
    __m512i pair_idx, pair_shift, run_idx, run_shift, mask;
    CodeLanes() {
        alignas(64) int pi[16], ps[16], ri[16], rs[16];
        for (int l = 0; l < 16; ++l) {
            const int in8 = l % 8;
            pi[l] = (l < 8 ? 0 : 2) + in8 * NB / 32;
            ps[l] = in8 * NB % 32;
            ri[l] = l * NB / 32;
            rs[l] = l * NB % 32;
        }
        pair_idx = _mm512_load_si512(pi);
        pair_shift = _mm512_load_si512(ps);
        run_idx = _mm512_load_si512(ri);
        run_shift = _mm512_load_si512(rs);
        mask = _mm512_set1_epi32((1 << NB) - 1);
    }
    __m512 decode(__m128i raw, __m512i idx, __m512i shift) const {
        const __m512i v = _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(raw));
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(v, shift), mask));
    }
    // Channels [c, c + 8) of rows a (lanes 0-7) and b (lanes 8-15).
    __m512 pair(const uint8_t* a, const uint8_t* b, int c) const {
        return decode(_mm_unpacklo_epi64(code_bytes8<NB>(a, c), code_bytes8<NB>(b, c)), pair_idx, pair_shift);
    }
    // Channels [c, c + 16) of one row.
    __m512 run(const uint8_t* row, int c) const {
        return decode(_mm_maskz_loadu_epi8(__mmask16((1u << (2 * NB)) - 1), row + c * NB / 8), run_idx, run_shift);
    }
};

template <int NB>
const CodeLanes<NB>& lanes() {
    static const CodeLanes<NB> l;
    return l;
}

// Rows [r, r + RB) (the last repeated past R) x columns i0, i0 + 1 (i1 repeats i0 when alone).
template <int NB, int RB>
void scores_pair(const float* qk, int R, int r, int hd, const float* bias, const uint8_t* ra, const uint8_t* rb, int goff,
                 float* sa, float* sb, int64_t ldc) {
    const CodeLanes<NB>& L = lanes<NB>();
    const float* q[RB];
    for (int i = 0; i < RB; ++i) q[i] = qk + static_cast<int64_t>(r + i < R ? r + i : R - 1) * hd;
    __m512 acc[RB];
    for (int i = 0; i < RB; ++i) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        const __m512 x = L.pair(ra, rb, goff + d);
        for (int i = 0; i < RB; ++i) acc[i] = _mm512_fmadd_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(q[i] + d)), x, acc[i]);
    }
    for (int i = 0; i < RB && r + i < R; ++i) {
        sa[(r + i) * ldc] = hsum_tree(_mm512_castps512_ps256(acc[i])) + bias[r + i];
        if (sb) sb[(r + i) * ldc] = hsum_tree(_mm512_extractf32x8_ps(acc[i], 1)) + bias[r + i];
    }
}

template <int NB>
void kivi_scores_t(const float* qk, int R, int hd, const float* bias, const uint8_t* const* rows, const int* cols, int n,
                   int goff, float* S, int64_t ldc) {
    constexpr int kRows = 8;
    for (int i = 0; i < n; i += 2) {
        const bool two = i + 1 < n;
        const uint8_t* ra = rows[i];
        const uint8_t* rb = two ? rows[i + 1] : rows[i];
        for (int r = 0; r < R; r += kRows)
            scores_pair<NB, kRows>(qk, R, r, hd, bias, ra, rb, goff, S + cols[i], two ? S + cols[i + 1] : nullptr, ldc);
    }
}

void kivi_scores(const float* qk, int R, int hd, const float* bias, const uint8_t* const* rows, const int* cols, int n,
                 int nbits, int goff, float* S, int64_t ldc) {
    switch (nbits) {
        case 8: return kivi_scores_t<8>(qk, R, hd, bias, rows, cols, n, goff, S, ldc);
        case 4: return kivi_scores_t<4>(qk, R, hd, bias, rows, cols, n, goff, S, ldc);
        default: return kivi_scores_t<2>(qk, R, hd, bias, rows, cols, n, goff, S, ldc);
    }
}

template <int NB, int RB>
void values_rows(const float* ps, int nk, int k0, int vg, const uint8_t* const* rows, int n, int goff, int d0, int d1,
                 float* const* o) {
    const CodeLanes<NB>& L = lanes<NB>();
    const int step = RB * nk;
    int d = d0;
    for (; d + 32 <= d1; d += 32) {
        const int g0 = d / vg - k0, g1 = (d + 16) / vg - k0;
        __m512 acc[RB][2];
        for (int i = 0; i < RB; ++i) acc[i][0] = _mm512_loadu_ps(o[i] + d), acc[i][1] = _mm512_loadu_ps(o[i] + d + 16);
        const float* p = ps;
        for (int a = 0; a < n; ++a, p += step) {
            const __m512 x0 = L.run(rows[a], goff + d), x1 = L.run(rows[a], goff + d + 16);
            for (int i = 0; i < RB; ++i) {
                acc[i][0] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * nk + g0]), x0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * nk + g1]), x1, acc[i][1]);
            }
        }
        for (int i = 0; i < RB; ++i) _mm512_storeu_ps(o[i] + d, acc[i][0]), _mm512_storeu_ps(o[i] + d + 16, acc[i][1]);
    }
    for (; d < d1; d += 16) {
        const int g0 = d / vg - k0;
        __m512 acc[RB];
        for (int i = 0; i < RB; ++i) acc[i] = _mm512_loadu_ps(o[i] + d);
        const float* p = ps;
        for (int a = 0; a < n; ++a, p += step) {
            const __m512 x = L.run(rows[a], goff + d);
            for (int i = 0; i < RB; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * nk + g0]), x, acc[i]);
        }
        for (int i = 0; i < RB; ++i) _mm512_storeu_ps(o[i] + d, acc[i]);
    }
}

template <int NB>
void kivi_values_t(const float* ps, int RB, int nk, int k0, int vg, const uint8_t* const* rows, int n, int goff, int d0,
                   int d1, float* const* o) {
    switch (RB) {
        case 4: return values_rows<NB, 4>(ps, nk, k0, vg, rows, n, goff, d0, d1, o);
        case 3: return values_rows<NB, 3>(ps, nk, k0, vg, rows, n, goff, d0, d1, o);
        case 2: return values_rows<NB, 2>(ps, nk, k0, vg, rows, n, goff, d0, d1, o);
        default: return values_rows<NB, 1>(ps, nk, k0, vg, rows, n, goff, d0, d1, o);
    }
}

void kivi_values(const float* ps, int RB, int nk, int k0, int vg, const uint8_t* const* rows, int n, int nbits, int goff,
                 int d0, int d1, float* const* o) {
    switch (nbits) {
        case 8: return kivi_values_t<8>(ps, RB, nk, k0, vg, rows, n, goff, d0, d1, o);
        case 4: return kivi_values_t<4>(ps, RB, nk, k0, vg, rows, n, goff, d0, d1, o);
        default: return kivi_values_t<2>(ps, RB, nk, k0, vg, rows, n, goff, d0, d1, o);
    }
}

}  // namespace

const KiviKernels& avx512_kivi_kernels() {
    static const KiviKernels k{kivi_scores, kivi_values};
    return k;
}

}  // namespace kvchat::attention_kernels
