#include "engine/compute/attention.h"

#include "engine/compute/attention_kernels.h"
#include "engine/compute/matmul.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"
#include "engine/compute/unroll.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>
#include <vector>

// Attention as three small dense steps per (query tile, kv head): the group's query heads times
// the tile's queries are the rows, the slots some query of the call may see are the columns (a
// tile computes only those its own rows may see).
//   scores = Q·K^T (register-blocked, 4 rows x 3 columns), masked per row by position;
//   P = softmax(scores) in two passes over the full row (max, then exp and sum, then normalize);
//   out = P·V (4 rows x 16 channels held in registers over all columns).
// Every score is one 8-lane FMA chain over head_dim reduced by the same tree, and every output
// channel is one sequential sum over the columns in order, so results depend only on the column
// order (views in order, then quantized blocks), never on how slots are split into views or work.

namespace kvchat {

namespace {

using attention_kernels::request_row;

constexpr int kTileRows = 64;     // query heads x queries per tile: Q (64 KB at head_dim 256) stays in L2
constexpr int kSplitCols = 256;   // columns per task when one tile's scores are split across threads
constexpr int kSplitMinCols = 512;  // fewer columns than this: one tile per kv head, not cut across threads
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One column: a full-precision slot (k, v point at kv head 0 of the slot) or row j of quantized
// block `block`.
struct Col {
    const void* k;
    const void* v;
    int32_t pos;
    int32_t block;   // -1: f32 slot
    int32_t j;
    int32_t exempt;  // f32 sink slot: outside the window rule, scored with q_sink
};

// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)): the one reduction every score uses.
inline float hsum_tree(__m256 v) {
    __m128 h = _mm_hadd_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_movehdup_ps(h));
}

// The first NK (1 to 4) floats at p into a register's low lanes (the others 0), and back; no
// byte past them is touched (AMD runs the masked moves as microcode).
template <int NK>
inline __m128 load_lanes(const float* p) {
    if constexpr (NK == 4) return _mm_loadu_ps(p);
    else if constexpr (NK == 1) return _mm_load_ss(p);
    // (_mm_loadl_epi64 / _mm_storel_epi64: 8 bytes at any alignment.)
    else if constexpr (NK == 2) return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    else return _mm_movelh_ps(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), _mm_load_ss(p + 2));
}
template <int NK>
inline void store_lanes(float* p, __m128 v) {
    if constexpr (NK == 4) _mm_storeu_ps(p, v);
    else if constexpr (NK == 1) _mm_store_ss(p, v);
    else {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_castps_si128(v));
        if constexpr (NK == 3) _mm_store_ss(p + 2, _mm_movehl_ps(v, v));
    }
}

// The same tree for four accumulators at once: lane i is hsum_tree(ai).
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

inline __m256i tail_mask(int n) {  // lanes [0, n) set, n in [0, 8]
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Channels [d, d+8) of a row of length n (zeros past n).
inline __m256 load8(const float* a, int d, int n) {
    return d + 8 <= n ? _mm256_loadu_ps(a + d) : _mm256_maskload_ps(a + d, tail_mask(n - d));
}

inline float dot_tree(const float* a, const float* b, int n) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < n; d += 8) acc = _mm256_fmadd_ps(load8(a, d, n), load8(b, d, n), acc);
    return hsum_tree(acc);
}

// Stored keys and values read in their own format, eight values from index i as floats (the
// conversions are exact, so results do not depend on the format's width, only on its values).
template <KvDtype D>
struct Stored;
template <>
struct Stored<KvDtype::F32> {
    static __m256 load8(const void* p, int i) { return _mm256_loadu_ps(static_cast<const float*>(p) + i); }
    static float at(const void* p, int i) { return static_cast<const float*>(p)[i]; }
};
template <>
struct Stored<KvDtype::F16> {
    static __m256 load8(const void* p, int i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
    }
    static float at(const void* p, int i) { return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]); }
};
template <>
struct Stored<KvDtype::BF16> {
    static __m256 load8(const void* p, int i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static float at(const void* p, int i) { return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]); }
};

// Values [i, i + 8) of a stored row of length n (zeros past n).
template <KvDtype D>
inline __m256 load8_stored(const void* p, int i, int n) {
    if (i + 8 <= n) return Stored<D>::load8(p, i);
    alignas(32) float t[8] = {};
    for (int j = 0; i + j < n; ++j) t[j] = Stored<D>::at(p, i + j);
    return _mm256_load_ps(t);
}

template <KvDtype D>
inline float dot_tree_stored(const float* a, const void* b, int off, int n) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < n; d += 8) acc = _mm256_fmadd_ps(load8(a, d, n), load8_stored<D>(b, off + d, off + n), acc);
    return hsum_tree(acc);
}

// exp(x) for x <= 0 (scores minus their row max), Cephes' polynomial (about 1 ulp); 0 below
// -87.3, which covers -inf (masked scores).
inline __m256 exp_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 zero = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

template <int NB>
inline __m256 unpack8(const uint8_t* row, int c) {
    if constexpr (NB == 8) {
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c))));
    } else if constexpr (NB == 4) {
        uint32_t w;
        std::memcpy(&w, row + c / 2, 4);
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh), _mm256_set1_epi32(15)));
    } else {
        uint16_t w;
        std::memcpy(&w, row + c / 4, 2);
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), _mm256_set1_epi32(3)));
    }
}

// The AVX-512 kernels for KIVI blocks (the same values), unless the CPU lacks AVX-512 or the
// level is forced to AVX2.
const attention_kernels::KiviKernels* kivi_kernels_512() {
    return std::string_view(simd_level()) == "avx2" ? nullptr : &attention_kernels::avx512_kivi_kernels();
}

// Per-thread scratch, kept between calls.
struct Scratch {
    std::vector<int> act;
    std::vector<float> qk, zsum;
    std::vector<const float*> q, qs;
    std::vector<float*> o;
    std::vector<int32_t> pos;
};

inline bool maybe_seen(const Col& c, int32_t pmin, int32_t pmax, int window) {
    return c.pos <= pmax && (c.exempt || window == 0 || pmin - c.pos < window);
}

// The columns some query at positions [pmin, pmax] may see, in view order then block order
// (empty slots hold INT32_MAX and drop out). Each row is masked exactly later. block_sig
// describes the blocks' part of the lists as the previous call on the same lists left it.
void collect(const AttentionInput& in, int32_t pmin, int32_t pmax, std::vector<Col>& cols, std::vector<int32_t>& cpos,
             std::vector<int32_t>& cexempt, std::vector<int32_t>& block_sig) {
    // Written by index into room for every candidate, then cut: a decode step over a long
    // context collects thousands of columns per layer, and it runs on one thread.
    size_t room = 0;
    for (const SlotView& sv : in.slots) room += static_cast<size_t>(std::max<int64_t>(0, sv.n));
    for (const QuantBlockView& bv : in.blocks) room += static_cast<size_t>(std::max<int32_t>(0, bv.count));
    cols.resize(room);
    cpos.resize(room);
    cexempt.resize(room);
    size_t n = 0;
    auto put = [&](const Col& c) {
        cols[n] = c;
        cpos[n] = c.pos;
        cexempt[n] = c.exempt;
        ++n;
    };
    const int64_t es = static_cast<int64_t>(kv_dtype_bytes(in.dtype));
    for (const SlotView& sv : in.slots)
        for (int64_t j = 0; j < sv.n; ++j) {
            const Col c{static_cast<const char*>(sv.k) + j * sv.stride * es, static_cast<const char*>(sv.v) + j * sv.stride * es,
                        sv.pos[j], -1, 0, sv.pos[j] < in.sink_end};
            if (maybe_seen(c, pmin, pmax, in.window)) put(c);
        }
    // The blocks' columns depend only on where they start in the lists and on each block's first
    // position and visible range: when those match the previous call's (the next layer of a decode
    // step), the entries there are already these, and are neither written nor read. The other
    // threads read these lists, and a write takes the line back from their caches (SmolLM2, 4,096
    // tokens in a 4-bit cache, 2 threads: rewriting them took about a tenth of the attention).
    thread_local std::vector<int32_t> sig;
    sig.assign({static_cast<int32_t>(n), static_cast<int32_t>(in.blocks.size())});
    size_t in_blocks = 0;
    for (const QuantBlockView& bv : in.blocks) {
        int32_t lo = bv.first_pos;
        const int32_t hi = std::min<int32_t>(bv.first_pos + bv.count - 1, pmax);
        if (in.window > 0) lo = std::max<int32_t>(lo, pmin - in.window + 1);
        sig.insert(sig.end(), {bv.first_pos, lo, hi});
        in_blocks += static_cast<size_t>(std::max(0, hi - lo + 1));
    }
    if (sig == block_sig) {  // (room counted every block's tokens: the entries are within cols)
        n += in_blocks;
    } else {
        for (size_t b = 0; b < in.blocks.size(); ++b) {
            const int32_t first = sig[2 + 3 * b], lo = sig[3 + 3 * b], hi = sig[4 + 3 * b];
            for (int32_t p = lo; p <= hi; ++p) put({nullptr, nullptr, p, static_cast<int32_t>(b), p - first, 0});
        }
        block_sig.swap(sig);
    }
    cols.resize(n);
    cpos.resize(n);
    cexempt.resize(n);
}

