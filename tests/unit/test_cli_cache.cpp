// kvchat-cli's cache options on a tiny model: --cache on generate and bench, the telemetry in
// --json, and refusals that name the bad parameter.
#include "support/cli_run.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <vector>

using Run = kvchat::test::CliRun;
using kvchat::test::run_cli;

namespace {
Run cli(const QStringList& args) { return run_cli(args); }
}  // namespace

class TestCliCache : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    QString model_;

private slots:
    void initTestCase() {
        model_ = dir_.path() + "/tiny.gguf";
        kvchat::test::TinyModelSpec s;
        kvchat::test::write_tiny_gguf(s, model_.toStdString());
    }

    void generateReportsTelemetry() {
        const Run r = cli({"generate", "--model", model_, "--prompt", "the cat sat on the mat", "-n", "12", "--greedy",
                           "--cache", "hybrid+quantized:nbits=8,residual=8,group=8", "--json", "--threads", "2"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        const QJsonObject c = j["cache"].toObject();
        QCOMPARE(c["spec"].toString(), QString("hybrid+quantized:nbits=8,residual=8,group=8"));
        const QJsonArray layers = c["layers"].toArray();
        QCOMPARE(layers.size(), 6);
        QCOMPARE(layers[0].toObject()["kind"].toString(), QString("sliding"));
        QCOMPARE(layers[5].toObject()["kind"].toString(), QString("global"));
        QVERIFY(layers[5].toObject()["quantized_tokens"].toInt() > 0);
        QVERIFY(layers[0].toObject()["evicted"].toInt() > 0);
        QVERIFY(c["total_bytes"].toDouble() > 0);
        QVERIFY(c["bytes_per_token"].toDouble() > 0);
    }

    void benchPrintsOneRowPerStrategyAndContext() {
        const Run r = cli({"bench", "--model", model_, "--cache", "dynamic,sink:window=8,sinks=2,quantized:nbits=4,residual=8,group=8",
                           "--context", "16,24", "--gen-tokens", "4", "--json", "--threads", "2"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonArray rows = QJsonDocument::fromJson(r.out.toUtf8()).array();
        QCOMPARE(rows.size(), 6);
        for (const auto& v : rows) {
            const QJsonObject row = v.toObject();
            QVERIFY(row["kv_bytes"].toDouble() > 0);
            QVERIFY(row["prefill_tok_s"].toDouble() > 0);
            QVERIFY(row["decode_tok_s"].toDouble() > 0);
            QVERIFY(row["agreement"].toDouble() >= 0 && row["agreement"].toDouble() <= 1);
        }
        QCOMPARE(rows[0].toObject()["agreement"].toDouble(), 1.0);
        QCOMPARE(rows[1].toObject()["strategy"].toString(), QString("sink:window=8,sinks=2"));
        QVERIFY(rows[1].toObject()["kv_bytes"].toDouble() < rows[0].toObject()["kv_bytes"].toDouble());
        // The text table has a header and one line per row.
        const Run t = cli({"bench", "--model", model_, "--cache", "dynamic,static:max_len=40", "--context", "16",
                           "--gen-tokens", "3", "--threads", "2"});
        QVERIFY2(t.code == 0, qPrintable(t.err));
        const QStringList lines = t.out.trimmed().split('\n');
        QCOMPARE(lines.size(), 3);
        QVERIFY(lines[0].contains("KV MiB") && lines[0].contains("prefill/s") && lines[0].contains("decode/s") &&
                lines[0].contains("agree") && lines[0].contains("conv ms"));
        QVERIFY(lines[1].startsWith("dynamic") && lines[1].endsWith(" -"));  // nothing to convert
        QVERIFY(lines[2].startsWith("static:max_len=40"));
    }

    // The plain bench's share of the bandwidth: each run against the bandwidth read beside it
    // (not one reading taken after all runs), and the reading's buffer is not counted as the
    // engine's memory.
    void benchSharesEachRunAgainstItsOwnBandwidth() {
        const Run r = cli({"bench", "--model", model_, "--prompt-tokens", "16", "--gen-tokens", "8", "--runs", "3",
                           "--json", "--threads", "2"});
        QVERIFY2(r.code == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        const QJsonArray decode = j["decode_runs_tok_s"].toArray(), bw = j["memory_read_gbs_runs"].toArray(),
                         share = j["decode_bandwidth_fraction_runs"].toArray();
        QCOMPARE(decode.size(), 3);
        QCOMPARE(bw.size(), 3);
        QCOMPARE(share.size(), 3);
        const double per_token = j["decode_weight_bytes_per_token"].toDouble() + j["decode_kv_bytes_per_token"].toDouble();
        QVERIFY(per_token > 0);
        std::vector<double> shares;
        for (int i = 0; i < 3; ++i) {
            QVERIFY(bw[i].toDouble() > 0);
            const double expected = per_token * decode[i].toDouble() / 1e9 / bw[i].toDouble();
            QVERIFY2(std::abs(share[i].toDouble() - expected) <= 1e-9 * expected,
                     qPrintable(QString("run %1: share %2, its decode over its bandwidth %3").arg(i).arg(share[i].toDouble()).arg(expected)));
            shares.push_back(share[i].toDouble());
        }
        std::sort(shares.begin(), shares.end());
        QCOMPARE(j["decode_bandwidth_fraction"].toDouble(), shares[1]);
        QCOMPARE(j["decode_bandwidth_fraction_min"].toDouble(), shares[0]);
        QCOMPARE(j["decode_bandwidth_fraction_max"].toDouble(), shares[2]);
        // The reading's 256 MiB buffer is gone before the resident memory is read.
        QVERIFY2(j["rss_after_bench_mib"].toDouble() < j["rss_after_load_mib"].toDouble() + 128,
                 qPrintable(QString("%1 MiB after the runs, %2 after load").arg(j["rss_after_bench_mib"].toDouble()).arg(j["rss_after_load_mib"].toDouble())));
    }

    // A strategy that cannot hold the longest context and its generated tokens is refused before
    // any prefill, not after minutes of it.
    void benchRefusesTooSmallACacheUpFront() {
        const Run r = cli({"bench", "--model", model_, "--cache", "dynamic,static:max_len=20", "--context", "8,16",
                           "--gen-tokens", "8", "--threads", "2"});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--cache static:max_len=20 at --context 16 with --gen-tokens 8") && r.err.contains("max_len=20 tokens, but 23"),
                 qPrintable(r.err));
        QVERIFY2(r.out.isEmpty(), qPrintable(r.out));
    }

    // A spill file that reaches a file size limit (ulimit -f) mid-generation: the tool does not die
    // of SIGXFSZ but stops with an error naming the spill file. The tiny model's last layer (5) is
    // its only global one; the spill file keeps layer i at byte offset i << 36, so the limit leaves
    // that layer 16 KiB, 16 tokens.
    void fullSpillFileIsAnErrorNotACrash() {
        const rlim_t limit = (rlim_t{5} << 36) + 16384;
        rlimit rl{};
        if (::getrlimit(RLIMIT_FSIZE, &rl) != 0 || (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < limit))
            QSKIP("the hard file size limit is too low for this test");
        QTemporaryDir spill;
        QProcess p;
        p.setChildProcessModifier([limit] {
            rlimit r{};
            ::getrlimit(RLIMIT_FSIZE, &r);
            r.rlim_cur = limit;
            ::setrlimit(RLIMIT_FSIZE, &r);
        });
        p.start(QString::fromUtf8(kvchat::test::cli_path()),
                {"generate", "--model", model_, "--prompt", "the cat sat on the mat", "-n", "40", "--greedy", "--cache",
                 "offloaded:dir=" + spill.path(), "--threads", "2"});
        QVERIFY(p.waitForFinished(120000));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 2);
        QVERIFY2(err.contains(spill.path() + "/kvchat-spill-") && err.contains("disk is full"), qPrintable(err));
        QVERIFY(QDir(spill.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
    }

    void badCacheSpecsAreNamed_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("expected");
        QTest::newRow("unknown") << "turbo" << "unknown cache strategy 'turbo'";
        QTest::newRow("nbits") << "quantized:nbits=3" << "nbits=3";
        QTest::newRow("sinks") << "sink:window=4,sinks=6" << "sinks=6 must be smaller than window=4";
        QTest::newRow("max_len") << "static:max_len=3" << "max_len=3";
        QTest::newRow("dir") << "offloaded:dir=/nonexistent/tier" << "/nonexistent/tier";
    }
    void badCacheSpecsAreNamed() {
        QFETCH(QString, spec);
        QFETCH(QString, expected);
        const Run r = cli({"generate", "--model", model_, "--prompt", "the cat sat on the mat", "-n", "2", "--cache", spec});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(expected), qPrintable(r.err));
    }

    // A static cache too large to allocate names the spec and the bytes it asked for (issue 25:
    // it said only "out of memory"). The bytes from the model's shapes: the global layer holds
    // max_len records and each sliding layer a ring of its window; a record is a key row and a
    // value row of n_head_kv x head_dim f16 values.
    void staticTooLargeNamesTheSpecAndTheBytes() {
#if defined(__SANITIZE_ADDRESS__)
        QSKIP("AddressSanitizer's operator new aborts on an allocation it cannot make instead of throwing std::bad_alloc");
#endif
        const kvchat::test::TinyModelSpec s;
        const int64_t max_len = 2000000000, record = 2LL * s.n_head_kv * s.head_dim * 2;
        int64_t bytes = 0;
        for (int il = 0; il < s.n_layer; ++il)
            bytes += (kvchat::test::tiny_layer_sliding(s, il) ? s.sliding_window : max_len) * record;
        QString digits = QString::number(bytes);
        for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ',');
        const Run r = cli({"generate", "--model", model_, "--prompt", "the cat", "-n", "2", "--cache", "static:max_len=2000000000"});
        if (r.code == 0) QSKIP("this machine lends a terabyte of memory up front (vm.overcommit_memory=1?)");
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("static:max_len=2000000000") && r.err.contains(digits + " bytes") &&
                     r.err.contains("choose a smaller max_len"),
                 qPrintable(r.err + " (expected " + digits + " bytes)"));
    }
};

QTEST_GUILESS_MAIN(TestCliCache)
#include "test_cli_cache.moc"
