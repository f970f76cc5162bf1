// AMX-INT8 prefill kernels. A tile multiply (tdpbssd) computes 16 weight rows x 16 tokens x one
// scale group (16 or 32 columns) of signed int8 products in one instruction; AVX-512 then folds
// the group's row scales and token scales into float accumulators. Weights need no
// interleaving: the tile reads the unpacked int8 rows directly; the activations are interleaved
// once per call (4 columns of 16 tokens per 64-byte tile row).
// Like every *_avx512.cpp file, this one is called only after a run-time CPU check and must not
// instantiate templates other files share.
#pragma GCC target("amx-tile,amx-int8")

#include "engine/compute/matmul_kernels.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace kvchat::kernels {

namespace {

// Linux hands out the 8 KiB AMX register state only to processes that ask for it.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool cpu_has_amx_int8() {
    unsigned eax, ebx, ecx, edx;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
    const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
    return tile && int8;
}

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tiles 0-3: 16 x 16 int32 results of four consecutive groups; 4-5: 16 weight rows x G bytes;
// 6-7: G/4 rows of 16 tokens x 4 bytes. Four results in flight let the tile unit work on the next
// groups while AVX-512 scales the previous ones.
void configure_tiles(int group) {
    TileConfig cfg;
    for (int c = 0; c < 4; ++c) {
        cfg.rows[c] = 16;
        cfg.colsb[c] = 64;
    }
    for (int a = 4; a < 6; ++a) {
        cfg.rows[a] = 16;
        cfg.colsb[a] = uint16_t(group);
    }
    for (int b = 6; b < 8; ++b) {
        cfg.rows[b] = uint8_t(group / 4);
        cfg.colsb[b] = 64;
    }
    _tile_loadconfig(&cfg);
}

inline void compiler_barrier() { __asm__ volatile("" ::: "memory"); }

// Folds one group's int32 tile (rows m, tokens in lanes) into the accumulators. scale and min
// hold the group's 16 row values side by side.
template <bool MIN>
inline void scale_group(const int32_t* c, const float* scale, const float* min, const float* token_d,
                        const float* token_d_sum, __m512* acc) {
    const __m512 d = _mm512_loadu_ps(token_d);
    for (int m = 0; m < kPanelRows; ++m) {
        const __m512 v = _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), _mm512_load_si512(c + 16 * m));
        acc[m] = _mm512_fmadd_ps(v, _mm512_mul_ps(d, _mm512_set1_ps(scale[m])), acc[m]);
    }
    if constexpr (MIN) {
        const __m512 ds = _mm512_loadu_ps(token_d_sum);
        for (int m = 0; m < kPanelRows; ++m) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(min[m]), ds, acc[m]);
    }
}

// a: [group][16 rows][G] int8 values; scale/min: [group][16 rows]; b: the token block's
// interleaved activations; token_d/token_d_sum: [group][16 tokens]; c: kChunk x 256 int32.
// The tile unit multiplies a chunk of groups into c, then AVX-512 folds them: reading a tile's
// result right after storing it stalls on the store, reading it a few groups later does not,
// and a chunk of results still fits in L1.
constexpr int64_t kChunk = 8;

