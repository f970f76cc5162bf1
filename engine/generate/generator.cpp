#include "engine/generate/generator.h"

#include "engine/cache/cache_spec.h"
#include "engine/error.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <utility>

namespace kvchat {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Holds back text that might be the start of a stop string, so a stop string is never streamed.
class StopFilter {
public:
    explicit StopFilter(const std::vector<std::string>& stops) : stops_(stops) {}
    // Adds text; returns true when a stop string completed. `out` gets the text safe to show.
    bool push(const std::string& piece, std::string& out) {
        held_ += piece;
        for (const std::string& s : stops_) {
            if (s.empty()) continue;
            const size_t at = held_.find(s);
            if (at != std::string::npos) {
                out = held_.substr(0, at);
                held_.clear();
                return true;
            }
        }
        size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
        for (const std::string& s : stops_)
            for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); n > keep; --n)
                if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                    keep = n;
                    break;
                }
        // Never split a UTF-8 character: move the cut back to a character start.
        size_t cut = held_.size() - keep;
        while (cut > 0 && cut < held_.size() && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) --cut;
        out = held_.substr(0, cut);
        held_.erase(0, cut);
        return false;
    }
    std::string rest() { return std::exchange(held_, {}); }

private:
    const std::vector<std::string>& stops_;
    std::string held_;
};

}  // namespace

GenerationResult Generator::generate(Cache& cache, const std::vector<int32_t>& input, const GenerationConfig& config,
                                     const std::function<void(std::string_view)>& on_text,
                                     const std::atomic<bool>* cancel) {
    const ModelConfig& mc = model_.config();
    const Tokenizer& tok = model_.tokenizer();
    validate(config.sampling);
    if (input.empty()) throw Error("the prompt is empty: give at least one token of input");
    if (config.max_new_tokens < 0) throw Error("-n must not be negative");
    // A sink cache places tokens at their rank in the cache, so it never leaves the positions the
    // model was trained on and may run on indefinitely (bounded by 32-bit positions).
    const bool sink = cache.spec().retention() == RetentionKind::Sink;
    const int64_t max_ctx = config.max_context > 0 ? config.max_context
                            : sink                 ? int64_t{INT32_MAX}
                                                   : mc.n_ctx_train;
    const int64_t needed = cache.seq_length() + static_cast<int64_t>(input.size());
    if (needed > max_ctx)
        throw Error("the prompt needs " + std::to_string(needed) + " tokens of context but the limit is " +
                    std::to_string(max_ctx));

    GenerationResult r;
    r.prompt_tokens = static_cast<int64_t>(input.size());
    r.cached_tokens = cache.seq_length();
    std::vector<int32_t> context(cache.tokens());
    context.insert(context.end(), input.begin(), input.end());

    Sampler sampler(config.sampling);
    StreamingDetokenizer detok(tok);
    StopFilter stops(config.stop_strings);
    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    auto cancelled = [&] { return cancel && cancel->load(std::memory_order_relaxed); };
    auto emit = [&](const std::string& s) {
        if (s.empty()) return;
        r.text += s;
        if (on_text) on_text(s);
    };

    // Prefill. A cancel during it stops it within a layer step; the cache keeps the chunks done.
    const int64_t held_before = cache.seq_length();
    try {
        if (config.use_cache) {
            model_.forward(backend_, cache, input.data(), static_cast<int64_t>(input.size()), Logits::Last, logits,
                           config.prefill_chunk, cancel);
            r.prefill_tokens = static_cast<int64_t>(input.size());
        } else {
            cache.reset();
            model_.forward(backend_, cache, context.data(), static_cast<int64_t>(context.size()), Logits::Last, logits,
                           config.prefill_chunk, cancel);
            r.prefill_tokens = static_cast<int64_t>(context.size());
        }
    } catch (const Cancelled&) {
        r.prefill_tokens = cache.seq_length() - (config.use_cache ? held_before : 0);
        r.prefill_ms = ms_since(t0);
        r.stop_reason = StopReason::Stopped;
        return r;
    }
    r.prefill_ms = ms_since(t0);
    auto t_first = std::chrono::steady_clock::now();

    r.stop_reason = StopReason::MaxNewTokens;
    for (int step = 0; step < config.max_new_tokens; ++step) {
        if (cancelled()) {
            r.stop_reason = StopReason::Stopped;
            break;
        }
        const int32_t next = sampler.sample(logits.data(), mc.n_vocab, context);
        if (step == 0) {
            r.ttft_ms = ms_since(t0);
            t_first = std::chrono::steady_clock::now();
        }
        if (config.stop_at_eos && (next == tok.special().eos || next == tok.special().end_of_turn)) {
            r.stop_reason = next == tok.special().eos ? StopReason::EndOfSequence : StopReason::EndOfTurn;
            break;
        }
        if (std::find(config.stop_tokens.begin(), config.stop_tokens.end(), next) != config.stop_tokens.end()) {
            r.stop_reason = StopReason::EndOfTurn;
            break;
        }
        r.tokens.push_back(next);
        context.push_back(next);
        std::string shown;
        const bool hit = stops.push(detok.push(next), shown);
        emit(shown);
        if (hit) {
            r.stop_reason = StopReason::StopString;
            break;
        }
        if (step + 1 == config.max_new_tokens) break;
        if (static_cast<int64_t>(context.size()) >= max_ctx) {
            r.stop_reason = StopReason::ContextFull;
            break;
        }
        if (cancelled()) {
            r.stop_reason = StopReason::Stopped;
            break;
        }
        if (config.use_cache) {
            model_.forward(backend_, cache, &next, 1, Logits::Last, logits);
        } else {
            cache.reset();
            model_.forward(backend_, cache, context.data(), static_cast<int64_t>(context.size()), Logits::Last, logits,
                           config.prefill_chunk);
        }
        if (config.on_step) config.on_step(cache);
    }
    if (r.stop_reason != StopReason::StopString) {
        std::string tail;
        stops.push(detok.flush(), tail);
        emit(tail + stops.rest());
    }
    if (!r.tokens.empty()) r.decode_ms = ms_since(t_first);
    return r;
}

}  // namespace kvchat
