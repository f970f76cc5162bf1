// Scalar reference conversions between floats and the GGML element formats. These define what
// the SIMD and CUDA kernels must reproduce; speed is not their job.
#include "engine/compute/tensor_type.h"

#include "engine/compute/quant_blocks.h"
#include "engine/error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

// The reference quantizers must round exactly as ggml's do, so a*b+c may not become one fused
// multiply-add (GCC contracts across statements by default once FMA is enabled).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kvchat {
namespace {

constexpr std::array<std::pair<TensorType, TypeTraits>, 15> kTraits{{
    {TensorType::F32, {"f32", 1, sizeof(float)}},
    {TensorType::F16, {"f16", 1, sizeof(fp16_bits)}},
    {TensorType::Q4_0, {"q4_0", QK4_0, sizeof(BlockQ4_0)}},
    {TensorType::Q4_1, {"q4_1", QK4_1, sizeof(BlockQ4_1)}},
    {TensorType::Q5_0, {"q5_0", QK5_0, sizeof(BlockQ5_0)}},
    {TensorType::Q5_1, {"q5_1", QK5_1, sizeof(BlockQ5_1)}},
    {TensorType::Q8_0, {"q8_0", QK8_0, sizeof(BlockQ8_0)}},
    {TensorType::Q8_1, {"q8_1", QK8_1, sizeof(BlockQ8_1)}},
    {TensorType::Q2_K, {"q2_K", QK_K, sizeof(BlockQ2_K)}},
    {TensorType::Q3_K, {"q3_K", QK_K, sizeof(BlockQ3_K)}},
    {TensorType::Q4_K, {"q4_K", QK_K, sizeof(BlockQ4_K)}},
    {TensorType::Q5_K, {"q5_K", QK_K, sizeof(BlockQ5_K)}},
    {TensorType::Q6_K, {"q6_K", QK_K, sizeof(BlockQ6_K)}},
    {TensorType::Q8_K, {"q8_K", QK_K, sizeof(BlockQ8_K)}},
    {TensorType::BF16, {"bf16", 1, sizeof(bf16_bits)}},
}};

const TypeTraits* find_traits(uint32_t type_id) {
    for (const auto& [type, t] : kTraits)
        if (uint32_t(type) == type_id) return &t;
    return nullptr;
}

// Number of blocks in n elements, refusing a partial block: callers pass sizes from files.
int64_t block_count(TensorType t, int64_t n) {
    const TypeTraits& tr = traits(t);
    if (n < 0 || n % tr.block_elems != 0)
        throw Error("row of " + std::to_string(n) + " elements is not a whole number of " + std::string(tr.name) +
                    " blocks of " + std::to_string(tr.block_elems));
    return n / tr.block_elems;
}

// Blocks are copied in and out with memcpy so rows need no particular alignment.
template <class Block>
Block load(const void* src, int64_t i) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + size_t(i) * sizeof(Block), sizeof(Block));
    return b;
}
template <class Block>
void store(void* dst, int64_t i, const Block& b) {
    std::memcpy(static_cast<uint8_t*>(dst) + size_t(i) * sizeof(Block), &b, sizeof(Block));
}

float h2f(fp16_bits h) { return fp16_to_fp32(h); }

uint32_t read_u32(const uint8_t (&bytes)[4]) {
    uint32_t v;
    std::memcpy(&v, bytes, 4);
    return v;
}

// ggml's nearest_int: round half to even for |v| < 2^22, without depending on the FPU mode.
int nearest_int(float v) {
    const float shifted = v + 12582912.f;  // 1.5 * 2^23 puts the integer in the low mantissa bits
    int32_t i;
    std::memcpy(&i, &shifted, 4);
    return (i & 0x007fffff) - 0x00400000;
}

// --- dequantization ------------------------------------------------------------------------

// The 32-element formats with 4- or 5-bit levels: element j's level is the low (j < 16) or
// high nibble of qs[j % 16], plus bit j of qh in the 5-bit ones. The _0 formats are symmetric
// (x = d * (level - 2^(bits-1))), the _1 formats carry a minimum (x = d * level + m).
template <class Block>
constexpr bool kFiveBit = requires(Block b) { b.qh; };
template <class Block>
constexpr bool kHasMin = requires(Block b) { b.m; };
template <class Block>
constexpr int kLevels = kFiveBit<Block> ? 32 : 16;

