// Every input the fuzzers keep (tests/fuzz/corpus/<target>) and every one that ever broke a reader
// (tests/data/fuzz_regressions/<target>) replayed through the code the fuzz targets run
// (support/hostile_inputs.h), so a regression shows in the ordinary test run without clang. A
// broken invariant aborts the suite; the file being replayed is logged first.
#include "support/hostile_inputs.h"
#include "support/test_paths.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <functional>

using namespace kvchat::test;

namespace {

struct Replayed {
    int files = 0;
    int accepted = 0;
};

Replayed replay(const QString& folder, const std::function<bool(std::string_view)>& feed) {
    Replayed r;
    const QDir dir(QDir::cleanPath(QString::fromStdString(data_path(folder.toStdString()))));
    for (const QString& name : dir.entryList(QDir::Files, QDir::Name)) {
        QFile f(dir.filePath(name));
        if (!f.open(QIODevice::ReadOnly)) qFatal("cannot read %s", qPrintable(f.fileName()));
        const QByteArray bytes = f.readAll();
        qInfo("replaying %s", qPrintable(f.fileName()));
        ++r.files;
        if (feed(std::string_view(bytes.constData(), size_t(bytes.size())))) ++r.accepted;
    }
    return r;
}

bool feed_both_snapshots(std::string_view bytes) {
    const bool as_is = feed_snapshot(bytes);
    return feed_snapshot_with_fixed_crcs(bytes) || as_is;
}

}  // namespace

class TestFuzzCorpora : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void corpora_data() {
        QTest::addColumn<QString>("target");
        for (const char* t : {"snapshot", "cache_spec", "chat_template", "store"}) QTest::newRow(t) << QString(t);
    }
    // The corpus holds the seeds (valid inputs) and what the fuzzer found interesting: every file
    // replays without breaking an invariant, and the valid ones are still accepted.
    void corpora() {
        QFETCH(QString, target);
        const std::function<bool(std::string_view)> feeds[] = {feed_both_snapshots, feed_cache_spec, feed_chat_template,
                                                               feed_store_database};
        const QStringList targets{"snapshot", "cache_spec", "chat_template", "store"};
        const auto& feed = feeds[targets.indexOf(target)];
        const Replayed corpus = replay("../fuzz/corpus/" + target, feed);
        QVERIFY2(corpus.files >= 3, qPrintable(QString("the %1 corpus has %2 files").arg(target).arg(corpus.files)));
        QVERIFY2(corpus.accepted >= 1, qPrintable(QString("no input of the %1 corpus is accepted").arg(target)));
        const Replayed found = replay("fuzz_regressions/" + target, feed);
        qInfo("%s: %d corpus files (%d accepted), %d regression inputs", qPrintable(target), corpus.files,
              corpus.accepted, found.files);
    }
};

QTEST_GUILESS_MAIN(TestFuzzCorpora)
#include "test_fuzz_corpora.moc"
