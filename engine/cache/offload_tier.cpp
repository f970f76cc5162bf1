#include "engine/cache/offload_tier.h"

#include "engine/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

namespace kvchat {

namespace {

// Disk is reserved a page at a time: a decode step of a large layer then costs one fallocate
// every few tokens, and a reservation never overshoots a layer's needs by more than a page.
constexpr size_t kGrain = 4096;
// Layers sit 64 GiB apart in the (sparse) spill file: see OffloadTier::offset.
constexpr size_t kLayerSpan = size_t{1} << 36;

bool out_of_space(int err) { return err == ENOSPC || err == EFBIG || err == EDQUOT; }

}  // namespace

OffloadTier::OffloadTier(const std::string& dir_in, int n_layers, Backend& backend)
    : backend_(backend), n_layers_(n_layers) {
    std::string dir = dir_in;
    if (dir.empty()) {
        const char* t = std::getenv("TMPDIR");
        dir = t && *t ? t : "/tmp";
    }
    std::string templ = dir + "/kvchat-spill-XXXXXX";
    // O_CLOEXEC: a process the app starts must not keep a deleted spill file alive.
    fd_ = ::mkostemp(templ.data(), O_CLOEXEC);
    if (fd_ < 0) {
        const int err = errno;
        throw Error("offloaded: cannot create a spill file in '" + dir + "' (dir): " + std::strerror(err));
    }
    path_ = templ;
    // Unlinked at once: the descriptor keeps the file while the cache lives, and nothing is left
    // on disk when the process ends, however it ends (kill -9 included). path_ stays for messages.
    ::unlink(path_.c_str());
    sizes_.assign(static_cast<size_t>(n_layers), 0);
    reserved_.assign(static_cast<size_t>(n_layers), 0);
    unsaved_.resize(static_cast<size_t>(n_layers));
    traffic_.assign(static_cast<size_t>(n_layers), TierTraffic{});
    // A page per layer up front: a disk that is already full, or a filesystem that cannot hold a
    // file this sparse, shows when the cache is made.
    try {
        for (int i = 0; i < n_layers; ++i) ensure(i, kGrain);
        // Both fast buffers now: the prefetch thread then only fills them.
        for (FastBuffer& b : buf_) fit(b, 0);
    } catch (...) {
        ::close(fd_);
        throw;
    }
    thread_ = std::thread([this] { prefetch_loop(); });
}

OffloadTier::~OffloadTier() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    ::close(fd_);
}

void OffloadTier::fail(const std::string& what, int err) const {
    std::string msg = "offloaded: " + what + " spill file '" + path_ + "': " + std::strerror(err);
    if (out_of_space(err))
        msg += " (the slow tier's disk is full or a file size limit was reached; free some space or choose another "
               "directory with offloaded:dir=PATH)";
    throw Error(msg);
}

uint8_t* OffloadTier::fit(FastBuffer& b, size_t n) {
    if (!b.mem) {
        b.mem = backend_.alloc_kv();
        b.size = 0;
    }
    if (b.size < n) {
        b.mem->resize(n);
        b.size = n;
    }
    return b.mem->data();
}

void OffloadTier::read_into(int layer, size_t size, FastBuffer& buf) {
    uint8_t* dst = fit(buf, size);
    if (const int err = backend_.kv_read_file(fd_, offset(layer), dst, size)) fail("cannot read the", err);
}

void OffloadTier::prefetch_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
        cv_.wait(lock, [&] { return stop_ || want_ >= 0; });
        if (stop_) return;
        const int layer = want_;
        const size_t size = want_size_;
        want_ = -1;
        busy_ = true;
        FastBuffer& buf = buf_[1 - cur_];
        lock.unlock();
        std::string error;
        bool out_of_memory = false;
        try {
            read_into(layer, size, buf);
        } catch (const std::bad_alloc&) {
            out_of_memory = true;  // acquire() reads the layer itself, and meets it there if it persists
        } catch (const std::exception& e) {
            error = e.what();
        }
        lock.lock();
        busy_ = false;
        if (!error.empty())
            prefetch_error_ = error;
        else if (!out_of_memory)
            ready_ = layer;
        cv_.notify_all();
    }
}

