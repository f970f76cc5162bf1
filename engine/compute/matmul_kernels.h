#pragma once
// What matmul.cpp shares with the kernel files (int8_unpack.cpp, matmul_avx2.cpp,
// matmul_avx512.cpp, matmul_amx_avx512.cpp).
//
// Q5_0, Q8_0, Q4_K and Q6_K (the types of a Q4_K_M GGUF) take llama.cpp's order, described
// below: reference_order.inc's 256-bit kernels and their 512-bit counterparts in matmul_avx512.cpp
// (a streamed kernel for one or two tokens, 16-row panels for more). Every other integer type
// goes one of three ways:
// - fused dot kernels, one per hot weight type, that unpack a block in registers and use it at
//   once (decode: one or two tokens, memory-bound, weights streamed once);
// - int8 panels for every integer type: 16 rows unpacked once into int8 values with a float
//   scale (and optional min) per group of 16 or 32 columns, interleaved so that one vector load
//   holds 4 columns of all 16 rows; a register-blocked micro-kernel then reuses each loaded
//   vector across up to 16 tokens (short prompts, and every type without a fused kernel);
// - AMX tiles (prefill of 16 tokens or more): the same unpacked rows, 16 rows x 16 tokens per
//   tile multiply.
#include "engine/compute/tensor_type.h"

#include <cstddef>
#include <cstdint>

namespace kvchat::kernels {

inline constexpr int kPanelRows = 16;

// x quantized to int8 per block: q = round(x / d), |q| <= 127.
struct QuantizedActivations {
    int64_t n_tokens = 0;
    int64_t cols = 0;
    int64_t block = 0;              // columns sharing one scale: 32, or 256 for K-quant weights
    const int8_t* q = nullptr;      // n_tokens x cols
    const float* d = nullptr;       // n_tokens x cols/block
    const int16_t* sum16 = nullptr;  // n_tokens x cols/16: sums of q over 16 columns

    // Only for 32-column blocks: per block 8 int32, the first -sum(q), the rest 0. A vpdpbusd
    // chain that starts from it cancels the unsigned offset of the weights in one step.
    const int32_t* neg_sum8 = nullptr;  // n_tokens x cols/32 x 8
    // Also only for 32-column blocks and a token or two: -sum(q) over each 4 columns, the lanes
    // of a vpdpbusd, so that a chain over unsigned weights (q + z) starts from -z times it.
    const int32_t* neg_sum4 = nullptr;  // n_tokens x cols/4

    // For matmul.cpp only: an AVX-512 file that calls an inline function may emit the one copy
    // the linker keeps, compiled for AVX-512.
    const int8_t* q_row(int64_t t) const { return q + t * cols; }
    const float* d_row(int64_t t) const { return d + t * (cols / block); }
    const int16_t* sum16_row(int64_t t) const { return sum16 + t * (cols / 16); }
    const int32_t* neg_sum4_row(int64_t t) const { return neg_sum4 + t * (cols / 4); }
};

// One token's row of QuantizedActivations.
struct TokenActivations {
    const int8_t* q;
    const float* d;
    const int16_t* sum16;
    const int32_t* neg_sum8;
};

// Per token and panel group (16 or 32 columns): what the panel micro-kernel folds in per group.
struct ActivationGroups {
    int64_t n_groups = 0;  // per token
    const float* d = nullptr;       // activation scale of the group
    const float* d_sum = nullptr;   // d * sum(q): multiplies the weight min
    const int32_t* bias = nullptr;  // -128 * sum(q): undoes the +128 that makes weights unsigned
};

// How a weight type unpacks to int8 groups: w = scale * v + min, v signed 8-bit.
struct Int8Layout {
    int group;     // 16 or 32
    bool has_min;  // types with an additive per-group minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K)
    int act_block;  // activation block: 32 (Q8_0 style) or 256 (Q8_K style)
};

// The layout of an integer weight type; group == 0 for the float types.
Int8Layout int8_layout(TensorType t);

// Unpacks one row of `cols` elements: v[cols] int8, scale[cols/group], min[cols/group] (when the
// layout has mins). SIMD for the hot types, plain code for the rest.
void unpack_row_int8(TensorType t, const void* row, int64_t cols, int8_t* v, float* scale, float* min);

// One SIMD level's kernels.
struct KernelSet {
    // y[r] = dot(row r, token) for r in [0, n_rows): rows `stride` bytes apart. Null when the
    // type has no fused kernel.
    using FusedDot = void (*)(const void* rows, size_t stride, int64_t n_rows, int64_t cols,
                              const TokenActivations& x, float* y);
    FusedDot fused[32] = {};

