// Decode kernels over interleaved rows (interleaved_rows.h) at AVX2: each 64-byte vector of the
// layout is two 256-bit halves, rows 0-7 and rows 8-15, taken one half at a time. The lane sums
// come from maddubs + madd (exact here: at most 2 * 255 * 128 per pair), then the AVX-512
// kernels' float steps, so every level gives the same bits.
#include "engine/compute/interleaved_rows.h"

#include "engine/compute/quant_blocks.h"
#include "engine/compute/unroll.h"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace kvchat::interleaved {

namespace {

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256 load_scales8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Four products of unsigned u and signed x per 32-bit lane.
inline __m256i lane_sums(__m256i u, __m256i x) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)); }

// hsum_float_8's order: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).
inline __m256 lane_tree(const __m256* a) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[4], a[0]), _mm256_add_ps(a[6], a[2])),
                         _mm256_add_ps(_mm256_add_ps(a[5], a[1]), _mm256_add_ps(a[7], a[3])));
}

// Lane chain L's fifth bits in place: bit L of each mask byte moved to bit 4 (0x10). The 16-bit
// shifts move no bit across a byte that the AND keeps.
template <int L>
inline __m256i fifth_bits(__m256i masks) {
    __m256i m = masks;
    if constexpr (L < 4) m = _mm256_slli_epi16(masks, 4 - L);
    else if constexpr (L > 4) m = _mm256_srli_epi16(masks, L - 4);
    return _mm256_and_si256(m, _mm256_set1_epi8(0x10));
}

// Per token, this half of block b's weight scales times the token's block scale.
template <int NT>
inline void token_scales(__m256 dw, const Token8* const* x, size_t b, __m256* d) {
    for (int t = 0; t < NT; ++t) d[t] = _mm256_mul_ps(dw, _mm256_set1_ps(x[t]->d[b]));
}

// 32 bytes of packed nibbles: w[0] their low nibbles (lane chain k), w[1] their high ones (k + 4).
inline void nibbles(__m256i packed, __m256i* w) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    w[0] = _mm256_and_si256(packed, low);
    w[1] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
}

// Half h of a Q5_0 block's lane chains (values v, masks as in the layout): f(l, u) for each chain l
// (a compile-time constant) with its 5-bit weights u, 4 a lane.
template <class F>
inline void q5_0_chains(const uint8_t* v, __m256i masks, F&& f) {
    unroll<4>([&](auto k) {
        __m256i nib[2];
        nibbles(load256(v + 64 * k), nib);
        unroll<2>([&](auto e) {
            constexpr int l = decltype(k)::value + 4 * decltype(e)::value;
            f(std::integral_constant<int, l>{}, _mm256_or_si256(nib[e], fifth_bits<l>(masks)));
        });
    });
}

template <int NT>
void q8_0_group(const uint8_t* group, int64_t nb, const Token8* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q8_0);
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NT][8];
        for (int t = 0; t < NT; ++t)
            for (int l = 0; l < 8; ++l) acc[t][l] = _mm256_setzero_ps();
        for (size_t b = 0; b < n; ++b) {
            const BlockPlace at = block_place(parts, nb, b);
            __m256 d[NT];
            token_scales<NT>(load_scales8(group + at.d + 16 * h), x, b, d);
            const uint8_t* v = group + at.values + 32 * h;
            for (int l = 0; l < 8; ++l) {
                // Signed again, then |w| against x with w's sign (ggml's mul_sum_i8_pairs).
                const __m256i w = _mm256_xor_si256(load256(v + 64 * l), flip);
                const __m256i aw = _mm256_sign_epi8(w, w);
                for (int t = 0; t < NT; ++t) {
                    const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(x[t]->q + 32 * b + 4 * l)), w);
                    acc[t][l] = _mm256_fmadd_ps(d[t], _mm256_cvtepi32_ps(lane_sums(aw, xs)), acc[t][l]);
                }
            }
        }
        for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y[t] + 8 * h, lane_tree(acc[t]));
    }
}

