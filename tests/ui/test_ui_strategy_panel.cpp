// The strategy panel driven as a user would (keys into its fields, clicks): validation as typed
// with the engine's messages, one plan request per pause in typing, a real plan from the engine
// shown before Apply, and Apply / Cancel / progress through its signals only.
#include "engine/cache/cache_presets.h"
#include "engine/cache/conversion_plan.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/lab/plan_messages.h"
#include "ui/lab/strategy_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

namespace {

using kvchat::test::screenshotDir;
using kvchat::test::retype;
}  // namespace

class TestStrategyPanel : public QObject {
    Q_OBJECT
    QTemporaryDir dir_;
    std::unique_ptr<kvchat::Model> model_;
    std::unique_ptr<kvchat::Backend> backend_;

    std::unique_ptr<kvchat::Cache> filled(const std::string& spec, int n) {
        auto c = model_->make_cache(*backend_, spec);
        std::vector<int32_t> t = {2};
        for (int i = 1; i < n; ++i) t.push_back(6 + (i * 37) % 270);
        std::vector<float> lg;
        model_->forward(*backend_, *c, t.data(), n, kvchat::Logits::None, lg);
        return c;
    }

private Q_SLOTS:
    void initTestCase() {
        kvchat::test::TinyModelSpec s;
        const std::string path = (dir_.path() + "/tiny.gguf").toStdString();
        kvchat::test::write_tiny_gguf(s, path);
        model_ = kvchat::Model::load(path);
        backend_ = kvchat::make_cpu_backend(2);
    }

    void fieldsShowTheCurrentSpec() {
        kvchat::StrategyPanel panel;
        panel.setCurrentSpec("quantized:nbits=2+offloaded");
        QCOMPARE(panel.currentSpec(), QString("quantized:nbits=2,residual=128,group=64+offloaded"));
        QCOMPARE(panel.presetBox()->currentText(), QString("quantized"));
        QCOMPARE(panel.field("nbits")->text(), QString("2"));
        QVERIFY(panel.findChild<QCheckBox*>("strategyOffloaded")->isChecked());
        panel.setCurrentSpec("sink:window=256,sinks=4");
        QCOMPARE(panel.presetBox()->currentText(), QString("sink"));
        QCOMPARE(panel.field("window")->text(), QString("256"));
        QVERIFY(!panel.field("nbits")->isEnabled());
        QVERIFY(!panel.applyButton()->isEnabled());  // nothing chosen yet
    }

    void validatesAsTypedWithTheEnginesMessages() {
        kvchat::StrategyPanel panel;
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QSignalSpy plans(&panel, &kvchat::StrategyPanel::planRequested);
        // Preset "quantized", then a bad number of bits.
        panel.presetBox()->setFocus();
        const int q = panel.presetBox()->findText("quantized");
        panel.presetBox()->setCurrentIndex(q);
        Q_EMIT panel.presetBox()->activated(q);
        retype(panel.field("nbits"), "5");
        QVERIFY2(panel.validationMessage().contains("nbits=5"), qPrintable(panel.validationMessage()));
        QVERIFY(panel.findChild<QLabel*>("strategyError")->text().contains("nbits=5"));
        QVERIFY(panel.chosenSpec().isEmpty());
        QTest::qWait(kvchat::StrategyPanel::kPlanDelayMs + 100);
        QCOMPARE(plans.count(), 0);
        // Fixed: 4 bits, then a residual typed digit by digit gives one request after the pause.
        retype(panel.field("nbits"), "4");
        QVERIFY(panel.validationMessage().isEmpty());
        retype(panel.field("residual"), "64");
        QTest::qWait(kvchat::StrategyPanel::kPlanDelayMs + 150);
        QCOMPARE(plans.count(), 1);
        QCOMPARE(plans.at(0).at(0).toString(), QString("quantized:nbits=4,residual=64,group=64"));
        QCOMPARE(panel.specEdit()->text(), QString("quantized:nbits=4,residual=64,group=64"));  // to_string of the fields
        // The spec line takes a whole spec; a missing parameter is named.
        retype(panel.specEdit(), "sink:window=8");
        QVERIFY2(panel.validationMessage().contains("sinks"), qPrintable(panel.validationMessage()));
        retype(panel.specEdit(), "sink:window=8,sinks=2+quantized:nbits=4,residual=8,group=8");
        QVERIFY(panel.validationMessage().isEmpty());
        QCOMPARE(panel.presetBox()->currentText(), QString("sink"));
        QCOMPARE(panel.field("sinks")->text(), QString("2"));
        QVERIFY(panel.findChild<QCheckBox*>("strategyQuantized")->isChecked());
        // Combinations from the check boxes.
        retype(panel.specEdit(), "static:max_len=100");
        panel.findChild<QCheckBox*>("strategyOffloaded")->click();
        QCOMPARE(panel.chosenSpec(), QString("offloaded_static:max_len=100"));
    }

