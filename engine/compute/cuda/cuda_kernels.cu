// The CUDA backend's kernels. They follow the CPU kernels' arithmetic where it is cheap to (the
// same products rounded, the same fused multiply-adds, sums in double where the CPU sums in
// double); reductions over many values (dot products, softmax sums) run in another order, so
// results agree with the CPU's to rounding, not bit for bit.
#include "engine/compute/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

namespace kvchat::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 30) ? (1 << 30) : b));
}

#define GRID_STRIDE(i, n) for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
                               i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float f16_round(float x) { return __half2float(__float2half_rn(x)); }

// fp32 -> bf16 bits as quant_blocks.h's fp32_to_bf16 (round to nearest even, NaN kept quiet).
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Bytes of one stored value (dtype as load_stored's).
__device__ __forceinline__ int stored_bytes(int dtype) { return dtype == 2 ? 4 : 2; }

__device__ __forceinline__ float load_stored(int dtype, const void* p, int64_t i) {
    switch (dtype) {
        case 0: return __half2float(__ushort_as_half(static_cast<const uint16_t*>(p)[i]));
        case 1: return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
        default: return static_cast<const float*>(p)[i];
    }
}

// KIVI code of channel c of a packed row: channel c at bits [c*nbits, (c+1)*nbits).
__device__ __forceinline__ float kivi_code(const uint8_t* row, int c, int nbits) {
    const int bit = c * nbits;
    return static_cast<float>((row[bit >> 3] >> (bit & 7)) & ((1 << nbits) - 1));
}

__global__ void to_f16_kernel(const float* x, __half* y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = __float2half_rn(x[i]);
}

// y[t * rows + r] = W[r] . x[t * cols, (t + 1) * cols) for t < kTok: a warp per row, the inputs
// rounded to fp16 as the batch path's cuBLAS product takes them, products and sums in fp32.
constexpr int kGemvRows = 8;  // warps (rows) a block
template <int kTok>
__global__ void gemv_f16_kernel(const __half* W, const float* x, float* y, int64_t rows, int64_t cols) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kGemvRows + threadIdx.y;
    if (r >= rows) return;
    const __half* w = W + r * cols;
    float acc[kTok];
    for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;
    const int lane = threadIdx.x;
    if (cols % 8 == 0) {
        // 16-byte loads: eight weights a lane a step (rows start 16-byte aligned when cols % 8 == 0).
        for (int64_t c = int64_t(lane) * 8; c < cols; c += 32 * 8) {
            const uint4 raw = *reinterpret_cast<const uint4*>(w + c);
            const __half2* h = reinterpret_cast<const __half2*>(&raw);
            for (int k = 0; k < 4; ++k) {
                const float2 wf = __half22float2(h[k]);
                for (int t = 0; t < kTok; ++t) {
                    const float* xt = x + t * cols + c + 2 * k;
                    acc[t] = fmaf(wf.x, f16_round(xt[0]), acc[t]);
                    acc[t] = fmaf(wf.y, f16_round(xt[1]), acc[t]);
                }
            }
        }
    } else {
        for (int64_t c = lane; c < cols; c += 32) {
            const float wf = __half2float(w[c]);
            for (int t = 0; t < kTok; ++t) acc[t] = fmaf(wf, f16_round(x[t * cols + c]), acc[t]);
        }
    }
    for (int t = 0; t < kTok; ++t) {
        float v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) y[t * rows + r] = v;
    }
}

__global__ void round_f16_kernel(float* x, int64_t n, float scale) {
    GRID_STRIDE(i, n) x[i] = f16_round(__fmul_rn(x[i], scale));
}

