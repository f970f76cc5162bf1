// Times attend() for one prefill chunk of the default model's shape (4 query heads, 1 kv head,
// head_dim 256; --shape for another) over a long context, held as a dynamic (f16) cache or as KIVI
// blocks behind a 128-token f16 residual, as the quantized strategy holds it: ms per call
// (median), and a hash of the output to compare two builds that must agree bit for bit. Keys and
// values lie as a cache layer holds them: each slot a key row, then a value row.
// usage: bench_attention [--threads N] [--context N] [--queries N] [--window W] [--runs N]
//                        [--level avx2|avx512-vnni] [--kind dynamic|generic|quantized:NBITS]...
//                        [--shape HEADS:KV_HEADS:HEAD_DIM] [--cold]
// --shape 9:3:64 is SmolLM2-135M's. --cold: 64 MiB are read between runs, so that the keys and
// values come from memory, as in a decode step after the weights streamed through the caches.
#include "engine/compute/attention.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/matmul.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace kvchat;

namespace {

constexpr int kGroup = 64, kResidual = 128;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 2, runs = 5, window = 0;
    int n_heads = 4, n_kv_heads = 1, head_dim = 256;
    bool cold = false;
    int64_t context = 4096, queries = 512;
    std::vector<std::string> kinds;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--context" && i + 1 < argc) context = std::atoll(argv[++i]);
        else if (a == "--queries" && i + 1 < argc) queries = std::atoll(argv[++i]);
        else if (a == "--window" && i + 1 < argc) window = std::atoi(argv[++i]);
        else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--kind" && i + 1 < argc) kinds.push_back(argv[++i]);
        else if (a == "--level" && i + 1 < argc) force_simd_level(argv[++i]);
        else if (a == "--shape" && i + 1 < argc && std::sscanf(argv[i + 1], "%d:%d:%d", &n_heads, &n_kv_heads, &head_dim) == 3 &&
                 n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0 && head_dim % 16 == 0) ++i;
        else if (a == "--cold") cold = true;
        else {
            std::fprintf(stderr, "usage: bench_attention [--threads N] [--context N] [--queries N] [--window W] [--runs N] "
                                 "[--level avx2|avx512-vnni] [--kind dynamic|generic|quantized:NBITS]... "
                                 "[--shape HEADS:KV_HEADS:HEAD_DIM] [--cold]\n");
            return 2;
        }
    }
    if (kinds.empty()) kinds = {"dynamic", "quantized:4"};
    const int kv_dim = n_kv_heads * head_dim;
    ThreadPool pool(threads);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t total = context + queries;
    // Keys, values and queries on the fp16 grid, queries pre-scaled (as the dynamic cache does).
    std::vector<float> k(size_t(total * kv_dim)), v(size_t(total * kv_dim)), q(size_t(queries * n_heads * head_dim));
    for (auto* a : {&k, &v, &q})
        for (float& x : *a) x = fp16_to_fp32(fp32_to_fp16(normal(rng) * (a == &q ? 0.0625f : 1.0f)));
    // A slot: its key row, then its value row.
    std::vector<uint16_t> kv16(2 * k.size());
    for (int64_t t = 0; t < total; ++t)
        for (int j = 0; j < kv_dim; ++j) {
            kv16[size_t((2 * t) * kv_dim + j)] = fp32_to_fp16(k[size_t(t * kv_dim + j)]);
            kv16[size_t((2 * t + 1) * kv_dim + j)] = fp32_to_fp16(v[size_t(t * kv_dim + j)]);
        }
    const uint16_t* k16 = kv16.data();
    const uint16_t* v16 = kv16.data() + kv_dim;
    std::vector<uint8_t> flush(cold ? size_t(64) << 20 : 0, 1);
    std::atomic<uint64_t> flushed_sum{0};
    std::vector<int32_t> pos(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) pos[size_t(i)] = int32_t(i);
    std::vector<float> out(q.size());
    const AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f, 0.0f, true};

    std::printf("%lld queries after %lld tokens, %d:%d:%d heads, window %d, %d threads, %s%s; median of %d runs\n",
                (long long)queries, (long long)context, n_heads, n_kv_heads, head_dim, window, threads, simd_level(),
                cold ? ", keys and values from memory" : "", runs);
    for (const std::string& kind : kinds) {
        AttentionInput in;
        in.q = q.data();
        in.qpos = pos.data() + context;
        in.n_q = queries;
        in.window = window;
        in.dtype = KvDtype::F16;
        KiviFormat f;
        std::vector<uint8_t> blocks;
        if (kind == "dynamic" || kind == "generic") {
            // generic: the same f16 slots through attend's own loops (as a sink, sliding or bf16
            // cache takes them) instead of llama.cpp's order.
            in.f16_probs = kind == "dynamic";
            in.slots.push_back({k16, v16, pos.data(), total, 2 * kv_dim});
        } else if (kind.rfind("quantized:", 0) == 0) {
            f = KiviFormat(std::atoi(kind.c_str() + 10), kGroup, kGroup, kv_dim);
            const int64_t nb = std::max<int64_t>(0, (context - kResidual) / kGroup);
            blocks.resize(size_t(nb) * f.block_bytes);
            for (int64_t b = 0; b < nb; ++b)
                kivi_quantize_block(f, k.data() + b * kGroup * kv_dim, v.data() + b * kGroup * kv_dim, kv_dim, kGroup,
                                    blocks.data() + size_t(b) * f.block_bytes);
            in.kivi = &f;
            for (int64_t b = 0; b < nb; ++b) in.blocks.push_back({blocks.data() + size_t(b) * f.block_bytes, int32_t(b * kGroup), kGroup});
            const int64_t first = nb * kGroup;
            in.slots.push_back({k16 + first * 2 * kv_dim, v16 + first * 2 * kv_dim, pos.data() + first, total - first, 2 * kv_dim});
        } else {
            std::fprintf(stderr, "unknown kind '%s'\n", kind.c_str());
            return 2;
        }
        attend(in, shape, out.data(), pool);  // warm-up
        std::vector<double> ms;
        for (int r = 0; r < runs; ++r) {
            // Read by the pool's threads, so that they are awake when attend() starts, as in a
            // decode step.
            pool.run([&](int i, int n) {
                uint64_t sum = 0;
                for (size_t j = flush.size() * size_t(i) / size_t(n); j < flush.size() * size_t(i + 1) / size_t(n); j += 64)
                    sum += flush[j];
                flushed_sum.fetch_add(sum, std::memory_order_relaxed);
            });
            const auto t0 = std::chrono::steady_clock::now();
            attend(in, shape, out.data(), pool);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        // FNV-1a of the output's bytes: two builds that must compute the same bits print the same.
        uint64_t h = 1469598103934665603ull;
        for (const float& x : out) {
            uint32_t u;
            std::memcpy(&u, &x, 4);
            for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xff)) * 1099511628211ull;
        }
        std::printf("%-14s %9.1f us  (output hash %016llx)\n", kind.c_str(), 1000.0 * median(ms), (unsigned long long)h);
        std::fflush(stdout);
    }
    return flushed_sum.load() == 1 ? 1 : 0;  // (keeps the reads between runs)
}
