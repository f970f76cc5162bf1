// The window on the default model ($KVCHAT_MODEL; skipped without it): a model load cancelled
// half way leaves no model and no error dialog, the next load works, and an answer streams into
// the database with its figures while the event loop's longest stall is measured.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/store/store.h"
#include "ui/engine_worker.h"
#include "ui/event_loop_stall.h"
#include "ui/main_window.h"
#include "support/ui_testing.h"

#include <QMessageBox>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

using namespace kvchat;

class TestUiDefaultModel : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;

private Q_SLOTS:
    void initTestCase() {
        model_ = qEnvironmentVariable("KVCHAT_MODEL");
        if (model_.isEmpty() || !QFileInfo::exists(model_)) QSKIP("KVCHAT_MODEL is not set to the default model");
        kvchat::test::useFreshProfile(home_.path());
    }

    void cancelledLoadKeepsTheModelInUse() {
        WindowOptions o;
        o.databasePath = home_.path() + "/kvchat.db";
        {
            Store store(o.databasePath.toStdString());
            store.set_setting("chat.max_new_tokens", "64");
        }
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow w(o);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);

        // Load it again and cancel while that load runs: the worker announces the load on its own
        // thread and waits there until the GUI thread has clicked Cancel, so the click lands before
        // the load can finish however fast the machine reads the file (a reaction to queued
        // progress could come after the end).
        bool clicked = false;
        QObject::connect(
            w.worker(), &EngineWorker::modelLoading, w.worker(),
            [&](const QString&) {
                if (clicked) return;
                clicked = true;
                QMetaObject::invokeMethod(
                    &w,
                    [&] {
                        auto* cancel = w.findChild<QToolButton*>("cancelModelLoad");
                        QVERIFY(cancel->isVisible());
                        QTest::mouseClick(cancel, Qt::LeftButton);
                    },
                    Qt::BlockingQueuedConnection);
            },
            Qt::DirectConnection);
        QSignalSpy failed(&w, &MainWindow::modelLoadFailed);
        w.loadModel(model_);
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, 60000);
        QVERIFY(clicked);
        QVERIFY(failed.at(0).at(1).toString().isEmpty());  // cancelled, not failed
        QVERIFY(w.modelReady());                            // the model in use stays
        QVERIFY(!w.findChild<QMessageBox*>("modelErrorDialog"));
        QVERIFY(!w.findChild<QProgressBar*>("modelLoadProgress")->isVisible());

        EventLoopStall stall;
        stall.start();
        QSignalSpy done(&w, &MainWindow::answerFinished);
        w.sendMessage("Name three colours.");
        QVERIFY(done.wait(300000));
        stall.stop();
        QVERIFY(stall.ticks() > 10);
        qInfo("longest event-loop stall while the answer streamed: %.1f ms", stall.maxStallMs());
        const TurnOutcome out = done.at(0).at(0).value<TurnOutcome>();
        QVERIFY(out.answer.id > 0);
        QVERIFY(out.answer.figures.generated_tokens > 0);
        QVERIFY(out.answer.figures.ttft_ms.value_or(0) > 0);
        Store store(o.databasePath.toStdString());
        const auto msgs = store.list_messages(w.currentConversation());
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(QString::fromStdString(msgs[1].content), out.answer.content);
    }
};

QTEST_MAIN(TestUiDefaultModel)
#include "test_ui_default_model.moc"
