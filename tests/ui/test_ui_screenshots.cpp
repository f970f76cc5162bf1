// Screenshots of the window for a person to look at: a multi-turn conversation with a code
// block (its last answer generated here, the earlier turns stored as a user would have had them),
// the prefix library, the settings dialog and a model-load error. PNGs go to
// $KVCHAT_SCREENSHOT_DIR (default: build/screenshots). Runs on $KVCHAT_MODEL when it is set (the
// default model), else on a tiny generated model.
//
// readmePictures makes the README's pictures: a conversation answered live by the chat model
// (SmolLM2-135M-Instruct) at 1600x1000 and at 1000x700, the cache inspector,
// the strategy preview, the comparison and the Models view. They go to $KVCHAT_README_PICTURES
// when set (packaging/make-screenshots.sh sets docs/screenshots and makes the files small), else
// to the screenshot folder's readme/, so an ordinary test run never rewrites the repository.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "ui/engine_worker.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/lab/cache_lab.h"
#include "ui/lab/comparison_view.h"
#include "ui/lab/strategy_panel.h"
#include "ui/chat_panel.h"
#include "ui/color_scheme.h"
#include "ui/main_window.h"
#include "ui/models/model_list_model.h"
#include "ui/models/models_dialog.h"
#include "ui/message_view.h"
#include "ui/prefix_library_panel.h"
#include "ui/storage_panel.h"
#include "ui/settings_dialog.h"
#include "ui/transcript_view.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"

#include <QAbstractItemView>
#include <QLabel>
#include <QLineEdit>
#include <QAbstractScrollArea>
#include <QScrollArea>
#include <QAction>
#include <QStatusBar>
#include <QTabBar>
#include <QToolButton>
#include <QDockWidget>
#include <QLabel>
#include <QMainWindow>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

using namespace kvchat;

namespace {

const char* kTurns[][2] = {
    {"What does a KV cache keep between turns of a chat?",
     "It keeps the **keys and values** that attention computed for every token so far, layer by layer. "
     "The next turn only has to compute the tokens you added:\n\n"
     "1. the chat template renders the whole conversation,\n"
     "2. the longest prefix the cache already holds is kept,\n"
     "3. only the rest is prefilled.\n"},
    {"Write a Python function that reverses a string.",
     "Here is a short one using slicing:\n\n"
     "```python\n"
     "def reverse(text: str) -> str:\n"
     "    \"\"\"Return text with its characters in reverse order.\"\"\"\n"
     "    return text[::-1]\n"
     "\n"
     "print(reverse(\"kvchat\"))  # tahcvk\n"
     "```\n\n"
     "Slicing with a step of `-1` walks the string from the end to the start."},
};

}  // namespace

