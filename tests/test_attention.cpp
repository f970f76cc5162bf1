// The attention kernel against a naive double-precision attention: random queries, keys and
// values over f32 views (in order, as rings with empty slots, split in several runs) and KIVI
// blocks, with causal, sliding-window and sink visibility, softcap, tiles of many shapes, the
// decode path that splits one tile across threads, and head sizes that are not multiples of 8.
// Also: results do not depend on the thread count or on how the same slots are split into views.
#include "engine/cache/attention.h"
#include "engine/compute/thread_pool.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
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
        d.kivi = KiviFormat(c.quant_bits, 16, 16, kv_dim);
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
        // name, heads, kv heads, head_dim, queries, held, window, sinks, q_sink, softcap, views, ring, bits, quantized
        QTest::newRow("gemma decode short") << 4 << 1 << 256 << 1 << 40 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0;
        QTest::newRow("gemma decode long (split)") << 4 << 1 << 256 << 1 << 900 << 0 << 0 << false << 0.0f << 2 << false << 0 << 0;
        QTest::newRow("gemma decode long sliding") << 4 << 1 << 256 << 1 << 1200 << 512 << 0 << false << 0.0f << 3 << true << 0 << 0;
        QTest::newRow("gemma turn") << 4 << 1 << 256 << 26 << 470 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0;
        QTest::newRow("gemma turn sliding ring") << 4 << 1 << 256 << 26 << 700 << 512 << 0 << false << 0.0f << 2 << true << 0 << 0;
        QTest::newRow("gemma prefill chunk") << 4 << 1 << 256 << 70 << 130 << 64 << 0 << false << 0.0f << 1 << false << 0 << 0;
        QTest::newRow("odd rows and columns") << 3 << 1 << 64 << 7 << 33 << 0 << 0 << false << 0.0f << 3 << false << 0 << 0;
        QTest::newRow("head_dim 12") << 2 << 2 << 12 << 5 << 19 << 0 << 0 << false << 0.0f << 2 << true << 0 << 0;
        QTest::newRow("head_dim 20 decode split") << 2 << 1 << 20 << 1 << 600 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0;
        QTest::newRow("mha 8 kv heads") << 8 << 8 << 32 << 9 << 50 << 0 << 0 << false << 0.0f << 1 << false << 0 << 0;
        QTest::newRow("gqa 8/2 window 7") << 8 << 2 << 32 << 13 << 60 << 7 << 0 << false << 0.0f << 2 << false << 0 << 0;
        QTest::newRow("sinks with q_sink") << 4 << 2 << 64 << 6 << 40 << 8 << 3 << true << 0.0f << 2 << true << 0 << 0;
        QTest::newRow("sinks decode split") << 4 << 1 << 64 << 1 << 800 << 100 << 4 << true << 0.0f << 2 << true << 0 << 0;
        QTest::newRow("softcap") << 4 << 1 << 64 << 11 << 30 << 0 << 0 << false << 5.0f << 1 << false << 0 << 0;
        QTest::newRow("kivi 4-bit") << 4 << 1 << 64 << 9 << 70 << 0 << 0 << false << 0.0f << 1 << false << 4 << 40;
        QTest::newRow("kivi 2-bit window") << 4 << 2 << 32 << 5 << 90 << 33 << 0 << false << 0.0f << 2 << false << 2 << 70;
        QTest::newRow("kivi 8-bit decode split") << 2 << 1 << 64 << 1 << 700 << 0 << 0 << false << 0.0f << 1 << false << 8 << 650;
    }

    void matchesDoubleReference() {
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
        c.n_head = n_head, c.n_kv = n_kv, c.hd = hd, c.n_q = n_q, c.held = held, c.window = window, c.sinks = sinks;
        c.sink_q = sink_q, c.softcap = softcap, c.views = views, c.ring = ring, c.quant_bits = quant_bits;
        c.quant_tokens = quant_tokens;
        const Data d = make(c, 1234u + static_cast<uint32_t>(held * 31 + n_q));
        const std::vector<double> ref = reference(c, d);
        const std::vector<float> one = run(c, d, c.views, 1);
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
            worst = std::max(worst, std::abs(double(one[i]) - ref[i]));
            scale = std::max(scale, std::abs(ref[i]));
        }
        // f32 products of head_dim terms and an exp within ~2 ulp: well under 1e-5 of the
        // outputs' size; quantized keys add the rounding of (q ⊙ scale)·codes + q·zero.
        const double bound = (quant_bits > 0 ? 2e-5 : 5e-6) * scale;
        QVERIFY2(worst <= bound, qPrintable(QString("max error %1 > %2").arg(worst).arg(bound)));
        // Bit-equal whatever the thread count (decode splits one tile across threads) and
        // however the same slots are cut into views.
        for (int threads : {2, 3, 5}) QVERIFY2(run(c, d, c.views, threads) == one, qPrintable(QString("threads %1").arg(threads)));
        QVERIFY(run(c, d, 1, 2) == one);
        QVERIFY(run(c, d, 4, 1) == one);
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
