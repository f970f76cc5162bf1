// Byte-level BPE: the tokenizer over a BpeVocab (rules in bpe_vocab.h). Merging works on raw
// bytes: pieces and merges are decoded from their byte-level text once, when the tokenizer is
// made, and every string a merge can produce gets a symbol number, so a word is merged by looking
// up pairs of numbers.
#include "engine/common/utf8.h"
#include "engine/error.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_map>

namespace kvchat {

namespace {

// GPT-2's bytes_to_unicode: the code point that stands for each byte.
const std::array<uint32_t, 256>& byte_code_points() {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            t[b] = printable ? b : next++;
        }
        return t;
    }();
    return table;
}

void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// One character of `text` at `i` read the way llama.cpp reads it (unicode_cpt_from_utf8): the
// lead byte says the length, the continuation bytes are checked for their top bits only. Returns
// the code point and sets `length`; U+FFFD with length 1 for a byte that starts nothing.
uint32_t lenient_code_point(std::string_view text, size_t i, size_t& length) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
    const auto continuation = [&](size_t k) { return k < text.size() && (byte(k) & 0xC0) == 0x80; };
    const uint8_t lead = byte(i);
    length = 1;
    if (lead < 0x80) return lead;
    uint32_t cp = 0;
    size_t n = 0;
    if ((lead & 0xE0) == 0xC0) n = 2, cp = lead & 0x1F;
    else if ((lead & 0xF0) == 0xE0) n = 3, cp = lead & 0x0F;
    else if ((lead & 0xF8) == 0xF0) n = 4, cp = lead & 0x07;
    else return 0xFFFD;  // a continuation byte or F8..FF
    for (size_t k = 1; k < n; ++k) {
        if (!continuation(i + k)) return 0xFFFD;
        cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    // Beyond U+10FFFF llama.cpp throws from inside its tokenizer; here the lead byte is U+FFFD.
    if (cp > 0x10FFFF) return 0xFFFD;
    length = n;
    return cp;
}

// Symbols of `a` then `b` as one 64-bit key of the pair table.
uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

// Merges by symbol pair: open addressing, linear probing (pair lookups are most of the work).
class PairTable {
public:
    struct Merge {
        int32_t rank = -1;
        int32_t result = -1;
    };

    void reserve(size_t n) {
        size_t size = 16;
        while (size < n * 2) size *= 2;
        keys_.assign(size, kEmpty);
        values_.assign(size, {});
        mask_ = size - 1;
    }
    // Keeps the first (lowest-ranked) merge of a pair, as llama.cpp does.
    void insert(int32_t a, int32_t b, Merge m) {
        const uint64_t key = pair_key(a, b);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (keys_[i] == key) return;
            if (keys_[i] == kEmpty) {
                keys_[i] = key;
                values_[i] = m;
                return;
            }
        }
    }
    Merge find(int32_t a, int32_t b) const {
        const uint64_t key = pair_key(a, b);
        for (size_t i = slot(key);; i = (i + 1) & mask_) {
            if (keys_[i] == key) return values_[i];
            if (keys_[i] == kEmpty) return {};
        }
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // symbols are below 2^31, so no pair is this
    size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    size_t mask_ = 0;
};

// String keys looked up by string_view without a copy.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Words up to this many bytes are merged on a flat array (a scan for the lowest rank per merge);
// longer ones (whitespace runs, long letter runs) use a priority queue.
constexpr size_t kShortWord = 64;

