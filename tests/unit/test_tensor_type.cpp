// Tensor element formats: dequantization equals an independent reference (gguf-py, golden data
// from tests/reference/make_quant_golden.py), the reference quantizers match it bit for bit where
// it has one, every quantizer's round trip stays within the resolution its format allows, and
// the fp16/bf16 conversions get the IEEE edge cases right.
#include "engine/compute/quant_blocks.h"
#include "engine/compute/tensor_type.h"
#include "engine/error.h"
#include "support/test_paths.h"

#include <QtTest>
#include <algorithm>
#include <bit>
#include <cpuid.h>
#include <cmath>
#include <cstring>
#include <fstream>
#include <immintrin.h>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

using kvchat::TensorType;

namespace {

const nlohmann::json& golden() {
    static const nlohmann::json doc = [] {
        std::ifstream in(kvchat::test::data_path("quant_golden.json"));
        if (!in) throw std::runtime_error("cannot open quant_golden.json");
        return nlohmann::json::parse(in);
    }();
    return doc;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    return out;
}

std::vector<float> floats_from_hex(const std::string& hex) {
    const std::vector<uint8_t> bytes = from_hex(hex);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

bool same_float(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Every type kvchat supports, with its block shape as the GGML specification (ggml-common.h)
// states it.
struct SpecRow {
    TensorType type;
    const char* name;
    int64_t block_elems;
    size_t block_bytes;
};
const SpecRow kSpec[] = {
    {TensorType::F32, "f32", 1, 4},       {TensorType::F16, "f16", 1, 2},
    {TensorType::BF16, "bf16", 1, 2},     {TensorType::Q4_0, "q4_0", 32, 18},
    {TensorType::Q4_1, "q4_1", 32, 20},   {TensorType::Q5_0, "q5_0", 32, 22},
    {TensorType::Q5_1, "q5_1", 32, 24},   {TensorType::Q8_0, "q8_0", 32, 34},
    {TensorType::Q8_1, "q8_1", 32, 36},   {TensorType::Q2_K, "q2_K", 256, 84},
    {TensorType::Q3_K, "q3_K", 256, 110}, {TensorType::Q4_K, "q4_K", 256, 144},
    {TensorType::Q5_K, "q5_K", 256, 176}, {TensorType::Q6_K, "q6_K", 256, 210},
    {TensorType::Q8_K, "q8_K", 256, 292},
};

// Round-trip error bound for one element, from the format's resolution alone (never from the
// block the quantizer produced). `x` is the whole block of the element.
//   fp16 scale fields carry a relative rounding error of at most 2^-11; the K-quant quantizer
//   rounds its super-scales up, by at most one fp16 ulp (2^-10 relative).
struct Bound {
    std::vector<float> per_element;
};

float amax_of(const float* x, int n) {
    float a = 0;
    for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
    return a;
}

constexpr float kHalfEps = 1.0f / 2048;  // fp16 relative rounding, 2^-11
constexpr float kUlpUp = 1.0f / 512;     // room for one fp16 ulp up plus float noise

// Asymmetric K-quant: sub-blocks of `sub`, levels 0..levels-1, scales and mins 0..smax.
void bound_k_with_min(const float* x, int sub, int levels, int smax, float* out) {
    const int nsub = kvchat::QK_K / sub;
    float neg_min_max = 0, range_max = 0;
    std::vector<float> range(size_t(nsub), 0.0f);
    for (int s = 0; s < nsub; ++s) {
        const float lo = std::min(0.0f, *std::min_element(x + s * sub, x + s * sub + sub));
        const float hi = std::max(lo, *std::max_element(x + s * sub, x + s * sub + sub));
        range[size_t(s)] = hi - lo;
        neg_min_max = std::max(neg_min_max, -lo);
        range_max = std::max(range_max, hi - lo);
    }
    // The min's grid step and the scale's grid step, each at most one quantized-scale unit off.
    const float dmin = neg_min_max / float(smax) * (1 + kUlpUp);
    const float d = (range_max + dmin) / float(levels - 1) / float(smax) * (1 + kUlpUp);
    for (int s = 0; s < nsub; ++s) {
        const float step = (range[size_t(s)] + dmin) / float(levels - 1) + d;
        for (int l = 0; l < sub; ++l) out[s * sub + l] = 0.5f * step * (1 + 1e-5f) + 1e-7f;
    }
}

// Symmetric K-quant: values -(half-1)..half-1 of the grid used, scales 1..smax.
void bound_k_symmetric(const float* x, int sub, int half, int smax, float* out) {
    const int nsub = kvchat::QK_K / sub;
    float step_max = 0;
    for (int s = 0; s < nsub; ++s) step_max = std::max(step_max, amax_of(x + s * sub, sub) / float(half - 1));
    const float d = step_max / float(smax) * (1 + kUlpUp);
    for (int s = 0; s < nsub; ++s) {
        const float step = amax_of(x + s * sub, sub) / float(half - 1) + d;
        for (int l = 0; l < sub; ++l) out[s * sub + l] = 0.5f * step * (1 + 1e-5f) + 1e-7f;
    }
}

std::vector<float> round_trip_bound(TensorType t, const std::vector<float>& x) {
    std::vector<float> b(x.size());
    const int64_t be = kvchat::traits(t).block_elems;
    for (size_t start = 0; start < x.size(); start += size_t(be)) {
        const float* xb = x.data() + start;
        float* ob = b.data() + start;
        const int n = int(be);
        const float amax = amax_of(xb, n);
        const float mn = *std::min_element(xb, xb + n), mx = *std::max_element(xb, xb + n);
        switch (t) {
        case TensorType::F32: ob[0] = 0; break;
        case TensorType::F16: ob[0] = std::max(std::fabs(xb[0]) * kHalfEps, 1.0f / (1 << 25)); break;
        case TensorType::BF16: ob[0] = std::fabs(xb[0]) / 256; break;
        // Symmetric with d = max/-8 (or -16): one level clips at the opposite extreme, so the
        // worst case is a whole step there; half a step elsewhere. Plus fp16 rounding of d
        // times the largest level.
        case TensorType::Q4_0:
            std::fill(ob, ob + n, amax / 8 * (1 + 8 * kHalfEps) + 1e-7f);
            break;
        case TensorType::Q5_0:
            std::fill(ob, ob + n, amax / 16 * (1 + 16 * kHalfEps) + 1e-7f);
            break;
        // Min-max grids: half a step, plus fp16 rounding of d (times the top level) and of min.
        case TensorType::Q4_1:
            std::fill(ob, ob + n, (mx - mn) / 15 * (0.5f + 15 * kHalfEps) + std::fabs(mn) * kHalfEps + 1e-7f);
            break;
        case TensorType::Q5_1:
            std::fill(ob, ob + n, (mx - mn) / 31 * (0.5f + 31 * kHalfEps) + std::fabs(mn) * kHalfEps + 1e-7f);
            break;
        // amax/127 steps: half a step plus fp16 rounding of d times 127 (Q8_K keeps d in fp32).
        case TensorType::Q8_0:
        case TensorType::Q8_1:
            std::fill(ob, ob + n, amax / 127 * (0.5f + 127 * kHalfEps) + 1e-7f);
            break;
        case TensorType::Q8_K: std::fill(ob, ob + n, amax / 127 * 0.5f * (1 + 1e-5f) + 1e-7f); break;
        case TensorType::Q2_K: bound_k_with_min(xb, 16, 4, 15, ob); break;
        case TensorType::Q3_K: bound_k_symmetric(xb, 16, 4, 31, ob); break;
        case TensorType::Q4_K: bound_k_with_min(xb, 32, 16, 63, ob); break;
        case TensorType::Q5_K: bound_k_with_min(xb, 32, 32, 63, ob); break;
        case TensorType::Q6_K: bound_k_symmetric(xb, 16, 32, 127, ob); break;
        }
    }
    return b;
}

// Test vectors: a few shapes of data that stress different parts of a quantizer.
std::vector<float> make_input(const QString& kind, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    if (kind == "normal") {
        for (float& v : x) v = normal(rng);
    } else if (kind == "uneven") {
        // Magnitudes varying over 4 decades every 16 elements: the sub-block scales must differ.
        for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::pow(10.0f, float((i / 16 * 7) % 5) - 2);
    } else if (kind == "positive") {
        for (float& v : x) v = 3.0f + std::fabs(normal(rng));
    } else if (kind == "negative") {
        for (float& v : x) v = -0.5f - 0.1f * std::fabs(normal(rng));
    } else if (kind == "sparse") {
        for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 37 == 0) ? normal(rng) * 50 : 0.0f;
    } else if (kind == "zeros") {
        // all zero
    } else if (kind == "constant") {
        std::fill(x.begin(), x.end(), 0.3125f);
    }
    return x;
}

}  // namespace

class TestTensorType : public QObject {
    Q_OBJECT
private slots:
    void goldenCoversEveryType() {
        // The golden file must exercise every supported type, or a format could go untested.
        for (const SpecRow& row : kSpec) {
            bool found = false;
            for (const auto& c : golden()["dequantize"])
                found = found || c["type_id"].get<uint32_t>() == uint32_t(row.type);
            QVERIFY2(found, row.name);
        }
        QVERIFY(golden()["quantize"].size() >= 9);
    }

