// The batch kernel of q4_1_product.cpp at AVX-512 VNNI: two tokens per 512-bit register (one in
// each half), the integer lane sums by vpdpbusd. The same values as the AVX2 kernel bit for bit:
// the lane sums are exact integers, and every float step (dw * dx, the lane's fma, the minimum's
// sum, hsum_float_8's tree) is the same operation on the same operands. Called only after a
// run-time CPU check; uses no templates other files instantiate (the linker keeps one copy).
// GCC 12 reports the _mm512_undefined_* pass-through operands inside many AVX-512 intrinsics as
// maybe-uninitialized (GCC bug 105593, fixed in 13); the pragma must precede the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/q4_1_product.h"

#include "engine/compute/quant_blocks.h"
#include "engine/compute/weight_stream.h"

#include <immintrin.h>

#include <cstring>

namespace kvchat::q4_1 {

namespace {

inline float hsum8(__m256 a) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

template <int ROWS>
void pair_rows(const UnpackedPanel& u, int r0, const BlockQ8_1* x0, const BlockQ8_1* x1, float* y0, float* y1) {
    const int64_t n_blocks = u.n_blocks;
    __m512 acc[ROWS];
    float mins0[ROWS], mins1[ROWS];
    for (int r = 0; r < ROWS; ++r) acc[r] = _mm512_setzero_ps(), mins0[r] = mins1[r] = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const __m512i qx = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0[b].qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1[b].qs)), 1);
        const float dx0 = _cvtsh_ss(x0[b].d), dx1 = _cvtsh_ss(x1[b].d);
        const float sx0 = _cvtsh_ss(x0[b].s), sx1 = _cvtsh_ss(x1[b].s);
        const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(dx0), _mm256_set1_ps(dx1), 1);
        for (int r = 0; r < ROWS; ++r) {
            const size_t i = size_t(r0 + r) * size_t(n_blocks) + size_t(b);
            const __m512i qw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 32 * i)));
            const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qw, qx));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(u.d[i]), dx), s, acc[r]);
            mins0[r] = __builtin_fmaf(u.m[i], sx0, mins0[r]);
            mins1[r] = __builtin_fmaf(u.m[i], sx1, mins1[r]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        y0[r] = hsum8(_mm512_castps512_ps256(acc[r])) + mins0[r];
        if (y1) y1[r] = hsum8(_mm512_extractf32x8_ps(acc[r], 1)) + mins1[r];
    }
}

// PAIRS pairs of rows against one token. Per block and pair: the two rows' nibbles in one register,
// vpdpbusd for the eight exact lane sums of each row, [dA, mA, dB, mB] converted at once and
// multiplied by [dx, sx, dx, sx] (the same single roundings as dw * dx and m * s), the scales
// spread to the lanes, one fma. The minimum's sum is a float add of an exact product (two fp16
// values), so the same as llama.cpp's fma. `next`: 2 * PAIRS contiguous rows further on (the
// caller's choice: 32 rows), requested from memory a block's share per block; the hardware
// prefetcher alone left these short interleaved streams at half the bandwidth a core draws
// (12-17 GB/s against Q8_0's 34 here; 32 rows ahead: 37).
template <int PAIRS>
void decode_pairs(const uint8_t* const* a, const uint8_t* const* b, const DecodeActivations& x, float* const* ya,
                  float* const* yb, const uint8_t* next) {
    constexpr int kStep = 2 * PAIRS * int(sizeof(BlockQ4_1));
    const __m512i low = _mm512_set1_epi8(0x0f);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2);
    __m512 acc[PAIRS];
    __m128 mins[PAIRS];
    for (int p = 0; p < PAIRS; ++p) acc[p] = _mm512_setzero_ps(), mins[p] = _mm_setzero_ps();
    for (int64_t blk = 0; blk < x.n_blocks; ++blk) {
        const __m512i qx = _mm512_load_si512(x.q + 64 * blk);
        const __m128 dsx = _mm_loadu_ps(x.ds + 4 * blk);
        if (next)
            for (int o = 0; o < kStep; o += 64) request_weights(reinterpret_cast<const char*>(next) + blk * kStep + o);
        for (int p = 0; p < PAIRS; ++p) {
            const uint8_t* wa = a[p] + sizeof(BlockQ4_1) * blk;
            const uint8_t* wb = b[p] + sizeof(BlockQ4_1) * blk;
            const __m256i nib = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wa + 4))),
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 4)), 1);
            const __m512i qw = _mm512_and_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(nib), _mm256_srli_epi16(nib, 4), 1), low);
            const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qw, qx));
            int32_t dma, dmb;
            std::memcpy(&dma, wa, 4);
            std::memcpy(&dmb, wb, 4);
            const __m128 prod = _mm_mul_ps(_mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(dma), dmb, 1)), dsx);
            mins[p] = _mm_add_ps(mins[p], prod);  // lanes 1 and 3 are the rows' minimum sums
            acc[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(spread, _mm512_castps128_ps512(prod)), s, acc[p]);
        }
    }
    for (int p = 0; p < PAIRS; ++p) {
        // Quarters [0, 2, 1, 3]: row A's eight lanes in order, then row B's.
        const __m512 t = _mm512_shuffle_f32x4(acc[p], acc[p], _MM_SHUFFLE(3, 1, 2, 0));
        alignas(16) float m[4];
        _mm_store_ps(m, mins[p]);
        *ya[p] = hsum8(_mm512_castps512_ps256(t)) + m[1];
        if (yb[p]) *yb[p] = hsum8(_mm512_extractf32x8_ps(t, 1)) + m[3];
    }
}

}  // namespace

