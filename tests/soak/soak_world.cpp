#include "soak/soak_world.h"

#include "engine/cache/cache_spec.h"
#include "engine/chat/conversation.h"
#include "engine/generate/generator.h"

#include <algorithm>
#include <limits>

namespace kvchat::soak {

namespace {

Role role_of(const std::string& name) {
    if (name == "system") return Role::System;
    if (name == "assistant") return Role::Assistant;
    return Role::User;
}

}  // namespace

bool ConversationModel::has_user_message() const {
    return std::any_of(messages.begin(), messages.end(), [](const Message& m) { return m.role == "user"; });
}

ConversationModel* World::conversation(const std::string& title) {
    for (ConversationModel& c : conversations)
        if (c.title == title) return &c;
    return nullptr;
}

const ConversationModel* World::conversation(const std::string& title) const {
    return const_cast<World*>(this)->conversation(title);
}

PrefixModel* World::prefix(const std::string& name) {
    for (PrefixModel& p : prefixes)
        if (p.name == name) return &p;
    return nullptr;
}

void World::remove_conversation(const std::string& title) {
    std::erase_if(conversations, [&](const ConversationModel& c) { return c.title == title; });
}

Message message_of(const DbMessage& m) { return {m.role, m.content, m.token_ids}; }

World World::from_db(const DbView& db) {
    World w;
    for (const DbConversation& c : db.conversations) {
        ConversationModel m{c.id, c.title, c.cache_spec, {}};
        for (const DbMessage& msg : c.messages) m.messages.push_back(message_of(msg));
        w.conversations.push_back(std::move(m));
    }
    for (const DbPrefix& p : db.prefixes) {
        PrefixModel m{p.name, {}};
        for (const DbMessage& msg : p.messages) m.messages.push_back({msg.role, msg.content, {}});
        w.prefixes.push_back(std::move(m));
    }
    return w;
}

std::string canonical_spec(const std::string& spec) { return to_string(parse_cache_spec(spec.empty() ? "dynamic" : spec)); }

SpecTraits traits_of(const std::string& text) {
    const CacheSpec s = parse_cache_spec(text.empty() ? "dynamic" : text);
    SpecTraits t;
    t.capacity = s.fixed() ? s.max_len : 0;
    // bf16 keeps fewer mantissa bits than the f16 the model's attention rounds to: never exact.
    const bool full_precision = !(s.dtype && *s.dtype == KvDtype::BF16);
    t.lossless = s.lossless() && full_precision;
    if (!t.lossless && full_precision) {
        int64_t until = std::numeric_limits<int64_t>::max();
        if (s.nbits > 0) until = std::min<int64_t>(until, s.residual);
        if (s.retention() != RetentionKind::All) until = std::min<int64_t>(until, s.window);
        t.exact_until = until;
    }
    return t;
}

Reference::Reference(const Model& model, Backend& backend)
    : model_(model), backend_(backend), template_(ChatTemplate::for_model(model)) {}

int64_t Reference::context() const { return model_.config().n_ctx_train; }

std::vector<int32_t> Reference::prompt(const std::vector<Message>& messages) const {
    Conversation c(model_, backend_, template_, "dynamic");
    for (const Message& m : messages) c.append(role_of(m.role), m.text, template_.answer_ids_from_file(m.ids));
    return c.render_for_reply().tokens;
}

ReferenceAnswer Reference::answer(const std::vector<Message>& messages, int n, int64_t limit) {
    if (limit <= 0 || limit > context()) limit = context();
    std::string key = std::to_string(n) + "/" + std::to_string(limit);
    for (const Message& m : messages) {
        key += "|" + m.role + ":" + std::to_string(m.text.size()) + ":" + m.text + ":";
        for (int32_t id : m.ids) key += std::to_string(id) + ",";
    }
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;

    // The transcript renders as a reopened conversation renders it (stored answer ids adopted the
    // way the registry adopts them); the cache plays no part in the answer.
    Conversation c(model_, backend_, template_, "dynamic");
    for (const Message& m : messages) c.append(role_of(m.role), m.text, template_.answer_ids_from_file(m.ids));
    const RenderedChat rendered = c.render_for_reply();
    ReferenceAnswer a;
    a.limit = limit;
    a.prompt_tokens = static_cast<int64_t>(rendered.tokens.size());
    if (a.prompt_tokens + 1 > limit) {
        a.refused = true;
    } else {
        GenerationConfig g;
        g.max_new_tokens = n;
        g.sampling.greedy = true;
        g.use_cache = false;
        g.max_context = limit;
        for (int32_t id : template_.stop_tokens()) g.stop_tokens.push_back(id);
        for (const std::string& s : template_.stop_strings()) g.stop_strings.push_back(s);
        Generator gen(model_, backend_);
        const GenerationResult r = gen.generate(c.cache(), rendered.tokens, g);
        a.ids = r.tokens;
        a.text = r.text;
        a.stop_reason = std::string(stop_reason_name(r.stop_reason));
        ++computed_;
    }
    memo_.emplace(std::move(key), a);
    return a;
}

}  // namespace kvchat::soak