    void dequantizeMatchesGolden_data() {
        QTest::addColumn<int>("index");
        const auto& cases = golden()["dequantize"];
        for (size_t i = 0; i < cases.size(); ++i)
            QTest::newRow(cases[i]["type"].get<std::string>().c_str()) << int(i);
    }
    void dequantizeMatchesGolden() {
        QFETCH(int, index);
        const auto& c = golden()["dequantize"][size_t(index)];
        const auto t = TensorType(c["type_id"].get<uint32_t>());
        const int64_t n = c["n"].get<int64_t>();
        const std::vector<uint8_t> bytes = from_hex(c["bytes_hex"].get<std::string>());
        const std::vector<float> expected = floats_from_hex(c["values_f32_hex"].get<std::string>());
        QCOMPARE(int64_t(expected.size()), n);
        QCOMPARE(bytes.size(), kvchat::row_bytes(t, n));
        // The type name is ggml's, as gguf-py spells it in upper case.
        QCOMPARE(QString::fromLatin1(kvchat::traits(t).name.data(), int(kvchat::traits(t).name.size())).toUpper(),
                 QString::fromStdString(c["type"].get<std::string>()));

        // Also from an odd address: blocks in a file need not be aligned for the block struct.
        std::vector<uint8_t> shifted(bytes.size() + 1);
        std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
        for (const uint8_t* src : {bytes.data(), static_cast<const uint8_t*>(shifted.data() + 1)}) {
            std::vector<float> got(size_t(n), -12345.0f);
            kvchat::dequantize_row(t, src, got.data(), n);
            for (int64_t i = 0; i < n; ++i)
                QVERIFY2(same_float(got[size_t(i)], expected[size_t(i)]),
                         qPrintable(QString("element %1: got %2, reference %3")
                                        .arg(i)
                                        .arg(double(got[size_t(i)]), 0, 'g', 9)
                                        .arg(double(expected[size_t(i)]), 0, 'g', 9)));
        }
    }

