// The engine's layer check (engine/layers.cmake, engine/check_layer_includes.cmake): includes
// planted in a temporary tree that reach up a layer, into a PRIVATE layer from a header, into Qt
// or around the root-relative paths fail it with a message naming the file, the line, the include
// and what the layer may include; includes that point down pass; the real tree passes as this
// build declared it. End to end, a small project built with kvchat_engine_layer() fails to build
// on an upward include before compiling the file, and its configure names a file in no list.
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

namespace {

const QString kSource = QStringLiteral(KVCHAT_SOURCE_DIR);
const QString kScript = kSource + "/engine/check_layer_includes.cmake";
const QString kLayerConfigs = QStringLiteral(KVCHAT_BINARY_DIR "/engine/layer_check");

struct Ran {
    int code = -1;
    QString out;  // stdout and stderr together, as a build log shows them
};

Ran run(const QString& program, const QStringList& args, const QString& cwd = {}) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    if (!cwd.isEmpty()) p.setWorkingDirectory(cwd);
    p.start(program, args);
    if (!p.waitForFinished(300000)) {
        p.kill();
        p.waitForFinished();
        return {-1, "timed out: " + program + " " + args.join(' ')};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAll())};
}

bool write_file(const QString& path, const QByteArray& text) {
    QDir().mkpath(QFileInfo(path).path());
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(text) == text.size();
}

}  // namespace

class TestLayerCheck : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;

    // Runs the check as the build runs it for `layer` (its declaration from this build), on
    // `files` of the temporary tree instead of the layer's own.
    Ran check_planted(const QString& layer, const QStringList& files, const QString& stamp = {}) {
        const QString real = kLayerConfigs + "/" + layer + ".cmake";
        if (!QFileInfo::exists(real)) return {-1, "no layer configuration " + real};
        QStringList absolute;
        for (const QString& f : files) absolute << dir_.path() + "/" + f;
        const QString config = dir_.path() + "/" + layer + "-planted.cmake";
        const QByteArray text = "include(\"" + real.toUtf8() + "\")\nset(ROOT \"" + dir_.path().toUtf8() +
                                "\")\nset(LAYER_FILES \"" + absolute.join(';').toUtf8() + "\")\n";
        if (!write_file(config, text)) return {-1, "cannot write " + config};
        QStringList args{"-DCONFIG=" + config};
        if (!stamp.isEmpty()) args << "-DSTAMP=" + stamp;
        args << "-P" << kScript;
        return run(KVCHAT_CMAKE_COMMAND, args);
    }

