// AVX-512 VNNI kernels, called only after a run-time CPU check. This file must not instantiate
// templates that other files also instantiate (std containers, algorithms): the linker keeps
// one copy, and it could be this file's AVX-512 one.
// GCC 12 reports the _mm512_undefined_* pass-through operands inside many AVX-512 intrinsics as
// maybe-uninitialized (GCC bug 105593, fixed in 13); the pragma must precede the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/matmul_kernels.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/weight_stream.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <utility>

namespace kvchat::kernels {
namespace avx512 {
namespace {

// vpdpbusd adds 4 u8*s8 products per int32 lane without saturation.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i s) {
    return _mm256_dpbusd_epi32(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
}
inline __m256i madd_scaled(__m256i acc, __m256i p, __m256i k) { return _mm256_dpwssd_epi32(acc, p, k); }

#include "engine/compute/fused_dot.inc"
#include "engine/compute/reference_order.inc"


inline __m512 to_float(__m512i v) { return _mm512_cvtepi32_ps(v); }

// --- fused kernels for the 32-element blocks, 512-bit ------------------------------------
// The 256-bit kernels in fused_dot.inc spend most of their time on each block's scale (an fp16
// load, convert, multiply, broadcast). Here 16 blocks' scales come from one gather and one
// convert, two blocks share each vpdpbusd, and values are unsigned (q + z) so no sign fix-ups
// are needed: the chain starts from -z * sum(x), taken from the activations' neg_sum8.

// The weight values of one block (one) or two consecutive blocks (pair) as unsigned bytes;
// kShift: log2 of the offset z they carry.
struct Q8_0Values {
    static constexpr int kShift = 7;
    static __m256i one(const BlockQ8_0& b) { return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(char(0x80))); }
    static __m512i pair(const BlockQ8_0& b0, const BlockQ8_0& b1) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(one(b0)), one(b1), 1);
    }
};

// Nibbles of two blocks in one register, in x's order: low then high nibbles of the first block,
// then of the second.
inline __m512i nibbles_64(const uint8_t* qs0, const uint8_t* qs1) {
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0))),
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    return _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(15));
}

struct Q4_0Values {
    static constexpr int kShift = 3;
    static __m256i one(const BlockQ4_0& b) { return nibbles_32(b.qs); }
    static __m512i pair(const BlockQ4_0& b0, const BlockQ4_0& b1) { return nibbles_64(b0.qs, b1.qs); }
};
struct Q5_0Values {
    static constexpr int kShift = 4;
    static __m256i one(const BlockQ5_0& b) {
        const __mmask32 high = _cvtu32_mask32(load_u32(b.qh));
        return _mm256_or_si256(nibbles_32(b.qs), _mm256_maskz_mov_epi8(high, _mm256_set1_epi8(0x10)));
    }
    static __m512i pair(const BlockQ5_0& b0, const BlockQ5_0& b1) {
        const __mmask64 high = _cvtu64_mask64(uint64_t(load_u32(b0.qh)) | (uint64_t(load_u32(b1.qh)) << 32));
        return _mm512_or_si512(nibbles_64(b0.qs, b1.qs), _mm512_maskz_mov_epi8(high, _mm512_set1_epi8(0x10)));
    }
};

template <class Block, class Values>
void fused_unsigned_32(const void* rows, size_t stride, int64_t n_rows, int64_t cols, const TokenActivations& x,
                       float* y) {
    const int64_t nb = cols / 32;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i scale_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(int(sizeof(Block))));
    // Lanes 0-7 take the first block of a pair, 8-15 the second.
    const __m512i pair_lanes = _mm512_srli_epi32(lane, 3);
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto* b = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(rows) + r * stride);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t c = 0; c < nb; c += 16) {
            const int n = int(nb - c < 16 ? nb - c : 16);
            const __mmask16 present = __mmask16((1u << n) - 1);
            // The dword at each block's start holds its fp16 scale in the low half.
            const __m512i raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, scale_offsets, &b[c], 1);
            const __m512 scales = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)), _mm512_maskz_loadu_ps(present, x.d + c));
            __m512i pair = pair_lanes;
            for (int j = 0; j < n; j += 2, pair = _mm512_add_epi32(pair, _mm512_set1_epi32(2))) {
                prefetch_ahead(&b[c + j]);
                const int8_t* xq = x.q + (c + j) * 32;
                const int32_t* bias = x.neg_sum8 + (c + j) * 8;
                __m512i u, xv, start;
                if (j + 1 < n) {
                    u = Values::pair(b[c + j], b[c + j + 1]);
                    xv = _mm512_loadu_si512(xq);
                    start = _mm512_loadu_si512(bias);
                } else {
                    u = _mm512_zextsi256_si512(Values::one(b[c + j]));
                    xv = _mm512_zextsi256_si512(load256(xq));
                    start = _mm512_zextsi256_si512(load256(bias));
                }
                const __m512i p = _mm512_dpbusd_epi32(_mm512_slli_epi32(start, Values::kShift), u, xv);
                acc = _mm512_fmadd_ps(to_float(p), _mm512_permutexvar_ps(pair, scales), acc);
            }
        }
        y[r] = _mm512_reduce_add_ps(acc);
    }
}

inline int32_t load_i32(const int8_t* p) {
    int32_t x;
    std::memcpy(&x, p, 4);
    return x;
}

