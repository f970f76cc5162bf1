#pragma once
// Builds a Cache for a model's layers under a strategy spec: each layer's axes follow the spec
// and the model (the model's own sliding layers keep its window whatever the spec).
#include "engine/cache/axis_layer.h"
#include "engine/cache/cache.h"
#include "engine/cache/cache_spec.h"

#include <memory>
#include <vector>

namespace kvchat {

// The axes of layer `spec` under a strategy.
LayerConfig layer_config(const LayerSpec& spec, const CacheSpec& strategy);

// Throws kvchat::Error naming the parameter (e.g. a group that does not divide the head size),
// the slow-tier directory that cannot take a spill file, or (for memory allocated up front that
// cannot be had) the spec and the bytes it needs.
// The layers' memory is allocated by `backend`, which computes with it: the backend the model
// runs on, which the cache refers to and does not own, so it must outlive the cache (cache.h).
std::unique_ptr<Cache> make_cache(const std::vector<LayerSpec>& layers, const CacheSpec& strategy, Backend& backend);
std::unique_ptr<Cache> make_cache(const std::vector<LayerSpec>& layers, const std::string& spec, Backend& backend);

// An independent copy of a cache made by make_cache (same spec, tokens and layer contents; an
// offloaded copy gets its own spill file), on the same backend.
std::unique_ptr<Cache> clone_cache(const Cache& cache);

}  // namespace kvchat
