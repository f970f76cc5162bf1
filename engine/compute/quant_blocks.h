#pragma once
// The GGML/GGUF quantized block layouts, byte for byte as ggml-common.h defines them, and the
// scalar conversions every kernel needs: fp16 and bf16 <-> fp32, and the 6-bit scale/min
// unpacking of Q4_K/Q5_K.
//
// Layout notes
// - Every struct has natural alignment and no padding (the static_asserts prove it), so a block
//   pointer needs alignof(Block...) alignment: 2 for the fp16-scaled blocks, 4 for BlockQ8_K.
//   GGUF tensor data is 32-byte aligned and block sizes are even, so rows of file blocks always
//   qualify; code that cannot promise it copies the block with memcpy first.
// - Half-precision fields are raw IEEE binary16 bits (uint16_t); convert with fp16_to_fp32.
// - Multi-byte fields are little-endian, as GGUF is; kvchat only targets little-endian hosts.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace kvchat {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

using fp16_bits = uint16_t;  // IEEE 754 binary16
using bf16_bits = uint16_t;  // bfloat16: the top half of a binary32

inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK8_1 = 32;
inline constexpr int QK_K = 256;         // elements of a K-quant super-block
inline constexpr int K_SCALE_SIZE = 12;  // bytes of packed 6-bit scales and mins in Q4_K/Q5_K

// x = d * (q - 8), q in 0..15; element j in the low nibble of qs[j], element j+16 in the high one.
struct BlockQ4_0 {
    fp16_bits d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x = d * q + m, q in 0..15; nibble order as Q4_0.
struct BlockQ4_1 {
    fp16_bits d;
    fp16_bits m;
    uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// x = d * (q - 16), q in 0..31; low 4 bits as Q4_0, bit 4 of element j is bit j of qh
// (qh read as a little-endian uint32).
struct BlockQ5_0 {
    fp16_bits d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// x = d * q + m, q in 0..31; bits as Q5_0.
struct BlockQ5_1 {
    fp16_bits d;
    fp16_bits m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// x = d * q.
struct BlockQ8_0 {
    fp16_bits d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// x = d * q; s = d * sum(q), kept so dot products with Q4_1/Q5_1 can apply the min in one step.
struct BlockQ8_1 {
    fp16_bits d;
    fp16_bits s;
    int8_t qs[QK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36);

// 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4), q in 0..3.
// qs: each 32-byte half holds 128 elements; element 32*s + l of a half sits in bits 2s..2s+1
// of byte l.
struct BlockQ2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    fp16_bits d;
    fp16_bits dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 sub-blocks of 16: x = d * (scale6 - 32) * (q2 - (hbit ? 0 : 4)). q2 packed as in Q2_K;
// hbit of element 32*k + l (k = 0..7) is bit k of hmask[l]. 6-bit scale i (0..15): low four bits
// are the low nibble of scales[i] for i < 8, the high nibble of scales[i-8] otherwise; the top
// two bits are bits 2*(i/4)..2*(i/4)+1 of scales[8 + i%4].
struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    fp16_bits d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 sub-blocks of 32: x = d * sc * q - dmin * m with (sc, m) = get_scale_min(j, scales), q in
// 0..15; each 32-byte group of qs holds sub-block 2g in low nibbles and 2g+1 in high nibbles.
struct BlockQ4_K {
    fp16_bits d;
    fp16_bits dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// As Q4_K with a fifth bit: bit 4 of element 32*j + l is bit j of qh[l].
struct BlockQ5_K {
    fp16_bits d;
    fp16_bits dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q in 0..63. Per 128-element half: byte l
// of its 64 ql bytes holds element l in the low nibble and element l+64 in the high nibble; byte
// l of its 32 qh bytes holds the top two bits of elements l, l+32, l+64, l+96 (bits 0-1 .. 6-7).
struct BlockQ6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    fp16_bits d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activations for K-quant dot products: x = d * q; bsums[i] = sum of qs[16 i .. 16 i + 15].
struct BlockQ8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// --- conversions -------------------------------------------------------------------------

constexpr float fp16_to_fp32(fp16_bits h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) {  // inf, or nan made quiet (payload kept) as F16C hardware does
        const uint32_t quiet = mant ? 0x400000u : 0u;
        return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mant << 13));
    }
    if (exp == 0) {
        if (mant == 0) return std::bit_cast<float>(sign);
        // Subnormal: shift the leading one into the implicit position; every fp16 subnormal is
        // a normal fp32.
        uint32_t e = 113;  // 127 - 15 + 1
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --e;
        }
        return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest, ties to even; overflow gives inf, nan stays a (quiet) nan.
constexpr fp16_bits fp32_to_fp16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds past 65504
    if (a < 0x38800000u) {
        // Below 2^-14: an fp16 subnormal, q = round(|f| * 2^24).
        const uint32_t e = a >> 23;
        if (e < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to zero)
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // 14..24
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        return uint16_t(sign | q);
    }
    const uint32_t rebased = a - (112u << 23);
    uint32_t h = rebased >> 13;
    const uint32_t rem = rebased & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry lands in the exponent
    return uint16_t(sign | h);
}

constexpr float bf16_to_fp32(bf16_bits b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// Round to nearest, ties to even, as ggml does; nan is forced quiet so truncation cannot turn it
// into inf.
constexpr bf16_bits fp32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K super-block. Sub-blocks 0..3 keep theirs in
// the low six bits of q[j] and q[j+4]; sub-blocks 4..7 use the nibbles of q[j+4] for the low four
// bits and the spare top two bits of q[j-4] and q[j] for the high two.
constexpr void get_scale_min(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

}  // namespace kvchat