template <class Block>
int level_of(const Block& b, int j, [[maybe_unused]] uint32_t qh) {
    const int half = QK4_0 / 2;
    int v = j < half ? (b.qs[j] & 0x0f) : (b.qs[j - half] >> 4);
    if constexpr (kFiveBit<Block>) v |= int((qh >> j) & 1u) << 4;
    return v;
}

template <class Block>
void dequantize_small(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
        const auto b = load<Block>(src, i);
        const float d = h2f(b.d);
        uint32_t qh = 0;
        if constexpr (kFiveBit<Block>) qh = read_u32(b.qh);
        [[maybe_unused]] float m = 0;
        if constexpr (kHasMin<Block>) m = h2f(b.m);
        for (int j = 0; j < QK4_0; ++j) {
            const int v = level_of(b, j, qh);
            if constexpr (kHasMin<Block>)
                y[j] = float(v) * d + m;
            else
                y[j] = float(v - kLevels<Block> / 2) * d;
        }
    }
}

void dequantize_q8_0(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
        const auto b = load<BlockQ8_0>(src, i);
        const float d = h2f(b.d);
        for (int j = 0; j < QK8_0; ++j) y[j] = float(b.qs[j]) * d;
    }
}

void dequantize_q8_1(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK8_1) {
        const auto b = load<BlockQ8_1>(src, i);
        const float d = h2f(b.d);
        for (int j = 0; j < QK8_1; ++j) y[j] = float(b.qs[j]) * d;
    }
}

void dequantize_q2_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const auto b = load<BlockQ2_K>(src, i);
        const float d = h2f(b.d), dmin = h2f(b.dmin);
        int sub = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b.qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part, ++sub) {  // two sub-blocks of 16 per shift
                    const float dl = d * float(b.scales[sub] & 0x0f);
                    const float ml = dmin * float(b.scales[sub] >> 4);
                    for (int l = 0; l < 16; ++l) *y++ = dl * float((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

// The 16 signed 6-bit sub-block scales of a Q3_K block (see BlockQ3_K).
std::array<int, 16> q3_k_scales(const uint8_t (&s)[12]) {
    std::array<int, 16> out{};
    for (int i = 0; i < 16; ++i) {
        const int low = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
        const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[size_t(i)] = (low | (high << 4)) - 32;
    }
    return out;
}

void dequantize_q3_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const auto b = load<BlockQ3_K>(src, i);
        const float d = h2f(b.d);
        const std::array<int, 16> scales = q3_k_scales(b.scales);
        int sub = 0, bit = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b.qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2, ++bit) {
                for (int part = 0; part < 2; ++part, ++sub) {
                    const float dl = d * float(scales[size_t(sub)]);
                    for (int l = 16 * part; l < 16 * part + 16; ++l) {
                        const int q3 = ((q[l] >> shift) & 3) - (((b.hmask[l] >> bit) & 1) ? 0 : 4);
                        *y++ = dl * float(q3);
                    }
                }
            }
        }
    }
}

// Q4_K and Q5_K share everything but the fifth bit; qh == nullptr means Q4_K.
void dequantize_k_with_min(fp16_bits d_bits, fp16_bits dmin_bits, const uint8_t* scales, const uint8_t* qs,
                           const uint8_t* qh, float* y) {
    const float d = h2f(d_bits), dmin = h2f(dmin_bits);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min(j, scales, sc, m);
        const float dl = d * float(sc), ml = dmin * float(m);
        const uint8_t* q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0x0f;
            if (qh) v |= ((qh[l] >> j) & 1) << 4;
            *y++ = dl * float(v) - ml;
        }
    }
}

void dequantize_q4_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        const auto b = load<BlockQ4_K>(src, i);
        dequantize_k_with_min(b.d, b.dmin, b.scales, b.qs, nullptr, y);
    }
}