template <int NT>
void q5_0_group(const uint8_t* group, int64_t nb, const Token8* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q5_0);
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NT][8];
        for (int t = 0; t < NT; ++t)
            for (int l = 0; l < 8; ++l) acc[t][l] = _mm256_setzero_ps();
        for (size_t b = 0; b < n; ++b) {
            const BlockPlace at = block_place(parts, nb, b);
            __m256 d[NT];
            token_scales<NT>(load_scales8(group + at.d + 16 * h), x, b, d);
            const uint8_t* v = group + at.values + 32 * h;
            q5_0_chains(v, load256(group + at.masks + 32 * h), [&](auto l, __m256i u) {
                for (int t = 0; t < NT; ++t) {
                    const __m256i s = _mm256_add_epi32(lane_sums(u, _mm256_set1_epi32(load_i32(x[t]->q + 32 * b + 4 * l))),
                                                       _mm256_set1_epi32(x[t]->start[8 * b + l]));
                    acc[t][l] = _mm256_fmadd_ps(d[t], _mm256_cvtepi32_ps(s), acc[t][l]);
                }
            });
        }
        for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y[t] + 8 * h, lane_tree(acc[t]));
    }
}

template <int NT>
void q4_1_group(const uint8_t* group, int64_t nb, const BlockQ8_1* const* x, float* const* y) {
    const size_t n = size_t(nb);
    const GroupParts parts = group_parts(TensorType::Q4_1);
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NT][8], msum[NT];
        for (int t = 0; t < NT; ++t) {
            msum[t] = _mm256_setzero_ps();
            for (int l = 0; l < 8; ++l) acc[t][l] = _mm256_setzero_ps();
        }
        for (size_t b = 0; b < n; ++b) {
            const BlockPlace at = block_place(parts, nb, b);
            const __m256 dw = load_scales8(group + at.d + 16 * h), mw = load_scales8(group + at.m + 16 * h);
            __m256 d[NT];
            for (int t = 0; t < NT; ++t) {
                d[t] = _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(x[t][b].d)));
                msum[t] = _mm256_add_ps(msum[t], _mm256_mul_ps(mw, _mm256_set1_ps(_cvtsh_ss(x[t][b].s))));
            }
            const uint8_t* v = group + at.values + 32 * h;
            for (int k = 0; k < 4; ++k) {
                __m256i w[2];
                nibbles(load256(v + 64 * k), w);
                for (int e = 0; e < 2; ++e) {
                    const int l = k + 4 * e;
                    for (int t = 0; t < NT; ++t) {
                        const __m256i s = lane_sums(w[e], _mm256_set1_epi32(load_i32(x[t][b].qs + 4 * l)));
                        acc[t][l] = _mm256_fmadd_ps(d[t], _mm256_cvtepi32_ps(s), acc[t][l]);
                    }
                }
            }
        }
        for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y[t] + 8 * h, _mm256_add_ps(lane_tree(acc[t]), msum[t]));
    }
}

// One token: both halves of a block before the next block, so the group's lines are read in one
// pass while the arithmetic runs. (q*_group<1> took all the blocks' first halves, then their
// second halves from L1, and the memory waited during the second pass: from memory, Q4_1
// 576 x 1536 ran at 18-21 GB/s with one thread against 27 now.) The 16 accumulators do not fit
// AVX2's 16 registers with the operands: half h's 8 are taken into `a` for body(b, at, h, a),
// which adds block b's lane chains to them, and put back; then y gets the lane trees.
template <class Body>
inline void one_token(int64_t nb, TensorType type, float* y, Body&& body) {
    const GroupParts parts = group_parts(type);
    __m256 acc[2][8];
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 8; ++l) acc[h][l] = _mm256_setzero_ps();
    for (size_t b = 0; b < size_t(nb); ++b) {
        const BlockPlace at = block_place(parts, nb, b);
        for (int h = 0; h < 2; ++h) {
            __m256 a[8];
            for (int l = 0; l < 8; ++l) a[l] = acc[h][l];
            body(b, at, h, a);
            for (int l = 0; l < 8; ++l) acc[h][l] = a[l];
        }
    }
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + 8 * h, lane_tree(acc[h]));
}