// NT tokens against the 16 rows of a panel whose values are stored as v + 128. Per group, the
// G/4 weight vectors stay in registers while every token runs its own vpdpbusd chain, which
// starts from -128 * sum(x) so the +128 cancels. Then one convert and FMA per token fold in
// the row scales times the token's activation scale.
template <int NT, int G, bool MIN>
void panel_tile(const uint8_t* pq, const float* ps, const float* pm, int64_t groups, const int8_t* xq,
                int64_t x_stride, const float* gd, const float* gds, const int32_t* gb, int64_t g_stride, float* y,
                int64_t y_stride, int n_rows) {
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
        __m512i w[G / 4];
        for (int k = 0; k < G / 4; ++k) w[k] = _mm512_loadu_si512(pq + (g * (G / 4) + k) * 64);
        const __m512 a = _mm512_loadu_ps(ps + g * kPanelRows);
        for (int t = 0; t < NT; ++t) {
            const int8_t* x = xq + t * x_stride + g * G;
            __m512i s = _mm512_set1_epi32(gb[t * g_stride + g]);
            for (int k = 0; k < G / 4; ++k) s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(load_i32(x + 4 * k)));
            acc[t] = _mm512_fmadd_ps(to_float(s), _mm512_mul_ps(a, _mm512_set1_ps(gd[t * g_stride + g])), acc[t]);
        }
        if constexpr (MIN) {
            const __m512 m = _mm512_loadu_ps(pm + g * kPanelRows);
            for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(gds[t * g_stride + g]), acc[t]);
        }
    }
    const __mmask16 mask = __mmask16((1u << n_rows) - 1);
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

using TileFn = void (*)(const uint8_t*, const float*, const float*, int64_t, const int8_t*, int64_t, const float*,
                       const float*, const int32_t*, int64_t, float*, int64_t, int);

// Register budget (32 zmm): G/4 weight vectors + up to this many accumulators + temporaries.
template <int G>
constexpr int kMaxTile = G == 32 ? 12 : 16;

// panel_tile<1..kMaxTile>, indexed by token count - 1.
template <int G, bool MIN>
struct Tiles {
    TileFn fn[kMaxTile<G>];
};
template <int G, bool MIN, int... I>
constexpr Tiles<G, MIN> make_tiles(std::integer_sequence<int, I...>) {
    return {{&panel_tile<I + 1, G, MIN>...}};
}

template <int G, bool MIN>
void panel_product_g(const void* panel, int64_t cols, const QuantizedActivations& x, const ActivationGroups& ag,
                     int64_t t0, int64_t t1, float* y, int64_t y_stride, int n_rows) {
    static constexpr Tiles<G, MIN> tiles = make_tiles<G, MIN>(std::make_integer_sequence<int, kMaxTile<G>>());
    const int64_t groups = cols / G;
    const auto* pq = static_cast<const uint8_t*>(panel);
    const auto* ps = reinterpret_cast<const float*>(pq + cols * kPanelRows);
    const float* pm = ps + groups * kPanelRows;
    const int64_t gs = ag.n_groups;
    for (int64_t t = t0; t < t1; t += kMaxTile<G>) {
        const int nt = int(t1 - t < kMaxTile<G> ? t1 - t : kMaxTile<G>);
        tiles.fn[nt - 1](pq, ps, pm, groups, x.q + t * x.cols, cols, ag.d + t * gs, ag.d_sum + t * gs, ag.bias + t * gs, gs,
                         y + t * y_stride, y_stride, n_rows);
    }
}

void panel_product(const Int8Layout& layout, const void* panel, int64_t cols, const QuantizedActivations& x,
                   const ActivationGroups& g, int64_t t0, int64_t t1, float* y, int64_t y_stride, int n_rows) {
    if (layout.group == 32) {
        if (layout.has_min) panel_product_g<32, true>(panel, cols, x, g, t0, t1, y, y_stride, n_rows);
        else panel_product_g<32, false>(panel, cols, x, g, t0, t1, y, y_stride, n_rows);
    } else {
        if (layout.has_min) panel_product_g<16, true>(panel, cols, x, g, t0, t1, y, y_stride, n_rows);
        else panel_product_g<16, false>(panel, cols, x, g, t0, t1, y, y_stride, n_rows);
    }
}

// --- float weights -------------------------------------------------------------------------

template <TensorType T>
inline __m512 load_weights16(const uint8_t* row, int64_t c, __mmask16 m) {
    if constexpr (T == TensorType::F32) {
        return _mm512_maskz_loadu_ps(m, row + 4 * c);
    } else if constexpr (T == TensorType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * c));
    } else {
        // bf16 is the top half of an fp32: widen and shift.
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * c)), 16));
    }
}

