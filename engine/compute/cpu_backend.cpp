// The CPU backend: activations in host memory, kernels on the thread pool.
#include "engine/compute/backend.h"
#include "engine/common/file_range_io.h"
#include "engine/common/growable_arena.h"
#include "engine/compute/attention.h"
#include "engine/compute/gelu_table.h"
#include "engine/compute/ggml_expf.h"
#include "engine/compute/interleaved_rows.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"
#include "engine/compute/rope.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/spare_blocks.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <immintrin.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace kvchat {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this many elements threads cost more than they save

// The gated GELU over the shared fp16-grid table (gelu_table.h), eight values a gather.
class GeluTable {
public:
    // gate[i] = gelu(gate[i]) * up[i] for i in [b, e), as ggml_vec_geglu_f32: 0 from -10 down,
    // x * up from 10 up, the table's value (fp16 input rounded to nearest even) times up between.
    void apply(float* gate, const float* up, int64_t b, int64_t e) const {
        const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
        int64_t i = b;
        for (; i + 8 <= e; i += 8) {
            const __m256 x = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
            const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
            const __m256 t = _mm256_mul_ps(_mm256_i32gather_ps(table_, h, 4), u);
            __m256 y = _mm256_blendv_ps(t, _mm256_mul_ps(x, u), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
            y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), y);
            _mm256_storeu_ps(gate + i, y);
        }
        for (; i < e; ++i) {
            const float x = gate[i];
            gate[i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * up[i] : table_[fp32_to_fp16(x)] * up[i];
        }
    }

private:
    const float* table_ = gelu_fp16_table().data();
};

// The CPU's handles, with the interleaved copies they own (one mapping, huge pages where the
// kernel grants them: the decode streams through all of it every token).
class CpuPlacedWeights : public PlacedWeights {
public:
    ~CpuPlacedWeights() override {
        if (memory_) ::munmap(memory_, bytes_);
    }
    uint8_t* reserve(size_t bytes) {
        if (bytes == 0) return nullptr;
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw Error("out of memory placing " + std::to_string(bytes >> 20) + " MiB of weights");
        ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only
        memory_ = p;
        bytes_ = bytes;
        return static_cast<uint8_t*>(p);
    }

private:
    void* memory_ = nullptr;
    size_t bytes_ = 0;
};

const GeluTable& gelu_table() {
    static const GeluTable table;
    return table;
}

