// The CUDA backend (libkvchat_cuda.so, loaded by engine/compute/device.cpp).
//
// Memory (backend.h says where each kind lives; nothing here asks the driver about a pointer):
//   - activations (Buffers) and cache layers' memory (KvMemory) are device memory (cudaMalloc).
//     The host reaches them only through read/write and kv_upload/kv_download, which copy.
//   - weights are placed once per model (place_weights): every matrix dequantized to fp16 on the
//     host and uploaded, every norm weight and bias uploaded as floats. The copies belong to the
//     PlacedWeights the model holds, not to a table here looked up by host address.
//   - what an operation takes as a host pointer (token ids, positions, RoPE's angles) is copied
//     to device scratch for the call.
// Operations are queued in order on the backend's one stream and return without waiting for it:
// host data a call was given is consumed before it returns (copies from pageable host memory are
// staged before cudaMemcpyAsync returns) and scratch is freed in stream order. The host waits only
// where it needs the device's results (read, kv_download, the spill file's writes) and where memory
// changes outside the stream (a cache layer's growth). A kernel's failure is therefore reported by
// the next call that waits (CUDA_LAUNCH_BLOCKING=1 pins it to its operation).
//
// Products run in cuBLAS (fp16 inputs, fp32 accumulation and output) as llama.cpp's CUDA build
// does for batches. fp16 rather than f32 halves the device memory (a 7B model fits in 16 GB);
// rather than quantized kernels, it is one code path for every GGUF type, correct first. The GELU
// table and RoPE's angles are the CPU backend's own code (gelu_table.cpp, rope.cpp), computed on
// the host and uploaded.
#include "engine/common/file_range_io.h"
#include "engine/compute/attention.h"
#include "engine/compute/backend.h"
#include "engine/compute/cuda/cublas_library.h"
#include "engine/compute/cuda/cuda_factory.h"
#include "engine/compute/cuda/cuda_kernels.h"
#include "engine/compute/gelu_table.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/rope.h"
#include "engine/compute/spare_blocks.h"
#include "engine/compute/tensor_type.h"
#include "engine/error.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace kvchat {

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear a sticky launch error so the next call reports its own
        throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
    }
}

void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLAS: ") + what + ": " + cuda::CublasLibrary::get().status_string(s));
}

void* device_alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 64));
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw Error(std::string("out of GPU memory allocating ") + std::to_string(bytes) + " bytes of " + what + " (" +
                    cudaGetErrorString(e) + ")");
    }
    return p;
}

// What the backend's caches hold on the GPU, against an optional cap: the test hook
// KVCHAT_CUDA_CACHE_LIMIT (bytes) stands for a GPU that is full.
struct CacheMemoryUse {
    std::atomic<int64_t> bytes{0};
    int64_t limit = 0;  // 0: the GPU's own
};

// Cache memory in device memory. Grows by allocating anew and copying. Out of memory is
// std::bad_alloc, as for host memory, so the chat's fallback to an offloaded cache (Conversation)
// takes over.
class DeviceKvMemory final : public KvMemory {
public:
    explicit DeviceKvMemory(std::shared_ptr<CacheMemoryUse> use) : use_(std::move(use)) {}
    ~DeviceKvMemory() override {
        // The backend's stream may still be reading it (operations do not wait).
        if (data_) {
            cudaDeviceSynchronize();
            cudaFree(data_);
        }
        use_->bytes -= static_cast<int64_t>(size_);
    }
    uint8_t* data() const override { return data_; }
    void resize(size_t n) override {
        if (n == size_) return;
        const int64_t grow = static_cast<int64_t>(n) - static_cast<int64_t>(size_);
        if (grow > 0 && use_->limit > 0 && use_->bytes + grow > use_->limit) throw std::bad_alloc();
        uint8_t* fresh = nullptr;
        if (n) {
            const cudaError_t e = cudaMalloc(&fresh, n);
            if (e == cudaErrorMemoryAllocation) {
                cudaGetLastError();
                throw std::bad_alloc();
            }
            check(e, "allocating cache memory");
        }
        if (data_ && fresh) {
            // The backend's stream may still be writing the old memory (operations do not wait), and
            // the copy below runs on the legacy stream, which that stream does not wait for: wait for
            // the device first. A device-to-device cudaMemcpy may return before it is done: wait for
            // it too before the old memory is freed and the new one used.
            cudaError_t e = cudaDeviceSynchronize();
            if (e == cudaSuccess) e = cudaMemcpy(fresh, data_, std::min(n, size_), cudaMemcpyDeviceToDevice);
            if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
            if (e != cudaSuccess) {
                cudaFree(fresh);
                check(e, "copying a growing cache");
            }
        }
        if (data_) cudaFree(data_);
        data_ = fresh;
        size_ = n;
        use_->bytes += grow;
    }
    // A snapshot's pages cannot be mapped into GPU memory; the caller copies them instead.
    bool adopt_file(int, uint64_t, size_t, size_t) override { return false; }

private:
    std::shared_ptr<CacheMemoryUse> use_;
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// A model's weights in device memory (place_weights). Freed when the model lets go of them, which
// may be after the backend is gone: the memory belongs to the device's primary context, which
// lives as long as the process (and the library is never unloaded).
class DeviceWeights final : public PlacedWeights {
public:
    explicit DeviceWeights(int device) : device_(device) {}
    ~DeviceWeights() override {
        int current = -1;
        const bool restore = cudaGetDevice(&current) == cudaSuccess && current != device_;
        cudaSetDevice(device_);
        cudaDeviceSynchronize();  // the stream may still be reading them (operations do not wait)
        for (void* p : allocs_) cudaFree(p);
        if (restore) cudaSetDevice(current);
        cudaGetLastError();  // at process exit the runtime may already be gone: nothing to report
    }
    DeviceWeights(const DeviceWeights&) = delete;
    DeviceWeights& operator=(const DeviceWeights&) = delete;

