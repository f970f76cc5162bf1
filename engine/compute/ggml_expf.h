#pragma once
// ggml's vectorised exp (ggml_v_expf), shared by the softmax of attention in llama.cpp's order
// (attention_reference_order.cpp) and the CPU backend's SiLU (ggml_v_silu divides by 1 + it).
#include <immintrin.h>

#include <limits>

namespace kvchat {
// Internal linkage: a file compiled for AVX-512 that included this must not lend its copy to the
// AVX2 files at link time.
namespace {

// Power of two 2^e as a float, e in [-126, 127].
inline __m256 exp_pow2(__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); }

// ggml_v_expf of llama.cpp's AVX-512 build, lane for lane: the same polynomial and FMAs, and its
// final _mm512_scalef_ps(j, n) as two exact scalings (the second rounds once, as scalef does).
inline __m256 ggml_expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256i ni = _mm256_cvtps_epi32(_mm256_andnot_ps(big, n));  // |n| <= 192 where it counts
    const __m256i lo = _mm256_srai_epi32(ni, 1);
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, exp_pow2(lo)), exp_pow2(_mm256_sub_epi32(ni, lo)));
    // |n| > 192: 0 below, infinity above (x = -inf gives 0).
    const __m256 alt = _mm256_andnot_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ),
                                        _mm256_set1_ps(std::numeric_limits<float>::infinity()));
    return _mm256_blendv_ps(res, alt, big);
}

}  // namespace
}  // namespace kvchat