// R rows x NT tokens: each converted weight vector serves NT tokens, each x vector R rows. The
// column tail uses masked loads.
template <TensorType T, int R, int NT>
void float_tile(const uint8_t* w, size_t stride, int64_t cols, const float* x, float* y, int64_t y_stride) {
    __m512 acc[R][NT];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1);
        __m512 xv[NT];
        for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * cols + c);
        for (int r = 0; r < R; ++r) {
            const __m512 wv = load_weights16<T>(w + r * stride, c, m);
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < NT; ++t) y[t * y_stride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <TensorType T>
void float_rows_t(const uint8_t* rows, size_t stride, int64_t n_rows, int64_t cols, const float* x, int64_t n_tokens,
                  float* y, int64_t y_stride) {
    constexpr int kTokens = 4;
    for (int64_t t = 0; t < n_tokens; t += kTokens) {
        const int64_t nt = n_tokens - t < kTokens ? n_tokens - t : kTokens;
        const float* xt = x + t * cols;
        float* yt = y + t * y_stride;
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4) {
            const uint8_t* w = rows + r * stride;
            switch (nt) {
                case 4: float_tile<T, 4, 4>(w, stride, cols, xt, yt + r, y_stride); break;
                case 3: float_tile<T, 4, 3>(w, stride, cols, xt, yt + r, y_stride); break;
                case 2: float_tile<T, 4, 2>(w, stride, cols, xt, yt + r, y_stride); break;
                default: float_tile<T, 4, 1>(w, stride, cols, xt, yt + r, y_stride); break;
            }
        }
        for (; r < n_rows; ++r) {
            const uint8_t* w = rows + r * stride;
            switch (nt) {
                case 4: float_tile<T, 1, 4>(w, stride, cols, xt, yt + r, y_stride); break;
                case 3: float_tile<T, 1, 3>(w, stride, cols, xt, yt + r, y_stride); break;
                case 2: float_tile<T, 1, 2>(w, stride, cols, xt, yt + r, y_stride); break;
                default: float_tile<T, 1, 1>(w, stride, cols, xt, yt + r, y_stride); break;
            }
        }
    }
}

void float_rows(TensorType t, const uint8_t* rows, size_t stride, int64_t n_rows, int64_t cols, const float* x,
                int64_t n_tokens, float* y, int64_t y_stride) {
    switch (t) {
        case TensorType::F32: return float_rows_t<TensorType::F32>(rows, stride, n_rows, cols, x, n_tokens, y, y_stride);
        case TensorType::F16: return float_rows_t<TensorType::F16>(rows, stride, n_rows, cols, x, n_tokens, y, y_stride);
        default: return float_rows_t<TensorType::BF16>(rows, stride, n_rows, cols, x, n_tokens, y, y_stride);
    }
}

// --- llama.cpp's order, 512-bit ----------------------------------------------------------
// The same values as reference_order.inc's kernels (see matmul_kernels.h), faster.

// Q5_0 / Q8_0: two weight rows per register, lanes 0-7 row r and 8-15 row r + 1, each lane the
// integer of 4 columns of one block (ggml's 8 lanes per row). vpdpbusd takes the activations
// as the unsigned operand (q + 128) and the weights signed; each lane's chain starts from
// -128 times the lane's weight sum, so it ends at llama.cpp's exact integer.
// Panel of 16 rows: per block b and row pair p, 64 bytes of values, 16 int32 chain starts and 16
// floats of scales [dw(r) x 8, dw(r + 1) x 8].
struct Blocks32Panel {
    int8_t* vals;
    int32_t* start;
    float* scl;
    Blocks32Panel(void* scratch, int64_t nb) {
        vals = static_cast<int8_t*>(scratch);
        start = reinterpret_cast<int32_t*>(vals + nb * 8 * 64);
        scl = reinterpret_cast<float*>(start + nb * 8 * 16);
    }
};

template <class Block>
void pack_blocks32(const uint8_t* rows, size_t stride, int n_rows, int64_t nb, const Blocks32Panel& k) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int p = 0; p < kOrderedRows / 2; ++p) {
        const int r0 = 2 * p, r1 = 2 * p + 1;
        const Block* b0 = r0 < n_rows ? reinterpret_cast<const Block*>(rows + r0 * stride) : nullptr;
        const Block* b1 = r1 < n_rows ? reinterpret_cast<const Block*>(rows + r1 * stride) : nullptr;
        for (int64_t b = 0; b < nb; ++b) {
            if (b0) prefetch_ahead(&b0[b]);
            if (b1) prefetch_ahead(&b1[b]);
            const __m256i v0 = b0 ? signed_values(b0[b]) : _mm256_setzero_si256();
            const __m256i v1 = b1 ? signed_values(b1[b]) : _mm256_setzero_si256();
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(v0), v1, 1);
            const int64_t at = b * 8 + p;
            _mm512_store_si512(k.vals + at * 64, v);
            const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, v);
            _mm512_store_si512(k.start + at * 16, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
            const __m256 s0 = _mm256_set1_ps(b0 ? half(b0[b].d) : 0.0f), s1 = _mm256_set1_ps(b1 ? half(b1[b].d) : 0.0f);
            _mm512_store_ps(k.scl + at * 16, _mm512_insertf32x8(_mm512_castps256_ps512(s0), s1, 1));
        }
    }
}

