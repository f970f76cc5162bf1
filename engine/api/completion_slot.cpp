#include "engine/api/completion_slot.h"

#include <algorithm>

namespace kvchat::api {

void CompletionSlot::clear() {
    cache_.reset();
    model_ = nullptr;
    model_path_.clear();
}

GenerationResult CompletionSlot::complete(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                                          const GenerationConfig& config, const std::string& cache_spec,
                                          const std::function<void(std::string_view)>& on_text,
                                          const std::atomic<bool>* cancel) {
    if (!cache_ || model_ != &model || model_path_ != model.path() || cache_spec_ != cache_spec) {
        cache_.reset();
        cache_ = model.make_cache(backend, cache_spec);
        model_ = &model;
        model_path_ = model.path();
        cache_spec_ = cache_spec;
    }
    const std::vector<int32_t>& held = cache_->tokens();
    const size_t common =
        static_cast<size_t>(std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end()).first - held.begin());
    // At least the prompt's last token is computed again: its logits choose the first new token.
    int64_t keep = static_cast<int64_t>(std::min(common, prompt.empty() ? 0 : prompt.size() - 1));
    while (keep > 0 && !cache_->can_crop_to(keep)) keep = 0;  // a window that forgot what is needed
    if (keep < cache_->seq_length()) {
        if (keep == 0) {
            cache_ = model.make_cache(backend, cache_spec);
        } else {
            cache_->crop(keep);
        }
    }
    const std::vector<int32_t> rest(prompt.begin() + keep, prompt.end());
    try {
        Generator gen(model, backend);
        return gen.generate(*cache_, rest, config, on_text, cancel);
    } catch (...) {
        clear();  // a pass that failed half-way leaves nothing to reuse
        throw;
    }
}

}  // namespace kvchat::api
