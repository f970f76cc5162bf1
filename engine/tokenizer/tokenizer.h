#pragma once
// SentencePiece tokenizer, built from a GGUF vocabulary or loaded from a tokenizer.model.
// User text is always plain text: strings like "<start_of_turn>" in it are never turned into
// control tokens. Control tokens are inserted by id by the chat template code.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

class GgufFile;

struct SpecialTokens {
    int32_t bos = -1, eos = -1, unk = -1, pad = -1;
    int32_t start_of_turn = -1, end_of_turn = -1;  // Gemma's turn markers, when the vocabulary has them
    bool add_bos = true;
    bool add_eos = false;
};

class Tokenizer {
public:
    // From a GGUF whose tokenizer.ggml.model is "llama" (SentencePiece); throws kvchat::Error
    // naming the vocabulary type for anything else (e.g. "gpt2" BPE of Llama 3 and Qwen).
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
    // From a SentencePiece tokenizer.model file (a Hugging Face model folder); special ids from
    // the model itself, optionally overridden by the caller.
    static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_model_path);
    virtual ~Tokenizer() = default;

    // Plain-text tokenization; with add_bos the BOS id is prepended when the model asks for it.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // The bytes of one token as the model produces them (byte-fallback tokens give single bytes,
    // "▁" becomes a space). Control tokens give "".
    virtual std::string token_bytes(int32_t id) const = 0;
    virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
    virtual int32_t vocab_size() const = 0;
    virtual bool is_control(int32_t id) const = 0;
    virtual std::string piece(int32_t id) const = 0;  // the raw vocabulary string
    virtual int32_t find_piece(std::string_view piece) const = 0;  // -1 when absent
    const SpecialTokens& special() const { return special_; }

protected:
    SpecialTokens special_;
};

// Turns a stream of token ids into text pieces that are always valid UTF-8: bytes of a
// character split across tokens are held back until the character is complete.
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