    void quantizeMatchesGolden_data() {
        QTest::addColumn<int>("index");
        const auto& cases = golden()["quantize"];
        for (size_t i = 0; i < cases.size(); ++i)
            QTest::newRow(cases[i]["type"].get<std::string>().c_str()) << int(i);
    }
    void quantizeMatchesGolden() {
        QFETCH(int, index);
        const auto& c = golden()["quantize"][size_t(index)];
        const auto t = TensorType(c["type_id"].get<uint32_t>());
        const int64_t n = c["n"].get<int64_t>();
        const std::vector<float> input = floats_from_hex(c["input_f32_hex"].get<std::string>());
        const std::vector<uint8_t> expected = from_hex(c["bytes_hex"].get<std::string>());
        QCOMPARE(int64_t(input.size()), n);
        QCOMPARE(expected.size(), kvchat::row_bytes(t, n));
        std::vector<uint8_t> got(expected.size() + 2, 0xa5);
        kvchat::quantize_row(t, input.data(), got.data() + 1, n);  // odd address on purpose
        QCOMPARE(got.front(), uint8_t(0xa5));                       // nothing written outside the row
        QCOMPARE(got.back(), uint8_t(0xa5));
        const size_t bb = kvchat::traits(t).block_bytes;
        for (size_t i = 0; i < expected.size(); ++i)
            QVERIFY2(got[i + 1] == expected[i], qPrintable(QString("byte %1 (block %2, offset %3): got %4, reference %5")
                                                               .arg(i)
                                                               .arg(i / bb)
                                                               .arg(i % bb)
                                                               .arg(got[i + 1], 2, 16, QChar('0'))
                                                               .arg(expected[i], 2, 16, QChar('0'))));
    }

