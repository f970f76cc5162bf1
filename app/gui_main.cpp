// kvchat: the desktop application.
#include "engine/error.h"
#include "engine/model/gguf_file.h"
#include "engine/model/model_path.h"
#include "ui/main_window.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <csignal>
#include <cstdio>

// Any exception that reaches here (a bad model path, a library failure) is reported and exits 2,
// like kvchat-cli, instead of aborting.
int main(int argc, char** argv) try {
    // As in kvchat-cli: past a file size limit a spill file write fails with EFBIG and is reported,
    // instead of SIGXFSZ killing the app with the conversation open.
    std::signal(SIGXFSZ, SIG_IGN);
    QApplication app(argc, argv);
    QApplication::setApplicationName("kvchat");
    QApplication::setApplicationVersion(KVCHAT_VERSION);
    // One id names the desktop entry, the AppStream metadata and the installed icon.
    QGuiApplication::setDesktopFileName(KVCHAT_APP_ID);
    QApplication::setWindowIcon(QIcon::fromTheme(KVCHAT_APP_ID, QIcon(":/kvchat/app-icon-256.png")));

    QCommandLineParser parser;
    parser.setApplicationDescription("Local chat with a persistent, inspectable KV cache.");
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption modelOpt("model", "Model file (GGUF). Default: $KVCHAT_MODEL or the installed default model.",
                                "path");
    parser.addOption(modelOpt);
    parser.addPositionalArgument("file", "Model file to open (as --model; the desktop entry passes it).", "[file]");
    parser.process(app);

    const QString chosen = parser.isSet(modelOpt) ? parser.value(modelOpt) : parser.positionalArguments().value(0);
    const std::string path = kvchat::find_model(chosen.toStdString());
    try {
        kvchat::read_gguf_header(path);
    } catch (const kvchat::Error& e) {
        std::fprintf(stderr, "kvchat: error: %s\n", e.what());
        return 2;
    }

    kvchat::MainWindow window(QString::fromStdString(path));
    window.show();
    return app.exec();
} catch (const std::exception& e) {
    std::fprintf(stderr, "kvchat: error: %s\n", e.what());
    return 2;
} catch (...) {
    std::fputs("kvchat: error: an unexpected error stopped the program\n", stderr);
    return 2;
}
