// AVX-512 kernels of attention over KIVI blocks (attention_kernels.h): the same values as
// attention.cpp's 256-bit loops, bit for bit, with twice the lanes. A score is one 8-lane chain
// over head_dim, so a 512-bit register carries two scores' chains side by side (two rows); an
// output channel is one chain over the columns, so a register carries 16 channels. Called
// only after a run-time CPU check; this file must not instantiate templates that other files
// also instantiate.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/compute/attention_kernels.h"

#include "engine/compute/unroll.h"

#include <immintrin.h>

namespace kvchat::attention_kernels {
namespace {

// attention.cpp's hsum_tree: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline float hsum_tree(__m256 v) {
    __m128 h = _mm_hadd_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_movehdup_ps(h));
}

// Codes as floats: 16 consecutive codes of one row (run: the lanes' dword index and shift from
// byte 0), or 8 of each of two rows (pair: a row's 8 codes, one dword, word or qword, broadcast
// to its 8 lanes, shifted per lane).
template <int NB>
struct CodeLanes {
    __m512i pair_shift, run_idx, run_shift, mask;
    __m512 table;
    CodeLanes() {
        alignas(64) int ps[16], ri[16], rs[16];
        alignas(64) float t[16];
        for (int l = 0; l < 16; ++l) {
            t[l] = static_cast<float>(l % (1 << NB));
            ps[l] = l % 8 * NB % 32;
            ri[l] = l * NB / 32;
            rs[l] = l * NB % 32;
        }
        pair_shift = _mm512_load_si512(ps);
        run_idx = _mm512_load_si512(ri);
        run_shift = _mm512_load_si512(rs);
        mask = _mm512_set1_epi32((1 << NB) - 1);
        table = _mm512_load_ps(t);
    }
    // Shifted codes in each dword's low bits as floats: 4- and 2-bit codes by a permutation of a
    // table of their values (vpermps reads an index's low 4 bits, so the neighbours shifted in
    // above need no mask).
    __m512 to_floats(__m512i v) const {
        if constexpr (NB < 8) return _mm512_permutexvar_ps(v, table);
        else return _mm512_cvtepi32_ps(_mm512_and_si512(v, mask));
    }
    // Channels [c, c + 8) of rows a (lanes 0-7) and b (lanes 8-15); c a multiple of 8.
    __m512 pair(const uint8_t* a, const uint8_t* b, int c) const {
        if constexpr (NB == 8) {
            const __m128i raw = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + c)),
                                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + c)));
            return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(raw));
        } else {
            // Broadcasts, not two rows' bytes loaded into one vector and permuted into the lanes
            // (bench_attention at 4,096 tokens, Zen 4: that took 14% longer at 4 bits, 31% at 2).
            const __m512i w = _mm512_mask_set1_epi32(_mm512_set1_epi32(codes8(a, c)), 0xff00, codes8(b, c));
            return to_floats(_mm512_srlv_epi32(w, pair_shift));
        }
    }
    // Channels [c, c + 16) of one row.
    __m512 run(const uint8_t* row, int c) const {
        const __m128i raw = _mm_maskz_loadu_epi8(__mmask16((1u << (2 * NB)) - 1), row + c * NB / 8);
        return to_floats(_mm512_srlv_epi32(_mm512_permutexvar_epi32(run_idx, _mm512_castsi128_si512(raw)), run_shift));
    }

private:
    // The NB * 8 bits of channels [c, c + 8) (4 or 2 bits a code) as an int.
    static int codes8(const uint8_t* row, int c) {
        if constexpr (NB == 4) {
            int v;
            __builtin_memcpy(&v, row + c / 2, 4);
            return v;
        } else {
            uint16_t v;
            __builtin_memcpy(&v, row + c / 4, 2);
            return v;
        }
    }
};

template <int NB>
const CodeLanes<NB>& lanes() {
    static const CodeLanes<NB> l;
    return l;
}

inline float with_bias(float s, const float* bias, int r) { return bias ? s + bias[r] : s; }

// _mm_hadd_ps in each 128-bit lane: [a0 + a1, a2 + a3, b0 + b1, b2 + b3].
inline __m512 hadd512(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}

