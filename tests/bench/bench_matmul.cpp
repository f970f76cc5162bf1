// Times matmul on the default model's (Gemma 3 270M Q4_K_M) weight shapes: ms per call (median),
// GB/s of weight bytes at one token, GFLOP/s at a 512-token prefill.
// usage: bench_matmul [--threads N] [--level avx2|avx512-vnni|amx] [--tokens N] [--only NAME] [--calls N]
//                     [--interleaved]
//                     [--shape TYPE:ROWS:COLS]...
// --shape: time these shapes instead of the default model's (e.g. q4_1:1536:576 for SmolLM2's
// FFN, or a small q8_0:4096:640 that stays in cache to see a kernel's arithmetic alone).
// --interleaved: the weights in the layout a CPU backend places Q4_1/Q5_0/Q8_0 in on an AVX-512
// CPU (interleaved_rows.h), as the model's decode reads them.
// --calls N: exactly N timed calls (for instruction counters such as valgrind's, which need a
// fixed amount of work rather than a time budget).
// --copies N: N copies of each matrix in distinct memory, the calls going through them in turn:
// with N times the matrix larger than the last-level cache, each call reads its weights from
// memory, as a decode step reads a layer's small products.
#include "engine/compute/interleaved_rows.h"
#include "engine/compute/matmul.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <time.h>

using namespace kvchat;

