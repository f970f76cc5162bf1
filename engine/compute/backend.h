#pragma once
// The backend boundary. Model code describes the math with these operations on Buffers; a
// backend (the CPU one, or the CUDA one in libkvchat_cuda.so) decides where the numbers live and
// how each operation runs. Model code never dereferences a Buffer. Cache layers keep their keys
// and values in memory the backend allocated (KvMemory) and ask it for every operation on them:
// RoPE, the append (with its conversion or quantization) and attention over the layer's slots.
//
// Where memory lives is said by its type, never found out from an address (DEVELOPERS.md, "The
// backend's memory"):
//   - Buffer (activations) and KvMemory (cache layers) are the backend's own memory: host memory
//     on the CPU, device memory on a GPU. Only the backend reads or writes them; the host reaches
//     them through read/write and kv_upload/kv_download.
//   - Weights are the model's in host memory (WeightMatrix: the mapped file; NormWeight,
//     BiasVector: floats) until the model is placed on a backend (place_weights): from then on
//     operations take the backend's handles (PlacedMatrix, PlacedVector), made once.
//   - Everything else an operation takes as a pointer (token ids, positions, a parameter named
//     host) is host memory.
#include "engine/compute/matmul.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvchat {

// Where a backend keeps memory: the CPU's in host memory, a GPU's in its own device memory.
enum class MemoryPlace : uint8_t { Host, Device };

// A row-major matrix of floats owned by a backend, in its memory (see Backend::alloc).
struct Buffer {
    float* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t size() const { return rows * cols; }
};

// A small vector of norm weights in host memory, already in float and with any "+1" convention
// applied.
struct NormWeight {
    const float* data = nullptr;
    int64_t size = 0;
};

// A bias vector in host memory, in float (Qwen 2's q, k and v projections); size 0: none.
struct BiasVector {
    const float* data = nullptr;
    int64_t size = 0;
};

// A model's weights as it hands them to Backend::place_weights, each named by its index: matrices
// as the file holds them (mapped host memory) and small float vectors (norm weights, biases).
struct WeightSet {
    std::vector<WeightMatrix> matrices;
    std::vector<NormWeight> vectors;
    // Every matrix lies in a read-only private mapping of the model file: a backend that copied a
    // matrix may let the mapping's pages go (they come back from the file if read again).
    bool file_mapped = false;
};

// A weight matrix on a backend. `host` is the model's (the mapped file, in its tensor type);
// `placed` is what the backend's products read, in the backend's memory (`place`): the host
// matrix itself on the CPU, the CUDA backend's fp16 copy on the GPU.
struct PlacedMatrix {
    WeightMatrix host{};
    WeightMatrix placed{};
    MemoryPlace place = MemoryPlace::Host;
};

// A norm weight or bias vector on a backend, `size` floats at `data` in its memory (`place`);
// size 0: none.
struct PlacedVector {
    const float* data = nullptr;
    int64_t size = 0;
    MemoryPlace place = MemoryPlace::Host;
};

// What Backend::place_weights made of a WeightSet: one handle per matrix and vector, in the set's
// order. It owns the backend's copies (device memory on a GPU) and frees them when destroyed,
// which may be after the backend that made it is gone; the set's host memory must outlive it.
class PlacedWeights {
public:
    virtual ~PlacedWeights() = default;
    std::vector<PlacedMatrix> matrices;
    std::vector<PlacedVector> vectors;
};

enum class GatedActivation { GeluTanh, Silu };

// One of several products of the same input: its weights and the buffer it writes.
struct MatmulOutput {
    const PlacedMatrix* w;
    Buffer* y;
};

class ThreadPool;
struct AttentionInput;
struct AttentionShape;
struct KiviFormat;
struct RopeSpec;
enum class KvDtype : uint8_t;

// One cache layer's keys and values: growable memory of the backend that computes with it.
class KvMemory {
public:
    virtual ~KvMemory() = default;
    virtual uint8_t* data() const = 0;
    // Grows or shrinks to n bytes, keeping the first min(n, old size) bytes.
    virtual void resize(size_t n) = 0;
    // Replaces the contents with `len` bytes of the open file fd at `offset` (page-aligned),
    // sized to `capacity`, without copying where it can; false when it cannot (nothing changed).
    virtual bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) = 0;
};

class Backend {
public:
    Backend() = default;
    // One backend, one lifetime(): a copy would share it.
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual ThreadPool& pool() = 0;
    // Expires when this backend is destroyed: what was placed on it is then known to be unused.
    std::weak_ptr<const void> lifetime() const { return alive_; }

    // Activation storage: a buffer of rows x cols floats in the backend's memory, reused across calls.
    virtual Buffer alloc(int64_t rows, int64_t cols) = 0;
    virtual void free(Buffer& b) = 0;
    // Copies rows [0, n_rows) of b to host memory, and from host memory into b.
    virtual void read(const Buffer& b, int64_t n_rows, float* host) const = 0;
    virtual void write(Buffer& b, int64_t n_rows, const float* host) = 0;

    // A model's weights on this backend, once per model and backend: the CPU uses the host memory
    // in place, a GPU uploads a copy. Throws kvchat::Error when they do not fit.
    virtual std::unique_ptr<PlacedWeights> place_weights(const WeightSet& set) = 0;

