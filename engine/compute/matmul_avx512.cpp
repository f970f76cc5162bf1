// AVX-512 VNNI kernels, called only after a run-time CPU check. This file must not instantiate
// templates that other files also instantiate (std containers, algorithms): the linker keeps
// one copy, and it could be this file's AVX-512 one.
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/quant_blocks.h"

#include <immintrin.h>

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

// _mm512_cvtepi32_ps with an all-ones zero mask: the same instruction, without GCC 12's false
// maybe-uninitialized warning about the unmasked intrinsic's undefined pass-through operand.
inline __m512 to_float(__m512i v) { return _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), v); }

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
        tiles.fn[nt - 1](pq, ps, pm, groups, x.q_row(t), cols, ag.d + t * gs, ag.d_sum + t * gs, ag.bias + t * gs, gs,
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

KernelSet make_kernels() {
    KernelSet k;
    install_fused(k);
    k.panel_bytes = avx2_kernels().panel_bytes;
    k.pack_panel = avx2::pack_panel_unsigned;
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
