#pragma once
// A fixed pool of worker threads for data-parallel loops. The calling thread takes part.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvchat {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads <= 0: one per core
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Calls fn(thread_index, n_threads) on every thread (the caller is index 0) and waits for all.
    void run(const std::function<void(int, int)>& fn);
    // Splits [0, n) into contiguous chunks, one or more per thread: fn(begin, end).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker(int index);
    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    const std::function<void(int, int)>* job_ = nullptr;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
};

}  // namespace kvchat