class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const BpeVocab& v) : spec_(pre_tokenizer_spec(v.pre)), pre_(spec_) {
        const size_t n = v.tokens.size();
        if (n == 0) throw Error("tokenizer vocabulary is empty");
        if (n >= 0x40000000) throw Error("tokenizer vocabulary has too many tokens: " + std::to_string(n));
        if (!v.types.empty() && v.types.size() != n)
            throw Error("tokenizer vocabulary has " + std::to_string(n) + " tokens but " +
                        std::to_string(v.types.size()) + " token types");
        tokens_ = v.tokens;
        types_.resize(n, TokenType::Normal);
        bytes_.resize(n);
        text_to_id_.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            // llama.cpp names empty pieces so that they can be told apart (and never match).
            if (tokens_[i].empty()) tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";
            const auto [it, added] = text_to_id_.emplace(tokens_[i], static_cast<int32_t>(i));
            if (!added)
                throw Error("tokenizer vocabulary: token " + std::to_string(i) + " '" + tokens_[i] +
                            "' repeats token " + std::to_string(it->second));
        }
        set_types(v);
        set_special(v);
        build_symbols(v.merges);
        for (size_t i = 0; i < n; ++i) bytes_[i] = surface(static_cast<int32_t>(i));

        // Typed user text is matched against user-defined pieces, longest first (llama.cpp's order).
        for (size_t i = 0; i < n; ++i)
            if (types_[i] == TokenType::UserDefined) user_defined_.push_back(static_cast<int32_t>(i));
        std::stable_sort(user_defined_.begin(), user_defined_.end(), [this](int32_t a, int32_t b) {
            return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size();
        });
    }

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int32_t> out;
        out.reserve(text.size() / 3 + 2);
        if (add_bos && special_.add_bos && special_.bos >= 0) out.push_back(special_.bos);
        Scratch scratch;
        for (const Fragment& f : fragments(text)) {
            if (f.token >= 0) out.push_back(f.token);
            else encode_text(text.substr(f.offset, f.length), scratch, out);
        }
        return out;
    }

    std::string token_bytes(int32_t id) const override {
        check(id);
        return bytes_[static_cast<size_t>(id)];
    }


    int32_t find_piece(std::string_view piece) const override {
        const auto it = text_to_id_.find(piece);
        return it == text_to_id_.end() ? -1 : it->second;
    }