    void* alloc(size_t bytes, const std::string& what) {
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 16));
        if (e != cudaSuccess) {
            cudaGetLastError();
            throw Error("out of GPU memory placing the model's weights: " + what + " (" + cudaGetErrorString(e) + ")");
        }
        allocs_.push_back(p);
        return p;
    }

private:
    int device_;
    std::vector<void*> allocs_;
};

class CudaBackend;

// Device scratch for one operation, and device copies of the host data it was given (positions,
// angles, segment tables). Freed in stream order when it goes.
class Staging {
public:
    explicit Staging(cudaStream_t s) : stream_(s) {}
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;
    ~Staging() {
        for (void* p : allocs_) cudaFreeAsync(p, stream_);
        if (!sync_allocs_.empty()) {
            cudaStreamSynchronize(stream_);
            for (void* p : sync_allocs_) cudaFree(p);
        }
    }

    // Fresh device memory for the call.
    void* scratch(size_t bytes) {
        void* d = nullptr;
        cudaError_t e = cudaMallocAsync(&d, std::max<size_t>(bytes, 16), stream_);
        if (e == cudaErrorNotSupported) {  // a device or driver without stream-ordered memory pools
            cudaGetLastError();
            e = cudaMalloc(&d, std::max<size_t>(bytes, 16));
            if (e == cudaSuccess) {
                sync_allocs_.push_back(d);
                return d;
            }
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            throw Error("out of GPU memory for " + std::to_string(bytes) + " bytes of scratch (" + cudaGetErrorString(e) +
                        ")");
        }
        allocs_.push_back(d);
        return d;
    }
    // A device copy of v (host memory; consumed before this returns).
    template <class T>
    T* upload(const std::vector<T>& v) {
        T* d = static_cast<T*>(scratch(sizeof(T) * v.size()));
        if (!v.empty()) check(cudaMemcpyAsync(d, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice, stream_), "upload");
        return d;
    }

private:
    cudaStream_t stream_;
    std::vector<void*> allocs_;
    std::vector<void*> sync_allocs_;  // from cudaMalloc: freed once the stream is idle
};