// gate = silu(gate) * up over one row, as ggml_vec_swiglu_f32 (AVX-512 build): x / (1 + e^-x)
// with ggml_v_expf in 16-column steps, libm's expf for the columns past the last whole step.
void silu_gated_row(float* gate, const float* up, int64_t cols) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const int64_t vec = cols / 16 * 16;
    for (int64_t i = 0; i < vec; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, ggml_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    for (int64_t i = vec; i < cols; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// Host memory: an arena that grows by mremap and can map a snapshot's pages in place.
class HostKvMemory final : public KvMemory {
public:
    uint8_t* data() const override { return arena_.data(); }
    void resize(size_t n) override { arena_.resize(n); }
    bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) override {
        return arena_.adopt_file(fd, offset, len, capacity);
    }

private:
    GrowableArena arena_;
};

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads) : pool_(n_threads) {}
    ~CpuBackend() override {
        blocks_.release_all([](float* p) { std::free(p); });
    }

    std::string name() const override { return "cpu"; }
    ThreadPool& pool() override { return pool_; }

    Buffer alloc(int64_t rows, int64_t cols) override {
        const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * sizeof(float);
        float* p = blocks_.take(bytes, 64, [](size_t rounded) {
            auto* fresh = static_cast<float*>(std::aligned_alloc(64, rounded));
            if (!fresh) throw Error("out of memory allocating " + std::to_string(rounded) + " bytes of activations");
            return fresh;
        });
        return Buffer{p, rows, cols};
    }
    void free(Buffer& b) override {
        if (!b.data) return;
        blocks_.give_back(b.data);
        b = Buffer{};
    }
    void read(const Buffer& b, int64_t n_rows, float* host) const override {
        std::memcpy(host, b.data, sizeof(float) * n_rows * b.cols);
    }
    void write(Buffer& b, int64_t n_rows, const float* host) override {
        std::memcpy(b.data, host, sizeof(float) * n_rows * b.cols);
    }

    // The weights are read where the model holds them (the mapped file), except the Q4_1, Q5_0 and
    // Q8_0 matrices: those are copied once, interleaved (interleaved_rows.h), which decodes them
    // near the memory's speed instead of the arithmetic's.
    std::unique_ptr<PlacedWeights> place_weights(const WeightSet& set) override {
        auto placed = std::make_unique<CpuPlacedWeights>();
        auto bytes_of = [](const WeightMatrix& w) { return (size_t(w.rows) * row_bytes(w.type, w.cols) + 63) / 64 * 64; };
        size_t total = 0;
        for (const WeightMatrix& w : set.matrices)
            if (can_interleave(w)) total += bytes_of(w);
        uint8_t* copies = placed->reserve(total);
        placed->matrices.reserve(set.matrices.size());
        for (const WeightMatrix& w : set.matrices) {
            if (!can_interleave(w)) {
                placed->matrices.push_back({w, w, MemoryPlace::Host});
                continue;
            }
            interleave_rows(w, copies, pool_);
            placed->matrices.push_back({w, WeightMatrix{w.type, w.rows, w.cols, copies, RowLayout::Interleaved16}, MemoryPlace::Host});
            copies += bytes_of(w);
            // The file's pages of this matrix are read again only for single embedding rows:
            // the process need not hold them (the page cache keeps them for the next load).
            if (set.file_mapped) {
                const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
                const uintptr_t begin = (reinterpret_cast<uintptr_t>(w.data) + page - 1) / page * page;
                const uintptr_t end = (reinterpret_cast<uintptr_t>(w.data) + size_t(w.rows) * row_bytes(w.type, w.cols)) / page * page;
                if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
            }
        }
        placed->vectors.reserve(set.vectors.size());
        for (const NormWeight& v : set.vectors) placed->vectors.push_back({v.data, v.size, MemoryPlace::Host});
        return placed;
    }

    void embed(const PlacedMatrix& table, const int32_t* ids, int64_t n, float scale, Buffer& out) override {
        for (int64_t i = 0; i < n; ++i) {
            float* row = out.data + i * out.cols;
            weight_row(table.host, ids[i], row);  // the file's rows: one row each, as stored
            if (scale != 1.0f)
                for (int64_t j = 0; j < out.cols; ++j) row[j] *= scale;
        }
    }

    void rms_norm(const Buffer& x, int64_t n_rows, const PlacedVector& w, float eps, Buffer& out) override {
        const int64_t groups = n_rows * x.cols / w.size;
        for_range(groups, w.size, [&](int64_t b, int64_t e) {
            for (int64_t g = b; g < e; ++g) {
                const float* src = x.data + g * w.size;
                float* dst = out.data + g * w.size;
                // As ggml: float squares summed in double, then mean, root and reciprocal in float
                // (bit for bit equal to llama.cpp's normed activations).
                double sum = 0.0;
                for (int64_t i = 0; i < w.size; ++i) sum += static_cast<double>(src[i] * src[i]);
                const float mean = static_cast<float>(sum / static_cast<double>(w.size));
                const float s = 1.0f / std::sqrt(mean + eps);
                for (int64_t i = 0; i < w.size; ++i) dst[i] = src[i] * s * w.data[i];
            }
        });
    }

    void matmul(const PlacedMatrix& w, const Buffer& x, int64_t n_rows, Buffer& y) override {
        kvchat::matmul(w.placed, x.data, n_rows, y.data, pool_);
    }
    void matmuls(const Buffer& x, int64_t n_rows, const MatmulOutput* outs, int count) override {
        constexpr int kMax = 8;
        if (count > kMax) throw Error("matmuls: at most " + std::to_string(kMax) + " products of one input");
        const WeightMatrix* ws[kMax];
        float* ys[kMax];
        for (int i = 0; i < count; ++i) ws[i] = &outs[i].w->placed, ys[i] = outs[i].y->data;
        kvchat::matmuls(ws, ys, count, x.data, n_rows, pool_);
    }

    void add(Buffer& x, const Buffer& y, int64_t n_rows) override {
        for_range(n_rows * x.cols, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) x.data[i] += y.data[i];
        });
    }

    void add_bias(Buffer& x, int64_t n_rows, const PlacedVector& b) override {
        for (int64_t r = 0; r < n_rows; ++r) {
            float* row = x.data + r * x.cols;
            for (int64_t i = 0; i < b.size; ++i) row[i] += b.data[i];
        }
    }

    void gated(GatedActivation act, Buffer& gate, const Buffer& up, int64_t n_rows) override {
        if (act == GatedActivation::GeluTanh) {
            for_range(n_rows * gate.cols, 1, [&](int64_t b, int64_t e) { gelu_table().apply(gate.data, up.data, b, e); });
            return;
        }
        for_range(n_rows, gate.cols, [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) silu_gated_row(gate.data + r * gate.cols, up.data + r * gate.cols, gate.cols);
        });
    }

    void softcap(Buffer& x, int64_t n_rows, float cap) override {
        for_range(n_rows * x.cols, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) x.data[i] = cap * std::tanh(x.data[i] / cap);
        });
    }

    void gather_rows(const Buffer& src, const std::vector<int64_t>& src_rows, Buffer& dst) override {
        for (size_t i = 0; i < src_rows.size(); ++i)
            std::memcpy(dst.data + static_cast<int64_t>(i) * dst.cols, src.data + src_rows[i] * src.cols,
                        sizeof(float) * src.cols);
    }

