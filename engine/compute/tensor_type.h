#pragma once
// Tensor element types with the GGML/GGUF numbering and bit layouts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvchat {

enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    BF16 = 30,
};

struct TypeTraits {
    std::string_view name;
    int64_t block_elems;  // elements per block (1 for plain floats)
    size_t block_bytes;   // bytes per block
};

// Traits for a type id read from a file; nullopt for ids kvchat does not support.
std::optional<TypeTraits> type_traits(uint32_t type_id);
// Traits of a supported type; throws kvchat::Error for a value outside the enum.
const TypeTraits& traits(TensorType t);
// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers;
// a partial block throws kvchat::Error here too).
size_t row_bytes(TensorType t, int64_t n);

// Converts n elements (a multiple of the block size) of type t at src to floats.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
// Reference quantizer (round to nearest as ggml's *_ref functions define it); for writing test
// models and for quantizing activations. n must be a multiple of the block size, src finite.
// F16, BF16, Q4_0..Q8_1 and Q8_K match ggml's reference bit for bit. Q2_K..Q6_K use a simpler
// scheme than ggml (no scale search): valid blocks, every element within half a step of its
// sub-block's grid, but not ggml's bytes.
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);

}  // namespace kvchat