__global__ void rms_norm_kernel(const float* x, float* out, int64_t width, const float* w, float eps) {
    __shared__ double part[kThreads];
    const float* src = x + blockIdx.x * width;
    float* dst = out + blockIdx.x * width;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += static_cast<double>(__fmul_rn(src[i], src[i]));
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    const float mean = static_cast<float>(part[0] / static_cast<double>(width));
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = __fmul_rn(__fmul_rn(src[i], scale), w[i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    GRID_STRIDE(i, n) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* b, int64_t n, int64_t width) {
    GRID_STRIDE(i, n) x[i] += b[i % width];
}

__global__ void gelu_gated_kernel(float* gate, const float* up, int64_t n, const float* table) {
    GRID_STRIDE(i, n) {
        const float x = gate[i];
        gate[i] = x <= -10.0f ? 0.0f
                  : x >= 10.0f ? x * up[i]
                               : table[__half_as_ushort(__float2half_rn(x))] * up[i];
    }
}

__global__ void silu_gated_kernel(float* gate, const float* up, int64_t n) {
    GRID_STRIDE(i, n) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
    GRID_STRIDE(i, n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void rope_kernel(float* x, int64_t row_stride, const float* cs, RopeRows rows, int64_t n, int n_heads,
                            int head_dim, int half, bool half_split) {
    const int64_t total = n * n_heads * half;
    GRID_STRIDE(e, total) {
        const int i = static_cast<int>(e % half);
        const int h = static_cast<int>((e / half) % n_heads);
        const int64_t t = e / (static_cast<int64_t>(half) * n_heads);
        float* v = x + t * row_stride + static_cast<int64_t>(h) * head_dim;
        const int64_t row = rows.device ? rows.device[t] : rows.n_inline > 0 ? rows.inline_rows[t] : t;
        const float c = cs[row * 2 * half + i], s = cs[row * 2 * half + half + i];
        const int ia = half_split ? i : 2 * i, ib = half_split ? i + half : 2 * i + 1;
        const float a = v[ia], b = v[ib];
        // One product rounded, the other fused, as rope.cpp.
        v[ia] = fmaf(a, c, -__fmul_rn(b, s));
        v[ib] = fmaf(a, s, __fmul_rn(b, c));
    }
}

__global__ void kv_store_kernel(int dtype, const float* src, void* dst, int64_t n) {
    GRID_STRIDE(i, n) {
        if (dtype == 0)
            static_cast<uint16_t*>(dst)[i] = __half_as_ushort(__float2half_rn(src[i]));
        else if (dtype == 1)
            static_cast<uint16_t*>(dst)[i] = to_bf16_bits(src[i]);
        else
            static_cast<float*>(dst)[i] = src[i];
    }
}

__global__ void kv_load_kernel(int dtype, const void* src, float* dst, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = load_stored(dtype, src, i);
}

// round((x - zero) * inv + 0.5) clamped to the code range, as kivi_block.cpp's pack8_simd.
__device__ __forceinline__ uint32_t kivi_quantize_value(float x, float zero, float inv, int nbits) {
    float c = fmaf(__fsub_rn(x, zero), inv, 0.5f);
    c = fmaxf(c, 0.0f);  // also turns NaN into 0
    c = fminf(c, static_cast<float>((1 << nbits) - 1));
    return static_cast<uint32_t>(c);
}

// One thread block quantizes the whole block record (it is small: group x kv_dim values).
__global__ void kivi_quantize_kernel(KiviLayout f, const float* k, const float* v, int64_t stride, int count,
                                     uint8_t* block) {
    const int D = f.kv_dim, levels = 1 << f.nbits, G = f.value_group, per_byte = 8 / f.nbits;
    const int64_t rb = static_cast<int64_t>(D) * f.nbits / 8;
    float* ks = reinterpret_cast<float*>(block + f.k_scale);
    float* kz = reinterpret_cast<float*>(block + f.k_zero);
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float lo = k[c], hi = k[c];
        for (int j = 1; j < count; ++j) {
            const float x = k[j * stride + c];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        kz[c] = lo;
        ks[c] = __fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(levels - 1));
    }
    float* vs = reinterpret_cast<float*>(block + f.v_scale);
    float* vz = reinterpret_cast<float*>(block + f.v_zero);
    const int ng = D / G;
    for (int e = threadIdx.x; e < count * ng; e += blockDim.x) {
        const int j = e / ng, g = e % ng;
        const float* row = v + j * stride + g * G;
        float lo = row[0], hi = row[0];
        for (int c = 0; c < G; ++c) {
            lo = row[c] < lo ? row[c] : lo;
            hi = row[c] > hi ? row[c] : hi;
        }
        vz[e] = lo;
        vs[e] = __fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(levels - 1));
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < count * rb; e += blockDim.x) {
        const int j = static_cast<int>(e / rb);
        const int byte = static_cast<int>(e % rb);
        uint32_t kb = 0, vb = 0;
        for (int u = 0; u < per_byte; ++u) {
            const int c = byte * per_byte + u;
            const float kinv = ks[c] > 0.0f ? __fdiv_rn(1.0f, ks[c]) : 0.0f;
            kb |= kivi_quantize_value(k[j * stride + c], kz[c], kinv, f.nbits) << (u * f.nbits);
            const float sc = vs[j * ng + c / G];
            const float vinv = sc > 0.0f ? __fdiv_rn(1.0f, sc) : 0.0f;
            vb |= kivi_quantize_value(v[j * stride + c], vz[j * ng + c / G], vinv, f.nbits) << (u * f.nbits);
        }
        block[f.k_codes + j * rb + byte] = static_cast<uint8_t>(kb);
        block[f.v_codes + j * rb + byte] = static_cast<uint8_t>(vb);
    }
}

// ---- attention: one thread block per (query head, query); columns in tiles of blockDim ----

constexpr int kAttendThreads = 128;
constexpr int kMaxChannelsPerThread = 4;  // head_dim <= 512

struct Column {
    bool visible;
    bool exempt;
    int64_t j;
};

__device__ __forceinline__ Column column_at(const AttendParams& p, const AttendSegment& s, int64_t j, int32_t qp) {
    Column c{false, false, j};
    if (j >= s.n) return c;
    const int32_t cp = s.is_block ? s.first_pos + static_cast<int32_t>(j) : s.pos[j];
    c.exempt = !s.is_block && cp < p.sink_end;
    c.visible = cp <= qp && (c.exempt || p.window == 0 || qp - cp < p.window);
    return c;
}

// A raw q·k scaled, and capped where the model caps its scores.
__device__ __forceinline__ float finish_score(const AttendParams& p, float raw) {
    const float x = raw * p.scale;
    return p.softcap > 0.0f ? p.softcap * tanhf(x / p.softcap) : x;
}

__device__ float column_score(const AttendParams& p, const AttendSegment& s, const Column& col, const float* q,
                              const float* qs, int goff) {
    const int hd = p.head_dim;
    float raw = 0.0f;
    if (!s.is_block) {
        const float* qr = col.exempt && qs ? qs : q;
        const char* k = static_cast<const char*>(s.k) + col.j * s.stride * stored_bytes(p.dtype);
        // Unrolled so that a thread has several keys' loads in flight (few warps run this kernel
        // in a decode step, too few to hide a load's latency); the sum's order is unchanged.
#pragma unroll 16
        for (int d = 0; d < hd; ++d) raw = fmaf(qr[d], load_stored(p.dtype, k, goff + d), raw);
    } else {
        const KiviLayout& f = p.kivi;
        const uint8_t* blk = static_cast<const uint8_t*>(s.k);
        const float* ks = reinterpret_cast<const float*>(blk + f.k_scale) + goff;
        const float* kz = reinterpret_cast<const float*>(blk + f.k_zero) + goff;
        const uint8_t* row = blk + f.k_codes + col.j * (static_cast<int64_t>(f.kv_dim) * f.nbits / 8);
        float bias = 0.0f;
        // q·k = (q ⊙ scale)·codes + q·zero, as attention.cpp reads blocks.
        for (int d = 0; d < hd; ++d) {
            raw = fmaf(__fmul_rn(q[d], ks[d]), kivi_code(row, goff + d, f.nbits), raw);
            bias = fmaf(q[d], kz[d], bias);
        }
        raw += bias;
    }
    return finish_score(p, raw);
}

// Query t's head h (and its sink query, or zeros) into shared memory for the whole block; the
// offset of its kv head's channels in a slot.
__device__ int load_query(const AttendParams& p, int64_t t, int h, float* q, float* qs) {
    const int hd = p.head_dim;
    const int64_t at = t * static_cast<int64_t>(p.n_head) * hd + static_cast<int64_t>(h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        q[d] = p.q[at + d];
        qs[d] = p.q_sink ? p.q_sink[at + d] : 0.0f;
    }
    __syncthreads();
    return (h / (p.n_head / p.n_head_kv)) * hd;
}

template <class T>
__device__ T block_reduce(T v, bool is_max, T* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.x) < s)
            shared[threadIdx.x] = is_max ? (shared[threadIdx.x] > shared[threadIdx.x + s] ? shared[threadIdx.x]
                                                                                           : shared[threadIdx.x + s])
                                         : shared[threadIdx.x] + shared[threadIdx.x + s];
        __syncthreads();
    }
    const T r = shared[0];
    __syncthreads();
    return r;
}