uint8_t* OffloadTier::acquire(int layer, size_t size, size_t capacity) {
    const size_t li = static_cast<size_t>(layer);
    TierTraffic& t = traffic_[li];
    t.in_step = t.out_step = 0;
    bool hit = false;
    {
        std::unique_lock<std::mutex> lock(mu_);
        if (busy_ || want_ >= 0) {
            const auto t0 = std::chrono::steady_clock::now();
            cv_.wait(lock, [&] { return !busy_ && want_ < 0; });
            t.stall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
        if (!prefetch_error_.empty()) {
            ready_ = -1;
            throw Error(std::exchange(prefetch_error_, {}));
        }
        if (ready_ == layer) {
            cur_ = 1 - cur_;
            hit = true;
        }
        ready_ = -1;
    }
    FastBuffer& buf = buf_[cur_];
    Unsaved& u = unsaved_[li];
    if (u.pending) {
        // The file may be stale for this layer (a write-back failed): memory holds its bytes.
        buf.swap(u.bytes);
        u.bytes = FastBuffer{};
    } else {
        if (!hit) read_into(layer, size, buf);
        t.in_step = static_cast<int64_t>(size);
        t.in_total += static_cast<int64_t>(size);
    }
    uint8_t* data = fit(buf, capacity);
    acquired_ = layer;
    const int next = (layer + 1) % n_layers_;
    if (next != layer) {
        std::lock_guard<std::mutex> lock(mu_);
        want_ = next;
        want_size_ = sizes_[static_cast<size_t>(next)];
    }
    cv_.notify_all();
    return data;
}

uint8_t* OffloadTier::grow(int, size_t capacity) { return fit(buf_[cur_], capacity); }

void OffloadTier::release(int layer, size_t size, size_t lo, size_t hi) {
    const size_t li = static_cast<size_t>(layer);
    acquired_ = -1;
    FastBuffer& buf = buf_[cur_];
    Unsaved& u = unsaved_[li];
    hi = std::min(hi, size);
    if (lo >= hi) lo = hi = 0;
    if (u.pending) {
        // Also write what an earlier failed release left in memory only.
        const size_t ulo = u.lo, uhi = std::min(u.hi, size);
        if (ulo < uhi) {
            if (lo == hi) lo = ulo, hi = uhi;
            lo = std::min(lo, ulo);
            hi = std::max(hi, uhi);
        }
    }
    sizes_[li] = size;
    if (lo < hi) {
        size_t written = 0;
        if (const int err = backend_.kv_write_file(fd_, offset(layer) + static_cast<int64_t>(lo), buf.mem->data() + lo,
                                                    hi - lo, &written)) {
            // The file holds [lo, lo + written) of the new bytes at best. Keep the buffer as the
            // layer's content until a write succeeds.
            u.pending = true;
            u.lo = lo + written;
            u.hi = hi;
            u.bytes.swap(buf);
            fail("cannot write the", err);
        }
    }
    if (u.pending) {
        u.pending = false;
        u.bytes = FastBuffer{};
    }
    if (hi > lo) {
        traffic_[li].out_step += static_cast<int64_t>(hi - lo);
        traffic_[li].out_total += static_cast<int64_t>(hi - lo);
    }
}

void OffloadTier::set_size(int layer, size_t size) {
    const size_t li = static_cast<size_t>(layer);
    sizes_[li] = size;
    Unsaved& u = unsaved_[li];
    // Bytes past the new size no longer matter; if none of the stale range is left, the file is
    // right again.
    if (u.pending && std::min(u.hi, size) <= u.lo) {
        u.pending = false;
        u.bytes = FastBuffer{};
    }
}

void OffloadTier::ensure(int layer, size_t bytes) {
    size_t& have = reserved_[static_cast<size_t>(layer)];
    if (bytes <= have) return;
    const size_t want = (bytes + kGrain - 1) / kGrain * kGrain;
    if (want > kLayerSpan)
        throw Error("offloaded: layer " + std::to_string(layer) + " needs " + std::to_string(bytes) +
                    " bytes, more than the spill file's " + std::to_string(kLayerSpan >> 30) + " GiB per layer");
    int err;
    do {
        err = ::posix_fallocate(fd_, offset(layer) + static_cast<int64_t>(have), static_cast<off_t>(want - have));
    } while (err == EINTR);
    // A filesystem that cannot reserve: the writes will report a full disk instead.
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL)
        fail("cannot reserve " + std::to_string(want) + " bytes for layer " + std::to_string(layer) + " in the", err);
    have = want;
}

}  // namespace kvchat
