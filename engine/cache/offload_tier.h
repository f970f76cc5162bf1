#pragma once
// The slow tier of offloaded caches on the CPU: a spill file on disk (one per cache, removed
// when the cache is dropped) holding every offloaded layer's bytes, and two fast buffers. While
// layer i computes in one buffer, a prefetch thread reads the next layer into the other; after
// attention only the bytes the layer changed are written back. The fast buffers are KV memory of
// the backend that computes with them, and the backend moves the bytes between them and the file
// (a GPU backend stages them through pinned memory), so the layer computes on them in place.
#include "engine/compute/backend.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvchat {

struct TierTraffic {
    int64_t in_step = 0, out_step = 0;    // bytes read / written by the layer's last use
    int64_t in_total = 0, out_total = 0;
    double stall_ms = 0.0;                // waiting for reads that prefetch had not finished
};

class OffloadTier {
public:
    // Creates the spill file in `dir` (empty: $TMPDIR, else /tmp); throws kvchat::Error naming
    // the directory and the reason when it cannot. backend: the one the layers compute with, which
    // allocates the fast buffers and must outlive the tier. (No backend of the tier's own: its
    // buffers would be another backend's memory than the one attending over them.)
    OffloadTier(const std::string& dir, int n_layers, Backend& backend);
    ~OffloadTier();
    OffloadTier(const OffloadTier&) = delete;
    OffloadTier& operator=(const OffloadTier&) = delete;

    // Makes the layer's bytes [0, size) available in a fast buffer of at least `capacity` bytes
    // (waiting for its prefetch, or reading it now), and starts prefetching the next layer.
    uint8_t* acquire(int layer, size_t size, size_t capacity);
    // Grows the acquired buffer, keeping its content.
    uint8_t* grow(int layer, size_t capacity);
    // Writes bytes [lo, hi) of the acquired buffer back, records the layer's size, and gives the
    // buffer up. Throws kvchat::Error (e.g. an I/O error) naming the spill file; the buffer is then
    // kept as the layer's content (see above) and written again by the next release.
    void release(int layer, size_t size, size_t lo, size_t hi);
    // Makes sure the spill file has disk space for the first `bytes` of a layer (allocated, not a
    // hole, so later writes there cannot run out of space). Throws kvchat::Error naming the spill
    // file and the cause (a full disk, a file size limit) when it cannot grow; nothing else changes.
    void ensure(int layer, size_t bytes);
    // Whether the layer has bytes that only memory holds (a write-back failed).
    bool unsaved(int layer) const { return unsaved_[static_cast<size_t>(layer)].pending; }
    // Counts a new step of traffic for the layer (resets its per-step counters).
    const TierTraffic& traffic(int layer) const { return traffic_[static_cast<size_t>(layer)]; }
    // Records a layer's size after it shrank without being acquired (a crop).
    void set_size(int layer, size_t size);
    size_t stored_bytes(int layer) const { return sizes_[static_cast<size_t>(layer)]; }
    const std::string& path() const { return path_; }

private:
    void prefetch_loop();
    // A fast buffer: KV memory and its size in bytes.
    struct FastBuffer {
        std::unique_ptr<KvMemory> mem;
        size_t size = 0;
        void swap(FastBuffer& o) {
            mem.swap(o.mem);
            std::swap(size, o.size);
        }
    };
    // Sizes b to at least n bytes (keeping its content), allocating it first if it has none.
    uint8_t* fit(FastBuffer& b, size_t n);
    void read_into(int layer, size_t size, FastBuffer& buf);
    [[noreturn]] void fail(const std::string& what, int err) const;
    int64_t offset(int layer) const { return static_cast<int64_t>(layer) << 36; }

    Backend& backend_;
    std::string path_;
    int fd_ = -1;
    int n_layers_;
    std::vector<size_t> sizes_;
    std::vector<size_t> reserved_;  // bytes of each layer's range allocated on disk
    // A layer whose write-back failed: its bytes (held here while it is not acquired) and the
    // range [lo, hi) the file may not hold yet.
    struct Unsaved {
        bool pending = false;
        FastBuffer bytes;
        size_t lo = 0, hi = 0;
    };
    std::vector<Unsaved> unsaved_;
    std::vector<TierTraffic> traffic_;
    FastBuffer buf_[2];
    int cur_ = 0;             // buffer of the acquired layer
    int acquired_ = -1;
    // Prefetch state, guarded by mu_.
    std::mutex mu_;
    std::condition_variable cv_;
    int want_ = -1;           // layer to prefetch (into buf_[1 - cur_])
    size_t want_size_ = 0;
    bool busy_ = false;
    int ready_ = -1;          // layer whose bytes sit in buf_[1 - cur_]
    std::string prefetch_error_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace kvchat