namespace {

struct Shape {
    const char* name;
    TensorType type;
    int64_t rows, cols;
};

const std::vector<Shape> kShapes = {
    {"output", TensorType::Q8_0, 262144, 640},   {"attn_q", TensorType::Q5_0, 1024, 640},
    {"attn_k", TensorType::Q5_0, 256, 640},      {"attn_v", TensorType::Q8_0, 256, 640},
    {"attn_output", TensorType::Q4_K, 640, 1024}, {"ffn_gate/up", TensorType::Q5_0, 2048, 640},
    {"ffn_down", TensorType::Q6_K, 640, 2048},
    {"f32 (extra)", TensorType::F32, 640, 640},
};

// Quantizes a few distinct rows and repeats them: the kernels' speed does not depend on the
// values, and the reference quantizers are slow on the 262144-row output head.
std::vector<uint8_t> make_weights(const Shape& s) {
    constexpr int64_t kDistinct = 64;
    const size_t rb = row_bytes(s.type, s.cols);
    std::vector<uint8_t> distinct(rb * kDistinct);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < kDistinct; ++r) {
        for (auto& v : src) v = normal(rng);
        quantize_row(s.type, src.data(), distinct.data() + r * rb, s.cols);
    }
    std::vector<uint8_t> w(rb * size_t(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) std::memcpy(w.data() + r * rb, distinct.data() + (r % kDistinct) * rb, rb);
    return w;
}

// "q8_0:4096:640" -> a Shape; false when the text is not of that form or names no integer type.
bool parse_shape(const std::string& text, Shape& out) {
    const size_t a = text.find(':'), b = text.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) return false;
    const std::string type = text.substr(0, a);
    for (uint32_t id = 0; id < 64; ++id) {
        const auto tt = type_traits(id);
        if (!tt || tt->name.size() != type.size() ||
            !std::equal(type.begin(), type.end(), tt->name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
            continue;
        static std::deque<std::string> names;  // keeps the Shape's name alive (a deque never moves them)
        names.push_back(text);
        out = {names.back().c_str(), TensorType(id), std::atoll(text.c_str() + a + 1), std::atoll(text.c_str() + b + 1)};
        return out.rows > 0 && out.cols > 0;
    }
    return false;
}

double process_cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 2;
    std::vector<int64_t> token_counts = {1, 512};
    std::string only;
    int calls = 0;
    std::vector<Shape> shapes;
    bool interleaved = false;
    int copies = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--level" && i + 1 < argc) force_simd_level(argv[++i]);
        else if (a == "--tokens" && i + 1 < argc) token_counts = {std::atoll(argv[++i])};
        else if (a == "--only" && i + 1 < argc) only = argv[++i];
        else if (a == "--calls" && i + 1 < argc) calls = std::max(1, std::atoi(argv[++i]));
        else if (a == "--interleaved") interleaved = true;
        else if (a == "--copies" && i + 1 < argc) copies = std::max(1, std::atoi(argv[++i]));
        else if (a == "--shape" && i + 1 < argc && parse_shape(argv[i + 1], shapes.emplace_back())) ++i;
        else {
            std::fprintf(stderr, "usage: bench_matmul [--threads N] [--level avx2|avx512-vnni|amx] [--tokens N] [--only NAME] "
                                 "[--calls N] [--shape TYPE:ROWS:COLS]... [--interleaved] [--copies N]\n");
            return 2;
        }
    }
    ThreadPool pool(threads);
    std::printf("simd %s, %d threads; median of several runs\n", simd_level(), threads);
    std::printf("%-12s %-5s %8s %6s %7s %9s %9s %12s\n", "tensor", "type", "rows", "cols", "tokens", "ms", "GB/s|GF/s", "cpu-ms/thread");
    if (shapes.empty()) shapes = kShapes;
    for (const Shape& s : shapes) {
        if (!only.empty() && only != s.name) continue;
        const std::vector<uint8_t> w = make_weights(s);
        std::vector<std::vector<uint8_t>> placed(static_cast<size_t>(copies));
        std::vector<WeightMatrix> ms_of(static_cast<size_t>(copies));
        for (int c = 0; c < copies; ++c) {
            placed[size_t(c)] = w;
            WeightMatrix m{s.type, s.rows, s.cols, placed[size_t(c)].data()};
            if (interleaved && can_interleave(m)) {
                std::vector<uint8_t> rearranged(w.size());
                interleave_rows(m, rearranged.data(), pool);
                placed[size_t(c)] = std::move(rearranged);
                m = WeightMatrix{s.type, s.rows, s.cols, placed[size_t(c)].data(), RowLayout::Interleaved16};
            }
            ms_of[size_t(c)] = m;
        }
        size_t next_copy = 0;
        auto next = [&]() -> const WeightMatrix& { return ms_of[next_copy++ % ms_of.size()]; };
        for (int64_t n : token_counts) {
            std::vector<float> x(static_cast<size_t>(n * s.cols));
            std::mt19937 rng(2);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (auto& v : x) v = normal(rng);
            std::vector<float> y(static_cast<size_t>(n * s.rows));
            for (const WeightMatrix& m : ms_of) matmul(m, x.data(), n, y.data(), pool);  // warm-up: page faults, buffers
            std::vector<double> ms;
            const double cpu0 = process_cpu_ms();
            const auto start = std::chrono::steady_clock::now();
            while (calls > 0 ? int(ms.size()) < calls
                             : (ms.size() < 5 || (ms.size() < 200 && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(700)))) {
                const auto t0 = std::chrono::steady_clock::now();
                matmul(next(), x.data(), n, y.data(), pool);
                ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
            // CPU time per call and thread: what the wall time would be on an idle machine (the
            // waiting threads spin, so it never underestimates).
            const double cpu = (process_cpu_ms() - cpu0) / double(ms.size()) / threads;
            const double t = median(ms);
            const double rate = n == 1 ? double(w.size()) / (t * 1e-3) / 1e9 : 2.0 * double(s.rows * s.cols * n) / (t * 1e-3) / 1e9;
            std::printf("%-12s %-5s %8lld %6lld %7lld %9.3f %9.1f %12.3f  %s\n", s.name, std::string(traits(s.type).name).c_str(),
                        (long long)s.rows, (long long)s.cols, (long long)n, t, rate, cpu, n == 1 ? "GB/s" : "GFLOP/s");
            std::fflush(stdout);
        }
    }
    const std::string families = simd_family_levels();
    if (!families.empty()) std::printf("levels taken (measured on first use): %s\n", families.c_str());
    return 0;
}