// Scores of rows 2p, 2p + 1 for p in [p0, p0 + P) (pairs past the last are computed from the
// last and dropped) x C columns k[0..C) (a column past the last repeats it, its s[j] null): one
// register per row pair and column, lanes 0-7 the first row's chain, 8-15 the second's; the
// column's 8 channels are broadcast to both halves. P x C is at least 8 where it can be, so that
// enough chains run side by side to keep both FMA units busy.
template <int P, int C>
void scores_tile(const float* qp, int pairs, int p0, int hd, const float* const* k, int R, const float* bias,
                 float* const* s, int64_t ldc) {
    static_assert(C == 2 || C % 4 == 0);
    const float* q[P];
    for (int p = 0; p < P; ++p) q[p] = qp + static_cast<int64_t>(p0 + p < pairs ? p0 + p : pairs - 1) * 2 * hd;
    __m512 acc[P][C];
    unroll<P>([&](auto p) { unroll<C>([&](auto j) { acc[p][j] = _mm512_setzero_ps(); }); });
    for (int d = 0; d < hd; d += 8) {
        __m512 x[C];
        unroll<C>([&](auto j) { x[j] = _mm512_broadcast_f32x8(_mm256_loadu_ps(k[j] + d)); });
        unroll<P>([&](auto p) {
            const __m512 qv = _mm512_loadu_ps(q[p] + 2 * d);
            unroll<C>([&](auto j) { acc[p][j] = _mm512_fmadd_ps(qv, x[j], acc[p][j]); });
        });
    }
    // hsum_tree of eight chains at once (four registers): the same additions of the same
    // operands, three levels of 128-bit-lane hadds and a last add of neighbouring quarters.
    alignas(64) float red[16];
    auto put = [&](int r, int j, float v) {
        if (s[j] && r < R) s[j][r * ldc] = with_bias(v, bias, r);
    };
    if constexpr (C == 2) {
        // Two pairs' registers: red[2m], red[2m + 1] row 2(p + m) against columns 0 and 1; red[8 + ...]
        // its next row.
        unroll<(P + 1) / 2>([&](auto h) {
            constexpr int p = 2 * h, q2 = p + 1 < P ? p + 1 : p;
            if (p0 + p >= pairs) return;
            const __m512 h2 = hadd512(hadd512(acc[p][0], acc[p][1]), hadd512(acc[q2][0], acc[q2][1]));
            _mm512_store_ps(red, _mm512_add_ps(h2, _mm512_shuffle_f32x4(h2, h2, _MM_SHUFFLE(2, 3, 0, 1))));
            for (int m = 0; m < 2 && p + m < P && p0 + p + m < pairs; ++m) {
                const int r = 2 * (p0 + p + m);
                for (int j = 0; j < 2; ++j) put(r, j, red[2 * m + j]), put(r + 1, j, red[8 + 2 * m + j]);
            }
        });
    } else {
        // One pair's four columns: red[j] row 2p against column c + j, red[8 + j] its next row.
        unroll<P>([&](auto p) {
            if (p0 + p >= pairs) return;
            unroll<C / 4>([&](auto c4) {
                constexpr int c = 4 * c4;
                const __m512 h2 = hadd512(hadd512(acc[p][c], acc[p][c + 1]), hadd512(acc[p][c + 2], acc[p][c + 3]));
                _mm512_store_ps(red, _mm512_add_ps(h2, _mm512_shuffle_f32x4(h2, h2, _MM_SHUFFLE(2, 3, 0, 1))));
                const int r = 2 * (p0 + p);
                for (int j = 0; j < 4; ++j) put(r, c + j, red[j]), put(r + 1, c + j, red[8 + j]);
            });
        });
    }
}

template <int P>
void scores_columns(const float* qp, int pairs, int p0, int hd, const float* keys, const int* cols, int n, int R,
                    const float* bias, float* S, int64_t ldc) {
    constexpr int C = P >= 4 ? 2 : 8 / P;
    for (int i = 0; i < n; i += C) {
        const float* k[C];
        float* s[C];
        for (int j = 0; j < C; ++j) {
            const bool here = i + j < n;
            k[j] = keys + static_cast<int64_t>(here ? i + j : i) * hd;
            s[j] = here ? S + cols[i + j] : nullptr;
        }
        scores_tile<P, C>(qp, pairs, p0, hd, k, R, bias, s, ldc);
    }
}

