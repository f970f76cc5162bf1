#pragma once
// What attention_reference_order.cpp shares with its AVX-512 kernels (attention_reference_order_avx512.cpp):
// the two dense steps of a prefill work item, in llama.cpp's order (see that file). Both levels
// compute the same values bit for bit. Keys and values are read as stored: f16 (llama.cpp's cache)
// or f32 holding f16 values (dt says which; the conversion is exact, so the values agree).
#include "engine/compute/kv_dtype.h"

#include <cstdint>

namespace kvchat::attention_kernels {

struct PrefillKernels {
    // S[r * ldc + c] = q[r] · k[c][goff, goff + hd) summed as tinyBLAS does (16 lanes by dimension,
    // _mm512_reduce_add_ps's tree) for r < R and c in [c0, c1) whose k[c] is set; the others are
    // left as they are. hd is a multiple of 16.
    void (*scores)(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1,
                   float* S, int64_t ldc);
    // o[r][d] = sum over c in [c0, c1) of S[r * ldc + c] * vt[d * ld + c], 16 lanes by column, for
    // r < R, d < hd; c0 and c1 multiples of 16.
    void (*values)(const float* S, int64_t ldc, int R, const float* vt, int64_t ld, int hd, int c0, int c1,
                   float* const* o);
};

// A decode step finds the cache in memory, not in a CPU cache (the weights streamed since the
// last step pushed it out), and a slot's keys and values are rows a few hundred bytes long spaced
// further apart: left to the hardware, reading them one kv head at a time stalls on each row
// (SmolLM2 at 640 tokens: 114 us a layer against 40 us with the rows in cache). Requested whole,
// a few columns ahead of the scores, the other kv heads and the values then come from L2 (62 us).
// Each work item requests its own kv head's part of the rows (offset, bytes), so that with
// several threads every thread's L2 gets what that thread reads.
struct DecodeAhead {
    const void* const* k;  // the column's keys of kv head 0 (null: no slot)
    const void* const* v;
    int64_t offset;  // bytes from there to the item's kv head
    int64_t bytes;   // of the item's kv head's keys (and as many of values)
};
inline constexpr int kDecodeAhead = 16;

// Requests into L2 every cache line of bytes [row, row + bytes) (none when row is null).
inline void request_row(const void* row, int64_t bytes) {
    if (!row || bytes <= 0) return;
    // From the line row starts in, so that a slice that does not start on a line gets its last one.
    const char* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63});
    const char* end = static_cast<const char*>(row) + bytes;
    // (prefetcht1 as a volatile asm: GCC 12 deletes a loop of _mm_prefetch with a run-time bound
    // as a loop without effects.)
    for (; line < end; line += 64) asm volatile("prefetcht1 %0" : : "m"(*line));
}
// Requests the keys and values of column c + kDecodeAhead into L2 (when the column exists and is held).
inline void request_ahead(const DecodeAhead* a, int c, int c1) {
    if (!a || c + kDecodeAhead >= c1) return;
    const void* k = a->k[c + kDecodeAhead];
    const void* v = a->v[c + kDecodeAhead];
    if (k) request_row(static_cast<const char*>(k) + a->offset, a->bytes);
    if (v) request_row(static_cast<const char*>(v) + a->offset, a->bytes);
}

// A decode step's (one query, ggml_vec_dot_f16's order) two dense steps.
struct DecodeKernels {
    // S[r * ldc + c] = q[r] · k[c][goff, goff + hd): four 16-lane accumulators by dimension / 16 % 4
    // over the first hd / 64 * 64 dimensions, added (0 + 2) + (1 + 3), the tree, the rest in
    // double; for r < R and c in [c0, c1) whose k[c] is set (the others left as they are).
    // With ahead set, it also requests into L2 the keys and values of the item's kv head of the
    // column kDecodeAhead columns on (ahead.k[c], ahead.v[c], from ahead.offset, ahead.bytes each).
    void (*scores)(const float* const* q, int R, const void* const* k, KvDtype dt, int goff, int hd, int c0, int c1,
                   float* S, int64_t ldc, const struct DecodeAhead* ahead);
    // o[r][d] for d in [d0, d1) (multiples of 16): sum over c in [c0, c1) (multiples of 64) of
    // S[r * ldc + c] * v[c][goff + d], one chain per column class c % 64, then per lane j = c % 16
    // (j + 32 + j) + (16 + j + 48 + j) and the tree; columns whose v[c] is null are skipped.
    void (*values)(const float* S, int64_t ldc, int R, const void* const* v, KvDtype dt, int goff, int c0, int c1,
                   float* const* o, int d0, int d1);
    // A row's softmax over columns [c0, c1) of sr (masked: -inf), as ggml_vec_soft_max_f32 with
    // ggml_v_expf: p = fp16(e / sum), zero where masked; c0 a multiple of 16, sr with room up to c1
    // rounded up to 16. Both levels give the same bits.
    void (*softmax)(float* sr, int c0, int c1);
};

