#include "engine/api/api_request.h"

#include "engine/cache/cache_spec.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace kvchat::api {

namespace {

using nlohmann::json;

std::string type_name(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
    return bad_field(param, "'" + param + "' must be " + expected + ", got " + type_name(got));
}

// The nesting depth of a JSON text, strings skipped; stops counting past `limit`.
int json_depth(std::string_view text, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit) return deepest;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return deepest;
}

json parse_body(std::string_view body) {
    if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        throw ApiError(400, "the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    json j = json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded())
        throw ApiError(400, "the request body is not valid JSON (expected an object such as "
                            "{\"model\": ..., \"messages\": [...]})");
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object, got " + type_name(j));
    return j;
}

// A present, non-null field.
const json* field(const json& j, const char* name) {
    auto it = j.find(name);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A field that must be there (present, non-null); `param` names it in the error, with its path
// (messages[2].role) when it is nested.
const json& required_field(const json& j, const char* name, const std::string& param) {
    const json* v = field(j, name);
    if (!v) throw bad_field(param, "'" + param + "' is missing");
    return *v;
}

std::string string_field(const json& j, const char* name) {
    const json* v = field(j, name);
    if (!v) return {};
    if (!v->is_string()) throw wrong_type(name, "a string", *v);
    return v->get<std::string>();
}

bool bool_field(const json& j, const char* name, bool fallback) {
    const json* v = field(j, name);
    if (!v) return fallback;
    if (!v->is_boolean()) throw wrong_type(name, "a boolean", *v);
    return v->get<bool>();
}

std::optional<double> number_field(const json& j, const char* name, double lo, double hi) {
    const json* v = field(j, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw wrong_type(name, "a number", *v);
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi))
        throw bad_field(name, "'" + std::string(name) + "' must be between " + json(lo).dump() + " and " +
                                  json(hi).dump() + ", got " + v->dump());
    return d;
}

std::optional<long long> integer_field(const json& j, const char* name, long long lo, long long hi) {
    const json* v = field(j, name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() && !v->is_number_unsigned()) throw wrong_type(name, "an integer", *v);
    if (v->is_number_unsigned() && v->get<unsigned long long>() > static_cast<unsigned long long>(hi))
        throw bad_field(name, "'" + std::string(name) + "' must be at most " + std::to_string(hi));
    const long long n = v->get<long long>();
    if (n < lo || n > hi)
        throw bad_field(name, "'" + std::string(name) + "' must be between " + std::to_string(lo) + " and " +
                                  std::to_string(hi) + ", got " + std::to_string(n));
    return n;
}

std::string utf8_text(const std::string& param, std::string text) {
    if (!is_valid_utf8(text)) throw bad_field(param, "'" + param + "' is not valid UTF-8");
    return text;
}

// The fields both endpoints share: sampling, length, stop, streaming, and the ones refused.
SamplingRequest parse_sampling(const json& j, bool& stream, bool& include_usage) {
    SamplingRequest s;
    stream = bool_field(j, "stream", false);
    if (const json* so = field(j, "stream_options")) {
        if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
        if (const json* iu = field(*so, "include_usage")) {
            if (!iu->is_boolean()) throw wrong_type("stream_options.include_usage", "a boolean", *iu);
            include_usage = iu->get<bool>();
        }
    }
    constexpr long long kMaxTokens = 1 << 20;
    if (auto n = integer_field(j, "max_completion_tokens", 1, kMaxTokens)) s.max_tokens = static_cast<int>(*n);
    else if (auto m = integer_field(j, "max_tokens", 1, kMaxTokens)) s.max_tokens = static_cast<int>(*m);
    s.temperature = number_field(j, "temperature", 0.0, 2.0);
    s.top_p = number_field(j, "top_p", 0.0, 1.0);
    if (s.top_p && *s.top_p == 0.0) s.top_p = std::numeric_limits<float>::min();  // "only the most likely"
    if (auto k = integer_field(j, "top_k", 0, 1 << 30)) s.top_k = static_cast<int>(*k);
    s.min_p = number_field(j, "min_p", 0.0, 0.999999);
    s.repetition_penalty = number_field(j, "repetition_penalty", 0.01, 100.0);
    if (auto seed = integer_field(j, "seed", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max()))
        s.seed = static_cast<uint64_t>(*seed);
    if (const json* stop = field(j, "stop")) {
        if (stop->is_string()) {
            s.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            for (const json& e : *stop) {
                if (!e.is_string()) throw wrong_type("stop", "a string or an array of strings", e);
                s.stop.push_back(e.get<std::string>());
            }
        } else {
            throw wrong_type("stop", "a string or an array of strings", *stop);
        }
        if (s.stop.size() > 16) throw bad_field("stop", "'stop' holds more than 16 strings");
        for (std::string& t : s.stop) {
            if (t.empty()) throw bad_field("stop", "'stop' holds an empty string");
            t = utf8_text("stop", std::move(t));
        }
    }
    // Additive penalties have no counterpart in the sampler (its repetition penalty divides the
    // logits of every token seen, the transformers way): refused unless they are off.
    for (const char* name : {"presence_penalty", "frequency_penalty"})
        if (auto p = number_field(j, name, -2.0, 2.0); p && *p != 0.0)
            throw bad_field(name, "'" + std::string(name) + "' is not supported: kvchat's sampler has no additive "
                                  "penalty; use 'repetition_penalty' (multiplicative, 1 = off, e.g. 1.1) instead");
    if (auto n = integer_field(j, "n", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max());
        n && *n != 1)
        throw bad_field("n", "'n' must be 1: one model computes one answer at a time (got " + std::to_string(*n) + ")");
    if (bool_field(j, "logprobs", false) || field(j, "top_logprobs"))
        throw bad_field("logprobs", "'logprobs' is not supported");
    if (const json* b = field(j, "logit_bias"); b && !(b->is_object() && b->empty()))
        throw bad_field("logit_bias", "'logit_bias' is not supported");
    // Refused rather than ignored: a client that asked for JSON would parse free text as JSON.
    if (const json* rf = field(j, "response_format")) {
        if (!rf->is_object()) throw wrong_type("response_format", "an object", *rf);
        const json* type = field(*rf, "type");
        if (!type || !type->is_string())
            throw bad_field("response_format.type", "'response_format.type' must be a string ('text')");
        if (const std::string t = type->get<std::string>(); t != "text")
            throw bad_field("response_format", "'response_format' of type '" + t +
                                                   "' is not supported: answers are free text (type 'text'), "
                                                   "not constrained to JSON");
    }
    return s;
}

std::string message_content(const json& m, size_t i) {
    const std::string param = "messages[" + std::to_string(i) + "].content";
    const json* c = &required_field(m, "content", param);
    if (c->is_string()) return utf8_text(param, c->get<std::string>());
    if (!c->is_array()) throw wrong_type(param, "a string or an array of text parts", *c);
    // The parts form: text parts are joined; images and audio are refused by name.
    std::string text;
    for (size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        const std::string pp = param + "[" + std::to_string(k) + "]";
        if (!part.is_object()) throw wrong_type(pp, "an object", part);
        const std::string type = string_field(part, "type");
        if (type != "text")
            throw bad_field(pp + ".type", "'" + pp + ".type' is '" + type + "': only text parts are supported");
        const json* t = field(part, "text");
        if (!t || !t->is_string()) throw bad_field(pp + ".text", "'" + pp + ".text' must be a string");
        text += t->get<std::string>();
    }
    return utf8_text(param, std::move(text));
}

}  // namespace