__global__ void attend_kernel(AttendParams p) {
    extern __shared__ double smem[];  // double: aligned for the int64 column indices
    const int hd = p.head_dim;
    int64_t* cj = reinterpret_cast<int64_t*>(smem);  // blockDim column indices
    float* q = reinterpret_cast<float*>(cj + blockDim.x);  // hd
    float* qs = q + hd;                                    // hd
    float* prob = qs + hd;                                 // blockDim
    __shared__ double red_d[kAttendThreads];
    __shared__ float red_f[kAttendThreads];

    const int h = blockIdx.y;
    const int64_t t = blockIdx.x;
    const int goff = load_query(p, t, h, q, qs);
    const int64_t at = t * static_cast<int64_t>(p.n_head) * hd + static_cast<int64_t>(h) * hd;
    const int32_t qp = p.qpos[t];
    const float* qsp = p.q_sink ? qs : nullptr;

    // Pass 1: the row's maximum over visible columns.
    float m = -FLT_MAX;
    bool any = false;
    for (int si = 0; si < p.n_segments; ++si) {
        const AttendSegment& s = p.segments[si];
        for (int64_t j = threadIdx.x; j < s.n; j += blockDim.x) {
            const Column col = column_at(p, s, j, qp);
            if (!col.visible) continue;
            m = fmaxf(m, column_score(p, s, col, q, qsp, goff));
            any = true;
        }
    }
    m = block_reduce(m, true, red_f);
    const bool seen = block_reduce(any ? 1.0f : 0.0f, true, red_f) > 0.0f;
    float* out = p.out + at;
    if (!seen) {  // nothing visible: the row contributes nothing
        for (int d = threadIdx.x; d < hd; d += blockDim.x) out[d] = 0.0f;
        return;
    }

    // Pass 2: the sum of exponentials (in double for llama.cpp's f16 path, as the CPU).
    double sum = 0.0;
    for (int si = 0; si < p.n_segments; ++si) {
        const AttendSegment& s = p.segments[si];
        for (int64_t j = threadIdx.x; j < s.n; j += blockDim.x) {
            const Column col = column_at(p, s, j, qp);
            if (col.visible) sum += static_cast<double>(expf(column_score(p, s, col, q, qsp, goff) - m));
        }
    }
    sum = block_reduce(sum, false, red_d);
    const float inv = p.f16_probs ? static_cast<float>(1.0 / sum) : 1.0f / static_cast<float>(sum);

    // Pass 3: P·V, a tile of columns at a time: probabilities in shared memory, channels per thread.
    float acc[kMaxChannelsPerThread] = {};
    for (int si = 0; si < p.n_segments; ++si) {
        const AttendSegment& s = p.segments[si];
        for (int64_t base = 0; base < s.n; base += blockDim.x) {
            const int64_t j = base + threadIdx.x;
            const Column col = column_at(p, s, j, qp);
            float pr = 0.0f;
            if (col.visible) {
                pr = expf(column_score(p, s, col, q, qsp, goff) - m) * inv;
                if (p.f16_probs) pr = f16_round(pr);
            }
            prob[threadIdx.x] = pr;
            cj[threadIdx.x] = j;
            __syncthreads();
            const int tile = static_cast<int>(s.n - base < blockDim.x ? s.n - base : blockDim.x);
            for (int u = 0; u < kMaxChannelsPerThread; ++u) {
                const int d = threadIdx.x + u * blockDim.x;
                if (d >= hd) break;
                float a = acc[u];
                if (!s.is_block) {
                    // Eight columns' values loaded before they are summed (in the same order as one
                    // at a time): the loads overlap instead of each waiting for the last.
                    const int64_t vstep = s.stride * stored_bytes(p.dtype);
                    for (int c0 = 0; c0 < tile; c0 += 8) {
                        float w[8], x[8];
#pragma unroll
                        for (int k = 0; k < 8; ++k) {
                            w[k] = c0 + k < tile ? prob[c0 + k] : 0.0f;
                            x[k] = w[k] != 0.0f
                                       ? load_stored(p.dtype, static_cast<const char*>(s.v) + cj[c0 + k] * vstep, goff + d)
                                       : 0.0f;
                        }
#pragma unroll
                        for (int k = 0; k < 8; ++k)
                            if (w[k] != 0.0f) a = fmaf(w[k], x[k], a);
                    }
                    acc[u] = a;
                    continue;
                }
                for (int c = 0; c < tile; ++c) {
                    const float w = prob[c];
                    if (w == 0.0f) continue;
                    const KiviLayout& f = p.kivi;
                    const uint8_t* blk = static_cast<const uint8_t*>(s.k);
                    const int64_t rb = static_cast<int64_t>(f.kv_dim) * f.nbits / 8;
                    const int ng = f.kv_dim / f.value_group;
                    const int gi = (goff + d) / f.value_group;
                    const float sc = reinterpret_cast<const float*>(blk + f.v_scale)[cj[c] * ng + gi];
                    const float zr = reinterpret_cast<const float*>(blk + f.v_zero)[cj[c] * ng + gi];
                    a = fmaf(w * sc, kivi_code(blk + f.v_codes + cj[c] * rb, goff + d, f.nbits), a);
                    a = fmaf(w, zr, a);
                }
                acc[u] = a;
            }
            __syncthreads();
        }
    }
    for (int u = 0; u < kMaxChannelsPerThread; ++u) {
        const int d = threadIdx.x + u * blockDim.x;
        if (d < hd) out[d] = acc[u];
    }
}


