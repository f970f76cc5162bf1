// Matrix products over quantized weights: picks the SIMD level and the kernel family (fused for
// 1-2 tokens, int8 panels for a few, AMX tiles for a batch), quantizes the activations once per
// call, and splits the work over the thread pool. The integer kernels live in matmul_avx2.cpp,
// matmul_avx512.cpp and matmul_amx_avx512.cpp; the AVX2 float-weight loop is here.
#include "engine/compute/matmul.h"

#include "engine/compute/interleaved_rows.h"
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/q4_1_product.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/simd_choices.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace kvchat {

namespace {

using kernels::ActivationGroups;
using kernels::Int8Layout;
using kernels::KernelSet;
using kernels::kPanelRows;
using kernels::QuantizedActivations;

// --- SIMD level ------------------------------------------------------------------------------

enum class Level { avx2, avx512_vnni, amx };

bool cpu_has_avx512_vnni() {
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                            __builtin_cpu_supports("avx512vnni");
    return has;
}

Level best_level() {
    static const Level best = !cpu_has_avx512_vnni() ? Level::avx2 : (kernels::amx_usable() ? Level::amx : Level::avx512_vnni);
    return best;
}

// -1: automatic; otherwise a forced Level.
std::atomic<int> forced_level{-1};

const char* level_name(Level l) {
    switch (l) {
        case Level::avx2: return "avx2";
        case Level::avx512_vnni: return "avx512-vnni";
        case Level::amx: return "amx";
    }
    return "avx2";
}
constexpr const char* kLevelNames = "avx2 avx512-vnni amx";

const KernelSet& kernels_of(Level l) { return l == Level::avx2 ? kernels::avx2_kernels() : kernels::avx512_kernels(); }

// Up to this many tokens, the hot types use the fused kernels (weights unpacked in registers per
// token); beyond, an int8 panel is unpacked once and reused by all tokens.
constexpr int64_t kFusedMaxTokens = 2;
// From this many tokens on, AMX tiles (16 tokens wide) beat the AVX-512 panels.
constexpr int64_t kAmxMinTokens = 16;

// --- buffers -----------------------------------------------------------------------------------

// 64-byte aligned storage that only grows, kept per thread across calls.
class ScratchBuffer {
public:
    void* get(size_t bytes) {
        if (bytes > lines_.size() * sizeof(Line)) lines_.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
        return lines_.data();
    }

private:
    struct alignas(64) Line {
        uint8_t b[64];
    };
    std::vector<Line> lines_;
};

// --- activation quantization -------------------------------------------------------------------

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// One token, as llama.cpp quantizes activations: blocks of `block` (32 or 256) columns,
// q = round(x * 127 / max|x|), and sums of q per 16 columns (the K-quant kernels and the panel
// bias need them). The scale of a 32-column block is fp16(max / 127) (its Q8_0 block); that of a
// 256-column block 1 / (127 / max) (quantize_row_q8_K; its sign flip cancels in every product).
void quantize_token(const float* x, int64_t cols, int64_t block, int8_t* q, float* d, int16_t* sum16) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < cols / block; ++b) {
        const float* xb = x + b * block;
        __m256 amax = _mm256_setzero_ps();
        for (int64_t i = 0; i < block; i += 8) amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
        const float m = hmax(amax);
        const float inv_m = m > 0.0f ? 127.0f / m : 0.0f;
        d[b] = block == 32 ? fp16_to_fp32(fp32_to_fp16(m / 127.0f)) : (m > 0.0f ? 1.0f / inv_m : 0.0f);
        const __m256 inv = _mm256_set1_ps(inv_m);
        for (int64_t i = 0; i < block; i += 32) {
            __m256i v[4];
            for (int k = 0; k < 4; ++k) v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * k), inv));
            const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * block + i), _mm256_permutevar8x32_epi32(packed, order));
            const int64_t s = (b * block + i) / 16;
            sum16[s] = int16_t(hsum_i32(_mm256_add_epi32(v[0], v[1])));
            sum16[s + 1] = int16_t(hsum_i32(_mm256_add_epi32(v[2], v[3])));
        }
    }
}

struct ActivationBuffers {
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int16_t> sum16;
    std::vector<int32_t> neg_sum8, neg_sum4;
    std::vector<float> group_d, group_d_sum;
    std::vector<int32_t> group_bias;
};

