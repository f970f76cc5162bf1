// Decoding speed with the cache inspector open, closed, and with no telemetry at all: a worker
// thread decodes greedily with the model and sends each step's telemetry to the GUI thread by a
// queued signal, as the window's engine worker does; the inspector is shown, hidden, or not fed.
// Modes alternate over several rounds; prints tokens per second per round and the medians.
// Usage: bench_ui_inspector_overhead [--model PATH] [--context 256] [--steps 64] [--rounds 6]
//        [--cache SPEC] [--threads N]   (QT_QPA_PLATFORM=offscreen works)
// With --window: the chat window itself (its engine worker, the cache lab's inspector in its dock)
// regenerates one answer of --steps tokens per run with the cache dock open or closed, alternating,
// and prints the answers' decode speed (the figure stored with each answer). Uses a throw-away
// database and settings folder.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/compute/backend.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/inspector/memory_bars.h"
#include "ui/inspector/reuse_panel.h"
#include "ui/inspector/traffic_timeline.h"
#include "ui/inspector/window_strips.h"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "ui/engine_worker.h"
#include "ui/lab/cache_lab.h"
#include "ui/main_window.h"

#include <QDockWidget>
#include <QTemporaryDir>

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <optional>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

class Decoder : public QObject {
    Q_OBJECT
public:
    Decoder(const kvchat::Model& m, kvchat::Backend& b, std::unique_ptr<kvchat::Cache> cache, int64_t context)
        : m_(m), b_(b), cache_(std::move(cache)), context_(context) {}

public Q_SLOTS:
    // Decodes `steps` tokens after the prompt (the cache cropped back to it first; keep context +
    // steps within the sliding window, 512 for Gemma 3, so the crop has what it needs).
    void run(int steps, bool telemetry) {
        cache_->crop(context_);
        std::vector<float> lg;
        int32_t next = 2;
        QElapsedTimer t;
        t.start();
        for (int i = 0; i < steps; ++i) {
            m_.forward(b_, *cache_, &next, 1, kvchat::Logits::Last, lg);
            next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
            if (telemetry) Q_EMIT step(cache_->telemetry());
        }
        Q_EMIT finished(static_cast<double>(t.nsecsElapsed()) / 1e9);
    }

Q_SIGNALS:
    void step(const kvchat::CacheTelemetry& t);
    void finished(double seconds);

private:
    const kvchat::Model& m_;
    kvchat::Backend& b_;
    std::unique_ptr<kvchat::Cache> cache_;
    int64_t context_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Waits (running the event loop) for the window's next finished answer.
std::optional<kvchat::TurnOutcome> nextAnswer(kvchat::MainWindow& w, int timeout_ms) {
    std::optional<kvchat::TurnOutcome> got;
    QEventLoop loop;
    auto c = QObject::connect(&w, &kvchat::MainWindow::answerFinished, &loop, [&](const kvchat::TurnOutcome& o) {
        got = o;
        loop.quit();
    });
    QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
    loop.exec();
    QObject::disconnect(c);
    return got;
}

// The window's own worker and inspector: regenerate the answer with the cache dock open or closed.
int windowRounds(const std::string& model_path, const std::string& spec, int steps, int rounds, int threads) {
    const QString model = QString::fromStdString(kvchat::resolve_model_path(model_path));  // before XDG_DATA_HOME moves
    QTemporaryDir home;
    qputenv("XDG_DATA_HOME", (home.path() + "/data").toUtf8());
    qputenv("XDG_CONFIG_HOME", (home.path() + "/config").toUtf8());
    const QString db = home.path() + "/kvchat.db";
    {
        kvchat::Store store(db.toStdString());
        kvchat::ChatSettings s;
        s.sampling.greedy = true;
        s.random_seed = false;
        s.max_new_tokens = steps;
        s.threads = threads;
        s.default_strategy = spec;
        s.save(store);
    }
    kvchat::WindowOptions o;
    o.databasePath = db;
    o.modelPath = model;
    o.restoreState = false;
    kvchat::MainWindow w(o);
    QObject::connect(&w, &kvchat::MainWindow::modelLoadFailed, [](const QString& path, const QString& problem) {
        std::fprintf(stderr, "the model %s cannot be loaded: %s\n", qPrintable(path), qPrintable(problem));
    });
    w.resize(1400, 900);
    w.show();
    QElapsedTimer wait;
    wait.start();
    while (!(w.modelReady() && w.currentConversation() != 0) && wait.elapsed() < 120000)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    if (!w.modelReady() || w.currentConversation() == 0) {
        std::fprintf(stderr, "the model did not load (ready %d, conversation %lld)\n", w.modelReady(),
                     static_cast<long long>(w.currentConversation()));
        return 1;
    }
    auto* dock = w.findChild<QDockWidget*>(QStringLiteral("cacheInspectorDock"));
    w.sendMessage(QStringLiteral("Write a long story about a lighthouse keeper and a storm."));
    if (!nextAnswer(w, 600000)) return 1;
    std::vector<double> open, closed, ratio;
    auto once = [&](bool show) {
        dock->setVisible(show);
        if (show) dock->raise();
        Q_EMIT w.requestRegenerate(w.currentConversation());
        const auto outcome = nextAnswer(w, 600000);
        if (!outcome) return -1.0;
        const double tok_s = outcome->answer.figures.tokens_per_second.value_or(-1);
        std::printf("  cache dock %-6s %8.2f tok/s (%lld tokens)\n", show ? "open" : "closed", tok_s,
                    static_cast<long long>(outcome->answer.figures.generated_tokens));
        std::fflush(stdout);
        return tok_s;
    };
    std::printf("the window, %s, %s cache, answers of %d tokens, %d rounds (open and closed alternate)\n",
                o.modelPath.toUtf8().constData(), spec.c_str(), steps, rounds);
    once(true);  // warm-up, not counted
    for (int r = 0; r < rounds; ++r) {
        const bool first = r % 2 == 0;
        const double a = once(first), b = once(!first);
        (first ? open : closed).push_back(a);
        (first ? closed : open).push_back(b);
        ratio.push_back(open.back() / closed.back());
    }
    const int64_t redraws = w.cacheLab()->inspector()->redraws();
    std::printf("median decode tok/s: dock open %.2f, closed %.2f: open vs closed %+.1f%% (median of the rounds' ratios "
                "%+.1f%%); %lld inspector redraws\n",
                median(open), median(closed), 100.0 * (median(open) / median(closed) - 1.0), 100.0 * (median(ratio) - 1.0),
                static_cast<long long>(redraws));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QCoreApplication::setOrganizationName(QStringLiteral("kvchat-bench"));
    std::string model_path, spec = "dynamic";
    int context = 256, steps = 64, rounds = 6, threads = 0;
    bool window = false;
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--window") == 0) window = true;
    for (int i = 1; i + 1 < argc; ++i) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--context") context = std::stoi(v);
        else if (k == "--steps") steps = std::stoi(v);
        else if (k == "--rounds") rounds = std::stoi(v);
        else if (k == "--cache") spec = v;
        else if (k == "--threads") threads = std::stoi(v);
    }
    if (window) return windowRounds(model_path, spec, steps, rounds, threads);
    auto model = kvchat::Model::load(kvchat::resolve_model_path(model_path));
    auto backend = kvchat::make_cpu_backend(threads);
    auto cache = model->make_cache(*backend, spec);
    const auto prompt = kvchat::benchmark_prompt(*model, context);
    std::vector<float> lg;
    model->forward(*backend, *cache, prompt.data(), context, kvchat::Logits::Last, lg);

