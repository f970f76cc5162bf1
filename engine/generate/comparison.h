#pragma once
// Strategies side by side: one prompt (or a conversation's rendered transcript) prefilled and
// decoded greedily under each strategy, with `dynamic` as the reference, giving per strategy the
// tokens, where they first part from dynamic's, memory (peak, at the end, and against tokens),
// speed and the time a dynamic cache takes to convert to it. `kvchat-cli bench --cache` and the
// window's comparison view both report these rows.
#include "engine/cache/cache.h"
#include "engine/common/progress.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvchat {

class Backend;
class Model;

struct ComparisonRow {
    std::string strategy;           // canonical spec
    int64_t context = 0;            // prompt tokens
    std::vector<int32_t> tokens;    // the greedy tokens (no stop: every run gives the same count)
    std::string text;               // their text
    std::vector<std::string> pieces;  // the text each token completed (valid UTF-8; may be empty); text ends with any rest
    int64_t first_divergence = -1;  // index into `tokens` of the first that differs from dynamic's; -1: none
    int64_t answer_end = 0;         // index of the first token that ends an answer (EOS, end of turn); tokens.size(): none
    double agreement = 0;           // share of positions equal to dynamic's
    int64_t kv_bytes = 0;           // held at the end
    int64_t peak_kv_bytes = 0;      // most held at any point of the run
    double kv_ratio = 0;            // kv_bytes / dynamic's
    double ttft_ms = 0;             // prefill until the first token's logits
    double prefill_tok_s = 0;
    double decode_tok_s = 0;        // steps after the first token
    double decode_ratio = 0;        // decode_tok_s / dynamic's
    double convert_ms = 0;          // converting a copy of the dynamic cache to this strategy (0: dynamic)
    std::vector<std::pair<int64_t, int64_t>> kv_series;  // (tokens in the cache, bytes held), from (0, 0)
    CacheTelemetry telemetry;       // at the end
};

struct ComparisonOptions {
    int gen_tokens = 32;
    bool measure_conversion = true;
    // Tasks "Warming up", "Prefilling <spec>", "Decoding", "Converting"; the cancel flag is
    // checked between prefill slices, decode steps and conversions.
    Progress progress;
};

// Throws kvchat::Error: a bad spec (naming the parameter), or a strategy that cannot hold the
// prompt and the generated tokens (before anything is computed); kvchat::Cancelled when cancelled. The rows follow
// `strategies` (canonical, duplicates dropped); dynamic is always run as the reference but only
// reported when listed. Nothing is timed before a warm-up (a short prefill and a decode step on a
// throwaway cache, progress task "Warming up"), and decoding goes round the strategies one step
// each, every other step in reverse order, so neither a cold start nor a machine whose load drifts
// favours one strategy and the speed ratios stay meaningful.
std::vector<ComparisonRow> compare_strategies(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                                              const std::vector<std::string>& strategies,
                                              const ComparisonOptions& options = {});

// The benchmark prompt of n tokens: a fixed English text repeated (the fewest copies that give n
// tokens, as tests/reference/bench_llama_cpp.py takes them, so llama.cpp sees the same ids).
std::vector<int32_t> benchmark_prompt(const Model& model, int n);
// The text benchmark_prompt repeats.
std::string_view benchmark_text();

}  // namespace kvchat