void dequantize_q5_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        const auto b = load<BlockQ5_K>(src, i);
        dequantize_k_with_min(b.d, b.dmin, b.scales, b.qs, b.qh, y);
    }
}

void dequantize_q6_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const auto b = load<BlockQ6_K>(src, i);
        const float d = h2f(b.d);
        for (int half = 0; half < 2; ++half, y += 128) {
            const uint8_t* ql = b.ql + 64 * half;
            const uint8_t* qh = b.qh + 32 * half;
            const int8_t* sc = b.scales + 8 * half;
            for (int l = 0; l < 32; ++l) {
                const int sub = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[sub]) * float(q1);
                y[l + 32] = d * float(sc[sub + 2]) * float(q2);
                y[l + 64] = d * float(sc[sub + 4]) * float(q3);
                y[l + 96] = d * float(sc[sub + 6]) * float(q4);
            }
        }
    }
}

void dequantize_q8_k(const void* src, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        const auto b = load<BlockQ8_K>(src, i);
        for (int j = 0; j < QK_K; ++j) y[j] = b.d * float(b.qs[j]);
    }
}

// --- quantization: the simple formats, exactly as ggml's quantize_row_*_ref ---------------

// The value of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}

// ggml's reference rounding: int(v + 0.5) after the _0 formats' offset, clamped to the levels.
template <class Block>
void quantize_small(const float* x, void* dst, int64_t nb) {
    constexpr int top = kLevels<Block> - 1, half = QK4_0 / 2;
    for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
        Block b{};
        float d, offset;
        [[maybe_unused]] float min = 0;
        if constexpr (kHasMin<Block>) {
            min = *std::min_element(x, x + QK4_0);
            d = (*std::max_element(x, x + QK4_0) - min) / top;
            b.m = fp32_to_fp16(min);
            offset = 0.5f;
        } else {
            // d = max / -half maps the extreme to level 0 and spends the extra negative level on it.
            d = signed_absmax(x, QK4_0) / -float(kLevels<Block> / 2);
            offset = float(kLevels<Block> / 2) + 0.5f;
        }
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b.d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < half; ++j) {
            const int lo = std::clamp(int((x[j] - min) * id + offset), 0, top);
            const int hi = std::clamp(int((x[j + half] - min) * id + offset), 0, top);
            b.qs[j] = uint8_t((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh |= uint32_t(lo >> 4) << j;
            qh |= uint32_t(hi >> 4) << (j + half);
        }
        if constexpr (kFiveBit<Block>) std::memcpy(b.qh, &qh, 4);
        store(dst, i, b);
    }
}

float absmax(const float* x, int n) {
    float amax = 0;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    return amax;
}

void quantize_q8_0(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
        const float d = absmax(x, QK8_0) / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        BlockQ8_0 b{};
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) b.qs[j] = int8_t(std::clamp(int(std::round(x[j] * id)), -127, 127));
        store(dst, i, b);
    }
}

void quantize_q8_1(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK8_1) {
        const float d = absmax(x, QK8_1) / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        BlockQ8_1 b{};
        b.d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            b.qs[j] = int8_t(std::clamp(int(std::round(x[j] * id)), -127, 127));
            sum += b.qs[j];
        }
        b.s = fp32_to_fp16(float(sum) * d);
        store(dst, i, b);
    }
}

void quantize_q8_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        BlockQ8_K b{};
        const float max = signed_absmax(x, QK_K);
        if (max != 0) {
            // A negative scale for a positive extreme, as ggml does, so the extreme lands on -127
            // (the IQ kernels rely on that).
            const float iscale = -127.f / max;
            for (int j = 0; j < QK_K; ++j) b.qs[j] = int8_t(std::clamp(nearest_int(iscale * x[j]), -128, 127));
            for (int g = 0; g < QK_K / 16; ++g) {
                int sum = 0;
                for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
                b.bsums[g] = int16_t(sum);
            }
            b.d = 1 / iscale;
        }
        store(dst, i, b);
    }
}