// ---- attention, a few queries over full-precision slots: the columns split between blocks ----
// The kernel above gives each (query, head) one block that walks every column, three times: a
// decode step is then a handful of blocks on a GPU of a hundred processors, each waiting on its
// loads (SmolLM2, 512 tokens: 390 us a layer on an H100). Here the columns are cut into chunks of
// kSplitCols, one block each, in four launches: scores (a warp per column, its lanes across the
// head's dimensions), the row's maximum and sum of exponentials, each chunk's share of P·V, and the
// chunks' shares added. The arithmetic is the kernel above's (scale, softcap, sums of exponentials
// in double, fp16 probabilities where asked); only the order of the sums differs.
constexpr int kSplitCols = 64;
constexpr int kSplitThreads = 128;

// Segment and index of column g of the concatenated slot views.
__device__ __forceinline__ const AttendSegment* split_column(const AttendParams& p, int64_t g, int64_t& j) {
    for (int si = 0; si < p.n_segments; ++si) {
        const AttendSegment& s = p.segments[si];
        if (g < s.n) {
            j = g;
            return &s;
        }
        g -= s.n;
    }
    j = 0;
    return nullptr;
}

__global__ void split_scores_kernel(AttendParams p, int64_t n_cols, float* S, float* chunk_max) {
    __shared__ float q[512], qs[512];
    __shared__ float wmax[kSplitThreads / 32];
    const int64_t r = blockIdx.x;  // query t, head h
    const int64_t t = r / p.n_head;
    const int h = static_cast<int>(r % p.n_head);
    const int hd = p.head_dim;
    const int goff = load_query(p, t, h, q, qs);
    const int32_t qp = p.qpos[t];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kSplitCols;
    const int estep = stored_bytes(p.dtype);
    float m = -INFINITY;
    for (int64_t g = c0 + warp; g < c0 + kSplitCols && g < n_cols; g += kSplitThreads / 32) {
        int64_t j;
        const AttendSegment* sp = split_column(p, g, j);
        float x = -INFINITY;
        if (sp) {
            const Column col = column_at(p, *sp, j, qp);
            if (col.visible) {
                const float* qr = col.exempt && p.q_sink ? qs : q;
                const char* k = static_cast<const char*>(sp->k) + j * sp->stride * estep;
                float acc = 0.0f;
                for (int d = lane; d < hd; d += 32) acc = fmaf(qr[d], load_stored(p.dtype, k, goff + d), acc);
                for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
                x = finish_score(p, acc);
            }
        }
        if (lane == 0) S[r * n_cols + g] = x;
        m = fmaxf(m, x);
    }
    if (lane == 0) wmax[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = -INFINITY;
        for (int w = 0; w < kSplitThreads / 32; ++w) b = fmaxf(b, wmax[w]);
        chunk_max[r * gridDim.y + blockIdx.y] = b;
    }
}

