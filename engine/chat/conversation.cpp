#include "engine/chat/conversation.h"

#include "engine/cache/cache_spec.h"
#include "engine/chat/conversation_cache.h"
#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <new>

namespace kvchat {

namespace {

constexpr size_t kMaxCheckpoints = 6;

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

ContextPolicy parse_context_policy(std::string_view text) {
    if (text == "refuse") return ContextPolicy::Refuse;
    if (text == "sink") return ContextPolicy::Sink;
    if (text == "sliding") return ContextPolicy::Sliding;
    throw Error("unknown context policy '" + std::string(text) + "' (refuse, sink or sliding)");
}

std::string_view context_policy_name(ContextPolicy p) {
    switch (p) {
        case ContextPolicy::Refuse: return "refuse";
        case ContextPolicy::Sink: return "sink";
        case ContextPolicy::Sliding: return "sliding";
    }
    return "refuse";
}

Conversation::Conversation(const Model& model, Backend& backend, ChatTemplate chat_template, std::string cache_spec)
    : model_(model), backend_(backend), template_(std::move(chat_template)), spec_(conversation_cache_spec(cache_spec)),
      cache_spec_(to_string(spec_)) {}

void Conversation::set_cache_spec(const std::string& spec) {
    spec_ = conversation_cache_spec(spec);
    cache_spec_ = to_string(spec_);
}

bool Conversation::switch_strategy(const CacheSpec& spec, const Progress& progress) {
    const bool converted = has_cache();
    if (converted) kvchat::switch_strategy(cache(), checkpoints_, model_, backend_, spec, progress);
    spec_ = spec;
    cache_spec_ = to_string(spec_);
    return converted;
}

void Conversation::set_cache(std::unique_ptr<Cache> cache, std::vector<CacheCheckpoint> checkpoints) {
    settle();
    cache_ = std::move(cache);
    checkpoints_ = std::move(checkpoints);
}

void Conversation::set_cache_loading(std::future<LoadedCache> loading) {
    settle();
    cache_.reset();
    checkpoints_.clear();
    loading_ = std::move(loading);
}

void Conversation::settle() {
    if (!loading_.valid()) return;
    LoadedCache l = loading_.get();  // (the loader reports its failures as notices)
    cache_ = std::move(l.cache);
    checkpoints_ = std::move(l.checkpoints);
    for (std::string& n : l.notices) load_notices_.push_back(std::move(n));
}

void Conversation::finish_loading(const Progress& progress) {
    if (!loading_.valid()) return;
    settle();
    progress.tell("Loading cache", 1, 1);
}

const std::vector<CacheCheckpoint>& Conversation::checkpoints() {
    settle();
    return checkpoints_;
}

std::unique_ptr<Cache> Conversation::release_cache() {
    settle();
    checkpoints_.clear();
    return std::move(cache_);
}

void Conversation::append(Role role, std::string content, std::vector<int32_t> tokens) {
    messages_.emplace_back(role, std::move(content), std::move(tokens));
}

void Conversation::truncate(size_t n) {
    if (n < messages_.size()) messages_.resize(n);
}

void Conversation::edit(size_t i, std::string content) {
    if (i >= messages_.size())
        throw Error("there is no message " + std::to_string(i) + " to edit (the conversation has " +
                    std::to_string(messages_.size()) + ")");
    messages_[i].content = std::move(content);
    messages_[i].tokens.clear();  // no longer what the model wrote
    truncate(i + 1);
}

Cache& Conversation::cache() {
    settle();
    if (!cache_) cache_ = make_conversation_cache(model_, backend_, cache_spec_);
    return *cache_;
}

RenderedChat Conversation::render_for_reply() const { return template_.render(messages_, true); }

int64_t Conversation::context_limit() const {
    int64_t limit = model_.config().n_ctx_train;
    if (cache_) {
        const int64_t cap = cache_capacity(*cache_);
        if (cap > 0) limit = std::min(limit, cap);
    }
    return limit;
}

int64_t Conversation::context_limit(const TurnOptions& options) const {
    const int64_t limit = context_limit();
    return options.context_length > 0 ? std::min(limit, options.context_length) : limit;
}

void Conversation::check_fits(const RenderedChat& rendered, const TurnOptions& options) const {
    // At least one new token must fit after the prompt.
    const int64_t needed = static_cast<int64_t>(rendered.tokens.size()) + 1;
    const int64_t limit = context_limit(options);
    if (needed > limit && options.policy == ContextPolicy::Refuse)
        throw Error("the conversation needs " + std::to_string(needed) + " tokens but the context holds " +
                    std::to_string(limit) +
                    ": start a new conversation, shorten a message, or choose the sink or sliding context policy");
}

void Conversation::switch_retention(const RenderedChat& rendered, const TurnOptions& options,
                                    std::vector<std::string>& notices) {
    const int64_t needed = static_cast<int64_t>(rendered.tokens.size()) + 1;
    if (needed <= context_limit(options)) return;
    if (spec_.retention() != RetentionKind::All) return;  // already bounded
    CacheSpec spec;
    if (!options.retention_spec.empty()) {
        spec = parse_cache_spec(options.retention_spec);
    } else {
        const int64_t context = options.context_length > 0 ? options.context_length : model_.config().n_ctx_train;
        const int window = static_cast<int>(std::max<int64_t>(16, context / 2));
        spec = options.policy == ContextPolicy::Sink ? CacheSpec::sink(window, 4) : CacheSpec::sliding_window(window);
    }
    switch_strategy(spec);
    notices.push_back("the conversation outgrew the context; the cache switched to " + cache_spec_ +
                      " (the oldest tokens are no longer attended to)");
}

int64_t Conversation::align_cache(const std::vector<int32_t>& tokens, std::vector<std::string>& notices) {
    // The last token is always computed again: its logits start the reply.
    return keep_at_most(std::min<int64_t>(common_prefix(tokens), static_cast<int64_t>(tokens.size()) - 1), notices);
}

int64_t Conversation::keep_prefix(const std::vector<int32_t>& tokens, std::vector<std::string>& notices) {
    return keep_at_most(common_prefix(tokens), notices);
}

int64_t Conversation::common_prefix(const std::vector<int32_t>& tokens) {
    const std::vector<int32_t>& held = cache().tokens();
    int64_t lcp = 0;
    const int64_t n = static_cast<int64_t>(std::min(held.size(), tokens.size()));
    while (lcp < n && held[static_cast<size_t>(lcp)] == tokens[static_cast<size_t>(lcp)]) ++lcp;
    return lcp;
}

int64_t Conversation::keep_at_most(int64_t lcp, std::vector<std::string>& notices) {
    Cache& c = cache();
    if (lcp >= c.seq_length()) return c.seq_length();
    auto forget_after = [&](int64_t n) {
        std::erase_if(checkpoints_, [&](const CacheCheckpoint& cp) { return cp.length > n; });
    };
    if (c.can_crop_to(lcp)) {
        c.crop(lcp);
        forget_after(lcp);
        return lcp;
    }
    for (auto it = checkpoints_.rbegin(); it != checkpoints_.rend(); ++it)
        if (it->length <= lcp && c.restore(*it)) {
            const int64_t at = it->length;
            forget_after(at);
            return at;
        }
    notices.push_back("the cache could not go back to token " + std::to_string(lcp) +
                      " (its sliding window had moved on and no checkpoint was kept there); the conversation "
                      "is prefilled again");
    c.reset();
    checkpoints_.clear();
    return 0;
}

void Conversation::prefill(const RenderedChat& rendered, int64_t end, const Progress& progress) {
    constexpr std::string_view kTask = "Prefilling";
    Cache& c = cache();
    const int64_t start = c.seq_length();
    std::vector<int64_t> stops(rendered.message_starts.begin(), rendered.message_starts.end());
    stops.push_back(rendered.prompt_start);
    stops.push_back(end);
    std::sort(stops.begin(), stops.end());
    try {
        for (int64_t stop : stops) {
            if (stop <= c.seq_length() || stop > end) continue;
            prefill_in_chunks(model_, backend_, c, rendered.tokens.data() + c.seq_length(), stop - c.seq_length(),
                              progress, kTask, c.seq_length() - start, end - start);
            // A checkpoint at each message start lets an edit or a regeneration crop back here even
            // when the sliding layers have moved on. Only the latest few are kept (each holds the
            // sliding windows); older turns are rarely edited.
            keep_checkpoint();
        }
    } catch (const Cancelled&) {
        crop_back(start);
        throw;
    }
}

void Conversation::crop_back(int64_t n) {
    Cache& c = cache();
    if (c.seq_length() <= n) return;
    if (c.can_crop_to(n)) {
        c.crop(n);
    } else {
        for (auto it = checkpoints_.rbegin(); it != checkpoints_.rend(); ++it)
            if (it->length == n && c.restore(*it)) break;
    }
    const int64_t held = c.seq_length();
    std::erase_if(checkpoints_, [&](const CacheCheckpoint& cp) { return cp.length > held; });
}

TurnResult Conversation::respond(const TurnOptions& options, const std::function<void(std::string_view)>& on_text,
                                 const std::atomic<bool>* cancel) {
    TurnCallbacks callbacks;
    callbacks.on_text = on_text;
    callbacks.progress.cancel = cancel;
    return respond(options, callbacks);
}

TurnResult Conversation::respond(const TurnOptions& options, const TurnCallbacks& callbacks) {
    return answer(render_for_reply(), options, callbacks);
}

Conversation::CacheMatch Conversation::match_cache(const RenderedChat& rendered, const TurnOptions& options,
                                                   const Progress& progress, std::vector<std::string>& notices) {
    finish_loading(progress);  // it was read while the transcript rendered
    check_fits(rendered, options);
    if (options.policy != ContextPolicy::Refuse) switch_retention(rendered, options, notices);
    CacheMatch m;
    m.kept = align_cache(rendered.tokens, notices);
    notices.insert(notices.begin(), load_notices_.begin(), load_notices_.end());
    load_notices_.clear();
    const int64_t total = static_cast<int64_t>(rendered.tokens.size());
    // Prefill up to the last message boundary before the end with checkpoints; the generator
    // prefills the rest, so its last token's logits start the reply.
    m.prefill_until = m.kept;
    for (int64_t b : rendered.message_starts)
        if (b > m.prefill_until && b < total) m.prefill_until = b;
    if (rendered.prompt_start > m.prefill_until && rendered.prompt_start < total) m.prefill_until = rendered.prompt_start;
    return m;
}

TurnResult Conversation::answer(const RenderedChat& rendered, const TurnOptions& options,
                                const TurnCallbacks& callbacks) {
    using clock = std::chrono::steady_clock;
    const std::function<void(std::string_view)>& on_text = callbacks.on_text;
    const std::atomic<bool>* cancel = callbacks.progress.cancel;
    const auto t0 = clock::now();
    TurnResult out;
    const int64_t total = static_cast<int64_t>(rendered.tokens.size());

    // Match the cache.
    const CacheMatch match = match_cache(rendered, options, callbacks.progress, out.notices);
    const int64_t keep = match.kept;

    GenerationConfig g = options.generation;
    for (int32_t id : template_.stop_tokens()) g.stop_tokens.push_back(id);
    for (const std::string& s : template_.stop_strings()) g.stop_strings.push_back(s);
    if (callbacks.on_step) g.on_step = [&](const Cache& c) { callbacks.on_step(c.telemetry()); };
    // A static cache's capacity ends the answer like the model's context does.
    g.max_context = options.policy != ContextPolicy::Refuse ? int64_t{1} << 40 : context_limit(options);

    // The budget is checked per streamed piece: over it, the turn pauses, the cache moves to the
    // fallback strategy and generation continues from where it was. Without a budget the user's
    // cancel goes to the generator directly (it is then seen at every step).
    const bool budgeted = options.max_cache_bytes > 0;
    bool budget_stop = false;
    std::atomic<bool> pause{false};
    const auto user_cancelled = [&] { return cancel && cancel->load(); };
    std::function<void(std::string_view)> stream = on_text;
    if (budgeted)
        stream = [&](std::string_view piece) {
            if (on_text) on_text(piece);
            if (!budget_stop && cache().bytes() > options.max_cache_bytes) budget_stop = true;
            if (budget_stop || user_cancelled()) pause = true;
        };

    auto fall_back = [&](const std::string& why) {
        Cache& c = cache();
        // A forward pass that failed half-way may have left layers ahead of the token list.
        c.roll_back();
        const std::string spec = options.fallback_spec.empty() ? std::string("offloaded") : options.fallback_spec;
        try {
            switch_strategy(parse_cache_spec(spec));
            out.notices.push_back(why + "; the cache moved to " + cache_spec_ + " and the turn continued");
        } catch (const Error& e) {
            out.notices.push_back(why + "; the fallback to " + spec + " failed (" + e.what() + ")");
            return false;
        } catch (const std::bad_alloc&) {
            out.notices.push_back(why + "; the fallback to " + spec + " failed (out of memory too)");
            return false;
        }
        return true;
    };

    // Prefill, then generate (once more after a fallback when the cache could not grow).
    GenerationResult r;
    auto gen_start = clock::now();
    double checkpointed_prefill_ms = 0.0;
    size_t streamed = 0;  // bytes of the answer passed on, over the attempts
    for (int attempt = 0;; ++attempt) {
        try {
            const auto prefill_start = clock::now();
            prefill(rendered, match.prefill_until, callbacks.progress);
            gen_start = clock::now();
            checkpointed_prefill_ms = ms_between(prefill_start, gen_start);
            // After a fallback in the middle of the answer the cache holds the prompt and part of
            // the answer: the answer starts again after the prompt (whose last token the generator
            // takes as its input), and the text already passed on is not passed on again (the
            // moved cache computes the same tokens).
            if (cache().seq_length() >= total) cache().crop(total - 1);
            const std::vector<int32_t> input(rendered.tokens.begin() + cache().seq_length(), rendered.tokens.end());
            size_t replay = streamed;
            const std::function<void(std::string_view)> pass_on = [&](std::string_view piece) {
                const size_t skip = std::min(replay, piece.size());
                replay -= skip;
                piece.remove_prefix(skip);
                if (piece.empty()) return;
                streamed += piece.size();
                if (stream) stream(piece);
            };
            Generator gen(model_, backend_);
            r = gen.generate(cache(), input, g, pass_on, budgeted ? &pause : cancel);
            break;
        } catch (const std::bad_alloc&) {
            // Out of memory where the cache lives (a full GPU): once, the cache moves to the
            // fallback strategy and the turn goes on; else the turn fails with what happened.
            const std::string why = "the cache could not grow (out of memory)";
            if (attempt == 0 && fall_back(why)) continue;
            if (cache_) cache_->roll_back();
            if (attempt == 0) throw Error(out.notices.back());
            throw Error(why + ", also after it moved to " + cache_spec_ +
                        "; close other conversations or programs using that memory, or choose a smaller cache");
        } catch (const Cancelled&) {
            throw;  // prefill() put the cache back already
        } catch (...) {
            // Whatever failed half-way, the cache stays consistent with its token list.
            if (cache_) cache_->roll_back();
            throw;
        }
    }
    // Stopped before the answer began (in the generator's part of the prefill, or before its first
    // piece of text): there is no answer to keep, so the turn is cancelled as a cancelled prefill
    // is, and the caller takes its message back. The cache keeps the prompt it computed.
    if (r.stop_reason == StopReason::Stopped && r.text.empty() && !budget_stop) {
        crop_back(total);
        throw Cancelled("stopped before the answer began");
    }
    const auto first_token_at = gen_start + std::chrono::duration_cast<clock::duration>(
                                                std::chrono::duration<double, std::milli>(r.ttft_ms));
    const double ttft_ms = ms_between(t0, first_token_at);

    // Over budget: move the cache (or, when that fails, keep it and say so) and go on from the
    // last token the generator produced, which is not in the cache yet.
    if (budget_stop && !user_cancelled() && r.stop_reason == StopReason::Stopped && !r.tokens.empty()) {
        fall_back("the cache grew past its memory budget of " + std::to_string(options.max_cache_bytes) + " bytes");
        GenerationConfig rest = g;
        rest.max_new_tokens = g.max_new_tokens - static_cast<int>(r.tokens.size());
        if (rest.max_new_tokens > 0) {
            Generator gen(model_, backend_);
            const GenerationResult more = gen.generate(cache(), {r.tokens.back()}, rest, on_text, cancel);
            r.tokens.insert(r.tokens.end(), more.tokens.begin(), more.tokens.end());
            r.text += more.text;
            r.decode_ms += more.decode_ms + more.prefill_ms;
            r.stop_reason = more.stop_reason;
        } else {
            r.stop_reason = StopReason::MaxNewTokens;
        }
    }

    out.text = r.text;
    out.prefill_ms = checkpointed_prefill_ms + r.prefill_ms;
    AnswerFigures& f = out.figures;
    f.prompt_tokens = total;
    f.generated_tokens = static_cast<int64_t>(r.tokens.size());
    f.ttft_ms = ttft_ms;
    if (const double tok_s = r.decode_tok_s(); tok_s > 0) f.tokens_per_second = tok_s;
    f.cached_tokens = keep;
    f.computed_tokens = total - keep;
    note_prefill_speed(f.computed_tokens, out.prefill_ms);
    if (const auto per_token = prefill_ms_per_token()) f.prefill_saved_ms = static_cast<double>(keep) * *per_token;
    f.stop_reason = r.stop_reason;
    f.token_ids = r.tokens;
    // Keep the answer.
    if (!(r.stop_reason == StopReason::Stopped && r.text.empty())) {
        append(Role::Assistant, r.text, r.tokens);
        close_reply();
    }
    out.kv_bytes = cache().bytes();
    return out;
}

void Conversation::note_prefill_speed(int64_t tokens, double ms) {
    if (tokens < kBatchTokens || tokens <= speed_tokens_ || !(ms > 0.0) || !std::isfinite(ms)) return;
    speed_tokens_ = tokens;
    speed_ms_ = ms;
}

std::optional<double> Conversation::prefill_ms_per_token() const {
    if (speed_tokens_ == 0) return std::nullopt;
    return speed_ms_ / static_cast<double>(speed_tokens_);
}

void Conversation::close_reply() {
    // After the answer is shown: the cache takes the reply's last token (the generator leaves
    // the last one it sampled out) and the reply's end markers, which every later rendering
    // starts with, and a checkpoint there, where the next message starts. The next turn, in
    // this process or after a restart, then prefills only its own message and markers.
    Cache& c = cache();
    const RenderedChat closed = template_.render(messages_, false);
    const std::vector<int32_t>& held = c.tokens();
    int64_t lcp = 0;
    const int64_t n = static_cast<int64_t>(std::min(held.size(), closed.tokens.size()));
    while (lcp < n && held[static_cast<size_t>(lcp)] == closed.tokens[static_cast<size_t>(lcp)]) ++lcp;
    // The reply written back as text may tokenize differently from how it was generated; then
    // the next turn's alignment deals with it.
    if (lcp < c.seq_length() || lcp >= static_cast<int64_t>(closed.tokens.size())) return;
    const int64_t cap = cache_capacity(c);
    if (cap > 0 && static_cast<int64_t>(closed.tokens.size()) > cap) return;  // the next turn cannot fit anyway
    std::vector<float> none;
    try {
        model_.forward(backend_, c, closed.tokens.data() + lcp, static_cast<int64_t>(closed.tokens.size()) - lcp,
                       Logits::None, none);
    } catch (const Error&) {
        c.roll_back();  // only an acceleration: the next turn prefills these tokens itself
        return;
    } catch (const std::bad_alloc&) {
        c.roll_back();  // the cache's memory is full: the next turn's prefill moves it (answer())
        return;
    }
    keep_checkpoint();
}

void Conversation::keep_checkpoint() {
    CacheCheckpoint old;
    if (checkpoints_.size() >= kMaxCheckpoints) {
        old = std::move(checkpoints_.front());  // its memory holds the new one
        checkpoints_.erase(checkpoints_.begin());
    }
    CacheCheckpoint cp = cache().checkpoint(std::move(old));
    if (cp.bytes() > 0) checkpoints_.push_back(std::move(cp));
}

TurnResult Conversation::send(std::string text, const TurnOptions& options,
                              const std::function<void(std::string_view)>& on_text, const std::atomic<bool>* cancel) {
    append(Role::User, std::move(text));
    try {
        return respond(options, on_text, cancel);
    } catch (...) {
        // A refused turn leaves the transcript as it was.
        messages_.pop_back();
        throw;
    }
}

TurnResult Conversation::regenerate(const TurnOptions& options, const std::function<void(std::string_view)>& on_text,
                                    const std::atomic<bool>* cancel) {
    if (!messages_.empty() && messages_.back().role == Role::Assistant) messages_.pop_back();
    return respond(options, on_text, cancel);
}

}  // namespace kvchat