    void roundTripWithinBound_data() {
        QTest::addColumn<int>("type");
        QTest::addColumn<QString>("kind");
        for (const SpecRow& row : kSpec)
            for (const char* kind : {"normal", "uneven", "positive", "negative", "sparse", "zeros", "constant"})
                QTest::newRow(qPrintable(QString("%1 %2").arg(row.name, kind))) << int(row.type) << QString(kind);
    }
    void roundTripWithinBound() {
        QFETCH(int, type);
        QFETCH(QString, kind);
        const auto t = TensorType(type);
        const int64_t n = 4 * kvchat::QK_K;
        const std::vector<float> x = make_input(kind, n, uint32_t(type) * 7919u + uint32_t(qHash(kind)));
        std::vector<uint8_t> q(kvchat::row_bytes(t, n));
        kvchat::quantize_row(t, x.data(), q.data(), n);
        std::vector<float> y(static_cast<size_t>(n));
        kvchat::dequantize_row(t, q.data(), y.data(), n);
        const std::vector<float> bound = round_trip_bound(t, x);
        double worst_ratio = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float err = std::fabs(y[size_t(i)] - x[size_t(i)]);
            QVERIFY2(std::isfinite(y[size_t(i)]), qPrintable(QString("element %1 not finite").arg(i)));
            QVERIFY2(err <= bound[size_t(i)], qPrintable(QString("element %1: x %2, got %3, error %4 > bound %5")
                                                             .arg(i)
                                                             .arg(double(x[size_t(i)]), 0, 'g', 9)
                                                             .arg(double(y[size_t(i)]), 0, 'g', 9)
                                                             .arg(double(err), 0, 'g', 4)
                                                             .arg(double(bound[size_t(i)]), 0, 'g', 4)));
            if (bound[size_t(i)] > 0) worst_ratio = std::max(worst_ratio, double(err / bound[size_t(i)]));
        }
        if (kind == "zeros")  // zero must stay exactly zero in every format
            for (float v : y) QCOMPARE(v, 0.0f);
        qDebug("%s %s: worst error / bound = %.3f", kvchat::traits(t).name.data(), qPrintable(kind), worst_ratio);
    }

    // Q8_K and Q8_1 carry sums for the dot products; they must agree with the quants.
    void activationSumsAreConsistent() {
        const int64_t n = 2 * kvchat::QK_K;
        const std::vector<float> x = make_input("uneven", n, 17);
        std::vector<kvchat::BlockQ8_K> k(size_t(n / kvchat::QK_K));
        kvchat::quantize_row(TensorType::Q8_K, x.data(), k.data(), n);
        for (const auto& b : k)
            for (int g = 0; g < kvchat::QK_K / 16; ++g) {
                int sum = 0;
                for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
                QCOMPARE(int(b.bsums[g]), sum);
            }
        std::vector<kvchat::BlockQ8_1> one(size_t(n / kvchat::QK8_1));
        kvchat::quantize_row(TensorType::Q8_1, x.data(), one.data(), n);
        for (const auto& b : one) {
            int sum = 0;
            for (int8_t v : b.qs) sum += v;
            const float expected = kvchat::fp16_to_fp32(b.d) * float(sum);
            // s is d*sum rounded once to fp16 (d before its own fp16 rounding)
            QVERIFY(std::fabs(kvchat::fp16_to_fp32(b.s) - expected) <= std::fabs(expected) * 2 * kHalfEps + 1e-7f);
        }
    }

    void fp16Conversion_data() {
        QTest::addColumn<float>("value");
        QTest::addColumn<uint>("bits");
        // Expected bit patterns from the IEEE 754 binary16 definition.
        QTest::newRow("one") << 1.0f << 0x3c00u;
        QTest::newRow("minus two") << -2.0f << 0xc000u;
        QTest::newRow("zero") << 0.0f << 0x0000u;
        QTest::newRow("minus zero") << -0.0f << 0x8000u;
        QTest::newRow("max") << 65504.0f << 0x7bffu;
        QTest::newRow("below overflow tie") << 65519.0f << 0x7bffu;
        QTest::newRow("overflow tie to inf") << 65520.0f << 0x7c00u;
        QTest::newRow("big") << 1e10f << 0x7c00u;
        QTest::newRow("inf") << INFINITY << 0x7c00u;
        QTest::newRow("minus inf") << -INFINITY << 0xfc00u;
        QTest::newRow("tie to even down") << 1.0f + 0x1p-11f << 0x3c00u;
        QTest::newRow("tie to even up") << 1.0f + 0x3p-11f << 0x3c02u;
        QTest::newRow("above tie") << 1.0f + 0x1p-11f + 0x1p-20f << 0x3c01u;
        QTest::newRow("0.1") << 0.1f << 0x2e66u;
        QTest::newRow("min normal") << 0x1p-14f << 0x0400u;
        QTest::newRow("max subnormal") << 0x3ffp-24f << 0x03ffu;
        QTest::newRow("rounds up to min normal") << 0x1p-14f - 0x1p-25f << 0x0400u;
        QTest::newRow("min subnormal") << 0x1p-24f << 0x0001u;
        QTest::newRow("half min subnormal ties to zero") << 0x1p-25f << 0x0000u;
        QTest::newRow("above half min subnormal") << 0x1.000002p-25f << 0x0001u;
        QTest::newRow("subnormal tie to even") << 0x3p-25f << 0x0002u;
        QTest::newRow("negative subnormal") << -0x5p-24f << 0x8005u;
        QTest::newRow("fp32 subnormal") << 1e-40f << 0x0000u;
    }
    void fp16Conversion() {
        QFETCH(float, value);
        QFETCH(uint, bits);
        QCOMPARE(uint(kvchat::fp32_to_fp16(value)), bits);
        // Back to fp32: exact whenever the value is representable (finite results compare equal).
        const float back = kvchat::fp16_to_fp32(uint16_t(bits));
        if (std::isfinite(back) && std::fabs(value) <= 65504.0f && uint(kvchat::fp32_to_fp16(back)) != bits)
            QFAIL("fp16 -> fp32 -> fp16 is not the identity");
    }

