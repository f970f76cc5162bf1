// AVX2 kernels: the baseline every x86-64 CPU kvchat supports runs.
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/weight_stream.h"

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

// --- Q4_K and Q6_K for a batch ----------------------------------------------------------------
// reference_order.inc's kernels take one row against one token: every product ends in a
// horizontal sum of 8 lanes and scalar float steps. Here 8 rows sit in the lanes (half of a
// 16-row panel, values interleaved so that one 32-byte load holds 4 columns of all 8 rows) and a
// token's 4 columns are broadcast, so every vector carries 8 rows' exact integers to the float
// steps, which stay llama.cpp's (per pair of sub-blocks or super-block for Q4_K, per super-block
// for Q6_K) lane by lane. maddubs results add up in int16 while they cannot overflow (|x| <= 127:
// 8 of Q4_K's 2 * 15 * 127, 2 of Q6_K's 2 * 63 * 127), then one madd applies the group's scale.

inline int32_t int16_pair(int32_t lo, int32_t hi) { return int32_t(uint32_t(uint16_t(lo)) | (uint32_t(uint16_t(hi)) << 16)); }

// Scratch of a K-quant panel, per half of 8 rows: vals (cols * 8 bytes: 4 columns of 8 rows per
// 32 bytes), sc (per scale group, 8 rows of the int16 pair (scale, scale)), pairs (Q4_K: per pair
// of sub-blocks the mins (m0, m1); Q6_K: per 32 columns the scales (s0, s1)), d and dmin per
// super-block. tmp holds the 16 unpacked rows before they are interleaved.
struct KPanel8 {
    int64_t cols;
    uint8_t* vals;
    uint8_t* tmp;
    int32_t* sc;
    int32_t* pairs;
    float* d;
    float* dmin;
    KPanel8(void* scratch, int64_t c) : cols(c) {
        vals = static_cast<uint8_t*>(scratch);
        tmp = vals + 16 * cols;
        sc = reinterpret_cast<int32_t*>(tmp + 16 * cols);
        pairs = sc + (cols / 16) * 16;
        d = reinterpret_cast<float*>(pairs + (cols / 32) * 16);
        dmin = d + (cols / 256) * 16;
    }
    const uint8_t* half_vals(int half) const { return vals + half * 8 * cols; }
    // Index of row r's entry for group g in a table of `per_row` groups per row (8 rows of a half
    // side by side per group).
    static int64_t at(int r, int64_t per_row, int64_t g) { return ((r / 8) * per_row + g) * 8 + r % 8; }
};

// tmp (16 rows of cols bytes) -> vals, 4 columns of 8 rows per 32 bytes, per half.
void interleave8(const uint8_t* tmp, int64_t cols, uint8_t* vals) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(cols)));
    for (int half = 0; half < 2; ++half) {
        const uint8_t* src = tmp + half * 8 * cols;
        uint8_t* dst = vals + half * 8 * cols;
        for (int64_t c = 0; c < cols; c += 4)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * 8),
                                _mm256_i32gather_epi32(reinterpret_cast<const int*>(src + c), idx, 1));
    }
}

void pack_q4_k8(const uint8_t* rows, size_t stride, int n_rows, KPanel8& k) {
    const int64_t cols = k.cols, nb = cols / 256;
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int r = 0; r < kOrderedRows; ++r) {
        uint8_t* t = k.tmp + r * cols;
        if (r >= n_rows) {
            std::memset(t, 0, size_t(cols));
            for (int64_t i = 0; i < nb; ++i) {
                for (int j = 0; j < 8; ++j) k.sc[KPanel8::at(r, cols / 32, 8 * i + j)] = 0;
                for (int p = 0; p < 4; ++p) k.pairs[KPanel8::at(r, cols / 64, 4 * i + p)] = 0;
                k.d[KPanel8::at(r, nb, i)] = k.dmin[KPanel8::at(r, nb, i)] = 0.0f;
            }
            continue;
        }
        const auto* b = reinterpret_cast<const BlockQ4_K*>(rows + r * stride);
        for (int64_t i = 0; i < nb; ++i) {
            for (int g = 0; g < 4; ++g) {
                const __m256i q = load256(b[i].qs + 32 * g);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 64 * g), _mm256_and_si256(q, low4));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 64 * g + 32),
                                    _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            }
            alignas(16) uint8_t sc[16] = {}, mn[16] = {};
            q4_k_scales(b[i].scales, sc, mn);
            for (int j = 0; j < 8; ++j) k.sc[KPanel8::at(r, cols / 32, 8 * i + j)] = int16_pair(sc[j], sc[j]);
            for (int p = 0; p < 4; ++p) k.pairs[KPanel8::at(r, cols / 64, 4 * i + p)] = int16_pair(mn[2 * p], mn[2 * p + 1]);
            k.d[KPanel8::at(r, nb, i)] = half(b[i].d);
            k.dmin[KPanel8::at(r, nb, i)] = half(b[i].dmin);
        }
    }
    interleave8(k.tmp, cols, k.vals);
}