QuantizedActivations quantize_activations(const float* x, int64_t n_tokens, int64_t cols, int64_t block,
                                          ActivationBuffers& buf, ThreadPool& pool) {
    buf.q.resize(size_t(n_tokens * cols));
    buf.d.resize(size_t(n_tokens * (cols / block)));
    buf.sum16.resize(size_t(n_tokens * (cols / 16)));
    QuantizedActivations a;
    a.n_tokens = n_tokens;
    a.cols = cols;
    a.block = block;
    a.q = buf.q.data();
    a.d = buf.d.data();
    a.sum16 = buf.sum16.data();
    // Only the fused kernels (a token or two) read neg_sum8; the ordered 32-column kernels read
    // neg_sum4 for every call whose tokens the threads split into ones or twos.
    const bool sums8 = block == 32 && n_tokens <= kFusedMaxTokens;
    if (sums8) {
        buf.neg_sum8.assign(size_t(n_tokens * (cols / 32) * 8), 0);
        a.neg_sum8 = buf.neg_sum8.data();
    }
    if (block == 32) {
        buf.neg_sum4.resize(size_t(n_tokens * (cols / 4)));
        a.neg_sum4 = buf.neg_sum4.data();
    }
    auto quantize = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int16_t* s16 = buf.sum16.data() + t * (cols / 16);
            quantize_token(x + t * cols, cols, block, buf.q.data() + t * cols, buf.d.data() + t * (cols / block),
                           buf.sum16.data() + t * (cols / 16));
            if (sums8) {
                int32_t* s8 = buf.neg_sum8.data() + t * (cols / 32) * 8;
                for (int64_t b = 0; b < cols / 32; ++b) s8[8 * b] = -(int32_t(s16[2 * b]) + s16[2 * b + 1]);
            }
            if (block == 32) {
                const int8_t* q = buf.q.data() + t * cols;
                int32_t* s4 = buf.neg_sum4.data() + t * (cols / 4);
                const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
                for (int64_t c = 0; c < cols; c += 32) {
                    const __m256i q32 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c));
                    const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q32), ones16);
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s4 + c / 4), _mm256_sub_epi32(_mm256_setzero_si256(), sums));
                }
            }
        }
    };
    if (n_tokens * cols >= 32768) pool.parallel_for(n_tokens, quantize);
    else quantize(0, n_tokens);
    return a;
}

// Per token and panel group: the activation scale, scale * sum, and the -128 * sum that cancels
// the unsigned offset of AVX-512 panels.
ActivationGroups activation_groups(const QuantizedActivations& a, int group, ActivationBuffers& buf, ThreadPool& pool) {
    const int64_t groups = a.cols / group;
    const size_t n = size_t(a.n_tokens * groups);
    buf.group_d.resize(n);
    buf.group_d_sum.resize(n);
    buf.group_bias.resize(n);
    auto fill = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* d = a.d_row(t);
            const int16_t* s16 = a.sum16_row(t);
            for (int64_t g = 0; g < groups; ++g) {
                int32_t sum = 0;
                for (int k = 0; k < group / 16; ++k) sum += s16[g * (group / 16) + k];
                const float dg = d[g * group / a.block];
                const size_t i = size_t(t * groups + g);
                buf.group_d[i] = dg;
                buf.group_d_sum[i] = dg * float(sum);
                buf.group_bias[i] = -128 * sum;
            }
        }
    };
    if (n >= 8192) pool.parallel_for(a.n_tokens, fill);
    else fill(0, a.n_tokens);
    ActivationGroups g;
    g.n_groups = groups;
    g.d = buf.group_d.data();
    g.d_sum = buf.group_d_sum.data();
    g.bias = buf.group_bias.data();
    return g;
}

// --- integer weights ---------------------------------------------------------------------------

// Rows (or 16-row chunks) are handed out in about 8 pieces per thread: enough that a thread slowed
// by something else on its core leaves its share to the others, few enough that the shared counter
// costs nothing next to the rows. Each piece streams contiguous weights.
int64_t row_grain(int64_t n, const ThreadPool& pool) { return std::max<int64_t>(1, n / (8 * int64_t(pool.size()))); }

