// The attention kernel against a naive double-precision attention: random queries, keys and
// values over f32 views (in order, as rings with empty slots, split in several runs) and KIVI
// blocks, with causal, sliding-window and sink visibility, softcap, tiles of many shapes, the
// decode path that splits one tile across threads, and head sizes that are not multiples of 8.
// Also: results do not depend on the thread count or on how the same slots are split into views.
#include "engine/compute/attention.h"
#include "engine/compute/attention_kernels.h"
#include "engine/compute/kv_dtype.h"
#include "engine/compute/matmul.h"
#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

// AttentionInput has a member named like Qt's `slots` keyword.
#undef slots

using namespace kvchat;

namespace {

struct Case {
    int n_head = 4, n_kv = 1, hd = 256;
    int n_q = 1;
    int held = 40;        // slots before the queries' own tokens
    int window = 0, sinks = 0;
    bool sink_q = false;  // pass a separately rotated q_sink
    float softcap = 0.0f;
    int views = 1;        // the held f32 slots split into this many runs
    bool ring = false;    // slots stored out of position order, with empty slots in between
    int quant_bits = 0;   // > 0: the oldest held tokens live in KIVI blocks of 16
    int quant_tokens = 0;
    int value_group = 16;
};

struct Data {
    std::vector<float> q, qs;
    std::vector<int32_t> qpos;
    // Per token: position, key, value (kv_dim floats each); the first quant_tokens go to blocks.
    std::vector<int32_t> pos;
    std::vector<float> k, v;
    KiviFormat kivi;
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<int32_t> block_first, block_count;
    // The f32 slots as stored: possibly permuted, with empties.
    std::vector<float> kv;  // stride 2*kv_dim: k then v
    std::vector<int32_t> slot_pos;
    std::vector<float> newk, newv;
};

Data make(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int kv_dim = c.n_kv * c.hd, q_dim = c.n_head * c.hd;
    const int total = c.held + c.n_q;
    Data d;
    d.q.resize(static_cast<size_t>(c.n_q) * q_dim);
    for (float& x : d.q) x = nd(rng) * 0.6f;
    if (c.sink_q) {
        d.qs.resize(d.q.size());
        for (float& x : d.qs) x = nd(rng) * 0.6f;
    }
    d.k.resize(static_cast<size_t>(total) * kv_dim);
    d.v.resize(d.k.size());
    for (float& x : d.k) x = nd(rng) * 0.6f;
    for (float& x : d.v) x = nd(rng);
    for (int i = 0; i < total; ++i) d.pos.push_back(i);
    for (int t = 0; t < c.n_q; ++t) d.qpos.push_back(c.held + t);
    if (c.quant_bits > 0) {
        d.kivi = KiviFormat(c.quant_bits, 16, c.value_group, kv_dim);
        for (int first = 0; first < c.quant_tokens; first += 16) {
            const int count = std::min(16, c.quant_tokens - first);
            std::vector<uint8_t> b(d.kivi.block_bytes);
            // Interleave k and v rows as the cache does (stride 2*kv_dim).
            std::vector<float> rows(static_cast<size_t>(count) * 2 * kv_dim);
            for (int j = 0; j < count; ++j) {
                std::memcpy(rows.data() + static_cast<size_t>(j) * 2 * kv_dim, d.k.data() + static_cast<size_t>(first + j) * kv_dim, kv_dim * 4);
                std::memcpy(rows.data() + (static_cast<size_t>(j) * 2 + 1) * kv_dim, d.v.data() + static_cast<size_t>(first + j) * kv_dim, kv_dim * 4);
            }
            kivi_quantize_block(d.kivi, rows.data(), rows.data() + kv_dim, 2 * kv_dim, count, b.data());
            // The reference sees what the blocks hold.
            for (int j = 0; j < count; ++j)
                kivi_dequantize_token(d.kivi, b.data(), j, d.k.data() + static_cast<size_t>(first + j) * kv_dim,
                                      d.v.data() + static_cast<size_t>(first + j) * kv_dim);
            d.blocks.push_back(std::move(b));
            d.block_first.push_back(first);
            d.block_count.push_back(count);
        }
    }
    // Held f32 slots (after the quantized ones), optionally permuted with empty slots.
    std::vector<int> order;
    for (int i = c.quant_tokens; i < c.held; ++i) order.push_back(i);
    if (c.ring) {
        std::rotate(order.begin(), order.begin() + static_cast<long>(order.size() / 3), order.end());
        for (size_t i = 0; i < order.size(); i += 5) order.insert(order.begin() + static_cast<long>(i), -1);
    }
    for (int i : order) {
        d.slot_pos.push_back(i < 0 ? INT32_MAX : i);
        for (int x = 0; x < kv_dim; ++x) d.kv.push_back(i < 0 ? 1e30f : d.k[static_cast<size_t>(i) * kv_dim + x]);
        for (int x = 0; x < kv_dim; ++x) d.kv.push_back(i < 0 ? 1e30f : d.v[static_cast<size_t>(i) * kv_dim + x]);
    }
    d.newk.assign(d.k.begin() + static_cast<long>(c.held) * kv_dim, d.k.end());
    d.newv.assign(d.v.begin() + static_cast<long>(c.held) * kv_dim, d.v.end());
    return d;
}

AttentionInput input(const Case& c, const Data& d, int views) {
    const int kv_dim = c.n_kv * c.hd;
    AttentionInput in;
    in.q = d.q.data();
    in.q_sink = c.sink_q ? d.qs.data() : nullptr;
    in.qpos = d.qpos.data();
    in.n_q = c.n_q;
    in.window = c.window;
    in.sink_end = c.sinks;
    const int64_t n = static_cast<int64_t>(d.slot_pos.size());
    for (int i = 0; i < views; ++i) {
        const int64_t a = n * i / views, b = n * (i + 1) / views;
        if (b > a)
            in.slots.push_back({d.kv.data() + a * 2 * kv_dim, d.kv.data() + a * 2 * kv_dim + kv_dim, d.slot_pos.data() + a, b - a,
                                2 * kv_dim});
    }
    in.slots.push_back({d.newk.data(), d.newv.data(), d.qpos.data(), c.n_q, kv_dim});
    if (!d.blocks.empty()) {
        in.kivi = &d.kivi;
        for (size_t b = 0; b < d.blocks.size(); ++b) in.blocks.push_back({d.blocks[b].data(), d.block_first[b], d.block_count[b]});
    }
    return in;
}

AttentionShape shape_of(const Case& c) {
    AttentionShape s;
    s.n_head = c.n_head;
    s.n_head_kv = c.n_kv;
    s.head_dim = c.hd;
    s.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    s.softcap = c.softcap;
    return s;
}

std::vector<double> reference(const Case& c, const Data& d) {
    const int kv_dim = c.n_kv * c.hd, q_dim = c.n_head * c.hd, group = c.n_head / c.n_kv;
    const AttentionShape s = shape_of(c);
    std::vector<double> out(static_cast<size_t>(c.n_q) * q_dim, 0.0);
    for (int t = 0; t < c.n_q; ++t) {
        const int32_t p = d.qpos[static_cast<size_t>(t)];
        for (int h = 0; h < c.n_head; ++h) {
            const int g = h / group;
            std::vector<double> sc;
            std::vector<int> who;
            for (size_t i = 0; i < d.pos.size(); ++i) {
                const int32_t sp = d.pos[i];
                const bool quant = static_cast<int>(i) < c.quant_tokens;
                const bool sink = !quant && sp < c.sinks;
                if (sp > p || (!sink && c.window > 0 && p - sp >= c.window)) continue;
                const float* qv = (sink && c.sink_q ? d.qs.data() : d.q.data()) + static_cast<size_t>(t) * q_dim + h * c.hd;
                double x = 0.0;
                for (int e = 0; e < c.hd; ++e) x += double(qv[e]) * d.k[i * kv_dim + static_cast<size_t>(g * c.hd + e)];
                x *= s.scale;
                if (c.softcap > 0.0f) x = c.softcap * std::tanh(x / c.softcap);
                sc.push_back(x);
                who.push_back(static_cast<int>(i));
            }
            const double m = *std::max_element(sc.begin(), sc.end());
            double sum = 0.0;
            for (double& x : sc) sum += (x = std::exp(x - m));
            double* o = out.data() + static_cast<size_t>(t) * q_dim + h * c.hd;
            for (size_t a = 0; a < sc.size(); ++a)
                for (int e = 0; e < c.hd; ++e) o[e] += sc[a] / sum * d.v[static_cast<size_t>(who[a]) * kv_dim + static_cast<size_t>(g * c.hd + e)];
        }
    }
    return out;
}

std::vector<float> run(const Case& c, const Data& d, int views, int threads) {
    ThreadPool pool(threads);
    std::vector<float> out(static_cast<size_t>(c.n_q) * c.n_head * c.hd, -7.0f);
    attend(input(c, d, views), shape_of(c), out.data(), pool);
    return out;
}

// The input with its slot views stored as `t` (keys and values each in a buffer of their own, kept
// in `keep`): what a cache of that dtype hands attend().
AttentionInput stored_as(AttentionInput in, KvDtype t, int kv_dim, std::vector<std::vector<uint8_t>>& keep) {
    in.dtype = t;
    for (SlotView& sv : in.slots) {
        const int64_t len = (sv.n - 1) * sv.stride + kv_dim;
        for (const void** p : {&sv.k, &sv.v}) {
            keep.emplace_back(static_cast<size_t>(len) * kv_dtype_bytes(t));
            kv_store_row(t, static_cast<const float*>(*p), keep.back().data(), len);
            *p = keep.back().data();
        }
    }
    return in;
}

// --- llama.cpp's order, scalar -----------------------------------------------------------------
// attend_reference_order stated plainly (engine/cache/attention_reference_order.cpp has the why): the
// lanes are llama.cpp's, position p in lane p % 16.

// _mm512_reduce_add_ps: lane i + lane i + 8, then + 4, then (0 + 2) + (1 + 3).
float tree16(const float* l) {
    float a[8], b[4];
    for (int i = 0; i < 8; ++i) a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

// ggml_v_expf (AVX-512), one lane.
float ggml_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                             std::fma(0x1.ffffecp-1f, b, 1.0f));
    if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return std::ldexp(j, int(n));
}

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