// Row pairs [p0, p0 + NP) against tokens [t, t + NT).
template <int NP, int NT>
void blocks32_tile(const Blocks32Panel& k, int64_t nb, int p0, const QuantizedActivations& x, int64_t t, float* y,
                   int64_t y_stride, int n_rows) {
    __m512 acc[NP][NT];
    for (int p = 0; p < NP; ++p)
        for (int j = 0; j < NT; ++j) acc[p][j] = _mm512_setzero_ps();
    const int8_t* xq[NT];
    const float* xd[NT];
    for (int j = 0; j < NT; ++j) xq[j] = x.q_row(t + j), xd[j] = x.d_row(t + j);
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * 8 + p0;
        __m512i w[NP];
        __m512 s[NP];
        for (int p = 0; p < NP; ++p) {
            w[p] = _mm512_load_si512(k.vals + (at + p) * 64);
            s[p] = _mm512_load_ps(k.scl + (at + p) * 16);
        }
        for (int j = 0; j < NT; ++j) {
            const __m512i xu = _mm512_xor_si512(_mm512_broadcast_i64x4(load256(xq[j] + 32 * b)), flip);
            const __m512 dx = _mm512_set1_ps(xd[j][b]);
            for (int p = 0; p < NP; ++p) {
                const __m512i lanes = _mm512_dpbusd_epi32(_mm512_load_si512(k.start + (at + p) * 16), xu, w[p]);
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(s[p], dx), to_float(lanes), acc[p][j]);
            }
        }
    }
    for (int p = 0; p < NP; ++p) {
        const int r = 2 * (p0 + p);
        for (int j = 0; j < NT; ++j) {
            float* yt = y + (t + j) * y_stride;
            if (r < n_rows) yt[r] = hsum(_mm512_castps512_ps256(acc[p][j]));
            if (r + 1 < n_rows) yt[r + 1] = hsum(_mm512_extractf32x8_ps(acc[p][j], 1));
        }
    }
}

template <int NP>
void blocks32_rows(const Blocks32Panel& k, int64_t nb, int p0, const QuantizedActivations& x, int64_t t0, int64_t t1,
                   float* y, int64_t y_stride, int n_rows) {
    constexpr int kTokens = 4;
    int64_t t = t0;
    for (; t + kTokens <= t1; t += kTokens) blocks32_tile<NP, kTokens>(k, nb, p0, x, t, y, y_stride, n_rows);
    switch (t1 - t) {
        case 3: blocks32_tile<NP, 3>(k, nb, p0, x, t, y, y_stride, n_rows); break;
        case 2: blocks32_tile<NP, 2>(k, nb, p0, x, t, y, y_stride, n_rows); break;
        case 1: blocks32_tile<NP, 1>(k, nb, p0, x, t, y, y_stride, n_rows); break;
        default: break;
    }
}

// One or two tokens (decode): weights streamed once, so no panel. 256-bit vectors, R rows at a
// time, as reference_order.inc's rows32_streamed, with AVX-512's cheaper steps: values unsigned
// (q + z), so one vpdpbusd per block whose chain starts from -z times the token's lane sums
// (neg_sum4) replaces the two sign fix-ups; Q5_0's fifth bits come from a mask register. (A
// 512-bit version with two rows per register and gathered scales ran at two thirds of this
// speed on AMD Zen 5.)
struct Q8_0Bytes {
    static constexpr int kShift = 7;
    static __m256i get(const BlockQ8_0& b) { return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(char(0x80))); }
};
struct Q5_0Bytes {
    static constexpr int kShift = 4;
    static __m256i get(const BlockQ5_0& b) {
        // Low nibbles to bytes 0-15, high nibbles to bytes 16-31, then + 16 where bit 4 is set.
        const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
        const __m256i nib = _mm256_and_si256(_mm256_srlv_epi16(both, _mm256_setr_epi64x(0, 0, 0x0004000400040004, 0x0004000400040004)),
                                             _mm256_set1_epi8(15));
        return _mm256_mask_add_epi8(nib, _cvtu32_mask32(load_u32(b.qh)), nib, _mm256_set1_epi8(16));
    }
};

// The fp16 scales of block i of R rows, in lanes 0..R-1 (R <= 8). The lane index must be a
// constant even where nothing is unrolled (-O0, the sanitizer build), hence the pack expansion.
template <int R, class Block>
inline __m128i block_scales(const Block* const* b, int64_t i) {
    __m128i raw = _mm_cvtsi32_si128(b[0][i].d);
    [&]<int... J>(std::integer_sequence<int, J...>) {
        ((raw = _mm_insert_epi16(raw, b[J + 1][i].d, J + 1)), ...);
    }(std::make_integer_sequence<int, R - 1>{});
    return raw;
}

