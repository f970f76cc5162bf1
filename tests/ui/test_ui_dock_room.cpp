// DockRoom on a window with docks at both sides: the side docks take at most a third of a wide
// window and leave a narrow one (the centre keeps its two thirds), come back when it is wide
// again, also after a restart in between; a dock opened in a narrow window floats inside the
// screen instead.
#include "support/ui_testing.h"
#include "ui/dock_room.h"

#include <QAction>
#include <QDockWidget>
#include <QLabel>
#include <QMainWindow>
#include <QSettings>
#include <QTemporaryDir>
#include <QtTest>

using kvchat::DockRoom;

namespace {

struct Window {
    QMainWindow main;
    QLabel* centre = new QLabel("the chat");
    QList<QDockWidget*> docks;
    DockRoom* room = nullptr;
    Window() {
        main.setCentralWidget(centre);
        for (const char* name : {"inspector", "prefixes", "strategy", "left"}) {
            auto* d = new QDockWidget(name, &main);
            d->setObjectName(name);
            auto* content = new QLabel(QString("the %1 dock").arg(name));
            content->setMinimumWidth(260);
            d->setWidget(content);
            main.addDockWidget(QString(name) == "left" ? Qt::LeftDockWidgetArea : Qt::RightDockWidgetArea, d);
            docks << d;
        }
        main.tabifyDockWidget(docks[0], docks[1]);
        room = new DockRoom(&main);
    }
    QDockWidget* dock(const char* name) { return main.findChild<QDockWidget*>(name); }
    bool open(QDockWidget* d) { return d->toggleViewAction()->isChecked(); }
};

}  // namespace

class TestDockRoom : public QObject {
    Q_OBJECT
    QTemporaryDir home_;

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
    }

    void narrowSendsDocksAwayWideBringsThemBack() {
        Window w;
        w.main.resize(1600, 900);
        w.main.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w.main));
        QTest::qWait(50);
        for (QDockWidget* d : w.docks) QVERIFY2(w.open(d), qPrintable(d->objectName()));
        QVERIFY(w.dock("strategy")->width() <= 1600 / 3 + 1);
        QVERIFY(w.dock("left")->width() <= 1600 / 3 + 1);

        w.main.resize(1000, 700);
        QTRY_VERIFY(w.room->sentAway().size() == 4);
        for (QDockWidget* d : w.docks) QVERIFY2(!w.open(d), qPrintable(d->objectName()));
        QTRY_VERIFY(w.centre->width() * 3 >= w.main.width() * 2);
        // The window can be made narrower than the docks would have let it.
        QVERIFY(w.main.minimumSizeHint().width() < 800);

        // Opened by the user in the narrow window: it floats beside the chat, inside the screen.
        w.dock("strategy")->toggleViewAction()->trigger();
        QTRY_VERIFY(w.dock("strategy")->isVisible());
        QVERIFY(w.dock("strategy")->isFloating());
        const QRect screen = w.main.screen()->availableGeometry();
        QVERIFY(screen.contains(w.dock("strategy")->frameGeometry()));
        QVERIFY(w.centre->width() * 3 >= w.main.width() * 2);

        w.main.resize(1600, 900);
        QTRY_VERIFY(w.room->sentAway().isEmpty());
        for (QDockWidget* d : w.docks) QVERIFY2(w.open(d), qPrintable(d->objectName()));
    }

    // Closed while narrow: the saved state has the docks hidden; a wide start brings them back.
    void aRestartInAWideWindowBringsThemBack() {
        QByteArray state;
        {
            Window w;
            w.main.resize(1000, 700);
            w.main.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w.main));
            QTRY_VERIFY(w.room->sentAway().size() == 4);
            state = w.main.saveState();
        }
        Window w;
        QVERIFY(w.main.restoreState(state));
        w.main.resize(1600, 900);
        w.main.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w.main));
        QTRY_VERIFY(w.open(w.dock("inspector")) && w.open(w.dock("strategy")) && w.open(w.dock("left")));
        // Still wide on the next start: nothing is brought back twice, nothing is left to bring.
        QVERIFY(QSettings().value("window/docksSentAway").toStringList().isEmpty());
    }
};

KVCHAT_TEST_MAIN_WITH_SCREENS(TestDockRoom)
#include "test_ui_dock_room.moc"