GenerationConfig SamplingRequest::apply(GenerationConfig g) const {
    if (max_tokens) g.max_new_tokens = *max_tokens;
    SamplerConfig& s = g.sampling;
    if (temperature && *temperature == 0.0) {
        s.greedy = true;
        s.repetition_penalty = 1.0f;
    } else if (temperature) {
        s.greedy = false;
        s.temperature = static_cast<float>(*temperature);
    }
    if (top_p) s.top_p = static_cast<float>(*top_p);
    if (top_k) s.top_k = *top_k;
    if (min_p) s.min_p = static_cast<float>(*min_p);
    if (repetition_penalty) s.repetition_penalty = static_cast<float>(*repetition_penalty);
    if (seed) s.seed = *seed;
    g.stop_strings.insert(g.stop_strings.end(), stop.begin(), stop.end());
    try {
        validate(s);
    } catch (const Error& e) {
        throw ApiError(400, std::string("the sampling settings cannot be used: ") + e.what());
    }
    return g;
}

ChatCompletionRequest parse_chat_completion(std::string_view body) {
    const json j = parse_body(body);
    ChatCompletionRequest r;
    r.model = string_field(j, "model");
    r.sampling = parse_sampling(j, r.stream, r.include_usage);
    if (const json* tools = field(j, "tools"); tools && !(tools->is_array() && tools->empty()))
        throw bad_field("tools", "'tools' is not supported (no tool calls)");
    if (field(j, "functions")) throw bad_field("functions", "'functions' is not supported (no tool calls)");
    r.cache_spec = string_field(j, "cache");
    if (!r.cache_spec.empty()) {
        try {
            r.cache_spec = to_string(parse_cache_spec(r.cache_spec));
        } catch (const Error& e) {
            throw bad_field("cache", std::string("'cache' is not a cache strategy: ") + e.what());
        }
    }
    const json* msgs = &required_field(j, "messages", "messages");
    if (!msgs->is_array()) throw wrong_type("messages", "an array", *msgs);
    if (msgs->empty()) throw bad_field("messages", "'messages' is empty: give at least one user message");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw wrong_type(param, "an object", m);
        const json* role = &required_field(m, "role", param + ".role");
        if (!role->is_string()) throw wrong_type(param + ".role", "a string", *role);
        const std::string name = role->get<std::string>();
        Role r_role;
        if (name == "system" || name == "developer") r_role = Role::System;
        else if (name == "user") r_role = Role::User;
        else if (name == "assistant") r_role = Role::Assistant;
        else
            throw bad_field(param + ".role", "'" + param + ".role' is '" + name +
                                                 "': the roles are system, developer, user and assistant");
        if (field(m, "tool_calls")) throw bad_field(param + ".tool_calls", "tool calls are not supported");
        r.messages.emplace_back(r_role, message_content(m, i));
    }
    if (r.messages.back().role != Role::User)
        throw bad_field("messages", "the last message must be the user's (there is nothing to answer)");
    return r;
}

CompletionRequest parse_completion(std::string_view body) {
    const json j = parse_body(body);
    CompletionRequest r;
    r.model = string_field(j, "model");
    r.sampling = parse_sampling(j, r.stream, r.include_usage);
    if (bool_field(j, "echo", false)) throw bad_field("echo", "'echo' is not supported");
    if (field(j, "suffix")) throw bad_field("suffix", "'suffix' is not supported");
    if (auto b = integer_field(j, "best_of", 1, 1 << 20); b && *b != 1) throw bad_field("best_of", "'best_of' must be 1");
    const json* p = &required_field(j, "prompt", "prompt");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (!p->is_string()) throw wrong_type("prompt", "a string (or an array of one string)", *p);
    r.prompt = utf8_text("prompt", p->get<std::string>());
    if (r.prompt.empty()) throw bad_field("prompt", "'prompt' is empty");
    if (!r.sampling.max_tokens) r.sampling.max_tokens = 16;  // OpenAI's default for completions
    return r;
}

}  // namespace kvchat::api