void fused_product(const KernelSet::FusedDot dot, const WeightMatrix& w, const QuantizedActivations& x, float* y,
                   ThreadPool& pool) {
    const size_t stride = row_bytes(w.type, w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    // Decode: one contiguous piece per thread, as the other decode products (pieces handed out
    // in turn sent each thread to where the other had been streaming).
    const int64_t grain = x.n_tokens <= 2 ? (w.rows + pool.size() - 1) / pool.size() : row_grain(w.rows, pool);
    pool.parallel_for_dynamic(w.rows, grain, [&](int64_t r0, int64_t r1) {
        // A few rows at a time, so that with several tokens their weights come from L1.
        constexpr int64_t kRowStep = 16;
        for (int64_t r = r0; r < r1; r += kRowStep) {
            const int64_t n = std::min(kRowStep, r1 - r);
            for (int64_t t = 0; t < x.n_tokens; ++t) {
                const kernels::TokenActivations xt{x.q_row(t), x.d_row(t), x.sum16_row(t),
                                                   x.neg_sum8 ? x.neg_sum8 + t * (x.cols / 32) * 8 : nullptr};
                dot(base + r * stride, stride, n, w.cols, xt, y + t * w.rows + r);
            }
        }
    });
}

void panel_product(const KernelSet& ks, const Int8Layout& layout, const WeightMatrix& w, const QuantizedActivations& x,
                   const ActivationGroups& g, float* y, ThreadPool& pool) {
    const size_t stride = row_bytes(w.type, w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t n_panels = (w.rows + kPanelRows - 1) / kPanelRows;
    const size_t panel_bytes = ks.panel_bytes(layout, w.cols);
    const size_t scratch_bytes = size_t(w.cols) * kPanelRows + size_t(w.cols / layout.group) * kPanelRows * 2 * sizeof(float);
    auto run_panels = [&](int64_t p0, int64_t p1, int64_t t0, int64_t t1) {
        thread_local ScratchBuffer scratch, panel;
        void* s = scratch.get(scratch_bytes);
        void* p = panel.get(panel_bytes);
        for (int64_t i = p0; i < p1; ++i) {
            const int64_t r = i * kPanelRows;
            const int n = int(std::min<int64_t>(kPanelRows, w.rows - r));
            ks.pack_panel(w.type, layout, base + r * stride, stride, n, w.cols, s, p);
            ks.panel_product(layout, p, w.cols, x, g, t0, t1, y + r, w.rows, n);
        }
    };
    if (n_panels >= pool.size() || x.n_tokens < pool.size()) {
        pool.parallel_for(n_panels, [&](int64_t p0, int64_t p1) { run_panels(p0, p1, 0, x.n_tokens); });
    } else {
        // Few rows, many tokens: every thread unpacks all panels and takes a share of the tokens.
        pool.parallel_for(x.n_tokens, [&](int64_t t0, int64_t t1) { run_panels(0, n_panels, t0, t1); });
    }
}

// AMX: activations interleaved once per call, then every thread takes whole 16-row panels.
void amx_product(const Int8Layout& layout, const WeightMatrix& w, const QuantizedActivations& x,
                 const ActivationGroups& g, float* y, ThreadPool& pool) {
    thread_local ScratchBuffer packed_x;
    void* px = packed_x.get(kernels::amx_activation_bytes(layout, w.cols, x.n_tokens));
    const int64_t token_blocks = (x.n_tokens + 15) / 16;
    pool.parallel_for(token_blocks, [&](int64_t b0, int64_t b1) { kernels::amx_pack_activations(layout, x, g, b0, b1, px); });
    const size_t stride = row_bytes(w.type, w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t n_panels = (w.rows + kPanelRows - 1) / kPanelRows;
    const size_t scratch_bytes = kernels::amx_scratch_bytes(layout, w.cols);
    const size_t block_bytes = kernels::amx_activation_bytes(layout, w.cols, 16);
    // Panels [p0, p1) against token blocks [b0, b1).
    auto run = [&](int64_t p0, int64_t p1, int64_t b0, int64_t b1) {
        thread_local ScratchBuffer scratch;
        void* s = scratch.get(scratch_bytes);
        const auto* xb = static_cast<const uint8_t*>(px) + size_t(b0) * block_bytes;
        const int64_t n_tokens = std::min(x.n_tokens, b1 * 16) - b0 * 16;
        for (int64_t i = p0; i < p1; ++i) {
            const int64_t r = i * kPanelRows;
            const int n = int(std::min<int64_t>(kPanelRows, w.rows - r));
            kernels::amx_rows(w.type, layout, base + r * stride, stride, n, w.cols, xb, n_tokens, s,
                              y + b0 * 16 * w.rows + r, w.rows);
        }
    };
    if (n_panels >= 4 * pool.size() || token_blocks < pool.size()) {
        pool.parallel_for(n_panels, [&](int64_t p0, int64_t p1) { run(p0, p1, 0, token_blocks); });
    } else {
        // Few rows, many tokens: every thread unpacks all panels and takes a share of the tokens.
        pool.parallel_for(token_blocks, [&](int64_t b0, int64_t b1) { run(0, n_panels, b0, b1); });
    }
}

// --- llama.cpp's order ---------------------------------------------------------------------------

bool in_reference_order(TensorType t) {
    return t == TensorType::Q5_0 || t == TensorType::Q8_0 || t == TensorType::Q4_K || t == TensorType::Q6_K;
}

// The smallest call llama.cpp's tiled K-quant matmul takes (ggml_tiled_min_batch); below, Q6_K
// goes through ggml_vec_dot_q6_K_q8_K, whose float order differs.
constexpr int64_t kTiledMinTokens = 8;
// From this many tokens on, ordered_product hands out one 16-row chunk at a time.
constexpr int64_t kFewTokens = 16;

void ordered_product(const KernelSet& ks, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     ThreadPool& pool) {
    const bool k_quant = w.type == TensorType::Q4_K || w.type == TensorType::Q6_K;
    thread_local ActivationBuffers buf;
    const QuantizedActivations xq = quantize_activations(x, n_tokens, w.cols, k_quant ? 256 : 32, buf, pool);
    if (w.type == TensorType::Q6_K && n_tokens < kTiledMinTokens) {
        fused_product(ks.fused[uint32_t(TensorType::Q6_K)], w, xq, y, pool);
        return;
    }
    const KernelSet::OrderedProduct fn = w.type == TensorType::Q4_K   ? ks.ordered_q4_k
                                         : w.type == TensorType::Q6_K ? ks.ordered_q6_k_tiled
                                                                      : ks.ordered_blocks32;
    const size_t stride = row_bytes(w.type, w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t n_chunks = (w.rows + kernels::kOrderedRows - 1) / kernels::kOrderedRows;
    const size_t scratch_bytes = kernels::ordered_scratch_bytes(w.cols);
    const bool plain = w.layout == RowLayout::Plain;
    static_assert(kernels::kOrderedRows == kInterleavedRows, "a chunk is one group of interleaved rows");
    auto run = [&](int64_t c0, int64_t c1, int64_t t0, int64_t t1) {
        thread_local ScratchBuffer scratch, rows;
        void* s = scratch.get(scratch_bytes);
        for (int64_t c = c0; c < c1; ++c) {
            const int64_t r = c * kernels::kOrderedRows;
            const int n = int(std::min<int64_t>(kernels::kOrderedRows, w.rows - r));
            const uint8_t* chunk = base + r * stride;
            if (!plain) {
                auto* p = static_cast<uint8_t*>(rows.get(size_t(n) * stride));
                plain_rows(w, r, n, p);
                chunk = p;
            }
            fn(w.type, chunk, stride, n, w.cols, xq, t0, t1, y + r, w.rows, s);
        }
    };
    if (n_chunks >= 4 * pool.size() || n_tokens < pool.size()) {
        // A prefill chunk is heavy (16 rows against every token: about a millisecond at 512
        // tokens): one per piece, so the thread that finishes last keeps the other waiting for at
        // most one chunk, not the 8 that row_grain gives the largest matrices. Decode chunks are
        // light: one contiguous piece per thread keeps each thread's stream long (as q4_1_products).
        const int64_t grain = n_tokens >= kFewTokens ? 1 : (n_chunks + pool.size() - 1) / pool.size();
        pool.parallel_for_dynamic(n_chunks, grain, [&](int64_t c0, int64_t c1) { run(c0, c1, 0, n_tokens); });
    } else {
        // Few rows, many tokens: every thread takes all rows and a share of the tokens.
        pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) { run(0, n_chunks, t0, t1); });
    }
}

// One or two tokens against Q5_0 or Q8_0 rows in the interleaved layout (AVX-512 VNNI or AVX2
// kernels, the same bits): every thread takes whole groups of 16 rows.
void interleaved_decode(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    thread_local ActivationBuffers buf;
    const QuantizedActivations xq = quantize_activations(x, n_tokens, w.cols, 32, buf, pool);
    // The chains start at -z * sum(x) per group of 4 columns (z: the weights' unsigned offset).
    const int32_t z = w.type == TensorType::Q8_0 ? 128 : 16;
    thread_local std::vector<int32_t> starts;
    starts.resize(size_t(n_tokens * (w.cols / 4)));
    for (size_t i = 0; i < starts.size(); ++i) starts[i] = z * xq.neg_sum4[i];
    interleaved::Token8 tok[2];
    for (int64_t t = 0; t < n_tokens; ++t) tok[t] = {xq.q_row(t), xq.d_row(t), starts.data() + t * (w.cols / 4)};
    const bool avx512 = interleaved_decode_avx512();
    const auto kernel = w.type == TensorType::Q8_0 ? (avx512 ? interleaved::q8_0_group_avx512 : interleaved::q8_0_group_avx2)
                                                   : (avx512 ? interleaved::q5_0_group_avx512 : interleaved::q5_0_group_avx2);
    const size_t group_bytes = size_t(kInterleavedRows) * row_bytes(w.type, w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t nb = w.cols / 32, groups = w.rows / kInterleavedRows;
    // One contiguous piece per thread, as q4_1_products: the streams stay long.
    pool.parallel_for_dynamic(groups, (groups + pool.size() - 1) / pool.size(), [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < std::min(g1, g0 + 2); ++g) interleaved::request_group(base + size_t(g) * group_bytes, group_bytes);
        for (int64_t g = g0; g < g1; ++g) {
            const int64_t r = g * kInterleavedRows;
            kernel(base + size_t(g) * group_bytes, nb, tok[0], n_tokens == 2 ? &tok[1] : nullptr, y + r,
                   n_tokens == 2 ? y + w.rows + r : nullptr);
        }
    });
}

// --- float weights -----------------------------------------------------------------------------

template <TensorType T>
struct FloatWeights;

template <>
struct FloatWeights<TensorType::F32> {
    static __m256 load8(const void* p, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(p) + i); }
    static float load1(const void* p, int64_t i) {
        float v;
        std::memcpy(&v, static_cast<const uint8_t*>(p) + 4 * i, 4);
        return v;
    }
    static constexpr size_t kBytes = 4;
};

template <>
struct FloatWeights<TensorType::F16> {
    static __m256 load8(const void* p, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
    }
    static float load1(const void* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2);
        return fp16_to_fp32(h);
    }
    static constexpr size_t kBytes = 2;
};