private:
    struct Fragment {
        size_t offset = 0, length = 0;
        int32_t token = -1;  // >= 0: a user-defined piece found in the text
    };

    // Per encode call: buffers reused from word to word, and the words already merged.
    struct Scratch {
        std::string text, subject;
        std::vector<TextSpan> words;
        std::vector<int32_t> symbols, ranks;
        std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // word -> ids in cached
        std::vector<int32_t> cached;
    };

    void set_types(const BpeVocab& v) {
        for (size_t i = 0; i < tokens_.size(); ++i) {
            TokenType t = v.types.empty() ? TokenType::Normal : v.types[i];
            const auto raw = static_cast<int32_t>(t);
            // GGUF's "undefined" (0) and unknown kinds: llama.cpp neither writes nor matches them.
            if (raw < 1 || raw > 6) t = TokenType::Unused;
            // llama.cpp adds the control flag to its end-of-turn, end-of-generation and
            // fill-in-the-middle markers whatever their type; control wins over the rest.
            if (is_control_name(v.tokens[i])) t = TokenType::Control;
            types_[i] = t;
        }
    }

    void set_special(const BpeVocab& v) {
        special_ = v.special;
        special_.start_of_turn = find_piece("<start_of_turn>");
        if (special_.end_of_turn < 0) {
            // llama.cpp's end-of-turn names. It takes whichever its hash map yields first; the
            // list's order makes the choice repeatable (SmolLM2 has both <|im_end|> and <|endoftext|>).
            for (std::string_view name : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>"}) {
                if ((special_.end_of_turn = find_piece(name)) >= 0) break;
            }
        }
        special_.add_bos = v.add_bos.value_or(spec_.add_bos);
        if (special_.add_bos && special_.bos < 0)
            throw Error("tokenizer vocabulary asks for a BOS token (tokenizer.ggml.add_bos_token) but has no "
                        "tokenizer.ggml.bos_token_id");
    }

    // Symbol numbers: a token's own id for every token whose text is byte-level text, then new
    // numbers for the strings merges make that are no token. Each byte starts as its symbol.
    void build_symbols(const std::vector<std::string>& merges) {
        const size_t n = tokens_.size();
        symbol_of_bytes_.reserve(n + merges.size());
        std::string raw;
        for (size_t i = 0; i < n; ++i)
            if (byte_level_decode(tokens_[i], raw)) symbol_of_bytes_.emplace(raw, static_cast<int32_t>(i));
        for (int b = 0; b < 256; ++b) byte_symbol_[b] = symbol(std::string(1, static_cast<char>(b)));

        pairs_.reserve(merges.size());
        std::string left, right;
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const std::string& m = merges[rank];
            // llama.cpp splits at the first space after the first character.
            const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (space == std::string::npos) continue;
            // A part that is no byte-level text stands for no bytes, so the merge never applies.
            if (!byte_level_decode(std::string_view(m).substr(0, space), left) ||
                !byte_level_decode(std::string_view(m).substr(space + 1), right) || left.empty() || right.empty())
                continue;
            const int32_t a = symbol(left), b = symbol(right), c = symbol(left + right);
            pairs_.insert(a, b, {static_cast<int32_t>(rank), c});
        }

        // A final piece that is no token gives the tokens whose text is one byte of its byte-level
        // text (llama.cpp looks each byte up on its own); that is per byte, so it is a table.
        for (int b = 0; b < 256; ++b) {
            std::string encoded;
            append_utf8(byte_code_points()[static_cast<size_t>(b)], encoded);
            for (char e : encoded)
                if (const auto it = text_to_id_.find(std::string(1, e)); it != text_to_id_.end())
                    byte_fallback_[b].push_back(it->second);
        }
    }

    int32_t symbol(const std::string& bytes) {
        const auto it = symbol_of_bytes_.find(bytes);
        if (it != symbol_of_bytes_.end()) return it->second;
        const size_t id = tokens_.size() + extra_symbols_.size();
        if (id >= 0x7FFFFFFF) throw Error("tokenizer vocabulary has too many merges");
        extra_symbols_.push_back(bytes);
        symbol_of_bytes_.emplace(bytes, static_cast<int32_t>(id));
        return static_cast<int32_t>(id);
    }

    // What llama.cpp writes for a token (token_to_piece without specials).
    std::string surface(int32_t id) const {
        const std::string& text = tokens_[static_cast<size_t>(id)];
        std::string raw;
        switch (types_[static_cast<size_t>(id)]) {
            case TokenType::Normal:
            case TokenType::Byte:
                // Text that is not byte-level (a malformed vocabulary) is given as it is.
                return byte_level_decode(text, raw) ? raw : text;
            case TokenType::UserDefined:
                return text;
            case TokenType::Control:
            case TokenType::Unknown:
            case TokenType::Unused:
                break;
        }
        return {};
    }

    // llama.cpp's tokenizer_st_partition without special parsing: for each user-defined piece,
    // longest first, every occurrence in the text still unclaimed becomes that token.
    std::vector<Fragment> fragments(std::string_view text) const {
        std::vector<Fragment> out;
        if (text.empty()) return out;
        out.push_back({0, text.size(), -1});
        std::vector<Fragment> next;
        for (int32_t id : user_defined_) {
            const std::string& piece = tokens_[static_cast<size_t>(id)];
            bool found = false;
            next.clear();
            for (const Fragment& f : out) {
                if (f.token >= 0) {
                    next.push_back(f);
                    continue;
                }
                const std::string_view part = text.substr(f.offset, f.length);
                size_t from = 0;
                for (size_t at; (at = part.find(piece, from)) != std::string_view::npos; from = at + piece.size()) {
                    found = true;
                    if (at > from) next.push_back({f.offset + from, at - from, -1});
                    next.push_back({f.offset + at, piece.size(), id});
                }
                if (from < part.size()) next.push_back({f.offset + from, part.size() - from, -1});
            }
            if (found) out.swap(next);
        }
        return out;
    }

    void encode_text(std::string_view raw, Scratch& s, std::vector<int32_t>& out) const {
        std::string_view text = raw, subject = raw;
        if (!is_valid_utf8(raw)) {
            llama_utf8_text(raw, s.text, s.subject);
            text = s.text;
            subject = s.subject;
        }
        s.words.clear();
        pre_.split(subject, s.words);
        for (const TextSpan& w : s.words) encode_word(text.substr(w.offset, w.length), s, out);
        // The cache keys point into the text; the repaired copy is rewritten for the next fragment.
        if (text.data() == s.text.data()) s.cache.clear();
    }

    void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
        if (word.size() == 1) {
            emit_symbol(byte_symbol_[static_cast<uint8_t>(word[0])], out);
            return;
        }
        if (spec_.ignore_merges) {
            const auto it = symbol_of_bytes_.find(word);
            if (it != symbol_of_bytes_.end() && static_cast<size_t>(it->second) < tokens_.size()) {
                out.push_back(it->second);
                return;
            }
        }
        if (const auto it = s.cache.find(word); it != s.cache.end()) {
            out.insert(out.end(), s.cached.begin() + it->second.first,
                       s.cached.begin() + it->second.first + it->second.second);
            return;
        }
        const size_t before = out.size();
        if (word.size() <= kShortWord) merge_short(word, s, out);
        else merge_long(word, out);
        const auto begin = static_cast<uint32_t>(s.cached.size());
        s.cached.insert(s.cached.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
        s.cache.emplace(word, std::make_pair(begin, static_cast<uint32_t>(out.size() - before)));
    }

    // The pair of lowest rank, leftmost among equals, merged until no pair has a merge.
    void merge_short(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
        std::vector<int32_t>& sym = s.symbols;
        std::vector<int32_t>& rank = s.ranks;  // rank[i]: of the pair (sym[i], sym[i+1]); INT_MAX: none
        sym.clear();
        for (char c : word) sym.push_back(byte_symbol_[static_cast<uint8_t>(c)]);
        const auto rank_of = [this](int32_t a, int32_t b) {
            const int32_t r = pairs_.find(a, b).rank;
            return r < 0 ? INT_MAX : r;
        };
        rank.resize(sym.size());
        for (size_t i = 0; i + 1 < sym.size(); ++i) rank[i] = rank_of(sym[i], sym[i + 1]);
        size_t count = sym.size();
        while (count > 1) {
            size_t best = 0;
            for (size_t i = 1; i + 1 < count; ++i)
                if (rank[i] < rank[best]) best = i;
            if (rank[best] == INT_MAX) break;
            sym[best] = pairs_.find(sym[best], sym[best + 1]).result;
            std::memmove(&sym[best + 1], &sym[best + 2], (count - best - 2) * sizeof(int32_t));
            std::memmove(&rank[best + 1], &rank[best + 2], (count - best - 2) * sizeof(int32_t));
            --count;
            if (best > 0) rank[best - 1] = rank_of(sym[best - 1], sym[best]);
            if (best + 1 < count) rank[best] = rank_of(sym[best], sym[best + 1]);
        }
        for (size_t i = 0; i < count; ++i) emit_symbol(sym[i], out);
    }

    // The same order of merges for long words: symbols in a linked list, candidate pairs in a
    // priority queue, a candidate dropped when either side has changed since it was queued.
    void merge_long(std::string_view word, std::vector<int32_t>& out) const {
        const auto n = static_cast<int32_t>(word.size());
        std::vector<int32_t> sym(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) {
            sym[static_cast<size_t>(i)] = byte_symbol_[static_cast<uint8_t>(word[static_cast<size_t>(i)])];
            prev[static_cast<size_t>(i)] = i - 1;
            next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
        }
        struct Candidate {
            int32_t rank, left, right, left_symbol, right_symbol;
            bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
        };
        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
        const auto offer = [&](int32_t l, int32_t r) {
            if (l < 0 || r < 0) return;
            const int32_t a = sym[static_cast<size_t>(l)], b = sym[static_cast<size_t>(r)];
            const int32_t rank = pairs_.find(a, b).rank;
            if (rank >= 0) queue.push({rank, l, r, a, b});
        };
        for (int32_t i = 0; i + 1 < n; ++i) offer(i, i + 1);
        while (!queue.empty()) {
            const Candidate c = queue.top();
            queue.pop();
            const auto l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
            if (sym[l] != c.left_symbol || sym[r] != c.right_symbol || next[l] != c.right) continue;
            sym[l] = pairs_.find(c.left_symbol, c.right_symbol).result;
            sym[r] = -1;
            next[l] = next[r];
            if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = c.left;
            offer(prev[l], c.left);
            offer(c.left, next[l]);
        }
        for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) emit_symbol(sym[static_cast<size_t>(i)], out);
    }

    void emit_symbol(int32_t symbol, std::vector<int32_t>& out) const {
        if (static_cast<size_t>(symbol) < tokens_.size()) {
            out.push_back(symbol);
            return;
        }
        for (char c : extra_symbols_[static_cast<size_t>(symbol) - tokens_.size()]) {
            const auto& ids = byte_fallback_[static_cast<uint8_t>(c)];
            out.insert(out.end(), ids.begin(), ids.end());
        }
    }

    PreTokenizerSpec spec_;
    PreTokenizer pre_;
    std::vector<std::string> bytes_;  // token_bytes
    StringMap text_to_id_;
    StringMap symbol_of_bytes_;
    std::vector<std::string> extra_symbols_;  // bytes of symbol tokens_.size() + i
    std::array<int32_t, 256> byte_symbol_{};
    std::array<std::vector<int32_t>, 256> byte_fallback_;
    PairTable pairs_;
    std::vector<int32_t> user_defined_;
};

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) append_utf8(byte_code_points()[static_cast<uint8_t>(c)], out);
    return out;
}