// Weights made by another backend (the CPU's are host memory) cannot be read here.
void check_placed(MemoryPlace place, const char* what) {
    if (place != MemoryPlace::Device)
        throw Error(std::string("CUDA: ") + what + " were placed on another backend, not this GPU");
}

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, ThreadPool* pool, void (*release_pool)(ThreadPool*))
        : device_(device), pool_(pool), release_pool_(release_pool) {
        check(cudaSetDevice(device_), "selecting the device");
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, device_), "reading the device's properties");
        gpu_name_ = prop.name;
        cache_use_ = std::make_shared<CacheMemoryUse>();
        if (const char* cap = std::getenv("KVCHAT_CUDA_CACHE_LIMIT")) cache_use_->limit = std::atoll(cap);
        if (const char* prof = std::getenv("KVCHAT_CUDA_PROFILE")) profile_ = std::string(prof) == "1";
        profile_last_ = profile_start_ = std::chrono::steady_clock::now();
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
        try {
            check(blas_.create(&cublas_), "creating the cuBLAS handle");
            check(blas_.set_stream(cublas_, stream_), "setting the cuBLAS stream");
            upload_gelu_table();
        } catch (...) {
            destroy();
            throw;
        }
    }
    ~CudaBackend() override {
        print_profile();
        destroy();
        if (release_pool_) release_pool_(pool_);
    }

    std::string name() const override { return "cuda:" + std::to_string(device_) + " (" + gpu_name_ + ")"; }
    ThreadPool& pool() override { return *pool_; }

    Buffer alloc(int64_t rows, int64_t cols) override {
        std::lock_guard lock(mu_);
        select();
        const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * sizeof(float);
        float* p = blocks_.take(bytes, 256, [](size_t rounded) { return static_cast<float*>(device_alloc(rounded, "activations")); });
        return Buffer{p, rows, cols};
    }
    void free(Buffer& b) override {
        if (!b.data) return;
        std::lock_guard lock(mu_);
        blocks_.give_back(b.data);
        b = Buffer{};
    }
    void read(const Buffer& b, int64_t n_rows, float* host) const override {
        if (n_rows <= 0) return;
        std::lock_guard lock(mu_);
        select();
        check(cudaMemcpyAsync(host, b.data, sizeof(float) * static_cast<size_t>(n_rows * b.cols), cudaMemcpyDeviceToHost,
                              stream_),
              "reading a result");
        check(cudaStreamSynchronize(stream_), "reading a result");
        if (profile_) profile("read");
    }
    void write(Buffer& b, int64_t n_rows, const float* host) override {
        if (n_rows <= 0) return;
        std::lock_guard lock(mu_);
        select();
        copy_async(b.data, host, sizeof(float) * static_cast<size_t>(n_rows * b.cols), "writing a buffer", "write");
    }

    // Each matrix dequantized on the host from the mapped file (exactly as the CPU backend reads
    // it), rounded to fp16 and uploaded a chunk of rows at a time; vectors uploaded as they are.
    std::unique_ptr<PlacedWeights> place_weights(const WeightSet& set) override {
        std::lock_guard lock(mu_);
        select();
        auto placed = std::make_unique<DeviceWeights>(device_);
        placed->matrices.reserve(set.matrices.size());
        std::vector<float> f;
        std::vector<uint16_t> half;
        for (const WeightMatrix& w : set.matrices) {
            const size_t rb = row_bytes(w.type, w.cols);
            const size_t values = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols);
            auto* d = static_cast<uint16_t*>(placed->alloc(
                sizeof(uint16_t) * values, "a " + std::to_string(w.rows) + " x " + std::to_string(w.cols) + " matrix"));
            const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, w.cols));
            f.resize(static_cast<size_t>(std::min(chunk, w.rows) * w.cols));
            half.resize(f.size());
            for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
                const int64_t nr = std::min(chunk, w.rows - r0);
                for (int64_t r = 0; r < nr; ++r)
                    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0 + r) * rb,
                                   f.data() + r * w.cols, w.cols);
                for (int64_t i = 0; i < nr * w.cols; ++i) half[static_cast<size_t>(i)] = fp32_to_fp16(f[static_cast<size_t>(i)]);
                // Synchronous: `half` is refilled for the next chunk.
                check(cudaMemcpy(d + r0 * w.cols, half.data(), sizeof(uint16_t) * static_cast<size_t>(nr * w.cols),
                                 cudaMemcpyHostToDevice),
                      "uploading a weight matrix");
            }
            placed->matrices.push_back({w, WeightMatrix{TensorType::F16, w.rows, w.cols, d}, MemoryPlace::Device});
        }
        placed->vectors.reserve(set.vectors.size());
        for (const NormWeight& v : set.vectors) {
            const size_t bytes = sizeof(float) * static_cast<size_t>(v.size);
            auto* d = static_cast<float*>(placed->alloc(bytes, std::to_string(v.size) + " norm weights"));
            check(cudaMemcpy(d, v.data, bytes, cudaMemcpyHostToDevice), "uploading norm weights");
            placed->vectors.push_back({d, v.size, MemoryPlace::Device});
        }
        // cudaMemcpy from pageable memory may return before its last copy lands, on the legacy
        // stream, which the backend's stream does not wait for.
        check(cudaDeviceSynchronize(), "uploading the weights");
        return placed;
    }

    // Rows are dequantized on the host from the model's mapped matrix, exactly as the CPU backend
    // does, and uploaded: a handful of rows per step, cheaper than a table on the GPU (and exact,
    // where the fp16 copy would round the embedding).
    void embed(const PlacedMatrix& table, const int32_t* ids, int64_t n, float scale, Buffer& out) override {
        if (n <= 0) return;
        std::lock_guard lock(mu_);
        select();
        const WeightMatrix& w = table.host;
        const size_t rb = row_bytes(w.type, w.cols);
        thread_local std::vector<float> rows;
        rows.assign(static_cast<size_t>(n * out.cols), 0.0f);
        for (int64_t i = 0; i < n; ++i) {
            float* row = rows.data() + i * out.cols;
            dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(ids[i]) * rb, row, w.cols);
            if (scale != 1.0f)
                for (int64_t j = 0; j < out.cols; ++j) row[j] *= scale;
        }
        copy_async(out.data, rows.data(), sizeof(float) * rows.size(), "uploading embeddings", "embed");
    }

    void rms_norm(const Buffer& x, int64_t n_rows, const PlacedVector& w, float eps, Buffer& out) override {
        check_placed(w.place, "norm weights");
        std::lock_guard lock(mu_);
        select();
        cuda::rms_norm(x.data, out.data, n_rows * x.cols / w.size, w.size, w.data, eps, stream_);
        done("rms_norm");
    }

    // cuBLAS runs each product on the whole device: nothing to share between them but the launch.
    void matmuls(const Buffer& x, int64_t n_rows, const MatmulOutput* outs, int count) override {
        for (int i = 0; i < count; ++i) matmul(*outs[i].w, x, n_rows, *outs[i].y);
    }
    void matmul(const PlacedMatrix& pw, const Buffer& x, int64_t n_rows, Buffer& y) override {
        check_placed(pw.place, "weights");
        const WeightMatrix& w = pw.placed;
        std::lock_guard lock(mu_);
        select();
        if (n_rows <= 0) return;
        // A few tokens (decode): one launch, no scratch; cuBLAS's product costs more on the host
        // than on the GPU there.
        if (cuda::gemv_f16(static_cast<const uint16_t*>(w.data), x.data, y.data, n_rows, w.rows, w.cols, stream_)) {
            done("matrix-vector product");
            return;
        }
        Staging st(stream_);
        auto* x16 = static_cast<uint16_t*>(st.scratch(sizeof(uint16_t) * static_cast<size_t>(n_rows * w.cols)));
        cuda::to_f16(x.data, x16, n_rows * w.cols, stream_);
        const float alpha = 1.0f, beta = 0.0f;
        // Row-major y (n x rows) = x (n x cols) W^T is column-major y^T = W x^T: W's rows are
        // cuBLAS's columns, hence op T on W.
        check(blas_.gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(n_rows),
                           static_cast<int>(w.cols), &alpha, w.data, CUDA_R_16F, static_cast<int>(w.cols), x16, CUDA_R_16F,
                           static_cast<int>(w.cols), &beta, y.data, CUDA_R_32F, static_cast<int>(w.rows),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "matrix product");
        done("matmul");
    }

    void add(Buffer& x, const Buffer& y, int64_t n_rows) override {
        std::lock_guard lock(mu_);
        select();
        cuda::add(x.data, y.data, n_rows * x.cols, stream_);
        done("add");
    }

    void add_bias(Buffer& x, int64_t n_rows, const PlacedVector& b) override {
        if (n_rows <= 0) return;
        check_placed(b.place, "biases");
        std::lock_guard lock(mu_);
        select();
        cuda::add_bias(x.data, b.data, n_rows, b.size, stream_);
        done("add_bias");
    }

    void gated(GatedActivation act, Buffer& gate, const Buffer& up, int64_t n_rows) override {
        std::lock_guard lock(mu_);
        select();
        if (act == GatedActivation::GeluTanh)
            cuda::gelu_gated(gate.data, up.data, n_rows * gate.cols, gelu_table_, stream_);
        else
            cuda::silu_gated(gate.data, up.data, n_rows * gate.cols, stream_);
        done("gated activation");
    }

    void softcap(Buffer& x, int64_t n_rows, float cap) override {
        std::lock_guard lock(mu_);
        select();
        cuda::softcap(x.data, n_rows * x.cols, cap, stream_);
        done("softcap");
    }

    void gather_rows(const Buffer& src, const std::vector<int64_t>& src_rows, Buffer& dst) override {
        std::lock_guard lock(mu_);
        select();
        for (size_t i = 0; i < src_rows.size(); ++i)
            check(cudaMemcpyAsync(dst.data + static_cast<int64_t>(i) * dst.cols, src.data + src_rows[i] * src.cols,
                                  sizeof(float) * static_cast<size_t>(src.cols), cudaMemcpyDefault, stream_),
                  "gathering rows");
        done("gather_rows");
    }

    // --- cache layers' operations ---
    std::unique_ptr<KvMemory> alloc_kv() override { return std::make_unique<DeviceKvMemory>(cache_use_); }

    void copy(const Buffer& src, int64_t n_rows, Buffer& dst) override {
        if (n_rows <= 0) return;
        std::lock_guard lock(mu_);
        select();
        check(cudaMemcpyAsync(dst.data, src.data, sizeof(float) * static_cast<size_t>(n_rows * src.cols), cudaMemcpyDefault,
                              stream_),
              "copying rows");
        done("copy");
    }

    void rope(const RopeSpec& spec, Buffer& x, const int32_t* pos, int64_t n, int n_heads, int head_dim) override {
        if (n <= 0) return;
        std::lock_guard lock(mu_);
        select();
        const size_t half = static_cast<size_t>(spec.dims / 2);
        const bool half_split = spec.style == RopeStyle::HalfSplit;
        Staging st(stream_);
        int32_t pmin = pos[0], pmax = pos[0];
        for (int64_t t = 1; t < n; ++t) pmin = std::min(pmin, pos[t]), pmax = std::max(pmax, pos[t]);
        if (pmin >= 0 && pmax < kRopeTableLimit) {
            // The angles of positions [0, rows) kept on the device per RoPE (a step then uploads at
            // most its positions, and a decode step's go with the launch).
            const float* table = rope_table(spec, pmax);
            cuda::RopeRows rows;
            if (n <= 8) {
                for (int64_t t = 0; t < n; ++t) rows.inline_rows[t] = pos[t];
                rows.n_inline = static_cast<int>(n);
            } else {
                rows.device = st.upload(std::vector<int32_t>(pos, pos + n));
            }
            cuda::rope(x.data, x.cols, table, rows, n, n_heads, head_dim, static_cast<int>(half), half_split, stream_);
            done("rope");
            return;
        }
        // The angles on the host, from the CPU's code (rope_cos_sin): the kernel then rotates bit
        // for bit as rope.cpp. Row t: `half` cosines, then `half` sines.
        std::vector<float> cs(static_cast<size_t>(n) * 2 * half);
        for (int64_t t = 0; t < n; ++t) {
            float* c = cs.data() + static_cast<size_t>(t) * 2 * half;
            rope_cos_sin(spec, pos[t], c, c + half);
        }
        cuda::rope(x.data, x.cols, st.upload(cs), cuda::RopeRows{}, n, n_heads, head_dim, static_cast<int>(half), half_split,
                   stream_);
        done("rope");
    }

    void round_f16(Buffer& x, int64_t n_rows, float scale) override {
        if (n_rows <= 0) return;
        std::lock_guard lock(mu_);
        select();
        cuda::round_f16(x.data, n_rows * x.cols, scale, stream_);
        done("round_f16");
    }

    void kv_store(KvDtype t, const Buffer& src, int64_t n_rows, void* dst) override {
        if (n_rows <= 0) return;
        std::lock_guard lock(mu_);
        select();
        cuda::kv_store(static_cast<int>(t), src.data, dst, n_rows * src.cols, stream_);
        done("kv_store");
    }

    // The block is quantized from f32 rows: records kept in another dtype are converted first, on
    // the device, as the CPU backend converts them on the host.
    void kv_quantize(const KiviFormat& f, KvDtype t, const void* records, int count, uint8_t* block) override {
        if (count <= 0) return;
        std::lock_guard lock(mu_);
        select();
        Staging st(stream_);
        const int64_t n = static_cast<int64_t>(count) * 2 * f.kv_dim;
        const float* rows = static_cast<const float*>(records);
        if (t != KvDtype::F32) {
            auto* f32 = static_cast<float*>(st.scratch(sizeof(float) * static_cast<size_t>(n)));
            cuda::kv_load(static_cast<int>(t), records, f32, n, stream_);
            rows = f32;
        }
        cuda::kivi_quantize(layout(f), rows, rows + f.kv_dim, 2 * static_cast<int64_t>(f.kv_dim), count, block, stream_);
        done("kv_quantize");
    }

    // Byte moves of cache memory. cudaMemcpy leaves overlapping regions undefined, so an
    // overlapping move goes through scratch memory.
    void kv_copy(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0 || dst == src) return;
        std::lock_guard lock(mu_);
        select();
        const auto* s8 = static_cast<const uint8_t*>(src);
        auto* d8 = static_cast<uint8_t*>(dst);
        if (d8 < s8 + bytes && s8 < d8 + bytes) {
            Staging st(stream_);
            void* tmp = st.scratch(bytes);
            check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDefault, stream_), "copying cache memory");
            check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDefault, stream_), "copying cache memory");
        } else {
            copy_async(dst, src, bytes, "copying cache memory", "kv_copy");
        }
    }
    // One 2D copy (a chunk's keys into their slots) instead of a copy a row.
    void kv_copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, int64_t rows) override {
        if (rows <= 0 || width == 0) return;
        if (width > dst_pitch || width > src_pitch) return Backend::kv_copy_rows(dst, dst_pitch, src, src_pitch, width, rows);
        std::lock_guard lock(mu_);
        select();
        check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows), cudaMemcpyDefault, stream_),
              "copying rows of cache memory");
        done("kv_copy_rows");
    }
    void kv_upload(void* dst, const void* host, size_t bytes) override {
        if (bytes == 0) return;
        std::lock_guard lock(mu_);
        select();
        copy_async(dst, host, bytes, "copying into cache memory", "kv_upload");
    }
    void kv_download(void* host, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        std::lock_guard lock(mu_);
        select();
        copy_and_wait(host, src, bytes, "copying out of cache memory", "kv_download");
    }

    // The spill file is read into host memory first, without the lock (the tier's prefetch thread
    // calls this beside the compute), then copied to the device under it; writes the other way.
    int kv_read_file(int fd, int64_t offset, void* dst, size_t n) override {
        if (n == 0) return 0;
        thread_local std::vector<uint8_t> host;
        host.resize(n);
        if (const int err = read_file_range(fd, offset, host.data(), n)) return err;
        std::lock_guard lock(mu_);
        select();
        return copy_or_eio(dst, host.data(), n, cudaMemcpyHostToDevice);
    }
    int kv_write_file(int fd, int64_t offset, const void* src, size_t n, size_t* written) override {
        *written = 0;
        if (n == 0) return 0;
        thread_local std::vector<uint8_t> host;
        host.resize(n);
        {
            std::lock_guard lock(mu_);
            select();
            if (const int err = copy_or_eio(host.data(), src, n, cudaMemcpyDeviceToHost)) return err;
        }
        return write_file_range(fd, offset, host.data(), n, written);
    }

    void attend(const AttentionInput& in, const AttentionShape& shape, Buffer& out) override {
        if (in.n_q <= 0) return;
        // The kernel keeps a query's output channels in registers, four per thread.
        if (shape.head_dim > 512 || shape.head_dim <= 0)
            throw Error("the CUDA attention kernel supports head sizes up to 512, not " + std::to_string(shape.head_dim));
        std::lock_guard lock(mu_);
        select();
        Staging st(stream_);
        // Queries and the output are Buffers, keys, values and blocks KV memory: device memory,
        // read in place. The positions are the cache's host bookkeeping: one upload for all of
        // them, the queries' first, then each slot view's.
        std::vector<int32_t> positions(in.qpos, in.qpos + in.n_q);
        std::vector<size_t> first;  // of each non-empty slot view's positions
        for (const SlotView& sv : in.slots) {
            if (sv.n <= 0) continue;
            first.push_back(positions.size());
            positions.insert(positions.end(), sv.pos, sv.pos + sv.n);
        }
        const int32_t* dpos = st.upload(positions);
        cuda::AttendParams p{};
        p.q = in.q;
        p.q_sink = in.q_sink;
        p.qpos = dpos;
        p.out = out.data;
        p.n_q = in.n_q;
        p.n_head = shape.n_head;
        p.n_head_kv = shape.n_head_kv;
        p.head_dim = shape.head_dim;
        p.scale = shape.scale;
        p.softcap = shape.softcap;
        p.window = in.window;
        p.sink_end = in.sink_end;
        p.dtype = static_cast<int>(in.dtype);
        p.f16_probs = in.f16_probs;
        std::vector<cuda::AttendSegment> segs;
        size_t view = 0;
        for (const SlotView& sv : in.slots) {
            if (sv.n <= 0) continue;
            segs.push_back({sv.k, sv.v, dpos + first[view++], sv.n, sv.stride, 0, 0});
        }
        if (in.kivi) {
            p.kivi = layout(*in.kivi);
            for (const QuantBlockView& b : in.blocks) {
                if (b.count <= 0) continue;
                segs.push_back({b.data, b.data, nullptr, b.count, 0, b.first_pos, 1});
            }
        }
        p.n_segments = static_cast<int>(segs.size());
        p.segments = segs.empty() ? nullptr : st.upload(segs);
        int64_t n_cols = 0;
        for (const cuda::AttendSegment& sg : segs) n_cols += sg.n;
        if (p.n_q <= 4 && in.blocks.empty() && n_cols > 0) {
            // A decode step: its columns spread over the GPU (attend_split).
            auto* scratch = static_cast<float*>(st.scratch(sizeof(float) * size_t(cuda::attend_split_scratch(p, n_cols))));
            cuda::attend_split(p, n_cols, scratch, stream_);
        } else {
            cuda::attend(p, stream_);
        }
        done("attention");
    }