template <>
struct FloatWeights<TensorType::BF16> {
    // bf16 is the top half of an fp32: widen and shift.
    static __m256 load8(const void* p, int64_t i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static float load1(const void* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2);
        return bf16_to_fp32(h);
    }
    static constexpr size_t kBytes = 2;
};

// R rows x NT tokens per pass: each converted weight vector serves NT tokens, each x vector R rows.
// The sums take the AVX-512 kernel's order (matmul_avx512.cpp), so that both levels give the same
// bits: 16 columns a step as two 8-lane halves, a zero-padded last step, then the halves added and
// reduced as one 16-lane vector. Holding both halves would take 2 x R x NT of the 16 registers,
// so a block of columns is walked twice, low halves then high, the second time from L1.
template <TensorType T, int R, int NT>
void float_tile(const uint8_t* w, size_t stride, int64_t cols, const float* x, float* y, int64_t y_stride) {
    using F = FloatWeights<T>;
    constexpr int64_t kBlock = 512;
    __m256 sums[2][R][NT];
    for (int h = 0; h < 2; ++h)
        for (int r = 0; r < R; ++r)
            for (int t = 0; t < NT; ++t) sums[h][r][t] = _mm256_setzero_ps();
    const int64_t full = cols / 16 * 16;
    for (int64_t c0 = 0; c0 < full; c0 += kBlock) {
        const int64_t c1 = std::min(c0 + kBlock, full);
        for (int h = 0; h < 2; ++h) {
            __m256 acc[R][NT];
            for (int r = 0; r < R; ++r)
                for (int t = 0; t < NT; ++t) acc[r][t] = sums[h][r][t];
            for (int64_t c = c0 + 8 * h; c < c1; c += 16) {
                __m256 xv[NT];
                for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + t * cols + c);
                for (int r = 0; r < R; ++r) {
                    const __m256 wv = F::load8(w + r * stride, c);
                    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
                }
            }
            for (int r = 0; r < R; ++r)
                for (int t = 0; t < NT; ++t) sums[h][r][t] = acc[r][t];
        }
    }
    if (full < cols) {
        alignas(32) float xs[NT][16] = {}, ws[16] = {};
        for (int t = 0; t < NT; ++t)
            for (int64_t k = full; k < cols; ++k) xs[t][k - full] = x[t * cols + k];
        for (int r = 0; r < R; ++r) {
            for (int64_t k = full; k < cols; ++k) ws[k - full] = F::load1(w + r * stride, k);
            for (int h = 0; h < 2; ++h)
                for (int t = 0; t < NT; ++t)
                    sums[h][r][t] = _mm256_fmadd_ps(_mm256_load_ps(ws + 8 * h), _mm256_load_ps(xs[t] + 8 * h), sums[h][r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < NT; ++t) y[t * y_stride + r] = hsum(_mm256_add_ps(sums[0][r][t], sums[1][r][t]));
}

template <TensorType T>
void float_product(const KernelSet& ks, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    const size_t stride = FloatWeights<T>::kBytes * size_t(w.cols);
    const auto* base = static_cast<const uint8_t*>(w.data);
    constexpr int64_t kRowStep = 16;
    if (const auto rows_kernel = ks.float_rows) {
        pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) {
            // A few rows at a time, so that their weights serve all tokens from L1.
            for (int64_t r = r0; r < r1; r += kRowStep) {
                rows_kernel(T, base + r * stride, stride, std::min(kRowStep, r1 - r), w.cols, x, n_tokens, y + r, w.rows);
            }
        });
        return;
    }
    pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) {
        for (int64_t rb = r0; rb < r1; rb += kRowStep) {
            const int64_t re = std::min(rb + kRowStep, r1);
            for (int64_t t = 0; t < n_tokens; t += 2) {
                const bool pair = t + 1 < n_tokens;
                int64_t r = rb;
                for (; r + 4 <= re; r += 4) {
                    if (pair) float_tile<T, 4, 2>(base + r * stride, stride, w.cols, x + t * w.cols, y + t * w.rows + r, w.rows);
                    else float_tile<T, 4, 1>(base + r * stride, stride, w.cols, x + t * w.cols, y + t * w.rows + r, w.rows);
                }
                for (; r < re; ++r) {
                    if (pair) float_tile<T, 1, 2>(base + r * stride, stride, w.cols, x + t * w.cols, y + t * w.rows + r, w.rows);
                    else float_tile<T, 1, 1>(base + r * stride, stride, w.cols, x + t * w.cols, y + t * w.rows + r, w.rows);
                }
            }
        }
    });
}