// Query t, head h; decode: a call of one query (ggml_vec_dot_f16's four accumulators).
void reference_order_row(const Case& c, const Data& d, int t, int h, float* o) {
    const int kv_dim = c.n_kv * c.hd, q_dim = c.n_head * c.hd, g = h / (c.n_head / c.n_kv);
    const bool decode = c.n_q == 1;
    const int32_t p = d.qpos[size_t(t)];
    const float* q = d.q.data() + size_t(t) * q_dim + h * c.hd;
    auto seen = [&](int32_t sp) { return sp <= p && (c.window == 0 || p - sp < c.window); };
    std::vector<float> e(size_t(p) + 16, 0.0f);
    std::vector<bool> vis(e.size(), false);
    float m = -INFINITY;
    for (int32_t sp = 0; sp <= p; ++sp) {
        if (!seen(sp)) continue;
        const float* k = d.k.data() + size_t(sp) * kv_dim + g * c.hd;
        // Decode sums the dimensions past the last multiple of 64 in double, after the lanes.
        const int lanes_end = decode ? c.hd / 64 * 64 : c.hd;
        float lanes[4][16] = {};
        for (int x = 0; x < lanes_end; ++x) {
            const int set = decode ? (x / 16) % 4 : 0;
            lanes[set][x % 16] = std::fma(k[x], q[x], lanes[set][x % 16]);
        }
        float l[16];
        for (int i = 0; i < 16; ++i) l[i] = (lanes[0][i] + lanes[2][i]) + (lanes[1][i] + lanes[3][i]);
        double dot = tree16(decode ? l : lanes[0]);
        for (int x = lanes_end; x < c.hd; ++x) dot += double(q[x] * k[x]);
        e[size_t(sp)] = float(dot);
        vis[size_t(sp)] = true;
        m = std::max(m, e[size_t(sp)]);
    }
    double sum = 0.0;
    for (int32_t b = 0; b <= p; b += 16) {
        for (int i = 0; i < 16; ++i) e[size_t(b + i)] = vis[size_t(b + i)] ? ggml_expf(e[size_t(b + i)] - m) : 0.0f;
        sum += double(tree16(&e[size_t(b)]));
    }
    const float inv = float(1.0 / sum);
    for (float& x : e) x = round_f16(x * inv);
    for (int x = 0; x < c.hd; ++x) {
        float A[64] = {};
        for (int32_t sp = 0; sp <= p; ++sp)
            if (vis[size_t(sp)]) {
                float& a = A[decode ? sp % 64 : sp % 16];
                a = std::fma(d.v[size_t(sp) * kv_dim + g * c.hd + x], e[size_t(sp)], a);
            }
        float l[16];
        for (int j = 0; j < 16; ++j) l[j] = decode ? (A[j] + A[32 + j]) + (A[16 + j] + A[48 + j]) : A[j];
        o[x] = tree16(l);
    }
}