// Keys as floats (n x hd, row i for column cols[i]): the rows' q interleaved by pairs (per 8
// channels, 8 of row 2p then 8 of row 2p + 1) into scratch, then up to 8 row pairs at a time run
// over all columns.
void dense_scores(const float* const* q, int R, int hd, const float* bias, const float* keys, const int* cols, int n,
                  float* S, int64_t ldc, float* scratch) {
    const int pairs = (R + 1) / 2;
    float* qp = scratch;
    for (int p = 0; p < pairs; ++p) {
        const float* a = q[2 * p];
        const float* b = 2 * p + 1 < R ? q[2 * p + 1] : a;
        float* out = qp + static_cast<int64_t>(p) * 2 * hd;
        for (int d = 0; d < hd; d += 8) {
            _mm256_storeu_ps(out + 2 * d, _mm256_loadu_ps(a + d));
            _mm256_storeu_ps(out + 2 * d + 8, _mm256_loadu_ps(b + d));
        }
    }
    int p0 = 0;
    for (; p0 + 8 <= pairs; p0 += 8) scores_columns<8>(qp, pairs, p0, hd, keys, cols, n, R, bias, S, ldc);
    const int left = pairs - p0;
    if (left > 4) scores_columns<8>(qp, pairs, p0, hd, keys, cols, n, R, bias, S, ldc);
    else if (left > 2) scores_columns<4>(qp, pairs, p0, hd, keys, cols, n, R, bias, S, ldc);
    else if (left == 2) scores_columns<2>(qp, pairs, p0, hd, keys, cols, n, R, bias, S, ldc);
    else if (left == 1) scores_columns<1>(qp, pairs, p0, hd, keys, cols, n, R, bias, S, ldc);
}

// The block's keys unpacked once (n x hd floats in scratch), then dense_scores.
template <int NB>
void kivi_scores_t(const float* qk, int R, int hd, const float* bias, const uint8_t* const* rows, const int* cols, int n,
                   int goff, float* S, int64_t ldc, float* scratch) {
    const CodeLanes<NB>& L = lanes<NB>();
    float* keys = scratch;
    for (int i = 0; i < n; ++i)
        for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(keys + static_cast<int64_t>(i) * hd + d, L.run(rows[i], goff + d));
    // Row pointers into qk, after the keys (R of them, at most 64 a tile; more in pieces).
    const float* q[64];
    for (int r0 = 0; r0 < R; r0 += 64) {
        const int nr = R - r0 < 64 ? R - r0 : 64;
        for (int r = 0; r < nr; ++r) q[r] = qk + static_cast<int64_t>(r0 + r) * hd;
        dense_scores(q, nr, hd, bias + r0, keys, cols, n, S + r0 * ldc, ldc, keys + static_cast<int64_t>(n) * hd);
    }
}

void kivi_scores(const float* qk, int R, int hd, const float* bias, const uint8_t* const* rows, const int* cols, int n,
                 int nbits, int goff, float* S, int64_t ldc, float* scratch) {
    switch (nbits) {
        case 8: return kivi_scores_t<8>(qk, R, hd, bias, rows, cols, n, goff, S, ldc, scratch);
        case 4: return kivi_scores_t<4>(qk, R, hd, bias, rows, cols, n, goff, S, ldc, scratch);
        default: return kivi_scores_t<2>(qk, R, hd, bias, rows, cols, n, goff, S, ldc, scratch);
    }
}

