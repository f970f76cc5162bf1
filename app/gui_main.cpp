// kvchat: the desktop application.
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model_path.h"
#include "ui/main_window.h"

#include <QApplication>
#include <QCommandLineParser>
#include <csignal>
#include <cstdio>

int main(int argc, char** argv) {
    // As in kvchat-cli: past a file size limit a spill file write fails with EFBIG and is reported,
    // instead of SIGXFSZ killing the app with the conversation open.
    std::signal(SIGXFSZ, SIG_IGN);
    QApplication app(argc, argv);
    QApplication::setApplicationName("kvchat");
    QApplication::setApplicationVersion(KVCHAT_VERSION);

    QCommandLineParser parser;
    parser.setApplicationDescription("Local chat with a persistent, inspectable KV cache.");
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption modelOpt("model", "Model file (GGUF). Default: $KVCHAT_MODEL or the installed default model.",
                                "path");
    parser.addOption(modelOpt);
    parser.process(app);

    const std::string path = kvchat::resolve_model_path(parser.value(modelOpt).toStdString());
    try {
        kvchat::read_gguf_header(path);
    } catch (const kvchat::Error& e) {
        std::fprintf(stderr, "kvchat: error: %s\n", e.what());
        return 2;
    }

    kvchat::MainWindow window(QString::fromStdString(path));
    window.show();
    return app.exec();
}
