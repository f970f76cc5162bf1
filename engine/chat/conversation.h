#pragma once
// One conversation in memory: the transcript, the cache that holds its tokens, and the turn logic
// of incremental prefill. Each turn renders the whole transcript, keeps the longest prefix the
// cache already holds (cropping away what the template now renders differently: an edit, a
// regenerated answer), prefills only the rest and generates. The transcript is the truth; the
// cache can always be rebuilt from it.
#include "engine/cache/cache_spec.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/prefill_speed.h"
#include "engine/common/progress.h"
#include "engine/generate/generator.h"

#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

// What happens when the next turn would not fit the model's context or a static capacity.
enum class ContextPolicy { Refuse, Sink, Sliding };
ContextPolicy parse_context_policy(std::string_view text);  // "refuse", "sink", "sliding"
std::string_view context_policy_name(ContextPolicy p);

struct TurnOptions {
    GenerationConfig generation;
    ContextPolicy policy = ContextPolicy::Refuse;
    // Retention to switch to under the Sink / Sliding policies (a cache spec); empty: a window of
    // half the context, with 4 sink tokens for Sink.
    std::string retention_spec;
    // The strategy to fall back to when the cache cannot grow (out of memory, or over
    // max_cache_bytes): "offloaded" unless the user chose a quantized one.
    std::string fallback_spec = "offloaded";
    int64_t max_cache_bytes = 0;  // 0: no limit besides the machine's memory
    // The conversation's own context length (ConversationSettings); 0: the model's. A prompt over
    // it is refused (Refuse policy) or bounds the cache (Sink, Sliding) as the model's would.
    int64_t context_length = 0;
};

// What a turn answers: a new message, the last answer again, or an edited message of the user's.
struct TurnRequest {
    enum class Kind { Send, Regenerate, Edit };
    Kind kind = Kind::Send;
    std::string text;     // Send, Edit: the message
    size_t ordinal = 0;   // Edit: the message replaced (a user message); what followed it is dropped
    // Send: a conversation still titled as ChatSession::create() titles new ones ("Chat",
    // "Chat 2", ...) and holding no message of the user's is renamed after this message
    // (title_from_message) once it is stored, as the window names a new chat.
    bool names_new_chat = false;
    // Send: messages that go before `text`, stored with it in the same turn (a client of the local
    // API sends the whole exchange: what it holds beyond the stored transcript). Taken back with
    // the message when the turn is.
    std::vector<ChatMessage> history;
    // Send: the client sent the whole exchange (the local API), so a transcript ending with a
    // message of the user's that has no answer goes on as the client wrote it, instead of being
    // refused as a question a crash left.
    bool whole_exchange = false;

    static TurnRequest send(std::string text) { return make(Kind::Send, std::move(text), 0); }
    static TurnRequest regenerate() { return make(Kind::Regenerate, {}, 0); }
    static TurnRequest edit(size_t ordinal, std::string text) { return make(Kind::Edit, std::move(text), ordinal); }

private:
    static TurnRequest make(Kind kind, std::string text, size_t ordinal) {
        TurnRequest r;
        r.kind = kind;
        r.text = std::move(text);
        r.ordinal = ordinal;
        return r;
    }
};

// How one turn ended and what it left: the one value every front end converts.
struct TurnResult {
    enum class Ending {
        Answered,   // the answer ended by itself (figures.stop_reason says how) and is stored
        Stopped,    // the cancel flag stopped the answer; what it had is stored
        Cancelled,  // stopped before the answer began: the conversation is as it was
        Failed,     // refused or failed: `problem` says why
    };
    Ending ending = Ending::Answered;
    std::string problem;  // Cancelled, Failed: in words
    // Cancelled, Failed: the stored messages are no longer as they were (the answer was stored
    // before the failure, or the store could not be changed back): a front end reads them again.
    bool changed = false;
    std::exception_ptr thrown;  // Cancelled, Failed: what the throwing verbs rethrow

