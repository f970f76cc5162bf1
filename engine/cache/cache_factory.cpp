#include "engine/cache/cache_factory.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/offload_tier.h"
#include "engine/error.h"

#include <cstdio>

namespace kvchat {

LayerConfig layer_config(const LayerSpec& spec, const CacheSpec& s) {
    LayerConfig c;
    c.nbits = s.nbits;
    c.residual = s.residual;
    c.group = s.group;
    c.offloaded = s.offloaded;
    c.dtype = s.dtype.value_or(spec.kv_dtype);
    const int m = spec.model_window;
    if (m > 0) {
        // A model's sliding layer never looks further back than its window, so every strategy
        // keeps a ring of it there (a smaller sliding_window narrows it; sinks add nothing the
        // layer could see). dynamic grows it as tokens arrive; the others preallocate it.
        c.retention = RetentionKind::SlidingWindow;
        c.window = s.retention() == RetentionKind::SlidingWindow ? std::min(m, s.window) : m;
        c.fixed = s.base != CacheBase::Dynamic;
        return c;
    }
    c.retention = s.retention();
    c.window = s.window;
    c.sinks = s.sinks;
    c.fixed = s.fixed() || s.retention() != RetentionKind::All;
    c.max_len = s.retention() == RetentionKind::All ? s.max_len : 0;
    if (s.retention() == RetentionKind::All) c.fixed = s.fixed();
    return c;
}

namespace {

// "3.6 TiB (4,000,000,000,000 bytes)"
std::string bytes_text(double bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double v = bytes;
    while (v >= 1024.0 && u < 5) v /= 1024.0, ++u;
    std::string digits = std::to_string(static_cast<unsigned long long>(bytes));
    for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<size_t>(at), ",");
    char head[32];
    std::snprintf(head, sizeof head, "%.1f %s", v, units[u]);
    return std::string(head) + " (" + digits + " bytes)";
}

// The memory a cache could not be given when it was made, in the user's terms.
[[noreturn]] void refuse_allocation(const std::vector<LayerSpec>& layers, const CacheSpec& s) {
    double total = 0.0;
    for (const LayerSpec& l : layers) total += static_cast<double>(AxisLayer::reserved_bytes(l, layer_config(l, s)));
    const bool by_len = s.fixed() && s.retention() == RetentionKind::All && s.max_len > 0;
    throw Error(to_string(s) + ": out of memory: its " + std::to_string(layers.size()) + " layers need " + bytes_text(total) +
                " allocated up front" +
                (by_len ? " for max_len=" + std::to_string(s.max_len) + " tokens; choose a smaller max_len" : "; choose a smaller window"));
}

}  // namespace

std::unique_ptr<Cache> make_cache(const std::vector<LayerSpec>& layers, const CacheSpec& s, Backend& backend) {
    std::shared_ptr<OffloadTier> tier;
    if (s.offloaded) tier = std::make_shared<OffloadTier>(s.offload_dir, static_cast<int>(layers.size()), backend);
    std::vector<std::unique_ptr<CacheLayer>> out;
    try {
        auto staging = std::make_shared<StagingMemory>(backend);
        for (size_t i = 0; i < layers.size(); ++i)
            out.push_back(std::make_unique<AxisLayer>(layers[i], layer_config(layers[i], s), backend, tier.get(),
                                                      static_cast<int>(i), staging));
    } catch (const std::bad_alloc&) {
        out.clear();  // what was allocated goes back first
        refuse_allocation(layers, s);
    }
    auto cache = std::make_unique<Cache>(s, std::move(out), std::move(tier));
    cache->set_origin(layers, backend);
    return cache;
}

std::unique_ptr<Cache> make_cache(const std::vector<LayerSpec>& layers, const std::string& spec, Backend& backend) {
    return make_cache(layers, parse_cache_spec(spec), backend);
}

std::unique_ptr<Cache> clone_cache(const Cache& cache) {
    if (!cache.backend()) throw Error("this cache was not made by make_cache and cannot be copied");
    auto copy = make_cache(cache.layer_specs(), cache.spec(), *cache.backend());
    std::string state;
    for (size_t i = 0; i < cache.n_layers(); ++i) {
        state.clear();
        cache.layer(i).save_state(state);
        ByteReader r(state, "cache copy");
        copy->layer(i).load_state(r);
    }
    copy->append_tokens(cache.tokens().data(), cache.seq_length());
    return copy;
}

}  // namespace kvchat