// --- quantization: the K formats --------------------------------------------------------
//
// These are simpler than ggml's (no iterative search for the best scales, no importance
// weights): each sub-block gets the smallest quantized scale whose grid still covers its whole
// range, so every element lands within half a step of its value. Good enough for test models
// and round trips; real models come already quantized.

// The fp16 value nearest to v from above, for scales that must not shrink when stored.
fp16_bits fp16_at_least(float v) {
    fp16_bits h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) < v) ++h;  // v > 0 here, so the next bit pattern is the next value up
    // Past the fp16 range the grid is cut at 65504 rather than made infinite.
    return std::min<fp16_bits>(h, 0x7bff);
}

// Sub-block scales quantized against one fp16 super-scale: scale[i] ~= d * q[i], q in 0..qmax,
// with d * q[i] >= wanted[i] (so no range is cut).
template <size_t N>
fp16_bits quantize_scales_up(const std::array<float, N>& wanted, int qmax, std::array<int, N>& q) {
    const float top = *std::max_element(wanted.begin(), wanted.end());
    if (!(top > 0)) {
        q.fill(0);
        return 0;
    }
    const fp16_bits dh = fp16_at_least(top / float(qmax));
    const float d = fp16_to_fp32(dh);
    for (size_t i = 0; i < N; ++i) q[i] = std::clamp(int(std::ceil(wanted[i] / d)), 0, qmax);
    return dh;
}

// Asymmetric sub-blocks x ~= d*sc[i]*q - dmin*m[i] (Q2_K, Q4_K, Q5_K). Fills the quantized
// levels (0..levels-1), the 0..scale_max scales and mins, and the two fp16 super-scales.
template <int SUB, int N_SUB>
void quantize_with_min(const float* x, int levels, int scale_max, uint8_t* q, std::array<int, N_SUB>& sc,
                       std::array<int, N_SUB>& m, fp16_bits& d_bits, fp16_bits& dmin_bits) {
    std::array<float, N_SUB> neg_min{}, top{};
    for (int s = 0; s < N_SUB; ++s) {
        const float* xs = x + SUB * s;
        // The min is stored as a non-negative multiple of dmin that is subtracted, so it is <= 0.
        neg_min[size_t(s)] = -std::min(0.0f, *std::min_element(xs, xs + SUB));
        top[size_t(s)] = *std::max_element(xs, xs + SUB);
    }
    dmin_bits = quantize_scales_up(neg_min, scale_max, m);
    const float dmin = fp16_to_fp32(dmin_bits);
    std::array<float, N_SUB> step_wanted{};
    for (int s = 0; s < N_SUB; ++s)
        step_wanted[size_t(s)] = std::max(0.0f, top[size_t(s)] + dmin * float(m[size_t(s)])) / float(levels - 1);
    d_bits = quantize_scales_up(step_wanted, scale_max, sc);
    const float d = fp16_to_fp32(d_bits);
    for (int s = 0; s < N_SUB; ++s) {
        const float step = d * float(sc[size_t(s)]);
        const float offset = dmin * float(m[size_t(s)]);
        for (int l = 0; l < SUB; ++l) {
            const int v = step > 0 ? nearest_int((x[SUB * s + l] + offset) / step) : 0;
            q[SUB * s + l] = uint8_t(std::clamp(v, 0, levels - 1));
        }
    }
}

// Symmetric sub-blocks x ~= d*sc[i]*q with q in -(levels/2)..levels/2-1 (Q3_K, Q6_K); the grid
// uses +-(levels/2-1) so both signs reach the extreme. Fills q + levels/2.
template <int SUB, int N_SUB>
fp16_bits quantize_symmetric(const float* x, int levels, int scale_max, uint8_t* q, std::array<int, N_SUB>& sc) {
    const int half = levels / 2;
    std::array<float, N_SUB> step_wanted{};
    for (int s = 0; s < N_SUB; ++s) step_wanted[size_t(s)] = absmax(x + SUB * s, SUB) / float(half - 1);
    const fp16_bits d_bits = quantize_scales_up(step_wanted, scale_max, sc);
    const float d = fp16_to_fp32(d_bits);
    for (int s = 0; s < N_SUB; ++s) {
        const float step = d * float(sc[size_t(s)]);
        for (int l = 0; l < SUB; ++l) {
            const int v = step > 0 ? nearest_int(x[SUB * s + l] / step) : 0;
            q[SUB * s + l] = uint8_t(std::clamp(v, -half, half - 1) + half);
        }
    }
    return d_bits;
}

