// What a user can hand the loader and the generation loop that they must refuse, each with a
// message naming the problem.
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "support/cli_run.h"
#include "support/gguf_writer.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <functional>
#include <limits>

using kvchat::test::GgufWriter;

namespace {

GgufWriter llama_header(const std::string& arch, uint32_t blocks = 1) {
    GgufWriter w;
    w.add_string("general.architecture", arch);
    w.add_uint32(arch + ".block_count", blocks);
    w.add_uint32(arch + ".embedding_length", 64);
    w.add_uint32(arch + ".feed_forward_length", 128);
    w.add_uint32(arch + ".attention.head_count", 2);
    w.add_uint32(arch + ".context_length", 64);
    return w;
}

QString load_error(const std::string& path) {
    try {
        kvchat::Model::load(path);
    } catch (const kvchat::Error& e) {
        return QString::fromUtf8(e.what());
    } catch (const std::exception& e) {
        // Not a kvchat::Error: a library's exception escaped the loader's checks.
        return QString("not a kvchat::Error: ") + e.what();
    }
    return {};
}

// A small Gemma 3 model: quick to write and load, with every key the checks look at.
kvchat::test::TinyModelSpec small_gemma() {
    kvchat::test::TinyModelSpec s;
    s.n_layer = 2;
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 32;
    s.n_ff = 128;
    return s;
}

// config.json of a Hugging Face folder, changed by `edit`.
void edit_config(const std::string& dir, const std::function<void(QJsonObject&)>& edit) {
    QFile f(QString::fromStdString(dir + "/config.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QJsonObject cfg = QJsonDocument::fromJson(f.readAll()).object();
    f.close();
    QVERIFY(!cfg.isEmpty());
    edit(cfg);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write(QJsonDocument(cfg).toJson());
}

}  // namespace

class TestModelErrors : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    std::string path(const char* name) { return (dir_.path() + "/" + name).toStdString(); }

private slots:
    void unknownArchitecture() {
        const std::string p = path("falcon.gguf");
        llama_header("falcon").write(p);
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("unsupported architecture 'falcon'") && msg.contains("qwen3") && msg.contains("phi3"),
                 qPrintable(msg));
    }
    // A supported architecture whose file lacks what makes it that architecture is refused by the
    // tensor's name, and a Phi-3 with long-context RoPE factors by what it is.
    void architectureWithoutItsParts_data() {
        QTest::addColumn<QString>("arch");
        QTest::addColumn<QString>("extra");
        QTest::addColumn<QString>("expected");
        QTest::newRow("qwen2 without biases") << "qwen2" << "" << "tensor 'blk.0.attn_q.bias' is missing";
        QTest::newRow("qwen3 without q/k norms") << "qwen3" << "" << "tensor 'blk.0.attn_q_norm.weight' is missing";
        QTest::newRow("phi3 without a gate-up matrix") << "phi3" << "" << "'blk.0.ffn_up.weight' has 512 rows, expected 1024";
        QTest::newRow("phi3 with long-context RoPE") << "phi3" << "rope_factors_long.weight" << "long-context RoPE";
        QTest::newRow("llama with misshapen rope_freqs") << "llama" << "rope_freqs.weight" << "'rope_freqs.weight' has 3 values, expected 32";
    }
    void architectureWithoutItsParts() {
        QFETCH(QString, arch);
        QFETCH(QString, extra);
        QFETCH(QString, expected);
        // A tiny Llama model (separate q, k, v, gate and up; no biases or q/k norms) relabelled.
        kvchat::test::TinyModelSpec s;
        s.arch = "llama";
        s.n_layer = 1;
        s.edit_gguf = [&](GgufWriter& w) {
            const std::string a = arch.toStdString() + ".";
            w.set("general.architecture", kvchat::test::gguf_string(arch.toStdString()));
            for (const auto& [key, v] : std::vector<std::pair<std::string, uint32_t>>{
                     {"block_count", s.n_layer}, {"embedding_length", s.n_embd}, {"feed_forward_length", s.n_ff},
                     {"attention.head_count", s.n_head}, {"attention.head_count_kv", s.n_head_kv},
                     {"attention.key_length", s.head_dim}, {"attention.value_length", s.head_dim},
                     {"context_length", s.n_ctx}})
                w.set(a + key, kvchat::test::gguf_uint(kvchat::GgufType::UINT32, v));
            w.set(a + "attention.layer_norm_rms_epsilon", kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, 1e-6));
            if (!extra.isEmpty()) {
                std::string three(12, '\0');
                w.add_tensor({extra.toStdString(), 0, {3}, three, std::nullopt});  // 3 f32 values
            }
        };
        const std::string p = path("relabelled.gguf");
        kvchat::test::write_tiny_gguf(s, p);
        const QString msg = load_error(p);
        QVERIFY2(msg.contains(expected), qPrintable(msg));
    }
    void gpt2Vocabulary() {
        const std::string p = path("bpe.gguf");
        GgufWriter w = llama_header("llama");
        w.add_string("tokenizer.ggml.model", "gpt2");
        w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
        w.write(p);
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("gpt2"), qPrintable(msg));
    }
    void absurdDimensions() {
        const std::string p = path("huge.gguf");
        llama_header("llama", 4000000000u).write(p);
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("block_count") && msg.contains("out of range"), qPrintable(msg));
    }
    void missingTensor() {
        // A complete tiny model, rewritten without its last layer's down projection.
        kvchat::test::TinyModelSpec s;
        s.arch = "llama";
        s.n_layer = 1;
        const std::string good = path("good.gguf");
        kvchat::test::write_tiny_gguf(s, good);
        kvchat::Model::load(good);  // loads as written
        s.n_layer = 2;
        const std::string p = path("lying.gguf");
        kvchat::test::write_tiny_gguf(s, p);
        // Claim three layers where two are stored.
        QFile f(QString::fromStdString(p));
        QVERIFY(f.open(QIODevice::ReadWrite));
        QByteArray bytes = f.readAll();
        const QByteArray key("llama.block_count");
        const int at = bytes.indexOf(key);
        QVERIFY(at > 0);
        bytes[at + key.size() + 4] = 3;  // after the key: the uint32 type tag, then the value
        f.seek(0);
        f.write(bytes);
        f.close();
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("tensor 'blk.2.attn_q.weight' is missing"), qPrintable(msg));
    }
    void promptProblems() {
        kvchat::test::TinyModelSpec s;
        s.arch = "llama";
        s.n_layer = 1;
        const std::string p = path("tiny.gguf");
        kvchat::test::write_tiny_gguf(s, p);
        auto model = kvchat::Model::load(p);
        auto backend = kvchat::make_cpu_backend(1);
        auto cache = model->make_default_cache(*backend);
        kvchat::Generator gen(*model, *backend);
        kvchat::GenerationConfig g;
        g.sampling.greedy = true;
        try {
            gen.generate(*cache, {}, g);
            QFAIL("an empty prompt was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY(QString(e.what()).contains("empty"));
        }
        std::vector<int32_t> too_long(3000, 270);  // the tiny model's context is 2,048
        try {
            gen.generate(*cache, too_long, g);
            QFAIL("a prompt longer than the context was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY2(QString(e.what()).contains("3000") && QString(e.what()).contains("2048"), e.what());
        }
        QCOMPARE(cache->seq_length(), int64_t(0));  // nothing was half-computed
        try {
            gen.generate(*cache, {2, 99999}, g);
            QFAIL("a token outside the vocabulary was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY(QString(e.what()).contains("99999"));
        }
    }

    // Metadata that parses but cannot be right: each refused by the loader with its key, and by
    // `kvchat-cli info` the same way (info loads what generate loads).
    void implausibleGgufMetadata_data() {
        using kvchat::test::GgufWriter;
        QTest::addColumn<int>("which");
        QTest::addColumn<QString>("key");
        const std::string a = "gemma3.";
        const double nan = std::numeric_limits<double>::quiet_NaN();
        edits_.clear();
        auto row = [&](const char* name, const std::string& key, std::function<void(GgufWriter&)> edit) {
            edits_.push_back(std::move(edit));
            QTest::newRow(name) << int(edits_.size() - 1) << QString::fromStdString(key);
        };
        const std::string eps = a + "attention.layer_norm_rms_epsilon";
        row("rms epsilon NaN", eps, [=](GgufWriter& w) { w.set(eps, kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, nan)); });
        row("rms epsilon 0", eps, [=](GgufWriter& w) { w.set(eps, kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, 0.0)); });
        row("rms epsilon negative", eps, [=](GgufWriter& w) { w.set(eps, kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, -1e-6)); });
        const std::string window = a + "attention.sliding_window";
        row("sliding window 0", window, [=](GgufWriter& w) { w.set(window, kvchat::test::gguf_uint(kvchat::GgufType::UINT32, 0)); });
        row("unknown file type", "general.file_type",
            [](GgufWriter& w) { w.set("general.file_type", kvchat::test::gguf_uint(kvchat::GgufType::UINT32, 99)); });
        const std::string context = a + "context_length";
        row("context length 0", context, [=](GgufWriter& w) { w.set(context, kvchat::test::gguf_uint(kvchat::GgufType::UINT32, 0)); });
        const std::string base = a + "rope.freq_base";
        row("rope base NaN", base, [=](GgufWriter& w) { w.set(base, kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, nan)); });
        const std::string cap = a + "final_logit_softcapping";
        row("negative softcap", cap, [=](GgufWriter& w) { w.set(cap, kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, -30.0)); });
        for (const char* id : {"bos", "eos", "unknown", "padding"}) {
            const std::string key = std::string("tokenizer.ggml.") + id + "_token_id";
            row((std::string(id) + " id outside the vocabulary").c_str(), key,
                [=](GgufWriter& w) { w.set(key, kvchat::test::gguf_uint(kvchat::GgufType::UINT32, 100000)); });
        }
        row("negative eos id", "tokenizer.ggml.eos_token_id", [](GgufWriter& w) {
            w.set("tokenizer.ggml.eos_token_id", kvchat::test::gguf_int(kvchat::GgufType::INT32, -2));
        });
    }
    void implausibleGgufMetadata() {
        QFETCH(int, which);
        QFETCH(QString, key);
        kvchat::test::TinyModelSpec s = small_gemma();
        const std::string good = path("plausible.gguf");
        kvchat::test::write_tiny_gguf(s, good);
        QVERIFY2(load_error(good).isEmpty(), qPrintable(load_error(good)));
        QCOMPARE(kvchat::test::run_cli({"info", "--model", QString::fromStdString(good)}).code, 0);

        s.edit_gguf = edits_[static_cast<size_t>(which)];
        const std::string bad = path("implausible.gguf");
        kvchat::test::write_tiny_gguf(s, bad);
        const QString msg = load_error(bad);
        QVERIFY2(msg.contains(key) && !msg.contains("not a kvchat::Error"), qPrintable(msg));
        const auto info = kvchat::test::run_cli({"info", "--model", QString::fromStdString(bad)});
        QVERIFY2(info.code == 2 && info.err.contains(key), qPrintable(info.err));
    }

    // Vocabulary arrays: a NaN score or a token type that is not an integer, named with its index.
    void implausibleVocabularyEntries() {
        using kvchat::test::GgufWriter;
        kvchat::test::TinyModelSpec s = small_gemma();
        const std::string good = path("vocabulary.gguf");
        kvchat::test::write_tiny_gguf(s, good);
        const int n = kvchat::Model::load(good)->tokenizer().vocab_size();
        QVERIFY(n > 10);
        std::vector<float> scores(static_cast<size_t>(n), -1.0f);
        scores[7] = std::numeric_limits<float>::quiet_NaN();
        // GGUF arrays hold one type: token types written as floats (1.0, "normal").
        std::vector<kvchat::GgufValue> types(static_cast<size_t>(n), kvchat::test::gguf_float(kvchat::GgufType::FLOAT32, 1.0));
        const std::vector<std::pair<std::function<void(GgufWriter&)>, QString>> cases = {
            {[&](GgufWriter& w) { w.remove("tokenizer.ggml.scores").add_float32_array("tokenizer.ggml.scores", scores); },
             "tokenizer.ggml.scores[7] is not a finite number"},
            {[&](GgufWriter& w) { w.set("tokenizer.ggml.token_type", kvchat::test::gguf_array(kvchat::GgufType::FLOAT32, types)); },
             "tokenizer.ggml.token_type[0] is not an integer"},
        };
        for (const auto& [edit, expected] : cases) {
            s.edit_gguf = edit;
            const std::string bad = path("vocabulary-bad.gguf");
            kvchat::test::write_tiny_gguf(s, bad);
            const QString msg = load_error(bad);
            QVERIFY2(msg.contains(expected), qPrintable(msg));
        }
    }

    // A truncated model is refused by info as by generate (info used to read only the header).
    void truncatedModelRefusedByInfo() {
        const std::string p = path("truncated.gguf");
        kvchat::test::write_tiny_gguf(small_gemma(), p);
        QFile f(QString::fromStdString(p));
        QVERIFY(f.resize(f.size() - 1000));
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("truncated"), qPrintable(msg));
        const auto info = kvchat::test::run_cli({"info", "--model", QString::fromStdString(p)});
        QVERIFY2(info.code == 2 && info.err.contains("truncated") && info.out.isEmpty(), qPrintable(info.err + info.out));
    }

    // config.json values of the wrong type or impossible values: a kvchat::Error naming the key
    // (they used to escape as nlohmann::type_error and abort kvchat-cli with exit 134).
    void badHuggingFaceConfig_data() {
        QTest::addColumn<QString>("change");  // a JSON object merged into config.json
        QTest::addColumn<QString>("key");
        QTest::newRow("model_type a number") << R"({"model_type": 5})" << "'model_type' is not a string";
        QTest::newRow("rope_scaling factor a string") << R"({"rope_scaling": {"rope_type": "linear", "factor": "8"}})"
                                                      << "'rope_scaling.factor'";
        QTest::newRow("rope_scaling a string") << R"({"rope_scaling": "linear"})" << "'rope_scaling' is not an object";
        QTest::newRow("rope_scaling type a number") << R"({"rope_scaling": {"type": 3}})" << "'rope_scaling.type'";
        QTest::newRow("layer_types of numbers") << R"({"layer_types": [1, 2]})" << "'layer_types[0]'";
        QTest::newRow("layer_types an object") << R"({"layer_types": {}})" << "'layer_types' is not a list";
        QTest::newRow("tie_word_embeddings a string") << R"({"tie_word_embeddings": "yes"})" << "'tie_word_embeddings'";
        QTest::newRow("text_config a number") << R"({"model_type": "gemma3", "text_config": 7})" << "'text_config'";
        QTest::newRow("layer count a string") << R"({"num_hidden_layers": "2"})" << "'num_hidden_layers'";
        QTest::newRow("rms_norm_eps 0") << R"({"rms_norm_eps": 0})" << "'rms_norm_eps'";
        QTest::newRow("rms_norm_eps negative") << R"({"rms_norm_eps": -0.5})" << "'rms_norm_eps'";
        QTest::newRow("sliding_window 0") << R"({"sliding_window": 0})" << "'sliding_window'";
        QTest::newRow("query_pre_attn_scalar 0") << R"({"query_pre_attn_scalar": 0})" << "'query_pre_attn_scalar'";
        QTest::newRow("rope_theta 0") << R"({"rope_theta": 0})" << "'rope_theta'";
    }
    void badHuggingFaceConfig() {
        QFETCH(QString, change);
        QFETCH(QString, key);
        kvchat::test::TinyModelSpec s = small_gemma();
        s.n_vocab = 420;  // the tiny tokenizer has 400 pieces
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        kvchat::test::write_tiny_hf(s, folder, "F32", kvchat::test::data_path("tiny_tokenizer.model"), 1);
        QVERIFY2(load_error(folder).isEmpty(), qPrintable(load_error(folder)));
        const QJsonObject merge = QJsonDocument::fromJson(change.toUtf8()).object();
        QVERIFY(!merge.isEmpty());
        edit_config(folder, [&](QJsonObject& cfg) {
            for (auto it = merge.begin(); it != merge.end(); ++it) cfg[it.key()] = it.value();
        });
        const QString msg = load_error(folder);
        QVERIFY2(msg.contains("config.json") && msg.contains(key) && !msg.contains("not a kvchat::Error"), qPrintable(msg));
        const auto info = kvchat::test::run_cli({"info", "--model", dir.path()});
        QVERIFY2(info.code == 2 && info.err.contains(key), qPrintable(QString::number(info.code) + " " + info.err));
    }

private:
    std::vector<std::function<void(kvchat::test::GgufWriter&)>> edits_;
};

QTEST_GUILESS_MAIN(TestModelErrors)
#include "test_model_errors.moc"