    kvchat::CacheInspector inspector;
    inspector.resize(560, 1100);
    QThread thread;
    Decoder decoder(*model, *backend, std::move(cache), context);
    decoder.moveToThread(&thread);
    thread.start();
    QObject::connect(&decoder, &Decoder::step, &inspector, &kvchat::CacheInspector::setTelemetry, Qt::QueuedConnection);

    // What one redraw costs on the GUI thread (flush, then a synchronous repaint of the whole inspector).
    {
        inspector.show();
        kvchat::CacheTelemetry t;
        const auto keep = QObject::connect(&decoder, &Decoder::step, &inspector, [&](const kvchat::CacheTelemetry& x) { t = x; });
        QEventLoop loop;
        auto c = QObject::connect(&decoder, &Decoder::finished, &loop, &QEventLoop::quit);
        QMetaObject::invokeMethod(&decoder, "run", Qt::QueuedConnection, Q_ARG(int, 1), Q_ARG(bool, true));
        loop.exec();
        QObject::disconnect(c);
        QCoreApplication::processEvents();
        QObject::disconnect(keep);
        QElapsedTimer clock;
        clock.start();
        const int n = 60;
        for (int i = 0; i < n; ++i) {
            t.tokens += 1;
            inspector.setTelemetry(t);
            inspector.flush();
            inspector.repaint();
        }
        std::printf("one redraw costs %.2f ms on the GUI thread (%d redraws)\n", clock.nsecsElapsed() / 1e6 / n, n);
        for (QWidget* w : std::initializer_list<QWidget*>{inspector.memoryBars(), inspector.windowStrips(), inspector.trafficTimeline(), inspector.reusePanel()}) {
            clock.restart();
            for (int i = 0; i < n; ++i) w->repaint();
            std::printf("  %s: %.3f ms\n", qPrintable(w->objectName()), clock.nsecsElapsed() / 1e6 / n);
        }
        clock.restart();
        for (int i = 0; i < n; ++i) { t.tokens += 1; inspector.setTelemetry(t); inspector.flush(); }
        std::printf("  flush alone: %.3f ms\n", clock.nsecsElapsed() / 1e6 / n);
        clock.restart();
        for (int i = 0; i < n; ++i) { t.tokens += 1; inspector.setTelemetry(t); inspector.flush(); QCoreApplication::processEvents(); }
        std::printf("  flush + the repaints it asks for: %.3f ms\n", clock.nsecsElapsed() / 1e6 / n);
    }

