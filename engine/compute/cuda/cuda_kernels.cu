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

__global__ void rope_kernel(float* x, int64_t row_stride, const float* cs, int64_t n, int n_heads, int head_dim,
                            int half, bool half_split) {
    const int64_t total = n * n_heads * half;
    GRID_STRIDE(e, total) {
        const int i = static_cast<int>(e % half);
        const int h = static_cast<int>((e / half) % n_heads);
        const int64_t t = e / (static_cast<int64_t>(half) * n_heads);
        float* v = x + t * row_stride + static_cast<int64_t>(h) * head_dim;
        const float c = cs[t * 2 * half + i], s = cs[t * 2 * half + half + i];
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

__device__ float column_score(const AttendParams& p, const AttendSegment& s, const Column& col, const float* q,
                              const float* qs, int goff) {
    const int hd = p.head_dim;
    float raw = 0.0f;
    if (!s.is_block) {
        const float* qr = col.exempt && qs ? qs : q;
        const char* k = static_cast<const char*>(s.k) + col.j * s.stride * (p.dtype == 2 ? 4 : 2);
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
    float x = raw * p.scale;
    if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
    return x;
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
    const int group = p.n_head / p.n_head_kv;
    const int goff = (h / group) * hd;
    const int64_t at = t * static_cast<int64_t>(p.n_head) * hd + static_cast<int64_t>(h) * hd;
    const int32_t qp = p.qpos[t];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        q[d] = p.q[at + d];
        qs[d] = p.q_sink ? p.q_sink[at + d] : 0.0f;
    }
    __syncthreads();
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
                for (int c = 0; c < tile; ++c) {
                    const float w = prob[c];
                    if (w == 0.0f) continue;
                    if (!s.is_block) {
                        const char* v = static_cast<const char*>(s.v) + cj[c] * s.stride * (p.dtype == 2 ? 4 : 2);
                        a = fmaf(w, load_stored(p.dtype, v, goff + d), a);
                    } else {
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

}  // namespace

void to_f16(const float* x, f16* y, int64_t n, cudaStream_t stream) {
    to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__half*>(y), n);
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
void rope(float* x, int64_t row_stride, const float* cs, int64_t n, int n_heads, int head_dim, int half, bool half_split,
          cudaStream_t stream) {
    if (half > 0)
        rope_kernel<<<blocks_for(n * n_heads * half), kThreads, 0, stream>>>(x, row_stride, cs, n, n_heads, head_dim, half,
                                                                            half_split);
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
void attend(const AttendParams& p, cudaStream_t stream) {
    if (p.n_q <= 0) return;
    const size_t shared = sizeof(float) * (2 * static_cast<size_t>(p.head_dim) + kAttendThreads) +
                          sizeof(int64_t) * kAttendThreads;
    const dim3 grid(static_cast<unsigned>(p.n_q), static_cast<unsigned>(p.n_head));
    attend_kernel<<<grid, kAttendThreads, shared, stream>>>(p);
}

}  // namespace kvchat::cuda
