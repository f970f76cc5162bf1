#pragma once
// The generation loop, with the `transformers` semantics: the new input is prefilled (in chunks)
// after whatever the cache already holds, then one token is computed per step until a stop.
#include "engine/cache/cache.h"
#include "engine/common/stop_reason.h"
#include "engine/generate/sampler.h"
#include "engine/model/model.h"

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

struct GenerationConfig {
    int max_new_tokens = 128;
    SamplerConfig sampling;
    std::vector<std::string> stop_strings;
    bool stop_at_eos = true;   // EOS and the model's end-of-turn token end the answer
    std::vector<int32_t> stop_tokens;  // more ids that end the answer (a chat format's end of turn)
    bool use_cache = true;     // false: recompute the whole context at every step (the reference)
    int64_t prefill_chunk = 512;
    int64_t max_context = 0;   // 0: the model's training context
    // Called after every decode step (one new token computed into the cache).
    std::function<void(const Cache&)> on_step;
};

struct GenerationResult {
    std::vector<int32_t> tokens;  // generated ids (the stop token not included)
    std::string text;             // their text, cut before a stop string
    int64_t prompt_tokens = 0;    // the new input's tokens
    int64_t cached_tokens = 0;    // tokens the cache already held when the call began
    int64_t prefill_tokens = 0;   // tokens computed before the first new token
    double ttft_ms = 0.0;
    double prefill_ms = 0.0;
    double decode_ms = 0.0;       // after the first token
    StopReason stop_reason = StopReason::MaxNewTokens;
    double prefill_tok_s() const { return prefill_ms > 0 ? prefill_tokens * 1000.0 / prefill_ms : 0.0; }
    double decode_tok_s() const {
        return decode_ms > 0 && tokens.size() > 1 ? (tokens.size() - 1) * 1000.0 / decode_ms : 0.0;
    }
};

class Generator {
public:
    Generator(const Model& model, Backend& backend) : model_(model), backend_(backend) {}

    // Continues `cache` with `input` and generates. on_text receives each new piece of text (valid
    // UTF-8) as it is produced. Setting *cancel from another thread stops at the next step, or
    // during the prefill at the next layer (StopReason::Stopped, prefill_tokens the tokens
    // taken, no text); the cache then holds exactly the tokens it reports in cache.tokens().
    GenerationResult generate(Cache& cache, const std::vector<int32_t>& input, const GenerationConfig& config,
                              const std::function<void(std::string_view)>& on_text = {},
                              const std::atomic<bool>* cancel = nullptr);

private:
    const Model& model_;
    Backend& backend_;
};

}  // namespace kvchat