    std::string text;  // the reply (kept even when the turn was stopped)
    // The answer's figures, the only place they live (Answered, Stopped): its ids and count, the
    // prompt's tokens (computed_tokens + cached_tokens == prompt_tokens), time to the first token,
    // decode speed, what reuse saved, how it ended. A turn that stored the answer (ChatSession's)
    // holds them as the store keeps them with it.
    AnswerFigures figures;
    double prefill_ms = 0.0;  // computing figures.computed_tokens
    int64_t kv_bytes = 0;
    std::vector<std::string> notices;  // things the user should be told (a rebuild, a fallback)
    std::optional<MessageRecord> question;  // the user's message answered, as stored (ChatSession's turns)
    std::optional<MessageRecord> answer;    // the answer as the store holds it (ChatSession's turns)
    std::string cache_spec;                 // the conversation's strategy after the turn
};

// What a turn tells its caller while it runs.
struct TurnCallbacks {
    std::function<void(std::string_view)> on_text;       // each new piece of valid UTF-8
    std::function<void(const CacheTelemetry&)> on_step;  // after every decode step
    // Snapshot load, prefill, rebuild: reports and cancel. The same flag stops the answer
    // (which keeps what it has; a cancelled prefill throws kvchat::Cancelled instead).
    Progress progress;
};

// A cache read in the background, with what the user should be told about it (a snapshot that
// could not be used, a conversion).
struct LoadedCache {
    std::unique_ptr<Cache> cache;  // null: none could be had; the next turn prefills
    std::vector<CacheCheckpoint> checkpoints;
    std::vector<std::string> notices;
};

class Conversation {
public:
    Conversation(const Model& model, Backend& backend, ChatTemplate chat_template, std::string cache_spec);

    const std::vector<ChatMessage>& messages() const { return messages_; }
    const ChatTemplate& chat_template() const { return template_; }
    // The strategy's canonical text (as the store keeps it) and the strategy itself.
    const std::string& cache_spec() const { return cache_spec_; }
    const CacheSpec& spec() const { return spec_; }
    // Takes effect with the next cache made (release_cache() to drop the current one).
    void set_cache_spec(const std::string& spec);
    // The conversation under another strategy: its cache, when it has one (a loading one is
    // waited for), converted in place and its checkpoints dropped (switch_strategy in
    // conversation_cache.h), and the spec set. Returns whether a cache was converted. Throws
    // (kvchat::Error, kvchat::Cancelled) with the cache, checkpoints and spec as they were.
    bool switch_strategy(const CacheSpec& spec, const Progress& progress = {});

    // A prefill of `tokens` tokens took `ms`: the speed turns report savings by is that of the
    // largest prefill of at least kBatchTokens tokens. (A prefill of a few tokens costs nearly
    // what a batch costs, every weight being read once either way, so its time per token would
    // overstate what reuse saves many times over.) Also fed from a reopened conversation's
    // stored figures.
    static constexpr int64_t kBatchTokens = PrefillSpeed::kBatchTokens;
    void note_prefill_speed(int64_t tokens, double ms);
    std::optional<double> prefill_ms_per_token() const;

    // tokens: an answer's ids as generated (see ChatMessage::tokens).
    void append(Role role, std::string content, std::vector<int32_t> tokens = {});
    // Keeps the first n messages.
    void truncate(size_t n);
    // Replaces message i's content and drops every message after it.
    void edit(size_t i, std::string content);

    // True also while a cache is loading.
    bool has_cache() const { return cache_ != nullptr || loading_.valid(); }
    Cache& cache();  // made on first use
    // A cache (a snapshot's, a prefix's) with the checkpoints that came with it.
    void set_cache(std::unique_ptr<Cache> cache, std::vector<CacheCheckpoint> checkpoints = {});
    // A cache still being read (a reopened conversation's snapshot): a turn renders its
    // transcript meanwhile, and the first use of the cache waits for it. The load must not use
    // the backend's threads after that first use (it is over by then).
    void set_cache_loading(std::future<LoadedCache> loading);
    std::unique_ptr<Cache> release_cache();
    // Waits for a cache being read and takes it, reporting "Loading cache" done; nothing when
    // none is loading.
    void finish_loading(const Progress& progress);
    // The cache when it is in memory now (null when there is none or it is still loading);
    // looking changes nothing.
    const Cache* resident_cache() const { return cache_.get(); }
    // The states of the sliding layers at recent message starts, oldest first: a crop back to
    // one of them does not need the earlier conversation again.
    const std::vector<CacheCheckpoint>& checkpoints();

    // The rendered transcript with the generation prompt, and a refusal (kvchat::Error) when it
    // would not fit under the Refuse policy. Nothing is changed.
    RenderedChat render_for_reply() const;
    void check_fits(const RenderedChat& rendered, const TurnOptions& options) const;

