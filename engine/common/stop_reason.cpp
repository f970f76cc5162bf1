#include "engine/common/stop_reason.h"

namespace kvchat {

std::string_view stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::EndOfSequence: return "eos";
        case StopReason::EndOfTurn: return "end_of_turn";
        case StopReason::StopString: return "stop_string";
        case StopReason::MaxNewTokens: return "max_new_tokens";
        case StopReason::ContextFull: return "context_full";
        case StopReason::Stopped: return "cancelled";
    }
    return "cancelled";
}

std::optional<StopReason> parse_stop_reason(std::string_view name) {
    for (StopReason r : {StopReason::EndOfSequence, StopReason::EndOfTurn, StopReason::StopString,
                         StopReason::MaxNewTokens, StopReason::ContextFull, StopReason::Stopped})
        if (stop_reason_name(r) == name) return r;
    return std::nullopt;
}

}  // namespace kvchat
