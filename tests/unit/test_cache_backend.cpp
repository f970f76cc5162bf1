// The cache's side of the backend boundary: a layer computes and moves its keys and values only
// through the backend it was made with (the append, attention, quantization, and the offload
// tier's file copies), so a backend that does something else with them (a GPU) sees every step.
// A backend that forwards to the CPU one and counts its calls stands in for such a backend.
#include "engine/cache/cache.h"
#include "engine/cache/convert.h"
#include "engine/cache/snapshot.h"
#include "engine/compute/backend.h"
#include "engine/compute/thread_pool.h"
#include "engine/model/model.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>
#include <QtTest>

#include <map>
#include <mutex>
#include <optional>
#include <random>

namespace {

class CountingBackend final : public kvchat::Backend {
public:
    explicit CountingBackend(int threads) : cpu_(kvchat::make_cpu_backend(threads)) {}
    std::map<std::string, int> calls;

    std::string name() const override { return "counting"; }
    kvchat::ThreadPool& pool() override { return cpu_->pool(); }
    kvchat::Buffer alloc(int64_t rows, int64_t cols) override { return cpu_->alloc(rows, cols); }
    void free(kvchat::Buffer& b) override { cpu_->free(b); }
    void read(const kvchat::Buffer& b, int64_t n_rows, float* host) const override { cpu_->read(b, n_rows, host); }
    void write(kvchat::Buffer& b, int64_t n_rows, const float* host) override { cpu_->write(b, n_rows, host); }
    std::unique_ptr<kvchat::PlacedWeights> place_weights(const kvchat::WeightSet& set) override {
        ++calls["place_weights"];
        return cpu_->place_weights(set);
    }
    void embed(const kvchat::PlacedMatrix& t, const int32_t* ids, int64_t n, float scale, kvchat::Buffer& out) override {
        cpu_->embed(t, ids, n, scale, out);
    }
    void rms_norm(const kvchat::Buffer& x, int64_t n, const kvchat::PlacedVector& w, float eps, kvchat::Buffer& out) override {
        cpu_->rms_norm(x, n, w, eps, out);
    }
    void matmul(const kvchat::PlacedMatrix& w, const kvchat::Buffer& x, int64_t n, kvchat::Buffer& y) override {
        cpu_->matmul(w, x, n, y);
    }
    void matmuls(const kvchat::Buffer& x, int64_t n, const kvchat::MatmulOutput* outs, int count) override {
        cpu_->matmuls(x, n, outs, count);
    }
    void add(kvchat::Buffer& x, const kvchat::Buffer& y, int64_t n) override { cpu_->add(x, y, n); }
    void add_bias(kvchat::Buffer& x, int64_t n, const kvchat::PlacedVector& b) override { cpu_->add_bias(x, n, b); }
    void gated(kvchat::GatedActivation a, kvchat::Buffer& g, const kvchat::Buffer& u, int64_t n) override {
        cpu_->gated(a, g, u, n);
    }
    void softcap(kvchat::Buffer& x, int64_t n, float cap) override { cpu_->softcap(x, n, cap); }
    void gather_rows(const kvchat::Buffer& src, const std::vector<int64_t>& rows, kvchat::Buffer& dst) override {
        cpu_->gather_rows(src, rows, dst);
    }

    std::unique_ptr<kvchat::KvMemory> alloc_kv() override {
        ++calls["alloc_kv"];
        return cpu_->alloc_kv();
    }
    void copy(const kvchat::Buffer& src, int64_t n, kvchat::Buffer& dst) override {
        ++calls["copy"];
        cpu_->copy(src, n, dst);
    }
    void rope(const kvchat::RopeSpec& s, kvchat::Buffer& x, const int32_t* pos, int64_t n, int heads, int hd) override {
        ++calls["rope"];
        cpu_->rope(s, x, pos, n, heads, hd);
    }
    void round_f16(kvchat::Buffer& x, int64_t n, float scale) override {
        ++calls["round_f16"];
        cpu_->round_f16(x, n, scale);
    }
    void kv_store(kvchat::KvDtype t, const kvchat::Buffer& src, int64_t n, void* dst) override {
        ++calls["kv_store"];
        cpu_->kv_store(t, src, n, dst);
    }
    void kv_quantize(const kvchat::KiviFormat& f, kvchat::KvDtype t, const void* rec, int count, uint8_t* block) override {
        ++calls["kv_quantize"];
        cpu_->kv_quantize(f, t, rec, count, block);
    }
    void attend(const kvchat::AttentionInput& in, const kvchat::AttentionShape& shape, kvchat::Buffer& out) override {
        ++calls["attend"];
        cpu_->attend(in, shape, out);
    }
    void kv_copy(void* dst, const void* src, size_t n) override {
        ++calls["kv_copy"];
        cpu_->kv_copy(dst, src, n);
    }
    void kv_upload(void* dst, const void* host, size_t n) override {
        ++calls["kv_upload"];
        cpu_->kv_upload(dst, host, n);
    }
    void kv_download(void* host, const void* src, size_t n) override {
        ++calls["kv_download"];
        cpu_->kv_download(host, src, n);
    }
    // Called from the tier's prefetch thread too: counted apart, under a lock.
    int kv_read_file(int fd, int64_t offset, void* dst, size_t n) override {
        {
            std::lock_guard lock(mu_);
            ++file_reads_;
        }
        return cpu_->kv_read_file(fd, offset, dst, n);
    }
    int kv_write_file(int fd, int64_t offset, const void* src, size_t n, size_t* written) override {
        ++calls["kv_write_file"];
        return cpu_->kv_write_file(fd, offset, src, n, written);
    }
    int file_reads() {
        std::lock_guard lock(mu_);
        return file_reads_;
    }

private:
    std::unique_ptr<kvchat::Backend> cpu_;
    std::mutex mu_;
    int file_reads_ = 0;
};

std::vector<int32_t> tokens(int n) {
    std::mt19937 rng(11);
    std::vector<int32_t> t = {2};
    while (static_cast<int>(t.size()) < n) t.push_back(static_cast<int32_t>(6 + rng() % 270));
    return t;
}

}  // namespace

