#include "engine/compute/read_bandwidth.h"

#include "engine/compute/thread_pool.h"
#include "engine/compute/weight_stream.h"
#include "engine/error.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace kvchat {

namespace {

// Sums [p, p + n) as 32-bit lanes with four independent chains (the loads, not the adds, must be
// the limit) and a request ahead, as the decode kernels make theirs.
uint32_t read_range(const uint8_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        request_weights(p + i + 2048);
        request_weights(p + i + 2048 + 64);
        a0 = _mm256_add_epi32(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi32(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi32(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi32(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    uint32_t tail = 0;
    for (; i < n; ++i) tail += p[i];
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    for (uint32_t v : lanes) tail += v;
    return tail;
}

}  // namespace

double stream_read_gbs(const void* data, size_t bytes, ThreadPool& pool) {
    if (bytes == 0) return 0.0;
    const auto* p = static_cast<const uint8_t*>(data);
    // The sum goes somewhere the compiler cannot drop.
    static std::atomic<uint32_t> sink{0};
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int index, int n_threads) {
        // Contiguous shares on cache-line boundaries.
        const size_t begin = bytes * size_t(index) / size_t(n_threads) / 64 * 64;
        const size_t end = index + 1 == n_threads ? bytes : bytes * size_t(index + 1) / size_t(n_threads) / 64 * 64;
        sink.fetch_add(read_range(p + begin, end - begin), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return double(bytes) / std::max(s, 1e-9) / 1e9;
}

BandwidthProbe::BandwidthProbe(ThreadPool& pool, size_t bytes) : pool_(pool), bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("cannot allocate " + std::to_string(bytes >> 20) + " MiB to measure memory bandwidth");
    data_ = p;
    // Huge pages where the kernel grants them, so page walks do not count against the memory;
    // written in parallel so the pages exist before the timed passes.
    ::madvise(p, bytes, MADV_HUGEPAGE);
    pool.run([&](int index, int n_threads) {
        const size_t begin = bytes * size_t(index) / size_t(n_threads);
        const size_t end = bytes * size_t(index + 1) / size_t(n_threads);
        std::memset(static_cast<uint8_t*>(p) + begin, int(index + 1), end - begin);
    });
}

BandwidthProbe::~BandwidthProbe() { ::munmap(data_, bytes_); }

double BandwidthProbe::measure(int passes) {
    double best = 0.0;
    for (int i = 0; i < std::max(1, passes); ++i) best = std::max(best, stream_read_gbs(data_, bytes_, pool_));
    return best;
}

double memory_read_gbs(ThreadPool& pool, size_t bytes, int passes) { return BandwidthProbe(pool, bytes).measure(passes); }

}  // namespace kvchat
