#pragma once
// A fixed pool of worker threads for data-parallel loops. The calling thread takes part.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <immintrin.h>
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
    // Concurrent calls from different threads are serialized.
    void run(const std::function<void(int, int)>& fn);
    // Splits [0, n) into contiguous chunks (as many as threads, at most n): fn(begin, end). The
    // chunks go to the threads that take them: a worker not yet awake (its core busy with
    // another program) when the caller has finished is not waited for, and the caller does its
    // chunks. Every chunk runs exactly once.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
    // The same, cut into pieces of `grain` items (the last may be shorter) that the threads take
    // in turn as they finish theirs: a thread slowed by other work on its core (another program,
    // a busy hypervisor) does less of the work instead of holding up the others. For work whose
    // items cost the same and are independent of where the cuts fall.
    void parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker(int index);
    // Calls fn() on the caller and on the workers that join before the caller returns from its
    // own fn(); waits only for those (see parallel_for). fn must share its work through state of
    // its own (a counter of pieces).
    void run_joined(const std::function<void()>& fn);
    void dispatch(const void* job, bool joined_only);
    // Waits until pred() holds: spins briefly (a decode step dispatches ~100 jobs, each a few
    // microseconds apart), then sleeps on cv, announcing itself in `sleepers`.
    template <class Pred>
    void await(Pred pred, std::condition_variable& cv, std::atomic<int>& sleepers);

    int n_threads_;
    bool spin_ = true;  // false when oversubscribed
    std::vector<std::thread> threads_;
    std::mutex run_mu_;  // one run() at a time
    std::mutex mu_;      // only for the sleeping phase
    std::condition_variable cv_start_, cv_done_;
    // The current call: run()'s fn(index, n) or run_joined()'s fn(). A worker takes part only
    // after joining it in join_ (the generation's low 32 bits, bit 31 of the count: closed, the
    // count of workers joined): the caller closes a run_joined call when its own part is done and
    // waits for the joined workers alone; run() waits until every worker has joined and finished.
    const void* job_ = nullptr;
    bool job_joined_only_ = false;
    std::atomic<uint64_t> generation_{0};
    std::atomic<uint64_t> join_{0};
    std::atomic<int> finished_{0};  // joined workers done with the current call
    std::atomic<int> start_sleepers_{0}, done_sleepers_{0};
    std::atomic<bool> stop_{false};
    std::exception_ptr error_;  // first exception thrown by a worker in the current run
};

// Work cut into `parts` inside one parallel step, and work in the same step that must wait for
// all of them (a kv head's scores cut by columns, then its P.V): the thread that finishes the last
// part runs `last` and opens the gate; waiters spin until it is open. Safe only when every part
// has been taken by a running thread before anyone waits (items handed out in order, parts first).
class PartsGate {
public:
    // Closed, waiting for `parts` parts (before the parallel step).
    void expect(int64_t parts) {
        left_.store(parts, std::memory_order_relaxed);
        open_.store(false, std::memory_order_relaxed);
    }
    // One part: work(), then, on the thread that completes the last part (it sees every part's
    // writes: acq_rel), last() and the gate opens. A part that throws opens it too, so that no
    // waiter spins forever (the exception reaches the step's caller, who discards the results).
    template <class Work, class Last>
    void part(Work&& work, Last&& last) {
        bool was_last = false;
        try {
            work();
            was_last = left_.fetch_sub(1, std::memory_order_acq_rel) == 1;
            if (was_last) last();
        } catch (...) {
            open_.store(true, std::memory_order_release);
            throw;
        }
        if (was_last) open_.store(true, std::memory_order_release);
    }
    void wait() const {
        for (int spins = 0; !open_.load(std::memory_order_acquire); ++spins) {
            _mm_pause();
            if (spins > 1024) std::this_thread::yield();  // the thread it waits for may share this core
        }
    }

private:
    std::atomic<int64_t> left_{0};
    std::atomic<bool> open_{false};
};

}  // namespace kvchat
