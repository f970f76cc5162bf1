// AVX2 kernels: the baseline every x86-64 CPU kvchat supports runs.
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/quant_blocks.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace kvchat::kernels {
namespace avx2 {
namespace {

// maddubs saturates int16 pair sums; callers keep |u| <= 127 or use the sign trick, whose
// products stay within 128 * 127 * 2.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i s) {
    return dot_u8s8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
}
inline __m256i madd_scaled(__m256i acc, __m256i p, __m256i k) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, k)); }

#include "engine/compute/fused_dot.inc"
#include "engine/compute/reference_order.inc"

// --- int8 panels ------------------------------------------------------------------------
// Values are stored signed; the micro-kernel multiplies with the sign trick, 8 rows per vector.

size_t panel_bytes(const Int8Layout& layout, int64_t cols) {
    const int64_t groups = cols / layout.group;
    return size_t(cols) * kPanelRows + size_t(groups) * kPanelRows * sizeof(float) * 2;
}

// Scratch: v[16][cols] int8, then scale[16][groups], min[16][groups].
void pack_panel_with(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows,
                     int64_t cols, void* scratch, void* panel, bool unsigned_values) {
    const int64_t groups = cols / layout.group;
    auto* v = static_cast<int8_t*>(scratch);
    auto* scale = reinterpret_cast<float*>(v + cols * kPanelRows);
    float* min = scale + groups * kPanelRows;
    for (int r = 0; r < kPanelRows; ++r) {
        int8_t* vr = v + r * cols;
        float* sr = scale + r * groups;
        float* mr = min + r * groups;
        if (r < n_rows) {
            unpack_row_int8(t, rows + r * stride, cols, vr, sr, mr);
            if (!layout.has_min) std::memset(mr, 0, sizeof(float) * groups);
        } else {
            std::memset(vr, 0, cols);
            std::memset(sr, 0, sizeof(float) * groups);
            std::memset(mr, 0, sizeof(float) * groups);
        }
    }
    // Interleave: 4 columns of row 0, 4 of row 1, ... so one 64-byte load holds 4 columns of all
    // 16 rows, the shape vpdpbusd and pmaddubsw consume.
    auto* out = static_cast<uint8_t*>(panel);
    const __m256i row_offsets = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i stride8 = _mm256_mullo_epi32(row_offsets, _mm256_set1_epi32(int(cols)));
    const __m256i flip = _mm256_set1_epi8(unsigned_values ? char(0x80) : 0);
    for (int64_t s = 0; s < cols / 4; ++s) {
        for (int half = 0; half < 2; ++half) {
            const int* base = reinterpret_cast<const int*>(v + half * 8 * cols + 4 * s);
            const __m256i g = _mm256_xor_si256(_mm256_i32gather_epi32(base, stride8, 1), flip);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * s + 32 * half), g);
        }
    }
    auto* out_scale = reinterpret_cast<float*>(out + cols * kPanelRows);
    float* out_min = out_scale + groups * kPanelRows;
    for (int64_t g = 0; g < groups; ++g) {
        for (int r = 0; r < kPanelRows; ++r) {
            out_scale[g * kPanelRows + r] = scale[r * groups + g];
            out_min[g * kPanelRows + r] = min[r * groups + g];
        }
    }
}

void pack_panel(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                void* scratch, void* panel) {
    pack_panel_with(t, layout, rows, stride, n_rows, cols, scratch, panel, false);
}

inline int32_t load_i32(const int8_t* p) {
    int32_t x;
    std::memcpy(&x, p, 4);
    return x;
}

// NT tokens against 8 rows (one half of the panel). Each loaded weight vector serves NT tokens.
template <int NT, int G, bool MIN>
void panel_tile(const uint8_t* pq, const float* ps, const float* pm, int64_t groups, int half, const int8_t* xq,
                int64_t x_stride, const float* gd, const float* gds, int64_t g_stride, float* y, int64_t y_stride,
                int n_rows) {
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < groups; ++g) {
        __m256i sum[NT];
        for (int t = 0; t < NT; ++t) sum[t] = _mm256_setzero_si256();
        for (int k = 0; k < G / 4; ++k) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + (g * (G / 4) + k) * 64 + 32 * half));
            const __m256i w_abs = _mm256_sign_epi8(w, w);
            for (int t = 0; t < NT; ++t) {
                const __m256i x = _mm256_set1_epi32(load_i32(xq + t * x_stride + g * G + 4 * k));
                const __m256i p = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
                sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p, ones));
            }
        }
        const __m256 a = _mm256_loadu_ps(ps + g * kPanelRows + 8 * half);
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(a, _mm256_set1_ps(gd[t * g_stride + g])), acc[t]);
        }
        if constexpr (MIN) {
            const __m256 m = _mm256_loadu_ps(pm + g * kPanelRows + 8 * half);
            for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(gds[t * g_stride + g]), acc[t]);
        }
    }
    const int n = n_rows - 8 * half;
    for (int t = 0; t < NT; ++t) {
        float* out = y + t * y_stride + 8 * half;
        if (n >= 8) {
            _mm256_storeu_ps(out, acc[t]);
        } else {
            alignas(32) float tmp[8];
            _mm256_store_ps(tmp, acc[t]);
            for (int r = 0; r < n; ++r) out[r] = tmp[r];
        }
    }
}

constexpr int kMaxTile = 4;

template <int G, bool MIN>
void panel_product_g(const void* panel, int64_t cols, const QuantizedActivations& x, const ActivationGroups& ag,
                     int64_t t0, int64_t t1, float* y, int64_t y_stride, int n_rows) {
    const int64_t groups = cols / G;
    const auto* pq = static_cast<const uint8_t*>(panel);
    const auto* ps = reinterpret_cast<const float*>(pq + cols * kPanelRows);
    const float* pm = ps + groups * kPanelRows;
    for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
        for (int64_t t = t0; t < t1; t += kMaxTile) {
            const int nt = int(t1 - t < kMaxTile ? t1 - t : kMaxTile);
            const int8_t* xq = x.q_row(t);
            const float* gd = ag.d + t * ag.n_groups;
            const float* gds = ag.d_sum + t * ag.n_groups;
            float* yt = y + t * y_stride;
            switch (nt) {
                case 4: panel_tile<4, G, MIN>(pq, ps, pm, groups, half, xq, cols, gd, gds, ag.n_groups, yt, y_stride, n_rows); break;
                case 3: panel_tile<3, G, MIN>(pq, ps, pm, groups, half, xq, cols, gd, gds, ag.n_groups, yt, y_stride, n_rows); break;
                case 2: panel_tile<2, G, MIN>(pq, ps, pm, groups, half, xq, cols, gd, gds, ag.n_groups, yt, y_stride, n_rows); break;
                default: panel_tile<1, G, MIN>(pq, ps, pm, groups, half, xq, cols, gd, gds, ag.n_groups, yt, y_stride, n_rows); break;
            }
        }
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
    install_ordered(k);
    k.panel_bytes = panel_bytes;
    k.pack_panel = pack_panel;
    k.panel_product = panel_product;
    return k;
}

}  // namespace

// The AVX-512 panels share the unpacking and interleaving; only the value encoding differs.
void pack_panel_unsigned(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows,
                         int64_t cols, void* scratch, void* panel) {
    pack_panel_with(t, layout, rows, stride, n_rows, cols, scratch, panel, true);
}

}  // namespace avx2

const KernelSet& avx2_kernels() {
    static const KernelSet k = avx2::make_kernels();
    return k;
}

}  // namespace kvchat::kernels