// The product at one SIMD level.
void product_at(Level lv, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    const KernelSet& ks = kernels_of(lv);
    switch (w.type) {
        case TensorType::F32: return float_product<TensorType::F32>(ks, w, x, n_tokens, y, pool);
        case TensorType::F16: return float_product<TensorType::F16>(ks, w, x, n_tokens, y, pool);
        case TensorType::BF16: return float_product<TensorType::BF16>(ks, w, x, n_tokens, y, pool);
        default: break;
    }
    // llama.cpp's order, its kernels at this level
    if (w.type == TensorType::Q4_1) return q4_1_product(w, x, n_tokens, y, pool, lv != Level::avx2);
    if (w.layout == RowLayout::Interleaved16 && n_tokens <= kFusedMaxTokens)
        return interleaved_decode(w, x, n_tokens, y, pool);
    if (in_reference_order(w.type)) return ordered_product(ks, w, x, n_tokens, y, pool);
    const Int8Layout layout = kernels::int8_layout(w.type);
    if (layout.group == 0) throw Error("matmul: no kernel for " + std::string(traits(w.type).name));
    thread_local ActivationBuffers buf;
    const QuantizedActivations xq = quantize_activations(x, n_tokens, w.cols, layout.act_block, buf, pool);
    const auto fused = ks.fused[uint32_t(w.type)];
    if (fused && n_tokens <= kFusedMaxTokens) {
        fused_product(fused, w, xq, y, pool);
        return;
    }
    const ActivationGroups g = activation_groups(xq, layout.group, buf, pool);
    if (lv == Level::amx && n_tokens >= kAmxMinTokens) amx_product(layout, w, xq, g, y, pool);
    else panel_product(ks, layout, w, xq, g, y, pool);
}

