#pragma once
// A byte-level BPE vocabulary as GGUF stores it (tokenizer.ggml.model = "gpt2": GPT-2, Llama 3,
// Qwen, SmolLM, DeepSeek, Mistral Nemo), and the byte-level mapping its pieces are written in.
//
// Rules, as llama.cpp (llama-vocab.cpp) applies them:
// - every byte is written as one printable code point (GPT-2's bytes_to_unicode: the printable
//   Latin-1 bytes stand for themselves, the others for U+0100 onwards), so " the" is stored "Ġthe";
// - merges "Ġ t" are ranked by their order; a word's bytes are merged pair by pair, always the
//   pair of lowest rank (the leftmost among equals), and each final piece is looked up in the
//   vocabulary (a piece that is no token gives the tokens of its single characters, when present);
// - the words come from the pre-tokenizer tokenizer.ggml.pre names (pre_tokenizer.h);
// - text a user typed is matched against user-defined pieces ("<think>" in DeepSeek-R1's Qwen
//   vocabulary), longest first, before it is split; control pieces ("<|im_start|>") never match,
//   so typed markers stay text. The end-of-turn, end-of-generation and fill-in-the-middle markers
//   llama.cpp retypes by name (is_control_name) are control whatever the file says;
// - invalid UTF-8 is read the way llama.cpp reads it: each byte that starts no sequence is U+FFFD;
//   a lead byte with its continuation bytes is one character even when overlong or a surrogate.
#include "engine/tokenizer/spm_vocab.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

struct BpeVocab {
    std::vector<std::string> tokens;  // byte-level text, as stored
    std::vector<TokenType> types;     // empty: all normal
    std::vector<std::string> merges;  // "left right" in byte-level text, by rank
    std::string pre;                  // tokenizer.ggml.pre; empty means llama.cpp's "default"
    SpecialTokens special;            // end_of_turn -1: looked up by name as llama.cpp does
    std::optional<bool> add_bos;      // absent: the pre-tokenizer's default (true for Llama 3 and Tekken)
};

// Reads tokenizer.ggml.* of a GGUF whose tokenizer.ggml.model is "gpt2". Throws kvchat::Error
// naming the key that is missing or malformed.
class GgufFile;
BpeVocab read_bpe_vocab(const GgufFile& file);

// GPT-2's byte-level mapping: each byte as the UTF-8 of the code point that stands for it.
std::string byte_level_encode(std::string_view bytes);
// The other way; false when `text` holds a character that stands for no byte.
bool byte_level_decode(std::string_view text, std::string& bytes);

// The text llama.cpp tokenizes for `bytes`, valid UTF-8 or not (see the rules above): `text`
// has the characters re-encoded, `subject` the same with surrogates as U+FFFD (same length) for
// the pre-tokenizer. Both are `bytes` itself when it is valid UTF-8.
void llama_utf8_text(std::string_view bytes, std::string& text, std::string& subject);

}  // namespace kvchat
