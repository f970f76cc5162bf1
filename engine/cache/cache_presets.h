#pragma once
// The named strategies (presets) of the cache spec grammar, defined once: the parser takes their
// names and parameters, `kvchat-cli --help` lists their forms, and the window's strategy panel
// offers them and starts each from the typed spec it names.
#include "engine/cache/cache_spec.h"

#include <string_view>
#include <vector>

namespace kvchat {

struct CachePreset {
    std::string_view name;                   // "offloaded_static": the word a spec part starts with
    std::string_view usage;                  // "offloaded_static:max_len=N[,dir=PATH]", as the help shows it
    std::vector<std::string_view> params;    // every parameter it takes (dtype included)
    std::vector<std::string_view> required;  // those without a default
    CacheSpec spec;                          // what it names, with defaults (0 where a value is required)
};

// In the order the help and the strategy panel list them.
const std::vector<CachePreset>& cache_presets();
// nullptr when no preset has that name.
const CachePreset* find_cache_preset(std::string_view name);
// The preset a spec is shown under: its base part, or quantized / offloaded / offloaded_static
// when those parts carry a dynamic or static base.
const CachePreset& cache_preset_of(const CacheSpec& spec);

}  // namespace kvchat
