#include "engine/cache/cache_factory.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/offload_tier.h"
#include "engine/error.h"

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
        c.window = s.retention == RetentionKind::SlidingWindow ? std::min(m, s.window) : m;
        c.fixed = s.base != "dynamic";
        return c;
    }
    c.retention = s.retention;
    c.window = s.window;
    c.sinks = s.sinks;
    c.fixed = s.fixed || s.retention != RetentionKind::All;
    c.max_len = s.retention == RetentionKind::All ? s.max_len : 0;
    if (s.retention == RetentionKind::All) c.fixed = s.fixed;
    return c;
}

std::unique_ptr<Cache> make_cache(const std::vector<LayerSpec>& layers, const CacheSpec& s, Backend& backend) {
    std::shared_ptr<OffloadTier> tier;
    if (s.offloaded) tier = std::make_shared<OffloadTier>(s.offload_dir, static_cast<int>(layers.size()), backend);
    std::vector<std::unique_ptr<CacheLayer>> out;
    for (size_t i = 0; i < layers.size(); ++i)
        out.push_back(std::make_unique<AxisLayer>(layers[i], layer_config(layers[i], s), backend, tier.get(), static_cast<int>(i)));
    auto cache = std::make_unique<Cache>(to_string(s), std::move(out), std::move(tier));
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
