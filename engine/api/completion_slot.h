#pragma once
// POST /v1/completions' cache: one in-memory slot holding the tokens of the last raw prompt and
// its continuation. A new prompt keeps the longest common token prefix with it and prefills only
// the rest, as llama-server's slot does. Nothing of it is stored: a raw completion is no
// conversation.
#include "engine/cache/cache.h"
#include "engine/compute/backend.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat::api {

class CompletionSlot {
public:
    // Continues `prompt` (BOS added as the model asks) with the model; the cache is `cache_spec`'s
    // (a new one when the slot's model or strategy differs). GenerationResult::cached_tokens are
    // the tokens reused from the last call.
    GenerationResult complete(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                              const GenerationConfig& config, const std::string& cache_spec,
                              const std::function<void(std::string_view)>& on_text, const std::atomic<bool>* cancel);
    // Drops the cache (another model was loaded).
    void clear();

private:
    const Model* model_ = nullptr;
    std::string model_path_;
    std::string cache_spec_;
    std::unique_ptr<Cache> cache_;
};

}  // namespace kvchat::api
