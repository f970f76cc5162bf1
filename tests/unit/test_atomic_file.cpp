// Atomic file replacement, the size-capped whole-file read, and UTF-8 checking and repair.
// The UTF-8 expectations are worked out by hand from Unicode chapter 3 (table 3-7, the
// well-formed byte sequences, and "U+FFFD substitution of maximal subparts"), not by running
// the code.
#include "engine/common/utf8.h"
#include "engine/error.h"
#include "engine/common/atomic_file.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <string>
#include <sys/resource.h>

namespace {

std::string read_all(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return "<unreadable>";
    const QByteArray b = f.readAll();
    return std::string(b.constData(), static_cast<size_t>(b.size()));
}

void write_plain(const QString& path, const std::string& bytes) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(bytes.data(), static_cast<qint64>(bytes.size())), static_cast<qint64>(bytes.size()));
}

// Every entry of the folder, hidden ones included, so a left-behind temporary file shows up.
QStringList entries(const QString& dir) {
    return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name);
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const kvchat::Error& e) {
        return e.what();
    }
    return "<no error>";
}

// The UTF-8 encoding of a code point, written out from the bit layout in the standard.
std::string encode(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

std::string bytes_of(const QByteArray& b) { return std::string(b.constData(), static_cast<size_t>(b.size())); }

}  // namespace

