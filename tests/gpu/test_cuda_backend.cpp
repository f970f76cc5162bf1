// The CUDA backend against the CPU one. Device selection and the fallback to the CPU run
// everywhere (on a machine without a usable GPU they check the fallback itself); every case that
// needs a GPU skips with "no CUDA device: <reason>" when there is none.
//
// Tolerances (where results cannot be bit-equal: the GPU sums in another order and multiplies
// fp16 weights with fp16 activations, as llama.cpp's CUDA build does):
//   - element-wise kernels, RoPE, f16 rounding, K/V conversion, KIVI quantization: bit-equal;
//   - RMSNorm, attention: 1e-4 relative to the largest output;
//   - matrix products: 1e-2 relative to the largest output (fp16 inputs);
//   - default model logits: 2% of the largest logit, and the same greedy tokens for every
//     lossless strategy.
#include "engine/cache/cache.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/conversation.h"
#include "engine/compute/attention.h"
#include "engine/compute/backend.h"
#include "engine/compute/device.h"
#include "engine/compute/interleaved_rows.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"
#include "engine/compute/rope.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"
#include "engine/generate/generator.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/cli_run.h"
#include "support/counting_backend.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryFile>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

// AttentionInput has a member named like Qt's `slots` keyword.
#undef slots

using namespace kvchat;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

float max_abs(const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

// The largest difference, relative to the largest magnitude of `want`.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    double d = 0.0;
    for (size_t i = 0; i < want.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(got[i] - want[i])));
    return d / std::max(1e-30, static_cast<double>(max_abs(want)));
}

// A buffer of the backend's (device memory on the GPU) holding v: written through the backend,
// never through its data pointer.
Buffer filled(Backend& b, const std::vector<float>& v, int64_t rows, int64_t cols) {
    Buffer buf = b.alloc(rows, cols);
    b.write(buf, rows, v.data());
    return buf;
}

// Bytes in the backend's KV memory.
std::unique_ptr<KvMemory> kv_filled(Backend& b, const std::vector<uint8_t>& bytes) {
    auto mem = b.alloc_kv();
    mem->resize(bytes.size());
    b.kv_upload(mem->data(), bytes.data(), bytes.size());
    return mem;
}

std::vector<float> contents(const Backend& b, const Buffer& buf) {
    std::vector<float> v(static_cast<size_t>(buf.size()));
    b.read(buf, buf.rows, v.data());
    return v;
}

}  // namespace

class TestCudaBackend : public QObject {
    Q_OBJECT
    std::unique_ptr<Backend> cpu_;
    std::unique_ptr<Backend> gpu_;
    std::string why_not_;  // the fallback notice when there is no usable GPU

    bool have_gpu() const { return gpu_ != nullptr; }

private Q_SLOTS:
    void initTestCase() {
        cpu_ = make_cpu_backend(2);
        OpenedBackend b = open_backend(Device{Device::Kind::Cuda, 0}, 2);
        if (b.notice.empty())
            gpu_ = std::move(b.backend);
        else  // "CUDA device 0 is not usable: <reason>; using the CPU": the reason
            why_not_ = b.notice.substr(std::min(b.notice.size(), b.notice.find(": ") + 2),
                                       b.notice.size() - std::string("; using the CPU").size() -
                                           std::min(b.notice.size(), b.notice.find(": ") + 2));
    }

