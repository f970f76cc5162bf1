// engine/model/model_summary: what the Models view shows of a model file, read from its metadata.
// Tiny generated models (GGUF and a Hugging Face folder) against the spec they were written
// from; the committed tiny models of other architectures and the installed models against what
// gguf-py's GGUFReader reads (tests/data/model_summaries.json, tests/reference/
// make_model_summaries.py; an installed model that is absent or another file is skipped); broken
// and foreign files are refused with the path and the problem named.
#include "engine/error.h"
#include "engine/model/model_path.h"
#include "engine/model/model_summary.h"
#include "support/gguf_writer.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QCryptographicHash>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>

using namespace kvchat;

namespace {

// Every number the reference model holds: one per parameter of the file.
uint64_t parameters_of(const test::ReferenceModel& m) {
    uint64_t n = m.tok_embd.size() + m.output_norm.size();
    for (const auto& L : m.layers)
        for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.attn_norm, &L.q_norm, &L.k_norm,
                              &L.post_attn_norm, &L.ffn_norm, &L.post_ffn_norm})
            n += v->size();
    return n;
}

nlohmann::json golden() {
    std::ifstream in(test::data_path("model_summaries.json"));
    return nlohmann::json::parse(in);
}

QString sha256(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    QCryptographicHash h(QCryptographicHash::Sha256);
    h.addData(&f);
    return QString::fromLatin1(h.result().toHex());
}

void compare_with_golden(const ModelSummary& s, const nlohmann::json& g) {
    auto text = [&](const char* key) { return g[key].is_null() ? std::string() : g[key].get<std::string>(); };
    QCOMPARE(s.name, g["name"].get<std::string>());
    QCOMPARE(s.architecture, g["architecture"].get<std::string>());
    QCOMPARE(s.parameters, g["parameters"].get<uint64_t>());
    QCOMPARE(s.file_type, text("file_type"));
    QCOMPARE(QString::fromStdString(s.dominant_type), QString::fromStdString(g["dominant_type"].get<std::string>()));
    QCOMPARE(s.context_length, g["context_length"].get<uint64_t>());
    QCOMPARE(static_cast<uint64_t>(s.layers), g["layers"].get<uint64_t>());
    QCOMPARE(s.vocabulary, text("vocabulary"));
    QCOMPARE(s.pre_tokenizer, text("pre_tokenizer"));
    QCOMPARE(s.vocabulary_size, g["vocabulary_size"].get<uint64_t>());
    QCOMPARE(s.chat_template, g["chat_template"].get<bool>());
    QCOMPARE(s.file_bytes, g["bytes"].get<uint64_t>());
    QCOMPARE(s.format, std::string("gguf"));
    QVERIFY(s.architecture_supported);
}

// The summary of `path` is refused with an error naming the path and containing `problem`.
void expect_refused(const std::string& path, const QString& problem) {
    try {
        summarise_model(path);
        QFAIL(qPrintable("no error for " + QString::fromStdString(path)));
    } catch (const Error& e) {
        const QString what = QString::fromUtf8(e.what());
        QVERIFY2(what.contains(QString::fromStdString(path)), qPrintable(what));
        QVERIFY2(what.contains(problem, Qt::CaseInsensitive), qPrintable(what));
    }
}

}  // namespace

class TestModelSummary : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;

