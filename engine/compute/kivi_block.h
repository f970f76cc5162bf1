#pragma once
// KIVI-style quantized storage of a block of `group` tokens of one layer (kv_dim channels each):
// keys per channel (one scale and zero point per channel over the block's tokens), values per
// token (one scale and zero point per `value_group` channels of a token), asymmetric, 2/4/8 bits.
// Codes are packed 8 channels to nbits bytes, channel i at bits [i*nbits, (i+1)*nbits), so a row
// unpacks with one shift per lane.
#include <cstddef>
#include <cstdint>

namespace kvchat {

struct KiviFormat {
    int nbits = 4;
    int group = 64;        // tokens per block (key groups)
    int value_group = 64;  // channels per value scale
    int kv_dim = 0;

    KiviFormat() = default;
    KiviFormat(int nbits, int group, int value_group, int kv_dim);
    size_t row_code_bytes() const { return static_cast<size_t>(kv_dim) * nbits / 8; }
    // Offsets inside one block record.
    size_t k_codes = 0, k_scale = 0, k_zero = 0, v_codes = 0, v_scale = 0, v_zero = 0;
    size_t block_bytes = 0;

    const uint8_t* key_row(const uint8_t* block, int j) const { return block + k_codes + j * row_code_bytes(); }
    const uint8_t* value_row(const uint8_t* block, int j) const { return block + v_codes + j * row_code_bytes(); }
    const float* key_scale(const uint8_t* block) const { return reinterpret_cast<const float*>(block + k_scale); }
    const float* key_zero(const uint8_t* block) const { return reinterpret_cast<const float*>(block + k_zero); }
    // value scales of token j: kv_dim / value_group of them
    const float* value_scale(const uint8_t* block, int j) const {
        return reinterpret_cast<const float*>(block + v_scale) + static_cast<size_t>(j) * (kv_dim / value_group);
    }
    const float* value_zero(const uint8_t* block, int j) const {
        return reinterpret_cast<const float*>(block + v_zero) + static_cast<size_t>(j) * (kv_dim / value_group);
    }
};

// Quantizes `count` (<= group) tokens: key row j at k + j*stride, value row j at v + j*stride.
// Rows past count are zero codes.
void kivi_quantize_block(const KiviFormat& f, const float* k, const float* v, int64_t stride, int count, uint8_t* block);
// The dequantized key and value rows of token j (kv_dim floats each).
void kivi_dequantize_token(const KiviFormat& f, const uint8_t* block, int j, float* k, float* v);
// n (a multiple of 8) codes starting at channel `first` (a multiple of 8) of a packed row, as floats.
void kivi_unpack(const uint8_t* row, int nbits, int first, int n, float* out);

}  // namespace kvchat
