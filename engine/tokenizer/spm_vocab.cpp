#include "engine/tokenizer/spm_vocab.h"

#include "engine/error.h"
#include "engine/tokenizer/protobuf_wire.h"

#include <algorithm>
#include <unordered_set>

namespace kvchat {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// Field numbers of sentencepiece_model.proto.
namespace field {
constexpr uint32_t kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr uint32_t kPiece = 1, kPieceScore = 2, kPieceType = 3;
constexpr uint32_t kTrainerModelType = 3, kTrainerVocabSize = 4, kTrainerByteFallback = 35;
constexpr uint32_t kTrainerUnkId = 40, kTrainerBosId = 41, kTrainerEosId = 42, kTrainerPadId = 43;
constexpr uint32_t kTrainerUnkPiece = 45, kTrainerBosPiece = 46, kTrainerEosPiece = 47, kTrainerPadPiece = 48;
constexpr uint32_t kNormalizerName = 1, kNormalizerCharsmap = 2, kNormalizerAddDummyPrefix = 3;
constexpr uint32_t kNormalizerRemoveExtraWhitespaces = 4, kNormalizerEscapeWhitespaces = 5;
}  // namespace field
constexpr uint64_t kModelTypeBpe = 2;

bool wrapped(std::string_view s, std::string_view prefix, std::string_view suffix) {
    return s.size() > prefix.size() + suffix.size() && s.starts_with(prefix) && s.ends_with(suffix);
}

std::string_view inner(std::string_view s, std::string_view prefix, std::string_view suffix) {
    return s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
}

bool all_of(std::string_view s, bool (*pred)(char)) { return std::all_of(s.begin(), s.end(), pred); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
        out.append(s.substr(pos, hit - pos));
        out.append(to);
    }
    out.append(s.substr(pos));
    return out;
}

bool in_range(int32_t id, size_t n) { return id >= 0 && static_cast<size_t>(id) < n; }

}  // namespace

bool is_special_marker(std::string_view p) {
    if (p == "[multimodal]" || p == "[@BOS@]" || p == "<mask>") return true;
    if (wrapped(p, "<unused", ">")) return all_of(inner(p, "<unused", ">"), is_digit);
    if (wrapped(p, "<start_of_", ">")) return all_of(inner(p, "<start_of_", ">"), is_name_char);
    if (wrapped(p, "<end_of_", ">")) return all_of(inner(p, "<end_of_", ">"), is_name_char);
    if (wrapped(p, "<", "_soft_token>")) return all_of(inner(p, "<", "_soft_token>"), is_name_char);
    return p.size() >= 4 && p.starts_with("<|") && p.ends_with("|>");
}

