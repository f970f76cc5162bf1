#include "engine/tokenizer/tokenizer.h"

#include "engine/error.h"
#include "engine/tokenizer/protobuf_wire.h"
#include "engine/common/regular_file.h"
#include "engine/common/utf8.h"

#include <sentencepiece_processor.h>


namespace kvchat {

void Tokenizer::check(int32_t id) const {
    if (id < 0 || id >= vocab_size())
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(tokens_.size()));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string bytes;
    for (int32_t id : ids) bytes += token_bytes(id);
    std::string text;
    text.reserve(bytes.size());
    append_valid_utf8(bytes, true, text);
    return text;
}

TokenType Tokenizer::type(int32_t id) const {
    check(id);
    return types_[static_cast<size_t>(id)];
}

std::string Tokenizer::piece(int32_t id) const {
    check(id);
    return tokens_[static_cast<size_t>(id)];
}

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";       // U+2581
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";  // SentencePiece's " ⁇ " for <unk>

std::string spaces_unescaped(std::string_view piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.substr(i).starts_with(kSpaceMark)) {
            out.push_back(' ');
            i += kSpaceMark.size();
        } else {
            out.push_back(piece[i++]);
        }
    }
    return out;
}

std::string spaces_escaped(std::string_view piece) {
    std::string out;
    out.reserve(piece.size());
    for (char c : piece) {
        if (c == ' ') out.append(kSpaceMark);
        else out.push_back(c);
    }
    return out;
}

class SentencePieceTokenizer final : public Tokenizer {
public:
    // `model_proto` is a serialized sentencepiece.ModelProto; `tokens` and `types` describe
    // the same vocabulary as the tokenizer reports it.
    SentencePieceTokenizer(std::string_view model_proto, std::vector<std::string> tokens,
                           std::vector<TokenType> types, const std::string& source)
    {
        tokens_ = std::move(tokens);
        types_ = std::move(types);
        const auto status = processor_.LoadFromSerializedProto(model_proto);
        if (!status.ok()) throw Error("tokenizer from " + source + ": " + status.ToString());
        if (processor_.GetPieceSize() != static_cast<int>(tokens_.size()))
            throw Error("tokenizer from " + source + ": SentencePiece sees " +
                        std::to_string(processor_.GetPieceSize()) + " pieces, the vocabulary has " +
                        std::to_string(tokens_.size()));
    }

    void set_special(const SpecialTokens& s) { special_ = s; }
    const sentencepiece::SentencePieceProcessor& processor() const { return processor_; }

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int> ids;
        const auto status = processor_.Encode(text, &ids);
        if (!status.ok()) throw Error("tokenizer: cannot encode text: " + status.ToString());
        std::vector<int32_t> out;
        out.reserve(ids.size() + 1);
        if (add_bos && special_.add_bos && special_.bos >= 0) out.push_back(special_.bos);
        out.insert(out.end(), ids.begin(), ids.end());
        return out;
    }

    std::string token_bytes(int32_t id) const override {
        switch (type(id)) {
            case TokenType::Normal:
            case TokenType::UserDefined:
                return spaces_unescaped(tokens_[static_cast<size_t>(id)]);
            case TokenType::Byte:
                return std::string(1, static_cast<char>(byte_piece_value(tokens_[static_cast<size_t>(id)])));
            case TokenType::Unknown:
                return std::string(kUnknownSurface);
            case TokenType::Control:
            case TokenType::Unused:
                break;
        }
        return {};
    }


    int32_t find_piece(std::string_view piece) const override {
        // SentencePiece knows user-defined pieces with U+2581 for their spaces (spm_vocab.h), and
        // answers the unknown id for what it lacks; both are checked against the vocabulary.
        for (const std::string& candidate : {std::string(piece), spaces_escaped(piece)}) {
            const int id = processor_.PieceToId(candidate);
            if (id >= 0 && id < vocab_size() && tokens_[static_cast<size_t>(id)] == piece) return id;
        }
        return -1;
    }

private:
    sentencepiece::SentencePieceProcessor processor_;
};

// A tokenizer.model's pieces, and the model with special markers retyped as control.
struct ModelFile {
    std::vector<std::string> tokens;
    std::vector<TokenType> types;
    std::string proto;
};

ModelFile read_model_file(const std::string& path) {
    // Real tokenizer.model files are a few MB; the limit keeps a hostile one from taking memory.
    constexpr size_t kMaxTokenizerBytes = size_t(256) << 20;
    std::string bytes;
    try {
        bytes = RegularFile::open(path).read_all(kMaxTokenizerBytes);
    } catch (const Error& e) {
        throw Error(std::string("tokenizer model ") + e.what());
    }
    const auto bad = [&path] { return Error("tokenizer model '" + path + "': not a SentencePiece model"); };

    ModelFile m;
    ProtoWriter rewritten;
    ProtoReader top(bytes);
    ProtoField f;
    while (top.next(f)) {
        if (f.number != 1 || f.type != WireType::LengthDelimited) {  // anything but a piece
            rewritten.raw(f.encoded);
            continue;
        }
        std::string piece;
        auto type = TokenType::Normal;  // the proto's default
        ProtoWriter other_fields;
        ProtoReader fields(f.bytes);
        ProtoField pf;
        while (fields.next(pf)) {
            if (pf.number == 1 && pf.type == WireType::LengthDelimited) piece = std::string(pf.bytes);
            if (pf.number == 3 && pf.type == WireType::Varint) {
                type = static_cast<TokenType>(pf.integer);
                continue;
            }
            other_fields.raw(pf.encoded);
        }
        if (fields.error()) throw bad();
        if (type == TokenType::UserDefined && is_special_marker(piece)) type = TokenType::Control;
        other_fields.varint_field(3, static_cast<uint64_t>(type));
        rewritten.bytes_field(1, other_fields.bytes());
        m.tokens.push_back(std::move(piece));
        m.types.push_back(type);
    }
    if (top.error() || m.tokens.empty()) throw bad();
    m.proto = rewritten.take();
    return m;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(const SpmVocab& vocab) {
    const std::vector<TokenType> types = effective_types(vocab);
    SpecialTokens special = resolved_special(vocab);
    auto tok = std::make_unique<SentencePieceTokenizer>(spm_model_proto(vocab, types), vocab.tokens, types,
                                                        "vocabulary");
    tok->set_special(special);
    return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path,
                                                const std::optional<SpecialTokens>& special) {
    ModelFile m = read_model_file(path);
    auto tok = std::make_unique<SentencePieceTokenizer>(m.proto, std::move(m.tokens), std::move(m.types),
                                                        "'" + path + "'");
    SpecialTokens s;
    if (special) {
        s = *special;
    } else {
        const auto& p = tok->processor();
        s.bos = p.bos_id();
        s.eos = p.eos_id();
        s.unk = p.unk_id();
        s.pad = p.pad_id();
        s.add_bos = s.bos >= 0;
    }
    if (s.start_of_turn < 0) s.start_of_turn = tok->find_piece("<start_of_turn>");
    if (s.end_of_turn < 0) s.end_of_turn = tok->find_piece("<end_of_turn>");
    tok->set_special(s);
    return tok;
}

std::string StreamingDetokenizer::push(int32_t id) {
    pending_ += tok_.token_bytes(id);
    std::string out;
    pending_.erase(0, append_valid_utf8(pending_, false, out));
    return out;
}

std::string StreamingDetokenizer::flush() {
    std::string out;
    append_valid_utf8(pending_, true, out);
    pending_.clear();
    return out;
}

}  // namespace kvchat
