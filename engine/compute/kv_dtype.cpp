#include "engine/compute/kv_dtype.h"

#include "engine/compute/quant_blocks.h"

#include <immintrin.h>

#include <cstring>

namespace kvchat {

const char* kv_dtype_name(KvDtype t) {
    switch (t) {
        case KvDtype::F16: return "f16";
        case KvDtype::BF16: return "bf16";
        case KvDtype::F32: return "f32";
    }
    return "f16";
}

std::optional<KvDtype> parse_kv_dtype(const std::string& name) {
    if (name == "f16") return KvDtype::F16;
    if (name == "bf16") return KvDtype::BF16;
    if (name == "f32") return KvDtype::F32;
    return std::nullopt;
}

void kv_store_row(KvDtype t, const float* src, void* dst, int64_t n) {
    switch (t) {
        case KvDtype::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case KvDtype::F16: {
            auto* d = static_cast<uint16_t*>(dst);
            int64_t i = 0;
            for (; i + 8 <= n; i += 8)
                _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
            for (; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
            return;
        }
        case KvDtype::BF16: {
            auto* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
            return;
        }
    }
}

void kv_load_row(KvDtype t, const void* src, float* dst, int64_t n) {
    switch (t) {
        case KvDtype::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case KvDtype::F16: {
            const auto* s = static_cast<const uint16_t*>(src);
            int64_t i = 0;
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
            for (; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
            return;
        }
        case KvDtype::BF16: {
            const auto* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
            return;
        }
    }
}

void kv_store_records(KvDtype t, const float* k, const float* v, int64_t kv_dim, int64_t n, void* dst) {
    const size_t row = static_cast<size_t>(kv_dim) * kv_dtype_bytes(t);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i, out += 2 * row) {
        kv_store_row(t, k + i * kv_dim, out, kv_dim);
        kv_store_row(t, v + i * kv_dim, out + row, kv_dim);
    }
}

void kv_convert_row(KvDtype from, const void* src, KvDtype to, void* dst, int64_t n) {
    if (from == to) {
        std::memcpy(dst, src, static_cast<size_t>(n) * kv_dtype_bytes(from));
        return;
    }
    float tmp[256];
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; i += 256) {
        const int64_t m = n - i < 256 ? n - i : 256;
        kv_load_row(from, s + static_cast<size_t>(i) * kv_dtype_bytes(from), tmp, m);
        kv_store_row(to, tmp, d + static_cast<size_t>(i) * kv_dtype_bytes(to), m);
    }
}

bool kv_representable(KvDtype t, const float* x, int64_t n) {
    if (t == KvDtype::F32) return true;
    uint16_t h[256];
    float back[256];
    for (int64_t i = 0; i < n; i += 256) {
        const int64_t m = n - i < 256 ? n - i : 256;
        kv_store_row(t, x + i, h, m);
        kv_load_row(t, h, back, m);
        if (std::memcmp(back, x + i, static_cast<size_t>(m) * sizeof(float)) != 0) return false;
    }
    return true;
}

}  // namespace kvchat