    // The panel offers the engine's presets, in its order, and the spec it shows for each is
    // to_string of the preset's typed spec with the values typed into its fields: the grammar is
    // written by the engine alone.
    void everyPresetShowsTheTypedSpecsText() {
        kvchat::StrategyPanel panel;
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QComboBox* box = panel.presetBox();
        QCOMPARE(static_cast<size_t>(box->count()), kvchat::cache_presets().size());
        for (size_t i = 0; i < kvchat::cache_presets().size(); ++i) {
            const kvchat::CachePreset& p = kvchat::cache_presets()[i];
            const QString name = QString::fromUtf8(p.name.data(), static_cast<int>(p.name.size()));
            QCOMPARE(box->itemText(static_cast<int>(i)), name);
            panel.setCurrentSpec("dynamic");
            box->setCurrentIndex(static_cast<int>(i));
            Q_EMIT box->activated(static_cast<int>(i));
            kvchat::CacheSpec want = p.spec;
            for (std::string_view r : p.required) {
                const int v = r == "sinks" ? 2 : r == "window" ? 8 : 64;
                retype(panel.field(QString::fromUtf8(r.data(), static_cast<int>(r.size()))), QString::number(v));
                if (r == "sinks") want.sinks = v;
                if (r == "window") want.window = v;
                if (r == "max_len") want.max_len = v;
            }
            const QString text = QString::fromStdString(kvchat::to_string(want));
            QVERIFY2(panel.validationMessage().isEmpty(), qPrintable(name + ": " + panel.validationMessage()));
            QCOMPARE(panel.specEdit()->text(), text);
            QCOMPARE(panel.chosenSpec(), text);
            QVERIFY(kvchat::parse_cache_spec(text.toStdString()) == want);
        }
        // A required field left empty is named; letters where a number belongs too.
        box->setCurrentIndex(box->findText("sink"));
        Q_EMIT box->activated(box->findText("sink"));
        retype(panel.field("window"), "8");
        retype(panel.field("sinks"), "");
        QVERIFY2(panel.validationMessage().contains("missing parameter sinks"), qPrintable(panel.validationMessage()));
        QVERIFY(panel.chosenSpec().isEmpty());
        retype(panel.field("sinks"), "two");
        QVERIFY2(panel.validationMessage().contains("sinks expects a whole number"), qPrintable(panel.validationMessage()));
        QVERIFY(panel.chosenSpec().isEmpty());
    }