    void parsesDevices() {
        QCOMPARE(parse_device("cpu")->kind, Device::Kind::Cpu);
        QCOMPARE(parse_device("cuda")->kind, Device::Kind::Cuda);
        QCOMPARE(parse_device("cuda")->index, 0);
        QCOMPARE(parse_device("cuda:3")->index, 3);
        for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "cuda:99999", " cpu"})
            QVERIFY2(!parse_device(bad), bad);
        for (const char* s : {"cpu", "cuda", "cuda:2"}) QCOMPARE(device_name(*parse_device(s)), std::string(s));
        QCOMPARE(device_name(*parse_device("cuda:0")), std::string("cuda"));
    }

    // Without a usable GPU, asking for one gives the CPU backend and one line naming the reason.
    void fallsBackToTheCpu() {
        if (have_gpu()) QSKIP("a CUDA device is usable here: the fallback needs a machine without one");
        OpenedBackend b = open_backend(Device{Device::Kind::Cuda, 0}, 1);
        QVERIFY(b.backend);
        QCOMPARE(b.backend->name(), std::string("cpu"));
        QVERIFY2(b.notice.rfind("CUDA device 0 is not usable: ", 0) == 0, b.notice.c_str());
        QVERIFY2(b.notice.size() > std::string("CUDA device 0 is not usable: ; using the CPU").size(), b.notice.c_str());
        QVERIFY2(b.notice.find('\n') == std::string::npos, b.notice.c_str());
        QVERIFY2(b.notice.size() >= 15 && b.notice.substr(b.notice.size() - 15) == "; using the CPU", b.notice.c_str());
#ifdef KVCHAT_CUDA_BUILT
        // The library was built, so it loads: the reason is the driver's or the device's, not a
        // missing or broken library.
        QVERIFY2(!cuda_library_path().empty(), "libkvchat_cuda.so was built but is not found beside the tests");
        QVERIFY2(b.notice.find("cannot load") == std::string::npos, b.notice.c_str());
        QVERIFY2(b.notice.find("has no CUDA backend") == std::string::npos, b.notice.c_str());
#endif
        // The CPU backend it gave computes.
        Buffer x = filled(*b.backend, {1.0f, 2.0f}, 1, 2), y = filled(*b.backend, {3.0f, 4.0f}, 1, 2);
        b.backend->add(x, y, 1);
        QCOMPARE(contents(*b.backend, x), (std::vector<float>{4.0f, 6.0f}));
        b.backend->free(x), b.backend->free(y);
    }

    // kvchat-cli generate --device cuda: exit 0, the fallback notice (or, on a GPU, nothing), and
    // the greedy tokens of --device cpu: all of them when the fallback computes on the CPU, the
    // first four on a GPU. Its fp16 weights and sums in another order make logits that differ from
    // the CPU's in the last digits (defaultModelMatchesTheCpu bounds them), and a greedy text goes
    // its own way at the first near tie (the full SmolLM2 on an H100: " Paris.\n\nThe" then
    // "answer" against "United").
    void cliGeneratesWithDeviceCuda() {
        const std::string model = resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(model))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        const QStringList common{"generate", "--model", QString::fromStdString(model), "--greedy", "-n", "12",
                                 "--threads", "2", "--json", "--prompt", "The capital of France is"};
        const test::CliRun cpu = test::run_cli(common + QStringList{"--device", "cpu"});
        QVERIFY2(cpu.code == 0, qPrintable(cpu.err));
        QVERIFY(!cpu.out.trimmed().isEmpty());
        QVERIFY2(!cpu.err.contains("CUDA"), qPrintable(cpu.err));
        const test::CliRun cuda = test::run_cli(common + QStringList{"--device", "cuda"});
        QVERIFY2(cuda.code == 0, qPrintable(cuda.err));
        if (!have_gpu()) {
            QVERIFY2(cuda.err.contains("kvchat-cli: CUDA device 0 is not usable: "), qPrintable(cuda.err));
            QVERIFY2(cuda.err.contains("; using the CPU\n"), qPrintable(cuda.err));
        } else {
            QVERIFY2(!cuda.err.contains("CUDA"), qPrintable(cuda.err));
        }
        auto tokens = [](const test::CliRun& r) {
            const QJsonArray a = QJsonDocument::fromJson(r.out.toUtf8()).object().value("tokens").toArray();
            std::vector<int> ids;
            for (const QJsonValue& v : a) ids.push_back(v.toInt());
            return ids;
        };
        const std::vector<int> want = tokens(cpu), got = tokens(cuda);
        QCOMPARE(want.size(), size_t(12));
        if (!have_gpu()) {
            QCOMPARE(got, want);
        } else {
            QCOMPARE(got.size(), want.size());
            QCOMPARE(std::vector<int>(got.begin(), got.begin() + 4), std::vector<int>(want.begin(), want.begin() + 4));
        }
    }

    // A library that cannot be loaded is a notice too, naming the file.
    void cliNamesAnUnloadableLibrary() {
        const std::string model = resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(model))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        qputenv("KVCHAT_CUDA_LIBRARY", "/nonexistent/libkvchat_cuda.so");
        const test::CliRun r = test::run_cli({"generate", "--model", QString::fromStdString(model), "--greedy", "-n", "2",
                                              "--threads", "2", "--device", "cuda:1", "--prompt", "Hello"});
        qunsetenv("KVCHAT_CUDA_LIBRARY");
        QVERIFY2(r.code == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains("CUDA device 1 is not usable: cannot load /nonexistent/libkvchat_cuda.so"), qPrintable(r.err));
        QVERIFY(!r.out.trimmed().isEmpty());
    }

    void cliRefusesABadDevice() {
        const test::CliRun r = test::run_cli({"generate", "--device", "gpu", "--prompt", "x"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--device must be cpu, cuda or cuda:N, got 'gpu'"), qPrintable(r.err));
    }

    // ---- the kernels against the CPU's (GPU only) ----

    void elementwiseKernelsMatch() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        const int64_t rows = 5, cols = 640;
        const auto a = random_floats(rows * cols, 1, 3.0f), b = random_floats(rows * cols, 2);
        auto run = [&](Backend& be, auto op) {
            Buffer x = filled(be, a, rows, cols), y = filled(be, b, rows, cols);
            op(be, x, y);
            auto out = contents(be, x);
            be.free(x), be.free(y);
            return out;
        };
        auto same = [&](auto op, const char* what) {
            const auto want = run(*cpu_, op), got = run(*gpu_, op);
            QVERIFY2(got == want, what);
        };
        same([&](Backend& be, Buffer& x, Buffer& y) { be.add(x, y, rows); }, "add");
        same([&](Backend& be, Buffer& x, Buffer& y) { be.gated(GatedActivation::GeluTanh, x, y, rows); }, "gelu");
        same([&](Backend& be, Buffer& x, Buffer&) { be.round_f16(x, rows, 0.125f); }, "round_f16");
        // SiLU and softcap use the GPU's expf/tanhf: within an ulp or two.
        for (int which = 0; which < 2; ++which) {
            auto op = [&](Backend& be, Buffer& x, Buffer& y) {
                if (which == 0)
                    be.gated(GatedActivation::Silu, x, y, rows);
                else
                    be.softcap(x, rows, 5.0f);
            };
            const auto want = run(*cpu_, op), got = run(*gpu_, op);
            QVERIFY2(relative_error(got, want) < 1e-6, which == 0 ? "silu" : "softcap");
        }
        // Normalization over heads of 64 (as q/k norms) and over whole rows, with norm weights
        // placed on each backend, and a bias the same way.
        std::vector<float> w = random_floats(cols, 3);
        for (int64_t width : {int64_t{64}, cols}) {
            WeightSet set;
            set.vectors.push_back(NormWeight{w.data(), width});
            auto op = [&](Backend& be, Buffer& x, Buffer&) {
                const auto placed = be.place_weights(set);
                be.rms_norm(x, rows, placed->vectors[0], 1e-6f, x);
            };
            const auto want = run(*cpu_, op), got = run(*gpu_, op);
            QVERIFY2(relative_error(got, want) < 1e-4, "rms_norm");
        }
        WeightSet bias;
        bias.vectors.push_back(NormWeight{w.data(), cols});
        same([&](Backend& be, Buffer& x, Buffer&) { be.add_bias(x, rows, be.place_weights(bias)->vectors[0]); }, "add_bias");
        // gather_rows
        const auto want = [&] {
            Buffer s = filled(*cpu_, a, rows, cols), d = cpu_->alloc(2, cols);
            cpu_->gather_rows(s, {4, 1}, d);
            auto v = contents(*cpu_, d);
            cpu_->free(s), cpu_->free(d);
            return v;
        }();
        Buffer s = filled(*gpu_, a, rows, cols), d = gpu_->alloc(2, cols);
        gpu_->gather_rows(s, {4, 1}, d);
        QVERIFY(contents(*gpu_, d) == want);
        gpu_->free(s), gpu_->free(d);
    }

    void matmulMatches_data() {
        QTest::addColumn<int>("type");
        QTest::newRow("f32") << static_cast<int>(TensorType::F32);
        QTest::newRow("f16") << static_cast<int>(TensorType::F16);
        QTest::newRow("q8_0") << static_cast<int>(TensorType::Q8_0);
        QTest::newRow("q4_1") << static_cast<int>(TensorType::Q4_1);  // SmolLM2's weights
        QTest::newRow("q5_0") << static_cast<int>(TensorType::Q5_0);
        QTest::newRow("q4_K") << static_cast<int>(TensorType::Q4_K);
        QTest::newRow("q6_K") << static_cast<int>(TensorType::Q6_K);
    }
    void matmulMatches() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        QFETCH(int, type);
        const auto t = static_cast<TensorType>(type);
        // Float matrices take a width that is no multiple of 8: the decode product's other path.
        const int64_t rows = 96, cols = t == TensorType::F32 || t == TensorType::F16 ? 516 : 512;
        const auto wf = random_floats(rows * cols, 7, 0.05f);
        std::vector<uint8_t> wq(row_bytes(t, cols) * rows);
        for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, wq.data() + r * row_bytes(t, cols), cols);
        WeightSet set;
        set.matrices.push_back(WeightMatrix{t, rows, cols, wq.data()});
        const auto on_cpu = cpu_->place_weights(set), on_gpu = gpu_->place_weights(set);
        // The GPU's copy is its own, in device memory; the CPU reads the host matrix in place,
        // except the types it interleaves once (interleaved_rows.h: a copy in host memory).
        QCOMPARE(on_gpu->matrices[0].place, MemoryPlace::Device);
        QVERIFY(on_gpu->matrices[0].placed.data != wq.data());
        QCOMPARE(on_cpu->matrices[0].place, MemoryPlace::Host);
        if (can_interleave(set.matrices[0])) {
            QCOMPARE(on_cpu->matrices[0].placed.layout, RowLayout::Interleaved16);
            QVERIFY(on_cpu->matrices[0].placed.data != wq.data());
        } else {
            QCOMPARE(on_cpu->matrices[0].placed.data, static_cast<const void*>(wq.data()));
        }
        // 1 to 4 tokens: one launch a product (gemv_f16); 9: cuBLAS.
        for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{9}}) {
            const auto x = random_floats(n * cols, 8);
            auto run = [&](Backend& be) {
                const PlacedMatrix& w = (&be == gpu_.get() ? on_gpu : on_cpu)->matrices[0];
                Buffer xb = filled(be, x, n, cols), yb = be.alloc(n, rows);
                be.matmul(w, xb, n, yb);
                auto v = contents(be, yb);
                be.free(xb), be.free(yb);
                return v;
            };
            const double e = relative_error(run(*gpu_), run(*cpu_));
            QVERIFY2(e < 1e-2, qPrintable(QString("n=%1: relative error %2").arg(n).arg(e)));
        }
    }

    // Weights are the backend's handles: the GPU refuses a matrix the CPU placed (host memory)
    // with a message rather than reading it, and its own copies stay usable by whoever holds them
    // after the backend that made them is gone (freed with them, not with the backend).
    void placedWeightsBelongToTheirBackend() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        const int64_t rows = 32, cols = 64;
        const auto wf = random_floats(rows * cols, 31);
        WeightSet set;
        set.matrices.push_back(WeightMatrix{TensorType::F32, rows, cols, wf.data()});
        set.vectors.push_back(NormWeight{wf.data(), cols});
        const auto on_cpu = cpu_->place_weights(set);
        Buffer x = filled(*gpu_, random_floats(cols, 32), 1, cols), y = gpu_->alloc(1, rows);
        bool refused = false;
        try {
            gpu_->matmul(on_cpu->matrices[0], x, 1, y);
        } catch (const Error& e) {
            refused = std::string(e.what()).find("placed on another backend") != std::string::npos;
        }
        QVERIFY(refused);
        refused = false;
        try {
            gpu_->rms_norm(x, 1, on_cpu->vectors[0], 1e-6f, x);
        } catch (const Error& e) {
            refused = std::string(e.what()).find("placed on another backend") != std::string::npos;
        }
        QVERIFY(refused);
        gpu_->free(x), gpu_->free(y);

        std::unique_ptr<PlacedWeights> outliving;
        {
            OpenedBackend second = open_backend(Device{Device::Kind::Cuda, 0}, 1);
            QVERIFY2(second.notice.empty(), second.notice.c_str());
            outliving = second.backend->place_weights(set);
            QCOMPARE(outliving->matrices.size(), size_t{1});
            QCOMPARE(outliving->vectors.size(), size_t{1});
            QCOMPARE(outliving->vectors[0].place, MemoryPlace::Device);
        }
        outliving.reset();  // the backend is gone: freeing must neither crash nor disturb this one
        Buffer a = filled(*gpu_, {1.0f, 2.0f}, 1, 2), b = filled(*gpu_, {3.0f, 4.0f}, 1, 2);
        gpu_->add(a, b, 1);
        QCOMPARE(contents(*gpu_, a), (std::vector<float>{4.0f, 6.0f}));
        gpu_->free(a), gpu_->free(b);
    }

    void ropeAndConversionsAreExact() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        const int heads = 4, hd = 64;
        // The GPU keeps a table of angles per RoPE, grown as positions come: a few positions (given
        // with the launch), more than 8 (uploaded), one past the table's rows (it grows), and one
        // past its limit (angles computed for the call).
        const std::vector<std::vector<int32_t>> calls{{0, 1, 7, 100, 1000, 30000},
                                                      {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                                      {70000},
                                                      {3, (1 << 20) + 5}};
        for (RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Interleaved}) {
            RopeSpec spec;
            spec.style = style;
            spec.dims = hd;
            spec.base = 1000000.0;
            for (const std::vector<int32_t>& pos : calls) {
                const int64_t n = static_cast<int64_t>(pos.size());
                const auto x = random_floats(n * heads * hd, 11);
                auto rotated = [&](Backend& be) {
                    Buffer b = filled(be, x, n, heads * hd);
                    be.rope(spec, b, pos.data(), n, heads, hd);
                    auto v = contents(be, b);
                    be.free(b);
                    return v;
                };
                QVERIFY2(rotated(*gpu_) == rotated(*cpu_), qPrintable(QString("%1 positions from %2").arg(n).arg(pos[0])));
            }
        }
        // The append's conversion into each dtype, read back through the backend's own download.
        const auto x = random_floats(1000, 12, 100.0f);
        for (KvDtype t : {KvDtype::F16, KvDtype::BF16, KvDtype::F32}) {
            auto stored = [&](Backend& be) {
                const size_t bytes = x.size() * kv_dtype_bytes(t);
                Buffer b = filled(be, x, 10, 100);
                auto mem = be.alloc_kv();
                mem->resize(bytes);
                be.kv_store(t, b, 10, mem->data());
                std::vector<uint8_t> out(bytes);
                be.kv_download(out.data(), mem->data(), bytes);
                be.free(b);
                return out;
            };
            QVERIFY2(stored(*gpu_) == stored(*cpu_), kv_dtype_name(t));
        }
        // KIVI blocks from residual records (a key row then a value row each) kept in each dtype.
        for (KvDtype t : {KvDtype::F16, KvDtype::F32})
            for (int nbits : {2, 4, 8}) {
                const KiviFormat f(nbits, 16, 64, 128);
                const auto kv = random_floats(static_cast<size_t>(16) * 256, 13);
                std::vector<uint8_t> records(kv.size() * kv_dtype_bytes(t));
                kv_store_row(t, kv.data(), records.data(), static_cast<int64_t>(kv.size()));
                auto block = [&](Backend& be) {
                    auto mem = be.alloc_kv();
                    mem->resize(records.size() + f.block_bytes);
                    be.kv_upload(mem->data(), records.data(), records.size());
                    be.kv_quantize(f, t, mem->data(), 11, mem->data() + records.size());
                    std::vector<uint8_t> out(f.block_bytes);
                    be.kv_download(out.data(), mem->data() + records.size(), f.block_bytes);
                    return out;
                };
                QVERIFY2(block(*gpu_) == block(*cpu_), qPrintable(QString("%1 nbits=%2").arg(kv_dtype_name(t)).arg(nbits)));
            }
        // Moves of cache memory: an overlapping copy within it, and the spill file's read and write.
        auto moved = [&](Backend& be) {
            std::vector<uint8_t> host(4096);
            for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7);
            auto mem = be.alloc_kv();
            mem->resize(8192);
            be.kv_upload(mem->data(), host.data(), host.size());
            be.kv_copy(mem->data() + 100, mem->data(), 4000);
            QTemporaryFile spill;
            if (!spill.open()) return std::vector<uint8_t>{};
            size_t written = 0;
            if (be.kv_write_file(spill.handle(), 0, mem->data(), 4096, &written) != 0 || written != 4096) return std::vector<uint8_t>{};
            // 6,000 bytes from a 4,096-byte file: the rest reads as zero.
            if (be.kv_read_file(spill.handle(), 0, mem->data() + 2048, 6000) != 0) return std::vector<uint8_t>{};
            // Bytes [8048, 8192) were never written: memory that grew holds whatever it held.
            std::vector<uint8_t> out(2048 + 6000);
            be.kv_download(out.data(), mem->data(), out.size());
            return out;
        };
        const auto want_moved = moved(*cpu_);
        QVERIFY(!want_moved.empty());
        QVERIFY(moved(*gpu_) == want_moved);
    }

    void attentionMatches_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("window");
        QTest::addColumn<int>("sinks");
        QTest::addColumn<float>("softcap");
        QTest::addColumn<int>("nbits");
        QTest::addColumn<bool>("f16_probs");
        QTest::newRow("f16 decode") << 0 << 1 << 0 << 0 << 0.0f << 0 << false;
        QTest::newRow("f16 prefill f16 probs") << 0 << 7 << 0 << 0 << 0.0f << 0 << true;
        QTest::newRow("bf16 window") << 1 << 5 << 40 << 0 << 0.0f << 0 << false;
        QTest::newRow("f32 sinks") << 2 << 3 << 40 << 4 << 0.0f << 0 << false;
        QTest::newRow("f32 softcap") << 2 << 4 << 0 << 0 << 50.0f << 0 << false;
        QTest::newRow("kivi 4") << 0 << 3 << 0 << 0 << 0.0f << 4 << false;
        QTest::newRow("kivi 2 window") << 0 << 2 << 50 << 0 << 0.0f << 2 << false;
        QTest::newRow("kivi 8") << 2 << 1 << 0 << 0 << 0.0f << 8 << false;
    }
    void attentionMatches() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        QFETCH(int, dtype);
        QFETCH(int, n_q);
        QFETCH(int, window);
        QFETCH(int, sinks);
        QFETCH(float, softcap);
        QFETCH(int, nbits);
        QFETCH(bool, f16_probs);
        const auto dt = static_cast<KvDtype>(dtype);
        AttentionShape s;
        s.n_head = 4, s.n_head_kv = 1, s.head_dim = 64, s.scale = f16_probs ? 1.0f : 0.125f, s.softcap = softcap;
        const int kv_dim = s.n_head_kv * s.head_dim, n_slots = 90, group = 16;
        const int64_t stride = 2 * kv_dim;
        // Slots: keys and values interleaved per slot as the cache layers keep them, in the layer's
        // dtype; slot i holds position i (the last few empty).
        const auto kvf = random_floats(static_cast<size_t>(n_slots) * stride, 21);
        std::vector<uint8_t> slot_bytes(kvf.size() * kv_dtype_bytes(dt));
        kv_store_row(dt, kvf.data(), slot_bytes.data(), static_cast<int64_t>(kvf.size()));
        std::vector<int32_t> spos(n_slots);
        for (int i = 0; i < n_slots; ++i) spos[i] = i < n_slots - 3 ? i : INT32_MAX;
        // Optional KIVI blocks before the slots: positions [first_blocks, first_blocks + 3*group).
        const int n_blocks = nbits ? 3 : 0;
        KiviFormat f;
        std::vector<uint8_t> blocks;
        if (nbits) {
            f = KiviFormat(nbits, group, 64, kv_dim);
            blocks.resize(static_cast<size_t>(n_blocks) * f.block_bytes);
            const auto bkv = random_floats(static_cast<size_t>(n_blocks) * group * stride, 22);
            for (int b = 0; b < n_blocks; ++b)
                kivi_quantize_block(f, bkv.data() + b * group * stride, bkv.data() + b * group * stride + kv_dim, stride, group,
                                    blocks.data() + b * f.block_bytes);
            for (int32_t& p : spos)
                if (p != INT32_MAX) p += n_blocks * group;
        }
        const int32_t last = n_slots - 4 + n_blocks * group;
        std::vector<int32_t> qpos(n_q);
        for (int t = 0; t < n_q; ++t) qpos[t] = last - (n_q - 1 - t);
        const auto q = random_floats(static_cast<size_t>(n_q) * s.n_head * s.head_dim, 23);
        const auto qs = random_floats(q.size(), 24);
        // Each backend attends over its own memory: queries and output in Buffers, slots and
        // blocks in KV memory, positions on the host.
        auto attend_on = [&](Backend& be) {
            Buffer qb = filled(be, q, n_q, s.n_head * s.head_dim), qsb = filled(be, qs, n_q, s.n_head * s.head_dim);
            Buffer out = be.alloc(n_q, s.n_head * s.head_dim);
            const auto slots = kv_filled(be, slot_bytes);
            const auto blks = kv_filled(be, blocks);
            AttentionInput in;
            in.q = qb.data;
            in.q_sink = sinks ? qsb.data : nullptr;
            in.qpos = qpos.data();
            in.n_q = n_q;
            in.window = window;
            in.sink_end = sinks;
            in.dtype = dt;
            in.f16_probs = f16_probs;
            if (nbits) {
                in.kivi = &f;
                for (int b = 0; b < n_blocks; ++b) in.blocks.push_back({blks->data() + b * f.block_bytes, b * group, group});
            }
            in.slots.push_back({slots->data(), slots->data() + kv_dim * kv_dtype_bytes(dt), spos.data(), n_slots, stride});
            be.attend(in, s, out);
            auto v = contents(be, out);
            be.free(qb), be.free(qsb), be.free(out);
            return v;
        };
        const std::vector<float> want = attend_on(*cpu_), got = attend_on(*gpu_);
        const double e = relative_error(got, want);
        QVERIFY2(e < 1e-4, qPrintable(QString("relative error %1").arg(e)));
    }

    // A full GPU (the test hook KVCHAT_CUDA_CACHE_LIMIT caps what caches may take): growing is
    // std::bad_alloc with the memory kept, and a chat turn moves its cache to `offloaded` (whose
    // slow tier is host memory), says so, and answers as the same GPU does with room for the
    // cache (the same kernels over the same keys and values; the CPU's answer may part from the
    // GPU's at a near tie, see cliGeneratesWithDeviceCuda). The cap for the turn is half
    // the KV memory a dynamic cache takes for it, measured through a counting CPU backend (the same
    // cache code asks both backends for the same memory): too little for the dynamic cache, enough
    // for the offloaded one's two layer buffers. test_cache_backend checks the same on the CPU.
    void fullGpuFallsBackToOffloaded() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        {
            qputenv("KVCHAT_CUDA_CACHE_LIMIT", "65536");
            OpenedBackend capped = open_backend(Device{Device::Kind::Cuda, 0}, 2);
            qunsetenv("KVCHAT_CUDA_CACHE_LIMIT");
            QVERIFY2(capped.notice.empty(), capped.notice.c_str());
            auto mem = kv_filled(*capped.backend, std::vector<uint8_t>(60000, 0x5a));
            bool threw = false;
            try {
                mem->resize(70000);
            } catch (const std::bad_alloc&) {
                threw = true;
            }
            QVERIFY(threw);
            uint8_t last = 0;
            capped.backend->kv_download(&last, mem->data() + 59999, 1);
            QCOMPARE(last, uint8_t(0x5a));
        }
        const std::string path = resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(path))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        auto model = Model::load(path);
        TurnOptions o;
        o.generation.max_new_tokens = 8;
        o.generation.sampling.greedy = true;
        o.fallback_spec = "offloaded";
        test::CountingBackend counting(2);
        Conversation on_cpu(*model, counting, ChatTemplate::for_model(*model), "dynamic");
        QVERIFY(!on_cpu.send("Name a colour.", o).text.empty());
        const int64_t need = counting.kv_use->peak;
        QVERIFY(need > 0);
        Conversation roomy(*model, *gpu_, ChatTemplate::for_model(*model), "dynamic");
        const TurnResult uncapped = roomy.send("Name a colour.", o);
        QVERIFY(uncapped.notices.empty());
        const std::string want = uncapped.text;
        QVERIFY(!want.empty());
        qputenv("KVCHAT_CUDA_CACHE_LIMIT", QByteArray::number(static_cast<qlonglong>(need / 2)));
        OpenedBackend capped = open_backend(Device{Device::Kind::Cuda, 0}, 2);
        qunsetenv("KVCHAT_CUDA_CACHE_LIMIT");
        QVERIFY2(capped.notice.empty(), capped.notice.c_str());
        Conversation on_gpu(*model, *capped.backend, ChatTemplate::for_model(*model), "dynamic");
        const TurnResult r = on_gpu.send("Name a colour.", o);
        QVERIFY(!r.notices.empty());
        QVERIFY2(r.notices.front().find("could not grow (out of memory); the cache moved to offloaded") != std::string::npos,
                 r.notices.front().c_str());
        QCOMPARE(r.text, want);
    }

    // ---- the default model: the CPU parity suite on the GPU ----

    void defaultModelMatchesTheCpu_data() {
        QTest::addColumn<QString>("spec");
        for (const char* s : {"dynamic", "static:max_len=64", "offloaded", "offloaded_static:max_len=64", "hybrid",
                              "sliding_window:window=600", "sink:window=600,sinks=4", "dynamic:dtype=f32"})
            QTest::newRow(s) << s;
    }
    void defaultModelMatchesTheCpu() {
        if (!have_gpu()) QSKIP(qPrintable("no CUDA device: " + QString::fromStdString(why_not_)));
        QFETCH(QString, spec);
        const std::string path = resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(path))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        static std::unique_ptr<Model> model = Model::load(path);
        const auto prompt = model->tokenizer().encode("The three primary colours of light are red, green and", true);
        GenerationConfig g;
        g.max_new_tokens = 12;
        g.sampling.greedy = true;
        g.stop_at_eos = false;
        g.prefill_chunk = 7;
        auto run = [&](Backend& be, std::vector<float>& logits, CacheTelemetry& tel) {
            auto c = model->make_cache(be, spec.toStdString());
            Generator gen(*model, be);
            auto tokens = gen.generate(*c, prompt, g).tokens;
            const int32_t next = tokens.back();
            model->forward(be, *c, &next, 1, Logits::Last, logits);
            tel = c->telemetry();
            return tokens;
        };
        std::vector<float> lc, lg;
        CacheTelemetry tc, tg;
        const auto want = run(*cpu_, lc, tc);
        const auto got = run(*gpu_, lg, tg);
        QCOMPARE(got, want);
        const double e = relative_error(lg, lc);
        QVERIFY2(e < 0.02, qPrintable(QString("logits: relative error %1").arg(e)));
        // Telemetry describes the cache, not the device: equal, including the bytes an offloaded
        // cache moved (the predicted sizes the CPU's suite checks).
        QCOMPARE(tg.layers.size(), tc.layers.size());
        for (size_t i = 0; i < tc.layers.size(); ++i) {
            const LayerTelemetry &a = tc.layers[i], &b = tg.layers[i];
            QCOMPARE(b.storage, a.storage);
            QCOMPARE(b.tokens_held, a.tokens_held);
            QCOMPARE(b.bytes_fast, a.bytes_fast);
            QCOMPARE(b.bytes_slow, a.bytes_slow);
            QCOMPARE(b.bytes_reserved, a.bytes_reserved);
            QCOMPARE(b.evicted, a.evicted);
            QCOMPARE(b.moved_in_total, a.moved_in_total);
            QCOMPARE(b.moved_out_total, a.moved_out_total);
        }
    }
};

QTEST_GUILESS_MAIN(TestCudaBackend)
#include "test_cuda_backend.moc"