inline __m256i broadcast_u32(const void* p) { return _mm256_set1_epi32(int(load_u32(p))); }

inline void store_rows(float* out, __m256 v, int n) {
    if (n >= 8) {
        _mm256_storeu_ps(out, v);
    } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        for (int r = 0; r < n; ++r) out[r] = tmp[r];
    }
}

// Tokens [t, t + NT) against one half of the Q4_K panel; GEMM: llama.cpp's gemm (a float step
// per pair of sub-blocks), else its gemv (one per super-block).
template <int NT, bool GEMM>
void q4_k_tile8(const KPanel8& k, int half, const QuantizedActivations& x, int64_t t, float* y, int64_t y_stride,
                int n_rows) {
    const int64_t cols = k.cols, nb = cols / 256;
    const uint8_t* vals = k.half_vals(half);
    const int32_t* sc = k.sc + half * (cols / 32) * 8;
    const int32_t* pairs = k.pairs + half * (cols / 64) * 8;
    const float* dr = k.d + half * nb * 8;
    const float* dminr = k.dmin + half * nb * 8;
    const int8_t* xq[NT];
    for (int j = 0; j < NT; ++j) xq[j] = x.q_row(t + j);
    __m256 acc[NT], accm[NT];
    for (int j = 0; j < NT; ++j) acc[j] = accm[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m256 dv = _mm256_loadu_ps(dr + 8 * i), dmv = _mm256_loadu_ps(dminr + 8 * i);
        __m256i St[NT], Mt[NT];
        for (int j = 0; j < NT; ++j) St[j] = Mt[j] = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
            __m256i S[NT];
            for (int h = 0; h < 2; ++h) {
                const int64_t c0 = 256 * i + 64 * p + 32 * h;
                __m256i a[NT];
                for (int q = 0; q < 8; ++q) {
                    const __m256i w = load256(vals + (c0 + 4 * q) * 8);
                    for (int j = 0; j < NT; ++j) {
                        const __m256i prod = _mm256_maddubs_epi16(w, broadcast_u32(xq[j] + c0 + 4 * q));
                        a[j] = q == 0 ? prod : _mm256_add_epi16(a[j], prod);
                    }
                }
                const __m256i scv = load256(sc + (8 * i + 2 * p + h) * 8);
                for (int j = 0; j < NT; ++j) {
                    const __m256i s = _mm256_madd_epi16(a[j], scv);
                    S[j] = h == 0 ? s : _mm256_add_epi32(S[j], s);
                }
            }
            const __m256i mpv = load256(pairs + (4 * i + p) * 8);
            for (int j = 0; j < NT; ++j) {
                const int16_t* s16 = x.sum16_row(t + j) + 16 * i + 4 * p;
                const __m256i M = _mm256_madd_epi16(mpv, _mm256_set1_epi32(int16_pair(s16[0] + s16[1], s16[2] + s16[3])));
                if constexpr (GEMM) {
                    const __m256 dx = _mm256_set1_ps(x.d_row(t + j)[i]);
                    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[j]), _mm256_mul_ps(dv, dx), acc[j]);
                    accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmv, dx), accm[j]);
                } else {
                    St[j] = _mm256_add_epi32(St[j], S[j]);
                    Mt[j] = _mm256_add_epi32(Mt[j], M);
                }
            }
        }
        if constexpr (!GEMM) {
            for (int j = 0; j < NT; ++j) {
                const __m256 dx = _mm256_set1_ps(x.d_row(t + j)[i]);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(St[j]), _mm256_mul_ps(dv, dx), acc[j]);
                accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Mt[j]), _mm256_mul_ps(dmv, dx), accm[j]);
            }
        }
    }
    for (int j = 0; j < NT; ++j) store_rows(y + (t + j) * y_stride + 8 * half, _mm256_sub_ps(acc[j], accm[j]), n_rows - 8 * half);
}