    // out[i] = scale * table[ids[i]] (ids: host memory)
    virtual void embed(const PlacedMatrix& table, const int32_t* ids, int64_t n, float scale, Buffer& out) = 0;
    // RMS-normalises every group of w.size consecutive values of x (its first n_rows rows) and
    // multiplies by w: out may alias x.
    virtual void rms_norm(const Buffer& x, int64_t n_rows, const PlacedVector& w, float eps, Buffer& out) = 0;
    // y = x W^T for the first n_rows rows of x.
    virtual void matmul(const PlacedMatrix& w, const Buffer& x, int64_t n_rows, Buffer& y) = 0;
    // outs[i].y = x outs[i].w^T for i in [0, count): products of one input (q, k and v; gate and
    // up), each the same values as matmul gives; a backend may prepare x once for all of them and
    // run them as one step.
    virtual void matmuls(const Buffer& x, int64_t n_rows, const MatmulOutput* outs, int count) = 0;
    // x += y (first n_rows rows)
    virtual void add(Buffer& x, const Buffer& y, int64_t n_rows) = 0;
    // x[r] += b for the first n_rows rows (b.size == x.cols)
    virtual void add_bias(Buffer& x, int64_t n_rows, const PlacedVector& b) = 0;
    // gate = act(gate) * up (first n_rows rows)
    virtual void gated(GatedActivation act, Buffer& gate, const Buffer& up, int64_t n_rows) = 0;
    // x = cap * tanh(x / cap) (first n_rows rows)
    virtual void softcap(Buffer& x, int64_t n_rows, float cap) = 0;
    // dst row i = src row src_rows[i]
    virtual void gather_rows(const Buffer& src, const std::vector<int64_t>& src_rows, Buffer& dst) = 0;

    // --- cache layers' operations ---
    // Activations are Buffers; a layer's keys and values live in KvMemory of this backend, and
    // `void*` / `uint8_t*` arguments point into such memory (never host memory, except where a
    // parameter is named host). Positions (`pos`, AttentionInput's qpos and SlotView::pos) are
    // host memory.
    virtual std::unique_ptr<KvMemory> alloc_kv() = 0;
    // dst rows [0, n_rows) = src rows [0, n_rows) (equal widths).
    virtual void copy(const Buffer& src, int64_t n_rows, Buffer& dst) = 0;
    // Rotates rows [0, n) of x (n_heads heads of head_dim each) in place, row t at position pos[t].
    virtual void rope(const RopeSpec& spec, Buffer& x, const int32_t* pos, int64_t n, int n_heads, int head_dim) = 0;
    // x = x * scale rounded to the nearest fp16 value, kept as float, for rows [0, n_rows)
    // (llama.cpp's rounding points of its f16 cache).
    virtual void round_f16(Buffer& x, int64_t n_rows, float scale) = 0;
    // The append's conversion: rows [0, n_rows) of src (f32) into `t`, packed row after row at dst.
    virtual void kv_store(KvDtype t, const Buffer& src, int64_t n_rows, void* dst) = 0;
    // The append's quantization: `count` records (a key row then a value row, f.kv_dim values each
    // in `t`, one after the other: a residual's layout) into one KIVI block (kivi_block.h).
    virtual void kv_quantize(const KiviFormat& f, KvDtype t, const void* records, int count, uint8_t* block) = 0;
    // Attention over a layer's slots and quantized blocks (attention.h); out: n_q x (n_head*head_dim).
    // in.q and in.q_sink are the data of this backend's Buffers, the slots' keys and values and the
    // blocks' bytes its KvMemory, the positions host memory.
    virtual void attend(const AttentionInput& in, const AttentionShape& shape, Buffer& out) = 0;
    // Byte moves of KV memory: within it (regions may overlap), and to and from host memory
    // (snapshots, conversions).
    virtual void kv_copy(void* dst, const void* src, size_t bytes) = 0;
    // `rows` rows of `width` bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart),
    // within KV memory, source and destination apart: a chunk's keys into their slots at once.
    virtual void kv_copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, int64_t rows) {
        for (int64_t r = 0; r < rows; ++r)
            kv_copy(static_cast<uint8_t*>(dst) + size_t(r) * dst_pitch, static_cast<const uint8_t*>(src) + size_t(r) * src_pitch,
                    width);
    }
    virtual void kv_upload(void* dst, const void* host, size_t bytes) = 0;
    virtual void kv_download(void* host, const void* src, size_t bytes) = 0;
    // An offload tier's moves between its spill file and KV memory: n bytes of the open file fd at
    // `offset` into dst (bytes past the end of the file read as zero), and n bytes of src into the
    // file at `offset`. They return 0 or an errno value; *written: the bytes written before an
    // error. Called from the tier's prefetch thread too (reads), beside the compute.
    virtual int kv_read_file(int fd, int64_t offset, void* dst, size_t n) = 0;
    virtual int kv_write_file(int fd, int64_t offset, const void* src, size_t n, size_t* written) = 0;

private:
    std::shared_ptr<const void> alive_ = std::make_shared<char>(0);
};

// The CPU backend with n_threads worker threads (<= 0: one per core).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace kvchat
