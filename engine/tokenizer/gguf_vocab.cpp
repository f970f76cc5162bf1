// The GGUF side of the tokenizer: tokenizer.ggml.* metadata into an SpmVocab. Kept apart from
// the SentencePiece code so the conversion can be used and tested without a GGUF file.
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/tokenizer/spm_vocab.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvchat {

namespace {

// An id key, or -1 when absent. Ids are unsigned in GGUF but written with various widths.
int32_t optional_id(const GgufFile& file, std::string_view key) {
    const GgufValue* v = file.find(key);
    if (!v) return -1;
    if (const auto* u = std::get_if<uint64_t>(&v->v)) return *u <= 0x7FFFFFFF ? static_cast<int32_t>(*u) : -1;
    if (const auto* i = std::get_if<int64_t>(&v->v)) return *i >= 0 && *i <= 0x7FFFFFFF ? static_cast<int32_t>(*i) : -1;
    throw Error(file.path() + ": metadata " + std::string(key) + " is not an integer");
}

double number(const GgufFile& file, std::string_view key, const GgufValue& item) {
    if (const auto* d = std::get_if<double>(&item.v)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&item.v)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&item.v)) return static_cast<double>(*i);
    throw Error(file.path() + ": metadata " + std::string(key) + " holds a non-number");
}

const GgufArray* optional_array(const GgufFile& file, std::string_view key, size_t expected_size) {
    if (!file.find(key)) return nullptr;
    const GgufArray& a = file.get_array(key);
    if (a.items.size() != expected_size)
        throw Error(file.path() + ": " + std::string(key) + " has " + std::to_string(a.items.size()) +
                    " entries for " + std::to_string(expected_size) + " tokens");
    return &a;
}

}  // namespace

SpmVocab read_spm_vocab(const GgufFile& file) {
    const std::string kind = file.get_string("tokenizer.ggml.model", "");
    if (kind != "llama")
        throw Error(file.path() + ": tokenizer type '" + kind +
                    "' is not supported (only SentencePiece vocabularies, tokenizer.ggml.model = 'llama')");

    SpmVocab v;
    const GgufArray& tokens = file.get_array("tokenizer.ggml.tokens");
    v.tokens.reserve(tokens.items.size());
    for (const GgufValue& t : tokens.items) {
        const auto* s = std::get_if<std::string>(&t.v);
        if (!s) throw Error(file.path() + ": tokenizer.ggml.tokens holds a non-string");
        v.tokens.push_back(*s);
    }
    const size_t n = v.tokens.size();
    if (const GgufArray* scores = optional_array(file, "tokenizer.ggml.scores", n)) {
        v.scores.reserve(n);
        for (const GgufValue& s : scores->items)
            v.scores.push_back(static_cast<float>(number(file, "tokenizer.ggml.scores", s)));
    }
    if (const GgufArray* types = optional_array(file, "tokenizer.ggml.token_type", n)) {
        v.types.reserve(n);
        for (const GgufValue& t : types->items)
            v.types.push_back(static_cast<TokenType>(number(file, "tokenizer.ggml.token_type", t)));
    }
    if (file.find("tokenizer.ggml.precompiled_charsmap")) {
        const GgufArray& map = file.get_array("tokenizer.ggml.precompiled_charsmap");
        v.precompiled_charsmap.reserve(map.items.size());
        for (const GgufValue& b : map.items)
            v.precompiled_charsmap.push_back(
                static_cast<char>(static_cast<int64_t>(number(file, "tokenizer.ggml.precompiled_charsmap", b))));
    }
    v.special.bos = optional_id(file, "tokenizer.ggml.bos_token_id");
    v.special.eos = optional_id(file, "tokenizer.ggml.eos_token_id");
    v.special.unk = optional_id(file, "tokenizer.ggml.unknown_token_id");
    v.special.pad = optional_id(file, "tokenizer.ggml.padding_token_id");
    // llama.cpp's defaults for SentencePiece vocabularies when the keys are absent.
    v.special.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", true);
    v.special.add_eos = file.get_bool("tokenizer.ggml.add_eos_token", false);
    v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix", true);
    return v;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) { return from_vocab(read_spm_vocab(file)); }

}  // namespace kvchat
