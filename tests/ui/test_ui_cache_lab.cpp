// The cache lab inside the chat window, driven as a user drives it on a tiny model: the inspector
// in the cache dock follows the conversation's telemetry and the last turn's reuse; the strategy
// panel previews the engine's plan and applies the switch through the worker; the comparison view
// replays a prompt under the chosen strategies on the worker.
#include "engine/cache/cache_spec.h"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/chat_window.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/engine_worker.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/inspector/memory_bars.h"
#include "ui/lab/cache_lab.h"
#include "ui/lab/comparison_view.h"
#include "ui/lab/strategy_panel.h"
#include "ui/main_window.h"
#include "ui/message_box.h"

#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <map>

using namespace kvchat;

namespace {

using kvchat::test::screenshotDir;
using kvchat::test::retype;

constexpr int kTimeoutMs = 120000;

}  // namespace

class TestUiCacheLab : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;

    std::unique_ptr<MainWindow> openWindow(const QString& db) {
        test::writeChatSettings(db, 24);
        return test::openChatWindow(db, model_, QSize(1400, 900));
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = home_.path() + "/tiny.gguf";
        test::write_tiny_gguf(test::chat_sized_spec(), model_.toStdString());
    }

    void labInTheWindow() {
        auto w = openWindow(home_.path() + "/db1/kvchat.db");
        QVERIFY(w);
        CacheLab* lab = w->cacheLab();
        QVERIFY(lab);
        auto* dock = w->findChild<QDockWidget*>("cacheInspectorDock");
        QVERIFY(dock && dock->widget() == lab->inspector());
        // The strategy panel sits in the chat panel's dock (the strategy dock's old place).
        auto* chatDock = w->findChild<QDockWidget*>("chatPanelDock");
        QVERIFY(chatDock && chatDock->isAncestorOf(lab->strategyPanel()));
        auto* compareDock = w->findChild<QDockWidget*>("comparisonDock");
        QVERIFY(compareDock && !compareDock->isVisible());
        QAction* toggle = compareDock->toggleViewAction();
        QVERIFY(w->viewMenu()->actions().contains(toggle));
        QCOMPARE(toggle->shortcut(), QKeySequence("Ctrl+Shift+M"));
        dock->show();
        dock->raise();

        // A turn: the inspector shows the conversation's cache and the turn's reuse.
        QSignalSpy snapshot(w->worker(), &EngineWorker::snapshotReported);
        QVERIFY(test::typeAndSend(*w, "the cat sat on the mat"));
        QTRY_VERIFY_WITH_TIMEOUT(lab->inspector()->telemetry().has_value(), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(lab->inspector()->redraws() > 0, 5000);
        lab->inspector()->flush();  // the bars show what was stored last (the timer would, within 33 ms)
        const CacheTelemetry t = *lab->inspector()->telemetry();
        QCOMPARE(static_cast<int>(t.layers.size()), 6);
        std::map<int, int64_t> held;
        for (const auto& s : lab->inspector()->memoryBars()->segments())
            if (s.part != MemoryBars::Part::Reserved) held[s.layer] += s.bytes;
        for (size_t i = 0; i < t.layers.size(); ++i) QCOMPARE(held[static_cast<int>(i)], t.layers[i].bytes_fast + t.layers[i].bytes_slow);
        // The turn's reuse arrives with its figures, after the telemetry of its steps (later on a busy machine).
        QTRY_VERIFY_WITH_TIMEOUT(lab->inspector()->reusePanel()->reuse().has_value(), 30000);
        const auto reuse = lab->inspector()->reusePanel()->reuse();
        QVERIFY(reuse->computed_tokens > 0);
        QTRY_VERIFY_WITH_TIMEOUT(snapshot.count() > 0, 5000);

        // The strategy panel: a lossy target previewed by the engine, then applied.
        StrategyPanel* panel = lab->strategyPanel();
        QCOMPARE(panel->currentSpec(), QString("dynamic"));
        QSignalSpy planned(w->worker(), &EngineWorker::switchPlanned);
        retype(panel->specEdit(), "sliding_window:window=4");
        // A turn's end reported now (the worker's signal, as when an answer finishes while the
        // user types) leaves the choice alone.
        kvchat::TurnOutcome late;
        late.conversationId = w->currentConversation();
        late.cacheSpec = "dynamic";
        Q_EMIT w->worker()->turnFinished(late);
        QCOMPARE(panel->chosenSpec(), QString("sliding_window:window=4"));
        QVERIFY(planned.wait(60000) || planned.count() > 0);
        // On a loaded machine the plan takes its time.
        QTRY_VERIFY_WITH_TIMEOUT(panel->applyButton()->isEnabled(), kTimeoutMs);
        QVERIFY2(panel->findChild<QLabel*>("strategyPlanKind")->text().contains("LOSSY"),
                 qPrintable(panel->findChild<QLabel*>("strategyPlanKind")->text()));
        QSignalSpy switched(w->worker(), &EngineWorker::strategySwitched);
        QTest::mouseClick(panel->applyButton(), Qt::LeftButton);
        QVERIFY(switched.wait(kTimeoutMs) || switched.count() > 0);
        QTRY_COMPARE_WITH_TIMEOUT(panel->currentSpec(), QString("sliding_window:window=4"), 5000);
        QVERIFY(!panel->busy());
        QCOMPARE(w->strategyControl()->currentText(), QString("sliding_window:window=4"));
        QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(lab->inspector()->telemetry()->spec), QString("sliding_window:window=4"), 5000);
        // The conversation goes on under it.
        QVERIFY(test::typeAndSend(*w, "and then"));
        QCOMPARE(QString::fromStdString(lab->inspector()->telemetry()->spec), QString("sliding_window:window=4"));
        QTest::qWait(100);
        const QString shot = screenshotDir() + "/inspector-window-sliding.png";
        QVERIFY(w->grab().save(shot));
        qInfo("wrote %s", qPrintable(shot));

        // The comparison view replays one prompt on the worker.
        compareDock->show();
        ComparisonView* view = lab->comparisonView();
        view->setStrategies({"dynamic", "hybrid", "sink:window=8,sinks=2"});
        view->tokensBox()->setValue(6);
        view->promptEdit()->setFocus();
        QTest::keyClicks(view->promptEdit(), "why is the sky blue");
        QSignalSpy rows(w->worker(), &EngineWorker::comparisonFinished);
        QTest::mouseClick(view->runButton(), Qt::LeftButton);
        QVERIFY(rows.wait(kTimeoutMs) || rows.count() > 0);
        QTRY_COMPARE_WITH_TIMEOUT(view->columnCount(), 3, 5000);
        QCOMPARE(QString::fromStdString(view->rows()[2].strategy), QString("sink:window=8,sinks=2"));
        QCOMPARE(view->rows()[0].tokens.size(), size_t(6));
        QVERIFY(!view->busy());
    }
};

QTEST_MAIN(TestUiCacheLab)
#include "test_ui_cache_lab.moc"
