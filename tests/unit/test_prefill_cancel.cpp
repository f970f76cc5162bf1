// Stop during a long prefill acts within one matrix product's time, not at the end of the
// prefill (or of its 512-token chunk, or of a layer): the forward pass sees the flag before every
// step of a layer and attention between its work items, and kvchat-cli's Ctrl-C sets it. Timings are compared with a full prefill measured in the same test, with wide
// margins, so a busy machine does not make them flaky.
#include "engine/cache/cache.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <thread>

using namespace kvchat;

namespace {

// Big enough that a prefill of a few thousand tokens takes a good fraction of a second.
std::string write_model(const QTemporaryDir& dir) {
    test::TinyModelSpec s;
    s.arch = "gemma3";
    s.n_layer = 6;
    s.n_embd = 256;
    s.n_ff = 1024;
    s.n_ctx = 8192;
    const std::string path = (dir.path() + "/tiny.gguf").toStdString();
    test::write_tiny_gguf(s, path);
    return path;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The shortest prompt, doubling from `n` tokens (at most `most`), whose prefill in one chunk takes
// at least `seconds`: its tokens (3 + (i * stride) % 300), how long it took and how many tokens
// the cache took.
struct TimedPrefill {
    std::vector<int32_t> tokens;
    double seconds = 0;
    int64_t cached = 0;
};
TimedPrefill prefill_of_at_least(const Model& model, Backend& backend, int64_t n, int64_t most, double seconds,
                                 int stride) {
    TimedPrefill p;
    std::vector<float> logits;
    for (;; n *= 2) {
        p.tokens.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) p.tokens[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * stride) % 300);
        auto full = model.make_cache(backend, "dynamic");
        const auto t0 = std::chrono::steady_clock::now();
        model.forward(backend, *full, p.tokens.data(), n, Logits::None, logits, n);
        p.seconds = seconds_since(t0);
        p.cached = full->seq_length();
        if (p.seconds >= seconds || n >= most) return p;
    }
}

// The same prefill into `cache`, in one chunk, with the cancel flag set `delay` seconds in:
// whether it stopped, and how long after the flag it returned.
struct StoppedPrefill {
    bool cancelled = false;
    double after_flag = 0;
};
StoppedPrefill prefill_cancelled_after(const Model& model, Backend& backend, Cache& cache,
                                       const std::vector<int32_t>& tokens, double delay) {
    std::atomic<bool> cancel{false};
    std::chrono::steady_clock::time_point set_at;
    std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        set_at = std::chrono::steady_clock::now();
        cancel = true;
    });
    StoppedPrefill r;
    std::vector<float> logits;
    const auto n = static_cast<int64_t>(tokens.size());
    try {
        model.forward(backend, cache, tokens.data(), n, Logits::None, logits, n, &cancel);
    } catch (const Cancelled&) {
        r.cancelled = true;
    }
    stopper.join();
    r.after_flag = seconds_since(set_at);
    return r;
}

}  // namespace

class TestPrefillCancel : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    std::string model_path_;

