#pragma once
// Comparing kvchat's greedy choices with llama.cpp's golden tokens (the golden-model suites): the
// free-running continuation, and teacher-forced, where llama.cpp's tokens go in and each next-token
// choice is compared.
#include "engine/compute/backend.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvchat::test {

// nullopt when greedy decoding after `prompt` gives exactly `want` (end of sequence does not stop
// it: the golden tokens are plain argmax steps), else the first token where it differs.
inline std::optional<size_t> greedy_divergence(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& want) {
    auto cache = model.make_default_cache(backend);
    Generator gen(model, backend);
    GenerationConfig g;
    g.max_new_tokens = static_cast<int>(want.size());
    g.sampling.greedy = true;
    g.stop_at_eos = false;
    const auto r = gen.generate(*cache, prompt, g);
    if (r.tokens == want) return std::nullopt;
    size_t k = 0;
    while (k < want.size() && k < r.tokens.size() && r.tokens[k] == want[k]) ++k;
    return k;
}

// Of want.size() steps fed llama.cpp's tokens after `prompt`, how many pick llama.cpp's next token.
inline int64_t teacher_forced_agreement(const Model& model, Backend& backend, const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& want) {
    const int64_t n_vocab = model.config().n_vocab;
    auto forced = model.make_default_cache(backend);
    std::vector<float> logits;
    model.forward(backend, *forced, prompt.data(), static_cast<int64_t>(prompt.size()), Logits::Last, logits);
    int64_t same = 0;
    for (size_t k = 0; k < want.size(); ++k) {
        const int64_t ours = std::max_element(logits.begin(), logits.begin() + n_vocab) - logits.begin();
        same += ours == want[k];
        model.forward(backend, *forced, &want[k], 1, Logits::Last, logits);
    }
    return same;
}

}  // namespace kvchat::test
