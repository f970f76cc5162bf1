// Every integer weight type as int8 groups (w = scale * v + min): the common form the panel
// micro-kernels consume. The hot types of the default model unpack with AVX2; the rest with plain
// code, which is fine because a panel is unpacked once and reused across all tokens.
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/quant_blocks.h"
#include "engine/error.h"

#include <immintrin.h>

#include <cstring>

namespace kvchat::kernels {

namespace {

inline float half(fp16_bits h) { return _cvtsh_ss(h); }

template <class Block>
const Block* blocks(const void* row) {
    return static_cast<const Block*>(row);
}

// --- plain unpackers, one per type ---------------------------------------------------------

void unpack_q4_1(const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const auto* b = blocks<BlockQ4_1>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        min[i] = half(b[i].m);
        for (int j = 0; j < 16; ++j) {
            v[j] = int8_t(b[i].qs[j] & 15);
            v[j + 16] = int8_t(b[i].qs[j] >> 4);
        }
    }
}

uint32_t load_u32(const uint8_t* p) {
    uint32_t x;
    std::memcpy(&x, p, 4);
    return x;
}

void unpack_q5_1(const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const auto* b = blocks<BlockQ5_1>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        min[i] = half(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; ++j) {
            v[j] = int8_t((b[i].qs[j] & 15) | (((qh >> j) & 1) << 4));
            v[j + 16] = int8_t((b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
    }
}

void unpack_q8_1(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ8_1>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        std::memcpy(v, b[i].qs, 32);
    }
}

void unpack_q2_k(const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const auto* b = blocks<BlockQ2_K>(row);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 16, min += 16) {
        const float d = half(b[i].d), dmin = half(b[i].dmin);
        for (int g = 0; g < 16; ++g) {
            scale[g] = d * float(b[i].scales[g] & 15);
            min[g] = -dmin * float(b[i].scales[g] >> 4);
        }
        for (int e = 0; e < 256; ++e) {
            const int half_index = e / 128, shift = 2 * ((e % 128) / 32), l = e % 32;
            v[e] = int8_t((b[i].qs[32 * half_index + l] >> shift) & 3);
        }
    }
}

void unpack_q3_k(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ3_K>(row);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 16) {
        const float d = half(b[i].d);
        const uint8_t* s = b[i].scales;
        for (int g = 0; g < 16; ++g) {
            const int low = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
            const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            scale[g] = d * float((low | (high << 4)) - 32);
        }
        for (int e = 0; e < 256; ++e) {
            const int half_index = e / 128, j = (e % 128) / 32, l = e % 32;
            const int q2 = (b[i].qs[32 * half_index + l] >> (2 * j)) & 3;
            const bool high_bit = (b[i].hmask[l] >> (4 * half_index + j)) & 1;
            v[e] = int8_t(q2 - (high_bit ? 0 : 4));
        }
    }
}

void unpack_q5_k(const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const auto* b = blocks<BlockQ5_K>(row);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 8, min += 8) {
        const float d = half(b[i].d), dmin = half(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            get_scale_min(j, b[i].scales, sc, m);
            scale[j] = d * float(sc);
            min[j] = -dmin * float(m);
            for (int l = 0; l < 32; ++l) {
                const int low = (b[i].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                const int high = (b[i].qh[l] >> j) & 1;
                v[32 * j + l] = int8_t(low | (high << 4));
            }
        }
    }
}

void unpack_q8_k(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ8_K>(row);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 8) {
        for (int j = 0; j < 8; ++j) scale[j] = b[i].d;
        std::memcpy(v, b[i].qs, 256);
    }
}

// --- AVX2 unpackers for the default model's types --------------------------------------------

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store256(void* p, __m256i x) { _mm256_storeu_si256(static_cast<__m256i*>(p), x); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles (the Q4/Q5 order).
inline __m256i nibbles_32(const uint8_t* qs) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// Bit j of a 32-bit word -> byte j, as 0xff or 0.
inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

void unpack_q4_0_avx2(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ4_0>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        store256(v, _mm256_sub_epi8(nibbles_32(b[i].qs), _mm256_set1_epi8(8)));
    }
}