// One tile for one kv head: R rows (row r is query r / group, head r % group of the kv head's
// group), the columns, and an R x ldc score matrix.
struct Tile {
    const AttentionInput& in;
    const AttentionShape& s;
    int hd;
    int R;
    int goff;  // g * head_dim: the kv head's channels in a slot
    const Col* cols;
    int C;
    const int* act;  // the columns some row of the tile sees, ascending
    int n_act;
    int64_t ldc;
    float* S;
    const float* const* q;   // R row pointers
    const float* const* qs;  // R row pointers into q_sink, or null
    float* const* o;         // R output rows
    const int32_t* rpos;     // position of each row's query
    float* qk;               // R x hd scratch (quantized blocks)
    float* zsum;             // R x (hd / value_group) scratch
    const int32_t* cpos;     // cols[c].pos and cols[c].exempt side by side: the mask reads eight
    const int32_t* cexempt;  // at a time without gathers

    float finish(float raw) const {
        float x = raw * s.scale;
        if (s.softcap > 0.0f) x = s.softcap * std::tanh(x / s.softcap);
        return x;
    }

    // Raw scores of columns act[a0, a1), all full-precision slots in format D, with the rows' q.
    // Columns act[a0, a1) of full-precision slots with the AVX-512 kernels: keys converted to
    // floats 64 columns at a time, then the same chains and tree as the loop below.
    template <KvDtype D>
    void qk_slots_512(const attention_kernels::KiviKernels& k512, int a0, int a1) const {
        constexpr int kChunk = 64;
        thread_local std::vector<float> keys, scratch;
        keys.resize(static_cast<size_t>(kChunk) * hd);
        scratch.resize(static_cast<size_t>(R + 1) * hd);
        for (int c0 = a0; c0 < a1; c0 += kChunk) {
            const int n = std::min(kChunk, a1 - c0);
            for (int i = 0; i < n; ++i) {
                const void* k = cols[act[c0 + i]].k;
                for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(keys.data() + static_cast<size_t>(i) * hd + d, Stored<D>::load8(k, goff + d));
            }
            k512.dense_scores(q, R, hd, nullptr, keys.data(), act + c0, n, S, ldc, scratch.data());
        }
    }

    template <KvDtype D>
    void qk_slots(int a0, int a1) const {
        const int n = hd;
        // As for the blocks' keys (qk_block): converting 64 columns into floats first pays for
        // many rows only. With a decode step's 1-4 rows the loops below read f16 in registers
        // (bench_attention quantized:4, Zen 4, 1 thread, 1,024 tokens: 9:3:64 91 -> 84 us,
        // 4:1:256 105 -> 100; the same bits).
        if (const auto* k512 = hd % 16 == 0 && R > 4 ? kivi_kernels_512() : nullptr) {
            qk_slots_512<D>(*k512, a0, a1);
            if (qs)
                for (int a = a0; a < a1; ++a)
                    if (cols[act[a]].exempt)
                        for (int r = 0; r < R; ++r) S[r * ldc + act[a]] = dot_tree_stored<D>(qs[r], cols[act[a]].k, goff, n);
            return;
        }
        for (int a = a0; a < a1; a += 3) {
            const int nc = std::min(3, a1 - a);
            const int cc[3] = {act[a], act[a + std::min(1, nc - 1)], act[a + nc - 1]};
            const void* k0 = cols[cc[0]].k;
            const void* k1 = cols[cc[1]].k;
            const void* k2 = cols[cc[2]].k;
            for (int r = 0; r < R; r += 4) {
                const int nr = std::min(4, R - r);
                const float* q0 = q[r];
                const float* q1 = q[r + std::min(1, nr - 1)];
                const float* q2 = q[r + std::min(2, nr - 1)];
                const float* q3 = q[r + nr - 1];
                __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
                __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
                auto step = [&](int d, auto load, auto kload) {
                    const __m256 x0 = kload(k0, d), x1 = kload(k1, d), x2 = kload(k2, d);
                    __m256 y = load(q0, d);
                    a00 = _mm256_fmadd_ps(y, x0, a00), a01 = _mm256_fmadd_ps(y, x1, a01), a02 = _mm256_fmadd_ps(y, x2, a02);
                    y = load(q1, d);
                    a10 = _mm256_fmadd_ps(y, x0, a10), a11 = _mm256_fmadd_ps(y, x1, a11), a12 = _mm256_fmadd_ps(y, x2, a12);
                    y = load(q2, d);
                    a20 = _mm256_fmadd_ps(y, x0, a20), a21 = _mm256_fmadd_ps(y, x1, a21), a22 = _mm256_fmadd_ps(y, x2, a22);
                    y = load(q3, d);
                    a30 = _mm256_fmadd_ps(y, x0, a30), a31 = _mm256_fmadd_ps(y, x1, a31), a32 = _mm256_fmadd_ps(y, x2, a32);
                };
                int d = 0;
                const int g0 = goff;
                for (; d + 8 <= n; d += 8)
                    step(d, [](const float* a, int i) { return _mm256_loadu_ps(a + i); },
                         [g0](const void* k, int i) { return Stored<D>::load8(k, g0 + i); });
                if (d < n)
                    step(d, [n](const float* a, int i) { return load8(a, i, n); },
                         [n, g0](const void* k, int i) { return load8_stored<D>(k, g0 + i, g0 + n); });
                alignas(16) float out[3][4];
                _mm_store_ps(out[0], reduce4(a00, a10, a20, a30));
                _mm_store_ps(out[1], reduce4(a01, a11, a21, a31));
                _mm_store_ps(out[2], reduce4(a02, a12, a22, a32));
                for (int i = 0; i < nr; ++i)
                    for (int j = 0; j < nc; ++j) S[(r + i) * ldc + cc[j]] = out[j][i];
            }
        }
        // Sink slots are seen from the queries rotated at their rank.
        if (qs)
            for (int a = a0; a < a1; ++a)
                if (cols[act[a]].exempt)
                    for (int r = 0; r < R; ++r) S[r * ldc + act[a]] = dot_tree_stored<D>(qs[r], cols[act[a]].k, goff, n);
    }