    void fp16Nan() {
        for (float nan : {NAN, -NAN, std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc01234u)}) {
            const uint16_t h = kvchat::fp32_to_fp16(nan);
            QVERIFY((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0);  // still a nan, not inf
        }
        for (uint16_t h : {uint16_t(0x7c01), uint16_t(0x7e00), uint16_t(0xfdff)}) QVERIFY(std::isnan(kvchat::fp16_to_fp32(h)));
        QVERIFY(std::isinf(kvchat::fp16_to_fp32(0x7c00)));
        QVERIFY(std::signbit(kvchat::fp16_to_fp32(0x8000)));
        QCOMPARE(kvchat::fp16_to_fp32(0x0001), 0x1p-24f);
        QCOMPARE(kvchat::fp16_to_fp32(0x03ff), 0x3ffp-24f);
        QCOMPARE(kvchat::fp16_to_fp32(0x3555), 0x1.554p-2f);
    }

    // Every non-nan fp16 survives fp16 -> fp32 -> fp16, and the fp32 value is monotonic in the
    // bit pattern: together they pin fp16_to_fp32 down completely.
    void fp16AllPatterns() {
        float previous = -INFINITY;
        for (uint32_t h = 0; h < 0x10000; ++h) {
            const float f = kvchat::fp16_to_fp32(uint16_t(h));
            if (std::isnan(f)) {
                QVERIFY((h & 0x7c00) == 0x7c00);
                continue;
            }
            QCOMPARE(uint32_t(kvchat::fp32_to_fp16(f)), h);
            if (h < 0x7c01 && h > 0) QVERIFY(f > previous);  // positive half ascends
            if (h < 0x7c01) previous = f;
        }
    }

