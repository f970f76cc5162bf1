// matmul and weight_row against a naive double-precision product of the dequantized weights.
//
// Tolerance. The integer paths quantize each activation block to int8 (q = round(x * 127 /
// max|x|)), so an element's error is at most max|x_block| / 254 and the product's error at most
// sum_c |w_c| * max|x_block(c)| / 254: the test checks that bound (with 5% slack for the fp16
// and fp32 rounding of scales) plus fp32 accumulation slack, and separately that the error stays
// under 1e-2 of sum_c |w_c| * |x_c| for activations of even magnitude. Float weights are
// multiplied in fp32 without quantizing x: 1e-5 of the |w|.|x| norm.
#include "engine/compute/matmul.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace kvchat;

Q_DECLARE_METATYPE(kvchat::TensorType)

namespace {

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
                                TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                                TensorType::Q8_1, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K};

bool is_float(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

// The activation block the kernels quantize x with: Q8_K (256) for K-quant weights, else Q8_0.
int64_t activation_block(TensorType t) { return traits(t).block_elems == 256 ? 256 : 32; }

struct Weights {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    std::vector<float> dequantized;  // rows x cols: what the kernels must multiply by
    WeightMatrix matrix() const { return {type, rows, cols, data.data()}; }
};

Weights make_weights(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> row_scale(0.05f, 2.0f);
    Weights w{t, rows, cols, std::vector<uint8_t>(row_bytes(t, cols) * size_t(rows)), std::vector<float>(size_t(rows * cols))};
    std::vector<float> src(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float s = row_scale(rng);
        for (auto& v : src) v = s * normal(rng);
        uint8_t* row = w.data.data() + size_t(r) * row_bytes(t, cols);
        quantize_row(t, src.data(), row, cols);
        dequantize_row(t, row, w.dequantized.data() + r * cols, cols);
    }
    return w;
}

// Activations with a mix of scales between blocks, so block-wise quantization matters.
std::vector<float> make_activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_tokens * cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t c = 0; c < cols; ++c) {
            const float scale = ((c / 32) % 3 == 0) ? 4.0f : ((c / 32) % 3 == 1 ? 0.25f : 1.0f);
            x[size_t(t * cols + c)] = scale * normal(rng);
        }
    }
    return x;
}

struct Check {
    double worst_excess = 0;  // max over outputs of error / bound; must stay <= 1
    double worst_relative = 0;  // max over outputs of error / (|w|.|x|)
};

Check compare(const Weights& w, const std::vector<float>& x, int64_t n_tokens, const std::vector<float>& y) {
    Check c;
    const int64_t block = activation_block(w.type);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x.data() + t * w.cols;
        std::vector<double> block_max(size_t(w.cols / block + 1), 0.0);
        for (int64_t k = 0; k < w.cols; ++k) block_max[size_t(k / block)] = std::max(block_max[size_t(k / block)], std::fabs(double(xt[k])));
        for (int64_t r = 0; r < w.rows; ++r) {
            const float* wr = w.dequantized.data() + r * w.cols;
            double ref = 0, norm = 0, quant_bound = 0;
            for (int64_t k = 0; k < w.cols; ++k) {
                ref += double(wr[k]) * double(xt[k]);
                norm += std::fabs(double(wr[k]) * double(xt[k]));
                quant_bound += std::fabs(double(wr[k])) * block_max[size_t(k / block)] / 254.0;
            }
            const double bound = is_float(w.type) ? 1e-5 * norm + 1e-30 : 1.05 * quant_bound + 1e-5 * norm + 1e-30;
            const double err = std::fabs(double(y[size_t(t * w.rows + r)]) - ref);
            c.worst_excess = std::max(c.worst_excess, err / bound);
            if (norm > 0) c.worst_relative = std::max(c.worst_relative, err / norm);
        }
    }
    return c;
}

class SimdLevelScope {
public:
    explicit SimdLevelScope(const char* level) { force_simd_level(level); }
    ~SimdLevelScope() { force_simd_level(nullptr); }
};

