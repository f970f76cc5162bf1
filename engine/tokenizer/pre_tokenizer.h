#pragma once
// The split of text into words that byte-level BPE then merges, one per tokenizer.ggml.pre name.
// Each is a list of regular expressions applied in turn, as llama.cpp (llama-vocab.cpp) does: the
// first splits the text into pieces (its matches and the text between them), the next splits each
// piece on its own (a piece's end is the end of the text for its look-aheads), and so on; the
// pieces of the last are the words. The expressions are those of the models' tokenizer.json in
// llama.cpp's adaptation. They run on PCRE2 (UTF, Unicode properties, JIT), whose tables give the
// Unicode classes (\p{L}, \p{N}, ...; \s means the Unicode White_Space property, as in llama.cpp).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

struct PreTokenizerSpec {
    std::vector<std::string> expressions;
    bool ignore_merges = false;   // a word that is a whole token is that token, merges or not (Llama 3, Tekken)
    bool add_bos = false;         // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

// The spec llama.cpp uses for a tokenizer.ggml.pre name ("" is llama.cpp's "default"). Throws
// kvchat::Error naming the pre-tokenizer for one that is not supported.
PreTokenizerSpec pre_tokenizer_spec(std::string_view name);

// The names pre_tokenizer_spec accepts, for messages and tests.
std::vector<std::string> supported_pre_tokenizers();

// A word of a split: `length` bytes from `offset`.
struct TextSpan {
    uint32_t offset = 0;
    uint32_t length = 0;
};

class PreTokenizer {
public:
    // Compiles the expressions once. Throws kvchat::Error naming an expression PCRE2 refuses.
    explicit PreTokenizer(const PreTokenizerSpec& spec);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Appends the words of `text`, which must be valid UTF-8 shorter than 4 GiB, to `words`: in
    // order, covering the text, none empty. Safe to call from several threads at once.
    void split(std::string_view text, std::vector<TextSpan>& words) const;

private:
    struct Compiled;
    std::vector<std::unique_ptr<Compiled>> expressions_;
    void split_piece(size_t level, std::string_view text, uint32_t base, std::vector<TextSpan>& words,
                     void* match_data) const;
};

}  // namespace kvchat
