#include "engine/chat/chat_settings.h"

#include "engine/chat/conversation_cache.h"
#include "engine/common/quoted.h"
#include "engine/compute/device.h"
#include "engine/error.h"
#include "engine/store/store.h"

#include <charconv>
#include <functional>
#include <limits>
#include <random>

namespace kvchat {

namespace {

[[noreturn]] void refuse(std::string_view key, std::string_view value, std::string_view wanted) {
    throw Error("setting " + std::string(key) + " = " + in_quotes(value) + " is not " + std::string(wanted));
}

int64_t parse_integer(std::string_view key, std::string_view v, int64_t lo, int64_t hi) {
    int64_t out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size() || out < lo || out > hi)
        refuse(key, v, "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return out;
}

// `ok` says what range the value must be in, in words for the message.
float parse_real(std::string_view key, std::string_view v, const std::function<bool(float)>& in_range,
                 std::string_view range) {
    float out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size() || !in_range(out)) refuse(key, v, range);
    return out;
}

std::string format_real(float v) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
    return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

struct Field {
    const char* key;
    std::function<std::string(const ChatSettings&)> get;
    // Throws kvchat::Error naming the key when the text is not a usable value.
    std::function<void(ChatSettings&, std::string_view)> set;
};

const std::vector<Field>& fields() {
    static const std::vector<Field> all = {
        {"chat.threads", [](const ChatSettings& s) { return std::to_string(s.threads); },
         [](ChatSettings& s, std::string_view v) { s.threads = static_cast<int>(parse_integer("chat.threads", v, 0, 1024)); }},
        {"chat.device", [](const ChatSettings& s) { return s.device; },
         [](ChatSettings& s, std::string_view v) {
             const auto d = parse_device(std::string(v));
             if (!d) refuse("chat.device", v, "cpu, cuda or cuda:N");
             s.device = device_name(*d);
         }},
        {"chat.resident_caches", [](const ChatSettings& s) { return std::to_string(s.resident_caches); },
         [](ChatSettings& s, std::string_view v) {
             s.resident_caches = static_cast<int>(parse_integer("chat.resident_caches", v, 1, 1000));
         }},
        {"chat.cache_memory_budget", [](const ChatSettings& s) { return std::to_string(s.cache_memory_budget); },
         [](ChatSettings& s, std::string_view v) {
             s.cache_memory_budget = parse_integer("chat.cache_memory_budget", v, 0, std::numeric_limits<int64_t>::max());
         }},
        {"chat.context_policy", [](const ChatSettings& s) { return std::string(context_policy_name(s.context_policy)); },
         [](ChatSettings& s, std::string_view v) {
             try {
                 s.context_policy = parse_context_policy(v);
             } catch (const Error&) {
                 refuse("chat.context_policy", v, "refuse, sink or sliding");
             }
         }},
        {"chat.default_strategy", [](const ChatSettings& s) { return s.default_strategy; },
         [](ChatSettings& s, std::string_view v) {
             if (v.empty()) refuse("chat.default_strategy", v, "a cache strategy");
             try {
                 s.default_strategy = canonical_cache_spec(std::string(v));
             } catch (const Error& e) {
                 refuse("chat.default_strategy", v, std::string("a cache strategy (") + e.what() + ")");
             }
         }},
        {"chat.greedy", [](const ChatSettings& s) { return std::string(s.sampling.greedy ? "true" : "false"); },
         [](ChatSettings& s, std::string_view v) {
             if (v != "true" && v != "false") refuse("chat.greedy", v, "true or false");
             s.sampling.greedy = v == "true";
         }},
        {"chat.temperature", [](const ChatSettings& s) { return format_real(s.sampling.temperature); },
         [](ChatSettings& s, std::string_view v) {
             s.sampling.temperature =
                 parse_real("chat.temperature", v, [](float x) { return x >= 0.0f && x <= 100.0f; }, "a number from 0 to 100");
         }},
        {"chat.top_k", [](const ChatSettings& s) { return std::to_string(s.sampling.top_k); },
         [](ChatSettings& s, std::string_view v) {
             s.sampling.top_k = static_cast<int>(parse_integer("chat.top_k", v, 0, std::numeric_limits<int>::max()));
         }},
        {"chat.top_p", [](const ChatSettings& s) { return format_real(s.sampling.top_p); },
         [](ChatSettings& s, std::string_view v) {
             s.sampling.top_p =
                 parse_real("chat.top_p", v, [](float x) { return x > 0.0f && x <= 1.0f; }, "a number in (0, 1]");
         }},
        {"chat.min_p", [](const ChatSettings& s) { return format_real(s.sampling.min_p); },
         [](ChatSettings& s, std::string_view v) {
             s.sampling.min_p =
                 parse_real("chat.min_p", v, [](float x) { return x >= 0.0f && x < 1.0f; }, "a number in [0, 1)");
         }},
        {"chat.repeat_penalty", [](const ChatSettings& s) { return format_real(s.sampling.repetition_penalty); },
         [](ChatSettings& s, std::string_view v) {
             s.sampling.repetition_penalty = parse_real(
                 "chat.repeat_penalty", v, [](float x) { return x > 0.0f && x <= 100.0f; }, "a number in (0, 100]");
         }},
        {"chat.seed",
         [](const ChatSettings& s) { return s.random_seed ? std::string("random") : std::to_string(s.sampling.seed); },
         [](ChatSettings& s, std::string_view v) {
             if (v == "random") {
                 s.random_seed = true;
                 return;
             }
             s.sampling.seed = static_cast<uint64_t>(parse_integer("chat.seed", v, 0, int64_t{1} << 62));
             s.random_seed = false;
         }},
        {"chat.max_new_tokens", [](const ChatSettings& s) { return std::to_string(s.max_new_tokens); },
         [](ChatSettings& s, std::string_view v) {
             s.max_new_tokens = static_cast<int>(parse_integer("chat.max_new_tokens", v, 1, 1 << 20));
         }},
        {"chat.system_prompt", [](const ChatSettings& s) { return s.system_prompt; },
         [](ChatSettings& s, std::string_view v) { s.system_prompt = std::string(v); }},
    };
    return all;
}

}  // namespace

