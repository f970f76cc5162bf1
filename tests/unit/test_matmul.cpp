// matmul and weight_row against a naive double-precision product of the dequantized weights.
//
// Tolerance. The integer paths quantize each activation block to int8 (q = round(x * 127 /
// max|x|)), so an element's error is at most max|x_block| / 254 and the product's error at most
// sum_c |w_c| * max|x_block(c)| / 254: the test checks that bound (with 5% slack for the fp16
// and fp32 rounding of scales) plus fp32 accumulation slack, and separately that the error stays
// under 1e-2 of sum_c |w_c| * |x_c| for activations of even magnitude. Float weights are
// multiplied in fp32 without quantizing x: 1e-5 of the |w|.|x| norm.
#include "engine/compute/interleaved_rows.h"
#include "engine/compute/matmul.h"
#include "engine/compute/matmul_kernels.h"
#include "engine/compute/simd_choices.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <QtTest>

#include <cmath>
#include <algorithm>
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

// --- llama.cpp's order, scalar -----------------------------------------------------------------
// An independent, plain statement of what llama.cpp's CPU backend computes for the four types a
// Q4_K_M GGUF holds (engine/compute/matmul_kernels.h describes it): matmul must equal it bit for
// bit at every SIMD level, token count and thread count.

struct QuantizedRow {
    std::vector<int32_t> q;     // cols
    std::vector<float> d;       // per block
    std::vector<int32_t> sum16;  // per 16 columns
};

// quantize_row_q8_0 (block 32) or quantize_row_q8_K (block 256).
QuantizedRow quantize_like_llama(const float* x, int64_t cols, int64_t block) {
    QuantizedRow r{std::vector<int32_t>(size_t(cols)), std::vector<float>(size_t(cols / block)), std::vector<int32_t>(size_t(cols / 16))};
    for (int64_t b = 0; b < cols / block; ++b) {
        float m = 0.0f;
        for (int64_t i = 0; i < block; ++i) m = std::max(m, std::fabs(x[b * block + i]));
        const float inv = m > 0.0f ? 127.0f / m : 0.0f;
        r.d[size_t(b)] = block == 32 ? fp16_to_fp32(fp32_to_fp16(m / 127.0f)) : (m > 0.0f ? 1.0f / inv : 0.0f);
        for (int64_t i = 0; i < block; ++i) {
            const float v = x[b * block + i] * inv;
            r.q[size_t(b * block + i)] = int32_t(std::nearbyint(v));
        }
    }
    for (int64_t i = 0; i < cols; ++i) r.sum16[size_t(i / 16)] += r.q[size_t(i)];
    return r;
}

// ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)): hsum_float_8.
float hsum8_like_llama(const float* a) {
    const float h0 = a[4] + a[0], h1 = a[5] + a[1], h2 = a[6] + a[2], h3 = a[7] + a[3];
    return (h0 + h2) + (h1 + h3);
}