// A decode step's rows against a block's keys straight from the codes: two columns a register
// (CodeLanes::pair: lanes 0-7 column j's chain, 8-15 column j + 4's), the row's 8 channels
// broadcast to both halves, 8 columns a tile.
template <int NB, int RB>
void kivi_decode_scores_t(const float* qk, int hd, const float* bias, const uint8_t* row0, int64_t stride, int c0, int n,
                          int goff, float* S, int64_t ldc, const uint8_t* ahead0, int64_t ahead_bytes) {
    const CodeLanes<NB>& L = lanes<NB>();
    const int64_t off = int64_t(goff) * NB / 8;
    for (int i = 0; i < n; i += 8) {
        const int nc = n - i < 8 ? n - i : 8;
        const uint8_t* row[8];
        for (int j = 0; j < 8; ++j) row[j] = row0 + (i + (j < nc ? j : nc - 1)) * stride;
        if (ahead0)
            for (int j = 0; j < nc; ++j) request_row(ahead0 + (i + j) * stride + off, ahead_bytes);
        __m512 acc[RB][4];
        for (int r = 0; r < RB; ++r)
            for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            __m512 x[4];
            for (int j = 0; j < 4; ++j) x[j] = L.pair(row[j], row[j + 4], goff + d);
            for (int r = 0; r < RB; ++r) {
                const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qk + r * hd + d));
                for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(qv, x[j], acc[r][j]);
            }
        }
        // As scores_tile's reduction: lane j of quarter 0 the tree of column j's chain, of
        // quarter 2 column j + 4's; gathered into lanes 0-7.
        const __m512i gather = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0);
        for (int r = 0; r < RB; ++r) {
            const __m512 h2 = hadd512(hadd512(acc[r][0], acc[r][1]), hadd512(acc[r][2], acc[r][3]));
            __m512 red = _mm512_add_ps(h2, _mm512_shuffle_f32x4(h2, h2, _MM_SHUFFLE(2, 3, 0, 1)));
            red = _mm512_add_ps(_mm512_permutexvar_ps(gather, red), _mm512_set1_ps(bias[r]));
            _mm256_mask_storeu_ps(S + r * ldc + c0 + i, __mmask8((1u << nc) - 1), _mm512_castps512_ps256(red));
        }
    }
}