class TestAtomicFile : public QObject {
    Q_OBJECT
private slots:
    void createsAndReplaces() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/snapshot.bin";
        kvchat::write_file_atomically(path.toStdString(), "first");
        QCOMPARE(read_all(path), std::string("first"));
        // Binary content with every byte value, NUL included, and larger than one write buffer.
        std::string big;
        for (int i = 0; i < (1 << 20); ++i) big += static_cast<char>((i * 7 + i / 256) & 0xFF);
        kvchat::write_file_atomically(path.toStdString(), big);
        QCOMPARE(read_all(path), big);
        kvchat::write_file_atomically(path.toStdString(), "");
        QCOMPARE(read_all(path), std::string());
        QCOMPARE(entries(dir.path()), QStringList{"snapshot.bin"});
    }

    void nothingVisibleBeforeCommit() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/cache.snap";
        write_plain(path, "old");
        {
            kvchat::AtomicFile f(path.toStdString());
            f.write("new ");
            f.write("content");
            QCOMPARE(read_all(path), std::string("old"));
            QCOMPARE(entries(dir.path()).size(), 2);  // the target and the temporary file
            QVERIFY(QFile::exists(QString::fromStdString(f.temporary_path())));
            const QString temporary = QString::fromStdString(f.temporary_path());
            QCOMPARE(QFileInfo(temporary).dir().path(), dir.path());
            f.commit();
            QVERIFY(!QFile::exists(temporary));
        }
        QCOMPARE(read_all(path), std::string("new content"));
        QCOMPARE(entries(dir.path()), QStringList{"cache.snap"});
        QVERIFY(!(QFileInfo(path).permissions() & (QFile::ReadOther | QFile::WriteOther)));
    }

    void abandonedWriteLeavesOldFile() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/cache.snap";
        write_plain(path, "precious");
        {
            kvchat::AtomicFile f(path.toStdString());
            f.write("half of a snapsh");
        }  // destroyed without commit, as when the writer throws half way
        QCOMPARE(read_all(path), std::string("precious"));
        QCOMPARE(entries(dir.path()), QStringList{"cache.snap"});
    }

    void missingDirectoryFails() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/no-such-folder/cache.snap";
        const std::string msg = error_of([&] { kvchat::write_file_atomically(path.toStdString(), "x"); });
        QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("No such file or directory") != std::string::npos, msg.c_str());
        QCOMPARE(entries(dir.path()), QStringList{});
    }

    void parentIsAFileFails() {
        // Fails for root too, unlike a permission bit.
        QTemporaryDir dir;
        write_plain(dir.path() + "/notes.txt", "notes");
        const QString path = dir.path() + "/notes.txt/cache.snap";
        const std::string msg = error_of([&] { kvchat::write_file_atomically(path.toStdString(), "x"); });
        QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("Not a directory") != std::string::npos, msg.c_str());
        QCOMPARE(read_all(dir.path() + "/notes.txt"), std::string("notes"));
        QCOMPARE(entries(dir.path()), QStringList{"notes.txt"});
    }

    void procFails() {
        const std::string path = "/proc/kvchat-atomic-file-test";
        const std::string msg = error_of([&] { kvchat::write_file_atomically(path, "x"); });
        QVERIFY2(msg.find(path) != std::string::npos, msg.c_str());
        QVERIFY(!QFile::exists(QString::fromStdString(path)));
    }

    void failedWriteLeavesOldFileAndNoTemporary() {
        // A file-size limit makes write() fail part way (EFBIG), as a full disk would (ENOSPC),
        // and it binds root too.
        QTemporaryDir dir;
        const QString path = dir.path() + "/cache.snap";
        write_plain(path, "precious old snapshot");
        struct rlimit old_limit {};
        QCOMPARE(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
        struct rlimit small = old_limit;
        small.rlim_cur = 64 * 1024;
        auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
        const std::string msg =
            error_of([&] { kvchat::write_file_atomically(path.toStdString(), std::string(1 << 20, 'k')); });
        setrlimit(RLIMIT_FSIZE, &old_limit);
        std::signal(SIGXFSZ, old_handler);
        QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("File too large") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("the file size limit was reached") != std::string::npos, msg.c_str());
        QCOMPARE(read_all(path), std::string("precious old snapshot"));
        QCOMPARE(entries(dir.path()), QStringList{"cache.snap"});
    }

    void readWholeFile() {
        QTemporaryDir dir;
        const QString path = dir.path() + "/data.bin";
        const std::string content("abc\0def", 7);
        write_plain(path, content);
        QCOMPARE(kvchat::read_whole_file(path.toStdString(), 7), content);

        std::string msg = error_of([&] { kvchat::read_whole_file(path.toStdString(), 6); });
        QVERIFY2(msg.find(path.toStdString()) != std::string::npos && msg.find("limit of 6 bytes") != std::string::npos,
                 msg.c_str());
        msg = error_of([&] { kvchat::read_whole_file((dir.path() + "/missing").toStdString(), 100); });
        QVERIFY2(msg.find("/missing") != std::string::npos && msg.find("No such file or directory") != std::string::npos,
                 msg.c_str());
        msg = error_of([&] { kvchat::read_whole_file(dir.path().toStdString(), 100); });
        QVERIFY2(msg.find("directory") != std::string::npos, msg.c_str());
        // /proc files report size 0, so the limit must hold on what is actually read.
        msg = error_of([&] { kvchat::read_whole_file("/proc/self/status", 16); });
        QVERIFY2(msg.find("/proc/self/status") != std::string::npos && msg.find("limit") != std::string::npos,
                 msg.c_str());
        QVERIFY(kvchat::read_whole_file("/proc/self/status", 1 << 20).find("Name:") != std::string::npos);
    }

    void utf8Cases_data() {
        QTest::addColumn<QByteArray>("input");
        QTest::addColumn<QByteArray>("repaired");
        QTest::addColumn<bool>("valid");
        const QByteArray R = "efbfbd";  // U+FFFD
        auto row = [](const char* name, const QByteArray& in, const QByteArray& out, bool valid) {
            QTest::newRow(name) << QByteArray::fromHex(in) << QByteArray::fromHex(out) << valid;
        };
        row("empty", "", "", true);
        row("ascii", "68656c6c6f", "68656c6c6f", true);
        row("nul is a character", "610062", "610062", true);
        row("two-byte e-acute", "c3a9", "c3a9", true);
        row("three-byte euro", "e282ac", "e282ac", true);
        row("four-byte emoji", "f09f9880", "f09f9880", true);
        row("last before surrogates U+D7FF", "ed9fbf", "ed9fbf", true);
        row("first after surrogates U+E000", "ee8080", "ee8080", true);
        row("largest U+10FFFF", "f48fbfbf", "f48fbfbf", true);
        // Overlong forms: C0 and C1 never start a sequence; E0 needs A0..BF and F0 needs 90..BF
        // next, so each byte is its own maximal subpart.
        row("overlong slash C0 AF", "c0af", R + R, false);
        row("overlong C1 BF", "c1bf", R + R, false);
        row("overlong three-byte E0 80 AF", "e080af", R + R + R, false);
        row("overlong U+07FF E0 9F BF", "e09fbf", R + R + R, false);
        row("overlong four-byte F0 80 80 AF", "f08080af", R + R + R + R, false);
        row("overlong U+FFFF F0 8F BF BF", "f08fbfbf", R + R + R + R, false);
        // Surrogates: after ED only 80..9F may follow.
        row("high surrogate ED A0 80", "eda080", R + R + R, false);
        row("low surrogate ED BF BF", "edbfbf", R + R + R, false);
        row("surrogate pair in CESU form", "eda0bdedb880", R + R + R + R + R + R, false);
        // Beyond U+10FFFF: after F4 only 80..8F may follow; F5..FF never start a sequence.
        row("U+110000 F4 90 80 80", "f4908080", R + R + R + R, false);
        row("F5 lead", "f5808080", R + R + R + R, false);
        row("FF byte", "ff", R, false);
        row("FE FF between letters", "61feff62", "61" + R + R + "62", false);
        // Stray continuation bytes.
        row("lone continuation", "80", R, false);
        row("continuation between letters", "6180bf62", "61" + R + R + "62", false);
        // Truncated sequences: the valid start of a sequence is one maximal subpart.
        row("truncated two-byte at end", "61c3", "61" + R, false);
        row("truncated three-byte at end", "e282", R, false);
        row("truncated three-byte before letter", "e28241", R + "41", false);
        row("truncated four-byte at end", "f09f98", R, false);
        row("truncated four-byte before letter", "f09f9878", R + "78", false);
        row("truncated then complete", "e282e282ac", R + "e282ac", false);
        // Unicode's own example (chapter 3, table 3-8).
        row("unicode table 3-8", "61f18080e180c262806380bf64", "61" + R + R + R + "62" + R + "63" + R + R + "64", false);
    }

    void utf8Cases() {
        QFETCH(QByteArray, input);
        QFETCH(QByteArray, repaired);
        QFETCH(bool, valid);
        QCOMPARE(kvchat::is_valid_utf8(bytes_of(input)), valid);
        const kvchat::RepairedUtf8 r = kvchat::repair_utf8(bytes_of(input));
        QCOMPARE(QByteArray::fromStdString(r.text).toHex(' '), repaired.toHex(' '));
        QCOMPARE(r.replaced, !valid);
        QVERIFY(kvchat::is_valid_utf8(r.text));
    }

    void utf8EveryCodePoint() {
        // Every scalar value encodes to valid UTF-8; every surrogate, encoded the same way, does not.
        std::string all;
        for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) {
                const std::string s = encode(cp);
                if (kvchat::is_valid_utf8(s)) QFAIL(qPrintable(QString("surrogate %1 accepted").arg(cp, 0, 16)));
                continue;
            }
            all += encode(cp);
        }
        QVERIFY(kvchat::is_valid_utf8(all));
        const kvchat::RepairedUtf8 r = kvchat::repair_utf8(all);
        QVERIFY(!r.replaced);
        QVERIFY(r.text == all);
    }
};

QTEST_GUILESS_MAIN(TestAtomicFile)
#include "test_atomic_file.moc"
