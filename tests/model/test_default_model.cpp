// The default model installed by `packaging/kvchat.sh model` is where the app looks for it,
// and its GGUF header is sane. Also: the header reader refuses what is not GGUF.
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model_path.h"

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>

class TestDefaultModel : public QObject {
    Q_OBJECT
private slots:
    void headerIsSane() {
        const std::string path = kvchat::resolve_model_path("");
        QVERIFY2(QFileInfo::exists(QString::fromStdString(path)),
                 qPrintable("default model missing at " + QString::fromStdString(path) +
                            " (run packaging/kvchat.sh model)"));
        const kvchat::GgufHeader h = kvchat::read_gguf_header(path);
        QVERIFY(h.version == 2 || h.version == 3);
        // Gemma 3 270M: 18 blocks of 13 tensors plus the embedding and the output norm.
        QCOMPARE(h.tensor_count, uint64_t(18 * 13 + 2));
        QVERIFY(h.metadata_count >= 10 && h.metadata_count < 1000);
        QVERIFY(h.file_size > 200u * 1024 * 1024);
    }

    void refusesBadFiles_data() {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("expected");
        QTest::newRow("empty") << QByteArray() << "not a GGUF file";
        QTest::newRow("text") << QByteArray("hello, this is not a model file at all") << "not a GGUF file";
        QTest::newRow("truncated") << QByteArray("GGUF\x03\x00\x00\x00", 8) << "truncated";
        QByteArray v9("GGUF\x09\x00\x00\x00", 8);
        v9.append(16, '\0');
        QTest::newRow("version 9") << v9 << "unsupported GGUF version 9";
        QByteArray huge("GGUF\x03\x00\x00\x00", 8);
        huge.append(QByteArray(8, '\xff'));
        huge.append(8, '\0');
        QTest::newRow("absurd count") << huge << "absurd";
    }
    void refusesBadFiles() {
        QFETCH(QByteArray, content);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/bad.gguf").toStdString();
        std::ofstream(path, std::ios::binary).write(content.constData(), content.size());
        try {
            kvchat::read_gguf_header(path);
            QFAIL("a bad file was accepted");
        } catch (const kvchat::Error& e) {
            const QString msg = QString::fromUtf8(e.what());
            QVERIFY2(msg.contains(expected), qPrintable(msg));
            QVERIFY2(msg.contains(QString::fromStdString(path)), qPrintable(msg));
        }
    }

    void missingFileNamesPath() {
        try {
            kvchat::read_gguf_header("/nonexistent/dir/model.gguf");
            QFAIL("a missing file was accepted");
        } catch (const kvchat::Error& e) {
            QVERIFY(QString::fromUtf8(e.what()).contains("/nonexistent/dir/model.gguf"));
            QVERIFY(QString::fromUtf8(e.what()).contains("No such file"));
        }
    }
};

QTEST_GUILESS_MAIN(TestDefaultModel)
#include "test_default_model.moc"