template <class Block, class Values, int R, int NT>
void rows32_unsigned(const uint8_t* rows, size_t stride, int64_t nb, const QuantizedActivations& x, int64_t t, float* y,
                     int64_t y_stride) {
    const Block* b[R];
    for (int j = 0; j < R; ++j) b[j] = reinterpret_cast<const Block*>(rows + j * stride);
    const int8_t* xq[NT];
    const float* xd[NT];
    const int32_t* xs[NT];
    for (int k = 0; k < NT; ++k) xq[k] = x.q_row(t + k), xd[k] = x.d_row(t + k), xs[k] = x.neg_sum4_row(t + k);
    __m256 acc[R][NT];
    for (int j = 0; j < R; ++j)
        for (int k = 0; k < NT; ++k) acc[j][k] = _mm256_setzero_ps();
    constexpr int kStep = R * int(sizeof(Block));
    const char* next = reinterpret_cast<const char*>(rows + R * stride);
    for (int64_t i = 0; i < nb; ++i) {
        for (int o = 0; o < kStep; o += 64) request_weights(next + i * kStep + o);
        __m256i xv[NT], start[NT];
        for (int k = 0; k < NT; ++k) {
            xv[k] = load256(xq[k] + 32 * i);
            start[k] = _mm256_slli_epi32(load256(xs[k] + 8 * i), Values::kShift);
        }
        const __m128 dw = _mm_cvtph_ps(block_scales<R>(b, i));
        __m256 d[NT];
        for (int k = 0; k < NT; ++k) d[k] = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_set1_ps(xd[k][i])));
        for (int j = 0; j < R; ++j) {
            const __m256i u = Values::get(b[j][i]);
            for (int k = 0; k < NT; ++k) {
                const __m256i s = _mm256_dpbusd_epi32(start[k], u, xv[k]);
                acc[j][k] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(d[k], _mm256_set1_epi32(j)), _mm256_cvtepi32_ps(s), acc[j][k]);
            }
        }
    }
    for (int j = 0; j < R; ++j)
        for (int k = 0; k < NT; ++k) y[(t + k) * y_stride + j] = hsum(acc[j][k]);
}

// The same with two rows per 512-bit register (lanes 0-7 row 2p, 8-15 row 2p + 1), R rows: on
// Zen 5, 8 rows at a time run ~12% faster than 4 rows in 256-bit registers (the block scales'
// inserts and converts are shared by more rows); the 256-bit kernel takes the rest.
template <class Block, class Values, int R, int NT>
void rows32_unsigned_512(const uint8_t* rows, size_t stride, int64_t nb, const QuantizedActivations& x, int64_t t,
                         float* y, int64_t y_stride) {
    static_assert(R % 2 == 0 && R <= 8);
    constexpr int P = R / 2;
    const Block* b[R];
    for (int j = 0; j < R; ++j) b[j] = reinterpret_cast<const Block*>(rows + j * stride);
    const int8_t* xq[NT];
    const float* xd[NT];
    const int32_t* xs[NT];
    for (int k = 0; k < NT; ++k) xq[k] = x.q_row(t + k), xd[k] = x.d_row(t + k), xs[k] = x.neg_sum4_row(t + k);
    __m512 acc[P][NT];
    for (int p = 0; p < P; ++p)
        for (int k = 0; k < NT; ++k) acc[p][k] = _mm512_setzero_ps();
    __m512i pick[P];
    for (int p = 0; p < P; ++p)
        pick[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
    constexpr int kStep = R * int(sizeof(Block));
    const char* next = reinterpret_cast<const char*>(rows + R * stride);
    for (int64_t i = 0; i < nb; ++i) {
        for (int o = 0; o < kStep; o += 64) request_weights(next + i * kStep + o);
        __m512i xv[NT], start[NT];
        for (int k = 0; k < NT; ++k) {
            xv[k] = _mm512_broadcast_i64x4(load256(xq[k] + 32 * i));
            start[k] = _mm512_slli_epi32(_mm512_broadcast_i64x4(load256(xs[k] + 8 * i)), Values::kShift);
        }
        const __m256 dw = _mm256_cvtph_ps(block_scales<R>(b, i));
        __m512 d[NT];
        for (int k = 0; k < NT; ++k) d[k] = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_set1_ps(xd[k][i])));
        for (int p = 0; p < P; ++p) {
            const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(Values::get(b[2 * p][i])), Values::get(b[2 * p + 1][i]), 1);
            for (int k = 0; k < NT; ++k) {
                const __m512i s = _mm512_dpbusd_epi32(start[k], u, xv[k]);
                acc[p][k] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[p], d[k]), _mm512_cvtepi32_ps(s), acc[p][k]);
            }
        }
    }
    for (int p = 0; p < P; ++p)
        for (int k = 0; k < NT; ++k) {
            y[(t + k) * y_stride + 2 * p] = hsum(_mm512_castps512_ps256(acc[p][k]));
            y[(t + k) * y_stride + 2 * p + 1] = hsum(_mm512_extractf32x8_ps(acc[p][k], 1));
        }
}

template <class Block, class Values, int NT>
void rows32_unsigned_few(const uint8_t* rows, size_t stride, int n_rows, int64_t nb, const QuantizedActivations& x,
                         int64_t t, float* y, int64_t y_stride) {
    int r = 0;
    for (; r + 8 <= n_rows; r += 8) rows32_unsigned_512<Block, Values, 8, NT>(rows + r * stride, stride, nb, x, t, y + r, y_stride);
    for (; r + 4 <= n_rows; r += 4) rows32_unsigned<Block, Values, 4, NT>(rows + r * stride, stride, nb, x, t, y + r, y_stride);
    switch (n_rows - r) {
        case 3: rows32_unsigned<Block, Values, 3, NT>(rows + r * stride, stride, nb, x, t, y + r, y_stride); break;
        case 2: rows32_unsigned<Block, Values, 2, NT>(rows + r * stride, stride, nb, x, t, y + r, y_stride); break;
        case 1: rows32_unsigned<Block, Values, 1, NT>(rows + r * stride, stride, nb, x, t, y + r, y_stride); break;
        default: break;
    }
}

