// Decode kernels over interleaved rows (interleaved_rows.h) at AVX-512 VNNI, called only after a
// run-time CPU check. Lane r of every register is row r of the group; accumulator l of a token
// holds lane l of what the plain kernels keep per row (the exact integer of columns 4l..4l+3 of
// each block, times dw * dx, fused into the lane's sum), so the end is hsum_float_8's tree done
// across the eight accumulators: the same bits as the plain layout, with no per-row shuffles.
// GCC 12 reports the _mm512_undefined_* pass-through operands inside many AVX-512 intrinsics as
// maybe-uninitialized (GCC bug 105593, fixed in 13); the pragma must precede the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/interleaved_rows.h"

#include "engine/compute/quant_blocks.h"
#include "engine/compute/unroll.h"

#include <immintrin.h>

#include <cstring>

namespace kvchat::interleaved {

namespace {

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline __m512 load_scales(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// hsum_float_8's order: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).
inline __m512 lane_tree(const __m512* a) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[4], a[0]), _mm512_add_ps(a[6], a[2])),
                         _mm512_add_ps(_mm512_add_ps(a[5], a[1]), _mm512_add_ps(a[7], a[3])));
}

// Per token, block b's weight scales times the token's block scale.
template <int NT>
inline void token_scales(__m512 dw, const Token8* const* x, size_t b, __m512* d) {
    for (int t = 0; t < NT; ++t) d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(x[t]->d[b]));
}

// Lane chain l of block b for every token: the unsigned weights w (4 bytes a lane) against the
// token's 4 bytes, from the chain start that cancels the weights' offset, times d, into acc.
template <int NT, int L, class Acc>
inline void token_chains(__m512i w, const Token8* const* x, size_t b, const __m512* d, Acc& acc) {
    unroll<NT>([&](auto t) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(x[t]->start[8 * b + L]), w,
                                              _mm512_set1_epi32(load_i32(x[t]->q + 32 * b + 4 * L)));
        __m512* a = acc.template at<decltype(t)::value>();
        a[L] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(s), a[L]);
    });
}

// The eight lane accumulators of each token, zeroed. One array per token: GCC 12 keeps a single
// [NT][8] array in memory for NT = 2 (storing all sixteen registers every block).
template <int NT>
struct TokenAcc;
template <>
struct TokenAcc<1> {
    __m512 a0[8] = {};
    template <int T>
    __m512* at() { return a0; }
};
template <>
struct TokenAcc<2> {
    __m512 a0[8] = {}, a1[8] = {};
    template <int T>
    __m512* at() {
        if constexpr (T == 0) return a0;
        else return a1;
    }
};

// A 64-byte vector of packed nibbles: w[0] its low nibbles (lane chain k), w[1] its high ones (k + 4).
inline void nibbles(__m512i packed, __m512i* w) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    w[0] = _mm512_and_si512(packed, low);
    w[1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
}

template <int NT>
void q8_0_group(const uint8_t* group, int64_t nb, const Token8* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q8_0);
    TokenAcc<NT> acc;
    for (size_t b = 0; b < n; ++b) {
        const BlockPlace at = block_place(parts, nb, b);
        __m512 d[NT];
        token_scales<NT>(load_scales(group + at.d), x, b, d);
        const uint8_t* v = group + at.values;
        unroll<8>([&](auto l) { token_chains<NT, decltype(l)::value>(_mm512_loadu_si512(v + 64 * l), x, b, d, acc); });
    }
    unroll<NT>([&](auto t) { _mm512_storeu_ps(y[t], lane_tree(acc.template at<decltype(t)::value>())); });
}

template <int NT>
void q5_0_group(const uint8_t* group, int64_t nb, const Token8* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q5_0);
    const __m512i fifth = _mm512_set1_epi8(0x10);
    TokenAcc<NT> acc;
    for (size_t b = 0; b < n; ++b) {
        const BlockPlace at = block_place(parts, nb, b);
        __m512 d[NT];
        token_scales<NT>(load_scales(group + at.d), x, b, d);
        const uint8_t* v = group + at.values;
        const __m512i masks = _mm512_loadu_si512(group + at.masks);
        unroll<4>([&](auto k) {
            constexpr int K = decltype(k)::value;
            __m512i w[2];
            nibbles(_mm512_loadu_si512(v + 64 * k), w);
            // Chain K's fifth bits are bit K of the mask bytes, chain K + 4's bit K + 4: moved to
            // bit 4 (0x10) and or-ed into the nibbles (0xF8: a | (b & c)).
            const __m512i lo = _mm512_slli_epi16(masks, 4 - K);
            const __m512i hi = K == 0 ? masks : _mm512_srli_epi16(masks, K);
            w[0] = _mm512_ternarylogic_epi32(w[0], lo, fifth, 0xF8);
            w[1] = _mm512_ternarylogic_epi32(w[1], hi, fifth, 0xF8);
            token_chains<NT, K>(w[0], x, b, d, acc);
            token_chains<NT, K + 4>(w[1], x, b, d, acc);
        });
    }
    unroll<NT>([&](auto t) { _mm512_storeu_ps(y[t], lane_tree(acc.template at<decltype(t)::value>())); });
}

template <int NT>
void q4_1_group(const uint8_t* group, int64_t nb, const BlockQ8_1* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q4_1);
    TokenAcc<NT> acc;
    __m512 msum[NT];
    for (int t = 0; t < NT; ++t) msum[t] = _mm512_setzero_ps();
    for (size_t b = 0; b < n; ++b) {
        const BlockPlace at = block_place(parts, nb, b);
        const __m512 dw = load_scales(group + at.d), mw = load_scales(group + at.m);
        __m512 d[NT];
        for (int t = 0; t < NT; ++t) {
            d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(x[t][b].d)));
            // The product of two fp16 values is exact: the add is the plain kernels' fma.
            msum[t] = _mm512_add_ps(msum[t], _mm512_mul_ps(mw, _mm512_set1_ps(_cvtsh_ss(x[t][b].s))));
        }
        const uint8_t* v = group + at.values;
        unroll<4>([&](auto k) {
            __m512i w[2];
            nibbles(_mm512_loadu_si512(v + 64 * k), w);
            unroll<2>([&](auto h) {
                constexpr int l = decltype(k)::value + 4 * decltype(h)::value;
                unroll<NT>([&](auto t) {
                    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[h], _mm512_set1_epi32(load_i32(x[t][b].qs + 4 * l)));
                    __m512* a = acc.template at<decltype(t)::value>();
                    a[l] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(s), a[l]);
                });
            });
        });
    }
    unroll<NT>([&](auto t) {
        _mm512_storeu_ps(y[t], _mm512_add_ps(lane_tree(acc.template at<decltype(t)::value>()), msum[t]));
    });
}

}  // namespace

void q8_0_group_avx512(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1) {
    const Token8* x[2] = {&x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q8_0_group<2>(group, nb, x, y);
    else q8_0_group<1>(group, nb, x, y);
}

void q5_0_group_avx512(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1) {
    const Token8* x[2] = {&x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q5_0_group<2>(group, nb, x, y);
    else q5_0_group<1>(group, nb, x, y);
}

void q4_1_group_avx512(const uint8_t* group, int64_t nb, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0,
                       float* y1) {
    const BlockQ8_1* x[2] = {x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q4_1_group<2>(group, nb, x, y);
    else q4_1_group<1>(group, nb, x, y);
}

}  // namespace kvchat::interleaved
