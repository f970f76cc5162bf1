// The comparison view: one column per strategy with the first token that parts from dynamic's
// highlighted where the row says, the KV chart's lines, the CSV export parsed back, and the
// request / cancel signals; rows from the engine's runner (the default model when installed, for
// answers that really diverge) and rows built by hand.
#include "engine/compute/backend.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/lab/comparison_view.h"
#include "ui/inspector/byte_size_text.h"
#include "ui/lab/kv_bytes_chart.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextEdit>
#include <QtTest>

using kvchat::ComparisonRow;
using kvchat::ComparisonView;

namespace {

using kvchat::test::screenshotDir;
using kvchat::test::splitCsv;

ComparisonRow row(const std::string& spec, std::vector<std::string> pieces, int64_t divergence, double agreement) {
    ComparisonRow r;
    r.strategy = spec;
    r.context = 7;
    r.pieces = std::move(pieces);
    for (size_t i = 0; i < r.pieces.size(); ++i) {
        r.tokens.push_back(static_cast<int32_t>(100 + i));
        r.text += r.pieces[i];
    }
    r.first_divergence = divergence;
    r.answer_end = static_cast<int64_t>(r.pieces.size());
    r.agreement = agreement;
    r.kv_bytes = 1000;
    r.peak_kv_bytes = 1200;
    r.kv_series = {{0, 0}, {7, 700}, {8, 800}, {9, 900}, {10, 1000}};
    r.ttft_ms = 12.5;
    r.decode_tok_s = 40;
    return r;
}

// Whether the answer's characters [b, e) carry the divergence highlight, and no others do (line
// breaks between paragraphs carry no character format and are left out).
bool highlightedExactly(QTextEdit* edit, int b, int e) {
    for (QTextBlock block = edit->document()->begin(); block.isValid(); block = block.next())
        for (auto it = block.begin(); !it.atEnd(); ++it) {
            const QTextFragment f = it.fragment();
            const bool marked = f.charFormat().background().color() == ComparisonView::divergenceColor();
            for (int i = f.position(); i < f.position() + f.length(); ++i)
                if (marked != (i >= b && i < e)) return false;
        }
    return true;
}

// Splits CSV text into records, keeping newlines inside quoted fields.
QStringList csvRecords(const QString& text) {
    QStringList out;
    QString cur;
    bool quoted = false;
    for (QChar c : text) {
        if (c == '"') quoted = !quoted;
        if (c == '\n' && !quoted) {
            out << cur;
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.isEmpty()) out << cur;
    return out;
}

}  // namespace

class TestComparisonView : public QObject {
    Q_OBJECT