template <class Block, class Values>
void blocks32_few(const uint8_t* rows, size_t stride, int n_rows, int64_t nb, const QuantizedActivations& x, int64_t t0,
                  int64_t t1, float* y, int64_t y_stride) {
    if (t1 - t0 == 2) rows32_unsigned_few<Block, Values, 2>(rows, stride, n_rows, nb, x, t0, y, y_stride);
    else rows32_unsigned_few<Block, Values, 1>(rows, stride, n_rows, nb, x, t0, y, y_stride);
}

void ordered_blocks32_512(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                          const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride,
                          void* scratch) {
    const int64_t nb = cols / 32;
    if (t1 - t0 <= 2) {
        if (t == TensorType::Q5_0) blocks32_few<BlockQ5_0, Q5_0Bytes>(rows, stride, n_rows, nb, x, t0, t1, y, y_stride);
        else blocks32_few<BlockQ8_0, Q8_0Bytes>(rows, stride, n_rows, nb, x, t0, t1, y, y_stride);
        return;
    }
    const Blocks32Panel k(scratch, nb);
    if (t == TensorType::Q5_0) pack_blocks32<BlockQ5_0>(rows, stride, n_rows, nb, k);
    else pack_blocks32<BlockQ8_0>(rows, stride, n_rows, nb, k);
    blocks32_rows<4>(k, nb, 0, x, t0, t1, y, y_stride, n_rows);
    if (n_rows > 8) blocks32_rows<4>(k, nb, 4, x, t0, t1, y, y_stride, n_rows);
}

// Q4_K and Q6_K for a batch: a panel of 16 rows in the lanes, values interleaved so that one
// 64-byte load holds 4 columns of all 16 rows; one vpdpbusd chain per sub-block and token gives
// the 16 rows' exact integers, scaled in integers, so the float steps are llama.cpp's (per pair
// of sub-blocks or per super-block for Q4_K, per super-block for Q6_K).

// Interleaves tmp (16 rows of `cols` bytes) into vals: 4 columns of rows 0..15 per 64 bytes.
void interleave16(const uint8_t* tmp, int64_t cols, uint8_t* vals) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(int(cols)));
    for (int64_t c = 0; c < cols; c += 4)
        _mm512_store_si512(vals + c * 16, _mm512_i32gather_epi32(idx, tmp + c, 1));
}

// Scratch of a K-quant panel: vals (16 * cols), tmp (16 * cols), then the per-group tables.
struct KPanel {
    uint8_t* vals;
    uint8_t* tmp;
    int32_t* sc;     // per sub-block, 16 rows
    int32_t* pairs;  // per pair of sub-blocks (Q4_K: mins; Q6_K: scales), 16 rows of two int16
    float* d;        // per super-block, 16 rows
    float* dmin;
    KPanel(void* scratch, int64_t cols) {
        vals = static_cast<uint8_t*>(scratch);
        tmp = vals + 16 * cols;
        sc = reinterpret_cast<int32_t*>(tmp + 16 * cols);
        pairs = sc + (cols / 16) * 16;
        d = reinterpret_cast<float*>(pairs + (cols / 32) * 16);
        dmin = d + (cols / 256) * 16;
    }
};

inline int32_t int16_pair(int32_t lo, int32_t hi) { return int32_t(uint32_t(uint16_t(lo)) | (uint32_t(uint16_t(hi)) << 16)); }

void pack_q4_k(const uint8_t* rows, size_t stride, int n_rows, int64_t cols, KPanel& k) {
    const int64_t nb = cols / 256;
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int r = 0; r < kOrderedRows; ++r) {
        uint8_t* t = k.tmp + r * cols;
        if (r >= n_rows) {
            std::memset(t, 0, size_t(cols));
            for (int64_t i = 0; i < nb; ++i) {
                for (int j = 0; j < 8; ++j) k.sc[(8 * i + j) * 16 + r] = 0;
                for (int p = 0; p < 4; ++p) k.pairs[(4 * i + p) * 16 + r] = 0;
                k.d[16 * i + r] = k.dmin[16 * i + r] = 0.0f;
            }
            continue;
        }
        const auto* b = reinterpret_cast<const BlockQ4_K*>(rows + r * stride);
        for (int64_t i = 0; i < nb; ++i) {
            for (int g = 0; g < 4; ++g) {
                const __m256i q = load256(b[i].qs + 32 * g);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 64 * g), _mm256_and_si256(q, low4));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 64 * g + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            }
            alignas(16) uint8_t sc[16], mn[16];
            q4_k_scales(b[i].scales, sc, mn);
            for (int j = 0; j < 8; ++j) k.sc[(8 * i + j) * 16 + r] = sc[j];
            for (int p = 0; p < 4; ++p) k.pairs[(4 * i + p) * 16 + r] = int16_pair(mn[2 * p], mn[2 * p + 1]);
            k.d[16 * i + r] = half(b[i].d);
            k.dmin[16 * i + r] = half(b[i].dmin);
        }
    }
    interleave16(k.tmp, cols, k.vals);
}

