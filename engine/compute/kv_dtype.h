#pragma once
// The number format a cache keeps full-precision keys and values in: f16 (llama.cpp's default,
// and the default here), bf16 or f32. Keys and values are computed in f32 and converted as they
// are stored; kernels read the stored format directly.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kvchat {

enum class KvDtype : uint8_t { F16 = 0, BF16 = 1, F32 = 2 };

const char* kv_dtype_name(KvDtype t);  // "f16", "bf16", "f32"
std::optional<KvDtype> parse_kv_dtype(const std::string& name);
inline size_t kv_dtype_bytes(KvDtype t) { return t == KvDtype::F32 ? 4 : 2; }

// n values from f32 into `t` at dst (round to nearest even), and back.
void kv_store_row(KvDtype t, const float* src, void* dst, int64_t n);
void kv_load_row(KvDtype t, const void* src, float* dst, int64_t n);
// n records (a key row then a value row, kv_dim values each in `t`) at dst, from f32 rows k and v
// (kv_dim apart): the layout of a cache layer's slots and residual.
void kv_store_records(KvDtype t, const float* k, const float* v, int64_t kv_dim, int64_t n, void* dst);
// n values of format `from` at src into format `to` at dst (through f32).
void kv_convert_row(KvDtype from, const void* src, KvDtype to, void* dst, int64_t n);
// Whether every one of n f32 values survives storage in `t` unchanged.
bool kv_representable(KvDtype t, const float* x, int64_t n);

}  // namespace kvchat