void quantize_q2_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        uint8_t q[QK_K];
        std::array<int, 16> sc{}, m{};
        BlockQ2_K b{};
        quantize_with_min<16, 16>(x, 4, 15, q, sc, m, b.d, b.dmin);
        for (int s = 0; s < 16; ++s) b.scales[s] = uint8_t(sc[size_t(s)] | (m[size_t(s)] << 4));
        // Element 128*half + 32*k + l goes to bits 2k of qs[32*half + l].
        for (int e = 0; e < QK_K; ++e) b.qs[32 * (e / 128) + e % 32] |= uint8_t(q[e] << (2 * ((e % 128) / 32)));
        store(dst, i, b);
    }
}

void quantize_q3_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        uint8_t q[QK_K];  // 0..7, the stored value plus 4
        std::array<int, 16> sc{};
        BlockQ3_K b{};
        b.d = quantize_symmetric<16, 16>(x, 8, 31, q, sc);
        for (int s = 0; s < 16; ++s) {
            const int v = sc[size_t(s)] + 32;  // stored biased by 32
            if (s < 8)
                b.scales[s] |= uint8_t(v & 0x0f);
            else
                b.scales[s - 8] |= uint8_t((v & 0x0f) << 4);
            b.scales[8 + s % 4] |= uint8_t((v >> 4) << (2 * (s / 4)));
        }
        for (int e = 0; e < QK_K; ++e) {
            b.qs[32 * (e / 128) + e % 32] |= uint8_t((q[e] & 3) << (2 * ((e % 128) / 32)));
            // The high bit set means "no -4 offset", i.e. q[e] >= 4.
            b.hmask[e % 32] |= uint8_t((q[e] >> 2) << (e / 32));
        }
        store(dst, i, b);
    }
}

// Packs 6-bit scales and mins the way get_scale_min unpacks them.
void pack_scale_min(const std::array<int, 8>& sc, const std::array<int, 8>& m, uint8_t* out) {
    for (int j = 0; j < 4; ++j) {
        out[j] = uint8_t(sc[size_t(j)] | ((sc[size_t(j + 4)] >> 4) << 6));
        out[j + 4] = uint8_t(m[size_t(j)] | ((m[size_t(j + 4)] >> 4) << 6));
        out[j + 8] = uint8_t((sc[size_t(j + 4)] & 0x0f) | ((m[size_t(j + 4)] & 0x0f) << 4));
    }
}

void quantize_q4_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        uint8_t q[QK_K];
        std::array<int, 8> sc{}, m{};
        BlockQ4_K b{};
        quantize_with_min<32, 8>(x, 16, 63, q, sc, m, b.d, b.dmin);
        pack_scale_min(sc, m, b.scales);
        for (int e = 0; e < QK_K; ++e) b.qs[32 * (e / 64) + e % 32] |= uint8_t(q[e] << (4 * ((e / 32) % 2)));
        store(dst, i, b);
    }
}

void quantize_q5_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        uint8_t q[QK_K];
        std::array<int, 8> sc{}, m{};
        BlockQ5_K b{};
        quantize_with_min<32, 8>(x, 32, 63, q, sc, m, b.d, b.dmin);
        pack_scale_min(sc, m, b.scales);
        for (int e = 0; e < QK_K; ++e) {
            b.qs[32 * (e / 64) + e % 32] |= uint8_t((q[e] & 0x0f) << (4 * ((e / 32) % 2)));
            b.qh[e % 32] |= uint8_t((q[e] >> 4) << (e / 32));
        }
        store(dst, i, b);
    }
}