// --- which level each kernel family takes --------------------------------------------------------
// A family is a weight type in one regime: decode (a token or two: weights streamed once, the
// fused and streamed kernels) or batch (panels and tiles). Every level computes the same bits, so
// the choice changes only the speed; it is measured on first use (calibrate) and kept in the
// choice file (simd_choices.h).

constexpr int kTypeSlots = 32;
int family_index(TensorType t, bool batch) { return int(uint32_t(t) % kTypeSlots) * 2 + (batch ? 1 : 0); }

std::string family_name(TensorType t, bool batch) {
    std::string n(traits(t).name);
    for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
    return n + (batch ? "/batch" : "/decode");
}

struct FamilyLevels {
    std::atomic<int> level[2 * kTypeSlots];  // -1: not chosen yet
    std::mutex mu;                           // for choosing
    bool file_read = false;
    std::string path, cpu_key;
    FamilyLevels() {
        for (auto& l : level) l.store(-1);
    }
};

FamilyLevels& family_levels() {
    static FamilyLevels f;
    return f;
}

// Median-free timing on a busy machine: the fastest of several alternating runs of each level is
// the one least disturbed by other programs.
Level calibrate(TensorType t, bool batch, int64_t cols) {
    std::vector<Level> candidates = {Level::avx2, Level::avx512_vnni};
    const bool float_type = t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
    if (batch && best_level() == Level::amx && !float_type && !in_reference_order(t)) candidates.push_back(Level::amx);
    // In cache (about 256 KiB of weights): the memory stream is the same at every level; what
    // differs is the arithmetic around it.
    const size_t rb = row_bytes(t, cols);
    const int64_t n_tokens = batch ? 32 : 1;
    const int64_t rows = batch ? 64 : std::clamp<int64_t>(int64_t((256u << 10) / rb) / 16 * 16, 16, 4096);
    constexpr int64_t kDistinct = 16;
    std::vector<uint8_t> data(rb * size_t(rows));
    std::mt19937 rng(12345);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(cols));
    for (int64_t r = 0; r < kDistinct; ++r) {
        for (float& v : src) v = normal(rng);
        quantize_row(t, src.data(), data.data() + size_t(r) * rb, cols);
    }
    for (int64_t r = kDistinct; r < rows; ++r) std::memcpy(data.data() + size_t(r) * rb, data.data() + size_t(r % kDistinct) * rb, rb);
    std::vector<float> x(size_t(n_tokens * cols)), y(size_t(n_tokens * rows));
    for (float& v : x) v = normal(rng);
    const WeightMatrix w{t, rows, cols, data.data()};
    ThreadPool one(1);
    std::vector<double> best(candidates.size(), 1e30);
    for (int round = 0; round < 8; ++round) {
        for (size_t i = 0; i < candidates.size(); ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            product_at(candidates[i], w, x.data(), n_tokens, y.data(), one);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (round > 0) best[i] = std::min(best[i], s);  // round 0 warms caches and buffers
        }
    }
    // The highest level keeps the family unless another is clearly (3%) faster.
    size_t pick = candidates.size() - 1;
    for (size_t i = 0; i < candidates.size(); ++i)
        if (best[i] < 0.97 * best[pick]) pick = i;
    return candidates[pick];
}