    // The answer to `rendered` (the transcript as it stands, rendered for a reply), in the phases
    // of a turn after the rendering: match the cache (wait for a loading one, refuse what does not
    // fit or bound the cache under the Sink and Sliding policies, keep the longest prefix it
    // holds), prefill the rest, generate; then the answer is appended and closed in the cache. A
    // stopped answer (cancel) keeps what it had, and the cache holds exactly its tokens; cancelled
    // before the answer began, it throws kvchat::Cancelled and nothing is appended.
    TurnResult answer(const RenderedChat& rendered, const TurnOptions& options, const TurnCallbacks& callbacks);
    // answer() to the transcript as it stands.
    TurnResult respond(const TurnOptions& options, const std::function<void(std::string_view)>& on_text = {},
                       const std::atomic<bool>* cancel = nullptr);
    TurnResult respond(const TurnOptions& options, const TurnCallbacks& callbacks);
    // Appends the user's message, then respond().
    TurnResult send(std::string text, const TurnOptions& options,
                    const std::function<void(std::string_view)>& on_text = {},
                    const std::atomic<bool>* cancel = nullptr);
    // Drops the last assistant reply (if the transcript ends with one) and responds again.
    TurnResult regenerate(const TurnOptions& options, const std::function<void(std::string_view)>& on_text = {},
                          const std::atomic<bool>* cancel = nullptr);

    // Brings the cache to the longest prefix of `tokens` it can keep exactly (cropping, or
    // restoring a checkpoint of the sliding layers); returns how many tokens it kept. Adds a
    // notice when it had to start over.
    int64_t align_cache(const std::vector<int32_t>& tokens, std::vector<std::string>& notices);
    // The same, but the whole of `tokens` may be kept (a branch's cache cropped to the messages it
    // copied: its first turn computes what follows them).
    int64_t keep_prefix(const std::vector<int32_t>& tokens, std::vector<std::string>& notices);
    // Prefills tokens[cache length, end) without generating, checkpointing at message starts;
    // reports "Prefilling" per chunk. Cancelled (kvchat::Cancelled), the cache goes back to the
    // length it had.
    void prefill(const RenderedChat& rendered, int64_t end, const Progress& progress = {});

private:
    // Waits for a loading cache and takes it (its notices go to the next turn's result).
    void settle();
    // Brings the cache back to `n` tokens after a cancelled prefill: cropped, or restored from the
    // checkpoint at n (the sliding layers may have moved on); otherwise left where it is (it
    // still holds a prefix of the transcript).
    void crop_back(int64_t n);
    // How many of `tokens` the cache holds from the start.
    int64_t common_prefix(const std::vector<int32_t>& tokens);
    // The cache cropped to at most `n` tokens (restored from the latest checkpoint at or below it
    // where a crop cannot go back exactly; emptied, with a notice, when none can); returns its length.
    int64_t keep_at_most(int64_t n, std::vector<std::string>& notices);
    // Checkpoints the cache as it stands, keeping the latest few.
    void keep_checkpoint();
    int64_t context_limit() const;
    // context_limit() under the turn's own limit (TurnOptions::context_length).
    int64_t context_limit(const TurnOptions& options) const;
    // The cache brought to the longest prefix of `rendered` it can keep; returns where the
    // checkpointed prefill stops (the generator prefills the rest).
    struct CacheMatch {
        int64_t kept = 0;           // tokens reused
        int64_t prefill_until = 0;  // the last message boundary before the end
    };
    CacheMatch match_cache(const RenderedChat& rendered, const TurnOptions& options, const Progress& progress,
                           std::vector<std::string>& notices);
    void close_reply();
    void switch_retention(const RenderedChat& rendered, const TurnOptions& options, std::vector<std::string>& notices);

    const Model& model_;
    Backend& backend_;
    ChatTemplate template_;
    CacheSpec spec_;
    std::string cache_spec_;  // to_string(spec_)
    std::vector<ChatMessage> messages_;
    int64_t speed_tokens_ = 0;  // the prefill the speed was measured on (0: none yet)
    double speed_ms_ = 0.0;
    std::unique_ptr<Cache> cache_;
    std::vector<CacheCheckpoint> checkpoints_;
    std::future<LoadedCache> loading_;
    std::vector<std::string> load_notices_;
};

}  // namespace kvchat