template <bool GEMM>
void q4_k_tokens8(const KPanel8& k, int half, const QuantizedActivations& x, int64_t t0, int64_t t1, float* y,
                  int64_t y_stride, int n_rows) {
    // Two tokens at a time: with four, the int16 sums, the pair sums and the float accumulators
    // outgrow the 16 vector registers and the spills cost more than the shared weight loads save.
    int64_t t = t0;
    for (; t + 2 <= t1; t += 2) q4_k_tile8<2, GEMM>(k, half, x, t, y, y_stride, n_rows);
    if (t < t1) q4_k_tile8<1, GEMM>(k, half, x, t, y, y_stride, n_rows);
}

void ordered_q4_k_panel(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                        const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride, void* scratch) {
    // A panel pays off from a few tokens on; fewer go row by row.
    if (t1 - t0 < 4) return ordered_q4_k(t, rows, stride, n_rows, cols, x, t0, t1, y, y_stride, scratch);
    KPanel8 k(scratch, cols);
    pack_q4_k8(rows, stride, n_rows, k);
    int64_t gemm_end = x.n_tokens - x.n_tokens % 4;
    gemm_end = gemm_end < t0 ? t0 : (gemm_end > t1 ? t1 : gemm_end);
    for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
        q4_k_tokens8<true>(k, half, x, t0, gemm_end, y, y_stride, n_rows);
        q4_k_tokens8<false>(k, half, x, gemm_end, t1, y, y_stride, n_rows);
    }
}

void pack_q6_k8(const uint8_t* rows, size_t stride, int n_rows, KPanel8& k) {
    const int64_t cols = k.cols, nb = cols / 256;
    const __m256i low4 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
    for (int r = 0; r < kOrderedRows; ++r) {
        uint8_t* t = k.tmp + r * cols;
        if (r >= n_rows) {
            std::memset(t, 0, size_t(cols));
            for (int64_t i = 0; i < nb; ++i) {
                for (int j = 0; j < 16; ++j) k.sc[KPanel8::at(r, cols / 16, 16 * i + j)] = 0;
                for (int m = 0; m < 8; ++m) k.pairs[KPanel8::at(r, cols / 32, 8 * i + m)] = 0;
                k.d[KPanel8::at(r, nb, i)] = 0.0f;
            }
            continue;
        }
        const auto* b = reinterpret_cast<const BlockQ6_K*>(rows + r * stride);
        for (int64_t i = 0; i < nb; ++i) {
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = load256(b[i].ql + 64 * h), ql1 = load256(b[i].ql + 64 * h + 32);
                const __m256i qh = load256(b[i].qh + 32 * h);
                // Chunk c's top two bits sit in bits 2c..2c+1 of qh; move them to bits 4..5.
                const __m256i c[4] = {
                    _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2)),
                };
                for (int q = 0; q < 4; ++q) _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + 256 * i + 128 * h + 32 * q), c[q]);
            }
            for (int j = 0; j < 16; ++j) k.sc[KPanel8::at(r, cols / 16, 16 * i + j)] = int16_pair(b[i].scales[j], b[i].scales[j]);
            for (int m = 0; m < 8; ++m)
                k.pairs[KPanel8::at(r, cols / 32, 8 * i + m)] = int16_pair(b[i].scales[2 * m], b[i].scales[2 * m + 1]);
            k.d[KPanel8::at(r, nb, i)] = half(b[i].d);
        }
    }
    interleave8(k.tmp, cols, k.vals);
}

// Tokens [t, t + NT) against one half of the Q6_K panel, as llama.cpp's tiled K-quant matmul:
// the super-block's exact integer sum_j sc_j * (dot_j - 32 * xsum_j), then
// acc = fma(float(S) * d, dx, acc).
template <int NT>
void q6_k_tile8(const KPanel8& k, int half, const QuantizedActivations& x, int64_t t, float* y, int64_t y_stride,
                int n_rows) {
    const int64_t cols = k.cols, nb = cols / 256;
    const uint8_t* vals = k.half_vals(half);
    const int32_t* sc = k.sc + half * (cols / 16) * 8;
    const int32_t* pairs = k.pairs + half * (cols / 32) * 8;
    const float* dr = k.d + half * nb * 8;
    const int8_t* xq[NT];
    for (int j = 0; j < NT; ++j) xq[j] = x.q_row(t + j);
    __m256 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m256i S[NT];
        for (int j = 0; j < NT; ++j) S[j] = _mm256_setzero_si256();
        for (int s = 0; s < 16; ++s) {
            const int64_t c0 = 256 * i + 16 * s;
            const __m256i scv = load256(sc + (16 * i + s) * 8);
            for (int h = 0; h < 2; ++h) {
                const __m256i w0 = load256(vals + (c0 + 8 * h) * 8), w1 = load256(vals + (c0 + 8 * h + 4) * 8);
                for (int j = 0; j < NT; ++j) {
                    const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w0, broadcast_u32(xq[j] + c0 + 8 * h)),
                                                       _mm256_maddubs_epi16(w1, broadcast_u32(xq[j] + c0 + 8 * h + 4)));
                    S[j] = _mm256_add_epi32(S[j], _mm256_madd_epi16(a, scv));
                }
            }
        }
        const __m256 dv = _mm256_loadu_ps(dr + 8 * i);
        for (int j = 0; j < NT; ++j) {
            const int16_t* s16 = x.sum16_row(t + j) + 16 * i;
            __m256i O = _mm256_setzero_si256();
            for (int m = 0; m < 8; ++m)
                O = _mm256_add_epi32(O, _mm256_madd_epi16(load256(pairs + (8 * i + m) * 8), broadcast_u32(s16 + 2 * m)));
            const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(S[j], _mm256_slli_epi32(O, 5))), dv);
            acc[j] = _mm256_fmadd_ps(f, _mm256_set1_ps(x.d_row(t + j)[i]), acc[j]);
        }
    }
    for (int j = 0; j < NT; ++j) store_rows(y + (t + j) * y_stride + 8 * half, acc[j], n_rows - 8 * half);
}

