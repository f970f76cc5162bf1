// Writes tests/data/f32_snapshot_{dynamic,sink}.kvcs: snapshots of the tiny Llama model
// (tests/support/tiny_model.h, llama, 2 layers) after 12 tokens, as builds before the cache
// recorded its dtype wrote them (layer states LAY2, f32 keys and values). test_cache loads them
// into today's f16 caches (f32SnapshotsOfEarlierBuildsLoad).
//
// Made with the main branch's build of 2026-11-23 (before issue 12), from the repository root:
//   g++ -std=c++20 -O1 -I/work/main -I/work/main/tests tests/data/make_f32_snapshots.cpp \
//       /work/main/build/lib/libkvchat_test_support.a /work/main/build/lib/libkvchat_engine.a \
//       $(pkg-config --libs sentencepiece sqlite3) -lpthread -o /tmp/make_f32_snapshots
//   /tmp/make_f32_snapshots tests/data
#include "engine/cache/snapshot.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "support/tiny_model.h"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    kvchat::test::TinyModelSpec s;
    s.arch = "llama";
    s.n_layer = 2;
    s.sliding_window = 0;
    const std::string model_path = "/tmp/make_f32_snapshots_tiny.gguf";
    kvchat::test::write_tiny_gguf(s, model_path);
    auto model = kvchat::Model::load(model_path);
    auto backend = kvchat::make_cpu_backend(1);
    const std::vector<int32_t> toks = {2, 17, 40, 99, 150, 7, 230, 61, 88, 12, 200, 33};
    for (const char* spec : {"dynamic", "sink:window=8,sinks=2"}) {
        auto cache = model->make_cache(*backend, spec);
        std::vector<float> logits;
        model->forward(*backend, *cache, toks.data(), 5, kvchat::Logits::None, logits);
        model->forward(*backend, *cache, toks.data() + 5, 7, kvchat::Logits::None, logits);
        const std::string name = std::string(spec) == "dynamic" ? "dynamic" : "sink";
        kvchat::save_snapshot(dir + "/f32_snapshot_" + name + ".kvcs", *cache, model->fingerprint());
    }
    std::remove(model_path.c_str());
    return 0;
}
