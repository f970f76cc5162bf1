// Times attend() for one prefill chunk of the default model's shape (4 query heads, 1 kv head,
// head_dim 256) over a long context, held as a dynamic (f16) cache or as KIVI blocks behind a
// 128-token f16 residual, as the quantized strategy holds it: ms per call (median), and a hash of
// the output to compare two builds that must agree bit for bit.
// usage: bench_attention [--threads N] [--context N] [--queries N] [--window W] [--runs N]
//                        [--level avx2|avx512-vnni] [--kind dynamic|generic|quantized:NBITS]...
#include "engine/compute/attention.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/matmul.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace kvchat;

namespace {

constexpr int kHeads = 4, kKvHeads = 1, kHeadDim = 256, kKvDim = kKvHeads * kHeadDim;
constexpr int kGroup = 64, kResidual = 128;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 2, runs = 5, window = 0;
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
        else {
            std::fprintf(stderr, "usage: bench_attention [--threads N] [--context N] [--queries N] [--window W] [--runs N] "
                                 "[--level avx2|avx512-vnni] [--kind dynamic|generic|quantized:NBITS]...\n");
            return 2;
        }
    }
    if (kinds.empty()) kinds = {"dynamic", "quantized:4"};
    ThreadPool pool(threads);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t total = context + queries;
    // Keys, values and queries on the fp16 grid, queries pre-scaled (as the dynamic cache does).
    std::vector<float> k(size_t(total * kKvDim)), v(size_t(total * kKvDim)), q(size_t(queries * kHeads * kHeadDim));
    for (auto* a : {&k, &v, &q})
        for (float& x : *a) x = fp16_to_fp32(fp32_to_fp16(normal(rng) * (a == &q ? 0.0625f : 1.0f)));
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = fp32_to_fp16(k[i]), v16[i] = fp32_to_fp16(v[i]);
    std::vector<int32_t> pos(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) pos[size_t(i)] = int32_t(i);
    std::vector<float> out(q.size());
    const AttentionShape shape{kHeads, kKvHeads, kHeadDim, 1.0f, 0.0f, true};

    std::printf("%lld queries after %lld tokens, window %d, %d threads, %s; median of %d runs\n", (long long)queries,
                (long long)context, window, threads, simd_level(), runs);
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
            in.slots.push_back({k16.data(), v16.data(), pos.data(), total, kKvDim});
        } else if (kind.rfind("quantized:", 0) == 0) {
            f = KiviFormat(std::atoi(kind.c_str() + 10), kGroup, kGroup, kKvDim);
            const int64_t nb = std::max<int64_t>(0, (context - kResidual) / kGroup);
            blocks.resize(size_t(nb) * f.block_bytes);
            for (int64_t b = 0; b < nb; ++b)
                kivi_quantize_block(f, k.data() + b * kGroup * kKvDim, v.data() + b * kGroup * kKvDim, kKvDim, kGroup,
                                    blocks.data() + size_t(b) * f.block_bytes);
            in.kivi = &f;
            for (int64_t b = 0; b < nb; ++b) in.blocks.push_back({blocks.data() + size_t(b) * f.block_bytes, int32_t(b * kGroup), kGroup});
            const int64_t first = nb * kGroup;
            in.slots.push_back({k16.data() + first * kKvDim, v16.data() + first * kKvDim, pos.data() + first, total - first, kKvDim});
        } else {
            std::fprintf(stderr, "unknown kind '%s'\n", kind.c_str());
            return 2;
        }
        attend(in, shape, out.data(), pool);  // warm-up
        std::vector<double> ms;
        for (int r = 0; r < runs; ++r) {
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
        std::printf("%-14s %9.2f ms  (output hash %016llx)\n", kind.c_str(), median(ms), (unsigned long long)h);
        std::fflush(stdout);
    }
    return 0;
}
