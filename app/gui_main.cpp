// kvchat: the desktop application.
#include "ui/engine_worker.h"
#include "ui/event_loop_stall.h"
#include "ui/main_window.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QIcon>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTimer>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace {

// --startup-report: the app starts as usual, sends one message once the model is ready, prints
// {window_ms, model_ready_ms, first_token_ms, answer_ms, max_stall_ms} (times since main() began;
// stall: the longest the GUI event loop went without running) and quits.
void reportStartup(kvchat::MainWindow& window, const QElapsedTimer& since, const QString& message) {
    auto* stall = new kvchat::EventLoopStall(&window);
    // Shared by the handlers below and freed with the last of them (when the window goes).
    auto report = std::make_shared<QJsonObject>();
    QTimer::singleShot(0, &window, [&window, stall, report, since] {
        // The first turn of the event loop after show(): the window is on screen.
        (*report)["window_ms"] = static_cast<double>(since.nsecsElapsed()) / 1e6;
        stall->start();
        Q_UNUSED(window);
    });
    auto sendOnce = [&window, report, since, message] {
        if (report->contains("model_ready_ms")) return;
        (*report)["model_ready_ms"] = static_cast<double>(since.nsecsElapsed()) / 1e6;
        window.sendMessage(message);
    };
    QObject::connect(&window, &kvchat::MainWindow::modelReadyChanged, &window, [&window, sendOnce](bool ready) {
        // The first chat is created once the model is ready; send when it is open.
        if (!ready) return;
        if (window.currentConversation() != 0) QTimer::singleShot(0, &window, sendOnce);
    });
    QObject::connect(&window, &kvchat::MainWindow::currentConversationChanged, &window, [&window, sendOnce](qint64 id) {
        if (id != 0 && window.modelReady()) QTimer::singleShot(0, &window, sendOnce);
    });
    QObject::connect(&window, &kvchat::MainWindow::modelLoadFailed, &window, [](const QString& path, const QString& problem) {
        std::fprintf(stderr, "kvchat: error: the model %s cannot be loaded: %s\n",
                     path.isEmpty() ? "(default)" : qPrintable(path), qPrintable(problem));
        std::exit(2);
    });
    QObject::connect(&window, &kvchat::MainWindow::answerStarted, &window, [report, since] {
        if (!report->contains("first_token_ms")) (*report)["first_token_ms"] = static_cast<double>(since.nsecsElapsed()) / 1e6;
    });
    QObject::connect(&window, &kvchat::MainWindow::answerFinished, &window, [report, since, stall] {
        (*report)["answer_ms"] = static_cast<double>(since.nsecsElapsed()) / 1e6;
        stall->stop();
        (*report)["max_stall_ms"] = stall->maxStallMs();
        std::printf("%s\n", QJsonDocument(*report).toJson(QJsonDocument::Compact).constData());
        std::fflush(stdout);
        QTimer::singleShot(0, qApp, &QApplication::quit);
    });
}

}  // namespace

// Any exception that reaches here (a library failure) is reported and exits 2, like kvchat-cli,
// instead of aborting.
int main(int argc, char** argv) try {
    QElapsedTimer since;
    since.start();
    // As in kvchat-cli: past a file size limit a spill file write fails with EFBIG and is reported,
    // instead of SIGXFSZ killing the app with the conversation open.
    std::signal(SIGXFSZ, SIG_IGN);
    QApplication app(argc, argv);
    QApplication::setApplicationName("kvchat");
    QApplication::setOrganizationName("kvchat");
    QApplication::setApplicationVersion(KVCHAT_VERSION);
    // One id names the desktop entry, the AppStream metadata and the installed icon.
    QGuiApplication::setDesktopFileName(KVCHAT_APP_ID);
    QApplication::setWindowIcon(QIcon::fromTheme(KVCHAT_APP_ID, QIcon(":/kvchat/app-icon-256.png")));

    QCommandLineParser parser;
    parser.setApplicationDescription("Local chat with a persistent, inspectable KV cache.");
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption modelOpt("model", "Model (GGUF file or Hugging Face folder). Default: $KVCHAT_MODEL, the "
                                         "last one used, or the installed default model.", "path");
    QCommandLineOption dbOpt("db", "The database. Default: kvchat.db in the data folder.", "path");
    QCommandLineOption reportOpt("startup-report", "Start, send one message when the model is ready, print the "
                                                   "startup timings as JSON and quit.");
    QCommandLineOption messageOpt("message", "The message --startup-report sends (default: Hello).", "text", "Hello");
    parser.addOptions({modelOpt, dbOpt, reportOpt, messageOpt});
    parser.addPositionalArgument("file", "Model file to open (as --model; the desktop entry passes it).", "[file]");
    parser.process(app);

    kvchat::WindowOptions options;
    options.modelPath = parser.isSet(modelOpt) ? parser.value(modelOpt) : parser.positionalArguments().value(0);
    options.databasePath = parser.value(dbOpt);
    kvchat::MainWindow window(options);
    if (parser.isSet(reportOpt)) reportStartup(window, since, parser.value(messageOpt));
    // Without a screen (--startup-report, an offscreen or minimal platform) no one can answer the
    // dialog that a database in use or damaged opens: the refusal is printed and the program ends.
    const QString platform = QGuiApplication::platformName();
    if (parser.isSet(reportOpt) || platform == QLatin1String("offscreen") || platform == QLatin1String("minimal"))
        QObject::connect(&window, &kvchat::MainWindow::storeOpenFailed, &window,
                         [](const QString& path, const QString& problem) {
                             std::fprintf(stderr, "kvchat: error: the database %s cannot be used: %s\n",
                                          qPrintable(path), qPrintable(problem));
                             std::fflush(stderr);
                             QCoreApplication::exit(2);
                         });
    window.show();
    return app.exec();
} catch (const std::exception& e) {
    std::fprintf(stderr, "kvchat: error: %s\n", e.what());
    return 2;
} catch (...) {
    std::fputs("kvchat: error: an unexpected error stopped the program\n", stderr);
    return 2;
}