template <int NB>
void kivi_decode_scores_nb(const float* qk, int R, int hd, const float* bias, const uint8_t* row0, int64_t stride, int c0,
                           int n, int goff, float* S, int64_t ldc, const uint8_t* ahead0, int64_t ahead_bytes) {
    switch (R) {
        case 4: return kivi_decode_scores_t<NB, 4>(qk, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
        case 3: return kivi_decode_scores_t<NB, 3>(qk, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
        case 2: return kivi_decode_scores_t<NB, 2>(qk, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
        default: return kivi_decode_scores_t<NB, 1>(qk, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
    }
}

void kivi_decode_scores(const float* qk, int R, int hd, const float* bias, const uint8_t* row0, int64_t stride, int c0,
                        int n, int nbits, int goff, float* S, int64_t ldc, const uint8_t* ahead0, int64_t ahead_bytes) {
    switch (nbits) {
        case 8: return kivi_decode_scores_nb<8>(qk, R, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
        case 4: return kivi_decode_scores_nb<4>(qk, R, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
        default: return kivi_decode_scores_nb<2>(qk, R, hd, bias, row0, stride, c0, n, goff, S, ldc, ahead0, ahead_bytes);
    }
}

// A decode step's rows over up to 64 channels of a block in one pass, straight from the
// probabilities: per column in order, each row's p times the column's value scales (the same
// 128-bit product as the separate pass it replaces), p·scale·code into 16-channel chains and p·zero
// into the row's zero sums.
template <int NB, int RB, int NV, bool One>
void kivi_decode_values_t(const DecodeValues& a) {
    const CodeLanes<NB>& L = lanes<NB>();
    const __mmask8 groups = __mmask8((1u << a.nk) - 1);
    __m512 acc[RB][NV];
    __m128 zs[RB];
    unroll<RB>([&](auto i) {
        unroll<NV>([&](auto v) { acc[i][v] = _mm512_loadu_ps(a.o[i] + a.d0 + 16 * v); });
        zs[i] = _mm_maskz_loadu_ps(groups, a.zsum + i * a.nk);
    });
    // Lane g of a row's products for each 16 channels (their value group); a broadcast when one
    // group covers them all (One).
    __m512i g[NV];
    unroll<NV>([&](auto v) { g[v] = _mm512_set1_epi32((a.d0 + 16 * v) / a.vg - a.k0); });
    // (Locals, so that the loop does not reload them after the stores.)
    const float* sr = a.S + a.c0;
    const int64_t ldc = a.ldc, stride = a.stride, per = a.per;
    const int n = a.n, off = a.goff + a.d0;
    const uint8_t* row = a.row0;
    const float* vs = a.vs0;
    const float* vz = a.vz0;
    const uint8_t* ahead = a.ahead0;
    const int64_t ahead_off = int64_t(off) * NB / 8, ahead_bytes = int64_t(16 * NV) * NB / 8;
    for (int c = 0; c < n; ++c, row += stride, vs += per, vz += per) {
        if (ahead) request_row(ahead + ahead_off, ahead_bytes), ahead += stride;
        __m512 x[NV];
        unroll<NV>([&](auto v) { x[v] = L.run(row, off + 16 * v); });
        const __m128 s4 = One ? _mm_load_ss(vs) : _mm_maskz_loadu_ps(groups, vs);
        const __m128 z4 = One ? _mm_load_ss(vz) : _mm_maskz_loadu_ps(groups, vz);
        unroll<RB>([&](auto i) {
            const __m128 p = _mm_broadcast_ss(sr + i * ldc + c);
            const __m128 w = _mm_mul_ps(p, s4);
            zs[i] = _mm_fmadd_ps(p, z4, zs[i]);
            unroll<NV>([&](auto v) {
                const __m512 wv = One ? _mm512_broadcastss_ps(w) : _mm512_permutexvar_ps(g[v], _mm512_castps128_ps512(w));
                acc[i][v] = _mm512_fmadd_ps(wv, x[v], acc[i][v]);
            });
        });
    }
    unroll<RB>([&](auto i) {
        unroll<NV>([&](auto v) { _mm512_storeu_ps(a.o[i] + a.d0 + 16 * v, acc[i][v]); });
        _mm_mask_storeu_ps(a.zsum + i * a.nk, groups, zs[i]);
    });
}

template <int NB, int RB>
void kivi_decode_values_r(const DecodeValues& a) {
    const bool one = a.nk == 1;
    switch ((a.d1 - a.d0) / 16) {
        case 4: return one ? kivi_decode_values_t<NB, RB, 4, true>(a) : kivi_decode_values_t<NB, RB, 4, false>(a);
        case 3: return one ? kivi_decode_values_t<NB, RB, 3, true>(a) : kivi_decode_values_t<NB, RB, 3, false>(a);
        case 2: return one ? kivi_decode_values_t<NB, RB, 2, true>(a) : kivi_decode_values_t<NB, RB, 2, false>(a);
        default: return one ? kivi_decode_values_t<NB, RB, 1, true>(a) : kivi_decode_values_t<NB, RB, 1, false>(a);
    }
}

template <int NB>
void kivi_decode_values_nb(const DecodeValues& a) {
    switch (a.R) {
        case 4: return kivi_decode_values_r<NB, 4>(a);
        case 3: return kivi_decode_values_r<NB, 3>(a);
        case 2: return kivi_decode_values_r<NB, 2>(a);
        default: return kivi_decode_values_r<NB, 1>(a);
    }
}

void kivi_decode_values(const DecodeValues& a) {
    switch (a.nbits) {
        case 8: return kivi_decode_values_nb<8>(a);
        case 4: return kivi_decode_values_nb<4>(a);
        default: return kivi_decode_values_nb<2>(a);
    }
}

// Rows [r, r + RB) over the columns for channels [d, d + 16 * NV); x(a, v): column a's channels
// [d + 16 v, d + 16 v + 16) as floats.
template <int RB, int NV, class X>
void values_tile(const float* ps, int R, int nk, int r, const int* g, const X& x, int n, int d, float* const* o) {
    __m512 acc[RB][NV];
    unroll<RB>([&](auto i) { unroll<NV>([&](auto v) { acc[i][v] = _mm512_loadu_ps(o[r + i] + d + 16 * v); }); });
    for (int a = 0; a < n; ++a) {
        __m512 xv[NV];
        unroll<NV>([&](auto v) { xv[v] = x(a, v); });
        const float* p = ps + (static_cast<int64_t>(a) * R + r) * nk;
        unroll<RB>([&](auto i) {
            unroll<NV>([&](auto v) { acc[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * nk + g[v]]), xv[v], acc[i][v]); });
        });
    }
    unroll<RB>([&](auto i) { unroll<NV>([&](auto v) { _mm512_storeu_ps(o[r + i] + d + 16 * v, acc[i][v]); }); });
}

template <int NV, class X>
void values_rows(const float* ps, int R, int nk, const int* g, const X& x, int n, int d, float* const* o) {
    int r = 0;
    // (Eight rows of four vectors would be more accumulators than there are registers; four
    // vectors come only with a decode step's few rows.)
    if constexpr (NV <= 2)
        for (; r + 8 <= R; r += 8) values_tile<8, NV>(ps, R, nk, r, g, x, n, d, o);
    for (; r + 4 <= R; r += 4) values_tile<4, NV>(ps, R, nk, r, g, x, n, d, o);
    // The last rows in one tile (a decode step's three rows a kv head): their chains side by side
    // instead of one row's two at a time, which waited on the FMA's latency.
    switch (R - r) {
        case 3: values_tile<3, NV>(ps, R, nk, r, g, x, n, d, o); break;
        case 2: values_tile<2, NV>(ps, R, nk, r, g, x, n, d, o); break;
        case 1: values_tile<1, NV>(ps, R, nk, r, g, x, n, d, o); break;
        default: break;
    }
}

// Values already floats, per column 16 * NV of them.
template <int NV>
void float_values(const float* ps, int R, int nk, const int* g, const float* x, int n, int d, float* const* o) {
    values_rows<NV>(ps, R, nk, g, [x](int a, int v) { return _mm512_loadu_ps(x + (a * NV + v) * 16); }, n, d, o);
}

void dense_values(const float* ps, int R, int nk, const int* g, const float* x, int n, int d, int nv, float* const* o) {
    if (nv == 2) float_values<2>(ps, R, nk, g, x, n, d, o);
    else float_values<1>(ps, R, nk, g, x, n, d, o);
}

// Per 32 channels, the block's values are unpacked once (n x 32 floats in scratch) for all rows.
// Up to 4 rows (a decode step's, one tile) over up to 64 channels read the codes directly instead,
// unpacked in registers: the scratch's store and load cost more than the one tile shares
// (bench_attention quantized:4, 9:3:64, 2,048 tokens from memory, Zen 5: 213 -> 200 us with 1
// thread, 111 -> 96 with 2); over more channels those passes re-read each row from memory
// (4:1:256: 232 -> 245 us).
template <int NB>
void kivi_values_t(const float* ps, int R, int nk, int k0, int vg, const uint8_t* const* rows, int n, int goff, int d0,
                   int d1, float* const* o, float* scratch) {
    const CodeLanes<NB>& L = lanes<NB>();
    const bool direct = R <= 4 && d1 - d0 <= 64;
    // Channels [d, d + 16 NV) of every row against the block's columns.
    auto pass = [&]<int NV>(int d) {
        int g[NV];
        for (int v = 0; v < NV; ++v) g[v] = (d + 16 * v) / vg - k0;
        if (direct) {
            values_rows<NV>(ps, R, nk, g, [&](int a, int v) { return L.run(rows[a], goff + d + 16 * v); }, n, d, o);
            return;
        }
        if constexpr (NV <= 2) {
            for (int a = 0; a < n; ++a)
                for (int v = 0; v < NV; ++v) _mm512_storeu_ps(scratch + (a * NV + v) * 16, L.run(rows[a], goff + d + 16 * v));
            float_values<NV>(ps, R, nk, g, scratch, n, d, o);
        }
    };
    int d = d0;
    // A decode step's rows over 64 channels in one pass: each column's codes read once, 16
    // chains for 4 rows.
    if (direct)
        for (; d + 64 <= d1; d += 64) pass.template operator()<4>(d);
    for (; d + 32 <= d1; d += 32) pass.template operator()<2>(d);
    for (; d < d1; d += 16) pass.template operator()<1>(d);
}

void kivi_values(const float* ps, int R, int nk, int k0, int vg, const uint8_t* const* rows, int n, int nbits, int goff,
                 int d0, int d1, float* const* o, float* scratch) {
    switch (nbits) {
        case 8: return kivi_values_t<8>(ps, R, nk, k0, vg, rows, n, goff, d0, d1, o, scratch);
        case 4: return kivi_values_t<4>(ps, R, nk, k0, vg, rows, n, goff, d0, d1, o, scratch);
        default: return kivi_values_t<2>(ps, R, nk, k0, vg, rows, n, goff, d0, d1, o, scratch);
    }
}

}  // namespace

const KiviKernels& avx512_kivi_kernels() {
    static const KiviKernels k{kivi_scores, kivi_values, dense_scores, dense_values, kivi_decode_scores, kivi_decode_values};
    return k;
}

}  // namespace kvchat::attention_kernels