private slots:
    void initTestCase() { QVERIFY(dir_.isValid()); }

    void upwardIncludeFails() {
        QVERIFY(write_file(dir_.path() + "/engine/cache/planted.cpp",
                           "// a cache file that reaches up into the chat layer\n"
                           "#include \"engine/cache/cache.h\"\n"
                           "#include \"engine/chat/conversation.h\"\n"));
        const Ran r = check_planted("cache", {"engine/cache/planted.cpp"});
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/cache/planted.cpp:3: #include \"engine/chat/conversation.h\": engine/chat/ "
                                "is not a layer below cache, so the cache layer may not use it."),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("In engine/cache, a .cpp file may include: engine/cache/, engine/common/, "
                                "engine/compute/, engine/*.h."),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("1 include(s) break the engine's layers"), qPrintable(r.out));
        // Its own layer's header on line 2 is not named.
        QVERIFY2(!r.out.contains("planted.cpp:2:"), qPrintable(r.out));
    }

    void undeclaredLowerLayerFails() {
        // The tokenizer is below the cache but the cache does not declare it.
        QVERIFY(write_file(dir_.path() + "/engine/cache/sideways.cpp", "#include \"engine/tokenizer/tokenizer.h\"\n"));
        const Ran r = check_planted("cache", {"engine/cache/sideways.cpp"});
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/cache/sideways.cpp:1: #include \"engine/tokenizer/tokenizer.h\": the cache "
                                "layer does not declare the tokenizer layer."),
                 qPrintable(r.out));
    }

    void headerReachesOnlyPublicLayers() {
        // store uses model PRIVATE: its .cpp files may include it, its headers not (they may include
        // common, its PUBLIC layer: records.h names common's StopReason).
        QVERIFY(write_file(dir_.path() + "/engine/store/planted.h", "#pragma once\n#include \"engine/model/model_path.h\"\n"));
        QVERIFY(write_file(dir_.path() + "/engine/store/planted.cpp", "#include \"engine/model/model_path.h\"\n"));
        const Ran r = check_planted("store", {"engine/store/planted.h", "engine/store/planted.cpp"});
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/store/planted.h:2: #include \"engine/model/model_path.h\": model is a PRIVATE "
                                "layer of store, so only its .cpp files may include it"),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("In engine/store, a header may include: engine/store/, engine/common/, engine/*.h."), qPrintable(r.out));
        QVERIFY2(!r.out.contains("planted.cpp"), qPrintable(r.out));
    }

    void qtAndRelativeIncludesFail() {
        QVERIFY(write_file(dir_.path() + "/engine/common/planted.cpp",
                           "#include <vector>\n#include <QString>\n#  include \"../chat/conversation.h\"\n"
                           "#include \"ui/main_window.h\"\n"));
        const Ran r = check_planted("common", {"engine/common/planted.cpp"});
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/common/planted.cpp:2: #include <QString>: the engine has no Qt dependency"),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/common/planted.cpp:3: #  include \"../chat/conversation.h\": engine code "
                                "includes engine files by their path from the repository root"),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/common/planted.cpp:4: #include \"ui/main_window.h\""), qPrintable(r.out));
        QVERIFY2(r.out.contains("3 include(s) break the engine's layers"), qPrintable(r.out));
    }

    void downwardIncludesPass() {
        QVERIFY(write_file(dir_.path() + "/engine/chat/planted.cpp",
                           "#include \"engine/chat/conversation.h\"\n#include \"engine/cache/cache.h\"\n"
                           "#include \"engine/error.h\"\n#include <nlohmann/json.hpp>\n#include <queue>\n"
                           "// #include \"engine/ui/window.h\" in a comment is not an include\n"
                           "const char* s = \"[;]\";\n"));
        const QString stamp = dir_.path() + "/chat.stamp";
        const Ran r = check_planted("chat", {"engine/chat/planted.cpp"}, stamp);
        QVERIFY2(r.code == 0, qPrintable(r.out));
        QVERIFY(QFileInfo::exists(stamp));
    }

    void realLayersPass() {
        // Every layer engine/CMakeLists.txt declares, as the build checks it.
        const QStringList configs = QDir(kLayerConfigs).entryList({"*.cmake"}, QDir::Files, QDir::Name);
        QCOMPARE(configs, QStringList({"api.cmake", "cache.cmake", "chat.cmake", "common.cmake", "compute.cmake", "format.cmake",
                                       "generate.cmake", "model.cmake", "store.cmake", "tokenizer.cmake"}));
        for (const QString& c : configs) {
            const Ran r = run(KVCHAT_CMAKE_COMMAND, {"-DCONFIG=" + kLayerConfigs + "/" + c, "-P", kScript});
            QVERIFY2(r.code == 0, qPrintable(c + ": " + r.out));
        }
    }

    // A project of two layers built the way the engine is: the upward include stops the build
    // before its file compiles; pointing it down lets it build; a file in no list stops the configure.
    void buildFailsOnUpwardInclude() {
        const QString p = dir_.path() + "/project";
        QVERIFY(write_file(p + "/CMakeLists.txt", "cmake_minimum_required(VERSION 3.25)\nproject(layers CXX)\n"
                                                  "add_subdirectory(engine)\n"));
        QVERIFY(write_file(p + "/engine/CMakeLists.txt",
                           "include(\"" + kSource.toUtf8() + "/engine/layers.cmake\")\n"
                           "kvchat_engine_layer(low SOURCES low/low.cpp low/low.h)\n"
                           "kvchat_engine_layer(high PUBLIC low SOURCES high/high.cpp high/high.h)\n"));
        QVERIFY(write_file(p + "/engine/low/low.h", "#pragma once\nint low();\n"));
        QVERIFY(write_file(p + "/engine/low/low.cpp", "#include \"engine/low/low.h\"\n#include \"engine/high/high.h\"\n"
                                                      "int low() { return 1; }\n"));
        QVERIFY(write_file(p + "/engine/high/high.h", "#pragma once\n#include \"engine/low/low.h\"\nint high();\n"));
        QVERIFY(write_file(p + "/engine/high/high.cpp", "#include \"engine/high/high.h\"\nint high() { return low() + 1; }\n"));
        const QString b = p + "/build";
        const QStringList configure{"-S", p, "-B", b, "-G", KVCHAT_CMAKE_GENERATOR,
                                    "-DCMAKE_MAKE_PROGRAM=" KVCHAT_MAKE_PROGRAM};
        Ran r = run(KVCHAT_CMAKE_COMMAND, configure);
        QVERIFY2(r.code == 0, qPrintable(r.out));

        r = run(KVCHAT_CMAKE_COMMAND, {"--build", b, "--target", "kvchat_low"});
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/low/low.cpp:2: #include \"engine/high/high.h\": engine/high/ is not a layer "
                                "below low, so the low layer may not use it."),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains("In engine/low, a .cpp file may include: engine/low/."), qPrintable(r.out));
        // The check ran before the compiler: no object of low.cpp.
        QStringList objects;
        for (QDirIterator it(b, {"low.cpp.o"}, QDir::Files, QDirIterator::Subdirectories); it.hasNext();) objects << it.next();
        QVERIFY2(objects.isEmpty(), qPrintable(objects.join(' ')));

        QVERIFY(write_file(p + "/engine/low/low.cpp", "#include \"engine/low/low.h\"\nint low() { return 1; }\n"));
        r = run(KVCHAT_CMAKE_COMMAND, {"--build", b});
        QVERIFY2(r.code == 0, qPrintable(r.out));

        QVERIFY(write_file(p + "/engine/high/unlisted.cpp", "int unlisted() { return 0; }\n"));
        r = run(KVCHAT_CMAKE_COMMAND, configure);
        QVERIFY2(r.code != 0, qPrintable(r.out));
        QVERIFY2(r.out.contains("engine/high/unlisted.cpp is in no list: add it to kvchat_engine_layer(high SOURCES ...)"),
                 qPrintable(r.out));
    }
};

QTEST_GUILESS_MAIN(TestLayerCheck)
#include "test_layer_check.moc"