Level choose(TensorType t, bool batch, int64_t cols) {
    FamilyLevels& f = family_levels();
    std::lock_guard lock(f.mu);
    const int i = family_index(t, batch);
    if (!f.file_read) {
        f.file_read = true;
        f.path = simd_choices_path();
        f.cpu_key = cpu_model_key(level_name(best_level()));
        for (const auto& [family, level] : load_simd_choices(f.path, f.cpu_key, kLevelNames)) {
            for (uint32_t id = 0; id < kTypeSlots; ++id) {
                if (!type_traits(id)) continue;
                for (bool b : {false, true}) {
                    if (family_name(TensorType(id), b) != family) continue;
                    for (Level l : {Level::avx2, Level::avx512_vnni, Level::amx})
                        if (level == level_name(l) && int(l) <= int(best_level())) f.level[family_index(TensorType(id), b)].store(int(l));
                }
            }
        }
    }
    if (const int l = f.level[i].load(); l >= 0) return Level(l);
    const Level l = calibrate(t, batch, cols);
    f.level[i].store(int(l));
    save_simd_choices(f.path, {{family_name(t, batch), level_name(l)}}, f.cpu_key, kLevelNames);
    return l;
}

Level level_for(TensorType t, int64_t n_tokens, int64_t cols) {
    if (const int forced = forced_level.load(std::memory_order_relaxed); forced >= 0) return Level(forced);
    if (best_level() == Level::avx2) return Level::avx2;
    const bool batch = n_tokens > kFusedMaxTokens;
    if (const int l = family_levels().level[family_index(t, batch)].load(std::memory_order_relaxed); l >= 0) return Level(l);
    return choose(t, batch, cols);
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    const TypeTraits& tt = traits(w.type);
    if (w.rows < 0 || w.cols <= 0 || w.cols % tt.block_elems != 0) {
        throw Error("matmul: " + std::to_string(w.cols) + " columns do not fit " + std::string(tt.name) + " blocks");
    }
    if (w.layout != RowLayout::Plain && !can_interleave(WeightMatrix{w.type, w.rows, w.cols, w.data}))
        throw Error("matmul: a " + std::string(tt.name) + " matrix of " + std::to_string(w.rows) + " rows has no interleaved layout");
    if (n_tokens <= 0 || w.rows == 0) return;
    product_at(level_for(w.type, n_tokens, w.cols), w, x, n_tokens, y, pool);
}