    // Columns, the highlight's place and the chart, for any rows.
    static void checkView(ComparisonView& view, const std::vector<ComparisonRow>& rows) {
        QCOMPARE(view.columnCount(), static_cast<int>(rows.size()));
        QCOMPARE(view.findChildren<QWidget*>("comparisonColumn").size(), static_cast<int>(rows.size()));
        for (int k = 0; k < view.columnCount(); ++k) {
            const ComparisonRow& r = rows[static_cast<size_t>(k)];
            QTextEdit* answer = view.answerView(k);
            QCOMPARE(answer->toPlainText(), QString::fromStdString(r.text));
            const auto span = view.divergenceSpan(k);
            if (r.first_divergence < 0) {
                QCOMPARE(span, (QPair<int, int>(-1, -1)));
                QVERIFY(highlightedExactly(answer, 0, 0));
                QVERIFY(view.metricsLabel(k)->text().contains("first divergence: none"));
                continue;
            }
            // Where the token starts: the text of the tokens before it.
            QString before;
            for (int64_t i = 0; i < r.first_divergence; ++i) before += QString::fromStdString(r.pieces[static_cast<size_t>(i)]);
            const QString piece = QString::fromStdString(r.pieces[static_cast<size_t>(r.first_divergence)]);
            QCOMPARE(span.first, static_cast<int>(before.size()));
            QCOMPARE(answer->toPlainText().mid(span.first, span.second - span.first), piece);
            QVERIFY(highlightedExactly(answer, span.first, span.second));
            QVERIFY2(view.metricsLabel(k)->text().contains(QString("token %1").arg(r.first_divergence)),
                     qPrintable(view.metricsLabel(k)->text()));
        }
        const auto& lines = view.chart()->lines();
        QCOMPARE(lines.size(), rows.size());
        for (size_t k = 0; k < rows.size(); ++k) {
            QCOMPARE(lines[k].points, rows[k].kv_series);
            QCOMPARE(lines[k].color, ComparisonView::columnColor(static_cast<int>(k)));
        }
    }

private Q_SLOTS:
    void handBuiltRows() {
        ComparisonView view;
        view.resize(900, 600);
        const std::vector<ComparisonRow> rows = {
            row("dynamic", {"The", " cat", " sat", " on", " the", " mat"}, -1, 1.0),
            row("sink:window=8,sinks=2", {"The", " cat", " ran", " off", " the", " mat"}, 2, 4.0 / 6),
            row("quantized:nbits=2,residual=128,group=64", {"The", " dog", " sat", " on", " the", " mat"}, 1, 5.0 / 6),
        };
        view.showRows(rows);
        checkView(view, rows);
        QCOMPARE(view.divergenceSpan(1), (QPair<int, int>(7, 11)));  // "The cat" then " ran"
        // The chart puts a point where its numbers say.
        const QPointF p = view.chart()->mapPoint(10, 1000);
        QVERIFY(view.chart()->toolTipAt(p).contains("1,000 bytes") || view.chart()->toolTipAt(p).contains("1000 bytes"));
        QVERIFY(qAbs(p.x() - view.chart()->plotArea().right()) < 1e-9 && qAbs(p.y() - view.chart()->plotArea().top()) < 1e-9);
    }

    // Before a comparison the chart draws no axis (it used to read "0 B, 0 B, 0 B, 1 B") but says
    // what will be there; the answer panes hold a paragraph; the view says how it times.
    void emptyChartAndRoomyPanes() {
        ComparisonView view;
        view.resize(900, 600);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(view.chart()->tokenTicks().empty());
        QVERIFY(view.chart()->byteTicks().empty());
        QVERIFY(!view.chart()->placeholderText().isEmpty());
        // Drawn: the placeholder's words, no axis.
        const QImage empty = view.chart()->grab().toImage();
        QVERIFY(view.timingNote()->text().contains("warm-up"));
        view.showRows({row("dynamic", {"The", " cat"}, -1, 1.0), row("sink:window=8,sinks=2", {"The", " dog"}, 1, 0.5)});
        QVERIFY(!view.chart()->byteTicks().empty());
        QVERIFY(view.chart()->grab().toImage() != empty);
        const QTextEdit* answer = view.answerView(0);
        QVERIFY(answer->height() >= answer->fontMetrics().lineSpacing() * 10);
    }

