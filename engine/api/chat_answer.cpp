#include "engine/api/chat_answer.h"

#include "engine/error.h"

namespace kvchat::api {

// Until ChatSession::answer_messages is merged: a new conversation per request, holding the
// system message and the last user message (the history in between is not yet carried).
ChatAnswer answer_chat(ChatSession& session, const std::vector<ChatMessage>& messages, const std::string& cache_spec,
                       const TurnOptions& options, const TurnCallbacks& callbacks) {
    OpenOptions open;
    open.cache_spec = cache_spec;
    if (messages.front().role == Role::System) open.system = messages.front().content;
    ChatAnswer a;
    a.conversation_id = session.create(title_from_message(messages.back().content), open);
    a.turn = session.take_turn(a.conversation_id, TurnRequest::send(messages.back().content), options, callbacks);
    if (a.turn.ending == TurnResult::Ending::Cancelled && a.turn.thrown) std::rethrow_exception(a.turn.thrown);
    return a;
}

}  // namespace kvchat::api