    enum Mode { Open, Closed, NoTelemetry };
    const char* names[] = {"inspector open", "inspector closed", "no telemetry"};
    std::vector<double> tok_s[3];
    std::vector<double> pair_ratio;  // open / closed within one round: the two runs closest in time
    auto once = [&](Mode mode) {
        inspector.setVisible(mode == Open);
        QEventLoop loop;
        double seconds = 0;
        auto c = QObject::connect(&decoder, &Decoder::finished, &loop, [&](double s) {
            seconds = s;
            loop.quit();
        });
        QMetaObject::invokeMethod(&decoder, "run", Qt::QueuedConnection, Q_ARG(int, steps), Q_ARG(bool, mode != NoTelemetry));
        loop.exec();
        QObject::disconnect(c);
        QCoreApplication::processEvents();  // the last queued steps
        tok_s[mode].push_back(steps / seconds);
        std::printf("  %-17s %8.2f tok/s\n", names[mode], steps / seconds);
        std::fflush(stdout);
    };
    std::printf("%s, %s cache, context %d, %d steps per run, %d rounds (modes alternate)\n", model->path().c_str(),
                spec.c_str(), context, steps, rounds);
    once(Open);  // warm-up, not counted
    tok_s[Open].clear();
    for (int r = 0; r < rounds; ++r) {
        std::printf("round %d\n", r + 1);
        const Mode order[3] = {r % 2 ? Closed : Open, r % 2 ? Open : Closed, NoTelemetry};
        for (Mode m : order) once(m);
        pair_ratio.push_back(tok_s[Open].back() / tok_s[Closed].back());
    }
    const double open = median(tok_s[Open]), closed = median(tok_s[Closed]), none = median(tok_s[NoTelemetry]);
    std::printf("median tok/s: open %.2f, closed %.2f, no telemetry %.2f; open vs closed %+.1f%% (median of the rounds' "
                "ratios %+.1f%%), open vs none %+.1f%%; %lld inspector redraws\n",
                open, closed, none, 100.0 * (open / closed - 1.0), 100.0 * (median(pair_ratio) - 1.0),
                100.0 * (open / none - 1.0), static_cast<long long>(inspector.redraws()));
    thread.quit();
    thread.wait();
    return 0;
}

#include "bench_ui_inspector_overhead.moc"