    // Axis marks are round, distinct once labelled, start at 0 and end at the first mark at or
    // past the largest value (the values are the chart's own data, not the code's output).
    void chartAxesAreRound_data() {
        QTest::addColumn<qint64>("tokens");
        QTest::addColumn<qint64>("bytes");
        QTest::newRow("one token, one byte") << qint64(1) << qint64(1);
        QTest::newRow("a tiny model") << qint64(45) << qint64(3'000);
        QTest::newRow("gemma's 1,212 tokens") << qint64(1'212) << qint64(10'590'000);
        QTest::newRow("a long chat") << qint64(32'768) << qint64(3'221'225'472);
    }
    void chartAxesAreRound() {
        QFETCH(qint64, tokens);
        QFETCH(qint64, bytes);
        kvchat::KvBytesChart chart;
        chart.setLines({{"dynamic", Qt::black, {{0, 0}, {tokens / 2, bytes / 3}, {tokens, bytes}}}});
        for (const auto& [ticks, largest] : {std::pair{chart.tokenTicks(), tokens}, std::pair{chart.byteTicks(), bytes}}) {
            QVERIFY(ticks.size() >= 2 && ticks.size() <= 12);
            QCOMPARE(ticks.front(), int64_t(0));
            QVERIFY(ticks.back() >= largest);
            QVERIFY(ticks[ticks.size() - 2] < largest);
            const int64_t step = ticks[1] - ticks[0];
            for (size_t i = 1; i < ticks.size(); ++i) QCOMPARE(ticks[i] - ticks[i - 1], step);
        }
        // Tokens step by 1, 2 or 5 times a power of ten.
        int64_t step = chart.tokenTicks()[1];
        while (step % 10 == 0) step /= 10;
        QVERIFY2(step == 1 || step == 2 || step == 5, qPrintable(QString::number(chart.tokenTicks()[1])));
        QStringList labels;
        for (int64_t b : chart.byteTicks()) labels << kvchat::byteSizeText(b);
        QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
    }

    void runnerRowsOnTheDefaultModel() {
        const std::string path = kvchat::resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(path))) QSKIP("default model not installed (packaging/kvchat.sh model)");
        auto model = kvchat::Model::load(path);
        auto backend = kvchat::make_cpu_backend(2);
        // A continuation (the default model answers it sensibly; its chat turns mostly echo the question).
        const QString text = "The eight planets of the solar system, in order from the Sun, are";
        const auto prompt = model->tokenizer().encode(text.toStdString(), true);
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 48;
        const std::vector<std::string> specs = {"dynamic", "sink:window=16,sinks=4", "quantized:nbits=2,residual=32,group=32",
                                                "sliding_window:window=24"};
        const auto rows = kvchat::compare_strategies(*model, *backend, prompt, specs, opt);
        int diverging = 0;
        for (const auto& r : rows) diverging += r.first_divergence >= 0;
        QVERIFY(diverging > 0);
        ComparisonView view;
        view.resize(1280, 820);
        view.setStrategies({"dynamic", "sink:window=16,sinks=4", "quantized:nbits=2,residual=32,group=32", "sliding_window:window=24"});
        view.promptEdit()->setText(text);
        view.tokensBox()->setValue(48);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.showRows(rows);
        checkView(view, rows);
        QTest::qWait(50);
        const QString shot = screenshotDir() + "/comparison-default-model-4-strategies.png";
        QVERIFY(view.grab().save(shot));
        qInfo("wrote %s", qPrintable(shot));
    }