    // A plan the engine made for a real cache; Apply, progress, Cancel and the result.
    void previewThenApply() {
        auto cache = filled("dynamic", 40);
        kvchat::StrategyPanel panel;
        panel.resize(520, 420);
        panel.setCurrentSpec(QString::fromStdString(cache->spec_text()));
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QSignalSpy plans(&panel, &kvchat::StrategyPanel::planRequested);
        QSignalSpy applies(&panel, &kvchat::StrategyPanel::applyRequested);
        QSignalSpy cancels(&panel, &kvchat::StrategyPanel::cancelRequested);
        retype(panel.specEdit(), "sink:window=24,sinks=2+quantized:nbits=4,residual=8,group=8");
        QVERIFY(!panel.applyButton()->isEnabled());  // no plan yet
        QTRY_COMPARE(plans.count(), 1);
        const std::string spec = plans.at(0).at(0).toString().toStdString();
        // An answer to an older request is not shown.
        panel.showPlan(kvchat::plan_conversion(*cache, "static:max_len=64"));
        QVERIFY(!panel.applyButton()->isEnabled());
        const kvchat::ConversionPlan plan = kvchat::plan_conversion(*cache, spec, 800.0);
        QCOMPARE(plan.kind, kvchat::ConversionPlan::Kind::Lossy);
        panel.showPlan(plan);
        QVERIFY(panel.applyButton()->isEnabled());
        const QString shown = panel.planLabel()->text();
        QVERIFY2(shown.contains(QString("%L1").arg(plan.tokens_evicted)) && shown.contains(QString("%L1").arg(plan.bytes_after)),
                 qPrintable(shown));
        QVERIFY(panel.findChild<QLabel*>("strategyPlanKind")->text().contains("LOSSY"));
        QVERIFY(plan.tokens_quantized > 0 && plan.tokens_evicted > 0);
        QTest::qWait(50);
        const QString shot = screenshotDir() + "/strategy-lossy-preview.png";
        QVERIFY(panel.grab().save(shot));
        qInfo("wrote %s", qPrintable(shot));

        QTest::mouseClick(panel.applyButton(), Qt::LeftButton);
        QCOMPARE(applies.count(), 1);
        QCOMPARE(applies.at(0).at(0).toString().toStdString(), spec);
        QVERIFY(panel.busy());
        QVERIFY(panel.cancelButton()->isEnabled());
        QVERIFY(!panel.applyButton()->isEnabled());
        QVERIFY(!panel.specEdit()->isEnabled());
        panel.showProgress("Converting cache", 10, 40);
        QTest::mouseClick(panel.cancelButton(), Qt::LeftButton);
        QCOMPARE(cancels.count(), 1);
        panel.applyFinished(false, QString(), "Cancelled; the cache is unchanged.");
        QVERIFY(!panel.busy());
        QCOMPARE(panel.currentSpec(), QString("dynamic"));
        // Applied for real this time.
        panel.applyFinished(true, QString::fromStdString(spec), QString());
        QCOMPARE(panel.currentSpec().toStdString(), spec);
        QVERIFY(!panel.applyButton()->isEnabled());
    }