// Tokens [t, t + NT) against the Q4_K panel; GEMM: llama.cpp's gemm (a float step per pair of
// sub-blocks), else its gemv (one per super-block).
template <int NT, bool GEMM>
void q4_k_tile(const KPanel& k, int64_t cols, const QuantizedActivations& x, int64_t t, float* y, int64_t y_stride,
               int n_rows) {
    const int64_t nb = cols / 256;
    __m512 acc[NT], accm[NT];
    for (int j = 0; j < NT; ++j) acc[j] = accm[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m512 dv = _mm512_load_ps(k.d + 16 * i), dmv = _mm512_load_ps(k.dmin + 16 * i);
        __m512i St[NT], Mt[NT];
        for (int j = 0; j < NT; ++j) St[j] = Mt[j] = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
            __m512i S[NT];
            for (int j = 0; j < NT; ++j) S[j] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                const int64_t c0 = 256 * i + 64 * p + 32 * h;
                __m512i dot[NT];
                for (int j = 0; j < NT; ++j) dot[j] = _mm512_setzero_si512();
                for (int q = 0; q < 8; ++q) {
                    const __m512i w = _mm512_load_si512(k.vals + (c0 + 4 * q) * 16);
                    for (int j = 0; j < NT; ++j)
                        dot[j] = _mm512_dpbusd_epi32(dot[j], w, _mm512_set1_epi32(int(load_u32(x.q_row(t + j) + c0 + 4 * q))));
                }
                const __m512i scv = _mm512_load_si512(k.sc + (8 * i + 2 * p + h) * 16);
                for (int j = 0; j < NT; ++j) S[j] = _mm512_add_epi32(S[j], _mm512_mullo_epi32(dot[j], scv));
            }
            const __m512i mpv = _mm512_load_si512(k.pairs + (4 * i + p) * 16);
            for (int j = 0; j < NT; ++j) {
                const int16_t* s16 = x.sum16_row(t + j) + 16 * i + 4 * p;
                const __m512i M = _mm512_madd_epi16(mpv, _mm512_set1_epi32(int16_pair(s16[0] + s16[1], s16[2] + s16[3])));
                if constexpr (GEMM) {
                    const __m512 dx = _mm512_set1_ps(x.d_row(t + j)[i]);
                    acc[j] = _mm512_fmadd_ps(to_float(S[j]), _mm512_mul_ps(dv, dx), acc[j]);
                    accm[j] = _mm512_fmadd_ps(to_float(M), _mm512_mul_ps(dmv, dx), accm[j]);
                } else {
                    St[j] = _mm512_add_epi32(St[j], S[j]);
                    Mt[j] = _mm512_add_epi32(Mt[j], M);
                }
            }
        }
        if constexpr (!GEMM) {
            for (int j = 0; j < NT; ++j) {
                const __m512 dx = _mm512_set1_ps(x.d_row(t + j)[i]);
                acc[j] = _mm512_fmadd_ps(to_float(St[j]), _mm512_mul_ps(dv, dx), acc[j]);
                accm[j] = _mm512_fmadd_ps(to_float(Mt[j]), _mm512_mul_ps(dmv, dx), accm[j]);
            }
        }
    }
    const __mmask16 mask = __mmask16((1u << n_rows) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, mask, _mm512_sub_ps(acc[j], accm[j]));
}

template <bool GEMM>
void q4_k_tokens(const KPanel& k, int64_t cols, const QuantizedActivations& x, int64_t t0, int64_t t1, float* y,
                 int64_t y_stride, int n_rows) {
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) q4_k_tile<4, GEMM>(k, cols, x, t, y, y_stride, n_rows);
    switch (t1 - t) {
        case 3: q4_k_tile<3, GEMM>(k, cols, x, t, y, y_stride, n_rows); break;
        case 2: q4_k_tile<2, GEMM>(k, cols, x, t, y, y_stride, n_rows); break;
        case 1: q4_k_tile<1, GEMM>(k, cols, x, t, y, y_stride, n_rows); break;
        default: break;
    }
}

void ordered_q4_k_512(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                      const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride, void* scratch) {
    // A panel pays off from a few tokens on; fewer go row by row.
    if (t1 - t0 < 4) return ordered_q4_k(t, rows, stride, n_rows, cols, x, t0, t1, y, y_stride, scratch);
    KPanel k(scratch, cols);
    pack_q4_k(rows, stride, n_rows, cols, k);
    int64_t gemm_end = x.n_tokens - x.n_tokens % 4;  // (no std::clamp here: see the top of the file)
    gemm_end = gemm_end < t0 ? t0 : (gemm_end > t1 ? t1 : gemm_end);
    q4_k_tokens<true>(k, cols, x, t0, gemm_end, y, y_stride, n_rows);
    q4_k_tokens<false>(k, cols, x, gemm_end, t1, y, y_stride, n_rows);
}