void matmuls(const WeightMatrix* const* w, float* const* y, int count, const float* x, int64_t n_tokens, ThreadPool& pool) {
    bool shared = count > 1 && n_tokens > 0;
    for (int i = 0; i < count && shared; ++i)
        shared = w[i]->type == TensorType::Q4_1 && w[i]->cols == w[0]->cols && w[i]->rows > 0 && w[i]->cols % QK4_1 == 0;
    if (!shared) {
        for (int i = 0; i < count; ++i) matmul(*w[i], x, n_tokens, y[i], pool);
        return;
    }
    q4_1_products(w, y, count, x, n_tokens, pool, level_for(TensorType::Q4_1, n_tokens, w[0]->cols) != Level::avx2);
}

std::string simd_family_levels() {
    const int forced = forced_level.load();
    std::string out;
    for (uint32_t id = 0; id < kTypeSlots; ++id) {
        if (!type_traits(id)) continue;
        for (bool b : {false, true}) {
            const int l = forced >= 0 ? -1 : family_levels().level[family_index(TensorType(id), b)].load();
            if (l < 0) continue;
            out += (out.empty() ? "" : ", ") + family_name(TensorType(id), b) + " " + level_name(Level(l));
        }
    }
    return out;
}

// The largest user: the AVX2 Q5_0 panel (matmul_avx2.cpp), 52 bytes per column.
size_t kernels::ordered_scratch_bytes(int64_t cols) { return size_t(cols) * 56 + 4096; }

void weight_row(const WeightMatrix& w, int64_t r, float* dst) {
    if (r < 0 || r >= w.rows) throw Error("weight_row: row " + std::to_string(r) + " out of range");
    if (w.layout != RowLayout::Plain) {
        std::vector<uint8_t> row(row_bytes(w.type, w.cols));
        plain_rows(w, r, 1, row.data());
        dequantize_row(w.type, row.data(), dst, w.cols);
        return;
    }
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + size_t(r) * row_bytes(w.type, w.cols), dst, w.cols);
}

bool interleaved_decode_avx512() {
    const int f = forced_level.load(std::memory_order_relaxed);
    return (f < 0 ? best_level() : Level(f)) != Level::avx2;
}

const char* simd_level() {
    const int f = forced_level.load(std::memory_order_relaxed);
    return level_name(f < 0 ? best_level() : Level(f));
}

void force_simd_level(const char* name) {
    const std::string l = name ? name : "auto";
    Level wanted;
    if (l == "auto") {
        forced_level.store(-1);
        return;
    } else if (l == "avx2") {
        wanted = Level::avx2;
    } else if (l == "avx512-vnni") {
        wanted = Level::avx512_vnni;
    } else if (l == "amx") {
        wanted = Level::amx;
    } else {
        throw Error("unknown SIMD level '" + l + "' (auto, avx2, avx512-vnni or amx)");
    }
    if (int(wanted) > int(best_level())) throw Error("this CPU cannot run the SIMD level " + l + " (its best: " + level_name(best_level()) + ")");
    forced_level.store(int(wanted));
}

}  // namespace kvchat
