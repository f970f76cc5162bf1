// The cache's side of the backend boundary: a layer computes and moves its keys and values only
// through the backend it was made with (the append, attention, quantization, and the offload
// tier's file copies), so a backend that does something else with them (a GPU) sees every step.
// A backend that forwards to the CPU one and counts its calls stands in for such a backend; with
// a cap on its KV memory it stands for a GPU that is full, so the chat's fallback to an offloaded
// cache is checked everywhere (support/counting_backend.h).
#include "engine/cache/cache.h"
#include "engine/cache/convert.h"
#include "engine/cache/offload_tier.h"
#include "engine/cache/snapshot.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/conversation.h"
#include "engine/compute/backend.h"
#include "engine/compute/thread_pool.h"
#include "engine/model/model.h"
#include "engine/error.h"
#include "support/chat_turns.h"
#include "support/counting_backend.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

namespace {

using kvchat::test::CountingBackend;

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
    static constexpr const char* kQuestion = "the cat sat on the mat";

    // A chat-sized llama (every layer global, so a dynamic cache grows in all of them).
    struct Chat {
        std::unique_ptr<QTemporaryDir> dir = std::make_unique<QTemporaryDir>();
        std::unique_ptr<kvchat::Model> model;
        int layers = 6;
    };
    static Chat chat_model() {
        Chat c;
        kvchat::test::TinyModelSpec s = kvchat::test::chat_sized_spec(c.layers);
        s.arch = "llama";
        s.sliding_window = 0;
        const std::string path = (c.dir->path() + "/chat.gguf").toStdString();
        kvchat::test::write_tiny_gguf(s, path);
        c.model = kvchat::Model::load(path);
        return c;
    }
    // The greedy answers to `questions` in a dynamic conversation on a backend without a cap;
    // need: the most KV memory they took.
    static std::vector<std::string> uncapped_answers(const Chat& chat, const std::vector<std::string>& questions, int64_t& need) {
        CountingBackend free(2);
        kvchat::Conversation c(*chat.model, free, kvchat::ChatTemplate::for_model(*chat.model), "dynamic");
        std::vector<std::string> answers;
        for (const std::string& q : questions) answers.push_back(c.send(q, kvchat::test::greedy(8)).text);
        need = free.kv_use->peak;
        return answers;
    }
    // A cache of `spec` on `be` that holds `toks`.
    static std::unique_ptr<kvchat::Cache> filled(const Chat& chat, kvchat::Backend& be, const std::string& spec,
                                                 const std::vector<int32_t>& toks) {
        auto cache = chat.model->make_cache(be, spec);
        std::vector<float> none;
        chat.model->forward(be, *cache, toks.data(), static_cast<int64_t>(toks.size()), kvchat::Logits::None, none);
        return cache;
    }
    // Greedy turns of 8 tokens whose fallback to offloaded spills into the chat's folder.
    static kvchat::TurnOptions spilling_turn(const Chat& chat) {
        kvchat::TurnOptions o = kvchat::test::greedy(8);
        o.fallback_spec = "offloaded:dir=" + chat.dir->path().toStdString();
        return o;
    }
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
        QTest::newRow("dynamic") << "dynamic" << QStringList{"copy", "rope", "kv_store", "kv_copy", "attend"};
        QTest::newRow("sink") << "sink:window=8,sinks=2" << QStringList{"rope", "kv_store", "kv_copy", "attend"};
        QTest::newRow("quantized") << "quantized:nbits=4,residual=8,group=8"
                                   << QStringList{"kv_store", "kv_copy", "kv_quantize", "attend"};
        QTest::newRow("offloaded") << "offloaded" << QStringList{"kv_store", "kv_copy", "attend", "kv_write_file"};
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
        QVERIFY(counting.kv_allocs > 0);
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
            before = counting.kv_allocs;
            std::vector<float> part;
            for (size_t off = 0; off < toks.size(); ++off)
                model_->forward(counting, *cache, toks.data() + off, 1, kvchat::Logits::Last, part);
        }
        // Two fast buffers for the tier, and one staging area for the new tokens, which the
        // layers share (they attend one after another): not one per layer.
        QCOMPARE(before, 3);
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
        // A layer's memory each and the staging area; offloaded: the tier's two buffers and it.
        const int allocs = spec.startsWith("offloaded") ? 3 : kLayers + 1;
        QVERIFY2(counting.kv_allocs >= allocs, qPrintable(QString::number(counting.kv_allocs.load())));
        kvchat::convert(*loaded.cache, target.toStdString(), through(counting));
        QVERIFY(loaded.cache->backend() == &counting);
        const int attends = counting.calls["attend"];
        std::vector<float> got;
        model_->forward(counting, *loaded.cache, &next, 1, kvchat::Logits::Last, got);
        QCOMPARE(counting.calls["attend"], attends + kLayers);
        QVERIFY(got == want);
    }

    // The tier's prefetch thread out of memory (room for one layer's fast buffer at its size,
    // not two): the layer is read when it is used instead, with its bytes. Before, std::bad_alloc
    // left the prefetch thread and ended the process. Three layers, so the layers change buffers.
    void prefetchOutOfMemoryReadsTheLayerOnUse() {
        QTemporaryDir spill;
        CountingBackend be(1);
        kvchat::OffloadTier tier(spill.path().toStdString(), 3, be);
        const size_t n = 4096;
        std::vector<std::vector<uint8_t>> want(3);
        const size_t sizes[3] = {n, n, 4 * n};
        for (int l = 0; l < 3; ++l) {
            want[l].resize(sizes[l]);
            for (size_t i = 0; i < sizes[l]; ++i) want[l][i] = static_cast<uint8_t>(i * 13 + l * 7 + 1);
            std::memcpy(tier.acquire(l, 0, sizes[l]), want[l].data(), sizes[l]);
            tier.release(l, sizes[l], 0, sizes[l]);
        }
        // Buffers now: 4n (layer 2's) and n (layer 0's, prefetched).
        for (int l = 0; l < 2; ++l) {
            if (l == 1) {  // before layer 1's use starts layer 2's prefetch, which needs 8n
                be.kv_use->cap = static_cast<int64_t>(6 * n);
                be.kv_use->peak = be.kv_use->bytes.load();
            }
            const uint8_t* b = tier.acquire(l, sizes[l], sizes[l]);
            QVERIFY(std::equal(want[l].begin(), want[l].end(), b));
            tier.release(l, sizes[l], 0, 0);
        }
        const uint8_t* b = tier.acquire(2, sizes[2], sizes[2]);
        QVERIFY(std::equal(want[2].begin(), want[2].end(), b));
        QCOMPARE(tier.traffic(2).in_step, static_cast<int64_t>(sizes[2]));
        tier.release(2, sizes[2], 0, 0);
        QVERIFY(be.kv_use->peak <= be.kv_use->cap);
    }

    // A move that does not fit (offloaded -> dynamic, with room for the offloaded cache's buffers
    // and one layer more, not for every layer): std::bad_alloc, and the cache is the offloaded
    // one it was, with its tokens and the same next logits. The move frees the old layers before
    // it fills the new ones, so going back must give the new ones' memory back first: without
    // that, the cache came back empty.
    void aMoveThatDoesNotFitKeepsTheCache() {
        const Chat chat = chat_model();
        const std::string spec = "offloaded:dir=" + chat.dir->path().toStdString();
        const std::vector<int32_t> toks = tokens(40);
        std::vector<float> want, got;
        CountingBackend be(2);
        auto cache = filled(chat, be, spec, toks);
        CountingBackend free(2);  // the same cache, never moved
        auto twin = filled(chat, free, spec, toks);
        const int64_t layer = static_cast<int64_t>(toks.size()) * 2 * 2 * chat.model->layer_specs()[0].shape.n_head_kv *
                              chat.model->layer_specs()[0].shape.head_dim;  // 40 records of f16 keys and values
        be.kv_use->cap = be.kv_use->bytes + 2 * layer;
        bool threw = false;
        try {
            kvchat::convert(*cache, "dynamic");
        } catch (const std::bad_alloc&) {
            threw = true;
        }
        QVERIFY(threw);
        QCOMPARE(QString::fromStdString(cache->spec_text()), QString::fromStdString(twin->spec_text()));
        QVERIFY(cache->tokens() == toks);
        be.kv_use->cap = 0;
        const int32_t next = 9;
        chat.model->forward(be, *cache, &next, 1, kvchat::Logits::Last, got);
        chat.model->forward(free, *twin, &next, 1, kvchat::Logits::Last, want);
        QVERIFY(got == want);
    }

    // A move whose memory runs out at every step: filling the new cache fails, and so does building
    // the old one again. The cache is then an empty one of the new strategy (making it takes no
    // memory), the error goes on, and the next forward computes the tokens again as a fresh
    // offloaded cache does. (move_states' second fallback, reached by no test before.)
    void aMoveThatCannotRebuildLeavesAnEmptyCache() {
        const Chat chat = chat_model();
        const std::string spec = "offloaded:dir=" + chat.dir->path().toStdString();
        std::vector<float> want, got;
        CountingBackend be(2);
        auto cache = filled(chat, be, "dynamic", tokens(40));
        be.kv_use->grows_left = 0;
        const int64_t grows = be.kv_use->grows;
        bool threw = false;
        try {
            kvchat::convert(*cache, spec);
        } catch (const std::bad_alloc&) {
            threw = true;
        }
        QVERIFY(threw);
        QVERIFY(be.kv_use->grows >= grows + 2);  // the new cache's fill and the old one's both asked
        QVERIFY2(cache->spec_text().rfind("offloaded", 0) == 0, cache->spec_text().c_str());
        QCOMPARE(cache->seq_length(), int64_t(0));
        QVERIFY(cache->tokens().empty());
        be.kv_use->grows_left = -1;
        const std::vector<int32_t> more = tokens(41);
        chat.model->forward(be, *cache, more.data(), static_cast<int64_t>(more.size()), kvchat::Logits::Last, got);
        CountingBackend free(2);
        QTemporaryDir other;
        auto fresh = chat.model->make_cache(free, "offloaded:dir=" + other.path().toStdString());
        chat.model->forward(free, *fresh, more.data(), static_cast<int64_t>(more.size()), kvchat::Logits::Last, want);
        QVERIFY(!want.empty());
        QVERIFY(got == want);
    }

    // A full GPU: KV memory capped at half of what a dynamic cache takes for the turn. The cache
    // cannot grow, so the turn moves it to `offloaded` (two layers' buffers in that memory), says
    // so, answers as an uncapped backend does, and the next turn goes on there. The move holds one
    // copy of the cache in that memory, not two: with the dynamic cache and the offloaded one's
    // buffers at once it did not fit, and std::bad_alloc ended the turn (seen on an H100).
    void fullMemoryFallsBackToOffloaded() {
        const Chat chat = chat_model();
        int64_t need = 0;
        const std::vector<std::string> want = uncapped_answers(chat, {kQuestion, "and the dog"}, need);
        CountingBackend full(2);
        full.kv_use->cap = need / 2;
        kvchat::Conversation c(*chat.model, full, kvchat::ChatTemplate::for_model(*chat.model), "dynamic");
        const kvchat::TurnOptions o = spilling_turn(chat);
        const kvchat::TurnResult r = c.send(kQuestion, o);
        QVERIFY(!r.notices.empty());
        QVERIFY2(r.notices.front().find("the cache could not grow (out of memory); the cache moved to offloaded") == 0,
                 r.notices.front().c_str());
        QCOMPARE(r.text, want[0]);
        QVERIFY2(c.cache_spec().rfind("offloaded", 0) == 0, c.cache_spec().c_str());
        QCOMPARE(c.send("and the dog", o).text, want[1]);
        QVERIFY(full.kv_use->peak <= full.kv_use->cap);
    }

    // Memory that holds the prompt's keys and values but not the answer's: the cache fails to grow
    // in the middle of the answer, moves to offloaded, and the answer is the uncapped one, its text
    // passed on once (the streamed pieces add up to it, nothing repeated from before the move).
    // (Before, the retry took the prompt's tokens after the cache's length as its input: none, and
    // the turn failed with "the prompt is empty".)
    void outOfMemoryDuringTheAnswerFallsBack() {
        const Chat chat = chat_model();
        kvchat::TurnOptions o = spilling_turn(chat);
        o.generation.max_new_tokens = 40;
        // Uncapped: the answer, and the KV memory when its first and last pieces came (the prompt's,
        // and after the cache grew during the answer).
        CountingBackend free(2);
        kvchat::Conversation uncapped(*chat.model, free, kvchat::ChatTemplate::for_model(*chat.model), "dynamic");
        int64_t at_first = -1, at_last = -1;
        const std::string want = uncapped.send(kQuestion, o, [&](std::string_view) {
            if (at_first < 0) at_first = free.kv_use->bytes.load();
            at_last = free.kv_use->bytes.load();
        }).text;
        QVERIFY2(at_last > at_first, "the answer is too short to make the cache grow");
        // One byte short of what the answer grew the cache to: the growth in the answer fails, and
        // the offloaded cache's two layer buffers fit.
        CountingBackend full(2);
        full.kv_use->cap = at_last - 1;
        kvchat::Conversation c(*chat.model, full, kvchat::ChatTemplate::for_model(*chat.model), "dynamic");
        std::string streamed;
        const kvchat::TurnResult r = c.send(kQuestion, o, [&](std::string_view piece) { streamed += piece; });
        QVERIFY(!r.notices.empty());
        QVERIFY2(r.notices.front().find("the cache could not grow (out of memory); the cache moved to offloaded") == 0,
                 r.notices.front().c_str());
        QCOMPARE(r.text, want);
        QCOMPARE(streamed, want);
        QCOMPARE(c.messages().size(), size_t{2});
        QVERIFY(full.kv_use->peak <= full.kv_use->cap);
        // The conversation goes on.
        QVERIFY(!c.send("and the dog", kvchat::test::greedy(8)).text.empty());
    }

    // Memory too small even for the offloaded cache's buffers (a quarter of a layer's): the turn
    // fails with an error that says so (not std::bad_alloc, and no prefetch thread ending the
    // process with it), the conversation is as it was, and it answers once memory is free again.
    void tooLittleMemoryFailsTheTurnCleanly() {
        const Chat chat = chat_model();
        int64_t need = 0;
        const std::vector<std::string> want = uncapped_answers(chat, {kQuestion}, need);
        CountingBackend full(2);
        full.kv_use->cap = need / chat.layers / 4;
        kvchat::Conversation c(*chat.model, full, kvchat::ChatTemplate::for_model(*chat.model), "dynamic");
        const kvchat::TurnOptions o = spilling_turn(chat);
        const std::string why = kvchat::test::error_of([&] { c.send(kQuestion, o); });
        QVERIFY2(why.find("out of memory") != std::string::npos && why.find("offloaded") != std::string::npos, why.c_str());
        QCOMPARE(c.messages().size(), size_t{0});
        full.kv_use->cap = 0;
        QCOMPARE(c.send(kQuestion, o).text, want[0]);
    }
};

QTEST_GUILESS_MAIN(TestCacheBackend)
#include "test_cache_backend.moc"