private:
    // Every operation starts with it (under the lock).
    void select() const {
        check(cudaSetDevice(device_), "selecting the device");
        if (profile_) profile_start_ = std::chrono::steady_clock::now();
    }

    // A launch's own errors (bad configuration); what it does on the device is reported by the next
    // call that waits for the stream.
    void done(const char* what) {
        check(cudaGetLastError(), what);
        if (profile_) profile(what);
    }

    // KVCHAT_CUDA_PROFILE=1: every operation waits for the stream and counts from its start to then
    // (the host's part and the device's); the time between one operation's end and the next one's
    // start is the callers' (model, cache and sampling code on the host). A table on stderr when the
    // backend goes. Slower, but says where a step's time goes without a profiler on the machine.
    void profile(const char* what) const {
        cudaStreamSynchronize(stream_);
        const auto now = std::chrono::steady_clock::now();
        ProfileRow& row = profile_rows_[what];
        row.calls += 1;
        row.seconds += std::chrono::duration<double>(now - profile_start_).count();
        ProfileRow& between = profile_rows_["(host, between operations)"];
        between.calls += 1;
        between.seconds += std::chrono::duration<double>(profile_start_ - profile_last_).count();
        profile_last_ = now;
    }
    void print_profile() const {
        if (!profile_ || profile_rows_.empty()) return;
        double total = 0;
        for (const auto& [op, row] : profile_rows_) total += row.seconds;
        std::fprintf(stderr, "CUDA operations (KVCHAT_CUDA_PROFILE): %.1f ms in all\n", total * 1e3);
        std::vector<std::pair<std::string, ProfileRow>> rows(profile_rows_.begin(), profile_rows_.end());
        std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
        for (const auto& [op, row] : rows)
            std::fprintf(stderr, "  %-24s %8lld calls %10.1f ms %8.1f us a call %5.1f%%\n", op.c_str(),
                         static_cast<long long>(row.calls), row.seconds * 1e3, row.seconds * 1e6 / double(row.calls),
                         100.0 * row.seconds / total);
    }

    // A copy queued on the stream. what: the failure's words; op: the operation's name. The
    // caller holds the lock.
    void copy_async(void* dst, const void* src, size_t bytes, const char* what, const char* op) {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), what);
        done(op);
    }
    // The same, finished before it returns: for copies into host memory.
    void copy_and_wait(void* dst, const void* src, size_t bytes, const char* what, const char* op) {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), what);
        check(cudaStreamSynchronize(stream_), op);
        if (profile_) profile(op);
    }

    // The spill file's copies, on the backend's stream and finished before it returns (a plain
    // cudaMemcpy from pageable memory may return before its DMA is done, on the legacy stream,
    // which this stream does not wait for). Failures are EIO. The caller holds the lock.
    int copy_or_eio(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
        if (cudaMemcpyAsync(dst, src, n, kind, stream_) != cudaSuccess || cudaStreamSynchronize(stream_) != cudaSuccess) {
            cudaGetLastError();
            return EIO;
        }
        return 0;
    }

    static cuda::KiviLayout layout(const KiviFormat& f) {
        return {f.nbits,
                f.group,
                f.value_group,
                f.kv_dim,
                static_cast<int64_t>(f.k_codes),
                static_cast<int64_t>(f.k_scale),
                static_cast<int64_t>(f.k_zero),
                static_cast<int64_t>(f.v_codes),
                static_cast<int64_t>(f.v_scale),
                static_cast<int64_t>(f.v_zero),
                static_cast<int64_t>(f.block_bytes)};
    }

    // Positions past this take their angles per call (a table row is dims floats).
    static constexpr int32_t kRopeTableLimit = int32_t{1} << 20;

    // The device table of spec's angles, rows [0, rows) from rope_cos_sin (the CPU's code, so the
    // rotation is rope.cpp's bit for bit), grown to hold position pmax. The caller holds the lock.
    const float* rope_table(const RopeSpec& spec, int32_t pmax) {
        const size_t half = static_cast<size_t>(spec.dims / 2);
        RopeTable* tab = nullptr;
        for (RopeTable& t : rope_tables_)
            if (t.spec.style == spec.style && t.spec.dims == spec.dims && t.spec.base == spec.base &&
                t.spec.linear_scale == spec.linear_scale && t.spec.freq_factors == spec.freq_factors)
                tab = &t;
        if (!tab) {
            rope_tables_.push_back(RopeTable{spec, nullptr, 0});
            tab = &rope_tables_.back();
        }
        if (pmax < tab->rows) return tab->data;
        const int64_t rows = std::min<int64_t>(kRopeTableLimit, std::max<int64_t>({int64_t(pmax) + 1, 2 * tab->rows, 1024}));
        std::vector<float> cs(static_cast<size_t>(rows) * 2 * half);
        for (int64_t p = 0; p < rows; ++p) {
            float* c = cs.data() + static_cast<size_t>(p) * 2 * half;
            rope_cos_sin(spec, p, c, c + half);
        }
        auto* fresh = static_cast<float*>(device_alloc(sizeof(float) * cs.size(), "RoPE's angles"));
        // On the stream, ahead of the rotations that read it (a plain cudaMemcpy from pageable
        // memory may return before its copy lands, on the legacy stream this stream does not wait for).
        check(cudaMemcpyAsync(fresh, cs.data(), sizeof(float) * cs.size(), cudaMemcpyHostToDevice, stream_),
              "uploading RoPE's angles");
        if (tab->data) {
            check(cudaStreamSynchronize(stream_), "replacing RoPE's angles");  // queued rotations may read it
            cudaFree(tab->data);
        }
        tab->data = fresh;
        tab->rows = rows;
        return fresh;
    }

    // The CPU's GELU table itself (gelu_table.h), uploaded once.
    void upload_gelu_table() {
        const std::span<const float, kGeluTableSize> table = gelu_fp16_table();
        check(cudaMalloc(&gelu_table_, table.size_bytes()), "allocating the GELU table");
        check(cudaMemcpy(gelu_table_, table.data(), table.size_bytes(), cudaMemcpyHostToDevice), "uploading the GELU table");
        check(cudaDeviceSynchronize(), "uploading the GELU table");  // landed before the stream's kernels read it
    }

    void destroy() {
        cudaSetDevice(device_);
        if (stream_) cudaStreamSynchronize(stream_);
        blocks_.release_all([](float* p) { cudaFree(p); });
        if (gelu_table_) cudaFree(gelu_table_);
        gelu_table_ = nullptr;
        for (RopeTable& t : rope_tables_) cudaFree(t.data);
        rope_tables_.clear();
        if (cublas_) blas_.destroy(cublas_);
        cublas_ = nullptr;
        if (stream_) cudaStreamDestroy(stream_);
        stream_ = nullptr;
    }

    const cuda::CublasLibrary& blas_ = cuda::CublasLibrary::get();
    int device_;
    std::string gpu_name_;
    ThreadPool* pool_;
    void (*release_pool_)(ThreadPool*);
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    float* gelu_table_ = nullptr;
    struct RopeTable {
        RopeSpec spec;
        float* data;
        int64_t rows;
    };
    std::vector<RopeTable> rope_tables_;  // one per RoPE the models used (Gemma 3 has two)
    std::shared_ptr<CacheMemoryUse> cache_use_;
    // Operations may come from the pool's threads (cache conversions); one at a time.
    mutable std::mutex mu_;
    SpareBlocks blocks_;
    struct ProfileRow {
        int64_t calls = 0;
        double seconds = 0;
    };
    bool profile_ = false;
    mutable std::chrono::steady_clock::time_point profile_last_;  // read() is const and counts too
    mutable std::chrono::steady_clock::time_point profile_start_;
    mutable std::map<std::string, ProfileRow> profile_rows_;
};

