// The SentencePiece tokenizer: Gemma 3's GGUF vocabulary against golden ids from python
// sentencepiece (tests/reference/make_tokenizer_golden.py), a tiny Hugging Face style
// tokenizer.model (tests/reference/make_tiny_tokenizer.py), typed markers staying text,
// streaming detokenization, and the vocabularies that are refused.
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model_path.h"
#include "engine/tokenizer/protobuf_wire.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/common/utf8.h"
#include "support/gguf_writer.h"
#include "support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

using kvchat::TokenType;
using kvchat::Tokenizer;

namespace {

nlohmann::json read_json(const std::string& name) {
    std::ifstream in(kvchat::test::data_path(name));
    if (!in) throw std::runtime_error("missing test data " + name);
    return nlohmann::json::parse(in);
}

// Golden data stored as qCompress writes it (the generating script says why).
nlohmann::json read_compressed_json(const std::string& name) {
    QFile f(QString::fromStdString(kvchat::test::data_path(name)));
    if (!f.open(QIODevice::ReadOnly)) throw std::runtime_error("missing test data " + name);
    const QByteArray text = qUncompress(f.readAll());
    if (text.isEmpty()) throw std::runtime_error("test data " + name + " is not zlib data");
    return nlohmann::json::parse(text.constData(), text.constData() + text.size());
}

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

QString show(const std::vector<int32_t>& ids) {
    QStringList parts;
    for (int32_t id : ids) parts << QString::number(id);
    return "[" + parts.join(", ") + "]";
}

// Streams `ids` through a StreamingDetokenizer; fails the test if a piece is not valid UTF-8.
std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids, int* held_back = nullptr) {
    kvchat::StreamingDetokenizer stream(tok);
    std::string text;
    for (int32_t id : ids) {
        const std::string piece = stream.push(id);
        if (!kvchat::is_valid_utf8(piece)) throw std::runtime_error("invalid UTF-8 piece after token " + std::to_string(id));
        if (held_back && piece.empty() && !tok.token_bytes(id).empty()) ++*held_back;
        text += piece;
    }
    const std::string rest = stream.flush();
    if (!kvchat::is_valid_utf8(rest)) throw std::runtime_error("invalid UTF-8 from flush");
    return text + rest;
}

// A small vocabulary in the shape GGUF stores: control specials, byte tokens, user-defined
// pieces (with raw spaces, as GGUF converters write them) and a few BPE pieces.
kvchat::SpmVocab small_vocab() {
    kvchat::SpmVocab v;
    const auto add = [&v](std::string piece, float score, TokenType type) {
        v.tokens.push_back(std::move(piece));
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    add("<pad>", 0, TokenType::Control);      // 0
    add("<eos>", 0, TokenType::Control);      // 1
    add("<bos>", 0, TokenType::Control);      // 2
    add("<unk>", 0, TokenType::Control);      // 3: typed control, as Gemma's GGUF has it
    add("<start_of_turn>", 0, TokenType::Control);     // 4
    add("<end_of_turn>", 0, TokenType::Control);       // 5
    add("<start_of_image>", 0, TokenType::UserDefined);  // 6: a marker
    add("  ", 0, TokenType::UserDefined);     // 7: two spaces
    add("<b>", 0, TokenType::UserDefined);    // 8: ordinary user-defined text
    for (int b = 0; b < 256; ++b) {           // 9 .. 264
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        add(name, 0, TokenType::Byte);
    }
    add("\xE2\x96\x81", -1, TokenType::Normal);  // 265 "▁"
    add("h", -2, TokenType::Normal);             // 266
    add("i", -3, TokenType::Normal);             // 267
    add("hi", -4, TokenType::Normal);            // 268
    add("\xE2\x96\x81hi", -5, TokenType::Normal);  // 269 "▁hi"
    v.special.bos = 2;
    v.special.eos = 1;
    v.special.unk = 3;
    v.special.pad = 0;
    v.add_space_prefix = false;
    return v;
}

void write_gguf_vocab(const std::string& path, const std::string& model, const kvchat::SpmVocab& v,
                      bool with_flags) {
    kvchat::test::GgufWriter w;
    w.add_string("general.architecture", "gemma3");
    if (!model.empty()) w.add_string("tokenizer.ggml.model", model);
    w.add_string_array("tokenizer.ggml.tokens", v.tokens);
    w.add_float32_array("tokenizer.ggml.scores", v.scores);
    std::vector<int32_t> types;
    for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
    w.add_int32_array("tokenizer.ggml.token_type", types);
    w.add_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.special.bos));
    w.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.special.eos));
    w.add_uint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.special.unk));
    if (with_flags) {
        w.add_bool("tokenizer.ggml.add_bos_token", v.special.add_bos);
        w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    }
    w.write(path);
}

}  // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

    std::unique_ptr<Tokenizer> gemma_;
    std::unique_ptr<Tokenizer> tiny_;
    nlohmann::json gemma_golden_;
    nlohmann::json tiny_golden_;

