#pragma once
// Weights rearranged for decoding (RowLayout::Interleaved16): a token's product then keeps one
// row in each 32-bit lane of a 512-bit register, so sixteen rows advance together with no
// shuffles and no horizontal sums per row (at AVX2, eight rows per register). The CPU backend
// rearranges Q4_1, Q5_0 and Q8_0 matrices this way when it places a model; the values computed are
// the plain layout's, bit for bit (the same lane sums and float steps, see q4_1_product.h and
// matmul_kernels.h), only the loads differ.
//
// Layout: groups of 16 consecutive rows, each group 16 * row_bytes long, in row order. Inside a
// group, with nb blocks of 32 columns per row, the blocks come in units (one Q4_1 block; two
// Q5_0 or Q8_0 blocks, the last unit one block when nb is odd): first the 16 rows' fp16 scales
// d of each of the unit's blocks (32 bytes a block), then each block's
//   Q4_1: minimums m (32 bytes); Q5_0: 64 mask bytes laid out as the values' lanes: bit l of
//     byte 4r + j = the fifth bit of row r's column 4l + j, so one shift and one AND give lane
//     chain l's fifth bits in place (before 2026-11-27 a mask of 64 bits per chain, which AVX2
//     spread into bytes with five operations a chain);
//   values, rows 0..15: 64-byte vectors whose lane r (bytes 4r..4r+3) holds row r's
//     bytes of one column group. Q4_1 and Q5_0: 4 vectors, vector k = the packed bytes 4k..4k+3
//     (low nibbles: columns 4k..4k+3, high nibbles: 16 + 4k..16 + 4k + 3). Q8_0: 8 vectors,
//     vector l = columns 4l..4l+3 as unsigned bytes (q + 128).
// A unit is a whole number of cache lines (Q4_1 320 bytes, Q5_0 704, Q8_0 1,088), so the vectors
// stay aligned, and a product reads its matrix in one ascending pass, which the CPU's own
// prefetchers follow at the memory's speed: with the scales in a region of their own after the
// values (the layout before 2026-11-27), AMD Zen 4 read a group at 14 GB/s with one thread, 22
// with requests ahead, where one ascending stream reads at 30-33 (kvchat-cli bench --bandwidth
// with those access patterns).
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

// A type's unit (see the layout): `block`, the bytes of one block of the 16 rows (16 x the type's
// block), of which `values` are values; `per_unit` blocks a unit. All zero for a type without
// the layout.
struct GroupParts {
    size_t block, values, per_unit;
};
inline GroupParts group_parts(TensorType t) {
    switch (t) {
        case TensorType::Q4_1: return {320, 256, 1};
        case TensorType::Q5_0: return {352, 256, 2};
        case TensorType::Q8_0: return {544, 512, 2};
        default: return {};
    }
}

// Where block b's parts start, in bytes from the group's start (nb blocks per row): its scales
// d, Q4_1's minimums m, Q5_0's masks, and its values.
struct BlockPlace {
    size_t d, m, masks, values;
};
inline BlockPlace block_place(const GroupParts& p, int64_t nb, size_t b) {
    const size_t k = p.per_unit, u = b / k, j = b % k;
    const size_t in_unit = size_t(nb) - u * k < k ? size_t(nb) - u * k : k;
    const size_t unit = u * k * p.block;
    // The unit's scales, then per block its minimums or masks (if any) and its values.
    const size_t body = unit + 32 * in_unit + (p.block - 32) * j;
    return {unit + 32 * j, body, body, body + (p.block - 32 - p.values)};
}

// All of a group, before a thread's first use of a piece of a product: the CPU's prefetchers
// follow an ascending stream only after its first few lines, so a piece's first two groups are
// requested whole (SmolLM2's decode 3-6% slower without, bench_decode).
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
