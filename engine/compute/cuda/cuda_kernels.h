#pragma once
// The CUDA kernels of the CUDA backend, each behind a plain C++ launcher (compiled by nvcc in
// cuda_kernels.cu, called from cuda_backend.cpp). Every pointer is device memory and every launch
// goes on `stream`; launchers never synchronize.
#include <cuda_runtime.h>

#include <cstdint>

namespace kvchat::cuda {

// Half-precision bits; the host side never needs CUDA's __half type.
using f16 = uint16_t;

void to_f16(const float* x, f16* y, int64_t n, cudaStream_t stream);
// y (n_tok x rows) = x (n_tok x cols) W^T for fp16 W (rows x cols), x rounded to fp16 as to_f16 does:
// a decode step's products in one launch. False (nothing launched) for more than 4 tokens.
bool gemv_f16(const f16* w, const float* x, float* y, int64_t n_tok, int64_t rows, int64_t cols, cudaStream_t stream);
void round_f16(float* x, int64_t n, float scale, cudaStream_t stream);
// Groups of `width` values: out = x / rms(x) * w, the squares summed in double as the CPU does.
void rms_norm(const float* x, float* out, int64_t groups, int64_t width, const float* w, float eps, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);
// x[r * width + i] += b[i] for r < rows
void add_bias(float* x, const float* b, int64_t rows, int64_t width, cudaStream_t stream);
// gate = act(gate) * up; gelu as the CPU's table: input and output on the fp16 grid.
// table: gelu_fp16_table() (gelu_table.h) uploaded, indexed by the input's fp16 bits.
void gelu_gated(float* gate, const float* up, int64_t n, const float* table, cudaStream_t stream);
void silu_gated(float* gate, const float* up, int64_t n, cudaStream_t stream);
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);
// Which row of the cos/sin table each of n tokens takes: device[t] (device memory), else
// inline_rows[t] for the first n_inline tokens (passed with the launch), else t.
struct RopeRows {
    const int32_t* device = nullptr;
    int32_t inline_rows[8] = {};
    int n_inline = 0;
};
// Rotates n rows (row t at x + t*row_stride, n_heads heads of head_dim) with the cos/sin table
// cs: table row r's `half` cosines then `half` sines at cs + r*2*half, row rows(t) for token t.
// half_split: pairs (i, i+half), else (2i, 2i+1).
void rope(float* x, int64_t row_stride, const float* cs, const RopeRows& rows, int64_t n, int n_heads, int head_dim,
          int half, bool half_split, cudaStream_t stream);
// dtype: 0 f16, 1 bf16, 2 f32 (KvDtype's values).
void kv_store(int dtype, const float* src, void* dst, int64_t n, cudaStream_t stream);
void kv_load(int dtype, const void* src, float* dst, int64_t n, cudaStream_t stream);

// A KIVI block's layout (kivi_block.h) as plain numbers.
struct KiviLayout {
    int nbits, group, value_group, kv_dim;
    int64_t k_codes, k_scale, k_zero, v_codes, v_scale, v_zero, block_bytes;
};
void kivi_quantize(const KiviLayout& f, const float* k, const float* v, int64_t stride, int count, uint8_t* block,
                   cudaStream_t stream);

// Attention over segments of columns, in order: full-precision slot views, then quantized block
// rows. Mirrors engine/compute/attention.cpp's semantics (visibility, sinks, softcap, f16 probs).
struct AttendSegment {
    const void* k;        // slots: kv head 0 of slot 0; blocks: the block record
    const void* v;
    const int32_t* pos;   // slots only
    int64_t n;            // columns
    int64_t stride;       // slots: values between slots
    int32_t first_pos;    // blocks only
    int32_t is_block;
};
struct AttendParams {
    const float* q;
    const float* q_sink;  // or null
    const int32_t* qpos;
    float* out;
    int64_t n_q;
    int n_head, n_head_kv, head_dim;
    float scale, softcap;
    int window, sink_end;
    int dtype;
    bool f16_probs;
    KiviLayout kivi;  // when a segment is a block
    const AttendSegment* segments;  // device memory
    int n_segments;
};
void attend(const AttendParams& p, cudaStream_t stream);
// The same for a few queries over slot views only (no blocks): the columns (n_cols, the views'
// together) split between blocks. scratch: attend_split_scratch(p, n_cols) floats of device memory.
int64_t attend_split_scratch(const AttendParams& p, int64_t n_cols);
void attend_split(const AttendParams& p, int64_t n_cols, float* scratch, cudaStream_t stream);

}  // namespace kvchat::cuda
