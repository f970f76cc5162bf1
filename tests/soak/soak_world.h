#pragma once
// The soak test's expected state and its oracle: the conversations (messages with the ids each
// answer was generated as, the cache strategy), the saved prefixes, and the greedy answer the
// model gives to a transcript without a cache (`--no-cache`: the whole context recomputed at every
// step), which every lossless strategy must reproduce token for token.
#include "engine/chat/chat_template.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "soak/soak_support.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvchat::soak {

struct Message {
    std::string role;  // "system", "user", "assistant"
    std::string text;
    std::vector<int32_t> ids;  // an answer's generated ids (empty for typed text and prefix copies)
    bool operator==(const Message&) const = default;
};

struct ConversationModel {
    int64_t id = 0;  // the store's id
    std::string title;
    std::string spec;  // canonical cache spec
    std::vector<Message> messages;
    bool last_unanswered() const { return !messages.empty() && messages.back().role == "user"; }
    bool has_user_message() const;
};

struct PrefixModel {
    std::string name;
    std::vector<Message> messages;  // role and text
};

struct World {
    std::vector<ConversationModel> conversations;
    std::vector<PrefixModel> prefixes;
    ConversationModel* conversation(const std::string& title);
    const ConversationModel* conversation(const std::string& title) const;
    PrefixModel* prefix(const std::string& name);
    void remove_conversation(const std::string& title);
    // The whole state as the database holds it (after a failure, to go on from there).
    static World from_db(const DbView& db);
};

Message message_of(const DbMessage& m);

// The canonical text of a spec (what the store keeps).
std::string canonical_spec(const std::string& spec);

// How a strategy's answers compare with the no-cache reference.
struct SpecTraits {
    bool lossless = false;      // keeps every token at full precision: must equal the reference
    int64_t exact_until = 0;    // lossy: equal while the context stays within this many tokens (0: never)
    int64_t capacity = 0;       // fixed storage: the most tokens it holds (0: unbounded)
};
SpecTraits traits_of(const std::string& spec);

struct ReferenceAnswer {
    bool refused = false;  // the prompt and one new token do not fit
    int64_t prompt_tokens = 0;
    int64_t limit = 0;
    std::vector<int32_t> ids;
    std::string text;
    std::string stop_reason;
};

class Reference {
public:
    Reference(const Model& model, Backend& backend);
    // The greedy answer (at most n tokens) to `messages` with a context of `limit` tokens
    // (0: the model's), recomputing the whole context at every step.
    ReferenceAnswer answer(const std::vector<Message>& messages, int n, int64_t limit);
    // Tokens of the rendered transcript with the generation prompt.
    int64_t prompt_tokens(const std::vector<Message>& messages) const { return static_cast<int64_t>(prompt(messages).size()); }
    std::vector<int32_t> prompt(const std::vector<Message>& messages) const;
    const ChatTemplate& chat_template() const { return template_; }
    int64_t context() const;
    size_t computed() const { return computed_; }

private:
    const Model& model_;
    Backend& backend_;
    ChatTemplate template_;
    std::map<std::string, ReferenceAnswer> memo_;
    size_t computed_ = 0;
};

}  // namespace kvchat::soak
