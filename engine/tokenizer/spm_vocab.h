#pragma once
// A SentencePiece vocabulary as GGUF stores it, and its conversion into a SentencePiece
// ModelProto that libsentencepiece loads.
//
// Conversion rules (tests/reference/make_tokenizer_golden.py implements them a second time):
// - model type BPE: GGUF "llama" vocabularies (Llama 2, Mistral, Gemma) come from BPE
//   SentencePiece models whose scores rank the merges;
// - the token at the unknown id is the one UNKNOWN piece (Gemma's GGUF types it control);
// - piece types are the vocabulary's, as llama.cpp reads them: typed text is matched against
//   user-defined pieces (Gemma's whitespace runs, "\n", HTML tags, "<start_of_image>",
//   "[multimodal]") and never against control pieces. User-defined special ids (BOS, EOS, PAD,
//   the turn markers) and the end-of-turn, end-of-generation and fill-in-the-middle markers that
//   llama.cpp retypes by name ("</s>", "<|im_end|>", "<|fim_prefix|>"; is_control_name) become
//   CONTROL, so typed text never turns into them;
// - GGUF converters store the spaces of user-defined pieces as ' '; they get their U+2581
//   back, because SentencePiece matches them after escaping the text's whitespace;
// - empty or repeated pieces, which SentencePiece refuses, become unreachable placeholders
//   (the tokenizer still decodes those ids from the vocabulary);
// - normalizer: no extra-whitespace removal, whitespace escaped to U+2581, dummy prefix from
//   add_space_prefix, the precompiled charsmap when the GGUF has one.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

// Numbered as GGUF's tokenizer.ggml.token_type and SentencePiece's piece types.
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SpecialTokens {
    int32_t bos = -1, eos = -1, unk = -1, pad = -1;
    int32_t start_of_turn = -1;  // Gemma's <start_of_turn>, when the vocabulary has it
    // The marker that ends a turn: Gemma's <end_of_turn>, ChatML's <|im_end|>, Llama 3's <|eot_id|>
    // (for byte-level BPE vocabularies tokenizer.ggml.eot_token_id, else found by name as llama.cpp does).
    int32_t end_of_turn = -1;
    bool add_bos = true;   // encode(text, true) prepends bos
    bool add_eos = false;  // what the metadata says; encode never appends eos (chat templates place it)
};

struct SpmVocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;      // empty: all 0
    std::vector<TokenType> types;   // empty: all normal
    SpecialTokens special;          // turn markers left at -1 are looked up by name
    bool add_space_prefix = true;   // GGUF's default when the key is absent
    std::string precompiled_charsmap;
};

// Reads tokenizer.ggml.* of a GGUF file. Throws kvchat::Error naming the vocabulary type when
// tokenizer.ggml.model is not "llama" (e.g. "gpt2" BPE of Llama 3 and Qwen, "bert", "rwkv").
class GgufFile;
SpmVocab read_spm_vocab(const GgufFile& file);

// True for user-defined pieces that mark structure for the model rather than stand for text:
// "[multimodal]", "<start_of_image>", "<end_of_…>", "<…_soft_token>", "<|…|>", "<unused12>", "<mask>".
// A tokenizer.model (Hugging Face folders) types its markers user-defined, with no other record of
// which are special, so Tokenizer::from_file makes these control.
bool is_special_marker(std::string_view piece);

// The pieces llama.cpp types control whatever a GGUF vocabulary says: its end-of-turn,
// end-of-generation and fill-in-the-middle markers ("</s>", "<end_of_turn>", "<|im_end|>", ...).
bool is_control_name(std::string_view piece);

// vocab.special with what the vocabulary leaves open filled in: the turn markers looked up by
// name ("<start_of_turn>", "<end_of_turn>") and the unknown id from the token types.
SpecialTokens resolved_special(const SpmVocab& vocab);

// The type each token gets in the tokenizer, after the rules above. Throws kvchat::Error when
// the vocabulary is empty, inconsistent or has no unknown token.
std::vector<TokenType> effective_types(const SpmVocab& vocab);

// Serialized sentencepiece.ModelProto for `vocab` with the types from effective_types().
std::string spm_model_proto(const SpmVocab& vocab, const std::vector<TokenType>& types);

// "<0xAB>" -> 0xAB; -1 when `piece` is not a byte piece.
int byte_piece_value(std::string_view piece);

}  // namespace kvchat