void pack_q6_k(const uint8_t* rows, size_t stride, int n_rows, int64_t cols, KPanel& k) {
    const int64_t nb = cols / 256;
    const __m256i low4 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
    for (int r = 0; r < kOrderedRows; ++r) {
        uint8_t* t = k.tmp + r * cols;
        if (r >= n_rows) {
            std::memset(t, 0, size_t(cols));
            for (int64_t i = 0; i < nb; ++i) {
                for (int j = 0; j < 16; ++j) k.sc[(16 * i + j) * 16 + r] = 0;
                for (int m = 0; m < 8; ++m) k.pairs[(8 * i + m) * 16 + r] = 0;
                k.d[16 * i + r] = 0.0f;
            }
            continue;
        }
        const auto* b = reinterpret_cast<const BlockQ6_K*>(rows + r * stride);
        for (int64_t i = 0; i < nb; ++i) {
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = load256(b[i].ql + 64 * h), ql1 = load256(b[i].ql + 64 * h + 32);
                const __m256i qh = load256(b[i].qh + 32 * h);
                const __m256i c[4] = {
                    _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2)),
                };
                for (int q = 0; q < 4; ++q)
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 128 * h + 32 * q), c[q]);
            }
            for (int j = 0; j < 16; ++j) k.sc[(16 * i + j) * 16 + r] = b[i].scales[j];
            for (int m = 0; m < 8; ++m) k.pairs[(8 * i + m) * 16 + r] = int16_pair(b[i].scales[2 * m], b[i].scales[2 * m + 1]);
            k.d[16 * i + r] = half(b[i].d);
        }
    }
    interleave16(k.tmp, cols, k.vals);
}

// Tokens [t, t + NT) against the Q6_K panel, as llama.cpp's tiled K-quant matmul: the super-
// block's exact integer sum_j sc_j * (dot_j - 32 * xsum_j), then acc = fma(float(S) * d, dx, acc).
template <int NT>
void q6_k_tile(const KPanel& k, int64_t cols, const QuantizedActivations& x, int64_t t, float* y, int64_t y_stride,
               int n_rows) {
    const int64_t nb = cols / 256;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m512i S[NT], O[NT];
        for (int j = 0; j < NT; ++j) S[j] = O[j] = _mm512_setzero_si512();
        for (int s = 0; s < 16; ++s) {
            const int64_t c0 = 256 * i + 16 * s;
            __m512i dot[NT];
            for (int j = 0; j < NT; ++j) dot[j] = _mm512_setzero_si512();
            for (int q = 0; q < 4; ++q) {
                const __m512i w = _mm512_load_si512(k.vals + (c0 + 4 * q) * 16);
                for (int j = 0; j < NT; ++j)
                    dot[j] = _mm512_dpbusd_epi32(dot[j], w, _mm512_set1_epi32(int(load_u32(x.q_row(t + j) + c0 + 4 * q))));
            }
            const __m512i scv = _mm512_load_si512(k.sc + (16 * i + s) * 16);
            for (int j = 0; j < NT; ++j) S[j] = _mm512_add_epi32(S[j], _mm512_mullo_epi32(dot[j], scv));
        }
        for (int m = 0; m < 8; ++m) {
            const __m512i spv = _mm512_load_si512(k.pairs + (8 * i + m) * 16);
            for (int j = 0; j < NT; ++j)
                O[j] = _mm512_add_epi32(O[j], _mm512_madd_epi16(spv, _mm512_set1_epi32(int(load_u32(x.sum16_row(t + j) + 16 * i + 2 * m)))));
        }
        const __m512 dv = _mm512_load_ps(k.d + 16 * i);
        for (int j = 0; j < NT; ++j) {
            const __m512 f = _mm512_mul_ps(to_float(_mm512_sub_epi32(S[j], _mm512_slli_epi32(O[j], 5))), dv);
            acc[j] = _mm512_fmadd_ps(f, _mm512_set1_ps(x.d_row(t + j)[i]), acc[j]);
        }
    }
    const __mmask16 mask = __mmask16((1u << n_rows) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, mask, acc[j]);
}

void ordered_q6_k_tiled_512(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                            const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride,
                            void* scratch) {
    if (t1 - t0 < 4) return ordered_q6_k_tiled(t, rows, stride, n_rows, cols, x, t0, t1, y, y_stride, scratch);
    KPanel k(scratch, cols);
    pack_q6_k(rows, stride, n_rows, cols, k);
    int64_t tt = t0;
    for (; tt + 4 <= t1; tt += 4) q6_k_tile<4>(k, cols, x, tt, y, y_stride, n_rows);
    switch (t1 - tt) {
        case 3: q6_k_tile<3>(k, cols, x, tt, y, y_stride, n_rows); break;
        case 2: q6_k_tile<2>(k, cols, x, tt, y, y_stride, n_rows); break;
        case 1: q6_k_tile<1>(k, cols, x, tt, y, y_stride, n_rows); break;
        default: break;
    }
}

KernelSet make_kernels() {
    KernelSet k;
    install_fused(k);
    install_ordered(k);
    k.ordered_blocks32 = ordered_blocks32_512;
    k.ordered_q4_k = ordered_q4_k_512;
    k.ordered_q6_k_tiled = ordered_q6_k_tiled_512;
    k.fused[uint32_t(TensorType::Q8_0)] = fused_unsigned_32<BlockQ8_0, Q8_0Values>;
    k.fused[uint32_t(TensorType::Q4_0)] = fused_unsigned_32<BlockQ4_0, Q4_0Values>;
    k.fused[uint32_t(TensorType::Q5_0)] = fused_unsigned_32<BlockQ5_0, Q5_0Values>;
    k.panel_bytes = avx2_kernels().panel_bytes;
    k.pack_panel = avx2::pack_panel_unsigned;
    k.float_rows = float_rows;
    k.panel_product = panel_product;
    return k;
}

}  // namespace
}  // namespace avx512

const KernelSet& avx512_kernels() {
    static const KernelSet k = avx512::make_kernels();
    return k;
}

}  // namespace kvchat::kernels