    // The CPU's F16C conversion is an independent reference for fp32 -> fp16 rounding.
    void fp16MatchesHardware() {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // cpuid rather than a builtin clang 14 lacks
        if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C)) QSKIP("no F16C on this CPU");
        uint32_t mismatches = 0, checked = 0;
        for (uint64_t u = 0; u < (1ull << 32); u += 4093) {  // a prime stride through all floats
            const float f = std::bit_cast<float>(uint32_t(u));
            if (std::isnan(f)) continue;
            ++checked;
            if (kvchat::fp32_to_fp16(f) != hardware_fp16(f)) ++mismatches;
        }
        QVERIFY(checked > 1000000);
        QCOMPARE(mismatches, 0u);
    }

    void bf16Conversion_data() {
        QTest::addColumn<float>("value");
        QTest::addColumn<uint>("bits");
        // bfloat16 is the top half of binary32, rounded to nearest even.
        QTest::newRow("one") << 1.0f << 0x3f80u;
        QTest::newRow("minus one") << -1.0f << 0xbf80u;
        QTest::newRow("tie to even down") << 1.0f + 0x1p-8f << 0x3f80u;
        QTest::newRow("tie to even up") << 1.0f + 0x3p-8f << 0x3f82u;
        QTest::newRow("above tie") << 1.0f + 0x1p-8f + 0x1p-20f << 0x3f81u;
        QTest::newRow("fp32 max rounds to inf") << 3.4028235e38f << 0x7f80u;
        QTest::newRow("inf") << INFINITY << 0x7f80u;
        QTest::newRow("minus inf") << -INFINITY << 0xff80u;
        QTest::newRow("minus zero") << -0.0f << 0x8000u;
        QTest::newRow("subnormal kept") << 0x1p-130f << 0x0008u;
    }
    void bf16Conversion() {
        QFETCH(float, value);
        QFETCH(uint, bits);
        QCOMPARE(uint(kvchat::fp32_to_bf16(value)), bits);
        QVERIFY(same_float(kvchat::bf16_to_fp32(uint16_t(bits)), std::bit_cast<float>(uint32_t(bits) << 16)));
    }
    void bf16Nan() {
        // A signalling nan whose payload lives only in the low half must not truncate to inf.
        for (uint32_t nan : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu}) {
            const uint16_t b = kvchat::fp32_to_bf16(std::bit_cast<float>(nan));
            QVERIFY(std::isnan(kvchat::bf16_to_fp32(b)));
            QCOMPARE(b & 0x8000, int((nan >> 16) & 0x8000));
        }
    }

    void scaleMinUnpacking() {
        // Pack eight 6-bit scales and mins by the layout ggml-common.h documents, then unpack.
        const uint8_t sc[8] = {1, 63, 17, 40, 0, 33, 62, 5};
        const uint8_t mn[8] = {63, 0, 9, 50, 48, 7, 31, 60};
        uint8_t packed[12] = {};
        for (int j = 0; j < 4; ++j) {
            packed[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
            packed[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
            packed[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
        }
        for (int j = 0; j < 8; ++j) {
            uint8_t s = 0, m = 0;
            kvchat::get_scale_min(j, packed, s, m);
            QCOMPARE(int(s), int(sc[j]));
            QCOMPARE(int(m), int(mn[j]));
        }
    }

    void typeTraitsRefusesUnknownIds() {
        // 4 and 5 were Q4_2/Q4_3 (removed), 16..29 are the IQ and integer types, 31+ newer ones.
        for (uint32_t id : {4u, 5u, 16u, 20u, 24u, 26u, 28u, 29u, 31u, 34u, 39u, 1000u, 0xffffffffu})
            QVERIFY2(!kvchat::type_traits(id).has_value(), qPrintable(QString::number(id)));
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::traits(TensorType(4)));
        std::vector<float> out(32);
        std::vector<uint8_t> in(64);
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::dequantize_row(TensorType(17), in.data(), out.data(), 32));
    }

    void typeTraitsOfKnownIds() {
        for (const SpecRow& row : kSpec) {
            const auto t = kvchat::type_traits(uint32_t(row.type));
            QVERIFY2(t.has_value(), row.name);
            QCOMPARE(QString::fromLatin1(t->name.data(), int(t->name.size())), QString::fromLatin1(row.name));
            QCOMPARE(t->block_elems, row.block_elems);
            QCOMPARE(t->block_bytes, row.block_bytes);
            QCOMPARE(kvchat::traits(row.type).block_bytes, row.block_bytes);
        }
    }

    void rowBytes() {
        for (const SpecRow& row : kSpec) {
            QCOMPARE(kvchat::row_bytes(row.type, 0), size_t(0));
            QCOMPARE(kvchat::row_bytes(row.type, 4096), size_t(4096 / row.block_elems) * row.block_bytes);
            QCOMPARE(kvchat::row_bytes(row.type, 3 * row.block_elems), 3 * row.block_bytes);
            if (row.block_elems > 1) {
                QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::row_bytes(row.type, row.block_elems + 1));
                std::vector<float> x(size_t(row.block_elems) * 2);
                std::vector<uint8_t> q(row.block_bytes * 2);
                QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::quantize_row(row.type, x.data(), q.data(), 33));
            }
            QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::row_bytes(row.type, -row.block_elems));
        }
        // A Gemma-sized row in the common formats, from the bits-per-weight the spec states.
        QCOMPARE(kvchat::row_bytes(TensorType::Q4_0, 640), size_t(640 * 4.5 / 8));
        QCOMPARE(kvchat::row_bytes(TensorType::Q8_0, 640), size_t(640 * 8.5 / 8));
        QCOMPARE(kvchat::row_bytes(TensorType::Q4_K, 2048), size_t(2048 * 4.5 / 8));
        QCOMPARE(kvchat::row_bytes(TensorType::Q6_K, 2048), size_t(2048 * 6.5625 / 8));
    }

private:
    __attribute__((target("f16c"))) static uint16_t hardware_fp16(float f) {
        return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    }
};

QTEST_GUILESS_MAIN(TestTensorType)
#include "test_tensor_type.moc"
