#include "engine/chat/conversation_cache.h"

#include "engine/cache/cache_spec.h"
#include "engine/cache/snapshot.h"
#include "engine/error.h"

#include <algorithm>

namespace kvchat {

std::string default_cache_spec() { return canonical_cache_spec("dynamic"); }

std::string canonical_cache_spec(const std::string& spec) { return to_string(conversation_cache_spec(spec)); }

CacheSpec conversation_cache_spec(const std::string& spec) {
    return parse_cache_spec(spec.empty() ? std::string("dynamic") : spec);
}

std::unique_ptr<Cache> make_conversation_cache(const Model& model, Backend& backend, const std::string& spec) {
    return model.make_cache(backend, spec.empty() ? default_cache_spec() : spec);
}

int64_t cache_capacity(const Cache& cache) {
    const CacheSpec& s = cache.spec();
    return s.fixed ? s.max_len : 0;
}

void prefill_in_chunks(const Model& model, Backend& backend, Cache& cache, const int32_t* tokens, int64_t n,
                       const Progress& progress, std::string_view task, int64_t done_before, int64_t total) {
    // The forward pass's own chunk: the same arithmetic as one call over all n tokens.
    constexpr int64_t kChunk = 512;
    if (total < 0) total = n;
    std::vector<float> none;
    for (int64_t at = 0; at < n; at += kChunk) {
        progress.check(task);
        const int64_t m = std::min(kChunk, n - at);
        // The flag is also seen between layers, so Ctrl-C or Stop acts within a layer's time.
        model.forward(backend, cache, tokens + at, m, Logits::None, none, kChunk, progress.cancel);
        progress.tell(task, done_before + at + m, total);
    }
}

ConvertResult convert_conversation_cache(Cache& cache, const Model& model, Backend& backend, const CacheSpec& spec,
                                         const Progress& progress) {
    constexpr std::string_view kTask = "Converting cache";
    progress.check(kTask);
    ConvertOptions o;
    o.reprefill = [&](Cache& c, const std::vector<int32_t>& tokens) {
        std::vector<float> none;
        model.forward(backend, c, tokens.data(), static_cast<int64_t>(tokens.size()), Logits::None, none);
    };
    if (progress.report) o.progress = [&](int64_t done, int64_t total) { progress.tell(kTask, done, total); };
    o.cancel = progress.cancel;
    try {
        return convert(cache, spec, o);
    } catch (const Error&) {
        // convert() says "cancelled" in its own words; the caller is told in kvchat::Cancelled.
        if (progress.cancelled()) throw Cancelled(std::string(kTask) + " was cancelled");
        throw;
    }
}

ConvertResult switch_strategy(Cache& cache, std::vector<CacheCheckpoint>& checkpoints, const Model& model,
                              Backend& backend, const CacheSpec& spec, const Progress& progress) {
    ConvertResult r = convert_conversation_cache(cache, model, backend, spec, progress);
    checkpoints.clear();
    return r;
}

void save_cache_snapshot(const Cache& cache, std::span<const CacheCheckpoint> checkpoints, const Model& model,
                         const std::string& path) {
    save_snapshot(path, cache, model.fingerprint(), checkpoints);
}

SavedCache load_cache_snapshot(const std::string& path, const Model& model, Backend& backend) {
    LoadedSnapshot s = load_snapshot(path, model.layer_specs(), model.fingerprint(), backend);
    return SavedCache{std::move(s.cache), std::move(s.checkpoints)};
}

}  // namespace kvchat