template <int G, bool MIN>
void amx_block(const int8_t* a, const float* scale, const float* min, int64_t cols, const uint8_t* b,
               const float* token_d, const float* token_d_sum, int32_t* c, float* y, int64_t y_stride, int n_rows,
               int n_tokens) {
    const int64_t groups = cols / G;
    __m512 acc[kPanelRows];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < groups; g0 += kChunk) {
        const int64_t g1 = g0 + kChunk < groups ? g0 + kChunk : groups;
        compiler_barrier();
        int64_t g = g0;
        for (; g + 3 < g1; g += 4) {
            _tile_zero(0);
            _tile_loadd(4, a + g * G * 16, G);
            _tile_loadd(6, b + g * G * 16, 64);
            _tile_dpbssd(0, 4, 6);
            _tile_zero(1);
            _tile_loadd(5, a + (g + 1) * G * 16, G);
            _tile_loadd(7, b + (g + 1) * G * 16, 64);
            _tile_dpbssd(1, 5, 7);
            _tile_zero(2);
            _tile_loadd(4, a + (g + 2) * G * 16, G);
            _tile_loadd(6, b + (g + 2) * G * 16, 64);
            _tile_dpbssd(2, 4, 6);
            _tile_zero(3);
            _tile_loadd(5, a + (g + 3) * G * 16, G);
            _tile_loadd(7, b + (g + 3) * G * 16, 64);
            _tile_dpbssd(3, 5, 7);
            _tile_stored(0, c + (g - g0) * 256, 64);
            _tile_stored(1, c + (g - g0 + 1) * 256, 64);
            _tile_stored(2, c + (g - g0 + 2) * 256, 64);
            _tile_stored(3, c + (g - g0 + 3) * 256, 64);
        }
        for (; g < g1; ++g) {
            _tile_zero(0);
            _tile_loadd(4, a + g * G * 16, G);
            _tile_loadd(6, b + g * G * 16, 64);
            _tile_dpbssd(0, 4, 6);
            _tile_stored(0, c + (g - g0) * 256, 64);
        }
        compiler_barrier();
        for (g = g0; g < g1; ++g) {
            scale_group<MIN>(c + (g - g0) * 256, scale + 16 * g, min + 16 * g, token_d + 16 * g, token_d_sum + 16 * g, acc);
        }
    }
    // acc[m] holds row m for 16 tokens; y wants tokens as rows.
    alignas(64) float out[kPanelRows][16];
    for (int m = 0; m < kPanelRows; ++m) _mm512_store_ps(out[m], acc[m]);
    for (int t = 0; t < n_tokens; ++t)
        for (int m = 0; m < n_rows; ++m) y[t * y_stride + m] = out[m][t];
}

}  // namespace

bool amx_usable() {
    static const bool usable = [] {
        if (!cpu_has_amx_int8()) return false;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return usable;
}

size_t amx_activation_bytes(const Int8Layout& layout, int64_t cols, int64_t n_tokens) {
    const int64_t blocks = (n_tokens + 15) / 16;
    const int64_t groups = cols / layout.group;
    return size_t(blocks) * (size_t(cols) * 16 + size_t(groups) * 16 * 2 * sizeof(float));
}

void amx_pack_activations(const Int8Layout& layout, const QuantizedActivations& x, const ActivationGroups& ag,
                          int64_t block_begin, int64_t block_end, void* packed) {
    const int64_t groups = x.cols / layout.group;
    const size_t block_bytes = size_t(x.cols) * 16 + size_t(groups) * 16 * 2 * sizeof(float);
    for (int64_t blk = block_begin; blk < block_end; ++blk) {
        auto* q = static_cast<uint8_t*>(packed) + size_t(blk) * block_bytes;
        auto* d = reinterpret_cast<float*>(q + x.cols * 16);
        float* ds = d + groups * 16;
        const int64_t t0 = blk * 16;
        const int n = int(x.n_tokens - t0 < 16 ? x.n_tokens - t0 : 16);
        // Tile rows of 16 tokens x 4 columns, padding tokens as zeros: one gather per row.
        const __mmask16 present = __mmask16((1u << n) - 1);
        const __m512i token_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                         _mm512_set1_epi32(int(x.cols)));
        const int8_t* first = x.q + t0 * x.cols;
        for (int64_t s = 0; s < x.cols / 4; ++s) {
            const __m512i row = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, token_offsets, first + 4 * s, 1);
            _mm512_storeu_si512(q + 64 * s, row);
        }
        for (int64_t g = 0; g < groups; ++g) {
            for (int t = 0; t < 16; ++t) {
                const bool real = t < n;
                d[g * 16 + t] = real ? ag.d[(t0 + t) * ag.n_groups + g] : 0.0f;
                ds[g * 16 + t] = real ? ag.d_sum[(t0 + t) * ag.n_groups + g] : 0.0f;
            }
        }
    }
}

