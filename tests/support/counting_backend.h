#pragma once
// A backend that forwards to the CPU one and counts its calls, with its KV memory counted against
// an optional cap: a stand-in for a GPU backend (every cache operation goes through it) and, with
// the cap, for a GPU that is full (the CUDA backend's KVCHAT_CUDA_CACHE_LIMIT). The same cache
// code asks every backend for the same KV memory, so the peak measured here is the peak a GPU
// backend's caches take for the same work.
#include "engine/compute/backend.h"
#include "engine/compute/thread_pool.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace kvchat::test {

// What a backend's KV memory holds, against a cap (0: none). Shared with every KvMemory it made,
// which may outlive the backend's use of it.
struct KvUse {
    std::atomic<int64_t> bytes{0}, peak{0};
    std::atomic<int64_t> cap{0};
    // Growths allowed before every further one fails (-1: no such limit); `grows` counts them all.
    std::atomic<int64_t> grows_left{-1}, grows{0};
};

// KV memory of the CPU backend counted against KvUse: growing past the cap is std::bad_alloc with
// the contents kept, as for a GPU's memory.
class CappedKvMemory final : public KvMemory {
public:
    CappedKvMemory(std::unique_ptr<KvMemory> inner, std::shared_ptr<KvUse> use)
        : inner_(std::move(inner)), use_(std::move(use)) {}
    ~CappedKvMemory() override { use_->bytes -= static_cast<int64_t>(size_); }
    uint8_t* data() const override { return inner_->data(); }
    void resize(size_t n) override {
        const int64_t grow = static_cast<int64_t>(n) - static_cast<int64_t>(size_);
        if (grow > 0 && !may_grow(grow)) throw std::bad_alloc();
        inner_->resize(n);
        account(n);
    }
    bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) override {
        const int64_t grow = static_cast<int64_t>(capacity) - static_cast<int64_t>(size_);
        if (grow > 0 && !may_grow(grow)) return false;
        if (!inner_->adopt_file(fd, offset, len, capacity)) return false;
        account(capacity);
        return true;
    }

private:
    bool may_grow(int64_t grow) {
        ++use_->grows;
        if (use_->cap > 0 && use_->bytes + grow > use_->cap) return false;
        for (int64_t left = use_->grows_left; left >= 0;)
            if (left == 0 || use_->grows_left.compare_exchange_weak(left, left - 1)) return left > 0;
        return true;
    }
    void account(size_t n) {
        use_->bytes += static_cast<int64_t>(n) - static_cast<int64_t>(size_);
        size_ = n;
        for (int64_t b = use_->bytes, p = use_->peak; b > p && !use_->peak.compare_exchange_weak(p, b);) {
        }
    }
    std::unique_ptr<KvMemory> inner_;
    std::shared_ptr<KvUse> use_;
    size_t size_ = 0;
};

class CountingBackend final : public Backend {
public:
    explicit CountingBackend(int threads) : cpu_(make_cpu_backend(threads)) {}
    // Read once the work is done: a conversion runs layers' operations on several threads.
    std::map<std::string, int> calls;