// The 256-bit row softmax (attention_reference_order.cpp); ggml_v_expf over n floats (n a
// multiple of 16) 8 lanes at a time (ggml_expf8) and 16 (AVX-512 only): tests hold them equal.
void softmax_row_avx2(float* sr, int c0, int c1);
void expf_avx2(const float* x, float* y, int n);
void expf_avx512(const float* x, float* y, int n);

const PrefillKernels& avx512_prefill_kernels();
const DecodeKernels& avx512_decode_kernels();

// A decode step's R <= 4 rows over n consecutive columns of a KIVI block and channels [d0, d1)
// (for the AVX-512 kernel multiples of 16, at most 64 of them; value groups k0 .. k0 + nk - 1,
// nk <= 4; attention.cpp's 256-bit pv_block_decode takes the same steps): for c = 0..n-1
// in order, p = S[r * ldc + c0 + c], o[r][d] = fma(p * vs(c)[d / vg - k0], code_c[goff + d],
// o[r][d]) and zsum[r * nk + k] = fma(p, vz(c)[k], zsum[r * nk + k]); column c's codes at row0 + c
// * stride, its scales and zeros (from group k0) at vs0 / vz0 + c * per. With ahead0 set, the
// same channels of the next block's rows (ahead0 + c * stride) are requested into L2 on the way.
struct DecodeValues {
    const float* S;
    int64_t ldc;
    int c0, n, R;
    int nk, k0, vg;
    const uint8_t* row0;
    int64_t stride;
    const float* vs0;
    const float* vz0;
    int64_t per;
    int nbits, goff, d0, d1;
    float* const* o;
    float* zsum;
    const uint8_t* ahead0;
};

// Attention over KIVI blocks (attention.cpp; its AVX-512 kernels: attention_kivi_avx512.cpp),
// the same values as attention.cpp's 256-bit loops.
struct KiviKernels {
    // S[r * ldc + cols[i]] = (one 8-lane FMA chain over d < hd of qk[r * hd + d] * code_i[goff + d],
    // reduced by attention.cpp's tree) + bias[r], for i < n and r < R; code_i: the nbits-bit
    // codes of the packed row rows[i]. hd is a multiple of 16; scratch: (n + 65) * hd floats.
    void (*scores)(const float* qk, int R, int hd, const float* bias, const uint8_t* const* rows, const int* cols, int n,
                   int nbits, int goff, float* S, int64_t ldc, float* scratch);
    // o[r][d] = fma(ps[(a * R + r) * nk + d / vg - k0], code_a[goff + d], o[r][d]) for a = 0..n-1 in
    // order, r < R, d in [d0, d1); d0, d1 and vg multiples of 16; scratch: 32 * n floats.
    void (*values)(const float* ps, int R, int nk, int k0, int vg, const uint8_t* const* rows, int n, int nbits, int goff,
                   int d0, int d1, float* const* o, float* scratch);
    // The same steps over values already floats (full-precision slots): S[r * ldc + cols[i]] = the
    // tree of the 8-lane chain of q[r] · keys[i * hd ...] (+ bias[r] when bias is set), r < R;
    // scratch: (R + 1) * hd floats.
    void (*dense_scores)(const float* const* q, int R, int hd, const float* bias, const float* keys, const int* cols, int n,
                         float* S, int64_t ldc, float* scratch);
    // o[r][d + j] = fma(ps[(a * R + r) * nk + g[j / 16]], x[a * 16 * nv + j], o[r][d + j]) for a < n in
    // order, r < R, j < 16 * nv (nv 1 or 2).
    void (*dense_values)(const float* ps, int R, int nk, const int* g, const float* x, int n, int d, int nv, float* const* o);
    // scores' values for a decode step's R <= 4 rows over consecutive columns, read from the
    // codes in registers (no scratch): column i is S's column c0 + i, its codes at row0 + i *
    // stride; hd a multiple of 8. With ahead0 set, also requests into L2 ahead_bytes from ahead0 +
    // i * stride + goff's byte as column i is read (the next block's rows).
    void (*decode_scores)(const float* qk, int R, int hd, const float* bias, const uint8_t* row0, int64_t stride, int c0,
                          int n, int nbits, int goff, float* S, int64_t ldc, const uint8_t* ahead0, int64_t ahead_bytes);
    // values and the zero sums for a decode step's rows (DecodeValues).
    void (*decode_values)(const DecodeValues& a);
};
const KiviKernels& avx512_kivi_kernels();

}  // namespace kvchat::attention_kernels