void write_error(char* error, size_t size, const std::string& msg) {
    if (!error || size == 0) return;
    const size_t n = std::min(size - 1, msg.size());
    std::memcpy(error, msg.data(), n);
    error[n] = '\0';
}

// Why device `device` cannot be used, or "" when it can.
std::string unusable_reason(int device) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cudaGetErrorString(e);
    }
    if (count == 0) return "no CUDA device found";
    if (device < 0 || device >= count)
        return "there is no CUDA device " + std::to_string(device) + " (this machine has " + std::to_string(count) + ")";
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return "the properties of CUDA device " + std::to_string(device) + " cannot be read";
    }
    if (prop.major < 8)
        return std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
               std::to_string(prop.minor) + "; this build of kvchat needs 8.0 or newer";
    if (!cuda::CublasLibrary::get().ok()) return cuda::CublasLibrary::get().error;
    return {};
}

}  // namespace

}  // namespace kvchat

extern "C" __attribute__((visibility("default"))) kvchat::Backend* kvchat_cuda_backend_create(
    int abi, int device, kvchat::ThreadPool* pool, void (*release_pool)(kvchat::ThreadPool*), char* error,
    size_t error_size) {
    if (abi != KVCHAT_CUDA_ABI) {
        kvchat::write_error(error, error_size,
                            "the CUDA library was built for another version of kvchat (interface " +
                                std::to_string(KVCHAT_CUDA_ABI) + ", kvchat expects " + std::to_string(abi) + ")");
        return nullptr;
    }
    try {
        const std::string why = kvchat::unusable_reason(device);
        if (!why.empty()) {
            kvchat::write_error(error, error_size, why);
            return nullptr;
        }
        return new kvchat::CudaBackend(device, pool, release_pool);
    } catch (const std::exception& e) {
        kvchat::write_error(error, error_size, e.what());
    } catch (...) {
        kvchat::write_error(error, error_size, "unknown error while starting the CUDA backend");
    }
    return nullptr;
}

// The factory's type and the exported function must agree.
static_assert(std::is_same_v<decltype(&kvchat_cuda_backend_create), kvchat_cuda_factory>);
