// Times kvchat's tokenizer on a text file: the vocabulary of a GGUF (only its metadata is read as a
// tokenizer), the whole file encoded as user text (no BOS) once per run. Prints one JSON line:
// tokens, bytes, seconds of each run, and tokens and MB per second of the median run.
// usage: bench_tokenizer MODEL.gguf TEXT [--runs 5] [--ids OUT]
//   --ids OUT writes the ids, one per line, for tests/reference/bench_tokenizer_vs_llama_cpp.py to
//   compare with llama.cpp's.
#include "engine/format/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_tokenizer MODEL.gguf TEXT [--runs 5] [--ids OUT]\n");
        return 2;
    }
    int runs = 5;
    std::string ids_path;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
        else if (flag == "--ids") ids_path = argv[i + 1];
    }
    try {
        const auto file = kvchat::GgufFile::open(argv[1]);
        const auto tok = kvchat::Tokenizer::from_gguf(*file);
        std::ifstream in(argv[2], std::ios::binary);
        if (!in) throw std::runtime_error(std::string("cannot read ") + argv[2]);
        std::stringstream buf;
        buf << in.rdbuf();
        const std::string text = buf.str();

        std::vector<double> seconds;
        std::vector<int32_t> ids;
        for (int r = 0; r < runs; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            ids = tok->encode(text, false);
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        if (!ids_path.empty()) {
            std::ofstream out(ids_path);
            for (int32_t id : ids) out << id << '\n';
        }
        std::vector<double> sorted = seconds;
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[sorted.size() / 2];
        std::printf("{\"tokenizer\": \"kvchat\", \"tokens\": %zu, \"bytes\": %zu, \"seconds\": [", ids.size(), text.size());
        for (size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.5f", i ? ", " : "", seconds[i]);
        std::printf("], \"tokens_per_second\": %.0f, \"mb_per_second\": %.2f}\n", ids.size() / median,
                    text.size() / median / 1e6);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
        return 1;
    }
    return 0;
}
