// Q4_1 x Q8_1 in llama.cpp's order (q4_1_product.h).
#include "engine/compute/q4_1_product.h"

#include "engine/compute/interleaved_rows.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kvchat {

namespace {

// One token as quantize_row_q8_1 (AVX2 build): per block of 32, d = max|x| / 127 (float), q =
// round-to-even(x * (127 / max)), d kept as fp16 and s = fp16(d * sum(q)).
void quantize_q8_1(const float* x, int64_t cols, BlockQ8_1* out) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < cols / QK8_1; ++b) {
        const float* xb = x + b * QK8_1;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
        }
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float max = _mm_cvtss_f32(m4);
        const float d = max / 127.0f;
        const __m256 mul = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; ++k)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        // F16C's round-to-nearest-even conversion: the bits of fp32_to_fp16, without its branches.
        out[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        out[b].s = _cvtss_sh(d * static_cast<float>(_mm_cvtsi128_si32(s4)), _MM_FROUND_TO_NEAREST_INT);
        const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), _mm256_permutevar8x32_epi32(packed, order));
    }
}

// hsum_float_8: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).
inline float hsum8(__m256 a) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// Rows [0, n_rows) (`stride` bytes apart) against one token's blocks; ROWS rows share each loaded
// activation block.
template <int ROWS>
void dot_rows(const uint8_t* rows, size_t stride, int64_t n_blocks, const BlockQ8_1* x, float* y) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS];
    float mins[ROWS];
    for (int r = 0; r < ROWS; ++r) acc[r] = _mm256_setzero_ps(), mins[r] = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
        const float dx = _cvtsh_ss(x[b].d), sx = _cvtsh_ss(x[b].s);  // F16C: exact, as fp16_to_fp32
        for (int r = 0; r < ROWS; ++r) {
            const auto* wb = reinterpret_cast<const BlockQ4_1*>(rows + r * stride) + b;
            const __m128i nib = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb->qs));
            const __m256i qw = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(nib, 4), nib), low);
            // Exact: 4 products of at most 15 * 127 per lane.
            const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx), ones));
            mins[r] = std::fma(_cvtsh_ss(wb->m), sx, mins[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(wb->d) * dx), s, acc[r]);
        }
    }
    for (int r = 0; r < ROWS; ++r) y[r] = hsum8(acc[r]) + mins[r];
}

// Rows unpacked once for a batch of tokens: per row and block, 32 bytes of weights 0..15 in
// column order, and the block's scale and minimum as floats.
struct UnpackedRows {
    std::vector<uint8_t> q;
    std::vector<float> d, m;
};

void unpack_rows(const uint8_t* rows, size_t stride, int n_rows, int64_t n_blocks, UnpackedRows& u) {
    u.q.resize(size_t(n_rows) * size_t(n_blocks) * 32);
    u.d.resize(size_t(n_rows) * size_t(n_blocks));
    u.m.resize(u.d.size());
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < n_rows; ++r) {
        const auto* wb = reinterpret_cast<const BlockQ4_1*>(rows + r * stride);
        for (int64_t b = 0; b < n_blocks; ++b) {
            const size_t i = size_t(r) * size_t(n_blocks) + size_t(b);
            const __m128i nib = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].qs));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(u.q.data() + 32 * i),
                                _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(nib, 4), nib), low));
            u.d[i] = _cvtsh_ss(wb[b].d);
            u.m[i] = _cvtsh_ss(wb[b].m);
        }
    }
}

// ROWS unpacked rows (from row r0 of u) against TOKENS tokens: the same arithmetic as dot_rows,
// each loaded weight vector serving every token and each activation block every row.
template <int ROWS, int TOKENS>
void panel_dot(const UnpackedRows& u, int r0, int64_t n_blocks, const BlockQ8_1* const* x, float* y, int64_t y_stride) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS][TOKENS];
    float mins[ROWS][TOKENS];
    for (int r = 0; r < ROWS; ++r)
        for (int t = 0; t < TOKENS; ++t) acc[r][t] = _mm256_setzero_ps(), mins[r][t] = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i qx[TOKENS];
        float dx[TOKENS], sx[TOKENS];
        for (int t = 0; t < TOKENS; ++t) {
            qx[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].qs));
            dx[t] = _cvtsh_ss(x[t][b].d);
            sx[t] = _cvtsh_ss(x[t][b].s);
        }
        for (int r = 0; r < ROWS; ++r) {
            const size_t i = size_t(r0 + r) * size_t(n_blocks) + size_t(b);
            const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q.data() + 32 * i));
            const float dw = u.d[i], mw = u.m[i];
            for (int t = 0; t < TOKENS; ++t) {
                const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx[t]), ones));
                mins[r][t] = std::fma(mw, sx[t], mins[r][t]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t]), s, acc[r][t]);
            }
        }
    }
    for (int r = 0; r < ROWS; ++r)
        for (int t = 0; t < TOKENS; ++t) y[t * y_stride + r] = hsum8(acc[r][t]) + mins[r][t];
}

