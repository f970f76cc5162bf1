#pragma once
// A fixed pool of worker threads for data-parallel loops. The calling thread takes part.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
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

}  // namespace kvchat
