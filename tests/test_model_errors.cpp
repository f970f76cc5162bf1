// What a user can hand the loader and the generation loop that they must refuse, each with a
// message naming the problem.
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "support/gguf_writer.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>
#include <QtTest>

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
    }
    return {};
}

}  // namespace

class TestModelErrors : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    std::string path(const char* name) { return (dir_.path() + "/" + name).toStdString(); }

private slots:
    void unknownArchitecture() {
        const std::string p = path("qwen.gguf");
        llama_header("qwen2").write(p);
        const QString msg = load_error(p);
        QVERIFY2(msg.contains("unsupported architecture 'qwen2'"), qPrintable(msg));
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
};

QTEST_GUILESS_MAIN(TestModelErrors)
#include "test_model_errors.moc"