void q8_0_one(const uint8_t* group, int64_t nb, const Token8& x, float* y) {
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    one_token(nb, TensorType::Q8_0, y, [&](size_t b, const BlockPlace& at, int h, __m256* a) {
        const __m256 d = _mm256_mul_ps(load_scales8(group + at.d + 16 * h), _mm256_set1_ps(x.d[b]));
        const uint8_t* v = group + at.values + 32 * h;
        unroll<8>([&](auto l) {
            const __m256i w = _mm256_xor_si256(load256(v + 64 * l), flip);
            const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(x.q + 32 * b + 4 * l)), w);
            a[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane_sums(_mm256_sign_epi8(w, w), xs)), a[l]);
        });
    });
}

void q5_0_one(const uint8_t* group, int64_t nb, const Token8& x, float* y) {
    one_token(nb, TensorType::Q5_0, y, [&](size_t b, const BlockPlace& at, int h, __m256* a) {
        const __m256 d = _mm256_mul_ps(load_scales8(group + at.d + 16 * h), _mm256_set1_ps(x.d[b]));
        const uint8_t* v = group + at.values + 32 * h;
        q5_0_chains(v, load256(group + at.masks + 32 * h), [&](auto l, __m256i u) {
            const __m256i s = _mm256_add_epi32(lane_sums(u, _mm256_set1_epi32(load_i32(x.q + 32 * b + 4 * l))),
                                               _mm256_set1_epi32(x.start[8 * b + l]));
            a[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), a[l]);
        });
    });
}

void q4_1_one(const uint8_t* group, int64_t nb, const BlockQ8_1* x, float* y) {
    __m256 msum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    one_token(nb, TensorType::Q4_1, y, [&](size_t b, const BlockPlace& at, int h, __m256* a) {
        const __m256 d = _mm256_mul_ps(load_scales8(group + at.d + 16 * h), _mm256_set1_ps(_cvtsh_ss(x[b].d)));
        msum[h] = _mm256_add_ps(msum[h], _mm256_mul_ps(load_scales8(group + at.m + 16 * h), _mm256_set1_ps(_cvtsh_ss(x[b].s))));
        const uint8_t* v = group + at.values + 32 * h;
        unroll<4>([&](auto k) {
            __m256i w[2];
            nibbles(load256(v + 64 * k), w);
            unroll<2>([&](auto e) {
                constexpr int l = decltype(k)::value + 4 * decltype(e)::value;
                a[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane_sums(w[e], _mm256_set1_epi32(load_i32(x[b].qs + 4 * l)))), a[l]);
            });
        });
    });
    // The minimums' sums join after the lane trees, as in q4_1_group.
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + 8 * h, _mm256_add_ps(_mm256_loadu_ps(y + 8 * h), msum[h]));
}

}  // namespace

void q8_0_group_avx2(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1) {
    const Token8* x[2] = {&x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q8_0_group<2>(group, nb, x, y);
    else q8_0_one(group, nb, x0, y0);
}

void q5_0_group_avx2(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1) {
    const Token8* x[2] = {&x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q5_0_group<2>(group, nb, x, y);
    else q5_0_one(group, nb, x0, y0);
}

void q4_1_group_avx2(const uint8_t* group, int64_t nb, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0, float* y1) {
    const BlockQ8_1* x[2] = {x0, x1};
    float* y[2] = {y0, y1};
    if (x1) q4_1_group<2>(group, nb, x, y);
    else q4_1_one(group, nb, x0, y0);
}

}  // namespace kvchat::interleaved
