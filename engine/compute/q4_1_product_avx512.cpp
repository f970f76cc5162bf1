// The batch kernel of q4_1_product.cpp at AVX-512 VNNI: two tokens per 512-bit register (one in
// each half), the integer lane sums by vpdpbusd. The same values as the AVX2 kernel bit for bit:
// the lane sums are exact integers, and every float step (dw * dx, the lane's fma, the minimum's
// sum, hsum_float_8's tree) is the same operation on the same operands. Called only after a
// run-time CPU check; uses no templates other files instantiate (the linker keeps one copy).
// GCC 12 reports the _mm512_undefined_* pass-through operands inside many AVX-512 intrinsics as
// maybe-uninitialized (GCC bug 105593, fixed in 13); the pragma must precede the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/q4_1_product.h"

#include "engine/compute/quant_blocks.h"

#include <immintrin.h>


namespace kvchat::q4_1 {

namespace {

inline float hsum8(__m256 a) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

template <int ROWS>
void pair_rows(const UnpackedPanel& u, int r0, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0, float* y1) {
    const int64_t n_blocks = u.n_blocks;
    __m512 acc[ROWS];
    float mins0[ROWS], mins1[ROWS];
    for (int r = 0; r < ROWS; ++r) acc[r] = _mm512_setzero_ps(), mins0[r] = mins1[r] = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const __m512i qx = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0[b].qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1[b].qs)), 1);
        const float dx0 = _cvtsh_ss(x0[b].d), dx1 = _cvtsh_ss(x1[b].d);
        const float sx0 = _cvtsh_ss(x0[b].s), sx1 = _cvtsh_ss(x1[b].s);
        const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(dx0), _mm256_set1_ps(dx1), 1);
        for (int r = 0; r < ROWS; ++r) {
            const size_t i = size_t(r0 + r) * size_t(n_blocks) + size_t(b);
            const __m512i qw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 32 * i)));
            const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qw, qx));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(u.d[i]), dx), s, acc[r]);
            mins0[r] = __builtin_fmaf(u.m[i], sx0, mins0[r]);
            mins1[r] = __builtin_fmaf(u.m[i], sx1, mins1[r]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        y0[r] = hsum8(_mm512_castps512_ps256(acc[r])) + mins0[r];
        if (y1) y1[r] = hsum8(_mm512_extractf32x8_ps(acc[r], 1)) + mins1[r];
    }
}

}  // namespace

void panel_rows_avx512(const UnpackedPanel& u, int n_rows, const BlockQ8_1* xq, int64_t n_tokens, float* y,
                       int64_t y_stride) {
    const int64_t n_blocks = u.n_blocks;
    for (int64_t t = 0; t < n_tokens; t += 2) {
        const bool pair = t + 1 < n_tokens;
        const BlockQ8_1* x0 = xq + t * n_blocks;
        const BlockQ8_1* x1 = pair ? x0 + n_blocks : x0;  // a last odd token: its second half unused
        float* y0 = y + t * y_stride;
        float* y1 = pair ? y0 + y_stride : nullptr;
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) pair_rows<4>(u, r, x0, x1, y0 + r, y1 ? y1 + r : nullptr);
        for (; r < n_rows; ++r) pair_rows<1>(u, r, x0, x1, y0 + r, y1 ? y1 + r : nullptr);
    }
}

}  // namespace kvchat::q4_1
