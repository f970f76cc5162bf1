#pragma once
// Weights rearranged for decoding (RowLayout::Interleaved16): a token's product then keeps one
// row in each 32-bit lane of a 512-bit register, so sixteen rows advance together with no
// shuffles and no horizontal sums per row (at AVX2, eight rows per register). The CPU backend
// rearranges Q4_1, Q5_0 and Q8_0 matrices this way when it places a model; the values computed are
// the plain layout's, bit for bit (the same lane sums and float steps, see q4_1_product.h and
// matmul_kernels.h), only the loads differ.
//
// Layout: groups of 16 consecutive rows, each group 16 * row_bytes long, in row order. Inside a
// group, with nb blocks of 32 columns per row, block b of rows 0..15:
//   values: 64-byte vectors whose lane r (bytes 4r..4r+3) holds row r's bytes of one column
//     group. Q4_1 and Q5_0: 4 vectors at 256 b, vector k = the packed bytes 4k..4k+3
//     (low nibbles: columns 4k..4k+3, high nibbles: 16 + 4k..16 + 4k + 3). Q8_0: 8 vectors at
//     512 b, vector l = columns 4l..4l+3 as unsigned bytes (q + 128).
//   Q5_0: then, at nb * 256 + 64 b, 8 masks of 64 bits: bit 4r + j of mask l = the fifth bit of
//     row r's column 4l + j.
//   then the 16 rows' fp16 scales d (32 bytes per block), and for Q4_1 their minimums m.
#include "engine/compute/matmul.h"
#include "engine/compute/weight_stream.h"

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace kvchat {

class ThreadPool;
struct BlockQ8_1;

inline constexpr int kInterleavedRows = 16;

// Whether w can be rearranged: Q4_1, Q5_0 or Q8_0 in the plain layout, rows a multiple of 16.
bool can_interleave(const WeightMatrix& w);
// Writes w (plain) rearranged into dst (rows * row_bytes bytes; 64-byte alignment makes the loads
// aligned), the groups shared among the pool's threads.
void interleave_rows(const WeightMatrix& w, void* dst, ThreadPool& pool);
// Rows [r0, r0 + n) of w (any layout) in the plain layout, row_bytes apart, into dst. r0 and
// r0 + n - 1 lie in one group of 16 for an interleaved w, or n is 1.
void plain_rows(const WeightMatrix& w, int64_t r0, int n, uint8_t* dst);

namespace interleaved {

// Where a group's parts start (bytes from the group's start) for nb blocks per row, as the
// layout above says, and `block`: the bytes of one block of the 16 rows (16 x the type's block).
// All zero for a type without the layout.
struct GroupParts {
    size_t masks, d, m, block;
};
inline GroupParts group_parts(TensorType t, int64_t nb) {
    const size_t n = size_t(nb);
    switch (t) {
        case TensorType::Q4_1: return {0, 256 * n, 288 * n, 320};
        case TensorType::Q5_0: return {256 * n, 320 * n, 0, 352};
        case TensorType::Q8_0: return {0, 512 * n, 0, 544};
        default: return {};
    }
}

// The kernels' requests ahead: block b's share of the group after next (the hardware alone left
// these interleaved streams at about half the memory's speed).
inline void request_ahead(const uint8_t* group, const GroupParts& p, int64_t nb, size_t b) {
    const char* ahead = reinterpret_cast<const char*>(group) + 2 * p.block * size_t(nb) + p.block * b;
    for (size_t o = 0; o < p.block; o += 64) request_weights(ahead + o);
}

// All of a group, before a thread's first use of a piece of a product: the kernels request two
// groups ahead of the one they compute, so a piece's first two would otherwise be read on demand.
inline void request_group(const uint8_t* group, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) request_weights(group + o);
}

// One token's 32-column blocks as matmul quantizes them (Q8_0 activations): q (cols bytes), d
// (the blocks' scales as floats) and start: per column group of 4, the chain start that cancels
// the weights' unsigned offset (-z times the group's sum of q: z = 128 for Q8_0, 16 for Q5_0).
struct Token8 {
    const int8_t* q;
    const float* d;
    const int32_t* start;
};

// Decode kernels at AVX-512 VNNI (interleaved_rows_avx512.cpp): the 16 rows of one group (its
// bytes at `group`, nb blocks per row) against one token (x1 / y1 null) or two; y0[0..15] and
// y1[0..15] get the rows' values.
void q8_0_group_avx512(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1);
void q5_0_group_avx512(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1);
// Q4_1 against Q8_1 blocks (q4_1_product.h's quantization).
void q4_1_group_avx512(const uint8_t* group, int64_t nb, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0,
                       float* y1);
// The same at AVX2 (interleaved_rows_avx2.cpp), the same bits.
void q8_0_group_avx2(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1);
void q5_0_group_avx2(const uint8_t* group, int64_t nb, const Token8& x0, const Token8* x1, float* y0, float* y1);
void q4_1_group_avx2(const uint8_t* group, int64_t nb, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0, float* y1);

}  // namespace interleaved

}  // namespace kvchat