// stats[2r] = the row's maximum (-inf: nothing visible), stats[2r + 1] = 1 / its sum of exponentials.
__global__ void split_stats_kernel(AttendParams p, int64_t n_cols, int n_chunks, const float* S, const float* chunk_max,
                                   float* stats) {
    __shared__ float red_f[256];
    __shared__ double red_d[256];
    const int64_t r = blockIdx.x;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) m = fmaxf(m, chunk_max[r * n_chunks + c]);
    m = block_reduce(m, true, red_f);
    if (m == -INFINITY) {
        if (threadIdx.x == 0) stats[2 * r] = m, stats[2 * r + 1] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t g = threadIdx.x; g < n_cols; g += blockDim.x) {
        const float x = S[r * n_cols + g];
        if (x != -INFINITY) sum += static_cast<double>(expf(x - m));
    }
    sum = block_reduce(sum, false, red_d);
    if (threadIdx.x == 0) {
        stats[2 * r] = m;
        stats[2 * r + 1] = p.f16_probs ? static_cast<float>(1.0 / sum) : 1.0f / static_cast<float>(sum);
    }
}

__global__ void split_values_kernel(AttendParams p, int64_t n_cols, const float* S, const float* stats, float* partial) {
    __shared__ float prob[kSplitCols];
    __shared__ const char* vrow[kSplitCols];
    const int64_t r = blockIdx.x;
    const int h = static_cast<int>(r % p.n_head);
    const int hd = p.head_dim;
    const int goff = (h / (p.n_head / p.n_head_kv)) * hd;
    const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kSplitCols;
    const float m = stats[2 * r], inv = stats[2 * r + 1];
    const int estep = stored_bytes(p.dtype);
    for (int c = threadIdx.x; c < kSplitCols; c += blockDim.x) {
        const int64_t g = c0 + c;
        float pr = 0.0f;
        const char* v = nullptr;
        if (g < n_cols && m != -INFINITY) {
            const float x = S[r * n_cols + g];
            if (x != -INFINITY) {
                pr = expf(x - m) * inv;
                if (p.f16_probs) pr = f16_round(pr);
                int64_t j;
                const AttendSegment* sp = split_column(p, g, j);
                v = static_cast<const char*>(sp->v) + j * sp->stride * estep;
            }
        }
        prob[c] = pr;
        vrow[c] = v;
    }
    __syncthreads();
    float* out = partial + (r * gridDim.y + blockIdx.y) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll 8
        for (int c = 0; c < kSplitCols; ++c)
            if (prob[c] != 0.0f) a = fmaf(prob[c], load_stored(p.dtype, vrow[c], goff + d), a);
        out[d] = a;
    }
}

