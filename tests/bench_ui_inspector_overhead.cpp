// Decoding speed with the cache inspector open, closed, and with no telemetry at all: a worker
// thread decodes greedily with the model and sends each step's telemetry to the GUI thread by a
// queued signal, as the window's engine worker does; the inspector is shown, hidden, or not fed.
// Modes alternate over several rounds; prints tokens per second per round and the medians.
// Usage: bench_ui_inspector_overhead [--model PATH] [--context 256] [--steps 64] [--rounds 6]
//        [--cache SPEC] [--threads N]   (QT_QPA_PLATFORM=offscreen works)
#include "engine/compute/backend.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/inspector/memory_bars.h"
#include "ui/inspector/reuse_panel.h"
#include "ui/inspector/traffic_timeline.h"
#include "ui/inspector/window_strips.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QThread>

#include <algorithm>
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

public slots:
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
            if (telemetry) emit step(cache_->telemetry());
        }
        emit finished(static_cast<double>(t.nsecsElapsed()) / 1e9);
    }

signals:
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

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    std::string model_path, spec = "dynamic";
    int context = 256, steps = 64, rounds = 6, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--context") context = std::stoi(v);
        else if (k == "--steps") steps = std::stoi(v);
        else if (k == "--rounds") rounds = std::stoi(v);
        else if (k == "--cache") spec = v;
        else if (k == "--threads") threads = std::stoi(v);
    }
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
