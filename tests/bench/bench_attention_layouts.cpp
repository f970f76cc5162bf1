// Times attention alone (one cache layer: RoPE, the append, attention) for two grouped-query
// layouts: Gemma 3 270M's (4 query heads over 1 kv head of 256) and SmolLM2's (9 query heads over
// 3 kv heads of 64), on the f16 cache GGUF models use. Prints ns per query head, head dimension
// and key ("ns/unit": the work of one query head's q·k and p·v against one key), so layouts of
// different widths compare: for a prefill of --prompt tokens in chunks of 512, then for decode
// steps at that context. Median of --runs. A third layout has SmolLM2's head size with Gemma's
// grouping, to tell the cost of the grouping from that of the head size.
// usage: bench_attention_layouts [--prompt 2048] [--steps 64] [--runs 5] [--threads 2]
#include "engine/cache/cache_factory.h"
#include "engine/compute/backend.h"
#include "engine/compute/rope.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace kvchat;

namespace {

struct Layout {
    const char* name;
    int n_head, n_head_kv, head_dim;
};

double seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void fill(Backend& be, Buffer& b, int64_t rows, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> host(static_cast<size_t>(rows * b.cols));
    for (float& x : host) x = d(rng);
    std::memcpy(b.data, host.data(), host.size() * sizeof(float));  // the CPU backend's buffers are host memory
    (void)be;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t prompt = 2048, steps = 64;
    int runs = 5, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--prompt") prompt = std::atoll(argv[i + 1]);
        else if (a == "--steps") steps = std::atoll(argv[i + 1]);
        else if (a == "--runs") runs = std::atoi(argv[i + 1]);
        else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    }
    auto be = make_cpu_backend(threads);
    std::mt19937 rng(7);
    // The two models' layouts, then SmolLM2's head size with Gemma's grouping (4 query heads per kv
    // head): what the grouping alone costs.
    const Layout layouts[] = {{"gemma3-270m 4/1 x 256", 4, 1, 256},
                              {"smollm2-135m 9/3 x 64", 9, 3, 64},
                              {"group of 4: 12/3 x 64", 12, 3, 64}};
    std::printf("attention alone, f16 cache, %d threads, context %lld\n", threads, static_cast<long long>(prompt));
    for (const Layout& l : layouts) {
        LayerSpec spec;
        spec.shape = AttentionShape{l.n_head, l.n_head_kv, l.head_dim, 1.0f / std::sqrt(float(l.head_dim)), 0.0f, true};
        spec.rope = RopeSpec{RopeStyle::HalfSplit, l.head_dim, 10000.0, 1.0, {}};
        const int64_t chunk = 512, q_dim = int64_t(l.n_head) * l.head_dim, kv_dim = int64_t(l.n_head_kv) * l.head_dim;
        Buffer q = be->alloc(chunk, q_dim), k = be->alloc(chunk, kv_dim), v = be->alloc(chunk, kv_dim), out = be->alloc(chunk, q_dim);
        std::vector<double> prefill_ns, decode_ns;
        for (int r = 0; r < runs; ++r) {
            auto cache = make_cache({spec}, "dynamic", *be);
            double t_prefill = 0.0, units_prefill = 0.0;
            std::vector<int32_t> pos(static_cast<size_t>(chunk));
            for (int64_t off = 0; off < prompt; off += chunk) {
                const int64_t n = std::min(chunk, prompt - off);
                fill(*be, q, n, rng), fill(*be, k, n, rng), fill(*be, v, n, rng);
                for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(off + i);
                const double t0 = seconds();
                cache->layer(0).attend(q, k, v, pos.data(), n, out);
                t_prefill += seconds() - t0;
                cache->append_tokens(std::vector<int32_t>(size_t(n), 1).data(), n);
                units_prefill += double(n) * (double(off) + double(n + 1) / 2.0) * l.n_head * l.head_dim;
            }
            double t_decode = 0.0, units_decode = 0.0;
            for (int64_t s = 0; s < steps; ++s) {
                fill(*be, q, 1, rng), fill(*be, k, 1, rng), fill(*be, v, 1, rng);
                const int32_t p = int32_t(prompt + s);
                const double t0 = seconds();
                cache->layer(0).attend(q, k, v, &p, 1, out);
                t_decode += seconds() - t0;
                const int32_t tok = 1;
                cache->append_tokens(&tok, 1);
                units_decode += double(p + 1) * l.n_head * l.head_dim;
            }
            prefill_ns.push_back(t_prefill * 1e9 / units_prefill);
            decode_ns.push_back(t_decode * 1e9 / units_decode);
        }
        std::printf("%-24s prefill %.4f ns/unit   decode %.4f ns/unit\n", l.name, median(prefill_ns), median(decode_ns));
        be->free(q), be->free(k), be->free(v), be->free(out);
    }
    return 0;
}