void unpack_q5_0_avx2(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ5_0>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        // q - 16 as int8: where bit 4 is clear, setting the top four bits subtracts 16.
        const __m256i high_clear = _mm256_andnot_si256(bits_to_bytes(load_u32(b[i].qh)), _mm256_set1_epi8(char(0xf0)));
        store256(v, _mm256_or_si256(nibbles_32(b[i].qs), high_clear));
    }
}

void unpack_q8_0_avx2(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ8_0>(row);
    for (int64_t i = 0; i < cols / 32; ++i, v += 32) {
        scale[i] = half(b[i].d);
        store256(v, load256(b[i].qs));
    }
}

void unpack_q4_k_avx2(const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const auto* b = blocks<BlockQ4_K>(row);
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 8, min += 8) {
        const float d = half(b[i].d), dmin = half(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            get_scale_min(j, b[i].scales, sc, m);
            scale[j] = d * float(sc);
            min[j] = -dmin * float(m);
        }
        for (int g = 0; g < 4; ++g) {
            const __m256i q = load256(b[i].qs + 32 * g);
            store256(v + 64 * g, _mm256_and_si256(q, low4));
            store256(v + 64 * g + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
        }
    }
}

void unpack_q6_k_avx2(const void* row, int64_t cols, int8_t* v, float* scale, float*) {
    const auto* b = blocks<BlockQ6_K>(row);
    const __m256i low4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < cols / 256; ++i, v += 256, scale += 16) {
        const float d = half(b[i].d);
        for (int g = 0; g < 16; ++g) scale[g] = d * float(b[i].scales[g]);
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = load256(b[i].ql + 64 * h), ql1 = load256(b[i].ql + 64 * h + 32);
            const __m256i qh = load256(b[i].qh + 32 * h);
            // The top two bits of chunk c sit in bits 2c..2c+1 of qh; move them to bits 4..5.
            const __m256i c0 = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            const __m256i c1 = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            const __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, m2));
            const __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            int8_t* out = v + 128 * h;
            store256(out, _mm256_sub_epi8(c0, bias));
            store256(out + 32, _mm256_sub_epi8(c1, bias));
            store256(out + 64, _mm256_sub_epi8(c2, bias));
            store256(out + 96, _mm256_sub_epi8(c3, bias));
        }
    }
}

using Unpacker = void (*)(const void*, int64_t, int8_t*, float*, float*);

Unpacker unpacker(TensorType t) {
    switch (t) {
        case TensorType::Q4_0: return unpack_q4_0_avx2;
        case TensorType::Q4_1: return unpack_q4_1;
        case TensorType::Q5_0: return unpack_q5_0_avx2;
        case TensorType::Q5_1: return unpack_q5_1;
        case TensorType::Q8_0: return unpack_q8_0_avx2;
        case TensorType::Q8_1: return unpack_q8_1;
        case TensorType::Q2_K: return unpack_q2_k;
        case TensorType::Q3_K: return unpack_q3_k;
        case TensorType::Q4_K: return unpack_q4_k_avx2;
        case TensorType::Q5_K: return unpack_q5_k;
        case TensorType::Q6_K: return unpack_q6_k_avx2;
        case TensorType::Q8_K: return unpack_q8_k;
        default: return nullptr;
    }
}

}  // namespace

Int8Layout int8_layout(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q5_0:
        case TensorType::Q8_0:
        case TensorType::Q8_1: return {32, false, 32};
        case TensorType::Q4_1:
        case TensorType::Q5_1: return {32, true, 32};
        case TensorType::Q2_K: return {16, true, 256};
        case TensorType::Q3_K:
        case TensorType::Q6_K: return {16, false, 256};
        case TensorType::Q4_K:
        case TensorType::Q5_K: return {32, true, 256};
        case TensorType::Q8_K: return {32, false, 256};
        default: return {0, false, 0};
    }
}

void unpack_row_int8(TensorType t, const void* row, int64_t cols, int8_t* v, float* scale, float* min) {
    const Unpacker f = unpacker(t);
    if (!f) throw Error("unpack_row_int8: " + std::string(traits(t).name) + " is not an integer type");
    f(row, cols, v, scale, min);
}

}  // namespace kvchat::kernels
