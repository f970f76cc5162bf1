#include "engine/cache/offload_tier.h"

#include "engine/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace kvchat {

OffloadTier::OffloadTier(const std::string& dir_in, int n_layers) : n_layers_(n_layers) {
    std::string dir = dir_in;
    if (dir.empty()) {
        const char* t = std::getenv("TMPDIR");
        dir = t && *t ? t : "/tmp";
    }
    std::string templ = dir + "/kvchat-spill-XXXXXX";
    fd_ = ::mkstemp(templ.data());
    if (fd_ < 0) {
        const int err = errno;
        throw Error("offloaded: cannot create a spill file in '" + dir + "' (dir): " + std::strerror(err));
    }
    path_ = templ;
    sizes_.assign(static_cast<size_t>(n_layers), 0);
    traffic_.assign(static_cast<size_t>(n_layers), TierTraffic{});
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
    ::unlink(path_.c_str());
}

void OffloadTier::fail(const std::string& what, int err) const {
    throw Error("offloaded: " + what + " spill file '" + path_ + "': " + std::strerror(err));
}

void OffloadTier::read_into(int layer, size_t size, std::vector<uint8_t>& buf) {
    if (buf.size() < size) buf.resize(size);
    size_t done = 0;
    while (done < size) {
        const ssize_t r = ::pread(fd_, buf.data() + done, size - done, offset(layer) + static_cast<int64_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail("cannot read the", errno);
        if (r == 0) {
            // Past the end of the file: bytes the layer reserved but never wrote.
            std::memset(buf.data() + done, 0, size - done);
            break;
        }
        done += static_cast<size_t>(r);
    }
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
        std::vector<uint8_t>& buf = buf_[1 - cur_];
        lock.unlock();
        std::string error;
        try {
            read_into(layer, size, buf);
        } catch (const Error& e) {
            error = e.what();
        }
        lock.lock();
        busy_ = false;
        if (error.empty())
            ready_ = layer;
        else
            prefetch_error_ = error;
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
    std::vector<uint8_t>& buf = buf_[cur_];
    if (!hit) read_into(layer, size, buf);
    if (buf.size() < capacity) buf.resize(capacity);
    t.in_step = static_cast<int64_t>(size);
    t.in_total += static_cast<int64_t>(size);
    acquired_ = layer;
    const int next = (layer + 1) % n_layers_;
    if (next != layer) {
        std::lock_guard<std::mutex> lock(mu_);
        want_ = next;
        want_size_ = sizes_[static_cast<size_t>(next)];
    }
    cv_.notify_all();
    return buf.data();
}

uint8_t* OffloadTier::grow(int, size_t capacity) {
    std::vector<uint8_t>& buf = buf_[cur_];
    if (buf.size() < capacity) buf.resize(capacity);
    return buf.data();
}

void OffloadTier::release(int layer, size_t size, size_t lo, size_t hi) {
    const size_t li = static_cast<size_t>(layer);
    acquired_ = -1;
    const std::vector<uint8_t>& buf = buf_[cur_];
    hi = std::min(hi, size);
    size_t done = lo;
    while (done < hi) {
        const ssize_t w = ::pwrite(fd_, buf.data() + done, hi - done, offset(layer) + static_cast<int64_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail("cannot write the", w < 0 ? errno : ENOSPC);
        done += static_cast<size_t>(w);
    }
    if (hi > lo) {
        traffic_[li].out_step += static_cast<int64_t>(hi - lo);
        traffic_[li].out_total += static_cast<int64_t>(hi - lo);
    }
    sizes_[li] = size;
}

void OffloadTier::reserve(int layer, size_t bytes) {
    if (bytes == 0) return;
    const int err = ::posix_fallocate(fd_, offset(layer), static_cast<off_t>(bytes));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) fail("cannot reserve " + std::to_string(bytes) + " bytes in the", err);
}

}  // namespace kvchat