private Q_SLOTS:
    void initTestCase() { model_path_ = write_model(dir_); }

    // One chunk (of as many tokens as take at least 0.3 s here, so a sanitizer build stays quick):
    // a flag set a quarter of the way in stops it long before the rest would have run, and the
    // cache is left as it was before the chunk.
    void cancelStopsWithinAChunk() {
        auto model = Model::load(model_path_);
        auto backend = make_cpu_backend(1);
        const TimedPrefill whole = prefill_of_at_least(*model, *backend, 256, 4096, 0.3, 7);
        const auto n = static_cast<int64_t>(whole.tokens.size());
        QCOMPARE(whole.cached, n);
        qInfo("a prefill of %lld tokens in one chunk takes %.3f s", static_cast<long long>(n), whole.seconds);

        auto cache = model->make_cache(*backend, "dynamic");
        const StoppedPrefill stopped = prefill_cancelled_after(*model, *backend, *cache, whole.tokens, whole.seconds / 4);
        QVERIFY2(stopped.cancelled, "the prefill ran to its end");
        QCOMPARE(cache->seq_length(), int64_t{0});  // the interrupted chunk was rolled back
        // Three quarters of the prefill were left; the stop came within half of the whole.
        QVERIFY2(stopped.after_flag < whole.seconds / 2,
                 qPrintable(QString("stopped %1 s after the flag; a full prefill takes %2 s")
                                .arg(stopped.after_flag)
                                .arg(whole.seconds)));
        // The cache still works: it takes the tokens again.
        std::vector<float> logits;
        model->forward(*backend, *cache, whole.tokens.data(), n, Logits::None, logits, n);
        QCOMPARE(cache->seq_length(), n);
    }

    // One layer whose attention is nearly all of its time (a long context, tiny products): a
    // flag set a quarter of the way in stops the attention itself, long before it ends. (Seen only
    // between layer steps, the stop would come after the attention, at ~90% of the time.)
    void cancelStopsInsideAttention() {
        QTemporaryDir dir;
        test::TinyModelSpec s;
        s.arch = "llama";  // every layer attends to the whole context
        s.n_layer = 1;
        s.n_embd = 64;
        s.n_ff = 64;
        s.n_head = 8;
        s.n_head_kv = 2;
        s.head_dim = 64;
        s.sliding_window = 0;
        s.n_ctx = 16384;
        const std::string path = (dir.path() + "/attention.gguf").toStdString();
        test::write_tiny_gguf(s, path);
        auto model = Model::load(path);
        auto backend = make_cpu_backend(1);
        const TimedPrefill whole = prefill_of_at_least(*model, *backend, 512, 16384, 0.4, 5);
        qInfo("one layer over %lld tokens in one chunk takes %.3f s", static_cast<long long>(whole.tokens.size()),
              whole.seconds);

        auto cache = model->make_cache(*backend, "dynamic");
        const StoppedPrefill stopped = prefill_cancelled_after(*model, *backend, *cache, whole.tokens, whole.seconds / 4);
        QVERIFY2(stopped.cancelled, "the prefill ran to its end");
        QCOMPARE(cache->seq_length(), int64_t{0});
        QVERIFY2(stopped.after_flag < whole.seconds / 2,
                 qPrintable(QString("stopped %1 s after the flag; the whole layer takes %2 s")
                                .arg(stopped.after_flag)
                                .arg(whole.seconds)));
    }

    // A cache layer asked to attend with the flag already set does no attention work (its output
    // rows stay as they were), throws Cancelled and keeps none of the new tokens; without the
    // flag the same call fills every row and keeps them.
    void cancelledAttentionKeepsNothing() {
        auto model = Model::load(model_path_);
        auto backend = make_cpu_backend(2);
        const ModelConfig& c = model->config();
        auto cache = model->make_cache(*backend, "dynamic");
        std::vector<float> logits;
        std::vector<int32_t> first(64, 42);
        model->forward(*backend, *cache, first.data(), 64, Logits::None, logits);
        const int64_t n = 256, q_dim = int64_t{c.n_head} * c.head_dim, kv_dim = int64_t{c.n_head_kv} * c.head_dim;
        for (bool preset : {true, false}) {
            CacheLayer& layer = cache->layer(static_cast<size_t>(c.n_layer - 1));  // a global layer
            const int64_t held = layer.tokens_held(), end = layer.end_position();
            Buffer q = backend->alloc(n, q_dim), k = backend->alloc(n, kv_dim), v = backend->alloc(n, kv_dim);
            Buffer out = backend->alloc(n, q_dim);
            for (int64_t i = 0; i < n * q_dim; ++i) q.data[i] = std::sin(0.01f * static_cast<float>(i));
            for (int64_t i = 0; i < n * kv_dim; ++i) {
                k.data[i] = std::cos(0.02f * static_cast<float>(i));
                v.data[i] = std::sin(0.03f * static_cast<float>(i));
            }
            std::fill(out.data, out.data + n * q_dim, std::nanf(""));
            std::vector<int32_t> pos(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(end + i);
            std::atomic<bool> cancel{preset};
            int64_t filled = 0;
            if (preset) {
                QVERIFY_THROWS_EXCEPTION(Cancelled, layer.attend(q, k, v, pos.data(), n, out, &cancel));
                QCOMPARE(layer.tokens_held(), held);
                QCOMPARE(layer.end_position(), end);
            } else {
                layer.attend(q, k, v, pos.data(), n, out, &cancel);
                QCOMPARE(layer.end_position(), end + n);
            }
            for (int64_t i = 0; i < n * q_dim; ++i) filled += std::isfinite(out.data[i]) ? 1 : 0;
            QCOMPARE(filled, preset ? int64_t{0} : n * q_dim);
            for (Buffer* b : {&q, &k, &v, &out}) backend->free(*b);
        }
    }

    // In chunks, the chunks done before the flag stay in the cache.
    void cancelKeepsFinishedChunks() {
        auto model = Model::load(model_path_);
        auto backend = make_cpu_backend(1);
        const int64_t n = 1024, chunk = 128;
        std::vector<int32_t> tokens(static_cast<size_t>(n), 42);
        std::vector<float> logits;
        auto cache = model->make_cache(*backend, "dynamic");
        std::atomic<bool> cancel{true};
        QVERIFY_THROWS_EXCEPTION(Cancelled, model->forward(*backend, *cache, tokens.data(), n, Logits::Last, logits,
                                                           chunk, &cancel));
        QCOMPARE(cache->seq_length(), int64_t{0});
        cancel = false;
        model->forward(*backend, *cache, tokens.data(), chunk, Logits::None, logits, chunk, &cancel);
        QCOMPARE(cache->seq_length(), chunk);
    }

    // kvchat-cli generate with a long prompt: Ctrl-C a third of the way into the prefill ends it
    // (exit 130, stop reason "cancelled", fewer tokens taken than the prompt has) well before the
    // rest of the prefill would have run.
    void ctrlCDuringPrefillEndsGenerate() {
        // A whole run first: where its prefill begins and how long it takes. The prompt grows
        // (to about 3,500 tokens) until its prefill takes a second, so a sanitizer build stays quick.
        QStringList args;
        double whole_s = 0, prefill_s = 0;
        int prompt_tokens = 0;
        for (int repeats = 20;; repeats *= 2) {
            QString prompt;
            for (int i = 0; i < repeats; ++i) prompt += "the cat sat on the mat ";
            args = QStringList{"generate", "--model", QString::fromStdString(model_path_), "--prompt", prompt,
                               "-n", "1", "--greedy", "--json", "--threads", "1"};
            QProcess full;
            QElapsedTimer wall;
            wall.start();
            full.start(QString::fromUtf8(test::cli_path()), args);
            QVERIFY(full.waitForFinished(300000));
            whole_s = wall.elapsed() / 1000.0;
            QVERIFY2(full.exitCode() == 0, full.readAllStandardError().constData());
            const QJsonObject done = QJsonDocument::fromJson(full.readAllStandardOutput()).object();
            prefill_s = done["ttft_ms"].toDouble() / 1000.0;
            prompt_tokens = done["prompt_tokens"].toInt();
            if (prefill_s >= 1.0 || repeats >= 150) break;
        }
        qInfo("a prefill of %d tokens takes %.3f s (the whole run %.3f s)", prompt_tokens, prefill_s, whole_s);
        QVERIFY2(prefill_s > 0.2, qPrintable(QString("a prefill of %1 s is too short to interrupt").arg(prefill_s)));
        const double prefill_starts_s = whole_s - prefill_s;

        QProcess p;
        p.start(QString::fromUtf8(test::cli_path()), args);
        QVERIFY(p.waitForStarted());
        QTest::qWait(static_cast<int>((prefill_starts_s + prefill_s / 3) * 1000));
        QVERIFY2(p.state() == QProcess::Running, "it finished before the signal");
        QElapsedTimer since_signal;
        since_signal.start();
        QVERIFY2(test::signal_child(p.processId(), SIGINT), "the process had already ended");
        QVERIFY(p.waitForFinished(300000));
        const double after_signal_s = since_signal.elapsed() / 1000.0;
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 130);
        const QJsonObject stopped = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
        QCOMPARE(stopped["stop_reason"].toString(), QString("cancelled"));
        QVERIFY(stopped["prefill_tokens"].toInt() < prompt_tokens);
        QVERIFY2(after_signal_s < prefill_s / 2,
                 qPrintable(QString("exit %1 s after Ctrl-C; the prefill takes %2 s").arg(after_signal_s).arg(prefill_s)));
    }
};

QTEST_GUILESS_MAIN(TestPrefillCancel)
#include "test_prefill_cancel.moc"
