#include "engine/cache/cache_presets.h"

namespace kvchat {

namespace {

std::vector<CachePreset> make_presets() {
    CacheSpec fixed;
    fixed.base = CacheBase::Static;
    fixed.fixed = true;
    CacheSpec offloaded;
    offloaded.offloaded = true;
    CacheSpec offloaded_fixed = fixed;
    offloaded_fixed.offloaded = true;
    CacheSpec quantized;
    quantized.nbits = 4;
    CacheSpec hybrid;
    hybrid.base = CacheBase::Hybrid;
    hybrid.hybrid = true;
    return {
        {"dynamic", "dynamic", {"dtype"}, {}, CacheSpec{}},
        {"static", "static:max_len=N", {"max_len", "dtype"}, {"max_len"}, fixed},
        {"offloaded", "offloaded[:dir=PATH]", {"dir", "dtype"}, {}, offloaded},
        {"offloaded_static", "offloaded_static:max_len=N[,dir=PATH]", {"max_len", "dir", "dtype"}, {"max_len"},
         offloaded_fixed},
        {"quantized", "quantized[:nbits=2|4|8,residual=128,group=64]", {"nbits", "residual", "group", "dtype"}, {},
         quantized},
        {"sliding_window", "sliding_window:window=W", {"window", "dtype"}, {"window"}, CacheSpec::sliding_window(0)},
        {"sink", "sink:window=W,sinks=S", {"window", "sinks", "dtype"}, {"window", "sinks"}, CacheSpec::sink(0, 0)},
        {"hybrid", "hybrid[:max_len=N]", {"max_len", "dtype"}, {}, hybrid},
    };
}

}  // namespace

const std::vector<CachePreset>& cache_presets() {
    static const std::vector<CachePreset> presets = make_presets();
    return presets;
}

const CachePreset* find_cache_preset(std::string_view name) {
    for (const CachePreset& p : cache_presets())
        if (p.name == name) return &p;
    return nullptr;
}

const CachePreset& cache_preset_of(const CacheSpec& s) {
    std::string_view name = cache_base_name(s.base);
    if (s.base == CacheBase::Dynamic && s.nbits > 0) name = "quantized";
    else if (s.base == CacheBase::Dynamic && s.offloaded) name = "offloaded";
    else if (s.base == CacheBase::Static && s.offloaded) name = "offloaded_static";
    return *find_cache_preset(name);
}

}  // namespace kvchat
