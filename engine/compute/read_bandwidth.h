#pragma once
// How fast this machine streams memory into the cores: the bound on a decode step, which reads
// every weight once. Measured with the compute threads, the way the kernels read weights.
#include <cstddef>

namespace kvchat {

class ThreadPool;

// GB/s (1e9 bytes) of one streaming read of [data, data + bytes) split over the pool's threads.
double stream_read_gbs(const void* data, size_t bytes, ThreadPool& pool);

// The best of `passes` streaming reads of a buffer of `bytes` (allocated, written once so that
// its pages exist, and freed): with a buffer well beyond the last-level cache, main memory's read
// bandwidth as the pool's threads see it.
double memory_read_gbs(ThreadPool& pool, size_t bytes = size_t(1) << 30, int passes = 3);

// A buffer beyond the last-level cache, allocated once, to read the bandwidth again and again
// beside the runs of a benchmark: on a shared host what the memory delivers moves from minute to
// minute, so a share of the bandwidth compares a run with a reading taken next to it.
class BandwidthProbe {
public:
    explicit BandwidthProbe(ThreadPool& pool, size_t bytes = size_t(256) << 20);
    ~BandwidthProbe();
    BandwidthProbe(const BandwidthProbe&) = delete;
    BandwidthProbe& operator=(const BandwidthProbe&) = delete;
    // The best of `passes` streaming reads of the buffer, GB/s.
    double measure(int passes = 2);

private:
    ThreadPool& pool_;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace kvchat