void ordered_q6_k_panel(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                        const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride, void* scratch) {
    if (t1 - t0 < 4) return ordered_q6_k_tiled(t, rows, stride, n_rows, cols, x, t0, t1, y, y_stride, scratch);
    KPanel8 k(scratch, cols);
    pack_q6_k8(rows, stride, n_rows, k);
    for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
        int64_t tt = t0;
        for (; tt + 4 <= t1; tt += 4) q6_k_tile8<4>(k, half, x, tt, y, y_stride, n_rows);
        switch (t1 - tt) {
            case 3: q6_k_tile8<3>(k, half, x, tt, y, y_stride, n_rows); break;
            case 2: q6_k_tile8<2>(k, half, x, tt, y, y_stride, n_rows); break;
            case 1: q6_k_tile8<1>(k, half, x, tt, y, y_stride, n_rows); break;
            default: break;
        }
    }
}

// --- Q5_0 for a batch ----------------------------------------------------------------------------
// reference_order.inc's tile, less one instruction per product: Q5_0 values are small (|w| <= 16),
// so the token's values go in unsigned (x + 128, at most 255 * 16 * 2 per maddubs pair: no
// saturation) and the row's values signed, with no sign fix-up; each lane's exact sum is then
// corrected by -128 * (the lane's 4 weights), computed once per row when the panel is packed.
// (Q8_0's values reach 127: 255 * 127 * 2 would saturate, so it keeps the sign trick.)
struct Q5Panel {
    int8_t* vals;    // [row][block][32]
    int32_t* bias;   // [row][block][8]: -128 * the sum of the lane's 4 values
    float* scl;      // [pair][block][8]: dw(2p) x4, dw(2p + 1) x4
    // [pair][block][8]: the tile's products, lane j dw(2p) * dx(t + j), lane 4 + j dw(2p + 1) *
    // dx(t + j). Made once per tile so that the tiles broadcast them from memory (a load, where a
    // permute would take a vector port the products need).
    float* dd;
    uint8_t* xu;     // [4][cols]: the tile's tokens, x + 128
    Q5Panel(void* scratch, int64_t nb) {
        vals = static_cast<int8_t*>(scratch);
        bias = reinterpret_cast<int32_t*>(vals + kOrderedRows * nb * 32);
        scl = reinterpret_cast<float*>(bias + kOrderedRows * nb * 8);
        dd = scl + (kOrderedRows / 2) * nb * 8;
        xu = reinterpret_cast<uint8_t*>(dd + (kOrderedRows / 2) * nb * 8);
    }
};

void pack_q5_0(const uint8_t* rows, size_t stride, int n_rows, int64_t nb, const Q5Panel& k) {
    const __m256i u128 = _mm256_set1_epi8(char(0x80)), minus1 = _mm256_set1_epi16(-1);
    for (int r = 0; r < n_rows; ++r) {
        const auto* b = reinterpret_cast<const BlockQ5_0*>(rows + r * stride);
        for (int64_t i = 0; i < nb; ++i) {
            const __m256i w = signed_values(b[i]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(k.vals + (r * nb + i) * 32), w);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(k.bias + (r * nb + i) * 8),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(u128, w), minus1));
            const float d = half(b[i].d);
            float* s = k.scl + ((r / 2) * nb + i) * 8 + 4 * (r % 2);
            s[0] = s[1] = s[2] = s[3] = d;
        }
    }
    if (n_rows % 2)  // the missing partner of the last row
        for (int64_t i = 0; i < nb; ++i) {
            float* s = k.scl + ((n_rows / 2) * nb + i) * 8 + 4;
            s[0] = s[1] = s[2] = s[3] = 0.0f;
        }
}