void prepare_decode_avx512(const BlockQ8_1* x, int64_t n_blocks, int8_t* q, float* ds) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        std::memcpy(q + 64 * b, x[b].qs, 16);
        std::memcpy(q + 64 * b + 16, x[b].qs, 16);
        std::memcpy(q + 64 * b + 32, x[b].qs + 16, 16);
        std::memcpy(q + 64 * b + 48, x[b].qs + 16, 16);
        const float dx = _cvtsh_ss(x[b].d), sx = _cvtsh_ss(x[b].s);
        ds[4 * b] = dx, ds[4 * b + 1] = sx, ds[4 * b + 2] = dx, ds[4 * b + 3] = sx;
    }
}

void decode_rows_avx512(const uint8_t* rows, size_t stride, int n_rows, const DecodeActivations& x, float* y) {
    int r = 0;
    for (; r + 8 <= n_rows; r += 8) {
        const uint8_t* a[4] = {rows + r * stride, rows + (r + 2) * stride, rows + (r + 4) * stride, rows + (r + 6) * stride};
        const uint8_t* b[4] = {a[0] + stride, a[1] + stride, a[2] + stride, a[3] + stride};
        float* ya[4] = {y + r, y + r + 2, y + r + 4, y + r + 6};
        float* yb[4] = {y + r + 1, y + r + 3, y + r + 5, y + r + 7};
        decode_pairs<4>(a, b, x, ya, yb, rows + (r + 32) * stride);
    }
    for (; r < n_rows; r += 2) {
        // A last odd row is its own pair's second row too; that result is dropped.
        const uint8_t* a[1] = {rows + r * stride};
        const uint8_t* b[1] = {r + 1 < n_rows ? a[0] + stride : a[0]};
        float* ya[1] = {y + r};
        float* yb[1] = {r + 1 < n_rows ? y + r + 1 : nullptr};
        decode_pairs<1>(a, b, x, ya, yb, nullptr);
    }
}

void panel_rows_avx512(const UnpackedPanel& u, int n_rows, const BlockQ8_1* xq, int64_t n_tokens, float* y,
                       int64_t y_stride) {
    const int64_t n_blocks = u.n_blocks;
    for (int64_t t = 0; t < n_tokens; t += 2) {
        const bool pair = t + 1 < n_tokens;
        const BlockQ8_1* x0 = xq + t * n_blocks;
        const BlockQ8_1* x1 = pair ? x0 + n_blocks : x0;  // a last odd token: its second half unused
        float* y0 = y + t * y_stride;
        float* y1 = pair ? y0 + y_stride : nullptr;
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) pair_rows<4>(u, r, x0, x1, y0 + r, y1 ? y1 + r : nullptr);
        for (; r < n_rows; ++r) pair_rows<1>(u, r, x0, x1, y0 + r, y1 ? y1 + r : nullptr);
    }
}

}  // namespace kvchat::q4_1
