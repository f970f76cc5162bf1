// Times converting a dynamic cache to other strategies (kvchat::convert), on the default model's
// layer shapes, without running the model: the dynamic cache is filled with keys and values on
// the f16 grid, as a GGUF model's are. ms per conversion (median and min of the runs), and the
// process's CPU ms (median; all threads, page faults included), which a busy machine disturbs
// less than the wall time, and the page faults of the last run (fresh memory the kernel zeroes).
// usage: bench_convert [--model PATH] [--context 4096] [--runs 5] [--threads N]
//                      [--cache static:max_len=4200,quantized:nbits=4,offloaded]
// With --runs 1 --threads 1, a fixed amount of work on one thread for instruction counters
// (valgrind's callgrind with --toggle-collect='*timed_conversion*' counts the conversions alone).
#include "engine/cache/cache_factory.h"
#include "engine/cache/convert.h"
#include "engine/compute/backend.h"
#include "engine/compute/kv_dtype.h"
#include "engine/model/model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <time.h>

using namespace kvchat;

namespace {

std::vector<std::string> split(const std::string& s) {
    // Strategies are separated by commas, but a strategy's parameters are too: a part with '='
    // and no ':' continues the previous strategy (as `kvchat-cli bench --cache` reads them).
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= s.size()) {
        const size_t end = std::min(s.find(',', at), s.size());
        const std::string part = s.substr(at, end - at);
        if (!out.empty() && part.find('=') != std::string::npos && part.find(':') == std::string::npos)
            out.back() += "," + part;
        else if (!part.empty())
            out.push_back(part);
        at = end + 1;
    }
    return out;
}

double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

struct Timing {
    double wall = 0, cpu = 0;
    long faults = 0;
};

// Not inlined, so an instruction counter can count from its entry to its exit.
[[gnu::noinline]] Timing timed_conversion(Cache& cache, const std::string& target) {
    const long f0 = minor_faults();
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    convert(cache, target);
    Timing t;
    t.wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    t.cpu = cpu_ms() - c0;
    t.faults = minor_faults() - f0;
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    const char* env = std::getenv("KVCHAT_MODEL");
    std::string model_path = env ? env : "";
    int64_t context = 4096;
    int runs = 5, threads = 0;
    std::string targets = "static:max_len=4200,quantized:nbits=4,offloaded";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--model" && i + 1 < argc) model_path = argv[++i];
        else if (a == "--context" && i + 1 < argc) context = std::atoll(argv[++i]);
        else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--cache" && i + 1 < argc) targets = argv[++i];
        else {
            std::fprintf(stderr, "bench_convert: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (model_path.empty()) {
        std::fprintf(stderr, "bench_convert: --model PATH or KVCHAT_MODEL is needed\n");
        return 2;
    }
    const auto model = Model::load(model_path);
    const std::vector<LayerSpec> specs = model->layer_specs();
    // The backend outlives every cache made on it (the copies and conversions below included).
    const std::unique_ptr<Backend> backend = make_cpu_backend(threads);
    auto cache = make_cache(specs, "dynamic", *backend);

    // Every layer gets the same tokens a prefill of `context` would give it; values on the f16 grid.
    std::mt19937 rng(1234);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t l = 0; l < cache->n_layers(); ++l) {
        TokenRows rows;
        rows.kv_dim = static_cast<int64_t>(specs[l].shape.n_head_kv) * specs[l].shape.head_dim;
        const size_t n = static_cast<size_t>(context), d = static_cast<size_t>(rows.kv_dim);
        rows.pos.resize(n);
        rows.k.resize(n * d);
        rows.v.resize(n * d);
        rows.exact.assign(n, 1);
        rows.dtype = KvDtype::F16;
        for (size_t i = 0; i < n; ++i) rows.pos[i] = static_cast<int32_t>(i);
        std::vector<uint16_t> half(n * d);
        for (float& x : rows.k) x = dist(rng);
        for (float& x : rows.v) x = dist(rng);
        kv_store_row(KvDtype::F16, rows.k.data(), half.data(), static_cast<int64_t>(n * d));
        kv_load_row(KvDtype::F16, half.data(), rows.k.data(), static_cast<int64_t>(n * d));
        kv_store_row(KvDtype::F16, rows.v.data(), half.data(), static_cast<int64_t>(n * d));
        kv_load_row(KvDtype::F16, half.data(), rows.v.data(), static_cast<int64_t>(n * d));
        cache->layer(l).import_tokens(rows, context);
    }
    std::vector<int32_t> ids(static_cast<size_t>(context));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(2 + i % 1000);
    cache->append_tokens(ids.data(), context);

    std::printf("%-44s %8s %10s %10s %10s %12s\n", "strategy", "context", "median ms", "min ms", "cpu ms", "page faults");
    for (const std::string& target : split(targets)) {
        std::vector<double> ms, cpu;
        long faults = 0;
        for (int r = 0; r < runs; ++r) {
            auto copy = clone_cache(*cache);
            const Timing t = timed_conversion(*copy, target);
            ms.push_back(t.wall);
            cpu.push_back(t.cpu);
            faults = t.faults;
        }
        std::sort(ms.begin(), ms.end());
        std::sort(cpu.begin(), cpu.end());
        std::printf("%-44s %8lld %10.1f %10.1f %10.1f %12ld\n", target.c_str(), static_cast<long long>(context),
                    ms[ms.size() / 2], ms.front(), cpu[cpu.size() / 2], faults);
    }
    return 0;
}