    // The quantized block after the run of columns being read, or null. The loops that read a
    // decode step's few rows request row j of it as they read row j of the current block, and
    // its scales and zeros up front; other loops request all of it before they start. Its reads
    // then do not wait on memory: a block's rows come from memory once the cache outgrows the
    // last-level cache, and the hardware prefetchers stop at the edges of a block's regions and
    // pages. 4,096 tokens in a 4-bit cache, Zen 5, bench_decode in turns: SmolLM2 decodes at
    // 54-58 -> 77-82 tok/s with one thread, 72-77 -> 99-109 with two; Gemma 3 at 85-87 -> 92-94.
    mutable const uint8_t* next_block = nullptr;

    void find_next_block(int e, int a1) const {
        next_block = e < a1 && cols[act[e]].block >= 0 ? in.blocks[static_cast<size_t>(cols[act[e]].block)].data : nullptr;
    }
    // All of next_block's keys (its codes, scales and zeros) or values.
    void request_next_block(bool values) const {
        if (!next_block) return;
        const KiviFormat& f = *in.kivi;
        if (values) request_row(next_block + f.v_codes, f.block_bytes - f.v_codes);
        else request_row(next_block, f.v_codes);
    }

    // Raw scores of columns act[a0, a1), rows of one quantized block, read from their codes:
    // q·k = (q ⊙ scale)·codes + q·zero.
    template <int NB>
    void qk_block(int a0, int a1) const {
        const KiviFormat& f = *in.kivi;
        const uint8_t* data = in.blocks[static_cast<size_t>(cols[act[a0]].block)].data;
        const float* ks = f.key_scale(data) + goff;
        const float* kz = f.key_zero(data) + goff;
        if (R > 4) {
            request_next_block(false);
        } else if (next_block) {  // qk_block_cols requests the rows
            request_row(f.key_scale(next_block) + goff, sizeof(float) * hd);
            request_row(f.key_zero(next_block) + goff, sizeof(float) * hd);
        }
        float* bias = qk + static_cast<size_t>(R) * hd;
        for (int r = 0; r < R; ++r) {
            for (int d = 0; d < hd; ++d) qk[r * hd + d] = q[r][d] * ks[d];
            bias[r] = dot_tree(q[r], kz, hd);
        }
        // The AVX-512 scores kernel unpacks the block's keys into floats once for all rows: worth
        // it for many rows. A decode step's 1-4 rows a kv head unpack in registers instead, faster
        // (the AVX2 loops below: bench_attention quantized:4, 9:3:64, 2,048 tokens, Zen 5: 231 ->
        // 214 us with 1 thread, 122 -> 110 with 2) with the same bits; with AVX-512 in a kernel of
        // their own, two columns a register and the codes made floats by a table permutation
        // (the same chains and tree, fewer operations): bench_attention quantized:4, 9:3:64,
        // 4,096 tokens, 1 thread, Zen 4: 352 -> 304 us). The columns of a block a decode step
        // reads are consecutive, so the kernel steps through the rows by the block's stride (other
        // column sets go by the loops below).
        const auto* k512 = kivi_kernels_512();
        const int n = a1 - a0;
        if (k512 && hd % 8 == 0 && R <= 4 && act[a1 - 1] - act[a0] == n - 1) {
            const uint8_t* row0 = f.key_row(data, cols[act[a0]].j);
            const int64_t stride = f.key_row(data, 1) - f.key_row(data, 0);
            const uint8_t* ahead0 = next_block ? f.key_row(next_block, cols[act[a0]].j) : nullptr;
            k512->decode_scores(qk, R, hd, bias, row0, stride, act[a0], n, NB, goff, S, ldc, ahead0, int64_t(hd) * NB / 8);
            return;
        }
        if (k512 && hd % 16 == 0 && R > 4) {
            // The columns' key rows. (Locals, so that the loop does not reload them after each store.)
            thread_local std::vector<const uint8_t*> rows;
            rows.resize(static_cast<size_t>(n));
            const uint8_t** rp = rows.data();
            const Col* cl = cols;
            const int* ac = act + a0;
            const uint8_t* base = f.key_row(data, 0);
            const int64_t stride = f.key_row(data, 1) - base;
            for (int a = 0; a < n; ++a) rp[a] = base + cl[ac[a]].j * stride;
            thread_local std::vector<float> scratch;
            scratch.resize(static_cast<size_t>(n + 65) * hd);
            k512->scores(qk, R, hd, bias, rp, ac, n, NB, goff, S, ldc, scratch.data());
            return;
        }
        const int full = R / 8 * 8;
        for (int a = a0; a < a1; ++a) {
            const int c = act[a];
            const uint8_t* row = f.key_row(data, cols[c].j);
            for (int r = 0; r < full; r += 8) {
                __m256 acc[8];
                for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
                for (int d = 0; d < hd; d += 8) {
                    const __m256 x = unpack8<NB>(row, goff + d);
                    for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(qk + (r + i) * hd + d), x, acc[i]);
                }
                for (int i = 0; i < 8; ++i) S[(r + i) * ldc + c] = hsum_tree(acc[i]) + bias[r + i];
            }
        }
        // The last rows (a decode step's 1-4 a kv head): three columns at a time, so that enough
        // chains run side by side (one row's chain alone waits on the FMA's latency).
        int r = full;
        if (R - r > 4) qk_block_cols<NB, 4>(r, a0, a1, data), r += 4;
        switch (R - r) {
            case 4: qk_block_cols<NB, 4>(r, a0, a1, data); break;
            case 3: qk_block_cols<NB, 3>(r, a0, a1, data); break;
            case 2: qk_block_cols<NB, 2>(r, a0, a1, data); break;
            case 1: qk_block_cols<NB, 1>(r, a0, a1, data); break;
            default: break;
        }
    }

    // Rows [r, r + RB) of qk_block, columns three at a time (a last column repeated and dropped);
    // a row's three trees reduced together (reduce4: the same additions as hsum_tree).
    template <int NB, int RB>
    void qk_block_cols(int r, int a0, int a1, const uint8_t* data) const {
        const KiviFormat& f = *in.kivi;
        const float* bias = qk + static_cast<size_t>(R) * hd;
        const float* qr = qk + static_cast<size_t>(r) * hd;
        const int64_t ahead_off = int64_t(goff) * NB / 8, ahead_bytes = int64_t(hd) * NB / 8;
        const bool ahead = R <= 4 && next_block;
        for (int a = a0; a < a1; a += 3) {
            const int nc = std::min(3, a1 - a);
            int cc[3];
            const uint8_t* row[3];
            for (int j = 0; j < 3; ++j) {
                cc[j] = act[a + std::min(j, nc - 1)];
                row[j] = f.key_row(data, cols[cc[j]].j);
            }
            if (ahead)
                for (int j = 0; j < nc; ++j) request_row(f.key_row(next_block, cols[cc[j]].j) + ahead_off, ahead_bytes);
            __m256 acc[RB][3];
            unroll<RB>([&](auto i) { unroll<3>([&](auto j) { acc[i][j] = _mm256_setzero_ps(); }); });
            for (int d = 0; d < hd; d += 8) {
                __m256 x[3];
                unroll<3>([&](auto j) { x[j] = unpack8<NB>(row[j], goff + d); });
                unroll<RB>([&](auto i) {
                    const __m256 y = _mm256_loadu_ps(qr + i * hd + d);
                    unroll<3>([&](auto j) { acc[i][j] = _mm256_fmadd_ps(y, x[j], acc[i][j]); });
                });
            }
            unroll<RB>([&](auto i) {
                alignas(16) float out[4];
                _mm_store_ps(out, _mm_add_ps(reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][2]), _mm_set1_ps(bias[r + i])));
                for (int j = 0; j < nc; ++j) S[(r + i) * ldc + cc[j]] = out[j];
            });
        }
    }

    // Scores of columns act[a0, a1): raw products, then scale and softcap.
    void scores(int a0, int a1) const {
        find_next_block(a0, a1);  // a thread's columns may start in a block
        request_next_block(false);
        for (int a = a0; a < a1;) {
            const int b = cols[act[a]].block;
            int e = a + 1;
            while (e < a1 && cols[act[e]].block == b) ++e;
            find_next_block(e, a1);
            if (b < 0) {
                request_next_block(false);
                switch (in.dtype) {
                    case KvDtype::F32: qk_slots<KvDtype::F32>(a, e); break;
                    case KvDtype::F16: qk_slots<KvDtype::F16>(a, e); break;
                    case KvDtype::BF16: qk_slots<KvDtype::BF16>(a, e); break;
                }
            } else {
                switch (in.kivi->nbits) {
                    case 8: qk_block<8>(a, e); break;
                    case 4: qk_block<4>(a, e); break;
                    default: qk_block<2>(a, e); break;
                }
            }
            a = e;
        }
        if (s.scale == 1.0f && s.softcap == 0.0f) return;  // finish() would change nothing
        for (int r = 0; r < R; ++r)
            for (int a = a0; a < a1; ++a) S[r * ldc + act[a]] = finish(S[r * ldc + act[a]]);
    }

    // llama.cpp's non-flash softmax over its f16 cache: the exponentials summed in double (here
    // in eight double lanes, column c in lane c % 8, the lanes added in a fixed tree at the end:
    // no dependent add per column or per vector), and the probabilities rounded to fp16 (its P·V
    // is an f16 matmul).
    void softmax_f16(float* sr, float m, int n) const {
        const __m256 vm = _mm256_set1_ps(m);
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        for (int c = 0; c < n; c += 8) {
            __m256 e = exp_nonpos(_mm256_sub_ps(load8(sr, c, n), vm));
            if (c + 8 <= n) {
                _mm256_storeu_ps(sr + c, e);
            } else {
                e = _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - c)));
                _mm256_maskstore_ps(sr + c, tail_mask(n - c), e);
            }
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
        alignas(32) double l[8];
        _mm256_store_pd(l, lo);
        _mm256_store_pd(l + 4, hi);
        const double sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
        for (int c = 0; c < n; c += 8) {
            const __m256 pr = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(load8(sr, c, n), inv), _MM_FROUND_TO_NEAREST_INT));
            if (c + 8 <= n)
                _mm256_storeu_ps(sr + c, pr);
            else
                _mm256_maskstore_ps(sr + c, tail_mask(n - c), pr);
        }
    }

    // Row r: the mask of its query, then the exact softmax over the full row.
    void softmax(int r) const {
        float* sr = S + r * ldc;
        const int32_t p = rpos[r];
        float m = kNegInf;
        int c0 = 0, last = -1;  // the last visible column
        {
            // A column is hidden when it comes after the query, or (with a window, unless it is an
            // exempt sink) when it is `window` or more positions before it. Eight at a time; the
            // maximum is the same whatever the order
            // (a NaN score is skipped as std::max skips it; the sign of a zero maximum does not
            // change x - m below).
            const __m256i vp = _mm256_set1_epi32(p);
            const bool windowed = in.window > 0;
            // p - pos >= window, as pos < p - window + 1 (no overflow: positions and windows are
            // below 2^31, so p - window + 1 is at least -2^31 + 2).
            const __m256i vseen = _mm256_set1_epi32(windowed ? p - in.window + 1 : 0);
            const __m256 neg_inf = _mm256_set1_ps(kNegInf);
            __m256 vmax = neg_inf;
            for (; c0 + 8 <= C; c0 += 8) {
                const __m256i pos = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cpos + c0));
                __m256i hide = _mm256_cmpgt_epi32(pos, vp);
                if (windowed) {
                    const __m256i exempt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cexempt + c0));
                    const __m256i far = _mm256_cmpgt_epi32(vseen, pos);
                    hide = _mm256_or_si256(hide, _mm256_and_si256(_mm256_cmpeq_epi32(exempt, _mm256_setzero_si256()), far));
                }
                const __m256 hidden = _mm256_castsi256_ps(hide);
                const __m256 x = _mm256_blendv_ps(_mm256_loadu_ps(sr + c0), neg_inf, hidden);
                _mm256_storeu_ps(sr + c0, x);
                vmax = _mm256_max_ps(x, vmax);  // vmax where x is NaN
                if (const int vis = ~_mm256_movemask_ps(hidden) & 0xff) last = c0 + 31 - __builtin_clz(unsigned(vis));
            }
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, vmax);
            for (float l : lanes) m = std::max(m, l);
        }
        for (int c = c0; c < C; ++c) {
            const Col& col = cols[c];
            if (col.pos > p || (!col.exempt && in.window > 0 && p - col.pos >= in.window))
                sr[c] = kNegInf;
            else
                m = std::max(m, sr[c]), last = c;
        }
        if (m == kNegInf) {  // nothing visible: the row contributes nothing
            std::fill(sr, sr + C, 0.0f);
            return;
        }
        // Columns past the last visible one are probabilities of exactly 0 (exp_nonpos of -inf),
        // which add nothing to the sums: the passes stop at a whole vector past it (a causal
        // prefill's early rows see few of the columns).
        const int n = std::min(C, (last + 8) / 8 * 8);
        std::fill(sr + n, sr + C, 0.0f);
        if (in.f16_probs) return softmax_f16(sr, m, n);
        const __m256 vm = _mm256_set1_ps(m);
        __m256 sum = _mm256_setzero_ps();
        for (int c = 0; c < n; c += 8) {
            const __m256 e = exp_nonpos(_mm256_sub_ps(load8(sr, c, n), vm));
            if (c + 8 <= n)
                _mm256_storeu_ps(sr + c, e);
            else
                _mm256_maskstore_ps(sr + c, tail_mask(n - c), e);
            sum = _mm256_add_ps(sum, c + 8 <= n ? e : _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - c))));
        }
        // The normalized probabilities: the one place where P is final before it meets V.
        const __m256 inv = _mm256_set1_ps(1.0f / hsum_tree(sum));
        for (int c = 0; c < n; c += 8) {
            const __m256 pr = _mm256_mul_ps(load8(sr, c, n), inv);
            if (c + 8 <= n)
                _mm256_storeu_ps(sr + c, pr);
            else
                _mm256_maskstore_ps(sr + c, tail_mask(n - c), pr);
        }
    }

    // out[r][d0, d0 + 8*NV) += P[r][cols] · V[cols] over columns act[a0, a1): RB rows, NV
    // vectors, in registers.
    template <KvDtype D, int RB, int NV>
    void pv_kernel(int r, int d0, int a0, int a1) const {
        __m256 acc[RB][NV];
        for (int i = 0; i < RB; ++i)
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_loadu_ps(o[r + i] + d0 + 8 * v);
        const int off = goff + d0;
        for (int a = a0; a < a1; ++a) {
            const int c = act[a];
            const void* vc = cols[c].v;
            __m256 x[NV];
            for (int v = 0; v < NV; ++v) x[v] = Stored<D>::load8(vc, off + 8 * v);
            for (int i = 0; i < RB; ++i) {
                const __m256 w = _mm256_broadcast_ss(S + (r + i) * ldc + c);
                for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(w, x[v], acc[i][v]);
            }
        }
        for (int i = 0; i < RB; ++i)
            for (int v = 0; v < NV; ++v) _mm256_storeu_ps(o[r + i] + d0 + 8 * v, acc[i][v]);
    }

    template <KvDtype D, int RB>
    void pv_rows(int r, int d0, int d1, int a0, int a1) const {
        int d = d0;
        for (; d + 16 <= d1; d += 16) pv_kernel<D, RB, 2>(r, d, a0, a1);
        if (d + 8 <= d1) pv_kernel<D, RB, 1>(r, d, a0, a1), d += 8;
        for (; d < d1; ++d)  // head_dim not a multiple of 8
            for (int i = 0; i < RB; ++i) {
                float x = o[r + i][d];
                for (int a = a0; a < a1; ++a) x = std::fma(S[(r + i) * ldc + act[a]], Stored<D>::at(cols[act[a]].v, goff + d), x);
                o[r + i][d] = x;
            }
    }

    // out rows, channels [d0, d1) (multiples of 16), over columns act[a0, a1) of full-precision
    // slots with the AVX-512 kernel: per 64 columns, the probabilities transposed and the values
    // converted to floats per 32 channels; the same fma chains in column order.
    template <KvDtype D>
    void pv_slots_512(const attention_kernels::KiviKernels& k512, int d0, int d1, int a0, int a1) const {
        constexpr int kChunk = 64;
        thread_local std::vector<float> ps, x;
        ps.resize(static_cast<size_t>(kChunk) * R);
        x.resize(static_cast<size_t>(kChunk) * 32);
        const int g[2] = {0, 0};
        for (int c0 = a0; c0 < a1; c0 += kChunk) {
            const int n = std::min(kChunk, a1 - c0);
            for (int a = 0; a < n; ++a)
                for (int r = 0; r < R; ++r) ps[static_cast<size_t>(a) * R + r] = S[r * ldc + act[c0 + a]];
            for (int d = d0; d < d1;) {
                const int nv = d + 32 <= d1 ? 2 : 1;
                for (int a = 0; a < n; ++a)
                    for (int v = 0; v < 2 * nv; ++v)
                        _mm256_storeu_ps(x.data() + static_cast<size_t>(a) * 16 * nv + 8 * v, Stored<D>::load8(cols[act[c0 + a]].v, goff + d + 8 * v));
                k512.dense_values(ps.data(), R, 1, g, x.data(), n, d, nv, o);
                d += 16 * nv;
            }
        }
    }

    template <KvDtype D>
    void pv_slots(int d0, int d1, int c0, int c1) const {
        if (const auto* k512 = d0 % 16 == 0 && d1 % 16 == 0 && R > 4 ? kivi_kernels_512() : nullptr) return pv_slots_512<D>(*k512, d0, d1, c0, c1);
        int r = 0;
        for (; r + 4 <= R; r += 4) pv_rows<D, 4>(r, d0, d1, c0, c1);
        switch (R - r) {
            case 3: pv_rows<D, 3>(r, d0, d1, c0, c1); break;
            case 2: pv_rows<D, 2>(r, d0, d1, c0, c1); break;
            case 1: pv_rows<D, 1>(r, d0, d1, c0, c1); break;
            default: break;
        }
    }

    // Values of a quantized block read from their codes: each adds p·scale·codes, and p·zero is
    // summed per channel group and added once for the block. Rows RB at a time hold 16 channels
    // each in registers over the block's columns (each code unpacked once for RB rows), with the
    // products p·scale made beforehand (ps: per column, row and value group): per row and
    // channel the same fma(p·scale, code, out) in column order as one row at a time.
    // p[i * nk + k] = S[r + i][c] * vs[k] for i < nr, k < nk.
    void scale_probabilities(int c, int r, int nr, const float* vs, int nk, float* p) const {
        if (nk == 4) {  // head_dim 256 in groups of 64: one 128-bit product per row, no masked moves
            const __m128 v = _mm_loadu_ps(vs);
            for (int i = 0; i < nr; ++i) _mm_storeu_ps(p + i * 4, _mm_mul_ps(_mm_set1_ps(S[(r + i) * ldc + c]), v));
            return;
        }
        for (int i = 0; i < nr; ++i) {
            const __m256 pr = _mm256_set1_ps(S[(r + i) * ldc + c]);
            int k = 0;
            for (; k + 8 <= nk; k += 8) _mm256_storeu_ps(p + i * nk + k, _mm256_mul_ps(pr, _mm256_loadu_ps(vs + k)));
            if (k < nk) _mm256_maskstore_ps(p + i * nk + k, tail_mask(nk - k), _mm256_mul_ps(pr, _mm256_maskload_ps(vs + k, tail_mask(nk - k))));
        }
    }

    template <int NB, int RB>
    void pv_block_rows(int r, int d0, int d1, int a0, int a1, int k0, int nk, const float* ps,
                       const uint8_t* const* rows) const {
        const int vg = in.kivi->value_group;
        const int step = RB * nk;
        int d = d0;
        for (; d + 16 <= d1; d += 16) {
            const int g0 = d / vg - k0, g1 = (d + 8) / vg - k0;
            __m256 acc[RB][2];
            for (int i = 0; i < RB; ++i) acc[i][0] = _mm256_loadu_ps(o[r + i] + d), acc[i][1] = _mm256_loadu_ps(o[r + i] + d + 8);
            const float* p = ps;
            for (int a = a0; a < a1; ++a, p += step) {
                const uint8_t* row = rows[a - a0];
                const __m256 x0 = unpack8<NB>(row, goff + d), x1 = unpack8<NB>(row, goff + d + 8);
                for (int i = 0; i < RB; ++i) {
                    acc[i][0] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i * nk + g0), x0, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i * nk + g1), x1, acc[i][1]);
                }
            }
            for (int i = 0; i < RB; ++i) _mm256_storeu_ps(o[r + i] + d, acc[i][0]), _mm256_storeu_ps(o[r + i] + d + 8, acc[i][1]);
        }
        for (; d < d1; d += 8) {
            const int g0 = d / vg - k0;
            __m256 acc[RB];
            for (int i = 0; i < RB; ++i) acc[i] = _mm256_loadu_ps(o[r + i] + d);
            const float* p = ps;
            for (int a = a0; a < a1; ++a, p += step) {
                const __m256 x = unpack8<NB>(rows[a - a0], goff + d);
                for (int i = 0; i < RB; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i * nk + g0), x, acc[i]);
            }
            for (int i = 0; i < RB; ++i) _mm256_storeu_ps(o[r + i] + d, acc[i]);
        }
    }

    template <int NB>
    void pv_block(int d0, int d1, int a0, int a1) const {
        const KiviFormat& f = *in.kivi;
        const uint8_t* data = in.blocks[static_cast<size_t>(cols[act[a0]].block)].data;
        const int vg = f.value_group;
        const int k0 = d0 / vg, k1 = (d1 + vg - 1) / vg;  // value groups touched
        const int nk = k1 - k0;
        std::fill(zsum, zsum + static_cast<size_t>(R) * nk, 0.0f);
        // A decode step's 1-4 rows over more than 64 channels (Gemma 3's 256 a head): the 256-bit
        // loops below unpack each value in registers per 16 channels and measured faster than the
        // AVX-512 kernel's unpacking into scratch (which its R <= 4, <= 64-channel tiles avoid).
        const bool wide_few = R <= 4 && d1 - d0 > 64;
        const auto* k512 = vg % 16 == 0 && d0 % 16 == 0 && d1 % 16 == 0 && !wide_few ? kivi_kernels_512() : nullptr;
        const bool few = nk <= 4;
        const int n = a1 - a0;
        // A decode step's consecutive columns: one kernel reads the probabilities, scales, zeros
        // and codes in one pass, stepping through the rows by the block's stride, instead of
        // pointer tables and a pass for the zero sums and scaled probabilities before the values
        // (the same operations in the same order; bench_attention quantized:4, 9:3:64, 4,096
        // tokens, 1 thread, Zen 4: 267 -> 222 us). At 256 bits (pv_block_decode) when the channels
        // share one value group (--level avx2: 472 -> 310 us).
        const bool decode = R <= 4 && act[a1 - 1] - act[a0] == n - 1;
        const bool fused512 = k512 && few && d1 - d0 <= 64;
        const bool fused256 = !k512 && nk == 1 && d0 % 8 == 0 && (d1 - d0) % (R <= 2 ? 32 : 16) == 0;
        if (decode && (fused512 || fused256)) {
            const int j0 = cols[act[a0]].j;
            if (next_block) request_row(next_block + f.v_scale, f.block_bytes - f.v_scale);  // every token's scales and zeros
            attention_kernels::DecodeValues dv{};
            dv.S = S, dv.ldc = ldc, dv.c0 = act[a0], dv.n = n, dv.R = R;
            dv.nk = nk, dv.k0 = k0, dv.vg = vg;
            dv.row0 = f.value_row(data, j0), dv.stride = f.value_row(data, 1) - f.value_row(data, 0);
            dv.vs0 = f.value_scale(data, j0) + goff / vg + k0, dv.vz0 = f.value_zero(data, j0) + goff / vg + k0;
            dv.per = f.kv_dim / vg;
            dv.nbits = NB, dv.goff = goff, dv.d0 = d0, dv.d1 = d1;
            dv.o = o, dv.zsum = zsum;
            dv.ahead0 = next_block ? f.value_row(next_block, j0) : nullptr;
            if (k512) {
                k512->decode_values(dv);
            } else {
                switch (R) {
                    case 4: pv_block_decode<NB, 4>(dv); break;
                    case 3: pv_block_decode<NB, 3>(dv); break;
                    case 2: pv_block_decode<NB, 2>(dv); break;
                    default: pv_block_decode<NB, 1>(dv); break;
                }
            }
        } else {
            pv_block_general<NB>(d0, d1, a0, a1, data, k512, k0, nk);
        }
        // Whole vectors where 8 channels share a value group.
        const bool whole = vg % 8 == 0 && d0 % 8 == 0;
        for (int r = 0; r < R; ++r) {
            int d = d0;
            for (; whole && d + 8 <= d1; d += 8)
                _mm256_storeu_ps(o[r] + d, _mm256_add_ps(_mm256_loadu_ps(o[r] + d), _mm256_set1_ps(zsum[r * nk + d / vg - k0])));
            for (; d < d1; ++d) o[r][d] += zsum[r * nk + d / vg - k0];
        }
    }

    // DecodeValues' steps for RB rows whose channels share one value group, in 256-bit registers:
    // passes of NV vectors (as many as the registers hold), each reading the probabilities, the
    // scales and the codes, the first also the zeros; per column in order fma(p * scale, code,
    // out) and fma(p, zero, zsum), the operations of pv_block_general.
    template <int NB, int RB>
    void pv_block_decode(const attention_kernels::DecodeValues& dv) const {
        constexpr int NV = RB <= 2 ? 4 : 2;
        for (int d = dv.d0; d < dv.d1; d += 8 * NV) {
            if (d == dv.d0) pv_decode_pass<NB, RB, NV, true>(dv, d);
            else pv_decode_pass<NB, RB, NV, false>(dv, d);
        }
    }

    template <int NB, int RB, int NV, bool Z>
    void pv_decode_pass(const attention_kernels::DecodeValues& dv, int d) const {
        // (Locals, so that the loop does not reload them after the stores.)
        const uint8_t* row = dv.row0;
        const float* vs = dv.vs0;
        const float* vz = dv.vz0;
        const float* sr = dv.S + dv.c0;
        const int64_t stride = dv.stride, per = dv.per, ld = dv.ldc;
        const int n = dv.n, off = dv.goff + d;
        const uint8_t* ahead = Z && dv.ahead0 ? dv.ahead0 + int64_t(dv.goff + dv.d0) * NB / 8 : nullptr;
        const int64_t ahead_bytes = int64_t(dv.d1 - dv.d0) * NB / 8;
        float* const* out = dv.o;
        __m256 acc[RB][NV];
        [[maybe_unused]] float zs[RB];
        unroll<RB>([&](auto i) {
            unroll<NV>([&](auto v) { acc[i][v] = _mm256_loadu_ps(out[i] + d + 8 * v); });
            if constexpr (Z) zs[i] = dv.zsum[i];
        });
        for (int c = 0; c < n; ++c, row += stride, vs += per, vz += per) {
            if (ahead) request_row(ahead, ahead_bytes), ahead += stride;
            const float s = *vs;
            [[maybe_unused]] const float z = Z ? *vz : 0.0f;
            __m256 w[RB];
            unroll<RB>([&](auto i) {
                const float p = sr[i * ld + c];
                w[i] = _mm256_set1_ps(p * s);
                if constexpr (Z) zs[i] = std::fma(p, z, zs[i]);
            });
            unroll<NV>([&](auto v) {
                const __m256 x = unpack8<NB>(row, off + 8 * v);
                unroll<RB>([&](auto i) { acc[i][v] = _mm256_fmadd_ps(w[i], x, acc[i][v]); });
            });
        }
        unroll<RB>([&](auto i) {
            unroll<NV>([&](auto v) { _mm256_storeu_ps(out[i] + d + 8 * v, acc[i][v]); });
            if constexpr (Z) dv.zsum[i] = zs[i];
        });
    }

    // pv_block's other cases: the columns' rows, scales and zeros as pointers, the zero sums (and
    // for the AVX-512 kernel the scaled probabilities) in a pass of their own, then the values.
    template <int NB>
    void pv_block_general(int d0, int d1, int a0, int a1, const uint8_t* data, const attention_kernels::KiviKernels* k512,
                          int k0, int nk) const {
        const KiviFormat& f = *in.kivi;
        const int vg = f.value_group;
        // Up to four value groups a head (head_dim 256 or 64 in groups of 64): the zero sums in
        // registers, four rows at a time (independent chains), across the columns; with the
        // AVX-512 kernel the scaled probabilities in the same pass. Column by column, every row's
        // sum was a chain through memory; the same fma(p, zero, sum) in column order as that loop.
        const bool few = nk <= 4;
        if (!few) request_next_block(true);  // (rows_pass requests them row by row)
        thread_local std::vector<float> ps;
        if (k512) ps.resize(static_cast<size_t>(a1 - a0) * R * nk + static_cast<size_t>(a1 - a0) * 32);
        // The columns' value rows, and their scales and zeros from group k0 on. (Locals, so that
        // the loop does not reload them after each store.)
        thread_local std::vector<const uint8_t*> rows;
        thread_local std::vector<const float*> scale_zero;
        rows.resize(static_cast<size_t>(a1 - a0));
        scale_zero.resize(2 * static_cast<size_t>(a1 - a0));
        {
            const uint8_t** rp = rows.data();
            const float** sz = scale_zero.data();
            const Col* cl = cols;
            const int* ac = act + a0;
            const uint8_t* row0 = f.value_row(data, 0);
            const int64_t stride = f.value_row(data, 1) - row0, per = f.kv_dim / vg;
            const float* vs0 = f.value_scale(data, 0) + goff / vg + k0;
            const float* vz0 = f.value_zero(data, 0) + goff / vg + k0;
            for (int a = 0; a < a1 - a0; ++a) {
                const int64_t j = cl[ac[a]].j;
                rp[a] = row0 + j * stride;
                sz[2 * a] = vs0 + j * per;
                sz[2 * a + 1] = vz0 + j * per;
            }
        }
        if (few) {
            // PS: also the probabilities times the scales, [column][row][group] (the AVX-512 kernel's).
            auto rows_pass = [&]<int RB, int NK, bool PS>(int r) {
                __m128 zs[RB];
                for (int i = 0; i < RB; ++i) zs[i] = load_lanes<NK>(zsum + (r + i) * NK);
                float* pa = PS ? ps.data() + r * NK : nullptr;
                const uint8_t* next = r == 0 ? next_block : nullptr;
                if (next) request_row(next + f.v_scale, f.block_bytes - f.v_scale);  // every token's scales and zeros
                // (Locals: the loop's stores would otherwise reload them every column.)
                const uint8_t* const* rp = rows.data();
                const float* const* szp = scale_zero.data();
                const int64_t ahead_off = int64_t(goff + d0) * NB / 8, ahead_bytes = int64_t(d1 - d0) * NB / 8;
                for (int a = a0; a < a1; ++a) {
                    const int c = act[a];
                    if (next) request_row(next + (rp[a - a0] - data) + ahead_off, ahead_bytes);
                    const __m128 z4 = load_lanes<NK>(szp[2 * (a - a0) + 1]);
                    [[maybe_unused]] __m128 s4;
                    if constexpr (PS) s4 = load_lanes<NK>(szp[2 * (a - a0)]);
                    for (int i = 0; i < RB; ++i) {
                        const __m128 pr = _mm_set1_ps(S[(r + i) * ldc + c]);
                        if constexpr (PS) store_lanes<NK>(pa + i * NK, _mm_mul_ps(pr, s4));
                        zs[i] = _mm_fmadd_ps(pr, z4, zs[i]);
                    }
                    if constexpr (PS) pa += R * NK;
                }
                for (int i = 0; i < RB; ++i) store_lanes<NK>(zsum + (r + i) * NK, zs[i]);
            };
            auto all_rows = [&]<int NK, bool PS>() {
                int r = 0;
                for (; r + 4 <= R; r += 4) rows_pass.template operator()<4, NK, PS>(r);
                // The last rows in one pass too (a decode step's three rows a kv head: three
                // chains side by side instead of one at a time).
                switch (R - r) {
                    case 3: rows_pass.template operator()<3, NK, PS>(r); break;
                    case 2: rows_pass.template operator()<2, NK, PS>(r); break;
                    case 1: rows_pass.template operator()<1, NK, PS>(r); break;
                    default: break;
                }
            };
            auto with_ps = [&]<bool PS>() {
                switch (nk) {
                    case 4: all_rows.template operator()<4, PS>(); break;
                    case 3: all_rows.template operator()<3, PS>(); break;
                    case 2: all_rows.template operator()<2, PS>(); break;
                    default: all_rows.template operator()<1, PS>(); break;
                }
            };
            if (k512) with_ps.template operator()<true>();
            else with_ps.template operator()<false>();
        } else {
            for (int a = a0; a < a1; ++a) {
                const int c = act[a];
                const float* vz = scale_zero[2 * size_t(a - a0) + 1];
                for (int r = 0; r < R; ++r) {
                    const float pr = S[r * ldc + c];
                    for (int k = 0; k < nk; ++k) zsum[r * nk + k] = std::fma(pr, vz[k], zsum[r * nk + k]);
                }
            }
        }
        if (k512) {
            // All rows at once: the AVX-512 kernel unpacks each value once for every row.
            if (!few) {
                for (int a = a0; a < a1; ++a)
                    scale_probabilities(act[a], 0, R, scale_zero[2 * size_t(a - a0)], nk,
                                        ps.data() + static_cast<size_t>(a - a0) * R * nk);
            }
            k512->values(ps.data(), R, nk, k0, vg, rows.data(), a1 - a0, NB, goff, d0, d1, o,
                         ps.data() + static_cast<size_t>(a1 - a0) * R * nk);
        } else {
            constexpr int kRows = 4;
            ps.resize(static_cast<size_t>(a1 - a0) * kRows * nk);
            for (int r = 0; r < R; r += kRows) {
                const int nr = std::min(kRows, R - r);
                for (int a = a0; a < a1; ++a)
                    scale_probabilities(act[a], r, nr, scale_zero[2 * size_t(a - a0)], nk,
                                        ps.data() + static_cast<size_t>(a - a0) * nr * nk);
                switch (nr) {
                    case 4: pv_block_rows<NB, 4>(r, d0, d1, a0, a1, k0, nk, ps.data(), rows.data()); break;
                    case 3: pv_block_rows<NB, 3>(r, d0, d1, a0, a1, k0, nk, ps.data(), rows.data()); break;
                    case 2: pv_block_rows<NB, 2>(r, d0, d1, a0, a1, k0, nk, ps.data(), rows.data()); break;
                    default: pv_block_rows<NB, 1>(r, d0, d1, a0, a1, k0, nk, ps.data(), rows.data()); break;
                }
            }
        }
    }

    // out rows, channels [d0, d1), = P · V over all columns, in column order.
    void pv(int d0, int d1) const {
        for (int r = 0; r < R; ++r) std::fill(o[r] + d0, o[r] + d1, 0.0f);
        find_next_block(0, n_act);
        request_next_block(true);
        for (int a = 0; a < n_act;) {
            const int b = cols[act[a]].block;
            int e = a + 1;
            while (e < n_act && cols[act[e]].block == b) ++e;
            find_next_block(e, n_act);
            if (b < 0) {
                request_next_block(true);
                switch (in.dtype) {
                    case KvDtype::F32: pv_slots<KvDtype::F32>(d0, d1, a, e); break;
                    case KvDtype::F16: pv_slots<KvDtype::F16>(d0, d1, a, e); break;
                    case KvDtype::BF16: pv_slots<KvDtype::BF16>(d0, d1, a, e); break;
                }
            } else {
                switch (in.kivi->nbits) {
                    case 8: pv_block<8>(d0, d1, a, e); break;
                    case 4: pv_block<4>(d0, d1, a, e); break;
                    default: pv_block<2>(d0, d1, a, e); break;
                }
            }
            a = e;
        }
    }
};

