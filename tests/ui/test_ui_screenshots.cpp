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
#include "ui/main_window.h"
#include "ui/models/model_list_model.h"
#include "ui/models/models_dialog.h"
#include "ui/message_view.h"
#include "ui/prefix_library_panel.h"
#include "ui/storage_panel.h"
#include "ui/settings_dialog.h"
#include "ui/transcript_view.h"
#include "support/ui_testing.h"

#include <QAbstractItemView>
#include <QLabel>
#include <QLineEdit>
#include <QDockWidget>
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
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow w(o);
        w.resize(1280, 820);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
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
        QVERIFY(prefixes.wait(120000));
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

        // The same window under a dark palette: everything follows the system's colours.
        const QPalette light = QApplication::palette();
        QPalette dark;
        dark.setColor(QPalette::Window, QColor(45, 45, 48));
        dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
        dark.setColor(QPalette::Base, QColor(30, 30, 32));
        dark.setColor(QPalette::AlternateBase, QColor(55, 55, 60));
        dark.setColor(QPalette::Text, QColor(230, 230, 230));
        dark.setColor(QPalette::Button, QColor(50, 50, 54));
        dark.setColor(QPalette::ButtonText, QColor(230, 230, 230));
        dark.setColor(QPalette::Highlight, QColor(42, 130, 218));
        dark.setColor(QPalette::HighlightedText, Qt::white);
        dark.setColor(QPalette::PlaceholderText, QColor(150, 150, 150));
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
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model;
        o.restoreState = false;
        MainWindow w(o);
        w.resize(1600, 1000);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
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

        // The cache inspector, given room (the strategy dock out of its way).
        auto* strategyDock = w.findChild<QDockWidget*>("strategyDock");
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
        QTest::qWait(300);
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
        save(&w, "comparison.png");
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

QTEST_MAIN(TestUiScreenshots)
#include "test_ui_screenshots.moc"