private:
    // Runs fn over [0, n) items of `width` floats each, on the pool when the work is large.
    template <class Fn>
    void for_range(int64_t n, int64_t width, Fn&& fn) {
        if (n * width < kParallelMin || pool_.size() == 1) {
            fn(0, n);
            return;
        }
        pool_.parallel_for(n, fn);
    }

public:
    std::unique_ptr<KvMemory> alloc_kv() override { return std::make_unique<HostKvMemory>(); }

    void copy(const Buffer& src, int64_t n_rows, Buffer& dst) override {
        std::memcpy(dst.data, src.data, sizeof(float) * static_cast<size_t>(n_rows * src.cols));
    }

    void rope(const RopeSpec& spec, Buffer& x, const int32_t* pos, int64_t n, int n_heads, int head_dim) override {
        RopeAngles angles(spec);
        for (int64_t t = 0; t < n; ++t) {
            angles.set_position(pos[t]);
            angles.rotate(x.data + t * x.cols, n_heads, head_dim);
        }
    }

    void round_f16(Buffer& b, int64_t n_rows, float scale) override {
        // F16C eight at a time: the conversion runs over every query of a prefill.
        float* x = b.data;
        const int64_t n = n_rows * b.cols;
        const __m256 vs = _mm256_set1_ps(scale);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT);
            _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
        }
        for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i] * scale));
    }

    void kv_store(KvDtype t, const Buffer& src, int64_t n_rows, void* dst) override {
        kv_store_row(t, src.data, dst, n_rows * src.cols);
    }
    void kv_quantize(const KiviFormat& f, KvDtype t, const void* records, int count, uint8_t* block) override {
        const int64_t n = static_cast<int64_t>(count) * 2 * f.kv_dim;
        const float* rows = static_cast<const float*>(records);
        // The block is quantized from f32 rows (the records', converted when they keep another dtype).
        thread_local std::vector<float> f32;
        if (t != KvDtype::F32) {
            f32.resize(static_cast<size_t>(n));
            kv_load_row(t, records, f32.data(), n);
            rows = f32.data();
        }
        kivi_quantize_block(f, rows, rows + f.kv_dim, 2 * static_cast<int64_t>(f.kv_dim), count, block);
    }
    void attend(const AttentionInput& in, const AttentionShape& shape, Buffer& out) override {
        kvchat::attend(in, shape, out.data, pool_);
    }

    void kv_copy(void* dst, const void* src, size_t bytes) override {
        if (bytes) std::memmove(dst, src, bytes);
    }
    void kv_upload(void* dst, const void* host, size_t bytes) override {
        if (bytes) std::memcpy(dst, host, bytes);
    }
    void kv_download(void* host, const void* src, size_t bytes) override {
        if (bytes) std::memcpy(host, src, bytes);
    }

    int kv_read_file(int fd, int64_t offset, void* dst, size_t n) override { return read_file_range(fd, offset, dst, n); }
    int kv_write_file(int fd, int64_t offset, const void* src, size_t n, size_t* written) override {
        return write_file_range(fd, offset, src, n, written);
    }

private:
    ThreadPool pool_;
    SpareBlocks blocks_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace kvchat