// The columns (indexes into cols) some query at positions [pmin, pmax] may see.
void active_columns(const AttentionInput& in, const std::vector<Col>& cols, int32_t pmin, int32_t pmax, std::vector<int>& act) {
    // Written by index and kept by count, without a branch: a decode step walks thousands of
    // columns per kv head, nearly all of them seen.
    act.resize(cols.size());
    int* out = act.data();
    const Col* cl = cols.data();
    size_t k = 0;
    for (size_t c = 0; c < cols.size(); ++c) {
        out[k] = static_cast<int>(c);
        k += maybe_seen(cl[c], pmin, pmax, in.window);
    }
    act.resize(k);
}

// Row pointers of the tile of queries [t0, t1) for kv head g; with `columns`, also the columns
// its rows may see (w.act), else the caller's list of them is used.
void tile_rows(const AttentionInput& in, const AttentionShape& s, int64_t t0, int64_t t1, int g, float* out,
               const std::vector<Col>& cols, Scratch& w, bool columns = true) {
    const int group = s.n_head / s.n_head_kv, hd = s.head_dim;
    const int64_t q_stride = static_cast<int64_t>(s.n_head) * hd;
    const size_t R = static_cast<size_t>((t1 - t0) * group);
    w.q.resize(R), w.qs.resize(R), w.o.resize(R), w.pos.resize(R);
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int64_t t = t0; t < t1; ++t) {
        pmin = std::min(pmin, in.qpos[t]), pmax = std::max(pmax, in.qpos[t]);
        for (int h = 0; h < group; ++h) {
            const size_t r = static_cast<size_t>((t - t0) * group + h);
            const int64_t at = t * q_stride + static_cast<int64_t>(g * group + h) * hd;
            w.q[r] = in.q + at;
            w.qs[r] = in.q_sink ? in.q_sink + at : nullptr;
            w.o[r] = out + at;
            w.pos[r] = in.qpos[t];
        }
    }
    if (columns) active_columns(in, cols, pmin, pmax, w.act);
    if (in.kivi) {
        w.qk.resize(R * static_cast<size_t>(hd + 1));
        w.zsum.resize(R * static_cast<size_t>(hd / std::max(1, in.kivi->value_group) + 2));
    }
}

