#include "engine/compute/logit_select.h"
#include "engine/generate/comparison.h"

#include "engine/cache/cache_factory.h"
#include "engine/cache/cache_spec.h"
#include "engine/cache/convert.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>

namespace kvchat {

namespace {

// The benchmark text (see benchmark_prompt).
const char* kBenchText =
    "The history of the printing press begins in the fifteenth century. Johannes Gutenberg combined movable "
    "metal type, oil-based inks and a wooden press adapted from those used for wine and olive oil. ";

// Model::forward's own chunk: prefilling slice by slice at its boundaries computes exactly what one
// call would, and lets the runner record memory and look for a cancel between slices.
constexpr int64_t kPrefillChunk = 512;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Run {
    ComparisonRow row;
    std::unique_ptr<Cache> cache;
    std::vector<float> logits;
    double prefill_s = 0, decode_s = 0;
    void note_bytes() {
        const int64_t b = cache->bytes();
        row.kv_series.emplace_back(cache->seq_length(), b);
        row.peak_kv_bytes = std::max(row.peak_kv_bytes, b);
    }
};

}  // namespace

std::vector<ComparisonRow> compare_strategies(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                                              const std::vector<std::string>& strategies, const ComparisonOptions& opt) {
    if (prompt.empty()) throw Error("nothing to compare: the prompt has no tokens");
    if (opt.gen_tokens < 1) throw Error("a comparison generates at least one token");
    std::vector<std::string> specs;
    for (const std::string& s : strategies) {
        const std::string canonical = to_string(parse_cache_spec(s));
        if (std::find(specs.begin(), specs.end(), canonical) == specs.end()) specs.push_back(canonical);
    }
    if (specs.empty()) throw Error("nothing to compare: no strategies given");
    std::vector<std::string> order = specs;
    const auto dyn = std::find(order.begin(), order.end(), "dynamic");
    if (dyn == order.end())
        order.insert(order.begin(), "dynamic");
    else
        std::rotate(order.begin(), dyn, dyn + 1);

    auto report = [&](std::string_view task, int64_t done, int64_t total) { opt.progress.tell(task, done, total); };
    auto check_cancel = [&] { opt.progress.check("The comparison"); };

    const int64_t ctx = static_cast<int64_t>(prompt.size());
    // Every strategy must hold the prompt and the generated tokens (the last is not fed back):
    // find out before any prefill.
    std::vector<Run> runs;
    for (const std::string& spec : order) {
        Run r;
        r.row.strategy = spec;
        r.row.context = ctx;
        r.cache = model.make_cache(backend, spec);
        try {
            r.cache->check_room(ctx + opt.gen_tokens - 1);
        } catch (const Error& e) {
            throw Error(spec + " cannot hold " + std::to_string(ctx) + " prompt tokens and " + std::to_string(opt.gen_tokens) +
                        " generated: " + e.what());
        }
        runs.push_back(std::move(r));
    }

    {
        // A warm-up, timed by nobody: the first strategy measured used to pay for the cold start
        // (weights paged in, threads woken, buffers grown) and the speed ratios followed the order.
        report("Warming up", 0, 1);
        auto cache = model.make_cache(backend, "dynamic");
        std::vector<float> logits;
        const int64_t m = std::min<int64_t>(ctx, 64);
        model.forward(backend, *cache, prompt.data(), m, Logits::Last, logits);
        const int32_t next = static_cast<int32_t>(first_max_index(logits.data(), static_cast<int64_t>(logits.size())));
        model.forward(backend, *cache, &next, 1, Logits::Last, logits);
        report("Warming up", 1, 1);
    }

    for (Run& r : runs) {
        const std::string task = "Prefilling " + r.row.strategy;
        r.note_bytes();
        const auto t0 = Clock::now();
        for (int64_t at = 0; at < ctx; at += kPrefillChunk) {
            check_cancel();
            report(task, at, ctx);
            const int64_t m = std::min(kPrefillChunk, ctx - at);
            const auto s0 = Clock::now();
            model.forward(backend, *r.cache, prompt.data() + at, m, at + m == ctx ? Logits::Last : Logits::None, r.logits);
            r.prefill_s += seconds_since(s0);
            if (at + m < ctx) r.note_bytes();
        }
        r.row.ttft_ms = 1000.0 * seconds_since(t0);
        r.note_bytes();
        report(task, ctx, ctx);
    }

    for (int i = 0; i < opt.gen_tokens; ++i) {
        check_cancel();
        report("Decoding", i, opt.gen_tokens);
        // Every other step the other way round, so no strategy always steps first (or last).
        for (size_t k = 0; k < runs.size(); ++k) {
            Run& r = runs[i % 2 == 0 ? k : runs.size() - 1 - k];
            const int32_t next = static_cast<int32_t>(first_max_index(r.logits.data(), static_cast<int64_t>(r.logits.size())));
            r.row.tokens.push_back(next);
            if (i + 1 == opt.gen_tokens) continue;
            const auto t0 = Clock::now();
            model.forward(backend, *r.cache, &next, 1, Logits::Last, r.logits);
            r.decode_s += seconds_since(t0);
            r.note_bytes();
        }
    }
    report("Decoding", opt.gen_tokens, opt.gen_tokens);

    if (opt.measure_conversion) {
        // Converting the dynamic cache (a copy of it) to each strategy.
        for (size_t k = 1; k < runs.size(); ++k) {
            check_cancel();
            report("Converting", static_cast<int64_t>(k - 1), static_cast<int64_t>(runs.size() - 1));
            auto copy = clone_cache(*runs[0].cache);
            const auto t0 = Clock::now();
            convert(*copy, runs[k].row.strategy);
            runs[k].row.convert_ms = 1000.0 * seconds_since(t0);
        }
    }

    const Run& ref = runs[0];
    const std::vector<int32_t> ref_tokens = ref.row.tokens;  // the rows are moved out below, dynamic's too
    const double ref_bytes = static_cast<double>(ref.cache->bytes());
    const double ref_decode = opt.gen_tokens > 1 && ref.decode_s > 0 ? (opt.gen_tokens - 1) / ref.decode_s : 0.0;
    std::vector<ComparisonRow> rows;
    for (const std::string& spec : specs) {
        Run& r = *std::find_if(runs.begin(), runs.end(), [&](const Run& x) { return x.row.strategy == spec; });
        ComparisonRow& row = r.row;
        row.telemetry = r.cache->telemetry();
        row.kv_bytes = row.telemetry.total_bytes;
        row.kv_ratio = ref_bytes > 0 ? static_cast<double>(row.kv_bytes) / ref_bytes : 0.0;
        row.prefill_tok_s = r.prefill_s > 0 ? static_cast<double>(ctx) / r.prefill_s : 0.0;
        row.decode_tok_s = opt.gen_tokens > 1 && r.decode_s > 0 ? (opt.gen_tokens - 1) / r.decode_s : 0.0;
        row.decode_ratio = ref_decode > 0 ? row.decode_tok_s / ref_decode : 0.0;
        int agree = 0;
        for (size_t i = 0; i < row.tokens.size(); ++i) {
            const bool same = row.tokens[i] == ref_tokens[i];
            agree += same;
            if (!same && row.first_divergence < 0) row.first_divergence = static_cast<int64_t>(i);
        }
        row.agreement = static_cast<double>(agree) / opt.gen_tokens;
        const SpecialTokens& sp = model.tokenizer().special();
        row.answer_end = static_cast<int64_t>(std::find_if(row.tokens.begin(), row.tokens.end(), [&](int32_t t) {
                                                   return t == sp.eos || t == sp.end_of_turn;
                                               }) - row.tokens.begin());
        StreamingDetokenizer detok(model.tokenizer());
        for (int32_t id : row.tokens) {
            row.pieces.push_back(detok.push(id));
            row.text += row.pieces.back();
        }
        row.text += detok.flush();
        rows.push_back(std::move(row));
    }
    return rows;
}

std::string_view benchmark_text() { return kBenchText; }

std::vector<int32_t> benchmark_prompt(const Model& m, int n) {
    // Adding one copy at a time from the first, encoding the whole text each time, grows
    // quadratically and shows at 8,192 tokens, so start a little short of the estimate.
    const size_t per_copy = std::max<size_t>(1, m.tokenizer().encode(kBenchText, false).size());
    std::string text;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < static_cast<size_t>(n) / per_copy * 9 / 10; ++i) text += kBenchText;
    if (!text.empty()) ids = m.tokenizer().encode(text, true);
    if (static_cast<int>(ids.size()) >= n) text.clear(), ids.clear();
    while (static_cast<int>(ids.size()) < n) {
        text += kBenchText;
        ids = m.tokenizer().encode(text, true);
    }
    ids.resize(static_cast<size_t>(n));
    return ids;
}

}  // namespace kvchat
