#pragma once
// Matrix products that read quantized weights in place.
#include "engine/compute/tensor_type.h"

#include <cstdint>
#include <string>

namespace kvchat {

class ThreadPool;

// How a weight matrix's blocks lie in memory.
enum class RowLayout : uint8_t {
    Plain,          // as GGML stores them: row after row
    Interleaved16,  // groups of 16 rows, each block's 16 rows side by side (interleaved_rows.h)
};

// A 2-D weight matrix in GGML order: `rows` rows of `cols` elements each, of `type`, row-major
// unless a backend rearranged it (layout) when it placed the model's weights.
struct WeightMatrix {
    TensorType type;
    int64_t rows;  // output features
    int64_t cols;  // input features (ne0 in GGUF)
    const void* data;
    RowLayout layout = RowLayout::Plain;
};

// y[t][r] = sum_c W[r][c] * x[t][c] for t in [0, n_tokens): x is n_tokens x cols floats, y is
// n_tokens x rows floats (both row-major, contiguous). Quantizes x per block as llama.cpp does
// (Q8_0 for the 32-element formats, Q8_K for the K-quants) and uses, per kernel family (weight
// type, and decode or batch), the SIMD level that measured fastest on this CPU (simd_choices.h;
// AVX2 baseline, AVX-512 VNNI and AMX where present). For Q5_0, Q8_0, Q4_K and Q6_K weights y is
// what llama.cpp's CPU backend computes, bit for bit, at every level (matmul_kernels.h); like
// llama.cpp's, it depends on n_tokens (Q4_K: tokens in whole groups of four; Q6_K: 8 or more).
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// y[i] = x W[i]^T for i in [0, count): several products of one input (a layer's q, k and v, or its
// gate and up), each the same values as matmul gives. Where the kernels allow (Q4_1 weights of one
// width) x is quantized once and a decode's products share one parallel step.
void matmuls(const WeightMatrix* const* w, float* const* y, int count, const float* x, int64_t n_tokens, ThreadPool& pool);

// Whether the decode of interleaved rows (interleaved_rows.h) runs its AVX-512 VNNI kernels (the
// CPU has them and no lower level is forced) rather than its AVX2 ones.
bool interleaved_decode_avx512();

// Row r of W as floats (for embedding lookups): dst has cols floats.
void weight_row(const WeightMatrix& w, int64_t r, float* dst);

// The highest SIMD level this CPU runs (or the forced one): "amx" (AVX-512 VNNI, plus AMX-INT8
// tiles for batches of tokens), "avx512-vnni" or "avx2". Each kernel family takes this level or
// a lower one that measured faster (simd_family_levels).
const char* simd_level();

// The level each kernel family chosen so far in this process runs at, e.g.
// "q8_0/decode avx512-vnni, q4_k/decode avx2"; empty while a level is forced.
std::string simd_family_levels();

// For tests and benchmarks: makes matmul use a lower level than the CPU allows ("avx2",
// "avx512-vnni", "amx"; Error when the CPU cannot run it); nullptr or "auto" restores the
// automatic choice. Affects every thread; call it while no matmul runs.
void force_simd_level(const char* level);

}  // namespace kvchat
