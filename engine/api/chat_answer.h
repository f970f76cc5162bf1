#pragma once
// A chat completion's answer: the request's messages matched against the stored conversations
// (ChatSession's longest-common-prefix match), the next answer computed and the exchange stored
// as a conversation coming from the API.
#include "engine/chat/chat_session.h"

#include <string>
#include <vector>

namespace kvchat::api {

struct ChatAnswer {
    TurnResult turn;
    int64_t conversation_id = 0;
    int64_t reused_from = 0;    // the stored conversation whose cache it continued (0: none)
    int64_t reused_prefix = 0;  // the saved prefix it started from (0: none)
};

ChatAnswer answer_chat(ChatSession& session, const std::vector<ChatMessage>& messages, const std::string& cache_spec,
                       const TurnOptions& options, const TurnCallbacks& callbacks);

}  // namespace kvchat::api