bool is_control_name(std::string_view p) {
    // llama.cpp's lists of end-of-turn, end-of-generation and fill-in-the-middle markers
    // (llama-vocab.cpp), which it types control whatever the vocabulary says.
    static constexpr std::string_view kNames[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>",
        "[e~[", "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
        "▁<PRE>", "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>",
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
        "▁<MID>", "<|code_middle|>", "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
    return std::find(std::begin(kNames), std::end(kNames), p) != std::end(kNames);
}

int byte_piece_value(std::string_view piece) {
    // SentencePiece writes byte pieces as "<0x%02X>": upper-case hex only.
    if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return -1;
    int value = 0;
    for (char c : piece.substr(3, 2)) {
        int digit;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        else return -1;
        value = value * 16 + digit;
    }
    return value;
}

SpecialTokens resolved_special(const SpmVocab& v) {
    SpecialTokens s = v.special;
    const auto find = [&v](std::string_view piece) {
        const auto it = std::find(v.tokens.begin(), v.tokens.end(), piece);
        return it == v.tokens.end() ? -1 : static_cast<int32_t>(it - v.tokens.begin());
    };
    if (s.start_of_turn < 0) s.start_of_turn = find("<start_of_turn>");
    if (s.end_of_turn < 0) s.end_of_turn = find("<end_of_turn>");
    if (!in_range(s.unk, v.tokens.size())) {
        const auto it = std::find(v.types.begin(), v.types.end(), TokenType::Unknown);
        s.unk = it == v.types.end() ? -1 : static_cast<int32_t>(it - v.types.begin());
    }
    return s;
}

std::vector<TokenType> effective_types(const SpmVocab& v) {
    const size_t n = v.tokens.size();
    if (n == 0) throw Error("tokenizer vocabulary is empty");
    if (n > 0x7FFFFFFF) throw Error("tokenizer vocabulary has too many tokens: " + std::to_string(n));
    if (!v.scores.empty() && v.scores.size() != n)
        throw Error("tokenizer vocabulary has " + std::to_string(n) + " tokens but " +
                    std::to_string(v.scores.size()) + " scores");
    if (!v.types.empty() && v.types.size() != n)
        throw Error("tokenizer vocabulary has " + std::to_string(n) + " tokens but " +
                    std::to_string(v.types.size()) + " token types");

    const SpecialTokens s = resolved_special(v);
    const int32_t unk = s.unk;
    if (!in_range(unk, n)) throw Error("tokenizer vocabulary has no unknown token");
    const int32_t special_ids[] = {s.bos, s.eos, unk, s.pad, s.start_of_turn, s.end_of_turn};

    // Gemma 4 and PLaMo have "</s>" as an ordinary piece (llama.cpp leaves it alone there).
    bool s_is_text = false;
    for (const std::string& t : v.tokens) s_is_text = s_is_text || t == "<|tool_response>" || t == "<|plamo:eos|>";

    std::vector<TokenType> types(n, TokenType::Normal);
    for (size_t i = 0; i < n; ++i) {
        TokenType t = v.types.empty() ? TokenType::Normal : v.types[i];
        const auto raw = static_cast<int32_t>(t);
        if (raw < 1 || raw > 6) t = TokenType::Normal;  // GGUF's "undefined" (0) and anything unknown
        const auto id = static_cast<int32_t>(i);
        if (id == unk) {
            t = TokenType::Unknown;
        } else if (t == TokenType::Unknown) {
            t = TokenType::Control;  // SentencePiece allows one unknown piece
        } else if ((t == TokenType::UserDefined &&
                    std::find(std::begin(special_ids), std::end(special_ids), id) != std::end(special_ids)) ||
                   ((t == TokenType::UserDefined || t == TokenType::Normal) && is_control_name(v.tokens[i]) &&
                    !(v.tokens[i] == "</s>" && s_is_text))) {
            // The vocabulary's own types decide, as in llama.cpp: user-defined pieces ("<start_of_image>",
            // "[multimodal]", HTML tags) are matched in typed text like any text; the special ids and
            // the markers llama.cpp retypes control never are.
            t = TokenType::Control;
        } else if (t == TokenType::Byte && byte_piece_value(v.tokens[i]) < 0) {
            throw Error("tokenizer vocabulary: token " + std::to_string(i) + " '" + v.tokens[i] +
                        "' is typed byte but is not of the form <0xAB>");
        }
        types[i] = t;
    }
    return types;
}

std::string spm_model_proto(const SpmVocab& v, const std::vector<TokenType>& types) {
    const size_t n = v.tokens.size();
    if (types.size() != n) throw Error("tokenizer: token types do not match the vocabulary");
    std::vector<std::string> pieces(n);
    std::unordered_set<std::string_view> seen;
    seen.reserve(n);
    ProtoWriter model;
    model.reserve(n * 24);  // a piece takes its text plus about a dozen bytes
    ProtoWriter p;
    bool has_bytes = false;
    int32_t unk = -1;
    for (size_t i = 0; i < n; ++i) {
        TokenType t = types[i];
        std::string& piece = pieces[i];
        if (t == TokenType::UserDefined) piece = replace_all(v.tokens[i], " ", kSpaceMark);
        else piece = v.tokens[i];
        if (piece.empty() || seen.contains(piece)) {
            piece = "<kvchat unreachable " + std::to_string(i) + ">";
            if (t != TokenType::Unknown) t = TokenType::Unused;
        }
        seen.insert(piece);
        has_bytes = has_bytes || t == TokenType::Byte;
        if (t == TokenType::Unknown) unk = static_cast<int32_t>(i);

        p.clear();
        p.bytes_field(field::kPiece, piece);
        p.float_field(field::kPieceScore, v.scores.empty() ? 0.0f : v.scores[i]);
        p.varint_field(field::kPieceType, static_cast<uint64_t>(t));
        model.bytes_field(field::kModelPieces, p.bytes());
    }
    if (unk < 0) throw Error("tokenizer vocabulary has no unknown token");

    const SpecialTokens& s = v.special;
    ProtoWriter trainer;
    trainer.varint_field(field::kTrainerModelType, kModelTypeBpe);
    trainer.int32_field(field::kTrainerVocabSize, static_cast<int32_t>(n));
    trainer.bool_field(field::kTrainerByteFallback, has_bytes);
    // Ids absent from the vocabulary are written as -1, SentencePiece's "none".
    const auto id_or_none = [n](int32_t id) { return in_range(id, n) ? id : -1; };
    trainer.int32_field(field::kTrainerUnkId, unk);
    trainer.int32_field(field::kTrainerBosId, id_or_none(s.bos));
    trainer.int32_field(field::kTrainerEosId, id_or_none(s.eos));
    trainer.int32_field(field::kTrainerPadId, id_or_none(s.pad));
    trainer.bytes_field(field::kTrainerUnkPiece, pieces[static_cast<size_t>(unk)]);
    if (in_range(s.bos, n)) trainer.bytes_field(field::kTrainerBosPiece, pieces[static_cast<size_t>(s.bos)]);
    if (in_range(s.eos, n)) trainer.bytes_field(field::kTrainerEosPiece, pieces[static_cast<size_t>(s.eos)]);
    if (in_range(s.pad, n)) trainer.bytes_field(field::kTrainerPadPiece, pieces[static_cast<size_t>(s.pad)]);
    model.bytes_field(field::kModelTrainerSpec, trainer.bytes());

    ProtoWriter normalizer;
    normalizer.bytes_field(field::kNormalizerName, "identity");
    if (!v.precompiled_charsmap.empty())
        normalizer.bytes_field(field::kNormalizerCharsmap, v.precompiled_charsmap);
    normalizer.bool_field(field::kNormalizerAddDummyPrefix, v.add_space_prefix);
    normalizer.bool_field(field::kNormalizerRemoveExtraWhitespaces, false);
    normalizer.bool_field(field::kNormalizerEscapeWhitespaces, true);
    model.bytes_field(field::kModelNormalizerSpec, normalizer.bytes());
    return model.take();
}

}  // namespace kvchat