void quantize_q6_k(const float* x, void* dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        uint8_t q[QK_K];  // 0..63, the stored value
        std::array<int, 16> sc{};
        BlockQ6_K b{};
        b.d = quantize_symmetric<16, 16>(x, 64, 127, q, sc);
        for (int s = 0; s < 16; ++s) b.scales[s] = int8_t(sc[size_t(s)]);
        for (int e = 0; e < QK_K; ++e) {
            const int half = e / 128, r = e % 128;  // r = 32*k + l, k = 0..3
            const int k = r / 32, l = r % 32;
            b.ql[64 * half + l + 32 * (k % 2)] |= uint8_t((q[e] & 0x0f) << (4 * (k / 2)));
            b.qh[32 * half + l] |= uint8_t((q[e] >> 4) << (2 * k));
        }
        store(dst, i, b);
    }
}

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type_id) {
    if (const TypeTraits* t = find_traits(type_id)) return *t;
    return std::nullopt;
}

const TypeTraits& traits(TensorType t) {
    if (const TypeTraits* tr = find_traits(uint32_t(t))) return *tr;
    throw Error("unsupported tensor type id " + std::to_string(uint32_t(t)));
}

size_t row_bytes(TensorType t, int64_t n) { return size_t(block_count(t, n)) * traits(t).block_bytes; }

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(t, n);
    switch (t) {
    case TensorType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case TensorType::F16:
        for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load<fp16_bits>(src, i));
        return;
    case TensorType::BF16:
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load<bf16_bits>(src, i));
        return;
    case TensorType::Q4_0: return dequantize_small<BlockQ4_0>(src, dst, nb);
    case TensorType::Q4_1: return dequantize_small<BlockQ4_1>(src, dst, nb);
    case TensorType::Q5_0: return dequantize_small<BlockQ5_0>(src, dst, nb);
    case TensorType::Q5_1: return dequantize_small<BlockQ5_1>(src, dst, nb);
    case TensorType::Q8_0: return dequantize_q8_0(src, dst, nb);
    case TensorType::Q8_1: return dequantize_q8_1(src, dst, nb);
    case TensorType::Q2_K: return dequantize_q2_k(src, dst, nb);
    case TensorType::Q3_K: return dequantize_q3_k(src, dst, nb);
    case TensorType::Q4_K: return dequantize_q4_k(src, dst, nb);
    case TensorType::Q5_K: return dequantize_q5_k(src, dst, nb);
    case TensorType::Q6_K: return dequantize_q6_k(src, dst, nb);
    case TensorType::Q8_K: return dequantize_q8_k(src, dst, nb);
    }
    throw Error("cannot dequantize tensor type id " + std::to_string(uint32_t(t)));
}

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
    const int64_t nb = block_count(t, n);
    switch (t) {
    case TensorType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case TensorType::F16:
        for (int64_t i = 0; i < n; ++i) store(dst, i, fp32_to_fp16(src[i]));
        return;
    case TensorType::BF16:
        for (int64_t i = 0; i < n; ++i) store(dst, i, fp32_to_bf16(src[i]));
        return;
    case TensorType::Q4_0: return quantize_small<BlockQ4_0>(src, dst, nb);
    case TensorType::Q4_1: return quantize_small<BlockQ4_1>(src, dst, nb);
    case TensorType::Q5_0: return quantize_small<BlockQ5_0>(src, dst, nb);
    case TensorType::Q5_1: return quantize_small<BlockQ5_1>(src, dst, nb);
    case TensorType::Q8_0: return quantize_q8_0(src, dst, nb);
    case TensorType::Q8_1: return quantize_q8_1(src, dst, nb);
    case TensorType::Q2_K: return quantize_q2_k(src, dst, nb);
    case TensorType::Q3_K: return quantize_q3_k(src, dst, nb);
    case TensorType::Q4_K: return quantize_q4_k(src, dst, nb);
    case TensorType::Q5_K: return quantize_q5_k(src, dst, nb);
    case TensorType::Q6_K: return quantize_q6_k(src, dst, nb);
    case TensorType::Q8_K: return quantize_q8_k(src, dst, nb);
    }
    throw Error("cannot quantize tensor type id " + std::to_string(uint32_t(t)));
}

}  // namespace kvchat