ChatSettings ChatSettings::load(const Store& store) {
    ChatSettings s;
    for (const Field& f : fields()) {
        const std::optional<std::string> v = store.setting(f.key);
        if (!v) continue;
        try {
            f.set(s, *v);
        } catch (const Error& e) {
            s.notices.push_back(std::string(e.what()) + "; the default " + in_quotes(f.get(ChatSettings{})) + " is used");
        }
    }
    return s;
}

void ChatSettings::validate() const {
    ChatSettings check;
    for (const Field& f : fields()) f.set(check, f.get(*this));
}

void ChatSettings::save(Store& store) const {
    validate();
    for (const Field& f : fields()) store.set_setting(f.key, f.get(*this));
}

std::string fallback_strategy(const std::string& spec) {
    // A quantized strategy keeps its quantization offloaded: the user chose the precision.
    if (spec.rfind("quantized", 0) == 0) return spec.find("offloaded") == std::string::npos ? spec + "+offloaded" : spec;
    return "offloaded";
}

TurnOptions ChatSettings::turn_options(const std::string& conversation_spec) const {
    return turn_options(conversation_spec, ConversationSettings{});
}

TurnOptions ChatSettings::turn_options(const std::string& conversation_spec, const ConversationSettings& own) const {
    TurnOptions t;
    t.generation.max_new_tokens = static_cast<int>(own.max_new_tokens.value_or(max_new_tokens));
    t.generation.sampling = sampling;
    SamplerConfig& sc = t.generation.sampling;
    if (own.temperature) sc.temperature = static_cast<float>(*own.temperature);
    if (own.top_k) sc.top_k = static_cast<int>(*own.top_k);
    if (own.top_p) sc.top_p = static_cast<float>(*own.top_p);
    if (own.min_p) sc.min_p = static_cast<float>(*own.min_p);
    if (own.repetition_penalty) sc.repetition_penalty = static_cast<float>(*own.repetition_penalty);
    if (own.seed) sc.seed = static_cast<uint64_t>(*own.seed);
    else if (random_seed) sc.seed = std::random_device{}() & 0x7fffffffu;
    t.context_length = own.context_length.value_or(0);
    t.policy = context_policy;
    t.max_cache_bytes = cache_memory_budget;
    t.fallback_spec = fallback_strategy(conversation_spec);
    return t;
}

void validate_conversation_settings(const ConversationSettings& own, int64_t model_context) {
    // The global settings' ranges, checked by the same parsers (the message names the setting).
    ChatSettings check;
    auto set = [&](const char* key, const std::string& text) {
        for (const Field& f : fields())
            if (std::string_view(f.key) == key) f.set(check, text);
    };
    auto real = [](double v) { return format_real(static_cast<float>(v)); };
    if (own.temperature) set("chat.temperature", real(*own.temperature));
    if (own.top_k) set("chat.top_k", std::to_string(*own.top_k));
    if (own.top_p) set("chat.top_p", real(*own.top_p));
    if (own.min_p) set("chat.min_p", real(*own.min_p));
    if (own.repetition_penalty) set("chat.repeat_penalty", real(*own.repetition_penalty));
    if (own.seed) set("chat.seed", std::to_string(*own.seed));
    if (own.max_new_tokens) set("chat.max_new_tokens", std::to_string(*own.max_new_tokens));
    if (own.context_length && (*own.context_length < 16 || (model_context > 0 && *own.context_length > model_context)))
        throw Error("context length " + std::to_string(*own.context_length) + " is not a whole number from 16 to " +
                    std::to_string(model_context) + " (the model's context)");
}

}  // namespace kvchat
