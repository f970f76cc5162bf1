#include "engine/compute/kivi_block.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kvchat {

KiviFormat::KiviFormat(int nbits_, int group_, int value_group_, int kv_dim_)
    : nbits(nbits_), group(group_), value_group(value_group_), kv_dim(kv_dim_) {
    auto align = [](size_t x) { return (x + 63) & ~size_t{63}; };
    size_t at = 0;
    k_codes = at;
    at = align(at + static_cast<size_t>(group) * row_code_bytes());
    k_scale = at;
    at += sizeof(float) * kv_dim;
    k_zero = at;
    at = align(at + sizeof(float) * kv_dim);
    v_codes = at;
    at = align(at + static_cast<size_t>(group) * row_code_bytes());
    const size_t n_vs = static_cast<size_t>(group) * (kv_dim / value_group);
    v_scale = at;
    at += sizeof(float) * n_vs;
    v_zero = at;
    at = align(at + sizeof(float) * n_vs);
    block_bytes = at;
}

namespace {

// Asymmetric quantization parameters of [lo, hi] for `levels` - 1 steps.
inline void params(float lo, float hi, int levels, float& scale, float& zero) {
    zero = lo;
    scale = (hi - lo) / static_cast<float>(levels - 1);
}

// Codes of 8 values, round((x - zero) * inv) clamped to [0, 2^nbits - 1], packed into nbits bytes.
inline void pack8_simd(const float* x, __m256 zero, __m256 inv, int nbits, uint8_t* out) {
    const __m256 c = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x), zero), inv, _mm256_set1_ps(0.5f));
    __m256i q = _mm256_cvttps_epi32(_mm256_max_ps(c, _mm256_setzero_ps()));  // max also turns NaN into 0
    q = _mm256_min_epi32(q, _mm256_set1_epi32((1 << nbits) - 1));
    if (nbits == 8) {
        const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(p16, p16));
        return;
    }
    const __m256i sh = nbits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i v = _mm256_sllv_epi32(q, sh);
    __m128i o = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    o = _mm_or_si128(o, _mm_shuffle_epi32(o, 0x4E));
    o = _mm_or_si128(o, _mm_shuffle_epi32(o, 0xB1));
    const uint32_t w = static_cast<uint32_t>(_mm_cvtsi128_si32(o));
    std::memcpy(out, &w, static_cast<size_t>(nbits));
}

}  // namespace

void kivi_quantize_block(const KiviFormat& f, const float* k, const float* v, int64_t stride, int count, uint8_t* block) {
    const int D = f.kv_dim;
    const int levels = 1 << f.nbits;
    std::memset(block, 0, f.block_bytes);
    float* ks = reinterpret_cast<float*>(block + f.k_scale);
    float* kz = reinterpret_cast<float*>(block + f.k_zero);
    // Keys: min and max per channel over the block's tokens.
    std::vector<float> lo(k, k + D), hi(k, k + D), inv(static_cast<size_t>(D));
    for (int j = 1; j < count; ++j) {
        const float* row = k + j * stride;
        for (int c = 0; c < D; ++c) {
            lo[c] = row[c] < lo[c] ? row[c] : lo[c];
            hi[c] = row[c] > hi[c] ? row[c] : hi[c];
        }
    }
    for (int c = 0; c < D; ++c) {
        params(lo[c], hi[c], levels, ks[c], kz[c]);
        inv[c] = ks[c] > 0.0f ? 1.0f / ks[c] : 0.0f;
    }
    for (int j = 0; j < count; ++j) {
        const float* row = k + j * stride;
        uint8_t* out = block + f.k_codes + j * f.row_code_bytes();
        for (int c0 = 0; c0 < D; c0 += 8)
            pack8_simd(row + c0, _mm256_loadu_ps(kz + c0), _mm256_loadu_ps(inv.data() + c0), f.nbits, out + c0 / 8 * f.nbits);
    }
    // Values: per token, per value group of channels.
    const int G = f.value_group;
    for (int j = 0; j < count; ++j) {
        const float* row = v + j * stride;
        float* vs = reinterpret_cast<float*>(block + f.v_scale) + static_cast<size_t>(j) * (D / G);
        float* vz = reinterpret_cast<float*>(block + f.v_zero) + static_cast<size_t>(j) * (D / G);
        uint8_t* out = block + f.v_codes + j * f.row_code_bytes();
        for (int g = 0; g < D / G; ++g) {
            float l = row[g * G], h = row[g * G];
            for (int c = g * G; c < (g + 1) * G; ++c) {
                l = row[c] < l ? row[c] : l;
                h = row[c] > h ? row[c] : h;
            }
            params(l, h, levels, vs[g], vz[g]);
            const float iv = vs[g] > 0.0f ? 1.0f / vs[g] : 0.0f;
            for (int c0 = g * G; c0 < (g + 1) * G; c0 += 8)
                pack8_simd(row + c0, _mm256_set1_ps(vz[g]), _mm256_set1_ps(iv), f.nbits, out + c0 / 8 * f.nbits);
        }
    }
}

void kivi_unpack(const uint8_t* row, int nbits, int first, int n, float* out) {
    const uint8_t* p = row + static_cast<size_t>(first) / 8 * nbits;
    if (nbits == 8) {
        for (int i = 0; i < n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)))));
    } else if (nbits == 4) {
        const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        const __m256i mask = _mm256_set1_epi32(15);
        for (int i = 0; i < n; i += 8) {
            uint32_t w;
            std::memcpy(&w, p + i / 2, 4);
            const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts), mask);
            _mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(c));
        }
    } else {
        const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        const __m256i mask = _mm256_set1_epi32(3);
        for (int i = 0; i < n; i += 8) {
            uint16_t w;
            std::memcpy(&w, p + i / 4, 2);
            const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), shifts), mask);
            _mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(c));
        }
    }
}

void kivi_dequantize_token(const KiviFormat& f, const uint8_t* block, int j, float* k, float* v) {
    const int D = f.kv_dim;
    kivi_unpack(f.key_row(block, j), f.nbits, 0, D, k);
    const float* ks = f.key_scale(block);
    const float* kz = f.key_zero(block);
    for (int c = 0; c < D; ++c) k[c] = k[c] * ks[c] + kz[c];
    kivi_unpack(f.value_row(block, j), f.nbits, 0, D, v);
    const float* vs = f.value_scale(block, j);
    const float* vz = f.value_zero(block, j);
    for (int c = 0; c < D; ++c) v[c] = v[c] * vs[c / f.value_group] + vz[c / f.value_group];
}

}  // namespace kvchat