    // A turn that ends (or a transcript read again) while the user is choosing reports the same
    // strategy: the typed choice, its plan and Apply stay. A changed strategy fills the fields.
    void aChoiceOutlastsAReportOfTheSameStrategy() {
        auto cache = filled("dynamic", 40);
        kvchat::StrategyPanel panel;
        panel.setCurrentSpec("dynamic");
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QSignalSpy plans(&panel, &kvchat::StrategyPanel::planRequested);
        retype(panel.specEdit(), "sliding_window:window=8");
        QTRY_COMPARE(plans.count(), 1);
        const QString chosen = panel.chosenSpec();
        QCOMPARE(chosen, QString("sliding_window:window=8"));
        panel.reportCurrentSpec("dynamic");
        QCOMPARE(panel.chosenSpec(), chosen);
        QCOMPARE(panel.specEdit()->text(), QString("sliding_window:window=8"));
        panel.showPlan(kvchat::plan_conversion(*cache, chosen.toStdString()));
        QVERIFY(panel.applyButton()->isEnabled());
        panel.reportCurrentSpec("dynamic");  // after the plan too
        QVERIFY(panel.applyButton()->isEnabled());
        QCOMPARE(panel.chosenSpec(), chosen);
        // A text that does not parse is kept as typed, with its message.
        retype(panel.specEdit(), "sliding_window:window=");
        const QString problem = panel.validationMessage();
        QVERIFY(!problem.isEmpty());
        panel.reportCurrentSpec("dynamic");
        QCOMPARE(panel.specEdit()->text(), QString("sliding_window:window="));
        QCOMPARE(panel.validationMessage(), problem);
        // The strategy changed (switched from the toolbar): the fields show it.
        panel.reportCurrentSpec("sink:window=16,sinks=2");
        QCOMPARE(panel.currentSpec(), QString("sink:window=16,sinks=2"));
        QCOMPARE(panel.specEdit()->text(), QString("sink:window=16,sinks=2"));
        QVERIFY(panel.validationMessage().isEmpty());
        QVERIFY(!panel.applyButton()->isEnabled());
        // Nothing being chosen: a report fills the fields as before.
        panel.reportCurrentSpec("sink:window=16,sinks=2");
        QCOMPARE(panel.chosenSpec(), panel.currentSpec());
        // setCurrentSpec (another conversation) replaces a choice.
        retype(panel.specEdit(), "sliding_window:window=8");
        panel.setCurrentSpec("sink:window=16,sinks=2");
        QCOMPARE(panel.specEdit()->text(), QString("sink:window=16,sinks=2"));
    }

    // The preview names the messages that lose tokens, in the transcript's numbering, from the
    // plan's positions and the conversation's message starts.
    void previewSaysWhichMessages() {
        auto cache = filled("dynamic", 40);
        kvchat::ConversionPlan plan = kvchat::plan_conversion(*cache, "sink:window=24,sinks=2");
        QCOMPARE(plan.evicted_first, int64_t(2));
        QCOMPARE(plan.evicted_last, int64_t(17));
        plan.message_starts = {0, 5, 12, 20, 30};  // the 16 lost positions [2, 17]: messages 1 to 3
        QString text = kvchat::droppedMessagesText(plan);
        QVERIFY2(text.startsWith("Drops messages 1–3 (16 tokens") && text.contains("messages 1 and 3 in part"), qPrintable(text));
        plan.message_starts = {0, 2, 18, 30};  // messages 2 whole (positions 2..17), nothing else
        text = kvchat::droppedMessagesText(plan);
        QCOMPARE(text, QString("Drops message 2 (16 tokens)"));
        plan.message_starts.clear();
        QVERIFY(kvchat::droppedMessagesText(plan).isEmpty());
        // Shown in the panel under the figures.
        plan.message_starts = {0, 5, 12, 20, 30};
        kvchat::StrategyPanel panel;
        panel.setCurrentSpec("dynamic");
        retype(panel.specEdit(), "sink:window=24,sinks=2");
        QTRY_COMPARE(panel.chosenSpec(), QString::fromStdString(plan.to_spec));
        panel.showPlan(plan);
        QVERIFY2(panel.planLabel()->text().contains("Drops messages 1–3"), qPrintable(panel.planLabel()->text()));
    }

    void rebuildPlanSaysHowLong() {
        auto cache = filled("sink:window=8,sinks=2", 40);
        kvchat::StrategyPanel panel;
        panel.setCurrentSpec(QString::fromStdString(cache->spec_text()));
        retype(panel.specEdit(), "dynamic");
        const auto plan = kvchat::plan_conversion(*cache, "dynamic", 20.0);  // 40 tokens at 20 tok/s: 2 s
        panel.showPlan(plan);
        QVERIFY(panel.findChild<QLabel*>("strategyPlanKind")->text().contains("REBUILD"));
        QVERIFY2(panel.planLabel()->text().contains("2.0 s"), qPrintable(panel.planLabel()->text()));
        panel.showError("the disk is full");
        QVERIFY(!panel.applyButton()->isEnabled());
    }
};

QTEST_MAIN(TestStrategyPanel)
#include "test_ui_strategy_panel.moc"