private slots:
    void initTestCase() {
        const std::string path = kvchat::resolve_model_path("");
        QVERIFY2(QFileInfo::exists(QString::fromStdString(path)),
                 qPrintable("default model missing at " + QString::fromStdString(path) +
                            " (run packaging/kvchat.sh model)"));
        const auto file = kvchat::GgufFile::open(path);
        gemma_ = Tokenizer::from_gguf(*file);
        tiny_ = Tokenizer::from_file(kvchat::test::data_path("tiny_tokenizer.model"));
        gemma_golden_ = read_json("tokenizer_golden.json");
        tiny_golden_ = read_json("tiny_tokenizer_golden.json");
        QCOMPARE(gemma_golden_["model"].get<std::string>(), std::string(kvchat::kDefaultModelFile));
    }

    // Gemma 3's GGUF: <start_of_turn>/<end_of_turn> are control tokens 105/106; its user-defined
    // pieces are whitespace runs, "\n" runs, HTML tags and the multimodal markers.
    void gemmaSpecialTokens() {
        const Tokenizer& t = *gemma_;
        QCOMPARE(t.vocab_size(), 262144);
        QCOMPARE(t.special().bos, 2);
        QCOMPARE(t.special().eos, 1);
        QCOMPARE(t.special().unk, 3);
        QCOMPARE(t.special().pad, 0);
        QCOMPARE(t.special().start_of_turn, 105);
        QCOMPARE(t.special().end_of_turn, 106);
        QVERIFY(t.special().add_bos);
        QVERIFY(!t.special().add_eos);
        QCOMPARE(t.piece(105), std::string("<start_of_turn>"));
        QCOMPARE(t.piece(106), std::string("<end_of_turn>"));
        for (int32_t id : {0, 1, 2, 105, 106}) QVERIFY2(t.is_control(id), qPrintable(QString::number(id)));
        QCOMPARE(t.type(3), TokenType::Unknown);
        // User-defined pieces keep their type, as in llama.cpp, multimodal markers included: typed
        // text is matched against them.
        for (const char* text : {"\n", "\n\n", "  ", "\t", "<div>", "<start_of_image>", "<end_of_image>", "[multimodal]"}) {
            const int32_t id = t.find_piece(text);
            QVERIFY2(id >= 0, text);
            QCOMPARE(t.type(id), TokenType::UserDefined);
            QCOMPARE(t.token_bytes(id), std::string(text));
            QVERIFY2(t.encode(text, false) == std::vector<int32_t>{id}, text);
        }
        // "</s>" (212) is user-defined in the GGUF but an end-of-generation marker to llama.cpp,
        // which types it control: never matched in typed text.
        QCOMPARE(t.find_piece("</s>"), 212);
        QVERIFY(t.is_control(212));
        const std::vector<int32_t> typed = t.encode("</s>", false);
        QVERIFY(std::find(typed.begin(), typed.end(), 212) == typed.end());
        QCOMPARE(t.find_piece("\n"), 107);
        QCOMPARE(t.find_piece("  "), 138);
        QCOMPARE(t.find_piece("no such piece in any vocabulary"), -1);
    }

    void gemmaGolden_data() {
        QTest::addColumn<int>("index");
        for (size_t i = 0; i < gemma_golden_["cases"].size(); ++i)
            QTest::addRow("%zu: %s", i, gemma_golden_["cases"][i]["text"].get<std::string>().c_str()) << int(i);
    }
    void gemmaGolden() {
        QFETCH(int, index);
        const auto& c = gemma_golden_["cases"][size_t(index)];
        const std::string text = c["text"];
        const std::vector<int32_t> want = ids_of(c["ids"]);
        const std::vector<int32_t> got = gemma_->encode(text, false);
        QVERIFY2(got == want, qPrintable("got " + show(got) + " want " + show(want)));
        std::vector<int32_t> with_bos{gemma_golden_["bos"].get<int32_t>()};
        with_bos.insert(with_bos.end(), want.begin(), want.end());
        QVERIFY(gemma_->encode(text, true) == with_bos);
        // Text round-trips, except that U+2581 typed in text is indistinguishable from a space.
        if (text.find("\xE2\x96\x81") == std::string::npos) QCOMPARE(gemma_->decode(got), text);
    }

    // Every control, user-defined and unknown piece of Gemma 3's vocabulary typed inside user text
    // ("x" + piece + " y") tokenizes as llama.cpp tokenizes it (tests/data/control_piece_golden.json.zlib,
    // from tests/reference/make_control_piece_golden.py): control pieces stay characters, user-defined
    // ones are matched. The first piece that differs is named.
    void typedPiecesMatchLlamaCpp() {
        const nlohmann::json golden = read_compressed_json("control_piece_golden.json.zlib");
        QCOMPARE(golden["model"].get<std::string>(), std::string(kvchat::kDefaultModelFile));
        QCOMPARE(golden["vocab_size"].get<int32_t>(), gemma_->vocab_size());
        const std::string before = golden["typed_as"][0], after = golden["typed_as"][1];
        const auto& cases = golden["cases"];
        QVERIFY(cases.size() > 6000);
        size_t differ = 0;
        QString first;
        for (const auto& c : cases) {
            const int32_t id = c[0];
            const std::string kind = c[1], piece = c[2];
            QCOMPARE(gemma_->piece(id), piece);
            // llama.cpp's kind after its retyping, and kvchat's: never matched when control.
            if (kind == "control") QVERIFY2(gemma_->type(id) != TokenType::UserDefined, piece.c_str());
            const std::vector<int32_t> want = ids_of(c[3]);
            const std::vector<int32_t> got = gemma_->encode(before + piece + after, false);
            if (got == want) continue;
            if (differ++ == 0)
                first = QString("piece %1 '%2' (%3): got %4, llama.cpp %5")
                            .arg(id)
                            .arg(QString::fromStdString(piece), QString::fromStdString(kind),
                                 show(got), show(want));
        }
        QVERIFY2(differ == 0, qPrintable(QString("%1 of %2 typed pieces tokenize unlike llama.cpp; the first: %3")
                                             .arg(differ)
                                             .arg(cases.size())
                                             .arg(first)));
    }

    // A user typing a marker gets its characters, never the control token.
    void typedMarkersStayText_data() {
        QTest::addColumn<QString>("text");
        for (const char* s : {"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
                              "</s>", "<unused0>", "<start_of_image>", "[multimodal]",
                              "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n"})
            QTest::newRow(s) << QString::fromUtf8(s);
    }
    void typedMarkersStayText() {
        QFETCH(QString, text);
        const std::string s = text.toStdString();
        for (const Tokenizer* t : {gemma_.get(), tiny_.get()}) {
            const std::vector<int32_t> ids = t->encode(s, true);
            QVERIFY(!ids.empty());
            QCOMPARE(ids.front(), t->special().bos);
            for (size_t i = 1; i < ids.size(); ++i) {
                QVERIFY2(t->type(ids[i]) != TokenType::Control, qPrintable("control token " + QString::number(ids[i])));
                QVERIFY(ids[i] != t->special().start_of_turn && ids[i] != t->special().end_of_turn);
            }
        }
        const std::vector<int32_t> ids = gemma_->encode(s, false);
        QCOMPARE(gemma_->decode(ids), s);
    }

    void emptyTextGivesBos() {
        QVERIFY(gemma_->encode("", true) == std::vector<int32_t>{2});
        QVERIFY(gemma_->encode("", false).empty());
        QVERIFY(tiny_->encode("", true) == std::vector<int32_t>{1});
    }

    void tokenBytes() {
        const Tokenizer& t = *gemma_;
        QCOMPARE(t.token_bytes(t.find_piece("<0x0A>")), std::string("\n"));
        QCOMPARE(t.token_bytes(t.find_piece("<0xFF>")), std::string("\xFF"));
        QCOMPARE(t.token_bytes(t.find_piece("<0x00>")), std::string(1, '\0'));
        QCOMPARE(t.token_bytes(t.find_piece("\xE2\x96\x81")), std::string(" "));
        QCOMPARE(t.token_bytes(t.find_piece("\xE2\x96\x81world")), std::string(" world"));
        QCOMPARE(t.token_bytes(105), std::string());
        QCOMPARE(t.token_bytes(2), std::string());
        QVERIFY(t.decode({2, 105, 9259, 106, 1}) == "Hello");
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, t.token_bytes(-1));
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, t.token_bytes(262144));
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, t.piece(262144));
    }

    // Every golden text, streamed token by token, gives decode()'s text in valid UTF-8 pieces;
    // the characters built from byte tokens (rare CJK, emoji, math letters) must be held back.
    void streamingMatchesDecode() {
        int held_back = 0;
        for (const auto& c : gemma_golden_["cases"]) {
            const std::vector<int32_t> ids = ids_of(c["ids"]);
            QCOMPARE(streamed(*gemma_, ids, &held_back), gemma_->decode(ids));
        }
        QVERIFY2(held_back >= 5, qPrintable(QString::number(held_back)));
        held_back = 0;
        for (const auto& c : tiny_golden_["cases"]) {
            const std::vector<int32_t> ids = ids_of(c["ids"]);
            QCOMPARE(streamed(*tiny_, ids, &held_back), tiny_->decode(ids));
        }
        // "你好，世界", "日本語のテキスト" and the emoji are all byte tokens in the tiny model.
        QVERIFY2(held_back >= 20, qPrintable(QString::number(held_back)));
        const std::vector<int32_t> emoji = tiny_->encode("\xF0\x9F\xA6\x99 \xE4\xBD\xA0", false);
        QCOMPARE(streamed(*tiny_, emoji), std::string(" \xF0\x9F\xA6\x99 \xE4\xBD\xA0"));
    }

    // Bytes that can never form a character become U+FFFD at once; an unfinished character
    // becomes U+FFFD on flush.
    void streamingReplacesInvalidBytes() {
        const Tokenizer& t = *gemma_;
        const auto byte = [&t](int b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            return t.find_piece(name);
        };
        const std::string fffd = "\xEF\xBF\xBD";
        kvchat::StreamingDetokenizer s(t);
        QCOMPARE(s.push(byte(0xFF)), fffd);
        QCOMPARE(s.push(byte(0xE4)), std::string());
        QCOMPARE(s.push(byte(0xBD)), std::string());
        QCOMPARE(s.push(t.find_piece("a")), fffd + "a");  // E4 BD cut short by 'a'
        QCOMPARE(s.push(byte(0xF0)), std::string());
        QCOMPARE(s.push(byte(0x9F)), std::string());
        QCOMPARE(s.flush(), fffd);
        QCOMPARE(s.flush(), std::string());
        QCOMPARE(t.decode({byte(0xF0), byte(0x9F), byte(0xA6), byte(0x99)}), std::string("\xF0\x9F\xA6\x99"));
        QCOMPARE(t.decode({byte(0xC0), byte(0xAF), byte(0xF0)}), fffd + fffd + fffd);
    }

    void utf8Replacement_data() {
        QTest::addColumn<QByteArray>("in");
        QTest::addColumn<QByteArray>("out");
        const QByteArray r("\xEF\xBF\xBD");
        QTest::newRow("ascii") << QByteArray("abc") << QByteArray("abc");
        QTest::newRow("valid 4-byte") << QByteArray("\xF0\x9F\x98\x80") << QByteArray("\xF0\x9F\x98\x80");
        QTest::newRow("overlong") << QByteArray("\xC0\xAF") << r + r;
        QTest::newRow("surrogate") << QByteArray("\xED\xA0\x80") << r + r + r;
        QTest::newRow("past U+10FFFF") << QByteArray("\xF4\x90\x80\x80") << r + r + r + r;
        QTest::newRow("truncated then ascii") << QByteArray("\xE2\x82x") << r + "x";
        QTest::newRow("truncated at end") << QByteArray("x\xE2\x82") << "x" + r;
        QTest::newRow("stray continuation") << QByteArray("\x80\xBF") << r + r;
    }
    void utf8Replacement() {
        QFETCH(QByteArray, in);
        QFETCH(QByteArray, out);
        std::string got;
        QCOMPARE(kvchat::append_valid_utf8(std::string_view(in.constData(), size_t(in.size())), true, got),
                 size_t(in.size()));
        QCOMPARE(QByteArray::fromStdString(got), out);
        QCOMPARE(kvchat::is_valid_utf8(std::string_view(in.constData(), size_t(in.size()))), in == out);
    }

    void invalidUtf8InputDoesNotCrash() {
        const std::string inputs[] = {std::string("\xFF\xFE" "abc\xC3", 6), std::string("a\0b", 3),
                                      std::string("\xED\xA0\x80\xC0\xAF", 5), std::string(1, '\x80')};
        for (const std::string& in : inputs) {
            for (const Tokenizer* t : {gemma_.get(), tiny_.get()}) {
                const std::vector<int32_t> ids = t->encode(in, true);
                QVERIFY(ids.size() >= 2);
                for (int32_t id : ids) QVERIFY(id >= 0 && id < t->vocab_size());
                QVERIFY(kvchat::is_valid_utf8(t->decode(ids)));
            }
        }
    }

    // The Hugging Face style tokenizer.model against python sentencepiece.
    void tinyFromFile_data() {
        QTest::addColumn<int>("index");
        for (size_t i = 0; i < tiny_golden_["cases"].size(); ++i)
            QTest::addRow("%zu: %s", i, tiny_golden_["cases"][i]["text"].get<std::string>().c_str()) << int(i);
    }
    void tinyFromFile() {
        QFETCH(int, index);
        const auto& c = tiny_golden_["cases"][size_t(index)];
        const std::vector<int32_t> want = ids_of(c["ids"]);
        const std::vector<int32_t> got = tiny_->encode(c["text"].get<std::string>(), false);
        QVERIFY2(got == want, qPrintable("got " + show(got) + " want " + show(want)));
        std::vector<std::string> pieces;
        for (int32_t id : got) pieces.push_back(tiny_->piece(id));
        QVERIFY(pieces == c["pieces"].get<std::vector<std::string>>());
        // python's decode drops the dummy-prefix space; decode() keeps what the model wrote.
        const std::string decoded = c["decoded"];
        const bool prefixed = !pieces.empty() && pieces.front().starts_with("\xE2\x96\x81");
        QCOMPARE(tiny_->decode(got), prefixed ? " " + decoded : decoded);
    }

    void tinySpecialTokens() {
        const Tokenizer& t = *tiny_;
        const auto& g = tiny_golden_;
        QCOMPARE(t.vocab_size(), g["vocab_size"].get<int32_t>());
        QCOMPARE(t.special().bos, g["bos"].get<int32_t>());
        QCOMPARE(t.special().eos, g["eos"].get<int32_t>());
        QCOMPARE(t.special().unk, g["unk"].get<int32_t>());
        QCOMPARE(t.special().pad, g["pad"].get<int32_t>());
        QCOMPARE(t.special().start_of_turn, g["start_of_turn"].get<int32_t>());
        QCOMPARE(t.special().end_of_turn, g["end_of_turn"].get<int32_t>());
        QVERIFY(t.is_control(t.special().start_of_turn));
        // The user-defined marker became control; the ordinary user-defined "<br>" did not.
        const int32_t image = g["start_of_image"].get<int32_t>();
        QCOMPARE(t.piece(image), std::string("<start_of_image>"));
        QVERIFY(t.is_control(image));
        const std::vector<int32_t> ids = t.encode("a <start_of_image> b", false);
        QVERIFY(std::find(ids.begin(), ids.end(), image) == ids.end());
        const int32_t br = g["br"].get<int32_t>();
        QCOMPARE(t.type(br), TokenType::UserDefined);
        const std::vector<int32_t> br_ids = t.encode("a <br> b", false);
        QVERIFY(std::find(br_ids.begin(), br_ids.end(), br) != br_ids.end());
        QCOMPARE(t.type(t.find_piece("<0x41>")), TokenType::Byte);
        QCOMPARE(t.token_bytes(t.find_piece("<0x41>")), std::string("A"));
        QCOMPARE(t.token_bytes(t.special().unk), std::string(" \xE2\x81\x87 "));
    }

    void fromFileWithCallerSpecials() {
        kvchat::SpecialTokens s;
        s.bos = 2;
        s.eos = 1;
        s.unk = 0;
        s.add_bos = false;
        const auto t = Tokenizer::from_file(kvchat::test::data_path("tiny_tokenizer.model"), s);
        QCOMPARE(t->special().bos, 2);
        QCOMPARE(t->special().start_of_turn, tiny_->special().start_of_turn);  // still found by name
        QVERIFY(t->encode("hi", true) == tiny_->encode("hi", false));
    }

    void fromFileRefusesBadFiles() {
        QTemporaryDir dir;
        const std::string garbage = (dir.path() + "/tokenizer.model").toStdString();
        std::ofstream(garbage, std::ios::binary) << "this is not a protobuf \xFF\xFF\xFF\xFF";
        for (const std::string& path : {garbage, std::string("/nonexistent/tokenizer.model")}) {
            try {
                Tokenizer::from_file(path);
                QFAIL("a bad tokenizer.model was accepted");
            } catch (const kvchat::Error& e) {
                QVERIFY2(QString::fromUtf8(e.what()).contains(QString::fromStdString(path)), e.what());
            }
        }
    }

    void refusesOtherVocabularyTypes_data() {
        QTest::addColumn<QString>("model");
        QTest::newRow("bert") << "bert";
        QTest::newRow("t5") << "t5";
        QTest::newRow("rwkv") << "rwkv";
        QTest::newRow("absent") << "";
    }
    void refusesOtherVocabularyTypes() {
        QFETCH(QString, model);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/vocab.gguf").toStdString();
        write_gguf_vocab(path, model.toStdString(), small_vocab(), true);
        const auto file = kvchat::GgufFile::open(path);
        try {
            Tokenizer::from_gguf(*file);
            QFAIL("a non-SentencePiece vocabulary was accepted");
        } catch (const kvchat::Error& e) {
            const QString msg = QString::fromUtf8(e.what());
            QVERIFY2(msg.contains("'" + model + "'"), qPrintable(msg));
            QVERIFY2(msg.contains("tokenizer"), qPrintable(msg));
        }
    }

    // A small GGUF vocabulary through the whole GGUF path: markers, spaces in user-defined
    // pieces, byte fallback, and the defaults of absent flags.
    void smallGgufVocabulary() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/vocab.gguf").toStdString();
        write_gguf_vocab(path, "llama", small_vocab(), true);
        const auto t = Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
        QCOMPARE(t->special().start_of_turn, 4);
        QCOMPARE(t->special().end_of_turn, 5);
        QCOMPARE(t->type(3), TokenType::Unknown);
        QCOMPARE(t->type(6), TokenType::UserDefined);  // the GGUF's type, as llama.cpp keeps it
        QCOMPARE(t->type(7), TokenType::UserDefined);
        // "hi" merges; two spaces are the user-defined piece; "<b>" and the user-defined marker
        // stay one piece; a typed control piece and "x" (not in the vocabulary) fall back to bytes.
        QVERIFY(t->encode("hi", true) == (std::vector<int32_t>{2, 268}));
        QVERIFY(t->encode("h  i", false) == (std::vector<int32_t>{266, 7, 267}));
        QVERIFY(t->encode("<b>", false) == (std::vector<int32_t>{8}));
        QVERIFY(t->encode("x", false) == (std::vector<int32_t>{9 + 'x'}));
        QVERIFY(t->encode("<start_of_image>", false) == (std::vector<int32_t>{6}));
        const std::vector<int32_t> marker = t->encode("<start_of_turn>", false);
        QCOMPARE(marker.size(), std::string("<start_of_turn>").size());
        QCOMPARE(t->decode(marker), std::string("<start_of_turn>"));

        // Without the flags: add_bos_token and add_space_prefix default to true (Llama 2, Mistral).
        write_gguf_vocab(path, "llama", small_vocab(), false);
        const auto d = Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
        QVERIFY(d->special().add_bos);
        QVERIFY(d->encode("hi", true) == (std::vector<int32_t>{2, 269}));  // "▁hi"
        QCOMPARE(d->decode({269}), std::string(" hi"));
    }

    // GGUF's tokenizer.ggml.precompiled_charsmap reaches the normalizer: the tiny model's table
    // (full-width Latin to ASCII) makes "ｈｉ" the same tokens as "hi".
    void ggufPrecompiledCharsmap() {
        std::ifstream in(kvchat::test::data_path("tiny_tokenizer.model"), std::ios::binary);
        const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::string charsmap;
        kvchat::ProtoReader top(model);
        for (kvchat::ProtoField f; top.next(f);) {
            if (f.number != 3) continue;  // ModelProto.normalizer_spec
            kvchat::ProtoReader spec(f.bytes);
            for (kvchat::ProtoField g; spec.next(g);)
                if (g.number == 2) charsmap = std::string(g.bytes);  // precompiled_charsmap
        }
        QVERIFY(charsmap.size() > 100);

        kvchat::SpmVocab v = small_vocab();
        const auto plain = Tokenizer::from_vocab(v);
        QVERIFY(plain->encode("\xEF\xBD\x88\xEF\xBD\x89", false) != (std::vector<int32_t>{268}));
        v.precompiled_charsmap = charsmap;
        QVERIFY(Tokenizer::from_vocab(v)->encode("\xEF\xBD\x88\xEF\xBD\x89", false) == (std::vector<int32_t>{268}));

        QTemporaryDir dir;
        const std::string path = (dir.path() + "/vocab.gguf").toStdString();
        kvchat::test::GgufWriter w;
        w.add_string("tokenizer.ggml.model", "llama");
        w.add_string_array("tokenizer.ggml.tokens", v.tokens);
        w.add_float32_array("tokenizer.ggml.scores", v.scores);
        std::vector<int32_t> types;
        for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
        w.add_int32_array("tokenizer.ggml.token_type", types);
        w.add_uint32("tokenizer.ggml.unknown_token_id", 3);
        w.add_bool("tokenizer.ggml.add_space_prefix", false);
        std::vector<kvchat::GgufValue> bytes;
        for (char c : charsmap) bytes.push_back(kvchat::test::gguf_uint(kvchat::GgufType::UINT8, static_cast<unsigned char>(c)));
        w.add("tokenizer.ggml.precompiled_charsmap", kvchat::test::gguf_array(kvchat::GgufType::UINT8, bytes));
        w.write(path);
        const auto t = Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
        QVERIFY(t->encode("\xEF\xBD\x88\xEF\xBD\x89", false) == (std::vector<int32_t>{268}));
        QCOMPARE(t->special().bos, -1);  // absent from the metadata
        QVERIFY(t->encode("hi", true) == (std::vector<int32_t>{268}));
    }

    void fromVocabRules() {
        // Empty and repeated pieces, which SentencePiece itself refuses, still load and decode.
        kvchat::SpmVocab v = small_vocab();
        v.tokens[267] = "h";  // a second "h"
        v.tokens[8] = "";
        const auto t = Tokenizer::from_vocab(v);
        QCOMPARE(t->find_piece("h"), 266);
        QCOMPARE(t->token_bytes(267), std::string("h"));
        QCOMPARE(t->token_bytes(8), std::string());
        QVERIFY(t->encode("h", false) == (std::vector<int32_t>{266}));

        kvchat::SpmVocab no_unk = small_vocab();
        no_unk.special.unk = -1;
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_vocab(no_unk));
        kvchat::SpmVocab short_scores = small_vocab();
        short_scores.scores.pop_back();
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_vocab(short_scores));
        kvchat::SpmVocab bad_byte = small_vocab();
        bad_byte.tokens[9] = "<0xzz>";
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_vocab(bad_byte));
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_vocab(kvchat::SpmVocab{}));
    }

    void controlNames() {
        for (const char* m : {"</s>", "<end_of_turn>", "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<PAD>",
                              "\xE2\x96\x81<PRE>", "<eos>"})
            QVERIFY2(kvchat::is_control_name(m), m);
        for (const char* m : {"<s>", "<start_of_image>", "[multimodal]", "<div>", "</s >", "<end_of_turn", "\n"})
            QVERIFY2(!kvchat::is_control_name(m), m);
        // In a vocabulary that has Gemma 4's "<|tool_response>", "</s>" is text (as llama.cpp has it).
        kvchat::SpmVocab v = small_vocab();
        const auto add = [&v](const char* piece) {
            v.tokens.push_back(piece);
            v.scores.push_back(0);
            v.types.push_back(TokenType::UserDefined);
            return v.tokens.size() - 1;
        };
        const size_t s = add("</s>");
        QCOMPARE(kvchat::effective_types(v)[s], TokenType::Control);
        const size_t tool = add("<|tool_response>");
        QCOMPARE(kvchat::effective_types(v)[s], TokenType::UserDefined);
        QCOMPARE(kvchat::effective_types(v)[tool], TokenType::Control);
    }

    void specialMarkerNames() {
        for (const char* m : {"<start_of_image>", "<end_of_audio>", "[multimodal]", "<image_soft_token>",
                              "<|im_start|>", "<unused42>", "<mask>"})
            QVERIFY2(kvchat::is_special_marker(m), m);
        for (const char* m : {"<div>", "</s>", "<s>", "  ", "\n", "<unusedX>", "<start_of_>", "<|", "hello"})
            QVERIFY2(!kvchat::is_special_marker(m), m);
    }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