Tile make_tile(const AttentionInput& in, const AttentionShape& s, int g, const std::vector<Col>& cols,
               const std::vector<int32_t>& cpos, const std::vector<int32_t>& cexempt, float* S, int64_t ldc, Scratch& w,
               const std::vector<int>& act) {
    return Tile{in, s, s.head_dim, static_cast<int>(w.q.size()), g * s.head_dim, cols.data(), static_cast<int>(cols.size()),
                act.data(), static_cast<int>(act.size()), ldc, S, w.q.data(), in.q_sink ? w.qs.data() : nullptr,
                w.o.data(), w.pos.data(), w.qk.data(), w.zsum.data(), cpos.data(), cexempt.data()};
}

// The score matrix's row stride for C columns: a multiple of 8, and with more rows than an L1
// set has ways (prefill's tiles) and long rows, one cache line past a multiple of 4 KB. Rows a
// multiple of 4 KB apart fall into one set of the L1 cache, and the kernels read a column of
// several rows at once (a tile of 32 rows over 4,096 columns missed L1 on nearly every such read).
inline int64_t padded(int64_t n, int64_t rows) {
    const int64_t p = (n + 7) / 8 * 8;
    return p < 512 || rows <= 8 ? p : (p + 1023) / 1024 * 1024 + 16;
}

}  // namespace

