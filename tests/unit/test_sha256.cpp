// SHA-256 against the FIPS 180-4 example vectors, fed whole and in pieces of every size.
#include "engine/common/sha256.h"

#include <QtTest>
#include <string>

class TestSha256 : public QObject {
    Q_OBJECT
private slots:
    void knownVectors_data() {
        QTest::addColumn<QByteArray>("message");
        QTest::addColumn<QString>("digest");
        QTest::newRow("empty") << QByteArray() << "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        QTest::newRow("abc") << QByteArray("abc") << "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        QTest::newRow("448 bits") << QByteArray("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                                  << "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
        QTest::newRow("896 bits")
            << QByteArray("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")
            << "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1";
        QTest::newRow("million a") << QByteArray(1000000, 'a')
                                   << "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    }
    void knownVectors() {
        QFETCH(QByteArray, message);
        QFETCH(QString, digest);
        kvchat::Sha256 whole;
        whole.update(message.constData(), size_t(message.size()));
        QCOMPARE(QString::fromStdString(whole.hex_digest()), digest);

        // The same bytes in uneven pieces exercise the partial-block buffer.
        for (size_t piece : {size_t(1), size_t(3), size_t(63), size_t(64), size_t(65), size_t(1000)}) {
            if (piece == 1 && message.size() > 100000) continue;  // a million calls prove nothing more
            kvchat::Sha256 pieces;
            for (qsizetype at = 0; at < message.size(); at += qsizetype(piece))
                pieces.update(message.constData() + at, std::min<size_t>(piece, size_t(message.size() - at)));
            QCOMPARE(QString::fromStdString(pieces.hex_digest()), digest);
        }
    }

    void paddingBoundaries() {
        // Lengths around the 55/56/64-byte padding edges must all give distinct, stable digests.
        QSet<QString> seen;
        for (int n = 50; n <= 130; ++n) {
            const QByteArray m(n, 'x');
            kvchat::Sha256 a, b;
            a.update(m.constData(), size_t(n));
            b.update(m.constData(), size_t(n) / 2);
            b.update(m.constData() + n / 2, size_t(n - n / 2));
            const QString da = QString::fromStdString(a.hex_digest());
            QCOMPARE(QString::fromStdString(b.hex_digest()), da);
            QCOMPARE(da.size(), 64);
            QVERIFY(!seen.contains(da));
            seen.insert(da);
        }
    }
};

QTEST_GUILESS_MAIN(TestSha256)
#include "test_sha256.moc"