    std::string name() const override { return "counting"; }
    ThreadPool& pool() override { return cpu_->pool(); }
    Buffer alloc(int64_t rows, int64_t cols) override { return cpu_->alloc(rows, cols); }
    void free(Buffer& b) override { cpu_->free(b); }
    void read(const Buffer& b, int64_t n_rows, float* host) const override { cpu_->read(b, n_rows, host); }
    void write(Buffer& b, int64_t n_rows, const float* host) override { cpu_->write(b, n_rows, host); }
    std::unique_ptr<PlacedWeights> place_weights(const WeightSet& set) override {
        tally("place_weights");
        return cpu_->place_weights(set);
    }
    void embed(const PlacedMatrix& t, const int32_t* ids, int64_t n, float scale, Buffer& out) override {
        cpu_->embed(t, ids, n, scale, out);
    }
    void rms_norm(const Buffer& x, int64_t n, const PlacedVector& w, float eps, Buffer& out) override {
        cpu_->rms_norm(x, n, w, eps, out);
    }
    void matmul(const PlacedMatrix& w, const Buffer& x, int64_t n, Buffer& y) override {
        cpu_->matmul(w, x, n, y);
    }
    void matmuls(const Buffer& x, int64_t n, const MatmulOutput* outs, int count) override {
        cpu_->matmuls(x, n, outs, count);
    }
    void add(Buffer& x, const Buffer& y, int64_t n) override { cpu_->add(x, y, n); }
    void add_bias(Buffer& x, int64_t n, const PlacedVector& b) override { cpu_->add_bias(x, n, b); }
    void gated(GatedActivation a, Buffer& g, const Buffer& u, int64_t n) override {
        cpu_->gated(a, g, u, n);
    }
    void softcap(Buffer& x, int64_t n, float cap) override { cpu_->softcap(x, n, cap); }
    void gather_rows(const Buffer& src, const std::vector<int64_t>& rows, Buffer& dst) override {
        cpu_->gather_rows(src, rows, dst);
    }

    std::shared_ptr<KvUse> kv_use = std::make_shared<KvUse>();
    // Called from the tier's prefetch thread too (its second fast buffer): counted apart.
    std::atomic<int> kv_allocs{0};
    std::unique_ptr<KvMemory> alloc_kv() override {
        ++kv_allocs;
        return std::make_unique<CappedKvMemory>(cpu_->alloc_kv(), kv_use);
    }
    void copy(const Buffer& src, int64_t n, Buffer& dst) override {
        tally("copy");
        cpu_->copy(src, n, dst);
    }
    void rope(const RopeSpec& s, Buffer& x, const int32_t* pos, int64_t n, int heads, int hd) override {
        tally("rope");
        cpu_->rope(s, x, pos, n, heads, hd);
    }
    void round_f16(Buffer& x, int64_t n, float scale) override {
        tally("round_f16");
        cpu_->round_f16(x, n, scale);
    }
    void kv_store(KvDtype t, const Buffer& src, int64_t n, void* dst) override {
        tally("kv_store");
        cpu_->kv_store(t, src, n, dst);
    }
    void kv_quantize(const KiviFormat& f, KvDtype t, const void* rec, int count, uint8_t* block) override {
        tally("kv_quantize");
        cpu_->kv_quantize(f, t, rec, count, block);
    }
    void attend(const AttentionInput& in, const AttentionShape& shape, Buffer& out) override {
        tally("attend");
        cpu_->attend(in, shape, out);
    }
    void kv_copy(void* dst, const void* src, size_t n) override {
        tally("kv_copy");
        cpu_->kv_copy(dst, src, n);
    }
    void kv_upload(void* dst, const void* host, size_t n) override {
        tally("kv_upload");
        cpu_->kv_upload(dst, host, n);
    }
    void kv_download(void* host, const void* src, size_t n) override {
        tally("kv_download");
        cpu_->kv_download(host, src, n);
    }
    // Called from the tier's prefetch thread too.
    int kv_read_file(int fd, int64_t offset, void* dst, size_t n) override {
        tally("kv_read_file");
        return cpu_->kv_read_file(fd, offset, dst, n);
    }
    int kv_write_file(int fd, int64_t offset, const void* src, size_t n, size_t* written) override {
        tally("kv_write_file");
        return cpu_->kv_write_file(fd, offset, src, n, written);
    }
    // While the tier's prefetch thread may still read.
    int file_reads() {
        std::lock_guard lock(mu_);
        return calls["kv_read_file"];
    }

private:
    void tally(const char* op) {
        std::lock_guard lock(mu_);
        ++calls[op];
    }

    std::unique_ptr<Backend> cpu_;
    std::mutex mu_;  // over calls
};

}  // namespace kvchat::test