// Rows 2p, 2p + 1 (2p + 1 may be missing: its values are not read, its products are dropped)
// against the NT tokens in k.xu.
template <int NT>
void q5_0_tile(const Q5Panel& k, int64_t nb, int p, bool second, int64_t cols, int64_t t, float* y, int64_t y_stride) {
    const int8_t* w0 = k.vals + (2 * p) * nb * 32;
    const int8_t* w1 = second ? w0 + nb * 32 : w0;
    const int32_t* b0 = k.bias + (2 * p) * nb * 8;
    const int32_t* b1 = second ? b0 + nb * 8 : b0;
    const float* dd = k.dd + p * nb * 8;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0[NT], acc1[NT];
    for (int j = 0; j < NT; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i a = load256(w0 + 32 * i), b = load256(w1 + 32 * i);
        const __m256i ba = load256(b0 + 8 * i), bb = load256(b1 + 8 * i);
        const float* d = dd + 8 * i;
        for (int j = 0; j < NT; ++j) {
            const __m256i xv = load256(k.xu + j * cols + 32 * i);
            const __m256i sa = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(xv, a), ones), ba);
            const __m256i sb = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(xv, b), ones), bb);
            acc0[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + j), _mm256_cvtepi32_ps(sa), acc0[j]);
            acc1[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + 4 + j), _mm256_cvtepi32_ps(sb), acc1[j]);
        }
    }
    for (int j = 0; j < NT; ++j) {
        y[(t + j) * y_stride + 2 * p] = hsum(acc0[j]);
        if (second) y[(t + j) * y_stride + 2 * p + 1] = hsum(acc1[j]);
    }
}

void ordered_blocks32_avx2(TensorType type, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                           const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride,
                           void* scratch) {
    if (type != TensorType::Q5_0 || t1 - t0 <= 2)
        return ordered_blocks32(type, rows, stride, n_rows, cols, x, t0, t1, y, y_stride, scratch);
    const int64_t nb = cols / 32;
    const Q5Panel k(scratch, nb);
    pack_q5_0(rows, stride, n_rows, nb, k);
    const __m256i u128 = _mm256_set1_epi8(char(0x80));
    for (int64_t t = t0; t < t1; t += 4) {
        const int nt = int(t1 - t < 4 ? t1 - t : 4);
        // Lanes of missing tokens are never read: they repeat token t.
        const float* dx[4];
        for (int j = 0; j < 4; ++j) dx[j] = x.d_row(j < nt ? t + j : t);
        const int n_pairs = (n_rows + 1) / 2;
        for (int64_t i = 0; i < nb; ++i) {
            const __m256 dxv = _mm256_setr_ps(dx[0][i], dx[1][i], dx[2][i], dx[3][i], dx[0][i], dx[1][i], dx[2][i], dx[3][i]);
            for (int p = 0; p < n_pairs; ++p)
                _mm256_storeu_ps(k.dd + (p * nb + i) * 8, _mm256_mul_ps(_mm256_loadu_ps(k.scl + (p * nb + i) * 8), dxv));
        }
        for (int j = 0; j < nt; ++j)
            for (int64_t c = 0; c < cols; c += 32)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(k.xu + j * cols + c), _mm256_xor_si256(load256(x.q_row(t + j) + c), u128));
        for (int p = 0; 2 * p < n_rows; ++p) {
            const bool second = 2 * p + 1 < n_rows;
            switch (nt) {
                case 4: q5_0_tile<4>(k, nb, p, second, cols, t, y, y_stride); break;
                case 3: q5_0_tile<3>(k, nb, p, second, cols, t, y, y_stride); break;
                case 2: q5_0_tile<2>(k, nb, p, second, cols, t, y, y_stride); break;
                default: q5_0_tile<1>(k, nb, p, second, cols, t, y, y_stride); break;
            }
        }
    }
}

KernelSet make_kernels() {
    KernelSet k;
    install_fused(k);
    install_ordered(k);
    k.ordered_blocks32 = ordered_blocks32_avx2;
    k.ordered_q4_k = ordered_q4_k_panel;
    k.ordered_q6_k_tiled = ordered_q6_k_panel;
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