    // Size in bytes of a packed panel for `cols` columns of `layout`.
    size_t (*panel_bytes)(const Int8Layout& layout, int64_t cols);
    // Packs up to 16 rows (missing ones as zeros) of a weight matrix into `panel`. scratch holds
    // 16 * cols int8 values plus 2 * 16 * cols/group floats.
    void (*pack_panel)(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows,
                       int64_t cols, void* scratch, void* panel);
    // Float weights (F32, F16, BF16): y[t * y_stride + r] = dot(row r, x[t]) for all tokens, x
    // unquantized. Null where matmul.cpp's AVX2 loop serves.
    void (*float_rows)(TensorType t, const uint8_t* rows, size_t stride, int64_t n_rows, int64_t cols, const float* x,
                       int64_t n_tokens, float* y, int64_t y_stride) = nullptr;

    // y[t * y_stride + r] for tokens [t0, t1) and r in [0, n_rows) from a packed panel.
    void (*panel_product)(const Int8Layout& layout, const void* panel, int64_t cols, const QuantizedActivations& x,
                          const ActivationGroups& g, int64_t t0, int64_t t1, float* y, int64_t y_stride, int n_rows);

    // llama.cpp's order (see below): up to kOrderedRows weight rows, `stride` bytes apart, against
    // tokens [t0, t1); y[t * y_stride + r]. scratch: ordered_scratch_bytes(cols).
    using OrderedProduct = void (*)(TensorType t, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
                                    const QuantizedActivations& x, int64_t t0, int64_t t1, float* y, int64_t y_stride,
                                    void* scratch);
    OrderedProduct ordered_blocks32 = nullptr;  // Q5_0, Q8_0
    OrderedProduct ordered_q4_k = nullptr;
    OrderedProduct ordered_q6_k_tiled = nullptr;  // Q6_K in a call of 8 tokens or more (fewer: fused[Q6_K])
};

// --- llama.cpp's order ------------------------------------------------------------------------
// For the types GGUF models of the default kind hold, the products reproduce llama.cpp's CPU
// backend (AVX-512 build) bit for bit: same activation quantization, same integer partial sums,
// same float operations in the same order. Greedy decoding then picks llama.cpp's token even at
// near-ties. Integer sums are exact, so only where floats meet matters:
// - Q5_0, Q8_0 (llama.cpp: tinyBLAS for 2+ tokens, ggml_vec_dot for one; both the same): per
//   block of 32 and per lane l of 8, the integer s = sum of 4 products (columns 4l..4l+3);
//   acc[l] = fma(dw * dx, float(s), acc[l]) over the blocks in order; y = hsum8(acc), with
//   hsum8(a) = ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).
// - Q4_K (llama.cpp repacks it: gemm_q4_K_8x8 for the tokens in whole groups of four of the
//   call, gemv for the rest): the exact integers S = sum_j sc_j * dot_j and M = sum_j m_j * xsum_j
//   over each pair of sub-blocks (gemm) or each super-block (gemv); A = fma(float(S), d * dx, A),
//   B = fma(float(M), dmin * dx, B) in order; y = A - B.
// - Q6_K in a call of fewer than 8 tokens (ggml_vec_dot_q6_K_q8_K): 8 integer lanes per
//   super-block (fused_q6_k's), acc[l] = fma(dx * d, float(lane), acc[l]); y = hsum8(acc).
// - Q6_K in a call of 8 tokens or more (the tiled K-quant matmul): per super-block the exact
//   integer S; acc = fma(float(S) * d, dx, acc).
// Activations: Q8_0 blocks with an fp16 scale fp16(max/127), Q8_K blocks with the scale
// 1 / (127 / max); q = round(x * 127 / max) in both.
inline constexpr int kOrderedRows = 16;
size_t ordered_scratch_bytes(int64_t cols);

const KernelSet& avx2_kernels();
const KernelSet& avx512_kernels();
namespace avx2 {
// As KernelSet::pack_panel, with values stored as v + 128 (unsigned) for vpdpbusd.
void pack_panel_unsigned(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows,
                         int64_t cols, void* scratch, void* panel);
}  // namespace avx2

// AMX-INT8 prefill (matmul_amx_avx512.cpp). amx_usable: the CPU has AMX-INT8 and the OS granted
// this process the tile state.
bool amx_usable();
// Activations interleaved for the tiles, per block of 16 tokens: cols x 16 bytes, then the
// group scales and scale*sums transposed to [group][16 tokens].
size_t amx_activation_bytes(const Int8Layout& layout, int64_t cols, int64_t n_tokens);
void amx_pack_activations(const Int8Layout& layout, const QuantizedActivations& x, const ActivationGroups& g,
                          int64_t block_begin, int64_t block_end, void* packed);
// Up to 16 weight rows against all tokens; scratch: amx_scratch_bytes.
size_t amx_scratch_bytes(const Int8Layout& layout, int64_t cols);
void amx_rows(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
              const void* packed_x, int64_t n_tokens, void* scratch, float* y, int64_t y_stride);

}  // namespace kvchat::kernels
