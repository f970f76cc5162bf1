// Decode cost per token on a real model, in CPU time as well as wall time: on a machine shared
// with other programs the wall clock swings, while the CPU time the process (and its calling
// thread) spends per token moves much less. Prefills a prompt of the benchmark text, then decodes
// greedily; prints ms per token (wall, process CPU, calling thread's CPU) per round.
// usage: bench_decode MODEL [--threads N] [--prompt-tokens 512] [--gen-tokens 128] [--rounds 3]
//                     [--simd avx2|avx512-vnni|amx] [--cache SPEC]
// Each round also prints its prefill (chunks of 512, as a chat turn's), so with --cache and a long
// --prompt-tokens it profiles a strategy's prefill alone (kvchat-cli bench --cache also runs dynamic).
// With --rounds 1 --gen-tokens 8 it is short enough for valgrind --tool=callgrind (instruction
// counts of a decode step, undisturbed by other programs; --toggle-collect=*decode_tokens* counts
// the decoding alone).
#include "engine/compute/logit_select.h"
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/compute/thread_pool.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace kvchat;

namespace {

double cpu_seconds(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The counted loop, apart so that callgrind can count it alone (--toggle-collect=*decode_tokens*).
__attribute__((noinline)) void decode_tokens(const Model& model, Backend& backend, Cache& cache, int n,
                                             std::vector<float>& logits, int32_t& checksum) {
    for (int i = 0; i < n; ++i) {
        const int32_t next = static_cast<int32_t>(first_max_index(logits.data(), static_cast<int64_t>(logits.size())));
        checksum = checksum * 31 + next;
        model.forward(backend, cache, &next, 1, Logits::Last, logits);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_decode MODEL [--threads N] [--prompt-tokens N] [--gen-tokens N] [--rounds N] [--simd LEVEL] [--cache SPEC]\n");
        return 2;
    }
    const std::string path = argv[1];
    int threads = 2, prompt_tokens = 512, gen_tokens = 128, rounds = 3;
    std::string spec;  // empty: the model's default cache
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        const bool more = i + 1 < argc;
        if (a == "--threads" && more) threads = std::atoi(argv[++i]);
        else if (a == "--prompt-tokens" && more) prompt_tokens = std::max(1, std::atoi(argv[++i]));
        else if (a == "--gen-tokens" && more) gen_tokens = std::max(1, std::atoi(argv[++i]));
        else if (a == "--rounds" && more) rounds = std::max(1, std::atoi(argv[++i]));
        else if (a == "--simd" && more) force_simd_level(argv[++i]);
        else if (a == "--cache" && more) spec = argv[++i];
        else {
            std::fprintf(stderr, "bench_decode: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    const auto model = Model::load(path);
    auto backend = make_cpu_backend(threads);
    std::string text;
    std::vector<int32_t> ids;
    while (static_cast<int>(ids.size()) < prompt_tokens) {
        text += benchmark_text();
        ids = model->tokenizer().encode(text, true);
    }
    ids.resize(static_cast<size_t>(prompt_tokens));
    std::vector<float> logits;
    std::printf("%s, %d threads, %d-token prompt, %d tokens decoded per round\n", path.c_str(), backend->pool().size(),
                prompt_tokens, gen_tokens);
    std::printf("round  prefill tok/s  wall ms/token  tok/s   process CPU ms/token  caller CPU ms/token\n");
    int32_t checksum = 0;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
        auto cache = spec.empty() ? model->make_default_cache(*backend) : model->make_cache(*backend, spec);
        const auto f0 = std::chrono::steady_clock::now();
        model->forward(*backend, *cache, ids.data(), static_cast<int64_t>(ids.size()), Logits::Last, logits);
        const double prefill = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
        const double p0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID), c0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
        const auto t0 = std::chrono::steady_clock::now();
        decode_tokens(*model, *backend, *cache, gen_tokens, logits, checksum);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double p = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - p0, c = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (r == 0) continue;
        std::printf("%5d  %13.1f  %13.3f  %6.1f  %20.3f  %19.3f\n", r, prompt_tokens / prefill, 1e3 * wall / gen_tokens, gen_tokens / wall,
                    1e3 * p / gen_tokens, 1e3 * c / gen_tokens);
    }
    std::printf("tokens checksum %d\n", checksum);  // the same greedy tokens whatever the build
    return 0;
}
