#pragma once
// Why an answer ended: the generator decides it, the store keeps it with the answer (schema 6)
// and every front end shows it. Here, below both, so neither has to include the other.
#include <optional>
#include <string_view>

namespace kvchat {

enum class StopReason {
    EndOfSequence,  // the model's end of sequence
    EndOfTurn,      // the chat format's end of turn
    StopString,     // a stop string appeared
    MaxNewTokens,   // the answer reached its length limit
    ContextFull,    // the context (or a static cache) is full
    Stopped,        // the cancel flag was set
};
// The name outputs and the store give it: eos, end_of_turn, stop_string, max_new_tokens,
// context_full, cancelled.
std::string_view stop_reason_name(StopReason reason);
// The reason named `name` (as stop_reason_name writes it); nullopt for any other text.
std::optional<StopReason> parse_stop_reason(std::string_view name);

}  // namespace kvchat
