#pragma once
// Q4_1 weights in llama.cpp's order (q4_1_product.cpp): the product matmul() computes for them.
#include "engine/compute/matmul.h"

namespace kvchat {

// y = x W^T for Q4_1 weights (n_tokens x cols floats in, n_tokens x rows out), as llama.cpp's CPU
// backend computes it, bit for bit: x quantized to Q8_1 blocks (quantize_row_q8_1), then per row
// and token ggml_vec_dot_q4_1_q8_1 (its AVX2/AVX-512 build): per block of 32 and lane l of 8 the
// exact integer s = sum of the products of columns 4l..4l+3, acc[l] = fma(dw * dx, float(s),
// acc[l]) over the blocks in order, the minimum's part m += m_w * s_x in one float (Q8_1's s is
// fp16(dx * sum(q)) with dx unrounded; the product of two fp16 values is exact, so fused or not
// is the same); y = hsum8(acc) + m. llama.cpp has no batched kernel
// for Q4_1 on x86 (no tinyBLAS, no repacking), so every token count takes this same dot product.
// Every SIMD level computes the same values: the lane sums are exact integers and the float
// steps the same operations (a batch takes 512-bit registers at AVX-512, for speed only).
// `avx512`: the batch kernel at AVX-512 VNNI (the caller's SIMD level for this kernel family).
void q4_1_product(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, bool avx512);
// Several products of one input (Q4_1 matrices of the same width): y[i] = x W[i]^T, each the same
// values as q4_1_product gives. x is quantized once, and a decode's rows of all the matrices are
// one parallel step.
void q4_1_products(const WeightMatrix* const* w, float* const* y, int count, const float* x, int64_t n_tokens,
                   ThreadPool& pool, bool avx512);

struct BlockQ8_1;

namespace q4_1 {
// Up to 16 rows unpacked once for a batch of tokens: per row and block, 32 weight bytes (0..15,
// in column order) at q + 32 * (row * n_blocks + block), the block's scale d and minimum m.
struct UnpackedPanel {
    const uint8_t* q;
    const float* d;
    const float* m;
    int64_t n_blocks;
};
// The batch kernel at AVX-512 VNNI (q4_1_product_avx512.cpp): rows [0, n_rows) of u against
// tokens [0, n_tokens) of xq (n_blocks Q8_1 blocks each); y[t * y_stride + r].
void panel_rows_avx512(const UnpackedPanel& u, int n_rows, const BlockQ8_1* xq, int64_t n_tokens, float* y,
                       int64_t y_stride);

// The decode kernel at AVX-512 VNNI keeps two rows in one 512-bit register (row A's low and high
// nibbles in quarters 0 and 2, row B's in 1 and 3), so one token's activation blocks are laid out
// to match once per product: per block, 64 bytes (columns 0-15 twice, then 16-31 twice) and 4
// floats (dx, sx, dx, sx).
struct DecodeActivations {
    const int8_t* q;
    const float* ds;
    int64_t n_blocks;
};
// Fills q (64 * n_blocks bytes, 64-byte aligned) and ds (4 * n_blocks floats) from one token's blocks.
void prepare_decode_avx512(const BlockQ8_1* x, int64_t n_blocks, int8_t* q, float* ds);
// y[r] for rows [0, n_rows) (`stride` bytes apart) against one token: the same bits as dot_rows.
void decode_rows_avx512(const uint8_t* rows, size_t stride, int n_rows, const DecodeActivations& x, float* y);
}  // namespace q4_1

}  // namespace kvchat
