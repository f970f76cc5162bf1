// ChatSession's strategy switch: the preview and the verb (a file of its own, as the
// verb is the only part of the registry that plans a conversion).
#include "engine/chat/conversation_cache.h"
#include "engine/chat/chat_session.h"

namespace kvchat {

double ChatSession::rebuild_tok_s() {
    // A rebuild is one long prefill: the machine's measured batch speed prices it; the last
    // turn's own speed (of however few tokens) only when none is kept.
    if (const auto& kept = kept_batch_speed()) return 1000.0 / kept->ms_per_token();
    return prefill_tok_s_;
}

ConversionPlan ChatSession::plan_switch(int64_t id, const std::string& spec) {
    std::vector<std::string> notices;
    Entry& e = prepare(id, notices);
    const Unlock unlock{e};
    for (std::string& n : notices) notices_.push_back(std::move(n));
    ConversionPlan plan = plan_conversion(e.conversation->cache(), spec, rebuild_tok_s());
    // Where each message begins in the cache, so the preview can say which messages lose tokens.
    plan.message_starts = e.conversation->chat_template().render(e.conversation->messages(), false).message_starts;
    enforce_budget(&e);
    return plan;
}

ConversionPlan ChatSession::switch_strategy(int64_t id, const std::string& spec, const Progress& progress) {
    std::vector<std::string> notices;
    Entry& e = prepare(id, notices);
    const Unlock unlock{e};
    for (std::string& n : notices) notices_.push_back(std::move(n));
    Conversation& c = *e.conversation;
    const CacheSpec target = conversation_cache_spec(spec);
    ConversionPlan plan = plan_conversion(c.cache(), target, rebuild_tok_s());
    if (plan.kind != ConversionPlan::Kind::Unchanged) {
        // Throws (Cancelled included) with the old cache as it was.
        c.switch_strategy(target, progress);
        e.dirty = true;
    }
    store_.set_conversation_cache_spec(e.id, to_string(target));
    e.switched_from.reset();
    if (e.dirty) save_snapshot(e, notices_);
    enforce_budget(&e);
    return plan;
}

}  // namespace kvchat