bool byte_level_decode(std::string_view text, std::string& bytes) {
    // The inverse table: code points 0..323 (256 + the 68 bytes that are not printable).
    static const std::array<int16_t, 324> byte_of = [] {
        std::array<int16_t, 324> t;
        t.fill(-1);
        for (int b = 0; b < 256; ++b) t[byte_code_points()[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
        return t;
    }();
    bytes.clear();
    for (size_t i = 0; i < text.size();) {
        const auto lead = static_cast<uint8_t>(text[i]);
        uint32_t cp;
        if (lead < 0x80) {
            cp = lead;
            i += 1;
        } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
            cp = ((lead & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
            if (cp < 0x80) return false;  // overlong: not what a vocabulary holds
            i += 2;
        } else {
            return false;  // three- and four-byte characters stand for no byte
        }
        if (cp >= byte_of.size() || byte_of[cp] < 0) return false;
        bytes += static_cast<char>(byte_of[cp]);
    }
    return true;
}

void llama_utf8_text(std::string_view bytes, std::string& text, std::string& subject) {
    text.clear();
    subject.clear();
    text.reserve(bytes.size() + 8);
    subject.reserve(bytes.size() + 8);
    for (size_t i = 0; i < bytes.size();) {
        size_t length = 1;
        const uint32_t cp = lenient_code_point(bytes, i, length);
        i += length;
        append_utf8(cp, text);
        // A surrogate is one character of some symbol class for the expressions; U+FFFD is the
        // valid character in the same place (neither letter, number nor whitespace).
        append_utf8(cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp, subject);
    }
}

std::unique_ptr<Tokenizer> Tokenizer::from_bpe_vocab(const BpeVocab& vocab) {
    return std::make_unique<BpeTokenizer>(vocab);
}

}  // namespace kvchat
