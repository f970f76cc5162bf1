#pragma once
// The backend boundary. Model code describes the math with these operations on Buffers; a
// backend (the CPU one now, CUDA later) decides where the numbers live and how each operation
// runs. Model code never dereferences a Buffer.
#include "engine/compute/matmul.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvchat {

// A row-major matrix of floats owned by a backend (host memory on the CPU, device memory on a GPU).
struct Buffer {
    float* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t size() const { return rows * cols; }
};

// A small vector of norm weights, already in float and with any "+1" convention applied.
struct NormWeight {
    const float* data = nullptr;
    int64_t size = 0;
};

enum class GatedActivation { GeluTanh, Silu };

class ThreadPool;

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual ThreadPool& pool() = 0;

    // Activation storage: a buffer of rows x cols floats, reused across calls.
    virtual Buffer alloc(int64_t rows, int64_t cols) = 0;
    virtual void free(Buffer& b) = 0;
    // Copies rows [0, n) of b to host memory.
    virtual void read(const Buffer& b, int64_t n_rows, float* host) const = 0;

    // out[i] = scale * table[ids[i]]
    virtual void embed(const WeightMatrix& table, const int32_t* ids, int64_t n, float scale, Buffer& out) = 0;
    // RMS-normalises every group of w.size consecutive values of x (its first n_rows rows) and
    // multiplies by w: out may alias x.
    virtual void rms_norm(const Buffer& x, int64_t n_rows, const NormWeight& w, float eps, Buffer& out) = 0;
    // y = x W^T for the first n_rows rows of x.
    virtual void matmul(const WeightMatrix& w, const Buffer& x, int64_t n_rows, Buffer& y) = 0;
    // x += y (first n_rows rows)
    virtual void add(Buffer& x, const Buffer& y, int64_t n_rows) = 0;
    // gate = act(gate) * up (first n_rows rows)
    virtual void gated(GatedActivation act, Buffer& gate, const Buffer& up, int64_t n_rows) = 0;
    // x = cap * tanh(x / cap) (first n_rows rows)
    virtual void softcap(Buffer& x, int64_t n_rows, float cap) = 0;
    // dst row i = src row src_rows[i]
    virtual void gather_rows(const Buffer& src, const std::vector<int64_t>& src_rows, Buffer& dst) = 0;
};

// The CPU backend with n_threads worker threads (<= 0: one per core).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace kvchat
