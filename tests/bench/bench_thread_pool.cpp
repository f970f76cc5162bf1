// What one parallel step costs beyond its work: the wake-up and the barrier of ThreadPool's
// parallel_for and parallel_for_dynamic, with empty and with tiny bodies (a decode step of a
// small model runs a few hundred of them). Prints microseconds per call (median of rounds).
// usage: bench_thread_pool [--threads N] [--calls N] [--gap-us N]
// --gap-us: idle time between calls (the pool's threads spin a while, then sleep).
#include "engine/compute/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace kvchat;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void spin_for(double us) {
    const auto end = Clock::now() + std::chrono::duration<double, std::micro>(us);
    while (Clock::now() < end) {
    }
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 2, calls = 2000;
    double gap_us = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--calls" && i + 1 < argc) calls = std::max(10, std::atoi(argv[++i]));
        else if (a == "--gap-us" && i + 1 < argc) gap_us = std::atof(argv[++i]);
        else {
            std::fprintf(stderr, "usage: bench_thread_pool [--threads N] [--calls N] [--gap-us N]\n");
            return 2;
        }
    }
    ThreadPool pool(threads);
    std::atomic<int64_t> sink{0};
    struct Case {
        const char* name;
        void (*run)(ThreadPool&, std::atomic<int64_t>&);
    };
    const Case cases[] = {
        {"parallel_for, empty", [](ThreadPool& p, std::atomic<int64_t>&) { p.parallel_for(64, [](int64_t, int64_t) {}); }},
        {"parallel_for, 2 us of work", [](ThreadPool& p, std::atomic<int64_t>& s) {
             p.parallel_for(64, [&](int64_t b, int64_t e) {
                 spin_for(2.0 * double(e - b) / 64.0 * double(p.size()));
                 s += e - b;
             });
         }},
        {"parallel_for_dynamic, 16 pieces", [](ThreadPool& p, std::atomic<int64_t>& s) {
             p.parallel_for_dynamic(64, 4, [&](int64_t b, int64_t e) { s += e - b; });
         }},
    };
    std::printf("%d threads, gap %.0f us between calls; microseconds per call (median of 5 rounds of %d)\n", threads, gap_us,
                calls);
    for (const Case& c : cases) {
        std::vector<double> rounds;
        for (int r = 0; r < 5; ++r) {
            std::vector<double> per;
            for (int i = 0; i < calls; ++i) {
                if (gap_us > 0) spin_for(gap_us);
                const auto t0 = Clock::now();
                c.run(pool, sink);
                per.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            }
            rounds.push_back(median(per));
        }
        std::printf("%-34s %8.2f us\n", c.name, median(rounds));
    }
    return sink.load() == -1;  // keeps the bodies' work
}
