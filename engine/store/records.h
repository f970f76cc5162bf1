#pragma once
// The records the store keeps, as plain values: what the engine and the window pass around
// without depending on SQLite.
#include "engine/common/stop_reason.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

enum class Role { System, User, Assistant };
std::string_view role_name(Role role);  // "system", "user", "assistant"

// Times are milliseconds since the Unix epoch.
struct ConversationRecord {
    int64_t id = 0;
    std::string title;              // unique among conversations
    std::string model_fingerprint;  // the model the conversation's cache was built with
    std::string cache_spec;         // the cache strategy in its textual form
    std::string snapshot;           // file name under snapshot_dir(); empty when none is saved
    int64_t created_ms = 0;
    int64_t updated_ms = 0;         // strictly increasing across the store, so lists have one order
    // Schema 5: "app", or "api" for a conversation the local API server made.
    std::string origin = "app";
    // A branch: the conversation it was branched from (nullopt once that one is deleted, or for a
    // conversation that is no branch) and how many of its messages were copied (0: no branch).
    std::optional<int64_t> parent_id;
    int64_t branch_at = 0;
};

// The figures of one generated answer: what the turn measured, what the store keeps with the
// answer, what the window and the terminal show. One value from the turn to the screen (a missing
// figure is nullopt, never a sentinel). A typed message has none (present() is false).
struct AnswerFigures {
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    std::optional<double> ttft_ms;            // time to first token
    std::optional<double> tokens_per_second;  // decode speed
    int64_t cached_tokens = 0;                // prompt tokens reused from the conversation's cache
    int64_t prefix_tokens = 0;                // of those, taken from a saved prefix's cache
    int64_t computed_tokens = 0;              // prompt tokens prefilled this turn
    std::optional<double> prefill_saved_ms;   // cached_tokens at the model's batch prefill speed
    // How the answer ended (schema 6; none for answers stored before).
    std::optional<StopReason> stop_reason;
    // The reply's ids as the model generated them (schema 4; empty for earlier answers, or when
    // the stored list is unusable): the next turn renders them instead of retokenizing the text.
    std::vector<int32_t> token_ids;

    bool present() const { return prompt_tokens > 0 || generated_tokens > 0; }
};

// A conversation's own generation settings (schema 6). A value that is not set is the global
// default's (ChatSettings, engine/chat/chat_settings.h).
struct ConversationSettings {
    std::optional<double> temperature;
    std::optional<int64_t> top_k;
    std::optional<double> top_p;
    std::optional<double> min_p;
    std::optional<double> repetition_penalty;
    std::optional<int64_t> seed;            // a fixed seed; none: the global choice (random or fixed)
    std::optional<int64_t> max_new_tokens;  // the answer limit
    std::optional<int64_t> context_length;  // at most the model's; none: the model's

    bool empty() const {
        return !temperature && !top_k && !top_p && !min_p && !repetition_penalty && !seed && !max_new_tokens &&
               !context_length;
    }
    bool operator==(const ConversationSettings&) const = default;
};

struct MessageRecord {
    int64_t id = 0;
    int64_t conversation_id = 0;
    int64_t ordinal = 0;  // 0, 1, 2, ... within the conversation
    Role role = Role::User;
    std::string content;
    bool content_repaired = false;  // invalid UTF-8 was replaced by U+FFFD when it was stored
    AnswerFigures stats;
    int64_t created_ms = 0;
};

// One message of a saved prefix, in the order the prefix holds them.
struct PrefixMessage {
    Role role = Role::System;
    std::string content;
    bool content_repaired = false;  // invalid UTF-8 was replaced by U+FFFD when it was stored
};

struct PrefixRecord {
    int64_t id = 0;
    std::string name;  // unique among prefixes
    // The opening messages of a conversation (a system prompt alone, or system / user /
    // assistant ... in order); never empty once stored.
    std::vector<PrefixMessage> messages;
    // The first message's content: the whole text of a prefix saved from text (one system
    // message), a preview of the others.
    std::string text;
    bool text_repaired = false;  // some message had invalid UTF-8 replaced by U+FFFD when it was stored
    std::string model_fingerprint;
    std::string cache_spec;
    std::vector<int32_t> tokens;  // the messages rendered and tokenized for model_fingerprint
    std::string snapshot;         // file name under snapshot_dir(); empty when none is saved
    int64_t created_ms = 0;
    std::optional<int64_t> last_used_ms;
    int64_t use_count = 0;
};

// A conversation as a list shows it: its row and what its messages add up to.
struct ConversationOverview {
    ConversationRecord conversation;
    int64_t message_count = 0;
    // Tokens of the rendered transcript when its last reply was generated (prompt + reply);
    // 0 when it was never answered.
    int64_t tokens = 0;
    bool last_unanswered = false;  // the last message is the user's
};

// A place in a transcript that has versions (schema 6): message `ordinal` and every message after
// it are version `shown` (1-based) of `count`; the others are kept aside, whole, and any of them
// can be shown instead. Regenerating an answer makes versions of the answer; editing a message
// makes versions of the message and everything that followed it.
struct VersionSet {
    int64_t ordinal = 0;
    int64_t count = 0;
    int64_t shown = 0;
};

// What Store::keep_version did: the number the kept messages got, and the new version's.
struct KeptVersion {
    int64_t kept = 0;
    int64_t number = 0;
};

// A conversation's cache strategy changed from `from` to `to` when it had `at` messages (schema 6),
// so the transcript can mark the change between messages at-1 and at.
struct StrategyChange {
    int64_t at = 0;
    std::string from;
    std::string to;
    int64_t created_ms = 0;
};

// What update_prefix_text did.
struct PrefixTextUpdate {
    bool text_repaired = false;    // invalid UTF-8 was replaced by U+FFFD
    std::string dropped_snapshot;  // the snapshot that no longer matches (empty when none)
};

}  // namespace kvchat
