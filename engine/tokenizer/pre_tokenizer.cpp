#include "engine/tokenizer/pre_tokenizer.h"

#include "engine/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>

namespace kvchat {

namespace {

// GPT-2's expression; llama.cpp runs it with a trailing "\s+" (its hand-written matcher), which
// the gaps between matches give here (see split_piece).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3's expression with its case-insensitive contractions spelled out for ASCII only, as
// llama.cpp matches them.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: Llama 3's with single digits.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Tekken (Mistral Nemo). Its tokenizer.json has [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]* and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}]+; llama.cpp matches "a letter that is not a-z" and "a letter that is
// not A-Z" instead (so marks do not count and other scripts' letters count as both cases). The
// classes [^\P{L}a-z] and [^\P{L}A-Z] say the same without a repeated group, which PCRE2's JIT
// would need stack for on every letter.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[^\P{L}a-z]*[^\P{L}A-Z]+|[^\r\n\p{L}\p{N}]?[^\P{L}a-z]+[^\P{L}A-Z]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's expressions from its tokenizer.json. llama.cpp turns every non-ASCII whitespace
// character into U+000B before running the ones without \p classes, so such characters never
// match the ranges that include them (U+3000 in the third, U+1680..U+3000 in the fifth): the
// (?!\s) keeps them out here.
constexpr const char* kDeepseekLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+";
constexpr const char* kDeepseekPunctuation = "\\s?(?:(?!\\s)[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002])+";
constexpr const char* kDeepseekCjk = "(?:(?!\\s)[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff])+";

// \s and \S as the Unicode White_Space property, llama.cpp's whitespace: PCRE2's \s (with UCP)
// also matches U+180E, which Unicode stopped calling whitespace.
std::string with_white_space_property(std::string_view expression) {
    std::string out;
    out.reserve(expression.size() + 32);
    for (size_t i = 0; i < expression.size(); ++i) {
        if (expression[i] == '\\' && i + 1 < expression.size()) {
            const char next = expression[++i];
            if (next == 's') out += "\\p{White_Space}";
            else if (next == 'S') out += "\\P{White_Space}";
            else out += {'\\', next};
        } else {
            out += expression[i];
        }
    }
    return out;
}

struct NamedSpec {
    const char* name;
    PreTokenizerSpec spec;
};

const std::vector<NamedSpec>& named_specs() {
    static const std::vector<NamedSpec> specs = [] {
        const PreTokenizerSpec gpt2{{kGpt2}, false, false};
        const PreTokenizerSpec llama3{{kLlama3}, true, true};
        const PreTokenizerSpec qwen2{{kQwen2}, false, false};
        std::vector<NamedSpec> v;
        v.push_back({"default", {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false}});
        v.push_back({"gpt-2", gpt2});
        v.push_back({"smollm", {{R"(\p{N})", kGpt2}, false, false}});
        v.push_back({"llama-bpe", llama3});
        v.push_back({"llama3", llama3});
        v.push_back({"llama-v3", llama3});
        v.push_back({"qwen2", qwen2});
        v.push_back({"deepseek-r1-qwen", qwen2});
        v.push_back({"deepseek-llm",
                     {{"[\\r\\n]", kDeepseekLetters, kDeepseekPunctuation, "\\s+$", kDeepseekCjk, "\\p{N}+"}, false, false}});
        v.push_back({"tekken", {{kTekken}, true, true}});
        return v;
    }();
    return specs;
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(std::string_view name) {
    const std::string_view key = name.empty() ? "default" : name;  // llama.cpp's choice when the key is absent
    for (const NamedSpec& s : named_specs())
        if (key == s.name) return s.spec;
    std::string known;
    for (const std::string& n : supported_pre_tokenizers()) known += (known.empty() ? "" : ", ") + n;
    throw Error("pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre) is not supported; supported: " + known);
}

std::vector<std::string> supported_pre_tokenizers() {
    std::vector<std::string> names;
    for (const NamedSpec& s : named_specs()) names.emplace_back(s.name);
    return names;
}

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Per call: match data, a match context without PCRE2's default limits (the expressions are
// fixed and linear; the default match limit stops a long whitespace run), and a JIT stack that a
// long run of letters can need.
struct MatchState {
    pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = nullptr;
    MatchState() {
        if (!data || !context) throw Error("tokenizer: out of memory for PCRE2 match data");
        pcre2_set_match_limit(context, UINT32_MAX);
        pcre2_set_depth_limit(context, UINT32_MAX);
        pcre2_set_heap_limit(context, UINT32_MAX);
    }
    ~MatchState() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
    MatchState(const MatchState&) = delete;
    MatchState& operator=(const MatchState&) = delete;
    // Called when the JIT ran out of its stack: a larger one for the rest of this call.
    bool grow_stack() {
        if (stack) return false;
        stack = pcre2_jit_stack_create(32 << 10, 256 << 20, nullptr);
        if (!stack) return false;
        pcre2_jit_stack_assign(context, nullptr, stack);
        return true;
    }
};

}  // namespace

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) {
    for (const std::string& e : spec.expressions) {
        const std::string pattern = with_white_space_property(e);
        int error = 0;
        PCRE2_SIZE at = 0;
        auto c = std::make_unique<Compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &at, nullptr);
        if (!c->code) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            throw Error("pre-tokenizer expression '" + e + "' does not compile at offset " + std::to_string(at) +
                        ": " + reinterpret_cast<const char*>(message));
        }
        // Without JIT (a build of PCRE2 that lacks it) the interpreter gives the same matches, slower.
        c->jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
        expressions_.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<TextSpan>& words) const {
    if (text.size() >= UINT32_MAX) throw Error("tokenizer: text of 4 GiB or more");
    if (text.empty()) return;
    if (expressions_.empty()) {
        words.push_back({0, static_cast<uint32_t>(text.size())});
        return;
    }
    MatchState state;
    split_piece(0, text, 0, words, &state);
}

void PreTokenizer::split_piece(size_t level, std::string_view text, uint32_t base, std::vector<TextSpan>& words,
                               void* opaque) const {
    auto& state = *static_cast<MatchState*>(opaque);
    const Compiled& e = *expressions_[level];
    const bool last = level + 1 == expressions_.size();
    const auto emit = [&](size_t from, size_t to) {
        if (to <= from) return;
        if (last) words.push_back({base + static_cast<uint32_t>(from), static_cast<uint32_t>(to - from)});
        else split_piece(level + 1, text.substr(from, to - from), base + static_cast<uint32_t>(from), words, opaque);
    };
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;  // end of the last match
    size_t search = 0;
    while (search < text.size()) {
        int rc = e.jit ? pcre2_jit_match(e.code, subject, text.size(), search, 0, state.data, state.context)
                       : pcre2_match(e.code, subject, text.size(), search, PCRE2_NO_UTF_CHECK, state.data, state.context);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && state.grow_stack())
            rc = pcre2_jit_match(e.code, subject, text.size(), search, 0, state.data, state.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(rc, message, sizeof message);
            throw Error("tokenizer: cannot split the text at byte " + std::to_string(base + search) + ": " +
                        reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
        const size_t start = ov[0], end = ov[1];
        if (end == start) {
            // None of the expressions matches empty text; should one, it splits nothing (llama.cpp
            // would produce an empty word) and the search goes on after the next character.
            search = start + 1;
            while (search < text.size() && (static_cast<uint8_t>(text[search]) & 0xC0) == 0x80) ++search;
            continue;
        }
        emit(pos, start);  // text no expression matched is a piece of its own, as in llama.cpp
        emit(start, end);
        pos = search = end;
    }
    emit(pos, text.size());
}

}  // namespace kvchat