    void runnerRowsOnATinyModel() {
        QTemporaryDir dir;
        kvchat::test::TinyModelSpec s;
        const std::string path = (dir.path() + "/tiny.gguf").toStdString();
        kvchat::test::write_tiny_gguf(s, path);
        auto model = kvchat::Model::load(path);
        auto backend = kvchat::make_cpu_backend(2);
        kvchat::ComparisonOptions opt;
        opt.gen_tokens = 8;
        const auto rows = kvchat::compare_strategies(*model, *backend, kvchat::benchmark_prompt(*model, 20),
                                                     {"dynamic", "hybrid", "sink:window=8,sinks=2"}, opt);
        ComparisonView view;
        view.resize(1100, 700);
        view.setStrategies({"dynamic", "hybrid", "sink:window=8,sinks=2"});
        view.promptEdit()->setText(QString::fromUtf8(kvchat::benchmark_text().data(), 40));
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.showRows(rows);
        checkView(view, rows);
        QTest::qWait(50);
        // Random weights: the answers are noise, but the layout and the chart are real.
        const QString shot = screenshotDir() + "/comparison-tiny-model-3-strategies.png";
        QVERIFY(view.grab().save(shot));
        qInfo("wrote %s", qPrintable(shot));
        // The CSV names every strategy once, with its figures.
        const QStringList records = csvRecords(view.csv());
        QCOMPARE(records.size(), 4);
        const QStringList head = splitCsv(records[0]);
        for (int k = 0; k < 3; ++k) {
            const QStringList f = splitCsv(records[k + 1]);
            QCOMPARE(f.size(), head.size());
            const auto& r = rows[static_cast<size_t>(k)];
            QCOMPARE(f[head.indexOf("strategy")].toStdString(), r.strategy);
            QCOMPARE(f[head.indexOf("first_divergence")].toLongLong(), r.first_divergence);
            QCOMPARE(f[head.indexOf("agreement")].toDouble(), r.agreement);
            QCOMPARE(f[head.indexOf("peak_kv_bytes")].toLongLong(), r.peak_kv_bytes);
            QCOMPARE(f[head.indexOf("kv_bytes")].toLongLong(), r.kv_bytes);
            QCOMPARE(f[head.indexOf("ttft_ms")].toDouble(), r.ttft_ms);
            QCOMPARE(f[head.indexOf("text")].toStdString(), r.text);
        }
        QTemporaryDir out;
        QVERIFY(view.exportCsv(out.path() + "/c.csv"));
        QFile f(out.path() + "/c.csv");
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(f.readAll()), view.csv());
    }

    void requestsAndCancel() {
        ComparisonView view;
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QSignalSpy asks(&view, &ComparisonView::compareRequested);
        QSignalSpy cancels(&view, &ComparisonView::cancelRequested);
        view.strategyPicker(1)->setCurrentText("quantized:nbits=3");
        QVERIFY2(view.validationMessage().contains("nbits=3"), qPrintable(view.validationMessage()));
        QVERIFY(!view.runButton()->isEnabled());
        view.strategyPicker(1)->setCurrentText("quantized:nbits=4");
        view.strategyPicker(2)->setCurrentText("sink:window=64,sinks=4");
        QVERIFY(!view.runButton()->isEnabled());  // no prompt yet
        view.promptEdit()->setFocus();
        QTest::keyClicks(view.promptEdit(), "Why is the sky blue?");
        QVERIFY(view.runButton()->isEnabled());
        QTest::mouseClick(view.runButton(), Qt::LeftButton);
        QCOMPARE(asks.count(), 1);
        const auto a = asks.at(0);
        QCOMPARE(a.at(0).toStringList(),
                 QStringList({"dynamic", "quantized:nbits=4,residual=128,group=64", "sink:window=64,sinks=4"}));
        QCOMPARE(a.at(1).toLongLong(), qint64(-1));
        QCOMPARE(a.at(2).toString(), QString("Why is the sky blue?"));
        QCOMPARE(a.at(3).toInt(), 32);
        QVERIFY(view.busy() && !view.runButton()->isEnabled());
        view.showProgress("Decoding", 3, 32);
        QTest::mouseClick(view.cancelButton(), Qt::LeftButton);
        QCOMPARE(cancels.count(), 1);
        view.showError("comparison cancelled");
        QVERIFY(!view.busy() && view.runButton()->isEnabled());
        // A conversation instead of a prompt.
        view.setConversations({{7, "Trip to Lisbon"}, {9, "Recipes"}});
        view.findChild<QComboBox*>("comparisonConversation")->setCurrentIndex(1);
        QTest::mouseClick(view.findChild<QRadioButton*>("comparisonFromConversation"), Qt::LeftButton);
        QTest::mouseClick(view.runButton(), Qt::LeftButton);
        QCOMPARE(asks.count(), 2);
        QCOMPARE(asks.at(1).at(1).toLongLong(), qint64(9));
        QVERIFY(asks.at(1).at(2).toString().isEmpty());
    }
};

QTEST_MAIN(TestComparisonView)
#include "test_ui_comparison_view.moc"