bool level_supported(const char* level) {
    try {
        SimdLevelScope scope(level);
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace

class TestMatmul : public QObject {
    Q_OBJECT
private slots:
    void matchesReference_data() {
        QTest::addColumn<TensorType>("type");
        QTest::addColumn<QString>("level");
        for (const char* level : {"avx2", "avx512-vnni", "amx"}) {
            for (TensorType t : kAllTypes) {
                QTest::newRow(qPrintable(QString("%1/%2").arg(QString::fromLatin1(traits(t).name.data(), int(traits(t).name.size())), level)))
                    << t << QString(level);
            }
        }
    }

    // Every type, both SIMD levels, odd row counts (not a multiple of the 16-row panels or the
    // 4-row float tiles), token counts around the tile sizes, 1-3 threads.
    void matchesReference() {
        QFETCH(TensorType, type);
        QFETCH(QString, level);
        if (!level_supported(level.toLatin1().constData())) QSKIP("CPU cannot run this level");
        SimdLevelScope scope(level.toLatin1().constData());
        QCOMPARE(QString(simd_level()), level);

        const int64_t be = traits(type).block_elems;
        // Float types: columns that are not a multiple of the 8-float vectors.
        const int64_t cols = be == 1 ? 75 : (be == 256 ? 512 : 160);
        for (int64_t rows : {int64_t(1), int64_t(37), int64_t(50)}) {
            const Weights w = make_weights(type, rows, cols, uint32_t(rows * 1000 + int64_t(type)));
            for (int64_t n_tokens : {1, 2, 3, 5, 8, 17, 64}) {
                const std::vector<float> x = make_activations(n_tokens, cols, uint32_t(n_tokens + 7));
                for (int threads : {1, 2, 3}) {
                    ThreadPool pool(threads);
                    std::vector<float> y(size_t(n_tokens * rows), std::nanf(""));
                    matmul(w.matrix(), x.data(), n_tokens, y.data(), pool);
                    const Check c = compare(w, x, n_tokens, y);
                    const QByteArray where = QString("rows %1 tokens %2 threads %3: error/bound %4, relative %5")
                                                 .arg(rows).arg(n_tokens).arg(threads).arg(c.worst_excess).arg(c.worst_relative)
                                                 .toLatin1();
                    QVERIFY2(c.worst_excess <= 1.0, where.constData());
                    QVERIFY2(c.worst_relative < (is_float(type) ? 1e-5 : 1e-2), where.constData());
                }
            }
        }
    }

    // The model's own shapes at one token and a prefill-sized batch, on the default SIMD level.
    void modelShapes_data() {
        QTest::addColumn<TensorType>("type");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::newRow("attn_q q5_0") << TensorType::Q5_0 << 1024 << 640;
        QTest::newRow("attn_v q8_0") << TensorType::Q8_0 << 256 << 640;
        QTest::newRow("attn_output q4_K") << TensorType::Q4_K << 640 << 1024;
        QTest::newRow("ffn_down q6_K") << TensorType::Q6_K << 640 << 2048;
        QTest::newRow("f32") << TensorType::F32 << 640 << 640;
    }
    void modelShapes() {
        QFETCH(TensorType, type);
        QFETCH(int, rows);
        QFETCH(int, cols);
        const Weights w = make_weights(type, rows, cols, 99);
        ThreadPool pool(2);
        for (int64_t n_tokens : {1, 40}) {
            const std::vector<float> x = make_activations(n_tokens, cols, 5);
            std::vector<float> y(static_cast<size_t>(n_tokens * rows));
            matmul(w.matrix(), x.data(), n_tokens, y.data(), pool);
            const Check c = compare(w, x, n_tokens, y);
            QVERIFY2(c.worst_excess <= 1.0, qPrintable(QString("tokens %1: error/bound %2").arg(n_tokens).arg(c.worst_excess)));
        }
    }

    // The levels must agree to within float rounding: all multiply the same int8 values (1 token
    // takes the fused kernels, 13 and 40 the panels or AMX tiles).
    void simdLevelsAgree() {
        if (!level_supported("avx512-vnni")) QSKIP("CPU lacks AVX-512 VNNI");
        const char* high = level_supported("amx") ? "amx" : "avx512-vnni";
        ThreadPool pool(2);
        for (TensorType t : kAllTypes) {
            const int64_t cols = traits(t).block_elems == 1 ? 96 : 256;
            const Weights w = make_weights(t, 21, cols, 3);
            for (int64_t n_tokens : {1, 13, 40}) {
                const std::vector<float> x = make_activations(n_tokens, cols, 11);
                std::vector<float> y2(static_cast<size_t>(n_tokens * 21)), y5(size_t(n_tokens * 21));
                {
                    SimdLevelScope scope("avx2");
                    matmul(w.matrix(), x.data(), n_tokens, y2.data(), pool);
                }
                {
                    SimdLevelScope scope(high);
                    matmul(w.matrix(), x.data(), n_tokens, y5.data(), pool);
                }
                for (size_t i = 0; i < y2.size(); ++i) {
                    const double scale = std::max(1.0, std::fabs(double(y2[i])));
                    QVERIFY2(std::fabs(double(y2[i]) - double(y5[i])) <= 1e-4 * scale,
                             qPrintable(QString("%1 tokens %2 output %3: %4 vs %5").arg(traits(t).name.data()).arg(n_tokens).arg(i).arg(y2[i]).arg(y5[i])));
                }
            }
        }
    }

    void weightRowEqualsDequantizeRow() {
        for (TensorType t : kAllTypes) {
            const int64_t cols = traits(t).block_elems == 1 ? 33 : 256;
            const Weights w = make_weights(t, 5, cols, 17);
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = 0; r < w.rows; ++r) {
                weight_row(w.matrix(), r, row.data());
                QVERIFY2(std::memcmp(row.data(), w.dequantized.data() + r * cols, sizeof(float) * size_t(cols)) == 0,
                         traits(t).name.data());
            }
        }
        const Weights w = make_weights(TensorType::Q8_0, 2, 32, 1);
        std::vector<float> row(32);
        QVERIFY_THROWS_EXCEPTION(Error, weight_row(w.matrix(), 2, row.data()));
    }

    void rejectsPartialBlocks() {
        const Weights w = make_weights(TensorType::Q4_K, 2, 256, 1);
        ThreadPool pool(1);
        std::vector<float> x(300), y(2);
        QVERIFY_THROWS_EXCEPTION(Error, matmul({TensorType::Q4_K, 2, 300, w.data.data()}, x.data(), 1, y.data(), pool));
    }

    void simdLevelCanBeForced() {
        const QString automatic = simd_level();
        QVERIFY(automatic == "avx2" || automatic == "avx512-vnni" || automatic == "amx");
        {
            SimdLevelScope scope("avx2");
            QCOMPARE(QString(simd_level()), QString("avx2"));
        }
        QCOMPARE(QString(simd_level()), automatic);
        QVERIFY_THROWS_EXCEPTION(Error, force_simd_level("sse9"));
        // A level above what the CPU runs is refused.
        if (automatic == "avx2") QVERIFY_THROWS_EXCEPTION(Error, force_simd_level("avx512-vnni"));
    }
};

QTEST_GUILESS_MAIN(TestMatmul)
#include "test_matmul.moc"
