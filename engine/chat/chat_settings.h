#pragma once
// The chat settings kept in the database's settings table (keys "chat.*"), shared by the window
// and kvchat-cli so both choose alike: threads, how many caches stay in memory and their memory
// budget, the context policy, the default strategy, sampling, answer length and the default
// system prompt. Also the rule for the strategy a turn falls back to when its cache cannot grow.
#include "engine/chat/conversation.h"
#include "engine/generate/sampler.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvchat {

class Store;

// Sampling for chat, where the generic SamplerConfig (kvchat-cli generate's) is a text completer's:
// somewhat cooler and narrower, as LM Studio's and llama.cpp's chat defaults (temperature 0.7-0.8,
// top-k 40, top-p 0.9-0.95, min-p 0.05), and a repetition penalty of 1.1, so a small model does not
// answer with one line over and over.
inline SamplerConfig chat_sampling_defaults() {
    SamplerConfig c;
    c.temperature = 0.7f;
    c.top_k = 40;
    c.top_p = 0.9f;
    c.min_p = 0.05f;
    c.repetition_penalty = 1.1f;
    return c;
}

struct ChatSettings {
    int threads = 0;                    // 0: one per core
    std::string device = "cpu";         // where the model computes: cpu, cuda or cuda:N (engine/compute/device.h)
    int resident_caches = 4;
    int64_t cache_memory_budget = 0;    // bytes; 0: no limit
    ContextPolicy context_policy = ContextPolicy::Refuse;
    std::string default_strategy = "dynamic";
    SamplerConfig sampling = chat_sampling_defaults();  // temperature, top_k, top_p, min_p, repetition penalty, seed
    bool random_seed = true;            // a new seed each turn (sampling.seed is then unused)
    int max_new_tokens = 1024;          // a long answer fits; the model's end of turn ends it sooner
    std::string system_prompt;          // default system prompt of new conversations

    // What load() found wrong (a value that could not be used; its default stands instead).
    std::vector<std::string> notices;

    // Missing keys: defaults; bad values: defaults and a notice naming the key and the value.
    static ChatSettings load(const Store& store);
    // Throws kvchat::Error naming the setting when a value is out of range; nothing is written then.
    void save(Store& store) const;
    void validate() const;

    // The options of a turn in a conversation whose strategy is `conversation_spec`: a quantized
    // strategy falls back to the same quantized strategy offloaded (keeping the user's choice),
    // any other to "offloaded".
    TurnOptions turn_options(const std::string& conversation_spec) const;
    // The same for a conversation with its own settings: the values it sets win over these (a seed
    // it sets is used as it is, never replaced by a random one).
    TurnOptions turn_options(const std::string& conversation_spec, const ConversationSettings& own) const;
};

// Throws kvchat::Error naming the value when one of a conversation's own settings is out of the
// global setting's range, or its context length is not from 16 to `model_context`.
void validate_conversation_settings(const ConversationSettings& own, int64_t model_context);

// The strategy a conversation of strategy `spec` falls back to when its cache cannot grow.
std::string fallback_strategy(const std::string& spec);

}  // namespace kvchat
