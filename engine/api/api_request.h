#pragma once
// The request bodies of POST /v1/chat/completions and /v1/completions, read from untrusted JSON:
// every field the server uses is checked for its type and range, and anything wrong is an
// ApiError (400) naming the field. Fields the server cannot honour (n > 1, an additive presence
// penalty, tools, logprobs) are refused by name rather than ignored.
#include "engine/api/api_error.h"
#include "engine/chat/chat_template.h"
#include "engine/generate/generator.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat::api {

// What a request asks of the sampler and the answer's length; unset fields keep the server's
// defaults (the chat settings the window and kvchat-cli share).
struct SamplingRequest {
    std::optional<int> max_tokens;  // max_tokens or max_completion_tokens
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int> top_k;                    // llama-server's extension
    std::optional<double> min_p;                 // llama-server's extension
    std::optional<double> repetition_penalty;    // kvchat's (multiplicative, 1 = off)
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;

    // `base` with the request's fields applied: temperature 0 is greedy (argmax, no repetition
    // penalty unless asked for), as OpenAI's and llama-server's clients mean it. Throws ApiError.
    GenerationConfig apply(GenerationConfig base) const;
};

struct ChatCompletionRequest {
    std::string model;  // empty: the loaded model
    std::vector<ChatMessage> messages;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    SamplingRequest sampling;
    std::string cache_spec;      // kvchat's `cache`: the strategy of a new conversation
};

struct CompletionRequest {
    std::string model;
    std::string prompt;
    bool stream = false;
    bool include_usage = false;
    SamplingRequest sampling;
};

// Bodies nested deeper than this are refused before they are parsed.
inline constexpr int kMaxJsonDepth = 64;

ChatCompletionRequest parse_chat_completion(std::string_view body);
CompletionRequest parse_completion(std::string_view body);

}  // namespace kvchat::api
