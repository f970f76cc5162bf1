#pragma once
// What attention_llama_order.cpp shares with its AVX-512 kernels (attention_llama_order_avx512.cpp):
// the two dense steps of a prefill work item, in llama.cpp's order (see that file). Both levels
// compute the same values bit for bit.
#include <cstdint>

namespace kvchat::attention_kernels {

struct PrefillKernels {
    // S[r * ldc + c] = q[r] · k[c][goff, goff + hd) summed as tinyBLAS does (16 lanes by dimension,
    // _mm512_reduce_add_ps's tree) for r < R and c in [c0, c1) whose k[c] is set; the others are
    // left as they are. hd is a multiple of 16.
    void (*scores)(const float* const* q, int R, const float* const* k, int goff, int hd, int c0, int c1, float* S,
                   int64_t ldc);
    // o[r][d] = sum over c in [c0, c1) of S[r * ldc + c] * vt[d * ld + c], 16 lanes by column, for
    // r < R, d < hd; c0 and c1 multiples of 16.
    void (*values)(const float* S, int64_t ldc, int R, const float* vt, int64_t ld, int hd, int c0, int c1,
                   float* const* o);
};

const PrefillKernels& avx512_prefill_kernels();

}  // namespace kvchat::attention_kernels
