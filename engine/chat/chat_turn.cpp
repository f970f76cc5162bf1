// ChatSession's turn: take_turn and its phases, read top to bottom, and the verbs that run it (a
// file of its own, as the turn is what the window, kvchat-cli and the server all call).
#include "engine/chat/chat_session.h"

#include "engine/common/quoted.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <algorithm>
#include <chrono>
#include <exception>

namespace kvchat {

namespace {

bool blank(std::string_view text) { return is_blank_text(text); }

// A turn that failed before its answer was stored leaves the conversation as it was: the error
// says so, so the user knows the message was not kept (the window puts it back in the box).
constexpr const char* kUntouched = " (the conversation was left as it was)";

// The start of a message, for a refusal that quotes it.
std::string excerpt(std::string_view text) {
    constexpr size_t kMax = 60;
    if (text.size() <= kMax) return in_quotes(text);
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
    return in_quotes(std::string(text.substr(0, cut)) + "...");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The result of a turn that ended without an answer.
TurnResult ended(std::exception_ptr thrown, bool changed) {
    TurnResult r;
    r.thrown = thrown;
    r.changed = changed;
    r.ending = TurnResult::Ending::Failed;
    try {
        std::rethrow_exception(thrown);
    } catch (const Cancelled& e) {
        r.ending = TurnResult::Ending::Cancelled;
        r.problem = e.what();
    } catch (const std::exception& e) {
        r.problem = e.what();
    } catch (...) {
        r.problem = "the turn failed";
    }
    return r;
}

}  // namespace

TurnResult ChatSession::take_turn(int64_t id, const TurnRequest& request, const TurnOptions& options,
                                  const TurnCallbacks& callbacks) {
    const auto t0 = std::chrono::steady_clock::now();
    bool started = false;  // the conversation may have changed from here on
    try {
        if (request.kind != TurnRequest::Kind::Regenerate && blank(request.text))
            throw Error(request.kind == TurnRequest::Kind::Send
                            ? "the message is empty (only white space): nothing was sent"
                            : "the message is empty (only white space): nothing was changed");
        std::vector<std::string> notices;
        std::vector<MessageRecord> stored;  // the transcript as stored: the turn's one read of it
        ConversationRecord row;
        Entry& e = prepare(id, notices, callbacks.progress, &stored, &row);
        const Unlock unlock{e};
        started = true;
        return run_turn(e, request, stored, row, t0, options, callbacks, notices);
    } catch (...) {
        // Out of run_turn only when putting the conversation back failed.
        return ended(std::current_exception(), started);
    }
}

TurnResult ChatSession::run_turn(Entry& e, const TurnRequest& request, const std::vector<MessageRecord>& before,
                                 const ConversationRecord& row, std::chrono::steady_clock::time_point t0,
                                 const TurnOptions& options, const TurnCallbacks& callbacks,
                                 std::vector<std::string>& notices) {
    using Kind = TurnRequest::Kind;
    Conversation& c = *e.conversation;
    const std::vector<ChatMessage> was = c.messages();
    size_t keep = before.size();  // stored messages the request leaves in place
    std::string new_title;        // the chat's name from its first message
    std::optional<RenderedChat> rendered;
    std::optional<MessageRecord> question;  // the user's message the turn answers, as stored
    // Regenerate, edit: what they replace is kept as a version (stored from message `keep` on).
    std::optional<KeptVersion> kept;

    // The request, in memory; rendered; then in the store. Refused or failed before the store
    // changed, the conversation is as it was.
    try {
        const RepairedUtf8 fixed = repair_utf8(request.text);
        if (fixed.replaced) notices.push_back("your message had invalid UTF-8; it was replaced by U+FFFD");
        bool check = true;
        switch (request.kind) {
            case Kind::Send:
                // (A conversation just started from a prefix may end with the prefix's user message:
                // the new one continues it, as the prefix was saved to be used.)
                if (!c.messages().empty() && c.messages().back().role == Role::User && e.prefix_tokens == 0 &&
                    !request.whole_exchange)
                    throw Error("conversation " + in_quotes(e.title) + " ends with a message of yours that has no answer (" +
                                excerpt(c.messages().back().content) +
                                ", left by a crash or a failed turn); regenerate answers it (/regenerate in kvchat-cli "
                                "chat, --regenerate with --conversation), or edit it; nothing was sent");
                if (request.names_new_chat && is_default_title(e.title) &&
                    std::none_of(c.messages().begin(), c.messages().end(),
                                 [](const ChatMessage& m) { return m.role == Role::User; }))
                    new_title = title_from_message(fixed.text);
                for (const ChatMessage& m : request.history) {
                    if (m.role != Role::Assistant && blank(m.content))
                        throw Error("a message of the history (" + std::string(role_name(m.role)) +
                                    ") is empty (only white space): nothing was sent");
                    const RepairedUtf8 h = repair_utf8(m.content);
                    if (h.replaced) notices.push_back("a message of the history had invalid UTF-8; it was replaced by U+FFFD");
                    c.append(m.role, h.text);
                }
                c.append(Role::User, fixed.text);
                break;
            case Kind::Regenerate: {
                const auto& msgs = c.messages();
                if (msgs.empty() || (msgs.back().role != Role::Assistant && msgs.back().role != Role::User))
                    throw Error("conversation " + in_quotes(e.title) + " has no answer to regenerate");
                // An unanswered message is answered as it stands.
                check = msgs.back().role == Role::Assistant;
                if (check) {
                    keep = msgs.size() - 1;
                    c.truncate(keep);
                }
                break;
            }
            case Kind::Edit:
                if (request.ordinal >= c.messages().size() || c.messages()[request.ordinal].role != Role::User)
                    throw Error("message " + std::to_string(request.ordinal) + " of conversation " + in_quotes(e.title) +
                                " is not a user message");
                if (request.ordinal >= before.size())
                    throw Error("the store lacks message " + std::to_string(request.ordinal));
                keep = request.ordinal;
                c.edit(request.ordinal, fixed.text);
                break;
        }

        // 1. Render the conversation.
        rendered = c.render_for_reply();
        if (check) c.check_fits(*rendered, options);
        if (request.kind == Kind::Send) {
            c.finish_loading(callbacks.progress);
            // A conversation with nothing cached may start with a saved prefix.
            if (!c.has_cache() || c.cache().seq_length() == 0)
                if (auto p = prefixes().longest_match(rendered->tokens)) {
                    c.set_cache(prefixes().load_cache(*p, c.cache_spec(), notices, callbacks.progress));
                    e.prefix_tokens = static_cast<int64_t>(p->tokens.size());
                    notices.push_back("reused the cache of prefix " + in_quotes(p->name) + " (" +
                                      std::to_string(p->tokens.size()) + " tokens)");
                }
        }
        // The raw text, so the store records that it repaired it (it repairs it the same way).
        switch (request.kind) {
            case Kind::Send:
                if (request.history.empty()) {
                    question = store_.append_message(e.id, Role::User, request.text);
                } else {
                    // The history and the message in one transaction: a crash keeps all or none.
                    std::vector<PrefixMessage> added;
                    for (const ChatMessage& m : request.history) added.push_back({m.role, m.content});
                    added.push_back({Role::User, request.text});
                    question = store_.append_messages(e.id, added).back();
                }
                break;
            // What is replaced is kept as a version of its place, never deleted.
            case Kind::Regenerate:
                if (keep < before.size()) kept = store_.keep_version(e.id, static_cast<int64_t>(keep));
                break;
            case Kind::Edit:
                kept = store_.keep_version(e.id, static_cast<int64_t>(request.ordinal));
                question = store_.append_message(e.id, Role::User, request.text);
                break;
        }
        if (!question)  // regenerate: the last message of the user's that stays
            for (size_t i = keep; i-- > 0;)
                if (before[i].role == Role::User) {
                    question = before[i];
                    break;
                }
    } catch (...) {
        c.truncate(0);
        for (const ChatMessage& m : was) c.append(m.role, m.content, m.tokens);
        // (An edit whose message could not be stored after its old one was kept aside.)
        if (kept && !take_back(e, before, keep, kept)) return ended(std::current_exception(), true);
        return ended(std::current_exception(), false);
    }

    try {
        // 2-4. Match the cache, prefill what it lacks, generate (Conversation::answer).
        const size_t messages_before = c.messages().size();
        const double before_ms = ms_since(t0);
        TurnResult r;
        // The machine's measured batch speed prices the reuse when this conversation has measured
        // none as large (Conversation keeps the largest batch it is told of).
        if (const auto& kept = kept_batch_speed()) c.note_prefill_speed(kept->tokens, kept->ms);
        try {
            r = c.answer(*rendered, options, callbacks);
        } catch (...) {
            e.dirty = true;  // the cache may hold part of the answer: save it with the next snapshot
            throw;
        }
        AnswerFigures& f = r.figures;
        // Opening, loading and prefix reuse count toward the first token.
        if (f.ttft_ms) *f.ttft_ms += before_ms;
        // The first answer of a conversation started from a prefix reuses the prefix's tokens.
        f.prefix_tokens = std::min(e.prefix_tokens, f.cached_tokens);
        e.prefix_tokens = 0;
        if (r.prefill_ms > 0 && f.computed_tokens > 0)
            prefill_tok_s_ = static_cast<double>(f.computed_tokens) * 1000.0 / r.prefill_ms;
        // A large prefill is a measurement of the machine's batch speed; without any yet, reused
        // tokens are priced after a short one (once per model and machine: it is kept).
        note_batch_speed({f.computed_tokens, r.prefill_ms});
        if (!f.prefill_saved_ms && f.cached_tokens > 0) {
            try {
                f.prefill_saved_ms = static_cast<double>(f.cached_tokens) * batch_prefill_speed().ms_per_token();
            } catch (const std::exception&) {
                // Not measurable (a model too small for a batch): no saving is claimed.
            }
        }

        // 5. Store the answer (and a strategy the turn switched to).
        e.dirty = true;
        if (c.messages().size() > messages_before) {
            r.answer = store_.append_message(e.id, Role::Assistant, c.messages().back().content, r.figures);
        }
        // (Recorded where the question is: the strategy held the question and its answer.)
        if (row.cache_spec != c.cache_spec())
            store_.set_conversation_cache_spec(e.id, c.cache_spec(),
                                               question ? std::optional<int64_t>(question->ordinal) : std::nullopt);
        e.switched_from.reset();  // (a switch asked on open is made by this turn)

        // 6. Snapshot the cache: the message is committed, and under the lock the transcript is
        // the stored one.
        save_snapshot(e, notices, true);
        enforce_budget(&e);

        if (!new_title.empty()) {
            try {
                rename(e.id, unique_title(new_title));
            } catch (const Error&) {
                // The default title stays; the user can rename it.
            }
        }
        r.notices.insert(r.notices.begin(), notices.begin(), notices.end());
        r.cache_spec = c.cache_spec();
        r.question = std::move(question);
        r.ending = f.stop_reason == StopReason::Stopped ? TurnResult::Ending::Stopped : TurnResult::Ending::Answered;
        return r;
    } catch (const Cancelled&) {
        // What the request removed comes back, what it added goes.
        restore_messages(e, before, keep, kept);
        return ended(std::current_exception(), false);
    } catch (const Error& err) {
        // Refused (the conversation no longer fits the cache) or failed: the message is taken back
        // (or the next one would be refused as left unanswered), the answer replaced comes back.
        if (!take_back(e, before, keep, kept)) return ended(std::current_exception(), true);
        return ended(std::make_exception_ptr(Error(std::string(err.what()) + kUntouched)), false);
    } catch (...) {
        return ended(std::current_exception(), !take_back(e, before, keep, kept));
    }
}

// ---- the verbs that run it ----

TurnResult ChatSession::send(std::string_view title, std::string_view text, const TurnOptions& options,
                             const std::function<void(std::string_view)>& on_text,
                             const std::atomic<bool>* cancel) {
    open(title);
    return send(entry(title).id, text, options, callbacks_of(on_text, cancel));
}

TurnResult ChatSession::regenerate(std::string_view title, const TurnOptions& options,
                                   const std::function<void(std::string_view)>& on_text,
                                   const std::atomic<bool>* cancel) {
    open(title);
    return regenerate(entry(title).id, options, callbacks_of(on_text, cancel));
}

TurnResult ChatSession::edit(std::string_view title, size_t ordinal, std::string_view text,
                             const TurnOptions& options, const std::function<void(std::string_view)>& on_text,
                             const std::atomic<bool>* cancel) {
    open(title);
    return edit(entry(title).id, ordinal, text, options, callbacks_of(on_text, cancel));
}

TurnResult ChatSession::send(int64_t id, std::string_view text, const TurnOptions& options,
                              const TurnCallbacks& callbacks) {
    return thrown_if_unanswered(take_turn(id, TurnRequest::send(std::string(text)), options, callbacks));
}

TurnResult ChatSession::regenerate(int64_t id, const TurnOptions& options, const TurnCallbacks& callbacks) {
    return thrown_if_unanswered(take_turn(id, TurnRequest::regenerate(), options, callbacks));
}

TurnResult ChatSession::edit(int64_t id, size_t ordinal, std::string_view text, const TurnOptions& options,
                              const TurnCallbacks& callbacks) {
    return thrown_if_unanswered(take_turn(id, TurnRequest::edit(ordinal, std::string(text)), options, callbacks));
}

TurnResult ChatSession::thrown_if_unanswered(TurnResult r) {
    if (r.thrown) std::rethrow_exception(r.thrown);
    return r;
}

// ---- putting the conversation back ----

void ChatSession::restore_messages(Entry& e, const std::vector<MessageRecord>& before, size_t keep,
                                   const std::optional<KeptVersion>& kept) {
    Conversation& c = *e.conversation;
    c.truncate(keep);
    if (kept) {
        // The version kept aside comes back as it was stored (with the places deeper in it).
        store_.drop_shown_version(e.id, static_cast<int64_t>(keep), kept->kept);
        for (size_t i = keep; i < before.size(); ++i) adopt(c, before[i]);
        return;
    }
    store_.delete_messages_after(e.id, static_cast<int64_t>(keep) - 1);
    for (size_t i = keep; i < before.size(); ++i) {
        store_.append_message(e.id, before[i].role, before[i].content, before[i].stats);
        adopt(c, before[i]);
    }
}

bool ChatSession::take_back(Entry& e, const std::vector<MessageRecord>& before, size_t keep,
                            const std::optional<KeptVersion>& kept) {
    try {
        // Every turn stores its answer last: once it is there, the turn happened and stays.
        const std::vector<MessageRecord> now = store_.list_messages(e.id);
        if (!now.empty() && now.back().role == Role::Assistant) return false;
        restore_messages(e, before, keep, kept);
        return true;
    } catch (const std::exception&) {
        // The store itself failed (a full disk): what it holds stays, as a crash would leave it.
        return false;
    }
}

TurnCallbacks ChatSession::callbacks_of(const std::function<void(std::string_view)>& on_text,
                                        const std::atomic<bool>* cancel) {
    TurnCallbacks c;
    c.on_text = on_text;
    c.progress.cancel = cancel;
    return c;
}

}  // namespace kvchat