size_t amx_scratch_bytes(const Int8Layout& layout, int64_t cols) {
    const size_t groups = size_t(cols / layout.group);
    // int8 rows, scales and mins as unpacked and transposed, a chunk of 16 x 16 int32 results,
    // the int8 rows regrouped.
    return size_t(cols) * kPanelRows * 2 + groups * kPanelRows * 4 * sizeof(float) + kChunk * 256 * sizeof(int32_t);
}

void amx_rows(TensorType t, const Int8Layout& layout, const uint8_t* rows, size_t stride, int n_rows, int64_t cols,
              const void* packed_x, int64_t n_tokens, void* scratch, float* y, int64_t y_stride) {
    const int64_t groups = cols / layout.group;
    auto* v = static_cast<int8_t*>(scratch);
    auto* scale = reinterpret_cast<float*>(v + cols * kPanelRows);
    float* min = scale + groups * kPanelRows;
    for (int r = 0; r < kPanelRows; ++r) {
        if (r < n_rows) {
            unpack_row_int8(t, rows + r * stride, cols, v + r * cols, scale + r * groups, min + r * groups);
        } else {
            std::memset(v + r * cols, 0, size_t(cols));
            std::memset(scale + r * groups, 0, sizeof(float) * size_t(groups));
            std::memset(min + r * groups, 0, sizeof(float) * size_t(groups));
        }
    }
    // Scales and mins side by side per group, so the kernel broadcasts them from one line.
    float* scale_t = min + groups * kPanelRows;
    float* min_t = scale_t + groups * kPanelRows;
    auto* c = reinterpret_cast<int32_t*>(min_t + groups * kPanelRows);
    // Each group's 16 rows side by side, so a weight tile is one contiguous load.
    auto* a = reinterpret_cast<int8_t*>(c + kChunk * 256);
    const int G = layout.group;
    for (int64_t g = 0; g < groups; ++g)
        for (int r = 0; r < kPanelRows; ++r) std::memcpy(a + (g * kPanelRows + r) * G, v + r * cols + g * G, size_t(G));
    for (int64_t g = 0; g < groups; ++g) {
        for (int r = 0; r < kPanelRows; ++r) {
            scale_t[g * kPanelRows + r] = scale[r * groups + g];
            min_t[g * kPanelRows + r] = min[r * groups + g];
        }
    }
    configure_tiles(layout.group);
    const size_t block_bytes = size_t(cols) * 16 + size_t(groups) * 16 * 2 * sizeof(float);
    for (int64_t blk = 0; blk * 16 < n_tokens; ++blk) {
        const auto* b = static_cast<const uint8_t*>(packed_x) + size_t(blk) * block_bytes;
        const auto* d = reinterpret_cast<const float*>(b + cols * 16);
        const float* ds = d + groups * 16;
        const int nt = int(n_tokens - blk * 16 < 16 ? n_tokens - blk * 16 : 16);
        float* yb = y + blk * 16 * y_stride;
        if (layout.group == 32) {
            if (layout.has_min) amx_block<32, true>(a, scale_t, min_t, cols, b, d, ds, c, yb, y_stride, n_rows, nt);
            else amx_block<32, false>(a, scale_t, min_t, cols, b, d, ds, c, yb, y_stride, n_rows, nt);
        } else {
            if (layout.has_min) amx_block<16, true>(a, scale_t, min_t, cols, b, d, ds, c, yb, y_stride, n_rows, nt);
            else amx_block<16, false>(a, scale_t, min_t, cols, b, d, ds, c, yb, y_stride, n_rows, nt);
        }
    }
    _tile_release();
}

}  // namespace kvchat::kernels
