#pragma once
// ggml's vectorised exp (ggml_v_expf), shared by the softmax of attention in llama.cpp's order
// (attention_reference_order.cpp) and the CPU backend's SiLU (ggml_v_silu divides by 1 + it).
#include <immintrin.h>

#include <limits>

namespace kvchat {
// Internal linkage: a file compiled for AVX-512 that included this must not lend its copy to the
// AVX2 files at link time.
namespace {

// The float vector operations ggml_expf_parts needs, for __m256 and __m512 (the __m512 ones are
// instantiated only in files built for AVX-512).
template <class V>
struct VecOps {
    static constexpr bool k512 = sizeof(V) == 64;
    static V set1(float f) {
        if constexpr (k512) return _mm512_set1_ps(f);
        else return _mm256_set1_ps(f);
    }
    static V fmadd(V a, V b, V c) {
        if constexpr (k512) return _mm512_fmadd_ps(a, b, c);
        else return _mm256_fmadd_ps(a, b, c);
    }
    static V fnmadd(V a, V b, V c) {
        if constexpr (k512) return _mm512_fnmadd_ps(a, b, c);
        else return _mm256_fnmadd_ps(a, b, c);
    }
    static V mul(V a, V b) {
        if constexpr (k512) return _mm512_mul_ps(a, b);
        else return _mm256_mul_ps(a, b);
    }
    static V sub(V a, V b) {
        if constexpr (k512) return _mm512_sub_ps(a, b);
        else return _mm256_sub_ps(a, b);
    }
};

// ggml_v_expf's reduction and polynomial at either vector width: n = round(x / ln 2) and
// j = e^(x - n ln 2), so that e^x = j 2^n; each width then scales j by 2^n (and handles
// |n| > 192) its own way.
template <class V>
inline void ggml_expf_parts(V x, V& n, V& j) {
    using Ops = VecOps<V>;
    const V r = Ops::set1(0x1.8p23f);
    const V z = Ops::fmadd(x, Ops::set1(0x1.715476p+0f), r);
    n = Ops::sub(z, r);
    const V b = Ops::fnmadd(n, Ops::set1(0x1.7f7d1cp-20f), Ops::fnmadd(n, Ops::set1(0x1.62e4p-1f), x));
    const V u = Ops::mul(b, b);
    j = Ops::fmadd(Ops::fmadd(Ops::fmadd(Ops::set1(0x1.0e4020p-7f), b, Ops::set1(0x1.573e2ep-5f)), u,
                              Ops::fmadd(Ops::set1(0x1.555e66p-3f), b, Ops::set1(0x1.fffdb6p-2f))),
                   u, Ops::fmadd(Ops::set1(0x1.ffffecp-1f), b, Ops::set1(1.0f)));
}

// Power of two 2^e as a float, e in [-126, 127].
inline __m256 exp_pow2(__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); }

// ggml_v_expf of llama.cpp's AVX-512 build, lane for lane: the same polynomial and FMAs, and its
// final _mm512_scalef_ps(j, n) as two exact scalings (the second rounds once, as scalef does).
inline __m256 ggml_expf8(__m256 x) {
    __m256 n, j;
    ggml_expf_parts(x, n, j);
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