// Signed weight values of a Q5_0 / Q8_0 block.
void block32_values(TensorType t, const uint8_t* blk, int32_t* v, float& d) {
    if (t == TensorType::Q8_0) {
        BlockQ8_0 b;
        std::memcpy(&b, blk, sizeof b);
        for (int j = 0; j < 32; ++j) v[j] = b.qs[j];
        d = fp16_to_fp32(b.d);
    } else {
        BlockQ5_0 b;
        std::memcpy(&b, blk, sizeof b);
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        for (int j = 0; j < 16; ++j) {
            v[j] = int32_t((b.qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16;
            v[j + 16] = int32_t((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
        }
        d = fp16_to_fp32(b.d);
    }
}

float dot_like_llama(TensorType t, const uint8_t* row, int64_t cols, const QuantizedRow& x, int64_t token, int64_t n_tokens) {
    if (t == TensorType::Q5_0 || t == TensorType::Q8_0) {
        float acc[8] = {};
        const size_t bb = row_bytes(t, 32);
        for (int64_t b = 0; b < cols / 32; ++b) {
            int32_t v[32];
            float dw;
            block32_values(t, row + b * bb, v, dw);
            const float d = dw * x.d[size_t(b)];
            for (int l = 0; l < 8; ++l) {
                int32_t s = 0;
                for (int i = 0; i < 4; ++i) s += v[4 * l + i] * x.q[size_t(32 * b + 4 * l + i)];
                acc[l] = std::fma(d, float(s), acc[l]);
            }
        }
        return hsum8_like_llama(acc);
    }
    if (t == TensorType::Q4_K) {
        const bool gemm = token < n_tokens - n_tokens % 4;
        float acc = 0.0f, acc_min = 0.0f;
        for (int64_t b = 0; b < cols / 256; ++b) {
            BlockQ4_K blk;
            std::memcpy(&blk, row + b * sizeof blk, sizeof blk);
            int32_t S[4] = {}, M[4] = {};
            for (int j = 0; j < 8; ++j) {
                uint8_t sc, mn;
                get_scale_min(j, blk.scales, sc, mn);
                int32_t dot = 0, xsum = 0;
                for (int l = 0; l < 32; ++l) {
                    const uint8_t q = blk.qs[32 * (j / 2) + l];
                    const int32_t u = j % 2 == 0 ? (q & 15) : (q >> 4);
                    const int32_t xv = x.q[size_t(256 * b + 32 * j + l)];
                    dot += u * xv;
                    xsum += xv;
                }
                S[j / 2] += sc * dot;
                M[j / 2] += mn * xsum;
            }
            const float dx = x.d[size_t(b)];
            const float d = fp16_to_fp32(blk.d) * dx, dmin = fp16_to_fp32(blk.dmin) * dx;
            if (gemm) {
                for (int p = 0; p < 4; ++p) acc = std::fma(float(S[p]), d, acc), acc_min = std::fma(float(M[p]), dmin, acc_min);
            } else {
                acc = std::fma(float(S[0] + S[1] + S[2] + S[3]), d, acc);
                acc_min = std::fma(float(M[0] + M[1] + M[2] + M[3]), dmin, acc_min);
            }
        }
        return acc - acc_min;
    }
    // Q6_K
    const bool tiled = n_tokens >= 8;
    float lanes[8] = {}, acc = 0.0f;
    for (int64_t b = 0; b < cols / 256; ++b) {
        BlockQ6_K blk;
        std::memcpy(&blk, row + b * sizeof blk, sizeof blk);
        int32_t u[256];
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; ++l) {
                const uint8_t qh = blk.qh[32 * h + l];
                u[128 * h + l] = (blk.ql[64 * h + l] & 15) | ((qh & 3) << 4);
                u[128 * h + l + 32] = (blk.ql[64 * h + l + 32] & 15) | (((qh >> 2) & 3) << 4);
                u[128 * h + l + 64] = (blk.ql[64 * h + l] >> 4) | (((qh >> 4) & 3) << 4);
                u[128 * h + l + 96] = (blk.ql[64 * h + l + 32] >> 4) | (((qh >> 6) & 3) << 4);
            }
        const int32_t* xq = x.q.data() + 256 * b;
        const float dw = fp16_to_fp32(blk.d), dx = x.d[size_t(b)];
        if (tiled) {
            int32_t S = 0;
            for (int e = 0; e < 256; ++e) S += blk.scales[e / 16] * (u[e] - 32) * xq[e];
            acc = std::fma(float(S) * dw, dx, acc);
        } else {
            const int32_t* s16 = x.sum16.data() + 16 * b;
            for (int l = 0; l < 8; ++l) {
                int32_t lane = 0;
                for (int c = 0; c < 8; ++c) {
                    int32_t dot = 0;
                    for (int i = 0; i < 4; ++i) dot += u[32 * c + 4 * l + i] * xq[32 * c + 4 * l + i];
                    lane += blk.scales[(32 * c + 4 * l) / 16] * dot;
                }
                lane -= 32 * (s16[2 * l] * blk.scales[2 * l] + s16[2 * l + 1] * blk.scales[2 * l + 1]);
                lanes[l] = std::fma(dx * dw, float(lane), lanes[l]);
            }
        }
    }
    return tiled ? acc : hsum8_like_llama(lanes);
}

// A data-driven case's rows: (type, level) for every SIMD level and each of `types`, named
// "TYPE/LEVEL".
template <class Types>
void add_type_level_rows(const Types& types) {
    QTest::addColumn<TensorType>("type");
    QTest::addColumn<QString>("level");
    for (const char* level : {"avx2", "avx512-vnni", "amx"})
        for (TensorType t : types)
            QTest::newRow(qPrintable(QString("%1/%2").arg(QString::fromLatin1(traits(t).name.data(), int(traits(t).name.size())), level)))
                << t << QString(level);
}

}  // namespace

class TestMatmul : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        // The automatic levels are measured on first use and kept in the cache directory: keep
        // this test's file out of the user's.
        QVERIFY(cache_dir_.isValid());
        qputenv("XDG_CACHE_HOME", cache_dir_.path().toLocal8Bit());
        qInfo("this machine's SIMD level: %s (each level it can run is checked below)", simd_level());
    }

    void matchesReference_data() { add_type_level_rows(kAllTypes); }

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

    // The interleaved layout a CPU backend places Q4_1, Q5_0 and Q8_0 weights in computes the plain
    // layout's values bit for bit (the plain ones are checked against llama.cpp's order above and in
    // test_q4_1_product), at every level (AVX-512: its own decode kernels; AVX2 and batches: rows
    // put back in the plain layout), 1-3 threads, one and two tokens and batches; the rearranging
    // loses no byte, and matrices it cannot hold are refused.
    // The layout is read in one ascending pass (interleaved_rows.h: the CPU's prefetchers follow
    // that at the memory's speed, not a second stream of scales): the group's cache lines, in the
    // order the decode kernels first touch them (a block's scales, then Q4_1's minimums or Q5_0's
    // masks, then its values), come in ascending order, every line once; every byte belongs to
    // exactly one part; whole units keep the values on line boundaries.
    void interleavedLayoutIsOneAscendingPass() {
        for (TensorType type : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q8_0}) {
            const interleaved::GroupParts p = interleaved::group_parts(type);
            for (int64_t nb : {int64_t(1), int64_t(2), int64_t(5), int64_t(18), int64_t(48)}) {
                const size_t bytes = size_t(kInterleavedRows) * row_bytes(type, 32 * nb);
                const QByteArray where = QString("%1, %2 blocks").arg(QString::fromStdString(std::string(traits(type).name))).arg(nb).toLatin1();
                std::vector<int> owners(bytes, 0);
                std::vector<bool> seen((bytes + 63) / 64, false);
                std::vector<size_t> first;
                auto touch = [&](size_t offset, size_t n) {
                    QVERIFY2(offset + n <= bytes, where.constData());
                    for (size_t i = offset; i < offset + n; ++i) ++owners[i];
                    for (size_t line = offset / 64; line <= (offset + n - 1) / 64; ++line)
                        if (!seen[line]) seen[line] = true, first.push_back(line);
                };
                for (int64_t b = 0; b < nb; ++b) {
                    const interleaved::BlockPlace at = interleaved::block_place(p, nb, size_t(b));
                    touch(at.d, 32);
                    if (type == TensorType::Q4_1) touch(at.m, 32);
                    if (type == TensorType::Q5_0) touch(at.masks, 64);
                    touch(at.values, p.values);
                    const bool whole_unit = (b / int64_t(p.per_unit) + 1) * int64_t(p.per_unit) <= nb;
                    if (whole_unit) QVERIFY2(at.values % 64 == 0, where.constData());
                }
                QVERIFY2(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }), where.constData());
                QCOMPARE(first.size(), seen.size());
                QVERIFY2(std::is_sorted(first.begin(), first.end()), where.constData());
            }
        }
    }

    void interleavedRowsEqualPlain_data() {
        add_type_level_rows(std::initializer_list<TensorType>{TensorType::Q4_1, TensorType::Q5_0, TensorType::Q8_0});
    }
    void interleavedRowsEqualPlain() {
        QFETCH(TensorType, type);
        QFETCH(QString, level);
        if (!level_supported(level.toLatin1().constData())) QSKIP("CPU cannot run this level");
        SimdLevelScope scope(level.toLatin1().constData());
        for (int64_t rows : {int64_t(16), int64_t(48), int64_t(80)}) {
            for (int64_t cols : {int64_t(32), int64_t(160), int64_t(576)}) {
                const Weights w = make_weights(type, rows, cols, uint32_t(rows * 31 + cols + int64_t(type)));
                const size_t bytes = w.data.size();
                QVERIFY(can_interleave(w.matrix()));
                std::vector<uint8_t> inter(bytes, 0xcd);
                ThreadPool setup(2);
                interleave_rows(w.matrix(), inter.data(), setup);
                const WeightMatrix wi{type, rows, cols, inter.data(), RowLayout::Interleaved16};
                QVERIFY(!can_interleave(wi));  // already interleaved
                QVERIFY(inter != w.data);      // it did rearrange
                // Every row back, whole groups and single rows.
                std::vector<uint8_t> back(bytes);
                for (int64_t g = 0; g < rows / 16; ++g) plain_rows(wi, 16 * g, 16, back.data() + size_t(g) * 16 * row_bytes(type, cols));
                QVERIFY(back == w.data);
                std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
                for (int64_t r : {int64_t(0), int64_t(5), rows - 1}) {
                    weight_row(w.matrix(), r, a.data());
                    weight_row(wi, r, b.data());
                    QVERIFY(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
                }
                for (int64_t n_tokens : {1, 2, 3, 17}) {
                    const std::vector<float> x = make_activations(n_tokens, cols, uint32_t(n_tokens * 13 + cols));
                    for (int threads : {1, 2, 3}) {
                        ThreadPool pool(threads);
                        std::vector<float> yp(size_t(n_tokens * rows), std::nanf("")), yi(yp);
                        matmul(w.matrix(), x.data(), n_tokens, yp.data(), pool);
                        matmul(wi, x.data(), n_tokens, yi.data(), pool);
                        const QByteArray where = QString("rows %1 cols %2 tokens %3 threads %4").arg(rows).arg(cols).arg(n_tokens).arg(threads).toLatin1();
                        QVERIFY2(std::memcmp(yp.data(), yi.data(), yp.size() * sizeof(float)) == 0, where.constData());
                        // The same through the products of one input (q, k, v), interleaved beside plain.
                        const WeightMatrix* ws[2] = {&wi, nullptr};
                        const WeightMatrix plain = w.matrix();
                        ws[1] = &plain;
                        std::vector<float> y0(yp.size()), y1(yp.size());
                        float* ys[2] = {y0.data(), y1.data()};
                        matmuls(ws, ys, 2, x.data(), n_tokens, pool);
                        QVERIFY2(y0 == yp && y1 == yp, where.constData());
                    }
                }
            }
        }
        // What the layout cannot hold.
        const Weights odd = make_weights(type, 37, 64, 5);
        QVERIFY(!can_interleave(odd.matrix()));
        ThreadPool pool(1);
        std::vector<uint8_t> sink(odd.data.size());
        QVERIFY_THROWS_EXCEPTION(Error, interleave_rows(odd.matrix(), sink.data(), pool));
        std::vector<float> x(64, 1.0f), y(37);
        QVERIFY_THROWS_EXCEPTION(Error, matmul(WeightMatrix{type, 37, 64, odd.data.data(), RowLayout::Interleaved16}, x.data(), 1, y.data(), pool));
        const Weights k = make_weights(TensorType::Q4_K, 16, 256, 6);
        QVERIFY(!can_interleave(k.matrix()));
    }

    // Q5_0, Q8_0, Q4_K and Q6_K round exactly as llama.cpp does (dot_like_llama), bit for bit,
    // at every level, for token counts on both sides of its kernels' thresholds (4, 8) and of
    // ours, rows not a multiple of the 16-row panels, 1-3 threads.
    void referenceOrderIsExact_data() {
        add_type_level_rows(std::initializer_list<TensorType>{TensorType::Q5_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K});
    }
    void referenceOrderIsExact() {
        QFETCH(TensorType, type);
        QFETCH(QString, level);
        if (!level_supported(level.toLatin1().constData())) QSKIP("CPU cannot run this level");
        SimdLevelScope scope(level.toLatin1().constData());
        const int64_t block = activation_block(type);
        const int64_t cols = block == 256 ? 768 : 320, rows = 37;
        const Weights w = make_weights(type, rows, cols, 41);
        const size_t rb = row_bytes(type, cols);
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 9, 13, 19}) {
            const std::vector<float> x = make_activations(n_tokens, cols, uint32_t(n_tokens));
            for (int threads : {1, 2, 3}) {
                ThreadPool pool(threads);
                std::vector<float> y(size_t(n_tokens * rows));
                matmul(w.matrix(), x.data(), n_tokens, y.data(), pool);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    const QuantizedRow xq = quantize_like_llama(x.data() + t * cols, cols, block);
                    for (int64_t r = 0; r < rows; ++r) {
                        const float want = dot_like_llama(type, w.data.data() + size_t(r) * rb, cols, xq, t, n_tokens);
                        const float got = y[size_t(t * rows + r)];
                        QVERIFY2(std::memcmp(&got, &want, sizeof got) == 0,
                                 qPrintable(QString("tokens %1 threads %2: token %3 row %4: %5 vs %6")
                                                .arg(n_tokens).arg(threads).arg(t).arg(r).arg(double(got), 0, 'g', 9)
                                                .arg(double(want), 0, 'g', 9)));
                    }
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

    // AVX2 and AVX-512 give the same bits for every type and token count (1 and 2 tokens take the
    // fused and streamed kernels, 3, 13 and 40 the panels): each kernel family is free to take
    // either level on a given CPU (matmul.cpp's calibration), and a prompt's tokens then go
    // through the batch family while later ones go through the decode family, so a cached
    // conversation equals one computed without a cache only if the levels agree exactly. Float
    // weights also at column counts that leave a partial 16-column step. AMX, which multiplies
    // the same int8 values in tiles, agrees to float rounding.
    void simdLevelsAgree() {
        if (!level_supported("avx512-vnni")) QSKIP("CPU lacks AVX-512 VNNI");
        ThreadPool pool(2);
        const auto product = [&](const char* level, const Weights& w, const std::vector<float>& x, int64_t n_tokens) {
            std::vector<float> y(size_t(n_tokens * w.rows));
            SimdLevelScope scope(level);
            matmul(w.matrix(), x.data(), n_tokens, y.data(), pool);
            return y;
        };
        for (TensorType t : kAllTypes) {
            for (int64_t cols : is_float(t) ? std::vector<int64_t>{96, 40, 100, 7} : std::vector<int64_t>{256, 512}) {
                const Weights w = make_weights(t, 21, cols, 3);
                for (int64_t n_tokens : {1, 2, 3, 13, 40}) {
                    const std::vector<float> x = make_activations(n_tokens, cols, 11);
                    const std::vector<float> y2 = product("avx2", w, x, n_tokens), y5 = product("avx512-vnni", w, x, n_tokens);
                    for (size_t i = 0; i < y2.size(); ++i)
                        QVERIFY2(std::memcmp(&y2[i], &y5[i], sizeof(float)) == 0,
                                 qPrintable(QString("%1, %2 columns, %3 tokens, output %4: %5 (avx2) vs %6 (avx512-vnni)")
                                                .arg(traits(t).name.data()).arg(cols).arg(n_tokens).arg(i)
                                                .arg(double(y2[i]), 0, 'g', 9).arg(double(y5[i]), 0, 'g', 9)));
                    if (!level_supported("amx")) continue;
                    const std::vector<float> ya = product("amx", w, x, n_tokens);
                    for (size_t i = 0; i < y5.size(); ++i)
                        QVERIFY2(std::fabs(double(ya[i]) - double(y5[i])) <= 1e-4 * std::max(1.0, std::fabs(double(y5[i]))),
                                 qPrintable(QString("%1 tokens %2 output %3: %4 (amx) vs %5").arg(traits(t).name.data()).arg(n_tokens).arg(i).arg(ya[i]).arg(y5[i])));
                }
            }
        }
    }

    // The int8 form every integer kernel starts from: scale * v + min reproduces dequantize_row.
    void int8UnpackMatchesDequantize() {
        for (TensorType t : kAllTypes) {
            if (is_float(t)) continue;
            const kernels::Int8Layout layout = kernels::int8_layout(t);
            QVERIFY(layout.group == 16 || layout.group == 32);
            const Weights w = make_weights(t, 3, 512, 23);
            std::vector<int8_t> v(512);
            std::vector<float> scale(512 / layout.group), min(512 / layout.group, 0.0f);
            for (int64_t r = 0; r < w.rows; ++r) {
                kernels::unpack_row_int8(t, w.data.data() + size_t(r) * row_bytes(t, 512), 512, v.data(), scale.data(), min.data());
                for (int64_t c = 0; c < 512; ++c) {
                    const size_t g = size_t(c / layout.group);
                    const double got = double(scale[g]) * v[size_t(c)] + (layout.has_min ? double(min[g]) : 0.0);
                    const double want = w.dequantized[size_t(r * 512 + c)];
                    QVERIFY2(std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want)),
                             qPrintable(QString("%1 row %2 col %3: %4 vs %5").arg(traits(t).name.data()).arg(r).arg(c).arg(got).arg(want)));
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

    // Without a forced level, each kernel family takes the level it measured fastest on its first
    // use, keeps it in the choice file for this CPU, and computes the bits every level computes.
    void automaticLevelsAreMeasuredAndKept() {
        const Weights w = make_weights(TensorType::Q8_0, 45, 320, 8);
        ThreadPool pool(2);
        for (int64_t n_tokens : {1, 9}) {
            const std::vector<float> x = make_activations(n_tokens, 320, 4);
            std::vector<float> automatic(size_t(n_tokens * 45)), lowest(size_t(n_tokens * 45));
            matmul(w.matrix(), x.data(), n_tokens, automatic.data(), pool);
            {
                SimdLevelScope scope("avx2");
                QVERIFY(simd_family_levels().empty());
                matmul(w.matrix(), x.data(), n_tokens, lowest.data(), pool);
            }
            QVERIFY(std::memcmp(automatic.data(), lowest.data(), sizeof(float) * automatic.size()) == 0);
        }
        const QString taken = QString::fromStdString(simd_family_levels());
        if (QString(simd_level()) == "avx2") {
            QVERIFY2(taken.isEmpty(), qPrintable(taken));  // nothing to choose from
            return;
        }
        QVERIFY2(taken.contains("q8_0/decode ") && taken.contains("q8_0/batch "), qPrintable(taken));
        const std::string path = simd_choices_path();
        QVERIFY2(QString::fromStdString(path).startsWith(cache_dir_.path()), path.c_str());
        const SimdChoices kept = load_simd_choices(path, cpu_model_key(simd_level()), "avx2 avx512-vnni amx");
        QVERIFY(kept.count("q8_0/decode") == 1 && kept.count("q8_0/batch") == 1);
        QVERIFY2(taken.contains(QString::fromStdString("q8_0/decode " + kept.at("q8_0/decode"))), qPrintable(taken));
    }

    // The choice file: what format writes, parse reads back; a file for another CPU or kvchat
    // version, or one damaged anywhere, gives no choices (they are measured again).
    void choiceFileRejectsWhatIsNotOurs() {
        const std::string key = cpu_model_key("avx512-vnni"), levels = "avx2 avx512-vnni amx";
        QVERIFY(key.find(KVCHAT_VERSION) != std::string::npos);
        const SimdChoices choices = {{"q8_0/decode", "avx2"}, {"q4_k/batch", "avx512-vnni"}};
        const std::string text = format_simd_choices(choices, key);
        QVERIFY(parse_simd_choices(text, key, levels) == choices);
        QVERIFY(parse_simd_choices(text, cpu_model_key("avx2"), levels).empty());
        QVERIFY(parse_simd_choices(text, key, "avx2").empty());  // a level this build does not know
        QVERIFY(parse_simd_choices("", key, levels).empty());
        // A file of the earlier format (its Q4_1 decode choice compared two copies of one kernel).
        QVERIFY(parse_simd_choices("kvchat-simd-levels 1\ncpu " + key + "\nq8_0/decode avx2\n", key, levels).empty());
        QVERIFY(parse_simd_choices(text + "q5_0/decode\n", key, levels).empty());
        QVERIFY(parse_simd_choices(text + "Q5 0/decode avx2\n", key, levels).empty());
        QVERIFY(parse_simd_choices(text + "q5_0/decode avx2 extra\n", key, levels).empty());
        std::string damaged = text;
        damaged[damaged.size() / 2] = '\xff';
        QVERIFY(parse_simd_choices(damaged, key, levels).empty());

        // Saving merges with what the file holds, so two processes keep both their families.
        const std::string path = (cache_dir_.path() + "/merge/simd-levels").toStdString();
        QVERIFY(save_simd_choices(path, {{"q8_0/decode", "avx2"}}, key, levels));
        QVERIFY(save_simd_choices(path, {{"q6_k/decode", "avx512-vnni"}}, key, levels));
        const SimdChoices both = {{"q8_0/decode", "avx2"}, {"q6_k/decode", "avx512-vnni"}};
        QVERIFY(load_simd_choices(path, key, levels) == both);
        // A file for another CPU is replaced, not merged.
        QVERIFY(save_simd_choices(path, {{"q5_0/decode", "avx2"}}, cpu_model_key("avx2"), levels));
        QVERIFY(load_simd_choices(path, key, levels).empty());
        // A path that cannot be written (its directory is a file): refused, nothing thrown.
        QVERIFY(!save_simd_choices(path + "/below-a-file", {{"q8_0/decode", "avx2"}}, key, levels));
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

private:
    QTemporaryDir cache_dir_;
};

QTEST_GUILESS_MAIN(TestMatmul)
#include "test_matmul.moc"