void attend(const AttentionInput& in, const AttentionShape& shape, float* out, ThreadPool& pool) {
    const int hd = shape.head_dim, n_kv = shape.n_head_kv, group = shape.n_head / shape.n_head_kv;
    const int64_t n_q = in.n_q;
    if (n_q <= 0) return;
    if (reference_order_applies(in, shape)) return attend_reference_order(in, shape, out, pool);
    const int threads = pool.size();
    // One column list for the whole call: a row's softmax sums its columns by index, so every
    // tile must number them alike for results not to depend on the tiling (or thread count).
    // (Workers must see the caller's buffers, hence references: a lambda names a thread_local
    // of its own thread.)
    thread_local std::vector<Col> tls_cols;
    thread_local std::vector<int32_t> tls_cpos, tls_cexempt, tls_block_sig;
    thread_local std::vector<float> tls_scores;
    std::vector<Col>& cols = tls_cols;
    std::vector<int32_t>& cpos = tls_cpos;
    std::vector<int32_t>& cexempt = tls_cexempt;
    int32_t pmin = std::numeric_limits<int32_t>::max(), pmax = std::numeric_limits<int32_t>::min();
    for (int64_t t = 0; t < n_q; ++t) pmin = std::min(pmin, in.qpos[t]), pmax = std::max(pmax, in.qpos[t]);
    collect(in, pmin, pmax, cols, cpos, cexempt, tls_block_sig);
    const int64_t C = static_cast<int64_t>(cols.size()), ldc = padded(C, n_q * group);

    const QueryTiles tiles(n_q, group, n_kv, threads, kTileRows);

    if (tiles.n_tiles == 1 && C >= kSplitMinCols && n_kv % threads != 0) {
        // Few rows over a long context (decode), in one parallel step. The kv heads that divide
        // evenly among the threads go whole to one thread each (one tile: scores, softmax, P·V);
        // the rest (fewer than the threads: SmolLM2's third kv head of three on two threads,
        // Gemma 3's only one) are cut: scores by column chunks, the thread that completes a
        // head's last chunk doing its softmax, P·V by channel slices that wait for it. (A whole
        // tile per item left one of two threads a head and the other two.) Items are taken in
        // order, so every chunk has been taken by a running thread before a slice waits on it.
        // Each value is computed as on one thread.
        const int64_t R = n_q * group;
        const int n_whole = n_kv / threads * threads, n_split = n_kv - n_whole;
        std::vector<float>& S = tls_scores;
        S.resize(static_cast<size_t>(n_split * R * ldc));
        const int64_t n_chunks = (C + kSplitCols - 1) / kSplitCols;
        // Channel slices of whole value groups, so quantized blocks add their zero sums once.
        int slice = std::max(8, (hd / std::max(1, threads) + 7) / 8 * 8);
        if (in.kivi && !in.blocks.empty()) slice = (slice + in.kivi->value_group - 1) / in.kivi->value_group * in.kivi->value_group;
        const int64_t n_slices = (hd + slice - 1) / slice;
        // Every head's rows are all the queries, whose positions collect() kept columns for:
        // each row may see any of them.
        thread_local std::vector<int> tls_act;
        std::vector<int>& act = tls_act;
        // (Always 0, 1, 2, ...: only what it grows by is written, for the reason collect() gives.)
        const size_t had = act.size();
        act.resize(cols.size());
        if (act.size() > had) std::iota(act.begin() + static_cast<std::ptrdiff_t>(had), act.end(), static_cast<int>(had));
        std::vector<PartsGate> split(static_cast<size_t>(n_split));
        for (PartsGate& h : split) h.expect(n_chunks);
        const int64_t chunk_items = n_split * n_chunks, whole_end = chunk_items + n_whole;
        pool.parallel_for_dynamic(whole_end + n_split * n_slices, 1, [&](int64_t b, int64_t e) {
            thread_local Scratch w;
            thread_local std::vector<float> whole_S;
            for (int64_t i = b; i < e; ++i) {
                if (i < chunk_items) {
                    const int h = static_cast<int>(i / n_chunks), g = n_whole + h;
                    const int64_t ch = i % n_chunks;
                    float* Sh = S.data() + h * R * ldc;
                    split[static_cast<size_t>(h)].part(
                        [&] {
                            tile_rows(in, shape, 0, n_q, g, out, cols, w, false);
                            make_tile(in, shape, g, cols, cpos, cexempt, Sh, ldc, w, act)
                                .scores(static_cast<int>(ch * kSplitCols), static_cast<int>(std::min(C, (ch + 1) * kSplitCols)));
                        },
                        [&] {
                            const Tile tl = make_tile(in, shape, g, cols, cpos, cexempt, Sh, ldc, w, act);
                            for (int r = 0; r < tl.R; ++r) tl.softmax(r);
                        });
                } else if (i < whole_end) {
                    if (in.cancelled()) continue;
                    const int g = static_cast<int>(i - chunk_items);
                    tile_rows(in, shape, 0, n_q, g, out, cols, w, false);
                    whole_S.resize(static_cast<size_t>(R * ldc));
                    const Tile tl = make_tile(in, shape, g, cols, cpos, cexempt, whole_S.data(), ldc, w, act);
                    tl.scores(0, tl.n_act);
                    for (int r = 0; r < tl.R; ++r) tl.softmax(r);
                    tl.pv(0, hd);
                } else {
                    const int h = static_cast<int>((i - whole_end) / n_slices), g = n_whole + h;
                    const int d0 = static_cast<int>((i - whole_end) % n_slices) * slice;
                    split[static_cast<size_t>(h)].wait();
                    tile_rows(in, shape, 0, n_q, g, out, cols, w, false);
                    make_tile(in, shape, g, cols, cpos, cexempt, S.data() + h * R * ldc, ldc, w, act).pv(d0, std::min(hd, d0 + slice));
                }
            }
        });
        return;
    }

    pool.parallel_for(tiles.items(), [&](int64_t b, int64_t e) {
        thread_local Scratch w;
        thread_local std::vector<float> S;
        for (int64_t i = b; i < e; ++i) {
            if (in.cancelled()) return;
            const QueryTiles::Item it = tiles.item(i);
            tile_rows(in, shape, it.t0, it.t1, it.g, out, cols, w);
            S.resize(static_cast<size_t>(static_cast<int64_t>(w.q.size()) * ldc));
            const Tile tl = make_tile(in, shape, it.g, cols, cpos, cexempt, S.data(), ldc, w, w.act);
            tl.scores(0, tl.n_act);
            for (int r = 0; r < tl.R; ++r) tl.softmax(r);
            tl.pv(0, hd);
        }
    });
}

QueryTiles::QueryTiles(int64_t queries, int group, int kv_heads, int threads, int tile_rows)
    : n_q(queries), n_kv(kv_heads) {
    const int64_t tq_max = std::max<int64_t>(1, tile_rows / group);
    const int64_t per_round = std::max<int64_t>(1, (threads + n_kv - 1) / n_kv);
    n_tiles = (n_q + tq_max - 1) / tq_max;
    n_tiles = std::min<int64_t>(n_q, (n_tiles + per_round - 1) / per_round * per_round);
    tq = (n_q + n_tiles - 1) / n_tiles;
    n_tiles = (n_q + tq - 1) / tq;
}

}  // namespace kvchat