// Up to 16 unpacked rows against tokens [0, n_tokens): pairs of tokens, rows in fours.
void panel_rows(const UnpackedRows& u, int n_rows, int64_t n_blocks, const BlockQ8_1* xq, int64_t n_tokens, float* y,
                int64_t y_stride) {
    int64_t t = 0;
    for (; t + 2 <= n_tokens; t += 2) {
        const BlockQ8_1* x[2] = {xq + t * n_blocks, xq + (t + 1) * n_blocks};
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) panel_dot<4, 2>(u, r, n_blocks, x, y + t * y_stride + r, y_stride);
        for (; r < n_rows; ++r) panel_dot<1, 2>(u, r, n_blocks, x, y + t * y_stride + r, y_stride);
    }
    if (t < n_tokens) {
        const BlockQ8_1* x[1] = {xq + t * n_blocks};
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) panel_dot<4, 1>(u, r, n_blocks, x, y + t * y_stride + r, y_stride);
        for (; r < n_rows; ++r) panel_dot<1, 1>(u, r, n_blocks, x, y + t * y_stride + r, y_stride);
    }
}

}  // namespace

void q4_1_products(const WeightMatrix* const* ws, float* const* ys, int count, const float* x, int64_t n_tokens,
                   ThreadPool& pool, bool avx512) {
    if (count <= 0 || n_tokens <= 0) return;
    const int64_t cols = ws[0]->cols;
    const int64_t n_blocks = cols / QK4_1;
    thread_local std::vector<BlockQ8_1> xq;
    // Only ever grown: a decode step's products alternate between inputs of 18 and 48 blocks
    // (SmolLM2), and a prefill's are thousands; each resize upwards value-initialised the difference.
    if (xq.size() < static_cast<size_t>(n_tokens * n_blocks)) xq.resize(static_cast<size_t>(n_tokens * n_blocks));
    BlockQ8_1* const xb = xq.data();  // the calling thread's: the lambdas run on the pool's threads too
    auto quantize = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) quantize_q8_1(x + t * cols, cols, xb + t * n_blocks);
    };
    if (n_tokens * cols >= 32768) pool.parallel_for(n_tokens, quantize);
    else quantize(0, n_tokens);

    // Pieces of 16 rows: a few tokens reuse them from L1, and the threads share them as they go.
    constexpr int64_t kRowStep = 16;
    static_assert(kRowStep == kInterleavedRows, "a decode step is one group of interleaved rows");
    if (n_tokens <= 2) {
        // Decode: the weights stream from memory once; each block is unpacked where it is used.
        // All the matrices' rows in one parallel step: a small model's decode is made of many
        // products of a few hundred microseconds or less, where each step's wake-up and barrier
        // count.
        constexpr int kMaxProducts = 4;
        if (count > kMaxProducts) {
            for (int i = 0; i < count; i += kMaxProducts)
                q4_1_products(ws + i, ys + i, std::min(kMaxProducts, count - i), x, n_tokens, pool, avx512);
            return;
        }
        int64_t first_step[kMaxProducts + 1] = {0};
        for (int i = 0; i < count; ++i) first_step[i + 1] = first_step[i] + (ws[i]->rows + kRowStep - 1) / kRowStep;
        const int64_t n_steps = first_step[count];
        // One contiguous piece per thread: with pieces of a few groups (a layer's products are a few
        // hundred KB) each thread kept jumping to where the other had streamed, and two threads
        // decoded SmolLM2 about as fast as one (255 against 291 tok/s with this, bench_decode).
        const int64_t grain = (n_steps + pool.size() - 1) / pool.size();
        // The plain AVX-512 kernel's layout of the activations, made once for all threads (the
        // interleaved kernels read the Q8_1 blocks themselves).
        thread_local std::vector<int8_t> dq;
        thread_local std::vector<float> dds;
        q4_1::DecodeActivations da[2] = {};
        bool any_plain = false;
        for (int i = 0; i < count; ++i) any_plain |= ws[i]->layout == RowLayout::Plain;
        if (avx512 && any_plain) {
            dq.resize(size_t(n_tokens * n_blocks) * 64 + 64);
            dds.resize(size_t(n_tokens * n_blocks) * 4);
            auto* aligned = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(dq.data()) + 63) & ~uintptr_t(63));
            for (int64_t t = 0; t < n_tokens; ++t) {
                da[t] = {aligned + t * n_blocks * 64, dds.data() + t * n_blocks * 4, n_blocks};
                q4_1::prepare_decode_avx512(xb + t * n_blocks, n_blocks, aligned + t * n_blocks * 64,
                                            dds.data() + t * n_blocks * 4);
            }
        }
        // Step s: matrix i (advanced from where the last lookup left it; steps go in order) and
        // the first byte of its rows.
        auto step_rows = [&](int64_t s, int& i) {
            while (s >= first_step[i + 1]) ++i;
            const WeightMatrix& w = *ws[i];
            return static_cast<const uint8_t*>(w.data) + (s - first_step[i]) * kRowStep * int64_t(row_bytes(w.type, w.cols));
        };
        pool.parallel_for_dynamic(n_steps, grain, [&](int64_t s0, int64_t s1) {
            // The piece's first two groups whole, before the prefetchers have caught the stream.
            int j = 0;
            for (int64_t s = s0; s < std::min(s1, s0 + 2); ++s) {
                const uint8_t* rows = step_rows(s, j);
                if (ws[j]->layout == RowLayout::Interleaved16)
                    interleaved::request_group(rows, size_t(kRowStep) * row_bytes(ws[j]->type, ws[j]->cols));
            }
            int i = 0;
            for (int64_t s = s0; s < s1; ++s) {
                const uint8_t* base = step_rows(s, i);  // of the step's rows
                const WeightMatrix& w = *ws[i];
                const size_t stride = row_bytes(w.type, w.cols);
                const int64_t r0 = (s - first_step[i]) * kRowStep, r1 = std::min(w.rows, r0 + kRowStep);
                if (w.layout == RowLayout::Interleaved16) {
                    // A step is one group of 16 interleaved rows.
                    const auto group = interleaved_decode_avx512() ? interleaved::q4_1_group_avx512 : interleaved::q4_1_group_avx2;
                    group(base, n_blocks, xb, n_tokens == 2 ? xb + n_blocks : nullptr, ys[i] + r0,
                          n_tokens == 2 ? ys[i] + w.rows + r0 : nullptr);
                    continue;
                }
                for (int64_t t = 0; t < n_tokens; ++t) {
                    float* yt = ys[i] + t * w.rows;
                    if (avx512) {
                        q4_1::decode_rows_avx512(base, stride, int(r1 - r0), da[t], yt + r0);
                        continue;
                    }
                    const BlockQ8_1* xt = xb + t * n_blocks;
                    int64_t r = r0;
                    for (; r + 4 <= r1; r += 4) dot_rows<4>(base + (r - r0) * stride, stride, n_blocks, xt, yt + r);
                    for (; r < r1; ++r) dot_rows<1>(base + (r - r0) * stride, stride, n_blocks, xt, yt + r);
                }
            }
        });
        return;
    }
    // A batch: 16 rows unpacked once, then every token against them from L1.
    for (int i = 0; i < count; ++i) {
        const WeightMatrix& w = *ws[i];
        float* const y = ys[i];
        const size_t stride = row_bytes(w.type, w.cols);
        const auto* base = static_cast<const uint8_t*>(w.data);
        const int64_t n_steps = (w.rows + kRowStep - 1) / kRowStep;
        pool.parallel_for_dynamic(n_steps, 1, [&](int64_t s0, int64_t s1) {
            thread_local UnpackedRows u;
            thread_local std::vector<uint8_t> plain;
            for (int64_t s = s0; s < s1; ++s) {
                const int64_t r0 = s * kRowStep;
                const int n = int(std::min(kRowStep, w.rows - r0));
                const uint8_t* rows = base + r0 * stride;
                if (w.layout == RowLayout::Interleaved16) {
                    plain.resize(size_t(n) * stride);
                    plain_rows(w, r0, n, plain.data());
                    rows = plain.data();
                }
                unpack_rows(rows, stride, n, n_blocks, u);
                if (avx512)
                    q4_1::panel_rows_avx512(q4_1::UnpackedPanel{u.q.data(), u.d.data(), u.m.data(), n_blocks}, n, xb,
                                            n_tokens, y + r0, w.rows);
                else
                    panel_rows(u, n, n_blocks, xb, n_tokens, y + r0, w.rows);
            }
        });
    }
}

void q4_1_product(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, bool avx512) {
    const WeightMatrix* ws[1] = {&w};
    float* ys[1] = {y};
    q4_1_products(ws, ys, 1, x, n_tokens, pool, avx512);
}

}  // namespace kvchat
