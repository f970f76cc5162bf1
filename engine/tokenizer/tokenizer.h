#pragma once
// The tokenizer: SentencePiece (built from a GGUF vocabulary or loaded from a tokenizer.model) or
// byte-level BPE (a GGUF "gpt2" vocabulary; bpe_vocab.h). User text is always plain text: strings
// like "<start_of_turn>" or "<|im_start|>" in it are never turned into control tokens. Control
// tokens are inserted by id by the chat template code.
#include "engine/tokenizer/spm_vocab.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

class GgufFile;
struct BpeVocab;

class Tokenizer {
public:
    // The core: a tokenizer over a SentencePiece vocabulary (see spm_vocab.h for how it is
    // converted). Throws kvchat::Error when the vocabulary is unusable.
    static std::unique_ptr<Tokenizer> from_vocab(const SpmVocab& vocab);
    // A byte-level BPE tokenizer (see bpe_vocab.h). Throws kvchat::Error when the vocabulary is
    // unusable or its pre-tokenizer is not supported (the message names it).
    static std::unique_ptr<Tokenizer> from_bpe_vocab(const BpeVocab& vocab);
    // From a GGUF whose tokenizer.ggml.model is "llama" (SentencePiece) or "gpt2" (byte-level BPE);
    // throws kvchat::Error naming the vocabulary type for anything else ("bert", "rwkv", ...).
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
    // From a SentencePiece tokenizer.model file (a Hugging Face model folder); special ids from
    // the model itself unless the caller passes them (from the folder's tokenizer_config.json).
    // Special markers typed user-defined become control here too.
    static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_model_path,
                                                const std::optional<SpecialTokens>& special = std::nullopt);
    virtual ~Tokenizer() = default;

    // Plain-text tokenization; with add_bos the BOS id is prepended when the model asks for it.
    // Invalid UTF-8 in `text` is tokenized as U+FFFD.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // The bytes of one token as the model produces them (byte-fallback tokens give single bytes,
    // "▁" becomes a space, byte-level BPE text becomes its bytes). Control and unused tokens give
    // "", the unknown token " ⁇ " (SentencePiece) or "" (BPE, as in llama.cpp).
    // Throws kvchat::Error for an id outside the vocabulary.
    virtual std::string token_bytes(int32_t id) const = 0;
    // The concatenated token bytes as valid UTF-8 (invalid sequences become U+FFFD). A space
    // prefix that encode() added (add_space_prefix vocabularies) is kept: decode is what the
    // model wrote, byte for byte, and equals what StreamingDetokenizer yields.
    std::string decode(const std::vector<int32_t>& ids) const;
    int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
    TokenType type(int32_t id) const;  // after the conversion rules of spm_vocab.h
    bool is_control(int32_t id) const { return type(id) == TokenType::Control; }
    std::string piece(int32_t id) const;  // the raw vocabulary string
    virtual int32_t find_piece(std::string_view piece) const = 0;  // -1 when absent
    const SpecialTokens& special() const { return special_; }

protected:
    // Throws kvchat::Error for an id outside the vocabulary.
    void check(int32_t id) const;

    SpecialTokens special_;
    // The vocabulary as both kinds report it: each id's raw string and its type.
    std::vector<std::string> tokens_;
    std::vector<TokenType> types_;
};

// Turns a stream of token ids into text pieces that are always valid UTF-8: bytes of a
// character split across tokens are held back until the character is complete, and bytes
// that can never complete one become U+FFFD.
class StreamingDetokenizer {
public:
    explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(tok) {}
    // Returns the text that became complete with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is still held back at the end, with invalid sequences replaced by U+FFFD.
    std::string flush();

private:
    const Tokenizer& tok_;
    std::string pending_;
};

}  // namespace kvchat