// The current data row of matchesDoubleReference_data as a Case.
Case fetchedCase() {
    Case c;
    QFETCH(int, n_head);
    QFETCH(int, n_kv);
    QFETCH(int, hd);
    QFETCH(int, n_q);
    QFETCH(int, held);
    QFETCH(int, window);
    QFETCH(int, sinks);
    QFETCH(bool, sink_q);
    QFETCH(float, softcap);
    QFETCH(int, views);
    QFETCH(bool, ring);
    QFETCH(int, quant_bits);
    QFETCH(int, quant_tokens);
    QFETCH(int, value_group);
    c.value_group = value_group;
    c.n_head = n_head, c.n_kv = n_kv, c.hd = hd, c.n_q = n_q, c.held = held, c.window = window, c.sinks = sinks;
    c.sink_q = sink_q, c.softcap = softcap, c.views = views, c.ring = ring, c.quant_bits = quant_bits;
    c.quant_tokens = quant_tokens;
    return c;
}

}  // namespace

class TestAttention : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void matchesDoubleReference_data() {
        QTest::addColumn<int>("n_head");
        QTest::addColumn<int>("n_kv");
        QTest::addColumn<int>("hd");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("held");
        QTest::addColumn<int>("window");
        QTest::addColumn<int>("sinks");
        QTest::addColumn<bool>("sink_q");
        QTest::addColumn<float>("softcap");
        QTest::addColumn<int>("views");
        QTest::addColumn<bool>("ring");
        QTest::addColumn<int>("quant_bits");
        QTest::addColumn<int>("quant_tokens");
        QTest::addColumn<int>("value_group");  // channels sharing a quantized value's scale
        // name, heads, kv heads, head_dim, queries, held, window, sinks, q_sink, softcap, views, ring, bits, quantized, value group
        QTest::newRow("gemma decode short") << 4 << 1 << 256 << 1 << 40 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("gemma decode long (split)") << 4 << 1 << 256 << 1 << 900 << 0 << 0 << false << 0.0f << 2 << false << 0 << 0 << 16;
        QTest::newRow("gemma decode long sliding") << 4 << 1 << 256 << 1 << 1200 << 512 << 0 << false << 0.0f << 3 << true << 0 << 0 << 16;
        QTest::newRow("gemma turn") << 4 << 1 << 256 << 26 << 470 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("gemma turn sliding ring") << 4 << 1 << 256 << 26 << 700 << 512 << 0 << false << 0.0f << 2 << true << 0 << 0 << 16;
        QTest::newRow("gemma prefill chunk") << 4 << 1 << 256 << 70 << 130 << 64 << 0 << false << 0.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("odd rows and columns") << 3 << 1 << 64 << 7 << 33 << 0 << 0 << false << 0.0f << 3 << false << 0 << 0 << 16;
        QTest::newRow("head_dim 12") << 2 << 2 << 12 << 5 << 19 << 0 << 0 << false << 0.0f << 2 << true << 0 << 0 << 16;
        QTest::newRow("head_dim 20 decode split") << 2 << 1 << 20 << 1 << 600 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("mha 8 kv heads") << 8 << 8 << 32 << 9 << 50 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("gqa 8/2 window 7") << 8 << 2 << 32 << 13 << 60 << 7 << 0 << false << 0.0f << 2 << false << 0 << 0 << 16;
        QTest::newRow("sinks with q_sink") << 4 << 2 << 64 << 6 << 40 << 8 << 3 << true << 0.0f << 2 << true << 0 << 0 << 16;
        QTest::newRow("sinks decode split") << 4 << 1 << 64 << 1 << 800 << 100 << 4 << true << 0.0f << 2 << true << 0 << 0 << 16;
        QTest::newRow("softcap") << 4 << 1 << 64 << 11 << 30 << 0 << 0 << false << 5.0f << 1 << false << 0 << 0 << 16;
        QTest::newRow("kivi 4-bit") << 4 << 1 << 64 << 9 << 70 << 0 << 0 << false << 0.0f << 1 << false << 4 << 40 << 16;
        QTest::newRow("kivi 2-bit window") << 4 << 2 << 32 << 5 << 90 << 33 << 0 << false << 0.0f << 2 << false << 2 << 70 << 16;
        QTest::newRow("kivi 8-bit decode split") << 2 << 1 << 64 << 1 << 700 << 0 << 0 << false << 0.0f << 1 << false << 8 << 650 << 16;
        // The cache's own value groups of 64 channels: one, two or three a head (the zero sums'
        // lanes), and a decode step's three or six rows a kv head (SmolLM2's 9/3; tiles of rows
        // cut 4 + 2).
        QTest::newRow("kivi decode three rows a kv head") << 9 << 3 << 64 << 1 << 600 << 0 << 0 << false << 0.0f << 1 << false << 4 << 560 << 64;
        QTest::newRow("kivi decode six rows, two groups") << 6 << 1 << 128 << 1 << 300 << 0 << 0 << false << 0.0f << 2 << false << 2 << 256 << 64;
        // A decode step's 1-4 rows a kv head over blocks of each width (the AVX-512 decode
        // kernel: two columns a register), with windows, sinks and rings around them.
        QTest::newRow("kivi 2-bit decode one row a kv head window") << 4 << 4 << 32 << 1 << 300 << 100 << 0 << false << 0.0f << 2 << true << 2 << 250 << 16;
        QTest::newRow("kivi 4-bit decode four rows head_dim 256") << 4 << 1 << 256 << 1 << 400 << 0 << 0 << false << 0.0f << 1 << false << 4 << 320 << 64;
        QTest::newRow("kivi 8-bit decode sinks window") << 6 << 2 << 64 << 1 << 500 << 64 << 4 << true << 0.0f << 2 << true << 8 << 420 << 16;
        // ... and in one value group of 64 channels (the zero sums ride along the values).
        QTest::newRow("kivi 8-bit decode one value group, sinks") << 6 << 2 << 64 << 1 << 500 << 0 << 4 << true << 0.0f << 2 << true << 8 << 420 << 64;
        QTest::newRow("kivi 2-bit decode one value group, two rows") << 4 << 2 << 64 << 1 << 330 << 0 << 0 << false << 0.0f << 1 << false << 2 << 300 << 64;
        // More than four value groups a head (the zero sums' loop over groups, not registers).
        QTest::newRow("kivi eight value groups a head") << 4 << 2 << 128 << 3 << 200 << 0 << 0 << false << 0.0f << 1 << false << 4 << 160 << 16;
        QTest::newRow("kivi decode eight value groups a head") << 6 << 2 << 128 << 1 << 300 << 0 << 0 << false << 0.0f << 2 << false << 2 << 256 << 16;
        QTest::newRow("kivi turn three groups") << 6 << 2 << 192 << 5 << 200 << 0 << 0 << false << 0.0f << 1 << false << 8 << 160 << 64;
    }

    void matchesDoubleReference() {
        const Case c = fetchedCase();
        const Data d = make(c, 1234u + static_cast<uint32_t>(c.held * 31 + c.n_q));
        const std::vector<double> ref = reference(c, d);
        const std::vector<float> one = run(c, d, c.views, 1);
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
            worst = std::max(worst, std::abs(double(one[i]) - ref[i]));
            scale = std::max(scale, std::abs(ref[i]));
        }
        // f32 products of head_dim terms and an exp within ~2 ulp: well under 1e-5 of the
        // outputs' size; quantized keys add the rounding of (q ⊙ scale)·codes + q·zero.
        const double bound = (c.quant_bits > 0 ? 2e-5 : 5e-6) * scale;
        QVERIFY2(worst <= bound, qPrintable(QString("max error %1 > %2").arg(worst).arg(bound)));
        // Bit-equal whatever the thread count (decode splits one tile across threads) and
        // however the same slots are cut into views.
        for (int threads : {2, 3, 5}) QVERIFY2(run(c, d, c.views, threads) == one, qPrintable(QString("threads %1").arg(threads)));
        QVERIFY(run(c, d, 1, 2) == one);
        QVERIFY(run(c, d, 4, 1) == one);
    }

    // f16 probabilities (GGUF models) take llama.cpp's order: every output bit for bit what
    // reference_order_row states, at both SIMD levels, for any thread count and any cut into views.
    // (The fp16 probabilities absorb most last-bit differences of a score; test_gemma3_golden and
    // tests/bench/dump_kvchat_tensors check the scores of the default model against llama.cpp itself.)
    void referenceOrderIsExact_data() {
        QTest::addColumn<int>("n_head");
        QTest::addColumn<int>("n_kv");
        QTest::addColumn<int>("hd");
        QTest::addColumn<int>("n_q");
        QTest::addColumn<int>("held");
        QTest::addColumn<int>("window");
        QTest::addColumn<bool>("ring");
        QTest::newRow("gemma decode short") << 4 << 1 << 256 << 1 << 40 << 0 << false;
        QTest::newRow("gemma decode long") << 4 << 1 << 256 << 1 << 900 << 0 << false;
        QTest::newRow("gemma decode sliding ring") << 4 << 1 << 256 << 1 << 1200 << 512 << true;
        QTest::newRow("gemma prefill") << 4 << 1 << 256 << 70 << 130 << 0 << false;
        QTest::newRow("gemma turn sliding ring") << 4 << 1 << 256 << 26 << 700 << 512 << true;
        QTest::newRow("two queries") << 4 << 1 << 256 << 2 << 300 << 0 << false;
        QTest::newRow("gqa 8/2 head_dim 80") << 8 << 2 << 80 << 13 << 60 << 7 << false;
        QTest::newRow("gqa decode head_dim 80") << 8 << 2 << 80 << 1 << 100 << 0 << false;
        // SmolLM2's shape (three query heads per kv head, head_dim 64): a decode step's rows of a
        // kv head cut into parts for the threads, short (one thread takes it) and long.
        QTest::newRow("smollm2 decode short") << 9 << 3 << 64 << 1 << 50 << 0 << false;
        QTest::newRow("smollm2 decode long") << 9 << 3 << 64 << 1 << 700 << 0 << false;
        // Fewer than four rows a kv head reduce 16 columns' trees together: blocks cut short by
        // the range's end, and columns without a slot (a ring's window) inside a block.
        QTest::newRow("smollm2 decode sliding ring") << 9 << 3 << 64 << 1 << 1203 << 333 << true;
        QTest::newRow("two rows a kv head decode") << 4 << 2 << 64 << 1 << 517 << 0 << false;
        QTest::newRow("one row a kv head decode head_dim 128") << 4 << 4 << 128 << 1 << 389 << 0 << false;
    }
    void referenceOrderIsExact() {
        Case c;
        QFETCH(int, n_head);
        QFETCH(int, n_kv);
        QFETCH(int, hd);
        QFETCH(int, n_q);
        QFETCH(int, held);
        QFETCH(int, window);
        QFETCH(bool, ring);
        c.n_head = n_head, c.n_kv = n_kv, c.hd = hd, c.n_q = n_q, c.held = held, c.window = window, c.ring = ring;
        c.views = 2;
        Data d = make(c, 99u + static_cast<uint32_t>(held));
        // As the cache holds them: fp16 values (q already scaled).
        for (auto* v : {&d.q, &d.k, &d.v, &d.kv, &d.newk, &d.newv})
            for (float& x : *v) x = round_f16(x);
        std::vector<float> want(static_cast<size_t>(c.n_q) * c.n_head * c.hd);
        for (int t = 0; t < c.n_q; ++t)
            for (int h = 0; h < c.n_head; ++h) reference_order_row(c, d, t, h, want.data() + (size_t(t) * c.n_head + h) * c.hd);
        AttentionShape shape = shape_of(c);
        shape.scale = 1.0f;
        shape.f16_rounding = true;
        for (const char* level : {"avx2", "auto"}) {
            force_simd_level(level);
            for (int threads : {1, 2, 3})
                for (int views : {1, 3}) {
                    AttentionInput in = input(c, d, views);
                    in.f16_probs = true;
                    QVERIFY(reference_order_applies(in, shape));
                    ThreadPool pool(threads);
                    std::vector<float> out(want.size(), -7.0f);
                    attend(in, shape, out.data(), pool);
                    for (size_t i = 0; i < out.size(); ++i)
                        QVERIFY2(std::memcmp(&out[i], &want[i], sizeof(float)) == 0,
                                 qPrintable(QString("%1, %2 threads, %3 views: output %4: %5 vs %6")
                                                .arg(level).arg(threads).arg(views).arg(i)
                                                .arg(double(out[i]), 0, 'g', 9).arg(double(want[i]), 0, 'g', 9)));
                    // The same slots stored as f16, as the cache keeps them: read in place, the
                    // same bits.
                    std::vector<std::vector<uint8_t>> keep;
                    const AttentionInput in16 = stored_as(in, KvDtype::F16, c.n_kv * c.hd, keep);
                    QVERIFY(reference_order_applies(in16, shape));
                    std::vector<float> out16(want.size(), -7.0f);
                    attend(in16, shape, out16.data(), pool);
                    QVERIFY2(std::memcmp(out16.data(), want.data(), want.size() * sizeof(float)) == 0,
                             qPrintable(QString("%1, %2 threads, %3 views: f16 slots").arg(level).arg(threads).arg(views)));
                }
        }
        qInfo("SIMD level of this machine: %s (both levels checked)", simd_level());
        force_simd_level(nullptr);
    }

    // attend's own loops (every case above: quantized blocks, sinks, windows, softcap, odd
    // head_dims) compute the same bits at every SIMD level: the AVX-512 kernels keep the AVX2
    // loops' chains and trees. Slots as f32, f16 and bf16, 1 and 3 threads.
    void simdLevelsAgreeBitForBit_data() { matchesDoubleReference_data(); }
    void simdLevelsAgreeBitForBit() {
        if (QString(simd_level()) == "avx2") QSKIP("this CPU runs only the AVX2 loops");
        const Case c = fetchedCase();
        Data d = make(c, 4321u + static_cast<uint32_t>(c.held));
        for (auto* v : {&d.k, &d.v, &d.kv, &d.newk, &d.newv})
            for (float& x : *v) x = round_f16(x);  // on every stored format's grid: f16 below
        for (KvDtype t : {KvDtype::F32, KvDtype::F16, KvDtype::BF16}) {
            if (t == KvDtype::BF16)
                for (auto* v : {&d.k, &d.v, &d.kv, &d.newk, &d.newv})
                    for (float& x : *v) x = bf16_to_fp32(fp32_to_bf16(x));
            for (int threads : {1, 3}) {
                std::vector<float> out[2];
                for (int i = 0; i < 2; ++i) {
                    force_simd_level(i == 0 ? "avx2" : nullptr);
                    std::vector<std::vector<uint8_t>> keep;
                    AttentionInput in = input(c, d, c.views);
                    if (t != KvDtype::F32) in = stored_as(in, t, c.n_kv * c.hd, keep);
                    ThreadPool pool(threads);
                    out[i].assign(static_cast<size_t>(c.n_q) * c.n_head * c.hd, -7.0f);
                    attend(in, shape_of(c), out[i].data(), pool);
                }
                force_simd_level(nullptr);
                for (size_t i = 0; i < out[0].size(); ++i)
                    QVERIFY2(std::memcmp(&out[0][i], &out[1][i], sizeof(float)) == 0,
                             qPrintable(QString("dtype %1, %2 threads: output %3: avx2 %4 vs %5 %6")
                                            .arg(int(t)).arg(threads).arg(i).arg(double(out[0][i]), 0, 'g', 9)
                                            .arg(simd_level()).arg(double(out[1][i]), 0, 'g', 9)));
            }
        }
    }

    // Slots stored as f16 or bf16 are read in place (converted in registers): with values on
    // their grid, every output equals that of the same values in f32, whatever the case.
    void storedFormatsReadAlike_data() { matchesDoubleReference_data(); }
    void storedFormatsReadAlike() {
        const Case c = fetchedCase();
        for (KvDtype t : {KvDtype::F16, KvDtype::BF16}) {
            Data d = make(c, 555u + static_cast<uint32_t>(c.held));
            for (auto* v : {&d.k, &d.v, &d.kv, &d.newk, &d.newv})
                for (float& x : *v) {
                    uint16_t h;
                    kv_store_row(t, &x, &h, 1);
                    kv_load_row(t, &h, &x, 1);
                }
            ThreadPool pool(2);
            const std::vector<float> want = run(c, d, c.views, 2);
            std::vector<std::vector<uint8_t>> keep;
            std::vector<float> out(want.size(), -7.0f);
            attend(stored_as(input(c, d, c.views), t, c.n_kv * c.hd, keep), shape_of(c), out.data(), pool);
            QVERIFY2(std::memcmp(out.data(), want.data(), want.size() * sizeof(float)) == 0, kv_dtype_name(t));
        }
    }

    // The AVX-512 exp (one _mm512_scalef_ps, as llama.cpp's AVX-512 build) gives ggml_expf8's bits
    // (two exact scalings) over a sweep of float bit patterns: every exponent, both signs, the
    // limits where the result under- or overflows, and the infinities.
    void expLevelsAgree() {
        if (QString(simd_level()) == "avx2") QSKIP("this CPU runs only the AVX2 loops");
        std::vector<float> x;
        for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
            const uint32_t bits = static_cast<uint32_t>(u);
            float f;
            std::memcpy(&f, &bits, 4);
            if (!std::isnan(f)) x.push_back(f);
        }
        for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.73f, -87.33f, -103.97f, -104.0f, 133.0f, 133.1f, -133.0f,
                        -133.1f, 1e-45f, -1e-45f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
            x.push_back(f);
        while (x.size() % 16) x.push_back(0.5f);
        std::vector<float> y16(x.size()), y8(x.size());
        attention_kernels::expf_avx512(x.data(), y16.data(), static_cast<int>(x.size()));
        attention_kernels::expf_avx2(x.data(), y8.data(), static_cast<int>(x.size()));
        for (size_t i = 0; i < x.size(); ++i)
            QVERIFY2(std::memcmp(&y16[i], &y8[i], 4) == 0, qPrintable(QString("exp(%1): %2 (AVX-512) vs %3 (AVX2)")
                                                                       .arg(double(x[i]), 0, 'g', 9).arg(double(y16[i]), 0, 'g', 9)
                                                                       .arg(double(y8[i]), 0, 'g', 9)));
    }

    // A decode row's softmax gives the same bits at both levels: masked columns, rows shorter
    // than a vector, a first column past 0, scores whose exps underflow, a row with nothing visible.
    void softmaxLevelsAgree() {
        if (QString(simd_level()) == "avx2") QSKIP("this CPU runs only the AVX2 loops");
        const auto softmax512 = attention_kernels::avx512_decode_kernels().softmax;
        std::mt19937 rng(77);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        int rows = 0;
        for (int c1 : {1, 7, 15, 16, 17, 40, 64, 65, 300, 1029})
            for (int c0 : {0, 16, 32})
                for (float scale : {0.1f, 3.0f, 40.0f, 400.0f})
                    for (float masked : {0.0f, 0.3f, 1.0f}) {
                        if (c0 >= c1) continue;
                        const int c_end = (c1 + 15) & ~15;
                        std::vector<float> a(static_cast<size_t>(c_end) + 16, 123.0f);
                        for (int c = c0; c < c1; ++c)
                            a[size_t(c)] = unit(rng) < masked ? -std::numeric_limits<float>::infinity() : normal(rng) * scale;
                        std::vector<float> b = a;
                        attention_kernels::softmax_row_avx2(a.data(), c0, c1);
                        softmax512(b.data(), c0, c1);
                        ++rows;
                        QVERIFY2(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                                 qPrintable(QString("columns [%1, %2), scale %3, masked %4").arg(c0).arg(c1).arg(double(scale)).arg(double(masked))));
                    }
        QVERIFY(rows > 200);
    }

    // attend keeps the quantized blocks' part of its column lists from one call to the next when
    // they would come out the same (the layers of a decode step). Calls on one thread whose lists
    // differ only a little each give what a fresh thread computes: the same blocks after more
    // slots, a window that cuts a block, fewer blocks, and back.
    void blockColumnsFollowEachCall() {
        auto quant = [](int held, int window, int quant_tokens) {
            Case c;
            c.n_head = 6, c.n_kv = 2, c.hd = 64, c.n_q = 1, c.held = held, c.window = window;
            c.quant_bits = 4, c.quant_tokens = quant_tokens, c.value_group = 64;
            return c;
        };
        const std::vector<Case> cases = {quant(700, 0, 640), quant(760, 0, 640), quant(700, 0, 640), quant(700, 600, 640),
                                         quant(700, 0, 512), quant(700, 0, 640), quant(760, 0, 640)};
        std::vector<Data> data;
        for (const Case& c : cases) data.push_back(make(c, 99u));
        for (int threads : {1, 2}) {
            for (size_t i = 0; i < cases.size(); ++i) {
                const std::vector<float> here = run(cases[i], data[i], 1, threads);
                std::vector<float> fresh;
                std::thread([&] { fresh = run(cases[i], data[i], 1, threads); }).join();
                QVERIFY2(here == fresh, qPrintable(QString("call %1, %2 threads").arg(i).arg(threads)));
            }
        }
    }

    // A query that sees nothing (every slot ahead of it) gets zeros, not NaN.
    void nothingVisibleGivesZeros() {
        Case c;
        c.n_head = 2, c.hd = 16, c.n_q = 1, c.held = 4;
        Data d = make(c, 7u);
        d.qpos[0] = 2;
        d.newk.assign(d.newk.size(), 0.0f);
        std::vector<float> out(static_cast<size_t>(c.n_head) * c.hd, -7.0f);
        ThreadPool pool(1);
        AttentionInput in = input(c, d, 1);
        in.slots.pop_back();  // only slots at positions 0..3; query at 2 sees 0..2
        for (int32_t& p : d.slot_pos) p += 10;  // now all ahead of the query
        attend(in, shape_of(c), out.data(), pool);
        for (float x : out) QCOMPARE(x, 0.0f);
    }
};

QTEST_GUILESS_MAIN(TestAttention)
#include "test_attention.moc"
