// ChatSession::answer_messages: the local API server's request (a whole message list, as OpenAI's
// chat completions take it) answered from the stored cache that shares the most of it.
//
// Candidates are compared without reading a snapshot: a conversation by its stored messages (role
// and text, message by message, then the common messages rendered once for the token count; only
// conversations that open with the request's first message are read at all), a saved prefix by
// the tokens stored with it. Comparing messages rather than each conversation's
// rendered tokens costs one read of the stored text and no tokenization per conversation, and it
// is the unit reuse happens in anyway: a conversation is continued or branched at a message.
#include "engine/chat/chat_session.h"

#include "engine/chat/conversation_cache.h"
#include "engine/common/quoted.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace kvchat {

namespace {

struct Candidate {
    int64_t conversation = 0;  // or
    int64_t prefix = 0;
    std::string title;
    size_t common = 0;   // messages shared with the request (a conversation)
    bool whole = false;  // the conversation's whole transcript begins the request
    int64_t tokens = 0;  // rendered tokens shared with the request
    int64_t recency = 0;
};

int64_t common_tokens(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return static_cast<int64_t>(i);
}

}  // namespace

MessagesResult ChatSession::answer_messages(const MessagesRequest& request, const TurnOptions& options,
                                            const TurnCallbacks& callbacks) {
    // ---- the request checked: refused before anything is stored ----
    model();  // (refuses without a model)
    const std::vector<ChatMessage>& in = request.messages;
    if (in.empty()) throw Error("the request has no messages: there is nothing to answer");
    if (in.back().role != Role::User)
        throw Error("the last message is the " + std::string(role_name(in.back().role)) +
                    "'s, not the user's: there is nothing to answer");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < in.size(); ++i) {
        // (An answer may be empty: a model can end its reply at once, and the client sends it back.)
        if (in[i].role != Role::Assistant && is_blank_text(in[i].content))
            throw Error("message " + std::to_string(i + 1) + " (" + std::string(role_name(in[i].role)) +
                        ") is empty (only white space): nothing was stored");
        // As the store will keep it, so stored conversations compare equal to it.
        msgs.emplace_back(in[i].role, repair_utf8(in[i].content).text);
    }
    if (request.origin != "app" && request.origin != "api")
        throw Error("conversation origin " + in_quotes(request.origin) + " is neither \"app\" nor \"api\"");
    const std::string spec = canonical_cache_spec(request.cache_spec);  // (a bad one throws, naming it)
    if (const std::string refused = chat_template().refusal(msgs); !refused.empty())
        throw Error("the model's chat template refuses these messages: " + refused);
    const size_t n = msgs.size();
    const std::vector<int32_t> wanted = chat_template().render(msgs, true).tokens;

    // A failure past the checks (the store, memory) ends the turn as take_turn's do: it is in the result.
    try {
        // ---- the candidates: stored conversations and saved prefixes ----
        std::map<size_t, int64_t> tokens_of;  // common messages -> rendered tokens shared with the request
        auto shared_tokens = [&](size_t k) {
            auto it = tokens_of.find(k);
            if (it == tokens_of.end()) {
                const std::vector<ChatMessage> head(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(k));
                it = tokens_of.emplace(k, common_tokens(chat_template().render(head, false).tokens, wanted)).first;
            }
            return it->second;
        };
        std::vector<Candidate> candidates;
        const std::string& fingerprint = model().fingerprint();
        for (const ConversationRecord& rec : store_.conversations_opening_with(msgs[0].role, msgs[0].content)) {
            if (rec.model_fingerprint != fingerprint) continue;  // its cache is another model's
            const std::vector<MessageRecord> stored = store_.list_messages(rec.id);
            // The last message of the request is always the new one: it is answered, never matched.
            size_t k = 0;
            while (k < stored.size() && k + 1 < n && stored[k].role == msgs[k].role && stored[k].content == msgs[k].content)
                ++k;
            if (k == 0) continue;
            Candidate c;
            c.conversation = rec.id;
            c.title = rec.title;
            c.common = k;
            c.whole = k == stored.size();
            c.tokens = shared_tokens(k);
            c.recency = rec.updated_ms;
            if (c.tokens > 0) candidates.push_back(std::move(c));
        }
        for (const PrefixRecord& p : store_.list_prefixes()) {
            if (p.model_fingerprint != fingerprint || p.tokens.empty() || p.tokens.size() >= wanted.size()) continue;
            if (!std::equal(p.tokens.begin(), p.tokens.end(), wanted.begin())) continue;
            Candidate c;
            c.prefix = p.id;
            c.title = p.name;
            c.tokens = static_cast<int64_t>(p.tokens.size());
            c.recency = p.last_used_ms.value_or(p.created_ms);
            candidates.push_back(std::move(c));
        }
        // The longest first; of equally long ones a conversation to continue before one to branch (a
        // client's own conversation, rather than a copy of it beside an earlier branch), then the
        // most recent (the conversations came most recent first).
        std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
            if (a.tokens != b.tokens) return a.tokens > b.tokens;
            if (a.whole != b.whole) return a.whole;
            return a.recency > b.recency;
        });

        // ---- the best one another process is not changing right now ----
        const Candidate* chosen = nullptr;
        std::unique_ptr<ConversationLock> held;
        for (const Candidate& c : candidates) {
            if (c.conversation != 0) {
                try {
                    held = std::make_unique<ConversationLock>(lock_path(c.conversation, c.title), c.title,
                                                              std::chrono::milliseconds(0));
                } catch (const Error&) {
                    continue;  // locked by another process (or its lock cannot be had): passed over
                }
            }
            chosen = &c;
            break;
        }

        MessagesResult result;
        const std::string& last = msgs.back().content;
        auto history_from = [&](size_t k) {
            return std::vector<ChatMessage>(msgs.begin() + static_cast<std::ptrdiff_t>(k), msgs.end() - 1);
        };
        auto first_user = [&] {
            for (const ChatMessage& m : msgs)
                if (m.role == Role::User) return m.content;
            return last;
        };
        std::string base = trim_white_space(repair_utf8(request.title).text);
        if (base.empty()) base = title_from_message(first_user());
        if (base.empty()) base = "Chat";
        const std::string title = unique_title(base);
        // A conversation made for this request goes again when its turn stored nothing.
        auto made_for_request = [&](int64_t id, const TurnResult& turn) {
            const bool kept = turn.ending == TurnResult::Ending::Answered || turn.ending == TurnResult::Ending::Stopped ||
                              turn.changed;
            if (!kept) {
                try {
                    remove(id);
                } catch (const std::exception&) {
                    // It holds only copies (a branch) or nothing of the user's: at worst a line in the list.
                }
            }
        };

        if (chosen && chosen->conversation != 0 && chosen->whole) {
            // The client sends the whole exchange each time: the conversation goes on.
            Entry& e = entry(chosen->conversation);
            e.lock = std::move(held);  // (the turn takes it over and releases it when it ends)
            TurnRequest turn = TurnRequest::send(last);
            turn.history = history_from(chosen->common);
            turn.whole_exchange = true;
            result.turn = take_turn(chosen->conversation, turn, options, callbacks);
            for (Entry& x : entries_)
                if (x.id == chosen->conversation) x.lock.reset();
            result.conversation_id = chosen->conversation;
            result.reused_from = chosen->conversation;
            return result;
        }

        int64_t id = 0;
        std::vector<std::string> notices;
        if (chosen && chosen->conversation != 0) {
            // It diverges after `common` messages: a branch there, with the parent's cache, answers.
            id = make_branch(chosen->conversation, chosen->common, title, request.origin, notices).id;
            held.reset();  // (the parent is only read)
            result.reused_from = chosen->conversation;
        } else {
            // New; its first turn starts from the longest saved prefix that begins it, if any.
            OpenOptions open;
            open.cache_spec = spec;
            open.origin = request.origin;
            id = create(title, open);
        }
        TurnRequest turn = TurnRequest::send(last);
        turn.history = history_from(chosen && chosen->conversation != 0 ? chosen->common : 0);
        turn.whole_exchange = true;
        result.turn = take_turn(id, turn, options, callbacks);
        result.turn.notices.insert(result.turn.notices.begin(), notices.begin(), notices.end());
        made_for_request(id, result.turn);
        const bool kept = store_.find_conversation_by_id(id).has_value();
        result.conversation_id = kept ? id : 0;
        if (chosen && chosen->prefix != 0 && result.turn.figures.prefix_tokens > 0)
            result.reused_prefix = chosen->prefix;
        if (!kept) result.reused_from = 0;
        return result;
    } catch (...) {
        MessagesResult failed;
        failed.turn.ending = TurnResult::Ending::Failed;
        failed.turn.thrown = std::current_exception();
        try {
            throw;
        } catch (const std::exception& e) {
            failed.turn.problem = e.what();
        } catch (...) {
            failed.turn.problem = "the request failed";
        }
        return failed;
    }
}

}  // namespace kvchat