private Q_SLOTS:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    void tinyGguf_data() {
        QTest::addColumn<QString>("arch");
        QTest::addColumn<int>("weightType");
        QTest::addColumn<int>("context");
        QTest::addColumn<QString>("typeName");
        QTest::newRow("gemma3 f32") << "gemma3" << int(TensorType::F32) << 2048 << "F32";
        QTest::newRow("gemma3 q8_0") << "gemma3" << int(TensorType::Q8_0) << 512 << "Q8_0";
        QTest::newRow("llama q4_1") << "llama" << int(TensorType::Q4_1) << 4096 << "Q4_1";
    }

    // A tiny model's summary is the spec it was written from: its parameters are the reference's
    // numbers, its weights' type the one most parameters have (the F32 norms are few).
    void tinyGguf() {
        QFETCH(QString, arch);
        QFETCH(int, weightType);
        QFETCH(int, context);
        QFETCH(QString, typeName);
        test::TinyModelSpec spec = test::chat_sized_spec(3);
        spec.arch = arch.toStdString();
        spec.weight_type = static_cast<TensorType>(weightType);
        spec.n_ctx = context;
        const std::string path = (dir_.path() + "/tiny-" + arch + QString::number(weightType) + ".gguf").toStdString();
        const test::ReferenceModel ref = test::write_tiny_gguf(spec, path);
        const ModelSummary s = summarise_model(path);
        QCOMPARE(s.path, path);
        QCOMPARE(s.format, std::string("gguf"));
        QCOMPARE(s.name, "tiny " + spec.arch);
        QCOMPARE(s.architecture, spec.arch);
        QVERIFY(s.architecture_supported);
        QCOMPARE(s.parameters, parameters_of(ref));
        QCOMPARE(QString::fromStdString(s.dominant_type), typeName);
        QCOMPARE(s.file_type, std::string());  // the tiny writer states none
        QCOMPARE(s.context_length, uint64_t(context));
        QCOMPARE(s.layers, 3);
        QCOMPARE(s.vocabulary, std::string("llama"));
        QCOMPARE(vocabulary_kind(s.vocabulary), std::string("SentencePiece"));
        QCOMPARE(s.vocabulary_size, uint64_t(spec.n_vocab));
        QCOMPARE(s.chat_template, false);
        QCOMPARE(s.file_bytes, uint64_t(QFileInfo(QString::fromStdString(path)).size()));
    }

    // Keys a file may leave out or state: no name (the file's name stands in), a file type, a chat
    // template; an architecture kvchat has no forward pass for is read, and marked unsupported.
    void optionalKeys() {
        test::TinyModelSpec spec = test::chat_sized_spec(2);
        spec.chat_template = "{{ messages }}";
        spec.edit_gguf = [](test::GgufWriter& w) {
            w.remove("general.name");
            w.set("general.file_type", test::gguf_uint(GgufType::UINT32, 15));
        };
        const std::string path = (dir_.path() + "/unnamed-model.gguf").toStdString();
        test::write_tiny_gguf(spec, path);
        ModelSummary s = summarise_model(path);
        QCOMPARE(s.name, std::string("unnamed-model"));
        QCOMPARE(s.file_type, std::string("Q4_K_M"));
        QCOMPARE(s.chat_template, true);

        spec.chat_template.clear();
        spec.edit_gguf = [](test::GgufWriter& w) { w.set("general.architecture", test::gguf_string("rwkv7")); };
        const std::string foreign = (dir_.path() + "/rwkv.gguf").toStdString();
        test::write_tiny_gguf(spec, foreign);
        s = summarise_model(foreign);
        QCOMPARE(s.architecture, std::string("rwkv7"));
        QVERIFY(!s.architecture_supported);
        QCOMPARE(s.context_length, uint64_t(0));  // its keys are named after gemma3, not rwkv7
    }

    // A Hugging Face folder: config.json's numbers, the safetensors' parameters, SentencePiece.
    void tinyFolder() {
        test::TinyModelSpec spec = test::chat_sized_spec(2);
        spec.arch = "llama";
        const std::string folder = (dir_.path() + "/hf-llama").toStdString();
        QVERIFY(QDir().mkpath(QString::fromStdString(folder)));
        const test::ReferenceModel ref =
            test::write_tiny_hf(spec, folder, "F16", test::data_path("tiny_tokenizer.model"), 2);
        const ModelSummary s = summarise_model(folder);
        QCOMPARE(s.format, std::string("safetensors"));
        QCOMPARE(s.name, std::string("hf-llama"));
        QCOMPARE(s.architecture, std::string("llama"));
        QVERIFY(s.architecture_supported);
        QCOMPARE(s.parameters, parameters_of(ref));
        QCOMPARE(s.dominant_type, std::string("F16"));
        QCOMPARE(s.context_length, uint64_t(2048));
        QCOMPARE(s.layers, 2);
        QCOMPARE(s.vocabulary, std::string("llama"));
        QCOMPARE(s.vocabulary_size, uint64_t(spec.n_vocab));
        uint64_t shards = 0;
        for (const QFileInfo& f : QDir(QString::fromStdString(folder)).entryInfoList({"*.safetensors"}, QDir::Files))
            shards += static_cast<uint64_t>(f.size());
        QCOMPARE(s.file_bytes, shards);
    }

    // Other architectures' files, written by gguf-py (qwen2 with a BPE vocabulary, phi3), against
    // gguf-py's reading of them.
    void committedTinyArchs_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("qwen2") << "tiny_archs/tiny_qwen2.gguf";
        QTest::newRow("phi3") << "tiny_archs/tiny_phi3.gguf";
    }
    void committedTinyArchs() {
        QFETCH(QString, file);
        const nlohmann::json g = golden()[file.toStdString()];
        QVERIFY(!g.is_null());
        compare_with_golden(summarise_model(test::data_path(file.toStdString())), g);
    }

    // The installed models, when they are the files the golden data was made from.
    void installedModels_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("smollm2") << QString(kChatModelFile);
        QTest::newRow("gemma3") << QString(kDefaultModelFile);
    }
    void installedModels() {
        QFETCH(QString, file);
        const nlohmann::json g = golden()[file.toStdString()];
        const QString path = QString::fromStdString(installed_model_path(file.toStdString()));
        if (!QFileInfo::exists(path)) QSKIP(qPrintable("not installed: " + path + " (packaging/kvchat.sh model)"));
        if (sha256(path) != QString::fromStdString(g["sha256"].get<std::string>()))
            QSKIP(qPrintable(path + " is not the file tests/data/model_summaries.json describes"));
        compare_with_golden(summarise_model(path.toStdString()), g);
    }

    // What cannot be summarised says what and why: a missing path, a text file, a GGUF cut short
    // (its tensors run past the end), a folder holding no model, a vocabulary of the wrong kind.
    void refusals() {
        const std::string missing = (dir_.path() + "/no-such.gguf").toStdString();
        expect_refused(missing, "");

        const std::string text = (dir_.path() + "/notes.gguf").toStdString();
        std::ofstream(text) << "these are not the weights you are looking for\n";
        expect_refused(text, "not a GGUF file");

        const std::string whole = (dir_.path() + "/whole.gguf").toStdString();
        test::write_tiny_gguf(test::chat_sized_spec(2), whole);
        QFile in(QString::fromStdString(whole));
        QVERIFY(in.open(QIODevice::ReadOnly));
        const QByteArray bytes = in.readAll();
        const std::string cut = (dir_.path() + "/cut.gguf").toStdString();
        QFile out(QString::fromStdString(cut));
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(bytes.left(bytes.size() - 1000));
        out.close();
        expect_refused(cut, "");

        const std::string empty_dir = (dir_.path() + "/empty-folder").toStdString();
        QVERIFY(QDir().mkpath(QString::fromStdString(empty_dir)));
        expect_refused(empty_dir, "config.json");

        test::TinyModelSpec spec = test::chat_sized_spec(2);
        spec.edit_gguf = [](test::GgufWriter& w) { w.set("tokenizer.ggml.tokens", test::gguf_string("not a list")); };
        const std::string odd = (dir_.path() + "/odd-vocab.gguf").toStdString();
        test::write_tiny_gguf(spec, odd);
        expect_refused(odd, "tokenizer.ggml.tokens");
    }

    void fileTypeNames() {
        // gguf-py's LlamaFileType names (tests/data/model_summaries.json holds two of them as read).
        QCOMPARE(file_type_name(0), std::string("F32"));
        QCOMPARE(file_type_name(3), std::string("Q4_1"));
        QCOMPARE(file_type_name(15), std::string("Q4_K_M"));
        QCOMPARE(file_type_name(32), std::string("BF16"));
        QCOMPARE(file_type_name(4), std::string());   // retired (Q4_1_SOME_F16)
        QCOMPARE(file_type_name(1024), std::string());  // "guessed": no type stated
        QCOMPARE(vocabulary_kind("gpt2"), std::string("byte-level BPE"));
        QCOMPARE(vocabulary_kind("rwkv"), std::string("rwkv"));
    }
};

QTEST_MAIN(TestModelSummary)
#include "test_model_summary.moc"
