#include "engine/compute/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace kvchat {

namespace {
// How long a waiting thread spins before it sleeps. Long enough to cover the gap between two
// kernels of one forward pass, short enough not to burn a shared core while the app is idle.
constexpr auto kSpinTime = std::chrono::microseconds(200);
// After this long, the spinning thread also yields: on a loaded machine the thread it waits for
// may be queued behind it on the same core.
constexpr auto kPureSpinTime = std::chrono::microseconds(20);
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    spin_ = n_threads_ <= int(std::thread::hardware_concurrency());
    threads_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    {
        std::lock_guard lock(mu_);
        generation_.fetch_add(1);
    }
    cv_start_.notify_all();
    for (auto& t : threads_) t.join();
}

template <class Pred>
void ThreadPool::await(Pred pred, std::condition_variable& cv, std::atomic<int>& sleepers) {
    if (pred()) return;
    const auto start = std::chrono::steady_clock::now();
    // With more threads than cores, a spinning thread only delays the one it waits for.
    for (int i = 0; spin_; ++i) {
        for (int k = 0; k < 16; ++k) {
            _mm_pause();
            if (pred()) return;
        }
        if ((i & 7) == 7) {
            const auto waited = std::chrono::steady_clock::now() - start;
            if (waited > kSpinTime) break;
            if (waited > kPureSpinTime) std::this_thread::yield();
        }
    }
    std::unique_lock lock(mu_);
    // The increment and the waker's store are both sequentially consistent: either the waker
    // sees a sleeper and notifies under the mutex, or pred() below sees the new state.
    sleepers.fetch_add(1);
    cv.wait(lock, pred);
    sleepers.fetch_sub(1);
}

namespace {
constexpr uint64_t kClosed = uint64_t(1) << 31;
constexpr uint64_t tag(uint64_t generation) { return (generation & 0xffffffffu) << 32; }
}  // namespace

void ThreadPool::worker(int) {
    uint64_t seen = 0;
    for (;;) {
        await([&] { return generation_.load() != seen; }, cv_start_, start_sleepers_);
        seen = generation_.load();
        if (stop_.load()) return;
        // Join the call of generation `seen`, unless the caller has closed it (or moved on).
        uint64_t j = join_.load();
        int index = 0;
        for (;;) {
            if ((j & ~uint64_t(0xffffffffu)) != tag(seen) || (j & kClosed)) break;
            if (join_.compare_exchange_weak(j, j + 1)) {
                index = int(j & 0xffff) + 1;
                break;
            }
        }
        if (index == 0) continue;
        try {
            if (job_joined_only_) (*static_cast<const std::function<void()>*>(job_))();
            else (*static_cast<const std::function<void(int, int)>*>(job_))(index, n_threads_);
        } catch (...) {
            std::lock_guard lock(mu_);
            if (!error_) error_ = std::current_exception();
        }
        finished_.fetch_add(1);
        if (done_sleepers_.load() > 0) {
            { std::lock_guard lock(mu_); }
            cv_done_.notify_all();
        }
    }
}

void ThreadPool::dispatch(const void* job, bool joined_only) {
    job_ = job;
    job_joined_only_ = joined_only;
    error_ = nullptr;
    finished_.store(0);
    const uint64_t g = generation_.load() + 1;
    join_.store(tag(g));
    generation_.store(g);
    if (start_sleepers_.load() > 0) {
        { std::lock_guard lock(mu_); }
        cv_start_.notify_all();
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    std::lock_guard run_lock(run_mu_);
    dispatch(&fn, false);
    std::exception_ptr own_error;
    try {
        fn(0, n_threads_);
    } catch (...) {
        own_error = std::current_exception();
    }
    // Every worker joins this call (none can close it) and runs its index.
    await([&] { return finished_.load() == n_threads_ - 1; }, cv_done_, done_sleepers_);
    job_ = nullptr;
    if (own_error) std::rethrow_exception(own_error);
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::run_joined(const std::function<void()>& fn) {
    if (n_threads_ == 1) {
        fn();
        return;
    }
    std::lock_guard run_lock(run_mu_);
    dispatch(&fn, true);
    std::exception_ptr own_error;
    try {
        fn();
    } catch (...) {
        own_error = std::current_exception();
    }
    // Workers that have not joined by now never will; wait for those that did.
    const int joined = int(join_.fetch_or(kClosed) & 0xffff);
    await([&] { return finished_.load() == joined; }, cv_done_, done_sleepers_);
    job_ = nullptr;
    if (own_error) std::rethrow_exception(own_error);
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int64_t parts = std::min<int64_t>(n, n_threads_);
    if (parts == 1) {
        fn(0, n);
        return;
    }
    std::atomic<int64_t> next{0};
    run_joined([&] {
        for (;;) {
            const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
            if (i >= parts) return;
            fn(n * i / parts, n * (i + 1) / parts);
        }
    });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    if (n_threads_ == 1 || n <= grain) {
        fn(0, n);
        return;
    }
    // Each piece costs one atomic increment on a line the threads share.
    std::atomic<int64_t> next{0};
    run_joined([&] {
        for (;;) {
            const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
            if (b >= n) return;
            fn(b, std::min(n, b + grain));
        }
    });
}

}  // namespace kvchat
