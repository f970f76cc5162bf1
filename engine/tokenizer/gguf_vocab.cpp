// The GGUF side of the tokenizer: tokenizer.ggml.* metadata into an SpmVocab or a BpeVocab. Kept
// apart from the tokenizers so the conversion can be used and tested without a GGUF file.
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/spm_vocab.h"
#include "engine/tokenizer/tokenizer.h"

#include <cmath>
#include <cstdint>
#include <optional>

namespace kvchat {

namespace {

// An id key, or -1 when absent. Ids are unsigned in GGUF but written with various widths; one
// outside the vocabulary of `n` tokens cannot be right and is refused with its key.
int32_t optional_id(const GgufFile& file, std::string_view key, size_t n) {
    const GgufValue* v = file.find(key);
    if (!v) return -1;
    bool inside = false;
    std::string shown;
    if (const auto* u = std::get_if<uint64_t>(&v->v)) {
        inside = *u < n;
        shown = std::to_string(*u);
    } else if (const auto* i = std::get_if<int64_t>(&v->v)) {
        inside = *i >= 0 && static_cast<uint64_t>(*i) < n;
        shown = std::to_string(*i);
    } else {
        throw Error(file.path() + ": metadata " + std::string(key) + " is not an integer");
    }
    if (!inside)
        throw Error(file.path() + ": metadata " + std::string(key) + " = " + shown +
                    " is outside the vocabulary of " + std::to_string(n) + " tokens");
    return static_cast<int32_t>(std::stoll(shown));
}

double number(const GgufFile& file, std::string_view key, const GgufValue& item) {
    if (const auto* d = std::get_if<double>(&item.v)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&item.v)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&item.v)) return static_cast<double>(*i);
    throw Error(file.path() + ": metadata " + std::string(key) + " holds a non-number");
}

// One entry of an integer array: an integer between lo and hi, or an error naming key[index].
int64_t integer_item(const GgufFile& file, std::string_view key, size_t index, const GgufValue& item, int64_t lo,
                     int64_t hi) {
    bool inside = false;
    int64_t v = 0;
    if (const auto* u = std::get_if<uint64_t>(&item.v)) {
        inside = *u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(*u) >= lo;
        v = static_cast<int64_t>(*u);
    } else if (const auto* i = std::get_if<int64_t>(&item.v)) {
        inside = *i >= lo && *i <= hi;
        v = *i;
    }
    if (!inside)
        throw Error(file.path() + ": metadata " + std::string(key) + "[" + std::to_string(index) +
                    "] is not an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v;
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
        for (const GgufValue& s : scores->items) {
            const double score = number(file, "tokenizer.ggml.scores", s);
            // A NaN or infinite score would make SentencePiece's choice of pieces meaningless.
            if (!std::isfinite(static_cast<float>(score)))
                throw Error(file.path() + ": metadata tokenizer.ggml.scores[" + std::to_string(v.scores.size()) +
                            "] is not a finite number");
            v.scores.push_back(static_cast<float>(score));
        }
    }
    if (const GgufArray* types = optional_array(file, "tokenizer.ggml.token_type", n)) {
        v.types.reserve(n);
        // Integers only (a float cast to the enum could be anything); unknown kinds become normal
        // pieces later, as in llama.cpp.
        for (const GgufValue& t : types->items)
            v.types.push_back(static_cast<TokenType>(
                integer_item(file, "tokenizer.ggml.token_type", v.types.size(), t, INT32_MIN, INT32_MAX)));
    }
    if (file.find("tokenizer.ggml.precompiled_charsmap")) {
        const GgufArray& map = file.get_array("tokenizer.ggml.precompiled_charsmap");
        v.precompiled_charsmap.reserve(map.items.size());
        for (const GgufValue& b : map.items)
            v.precompiled_charsmap.push_back(static_cast<char>(integer_item(
                file, "tokenizer.ggml.precompiled_charsmap", v.precompiled_charsmap.size(), b, -128, 255)));
    }
    v.special.bos = optional_id(file, "tokenizer.ggml.bos_token_id", n);
    v.special.eos = optional_id(file, "tokenizer.ggml.eos_token_id", n);
    v.special.unk = optional_id(file, "tokenizer.ggml.unknown_token_id", n);
    v.special.pad = optional_id(file, "tokenizer.ggml.padding_token_id", n);
    // llama.cpp's defaults for SentencePiece vocabularies when the keys are absent.
    v.special.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", true);
    v.special.add_eos = file.get_bool("tokenizer.ggml.add_eos_token", false);
    v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix", true);
    return v;
}

namespace {

std::vector<std::string> string_array(const GgufFile& file, std::string_view key) {
    const GgufArray& a = file.get_array(key);
    std::vector<std::string> out;
    out.reserve(a.items.size());
    for (const GgufValue& t : a.items) {
        const auto* s = std::get_if<std::string>(&t.v);
        if (!s) throw Error(file.path() + ": " + std::string(key) + " holds a non-string");
        out.push_back(*s);
    }
    return out;
}

std::optional<bool> optional_bool(const GgufFile& file, std::string_view key) {
    if (!file.find(key)) return std::nullopt;
    return file.get_bool(key);
}

}  // namespace

BpeVocab read_bpe_vocab(const GgufFile& file) {
    const std::string kind = file.get_string("tokenizer.ggml.model", "");
    if (kind != "gpt2")
        throw Error(file.path() + ": tokenizer type '" + kind + "' is not a byte-level BPE vocabulary ('gpt2')");
    BpeVocab v;
    v.tokens = string_array(file, "tokenizer.ggml.tokens");
    const size_t n = v.tokens.size();
    if (!file.find("tokenizer.ggml.merges"))
        throw Error(file.path() + ": byte-level BPE vocabulary ('gpt2') without tokenizer.ggml.merges");
    v.merges = string_array(file, "tokenizer.ggml.merges");
    v.pre = file.get_string("tokenizer.ggml.pre", "");
    if (const GgufArray* types = optional_array(file, "tokenizer.ggml.token_type", n)) {
        v.types.reserve(n);
        for (const GgufValue& t : types->items)
            v.types.push_back(static_cast<TokenType>(
                integer_item(file, "tokenizer.ggml.token_type", v.types.size(), t, INT32_MIN, INT32_MAX)));
    }
    v.special.bos = optional_id(file, "tokenizer.ggml.bos_token_id", n);
    v.special.eos = optional_id(file, "tokenizer.ggml.eos_token_id", n);
    v.special.unk = optional_id(file, "tokenizer.ggml.unknown_token_id", n);
    v.special.pad = optional_id(file, "tokenizer.ggml.padding_token_id", n);
    v.special.end_of_turn = optional_id(file, "tokenizer.ggml.eot_token_id", n);
    v.add_bos = optional_bool(file, "tokenizer.ggml.add_bos_token");
    v.special.add_eos = file.get_bool("tokenizer.ggml.add_eos_token", false);
    return v;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
    const std::string kind = file.get_string("tokenizer.ggml.model", "");
    if (kind == "gpt2") {
        BpeVocab vocab = read_bpe_vocab(file);
        try {
            return from_bpe_vocab(vocab);
        } catch (const Error& e) {
            throw Error(file.path() + ": " + e.what());  // which file has the unsupported pre-tokenizer
        }
    }
    if (kind != "llama")
        throw Error(file.path() + ": tokenizer type '" + kind +
                    "' is not supported (SentencePiece 'llama' and byte-level BPE 'gpt2' vocabularies are)");
    return from_vocab(read_spm_vocab(file));
}

}  // namespace kvchat