__global__ void split_sum_kernel(AttendParams p, int n_chunks, const float* partial) {
    const int64_t r = blockIdx.x;
    const int64_t t = r / p.n_head;
    const int h = static_cast<int>(r % p.n_head);
    const int hd = p.head_dim;
    float* out = p.out + t * static_cast<int64_t>(p.n_head) * hd + static_cast<int64_t>(h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int c = 0; c < n_chunks; ++c) a += partial[(r * n_chunks + c) * hd + d];
        out[d] = a;
    }
}

}  // namespace

void to_f16(const float* x, f16* y, int64_t n, cudaStream_t stream) {
    to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__half*>(y), n);
}
bool gemv_f16(const f16* w, const float* x, float* y, int64_t n_tok, int64_t rows, int64_t cols, cudaStream_t stream) {
    const dim3 block(32, kGemvRows);
    const unsigned grid = static_cast<unsigned>((rows + kGemvRows - 1) / kGemvRows);
    const auto* W = reinterpret_cast<const __half*>(w);
    switch (n_tok) {
        case 1: gemv_f16_kernel<1><<<grid, block, 0, stream>>>(W, x, y, rows, cols); return true;
        case 2: gemv_f16_kernel<2><<<grid, block, 0, stream>>>(W, x, y, rows, cols); return true;
        case 3: gemv_f16_kernel<3><<<grid, block, 0, stream>>>(W, x, y, rows, cols); return true;
        case 4: gemv_f16_kernel<4><<<grid, block, 0, stream>>>(W, x, y, rows, cols); return true;
        default: return false;
    }
}
void round_f16(float* x, int64_t n, float scale, cudaStream_t stream) {
    round_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, scale);
}
void rms_norm(const float* x, float* out, int64_t groups, int64_t width, const float* w, float eps, cudaStream_t stream) {
    if (groups > 0) rms_norm_kernel<<<static_cast<unsigned>(groups), kThreads, 0, stream>>>(x, out, width, w, eps);
}
void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
}
void add_bias(float* x, const float* b, int64_t rows, int64_t width, cudaStream_t stream) {
    add_bias_kernel<<<blocks_for(rows * width), kThreads, 0, stream>>>(x, b, rows * width, width);
}
void gelu_gated(float* gate, const float* up, int64_t n, const float* table, cudaStream_t stream) {
    gelu_gated_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, n, table);
}
void silu_gated(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    silu_gated_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, n);
}
void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
    softcap_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, cap);
}
void rope(float* x, int64_t row_stride, const float* cs, const RopeRows& rows, int64_t n, int n_heads, int head_dim,
          int half, bool half_split, cudaStream_t stream) {
    if (half > 0)
        rope_kernel<<<blocks_for(n * n_heads * half), kThreads, 0, stream>>>(x, row_stride, cs, rows, n, n_heads, head_dim,
                                                                            half, half_split);
}
void kv_store(int dtype, const float* src, void* dst, int64_t n, cudaStream_t stream) {
    kv_store_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dtype, src, dst, n);
}
void kv_load(int dtype, const void* src, float* dst, int64_t n, cudaStream_t stream) {
    kv_load_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dtype, src, dst, n);
}
void kivi_quantize(const KiviLayout& f, const float* k, const float* v, int64_t stride, int count, uint8_t* block,
                   cudaStream_t stream) {
    cudaMemsetAsync(block, 0, static_cast<size_t>(f.block_bytes), stream);
    kivi_quantize_kernel<<<1, kThreads, 0, stream>>>(f, k, v, stride, count, block);
}
int64_t attend_split_scratch(const AttendParams& p, int64_t n_cols) {
    const int64_t rows = p.n_q * p.n_head, chunks = (n_cols + kSplitCols - 1) / kSplitCols;
    return rows * n_cols + rows * chunks + 2 * rows + rows * chunks * p.head_dim;
}
void attend_split(const AttendParams& p, int64_t n_cols, float* scratch, cudaStream_t stream) {
    if (p.n_q <= 0 || n_cols <= 0) return;
    const int64_t rows = p.n_q * p.n_head;
    const int chunks = static_cast<int>((n_cols + kSplitCols - 1) / kSplitCols);
    float* S = scratch;
    float* chunk_max = S + rows * n_cols;
    float* stats = chunk_max + rows * chunks;
    float* partial = stats + 2 * rows;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
    split_scores_kernel<<<grid, kSplitThreads, 0, stream>>>(p, n_cols, S, chunk_max);
    split_stats_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(p, n_cols, chunks, S, chunk_max, stats);
    split_values_kernel<<<grid, kSplitThreads, 0, stream>>>(p, n_cols, S, stats, partial);
    split_sum_kernel<<<static_cast<unsigned>(rows), kSplitThreads, 0, stream>>>(p, chunks, partial);
}
void attend(const AttendParams& p, cudaStream_t stream) {
    if (p.n_q <= 0) return;
    const size_t shared = sizeof(float) * (2 * static_cast<size_t>(p.head_dim) + kAttendThreads) +
                          sizeof(int64_t) * kAttendThreads;
    const dim3 grid(static_cast<unsigned>(p.n_q), static_cast<unsigned>(p.n_head));
    attend_kernel<<<grid, kAttendThreads, shared, stream>>>(p);
}

}  // namespace kvchat::cuda
