// Q4_1 products against a plain statement of llama.cpp's arithmetic for them (quantize_row_q8_1,
// then ggml_vec_dot_q4_1_q8_1 of its AVX2/AVX-512 build), bit for bit: every token count (llama.cpp
// has one kernel for all), row counts that are not a multiple of the kernel's 4 or 16, 1-3
// threads, every SIMD level this CPU runs. The model-level check is test_tiny_archs (llama.cpp's
// own logits on Q4_1 models).
#include "engine/compute/matmul.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"

#include <QtTest>
#include <cmath>
#include <cstring>
#include <random>

using namespace kvchat;

namespace {

struct Q8_1Row {
    std::vector<int8_t> q;
    std::vector<float> d, s;  // per block: fp16(max / 127) and fp16(d * sum(q)), as floats
};

Q8_1Row quantize_q8_1(const float* x, int64_t cols) {
    Q8_1Row r;
    r.q.resize(size_t(cols));
    for (int64_t b = 0; b < cols / 32; ++b) {
        float max = 0.0f;
        for (int i = 0; i < 32; ++i) max = std::max(max, std::fabs(x[b * 32 + i]));
        const float d = max / 127.0f;
        const float id = max != 0.0f ? 127.0f / max : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const int q = int(std::nearbyint(x[b * 32 + i] * id));  // ties to even
            r.q[size_t(b * 32 + i)] = int8_t(q);
            sum += q;
        }
        r.d.push_back(fp16_to_fp32(fp32_to_fp16(d)));
        r.s.push_back(fp16_to_fp32(fp32_to_fp16(d * float(sum))));
    }
    return r;
}

// Eight lanes of four columns each per block, scaled and accumulated in block order; the minimum's
// part in one float beside; hsum_float_8's tree.
float dot(const BlockQ4_1* w, const Q8_1Row& x, int64_t cols) {
    float acc[8] = {}, mins = 0.0f;
    for (int64_t b = 0; b < cols / 32; ++b) {
        const float dw = fp16_to_fp32(w[b].d), mw = fp16_to_fp32(w[b].m);
        mins = std::fma(mw, x.s[size_t(b)], mins);
        for (int l = 0; l < 8; ++l) {
            int s = 0;
            for (int k = 0; k < 4; ++k) {
                const int c = 4 * l + k;  // column within the block
                const int nib = c < 16 ? (w[b].qs[c] & 15) : (w[b].qs[c - 16] >> 4);
                s += nib * x.q[size_t(b * 32 + c)];
            }
            acc[l] = std::fma(dw * x.d[size_t(b)], float(s), acc[l]);
        }
    }
    return (((acc[4] + acc[0]) + (acc[6] + acc[2])) + ((acc[5] + acc[1]) + (acc[7] + acc[3]))) + mins;
}

bool level_supported(const char* level) {
    try {
        force_simd_level(level);
        force_simd_level(nullptr);
        return true;
    } catch (...) {
        return false;
    }
}

}  // namespace

class TestQ4_1Product : public QObject {
    Q_OBJECT
private slots:
    void matchesLlamaCppArithmetic_data() {
        QTest::addColumn<QString>("level");
        for (const char* l : {"avx2", "avx512-vnni", "amx"}) QTest::newRow(l) << QString(l);
    }
    void matchesLlamaCppArithmetic() {
        QFETCH(QString, level);
        if (!level_supported(level.toLatin1().constData())) QSKIP("CPU cannot run this level");
        force_simd_level(level.toLatin1().constData());
        const int64_t cols = 576, rows = 37;  // SmolLM2's width
        std::mt19937 rng(5);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> wf(size_t(rows * cols));
        for (float& v : wf) v = dist(rng) * 0.05f;
        const size_t rb = row_bytes(TensorType::Q4_1, cols);
        std::vector<uint8_t> wq(rb * size_t(rows));
        for (int64_t r = 0; r < rows; ++r) quantize_row(TensorType::Q4_1, wf.data() + r * cols, wq.data() + r * rb, cols);
        const WeightMatrix w{TensorType::Q4_1, rows, cols, wq.data()};
        for (int64_t n_tokens : {1, 2, 3, 5, 17, 64}) {
            std::vector<float> x(size_t(n_tokens * cols));
            for (float& v : x) v = dist(rng);
            x[7] = 0.0f;  // a zero and a block of zeros: max 0 gives q = 0, d = 0
            std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
            for (int threads : {1, 2, 3}) {
                ThreadPool pool(threads);
                std::vector<float> y(size_t(n_tokens * rows));
                matmul(w, x.data(), n_tokens, y.data(), pool);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    const Q8_1Row xq = quantize_q8_1(x.data() + t * cols, cols);
                    for (int64_t r = 0; r < rows; ++r) {
                        const float want = dot(reinterpret_cast<const BlockQ4_1*>(wq.data() + r * rb), xq, cols);
                        const float got = y[size_t(t * rows + r)];
                        QVERIFY2(std::memcmp(&got, &want, sizeof got) == 0,
                                 qPrintable(QString("tokens %1 threads %2 token %3 row %4: %5 vs %6")
                                                .arg(n_tokens).arg(threads).arg(t).arg(r)
                                                .arg(double(got), 0, 'g', 9).arg(double(want), 0, 'g', 9)));
                    }
                }
            }
        }
        force_simd_level(nullptr);
    }
};

QTEST_GUILESS_MAIN(TestQ4_1Product)
#include "test_q4_1_product.moc"