class TestCacheBackend : public QObject {
    Q_OBJECT

    static constexpr int kLayers = 6;
    QTemporaryDir dir_;
    std::unique_ptr<kvchat::Model> model_;

    // The logits of toks through a cache of `spec` on `backend`, in chunks of 7 then one at a time.
    std::vector<float> run(kvchat::Backend& backend, const std::string& spec, const std::vector<int32_t>& toks) {
        auto cache = model_->make_cache(backend, spec);
        std::vector<float> all, part;
        for (size_t off = 0; off < toks.size();) {
            const int64_t n = off < 21 ? 7 : 1;
            model_->forward(backend, *cache, toks.data() + off, n, kvchat::Logits::All, part);
            all.insert(all.end(), part.begin(), part.end());
            off += static_cast<size_t>(n);
        }
        return all;
    }

private slots:
    void initTestCase() {
        // Gemma's pattern: five sliding layers (window 4), then a global one, where a quantized
        // cache makes blocks.
        kvchat::test::TinyModelSpec s;
        s.n_layer = kLayers;
        const std::string path = (dir_.path() + "/tiny.gguf").toStdString();
        kvchat::test::write_tiny_gguf(s, path);
        model_ = kvchat::Model::load(path);
    }

    // Every strategy computes through the backend it was made with, and gives what the CPU
    // backend gives directly, bit for bit.
    void layersComputeThroughTheirBackend_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QStringList>("ops");
        QTest::newRow("dynamic") << "dynamic" << QStringList{"alloc_kv", "copy", "rope", "kv_store", "kv_copy", "attend"};
        QTest::newRow("sink") << "sink:window=8,sinks=2" << QStringList{"rope", "kv_store", "kv_copy", "attend"};
        QTest::newRow("quantized") << "quantized:nbits=4,residual=8,group=8"
                                   << QStringList{"kv_store", "kv_copy", "kv_quantize", "attend"};
        QTest::newRow("offloaded") << "offloaded" << QStringList{"alloc_kv", "kv_store", "kv_copy", "attend", "kv_write_file"};
    }
    void layersComputeThroughTheirBackend() {
        QFETCH(QString, spec);
        QFETCH(QStringList, ops);
        const std::vector<int32_t> toks = tokens(40);
        CountingBackend counting(2);
        auto cpu = kvchat::make_cpu_backend(2);
        const std::vector<float> got = run(counting, spec.toStdString(), toks);
        const std::vector<float> want = run(*cpu, spec.toStdString(), toks);
        QCOMPARE(got.size(), want.size());
        QVERIFY(got == want);
        for (const QString& op : ops)
            QVERIFY2(counting.calls[op.toStdString()] > 0, qPrintable(op + " was never called"));
    }

    // A model's weights become the backend's handles once, the first time the model runs there,
    // not per call. A backend that is gone keeps nothing: the next one (here made where the last
    // one was, so an address would mistake one for the other) places them anew.
    void weightsArePlacedOncePerBackend() {
        const std::vector<int32_t> toks = tokens(12);
        auto cpu = kvchat::make_cpu_backend(2);
        std::vector<float> part, want;
        for (int round = 0; round < 3; ++round) {
            std::optional<CountingBackend> counting(std::in_place, 2);
            auto cache = model_->make_cache(*counting, "dynamic");
            for (size_t off = 0; off < toks.size(); ++off)
                model_->forward(*counting, *cache, toks.data() + off, 1, kvchat::Logits::Last, part);
            QCOMPARE(counting->calls["place_weights"], 1);
            if (round == 0) {
                auto reference = model_->make_cache(*cpu, "dynamic");
                for (size_t off = 0; off < toks.size(); ++off)
                    model_->forward(*cpu, *reference, toks.data() + off, 1, kvchat::Logits::Last, want);
            }
            QVERIFY(part == want);
            cache.reset();
            counting.reset();
        }
    }

    // The offload tier's fast buffers are the backend's KV memory, and its reads of the spill file
    // go through the backend (the prefetch thread's included): one per layer use at least.
    void offloadTierMovesThroughTheBackend() {
        const std::vector<int32_t> toks = tokens(40);
        CountingBackend counting(2);
        int before = 0;
        {
            auto cache = model_->make_cache(counting, "offloaded");
            before = counting.calls["alloc_kv"];
            std::vector<float> part;
            for (size_t off = 0; off < toks.size(); ++off)
                model_->forward(counting, *cache, toks.data() + off, 1, kvchat::Logits::Last, part);
        }
        // Two fast buffers for the tier, and a staging area per layer for the new tokens.
        QVERIFY2(before >= 2 + kLayers, qPrintable(QString::number(before)));
        QVERIFY2(counting.file_reads() >= static_cast<int>(toks.size()) * kLayers, qPrintable(QString::number(counting.file_reads())));
        QVERIFY(counting.calls["kv_write_file"] >= static_cast<int>(toks.size()) * kLayers);
    }

    // A snapshot loads onto the backend the model computes with (issue 25: it got a CPU backend
    // of its own, which a strategy switch then freed under the layers): its memory is that
    // backend's, every later operation goes through it, a conversion keeps it, and the logits are
    // those of a cache that never left memory.
    void snapshotLoadsOntoTheModelsBackend_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("target");
        QTest::newRow("dynamic -> offloaded") << "dynamic" << "offloaded:dir=" + dir_.path();
        QTest::newRow("dynamic -> quantized") << "dynamic" << "quantized:nbits=8,residual=8,group=8";
        QTest::newRow("quantized -> sink (rebuilt)") << "quantized:nbits=4,residual=8,group=8" << "sink:window=16,sinks=2";
        QTest::newRow("quantized -> quantized+offloaded") << "quantized:nbits=4,residual=8,group=8"
                                                          << "quantized:nbits=4,residual=8,group=8+offloaded:dir=" + dir_.path();
        QTest::newRow("offloaded -> static") << "offloaded:dir=" + dir_.path() << "static:max_len=64";
    }
    void snapshotLoadsOntoTheModelsBackend() {
        QFETCH(QString, spec);
        QFETCH(QString, target);
        const std::vector<int32_t> toks = tokens(30);
        const int32_t next = 9;
        auto cpu = kvchat::make_cpu_backend(2);
        std::vector<float> lg, want;
        auto saved = model_->make_cache(*cpu, spec.toStdString());
        model_->forward(*cpu, *saved, toks.data(), static_cast<int64_t>(toks.size()), kvchat::Logits::None, lg);
        const std::string path = (dir_.path() + "/snap.kvc").toStdString();
        kvchat::save_snapshot(path, *saved, model_->fingerprint());
        // Conversions that must rebuild re-prefill through the model on the cache's backend.
        auto through = [&](kvchat::Backend& b) {
            kvchat::ConvertOptions o;
            o.reprefill = [&](kvchat::Cache& c, const std::vector<int32_t>& t) {
                std::vector<float> none;
                model_->forward(b, c, t.data(), static_cast<int64_t>(t.size()), kvchat::Logits::None, none);
            };
            return o;
        };
        kvchat::convert(*saved, target.toStdString(), through(*cpu));
        model_->forward(*cpu, *saved, &next, 1, kvchat::Logits::Last, want);

        CountingBackend counting(2);  // outlives the cache loaded onto it
        kvchat::LoadedSnapshot loaded = kvchat::load_snapshot(path, model_->layer_specs(), model_->fingerprint(), counting);
        QVERIFY(loaded.cache->backend() == &counting);
        QVERIFY2(counting.calls["alloc_kv"] >= kLayers, qPrintable(QString::number(counting.calls["alloc_kv"])));
        kvchat::convert(*loaded.cache, target.toStdString(), through(counting));
        QVERIFY(loaded.cache->backend() == &counting);
        const int attends = counting.calls["attend"];
        std::vector<float> got;
        model_->forward(counting, *loaded.cache, &next, 1, kvchat::Logits::Last, got);
        QCOMPARE(counting.calls["attend"], attends + kLayers);
        QVERIFY(got == want);
    }
};

QTEST_GUILESS_MAIN(TestCacheBackend)
#include "test_cache_backend.moc"