class TestUiScreenshots : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    QString out_;
    QString installedModels_;  // the user's models folder, before the fresh profile hides it

    // Every widget shown in `w`'s window lies inside it (what a scroll area holds is clipped by it
    // and may scroll out of view).
    static void expectInside(QWidget* w) {
        const QRect all = w->rect();
        for (QWidget* c : w->findChildren<QWidget*>()) {
            if (!c->isVisible() || c->window() != w) continue;
            bool scrolled = false;
            for (QWidget* p = c->parentWidget(); p && p != w && !scrolled; p = p->parentWidget())
                scrolled = qobject_cast<QAbstractScrollArea*>(p) != nullptr;
            if (scrolled) continue;
            const QRect r(c->mapTo(w, QPoint(0, 0)), c->size());
            // QMainWindow parks what the user cannot see outside itself: the docks of a tab group
            // behind its front tab, and the tab bar of a group whose docks are all hidden.
            if (!r.intersects(all)) {
                if (qobject_cast<QTabBar*>(c) && c->parentWidget() == w) continue;
                QDockWidget* dock = qobject_cast<QDockWidget*>(c);
                for (QWidget* p = c->parentWidget(); p && !dock; p = p->parentWidget()) dock = qobject_cast<QDockWidget*>(p);
                auto* main = qobject_cast<QMainWindow*>(w);
                if (dock && main && !dock->isFloating() && !main->tabifiedDockWidgets(dock).isEmpty()) continue;
            }
            QVERIFY2(all.contains(r), qPrintable(QString("%1 (%2) at %3,%4 %5x%6 lies outside the %7x%8 window")
                                                     .arg(c->objectName(), c->metaObject()->className())
                                                     .arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height())
                                                     .arg(all.width()).arg(all.height())));
        }
    }

    void save(QWidget* w, const QString& name) {
        const QString path = out_ + "/" + name;
        QVERIFY2(w->grab().save(path), qPrintable(path));
        QVERIFY(QFileInfo(path).size() > 1000);
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        installedModels_ = QString::fromStdString(models_dir());
        kvchat::test::useFreshProfile(home_.path());
        out_ = qEnvironmentVariable("KVCHAT_SCREENSHOT_DIR");
        if (out_.isEmpty()) out_ = QCoreApplication::applicationDirPath() + "/../screenshots";
        QVERIFY(QDir().mkpath(out_));
        model_ = qEnvironmentVariable("KVCHAT_MODEL");
        if (model_.isEmpty() || !QFileInfo::exists(model_)) {
            model_ = home_.path() + "/tiny.gguf";
            test::write_tiny_gguf(test::chat_sized_spec(4), model_.toStdString());
        }
    }

    void conversationPrefixesAndSettings() {
        const QString db = home_.path() + "/shots/kvchat.db";
        QDir().mkpath(QFileInfo(db).absolutePath());
        {
            Store store(db.toStdString());
            ChatSettings s;
            s.sampling.greedy = true;
            s.random_seed = false;
            s.max_new_tokens = 60;
            s.save(store);
            const auto c = store.create_conversation("Caches and strings", "", "dynamic");
            for (const auto& turn : kTurns) {
                store.append_message(c.id, Role::User, turn[0]);
                store.append_message(c.id, Role::Assistant, turn[1]);
            }
            store.create_conversation("Trip to Lisbon", "", "dynamic");
            store.create_conversation("Sourdough notes", "", "quantized:nbits=4");
        }
        const auto window = test::openChatWindow(db, model_, QSize(1280, 820));
        QVERIFY(window);
        MainWindow& w = *window;
        auto* transcript = w.findChild<TranscriptView*>("transcriptView");
        // The most recent conversation opens; pick the one with the code.
        QTRY_VERIFY(transcript->messageViews().size() >= 1 || w.currentConversation() != 0);
        QSignalSpy done(&w, &MainWindow::answerFinished);
        {
            Store store(db.toStdString());
            const qint64 id = store.find_conversation("Caches and strings")->id;
            auto* list = w.findChild<QAbstractItemView*>("conversationList");
            for (int r = 0; r < list->model()->rowCount(); ++r)
                if (list->model()->index(r, 0).data(Qt::UserRole + 1).toLongLong() == id)
                    list->setCurrentIndex(list->model()->index(r, 0));
            QTRY_COMPARE(w.currentConversation(), id);
        }
        QTRY_COMPARE(transcript->messageViews().size(), 4);
        w.sendMessage("Thanks! Can you make it handle None too?");
        QVERIFY(done.wait(180000));
        QTest::qWait(200);
        save(&w, "conversation.png");

        // The prefix library with one prefix, docked on the right.
        QSignalSpy prefixes(w.worker(), &EngineWorker::prefixesChanged);
        QMetaObject::invokeMethod(w.worker(), [worker = w.worker()] {
            worker->savePrefixFromText("Code reviewer", "You review code. Point out bugs first, then style, briefly.");
        });
        QTRY_VERIFY_WITH_TIMEOUT(prefixes.count() > 0, 120000);  // (the worker emits from its thread: the signal may come before wait() starts)
        auto* dock = w.findChild<QDockWidget*>("prefixLibraryDock");
        dock->raise();
        auto* panel = w.findChild<PrefixLibraryPanel*>("prefixLibrary");
        QTRY_COMPARE(panel->prefixes().size(), qsizetype(1));
        panel->select(panel->prefixes().front().id);
        QTest::qWait(100);
        save(&w, "prefix-panel.png");

        // The storage view: the conversation and the prefix with their saved caches.
        auto* storageDock = w.findChild<QDockWidget*>("storageDock");
        storageDock->raise();
        auto* storage = w.findChild<StoragePanel*>("storagePanel");
        QTRY_VERIFY(storage->report().totalBytes > 0 && storage->report().items.size() == 4);
        storage->selectRow(0);
        QTest::qWait(100);
        save(&w, "storage-view.png");

        // The same window under a dark palette (the app's own, View > Colours > Dark): everything
        // follows the palette's colours.
        const QPalette light = QApplication::palette();
        const QPalette dark = ColorScheme::darkPalette();
        QApplication::setPalette(dark);
        QTest::qWait(200);
        save(&w, "conversation-dark.png");
        QApplication::setPalette(light);
        QTest::qWait(100);

        QTest::keyClick(&w, Qt::Key_Comma, Qt::ControlModifier);
        SettingsDialog* d = nullptr;
        QTRY_VERIFY((d = w.findChild<SettingsDialog*>("settingsDialog")) != nullptr);
        QTest::qWait(100);
        save(d, "settings.png");
        d->reject();
    }

    // ---- the layout on a desktop and a laptop screen, light and dark (issue 24, points 1 and 8) ----

    void layoutFitsTheScreen_data() {
        QTest::addColumn<QSize>("screenSize");
        QTest::addColumn<QString>("scheme");
        for (const QSize s : {QSize(1600, 1000), QSize(1000, 700)})
            for (const QString& scheme : {QStringLiteral("light"), QStringLiteral("dark")})
                QTest::addRow("%dx%d %s", s.width(), s.height(), qPrintable(scheme)) << s << scheme;
    }

    // The window filling a screen: the chat keeps two thirds of a laptop's width, nothing lies
    // outside the window, the status bar shows whole, and opening the comparison view neither
    // grows the window past the screen nor puts its chart off it.
    void layoutFitsTheScreen() {
        QFETCH(QSize, screenSize);
        QFETCH(QString, scheme);
        QScreen* screen = test::screenOfSize(screenSize);
        if (!screen) QSKIP("no screen of this size (the suite sets them up on the offscreen platform)");
        const QString db = home_.path() + "/layout/kvchat.db";
        if (!QFileInfo::exists(db)) {
            QDir().mkpath(QFileInfo(db).absolutePath());
            Store store(db.toStdString());
            const auto c = store.create_conversation("Caches and strings", "", "dynamic");
            for (const auto& turn : kTurns) {
                store.append_message(c.id, Role::User, turn[0]);
                store.append_message(c.id, Role::Assistant, turn[1]);
            }
        }
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow w(o);
        w.setScreen(screen);
        w.move(screen->availableGeometry().topLeft());
        w.showMaximized();  // as a laptop's user has it
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
        // The scheme, chosen as a user does: the View menu's entry.
        auto* choice = w.findChild<QAction*>(scheme == "dark" ? "colorSchemeDarkAction" : "colorSchemeLightAction");
        QVERIFY(choice);
        choice->trigger();
        auto* transcript = w.findChild<TranscriptView*>("transcriptView");
        QTRY_COMPARE(transcript->messageViews().size(), 4);
        QTest::qWait(200);
        const QString tag = QString("%1x%2-%3").arg(screenSize.width()).arg(screenSize.height()).arg(scheme);
        save(&w, "layout-" + tag + ".png");

        const QRect avail = screen->availableGeometry();
        QVERIFY2(w.frameGeometry().width() <= avail.width(), qPrintable(QString("window %1 px wide on a %2 px screen").arg(w.frameGeometry().width()).arg(avail.width())));
        if (screenSize.width() <= 1000) {
            // A laptop's window can be made narrower still.
            QVERIFY2(w.minimumSizeHint().width() <= 800, qPrintable(QString("minimum width %1").arg(w.minimumSizeHint().width())));
            QVERIFY2(transcript->width() * 3 >= w.width() * 2,
                     qPrintable(QString("transcript %1 of %2 px").arg(transcript->width()).arg(w.width())));
        }
        expectInside(&w);
        // The status bar and everything on it shows whole.
        QStatusBar* bar = w.statusBar();
        QVERIFY(w.rect().contains(QRect(bar->mapTo(&w, QPoint(0, 0)), bar->size())));
        for (QWidget* child : bar->findChildren<QWidget*>(Qt::FindDirectChildrenOnly)) {
            if (!child->isVisible()) continue;
            QVERIFY2(bar->rect().contains(child->geometry()), qPrintable(child->objectName() + " is cut off"));
            if (auto* label = qobject_cast<QLabel*>(child))
                QVERIFY2(label->width() >= qMin(label->sizeHint().width(), 60), qPrintable(label->objectName() + " squeezed to nothing"));
        }

        // The comparison view, opened with its shortcut.
        QTest::keyClick(&w, Qt::Key_M, Qt::ControlModifier | Qt::ShiftModifier);
        auto* compare = w.findChild<QDockWidget*>("comparisonDock");
        QVERIFY(compare);
        QTRY_VERIFY(compare->isVisible());
        QTest::qWait(200);
        QVERIFY2(w.frameGeometry().width() <= avail.width() && w.frameGeometry().height() <= avail.height(),
                 qPrintable(QString("window %1x%2 on a %3x%4 screen").arg(w.frameGeometry().width()).arg(w.frameGeometry().height()).arg(avail.width()).arg(avail.height())));
        QWidget* chart = compare->findChild<QWidget*>("kvBytesChart");
        QVERIFY(chart && chart->isVisible());
        const QRect chartOnScreen(chart->mapToGlobal(QPoint(0, 0)), chart->size());
        QVERIFY2(avail.contains(chartOnScreen), qPrintable(QString("chart at %1,%2 %3x%4").arg(chartOnScreen.x()).arg(chartOnScreen.y()).arg(chartOnScreen.width()).arg(chartOnScreen.height())));
        expectInside(&w);
        save(compare->isFloating() ? static_cast<QWidget*>(compare) : &w, "layout-" + tag + "-comparison.png");
    }

    void inspectorOneKeyAway_data() {
        QTest::addColumn<QSize>("screenSize");
        QTest::newRow("1600x1000") << QSize(1600, 1000);
        QTest::newRow("1000x700") << QSize(1000, 700);
    }

    // The inspector, even behind the prefix library's tab or sent away on a laptop, is one key
    // (Ctrl+I) and one click (the status bar's Inspector) away, whole on the screen and wide
    // enough to read, and the chat keeps its room.
    void inspectorOneKeyAway() {
        QFETCH(QSize, screenSize);
        QScreen* screen = test::screenOfSize(screenSize);
        if (!screen) QSKIP("no screen of this size (the suite sets them up on the offscreen platform)");
        WindowOptions o;
        o.databasePath = home_.path() + "/inspector/kvchat.db";
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow w(o);
        w.setScreen(screen);
        w.move(screen->availableGeometry().topLeft());
        w.showMaximized();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
        auto* dock = w.findChild<QDockWidget*>("cacheInspectorDock");
        QVERIFY(dock);
        w.findChild<QDockWidget*>("prefixLibraryDock")->raise();
        QTest::qWait(100);
        QVERIFY(dock->visibleRegion().isEmpty());  // hidden, as users found it
        const QRect avail = screen->availableGeometry();
        auto shownWhole = [&] {
            return dock->isVisible() && !dock->visibleRegion().isEmpty() && dock->width() >= 400 &&
                   avail.contains(QRect(dock->mapToGlobal(QPoint(0, 0)), dock->size()));
        };
        QTest::keyClick(&w, Qt::Key_I, Qt::ControlModifier);
        QTRY_VERIFY2(shownWhole(), qPrintable(QString("inspector %1x%2, floating %3").arg(dock->width()).arg(dock->height()).arg(dock->isFloating())));
        auto* transcript = w.findChild<TranscriptView*>("transcriptView");
        if (screenSize.width() <= 1000) QVERIFY(transcript->width() * 3 >= w.width() * 2);
        save(dock->isFloating() ? static_cast<QWidget*>(dock) : &w, QString("inspector-%1x%2.png").arg(screenSize.width()).arg(screenSize.height()));
        // Closed, then the status bar's button.
        dock->close();
        QTRY_VERIFY(!dock->isVisible());
        auto* button = w.findChild<QToolButton*>("inspectorButton");
        QVERIFY(button && button->isVisible());
        QVERIFY(w.rect().contains(QRect(button->mapTo(&w, QPoint(0, 0)), button->size())));
        QTest::mouseClick(button, Qt::LeftButton);
        QTRY_VERIFY(shownWhole());
    }

    void loadError() {
        const QString bad = home_.path() + "/broken-model.gguf";
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("GGUF\x03\x00\x00\x00 this file was cut short", 32);
        f.close();
        WindowOptions o;
        o.databasePath = home_.path() + "/shots-error/kvchat.db";
        o.modelPath = bad;
        o.restoreState = false;
        MainWindow w(o);
        w.resize(1100, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("modelErrorDialog")) != nullptr, 30000);
        QTest::qWait(100);
        save(&w, "load-error-window.png");
        save(box, "load-error.png");
        box->accept();
    }

    void readmePictures() {
        QString dir = qEnvironmentVariable("KVCHAT_README_PICTURES");
        const bool forReadme = !dir.isEmpty();
        if (!forReadme) dir = out_ + "/readme";
        QVERIFY(QDir().mkpath(dir));
        // The fresh profile sees the installed models (as packaging/kvchat.sh model put them), so
        // the Models view lists them.
        // Under a home of its own, so the Models view shows the folder as a user's (~/.local/...).
        qputenv("HOME", home_.path().toUtf8());
        qputenv("XDG_DATA_HOME", (home_.path() + "/.local/share").toUtf8());
        const QString data = QString::fromStdString(data_dir());
        QVERIFY(QDir().mkpath(data));
        if (QFileInfo(installedModels_).isDir()) QVERIFY(QFile::link(installedModels_, data + "/models"));
        QString model = QString::fromStdString(installed_model_path(kChatModelFile));
        if (!QFileInfo::exists(model)) {
            if (forReadme)
                QFAIL(qPrintable("the README's pictures show the chat model: install it (packaging/kvchat.sh model); none in " +
                                 installedModels_));
            model = model_;
        }
        const QString db = home_.path() + "/readme/kvchat.db";
        QDir().mkpath(QFileInfo(db).absolutePath());
        {
            Store store(db.toStdString());
            ChatSettings s;
            s.sampling.greedy = true;  // the same pictures on every run
            s.random_seed = false;
            s.max_new_tokens = 160;
            s.save(store);
        }
        auto save = [&](QWidget* w, const QString& name) {
            const QString path = dir + "/" + name;
            QVERIFY2(w->grab().save(path), qPrintable(path));
            qInfo("wrote %s", qPrintable(path));
        };
        const auto window = test::openChatWindow(db, model, QSize(1600, 1000));
        QVERIFY(window);
        MainWindow& w = *window;
        QSignalSpy done(&w, &MainWindow::answerFinished);
        const char* questions[] = {"Give me three tips for a good night's sleep.",
                                   "Write a Python function that reverses a string."};
        for (const char* q : questions) {
            w.sendMessage(q);
            QVERIFY(done.wait(300000));
            QVERIFY(!done.last().at(0).value<TurnOutcome>().answer.content.trimmed().isEmpty());
        }
        CacheLab* lab = w.cacheLab();
        QTRY_VERIFY_WITH_TIMEOUT(lab->inspector()->telemetry().has_value(), 20000);
        lab->inspector()->flush();
        QTest::qWait(300);
        save(&w, "chat.png");

        // A laptop's screen.
        w.resize(1000, 700);
        QTest::qWait(300);
        save(&w, "chat-1000x700.png");
        w.resize(1600, 1000);

        // The cache inspector, given room (the chat panel, which holds the strategy panel, out of its way).
        auto* strategyDock = w.findChild<QDockWidget*>("chatPanelDock");  // the strategy panel lives in the chat panel
        strategyDock->hide();
        auto* inspectorDock = w.findChild<QDockWidget*>("cacheInspectorDock");
        inspectorDock->show();
        inspectorDock->raise();
        w.resizeDocks({inspectorDock}, {640}, Qt::Horizontal);
        lab->inspector()->flush();
        QTest::qWait(300);
        save(&w, "inspector.png");

        // The strategy preview: a sliding window shorter than the conversation, as the engine
        // plans it (what is lost, what it costs), not applied.
        strategyDock->show();
        strategyDock->raise();
        StrategyPanel* panel = lab->strategyPanel();
        QSignalSpy planned(w.worker(), &EngineWorker::switchPlanned);
        test::retype(panel->specEdit(), "sliding_window:window=64");
        QVERIFY(planned.wait(30000) || planned.count() > 0);
        QTRY_VERIFY_WITH_TIMEOUT(panel->applyButton()->isEnabled(), 10000);
        // The strategy panel sits below the sampling fields in the chat panel: give the panel the
        // docks' height and scroll it into view.
        for (const char* name : {"cacheInspectorDock", "prefixLibraryDock", "storageDock"})
            w.findChild<QDockWidget*>(name)->hide();
        QTest::qWait(100);
        auto* panelScroll = w.chatPanel()->findChild<QScrollArea*>();
        QVERIFY(panelScroll);
        panelScroll->ensureWidgetVisible(panel, 0, 0);
        QTest::qWait(300);
        QVERIFY(panel->visibleRegion().boundingRect().height() >= panel->height() * 2 / 3);
        save(&w, "strategy-preview.png");

        // The comparison: one prompt replayed greedily under three strategies.
        auto* compareDock = w.findChild<QDockWidget*>("comparisonDock");
        strategyDock->hide();
        compareDock->show();
        w.resize(1600, 1000);
        ComparisonView* view = lab->comparisonView();
        view->setStrategies({"dynamic", "quantized:nbits=2,residual=32,group=32", "sink:window=32,sinks=4"});
        view->tokensBox()->setValue(48);
        test::retype(view->promptEdit(), "Name three things a cache is good for.");
        QSignalSpy rows(w.worker(), &EngineWorker::comparisonFinished);
        QTest::mouseClick(view->runButton(), Qt::LeftButton);
        QVERIFY(rows.wait(300000) || rows.count() > 0);
        QTRY_COMPARE_WITH_TIMEOUT(view->columnCount(), 3, 10000);
        QTest::qWait(300);
        // The comparison floats as a window of its own on a laptop-sized screen; grab what shows it.
        save(compareDock->isFloating() ? static_cast<QWidget*>(compareDock) : &w, "comparison.png");
        compareDock->hide();

        // The Models view over the installed models.
        QTest::keyClick(&w, Qt::Key_L, Qt::ControlModifier);
        ModelsDialog* models = nullptr;
        QTRY_VERIFY((models = w.findChild<ModelsDialog*>("modelsDialog")) != nullptr && models->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(!models->reading(), 30000);
        QVERIFY(models->files()->rowCount() >= 1);
        models->resize(1240, 360);
        QTest::qWait(300);
        save(models, "models.png");
        models->reject();
    }
};

KVCHAT_TEST_MAIN_WITH_SCREENS(TestUiScreenshots)
#include "test_ui_screenshots.moc"
