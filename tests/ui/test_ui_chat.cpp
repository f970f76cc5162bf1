// The chat window driven as a user drives it (key clicks, button clicks, offscreen) on a tiny
// model: a streamed answer that lands in the database, Stop, Regenerate, Edit, rename, delete,
// search, a prefix and a chat started from it, settings across a restart, the first start on an
// empty data folder, and the bad inputs (a megabyte paste, invalid UTF-8, a database that is not
// one, a second window on the same database).
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/compute/device.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "ui/engine_worker.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/prefix_library_panel.h"
#include "ui/storage_panel.h"
#include "ui/settings_dialog.h"
#include "ui/transcript_view.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"

#include <QAbstractItemView>
#include <QAccessible>
#include <QDockWidget>
#include <QHeaderView>
#include <QApplication>
#include <QClipboard>
#include <QToolButton>
#include <QComboBox>
#include <QFile>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QScopeGuard>
#include <QSemaphore>
#include <QSignalSpy>
#include <atomic>
#include <QSpinBox>
#include <QDoubleSpinBox>
#include <QPlainTextEdit>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include <functional>
#include <memory>

using namespace kvchat;

namespace {

constexpr int kTurnTimeoutMs = kvchat::test::kAnswerTimeoutMs;

using kvchat::test::editInPlace;
using kvchat::test::storedMessages;
using kvchat::test::transcriptOf;
using kvchat::test::typeAndSend;
using kvchat::test::whenModal;

}  // namespace

class TestUiChat : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb() { return home_.path() + QStringLiteral("/db%1/kvchat.db").arg(++dbCount_); }

    // Settings written before the window opens: greedy answers of a chosen length.
    static void writeSettings(const QString& db, int maxNew) { test::writeChatSettings(db, maxNew); }

    std::unique_ptr<MainWindow> openWindow(const QString& db) { return test::openChatWindow(db, model_); }

    static MessageBox* input(MainWindow& w) { return w.findChild<MessageBox*>("messageInput"); }
    static QPushButton* sendButton(MainWindow& w) { return w.findChild<QPushButton*>("sendButton"); }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    void sendStreamsAndStores() {
        const QString db = freshDb();
        writeSettings(db, 48);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(!sendButton(*w)->isEnabled());  // empty message
        QSignalSpy telemetry(w->worker(), &EngineWorker::cacheTelemetry);
        QSignalSpy pieces(w->worker(), &EngineWorker::answerText);
        QSignalSpy started(w.get(), &MainWindow::answerStarted);
        input(*w)->setFocus();
        QTest::keyClicks(input(*w), "hello there");
        QVERIFY(sendButton(*w)->isEnabled());
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        QTest::keyClick(input(*w), Qt::Key_Return);
        QVERIFY(input(*w)->toPlainText().isEmpty());
        QVERIFY(!sendButton(*w)->isEnabled());  // answering
        QTest::keyClicks(input(*w), "next");
        QVERIFY(!sendButton(*w)->isEnabled());  // still answering, though there is text
        QVERIFY(done.wait(kTurnTimeoutMs));
        QCOMPARE(started.count(), 1);
        QVERIFY(pieces.count() >= 1);
        QVERIFY(telemetry.count() >= 1);
        QVERIFY(sendButton(*w)->isEnabled());

        const TurnOutcome out = done.at(0).at(0).value<TurnOutcome>();
        const auto msgs = storedMessages(db, w->currentConversation());
        QCOMPARE(msgs.size(), size_t(2));
        QCOMPARE(QString::fromStdString(msgs[0].content), QString("hello there"));
        QCOMPARE(msgs[1].role, Role::Assistant);
        // What streamed on screen is what was stored, and its figures are shown under it.
        auto views = transcriptOf(*w)->messageViews();
        QCOMPARE(views.size(), 2);
        QString streamed;
        for (const QList<QVariant>& args : pieces) streamed += args.at(1).toString();
        QCOMPARE(streamed, QString::fromStdString(msgs[1].content));
        QCOMPARE(views[1]->content(), streamed);
        QCOMPARE(out.answer.id, msgs[1].id);
        QCOMPARE(msgs[1].stats.generated_tokens, out.answer.figures.generated_tokens);
        auto* figures = views[1]->findChild<QLabel*>("answerFigures");
        QVERIFY(figures && figures->isVisible());
        QVERIFY(figures->text().contains(QString::number(msgs[1].stats.prompt_tokens)));
        auto* last = w->findChild<QLabel*>("lastAnswerLabel");
        QVERIFY(last->text().contains("computed"));
        // The chat is titled after its first message.
        QTRY_VERIFY(w->findChild<QListView*>("conversationList")->model()->index(0, 0).data().toString() == "hello there");

        // A second turn reuses the cache: its figures say so and survive a restart.
        input(*w)->clear();
        QVERIFY(typeAndSend(*w, "and again"));
        const auto after = storedMessages(db, w->currentConversation());
        QCOMPARE(after.size(), size_t(4));
        QVERIFY(after[3].stats.cached_tokens > 0);
        const qint64 id = w->currentConversation();
        w.reset();
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        MainWindow again(o);
        again.show();
        QTRY_VERIFY_WITH_TIMEOUT(again.currentConversation() == id && transcriptOf(again)->messageViews().size() == 4, 60000);
        for (int i = 0; i < 4; ++i) QCOMPARE(transcriptOf(again)->messageViews()[i]->message().ordinal, i);
        auto* f = transcriptOf(again)->messageViews()[3]->findChild<QLabel*>("answerFigures");
        QVERIFY2(f->text().contains(QStringLiteral("%1 cached").arg(QLocale().toString(after[3].stats.cached_tokens))),
                 qPrintable(f->text()));
    }

    void stopKeepsThePartialAnswer() {
        const QString db = freshDb();
        writeSettings(db, 1500);
        auto w = openWindow(db);
        QVERIFY(w);
        // The worker is held inside the answer's first piece of text until Esc was pressed, so a
        // fast model cannot finish the answer before the test sees it streaming.
        struct Gate {
            QSemaphore release;
            std::atomic<bool> held{false};
        };
        auto gate = std::make_shared<Gate>();
        QObject context;
        connect(w->worker(), &EngineWorker::answerText, &context, [gate](qint64, const QString&) {
            if (!gate->held.exchange(true)) gate->release.acquire();
        }, Qt::DirectConnection);
        bool released = false;
        const auto letGo = qScopeGuard([&] { if (!released) gate->release.release(1); });
        QSignalSpy started(w.get(), &MainWindow::answerStarted);
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        QTest::keyClicks(input(*w), "count");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QVERIFY(started.wait(kTurnTimeoutMs));
        QVERIFY(w->findChild<QPushButton*>("stopButton")->isVisible());
        QVERIFY(input(*w)->hasFocus());
        QTest::keyClick(input(*w), Qt::Key_Escape);  // where the focus is while an answer comes
        released = true;
        gate->release.release(1);
        QVERIFY(done.wait(kTurnTimeoutMs));
        const TurnOutcome out = done.at(0).at(0).value<TurnOutcome>();
        QCOMPARE(out.stopReason, QString("cancelled"));
        const auto msgs = storedMessages(db, w->currentConversation());
        QCOMPARE(msgs.size(), size_t(2));
        QVERIFY(msgs[1].stats.generated_tokens > 0);
        QVERIFY(msgs[1].stats.generated_tokens < 1500);
        QCOMPARE(transcriptOf(*w)->messageViews()[1]->content(), QString::fromStdString(msgs[1].content));
    }

    void regenerateAndEdit() {
        const QString db = freshDb();
        writeSettings(db, 24);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        const auto before = storedMessages(db, w->currentConversation());
        QCOMPARE(before.size(), size_t(2));

        // Ctrl+R answers the last question again: the old answer's row is replaced.
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        QTest::keyClick(w.get(), Qt::Key_R, Qt::ControlModifier);
        QVERIFY(done.wait(kTurnTimeoutMs));
        const auto regenerated = storedMessages(db, w->currentConversation());
        QCOMPARE(regenerated.size(), size_t(2));
        QVERIFY(regenerated[1].id != before[1].id);
        QCOMPARE(transcriptOf(*w)->messageViews().size(), 2);

        // Edit the question in place: the new text replaces it and a new answer follows.
        editInPlace(transcriptOf(*w)->messageViews()[0], "an edited question");
        QVERIFY(done.wait(kTurnTimeoutMs));
        const auto edited = storedMessages(db, w->currentConversation());
        QCOMPARE(edited.size(), size_t(2));
        QCOMPARE(QString::fromStdString(edited[0].content), QString("an edited question"));
        QVERIFY(edited[1].id != regenerated[1].id);
        QCOMPARE(transcriptOf(*w)->messageViews()[0]->content(), QString("an edited question"));
    }

    void renameDeleteSearch() {
        const QString db = freshDb();
        writeSettings(db, 8);
        auto w = openWindow(db);
        QVERIFY(w);
        auto* list = w->findChild<QListView*>("conversationList");
        QVERIFY(typeAndSend(*w, "apples are red"));
        const qint64 first = w->currentConversation();
        QTest::keyClick(w.get(), Qt::Key_N, Qt::ControlModifier);
        QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != first && w->currentConversation() != 0, 30000);
        QVERIFY(input(*w)->hasFocus());
        QVERIFY(typeAndSend(*w, "bananas are yellow"));
        QTRY_COMPARE(list->model()->rowCount(), 2);
        // Most recent activity first.
        QTRY_COMPARE(list->model()->index(0, 0).data().toString(), QString("bananas are yellow"));

        // Ctrl+K searches titles and message text.
        QTest::keyClick(w.get(), Qt::Key_K, Qt::ControlModifier);
        auto* search = w->findChild<QLineEdit*>("conversationSearch");
        QVERIFY(search->hasFocus());
        QTest::keyClicks(search, "apples");
        QTRY_COMPARE(list->model()->rowCount(), 1);
        QCOMPARE(list->model()->index(0, 0).data(Qt::UserRole + 1).toLongLong(), first);
        search->clear();
        QTRY_COMPARE(list->model()->rowCount(), 2);

        // F2 renames the open conversation in place.
        QTest::keyClick(w.get(), Qt::Key_F2);
        QTRY_VERIFY(qobject_cast<QLineEdit*>(QApplication::focusWidget()) != nullptr &&
                    QApplication::focusWidget() != search);
        auto* editor = qobject_cast<QLineEdit*>(QApplication::focusWidget());
        editor->selectAll();
        QTest::keyClicks(editor, "Fruit notes");
        QTest::keyClick(editor, Qt::Key_Return);
        QTRY_VERIFY_WITH_TIMEOUT(list->model()->index(0, 0).data().toString() == "Fruit notes", 10000);
        {
            Store store(db.toStdString());
            QVERIFY(store.find_conversation("Fruit notes").has_value());
        }

        // Ctrl+Delete asks first; Yes deletes rows and snapshot.
        const qint64 doomed = w->currentConversation();
        QTest::keyClick(w.get(), Qt::Key_Delete, Qt::ControlModifier);
        QMessageBox* box = nullptr;
        QTRY_VERIFY((box = w->findChild<QMessageBox*>("deleteConfirmDialog")) != nullptr);
        box->button(QMessageBox::Yes)->click();
        QTRY_COMPARE(list->model()->rowCount(), 1);
        QTRY_COMPARE(w->currentConversation(), first);
        Store store(db.toStdString());
        QVERIFY(!store.find_conversation_by_id(doomed).has_value());
    }

    void prefixAndChatFromIt() {
        const QString db = freshDb();
        writeSettings(db, 8);
        auto w = openWindow(db);
        QVERIFY(w);
        auto* panel = w->findChild<PrefixLibraryPanel*>("prefixLibrary");
        QSignalSpy changed(w->worker(), &EngineWorker::prefixesChanged);
        whenModal([](QWidget* d) {
            d->findChild<QLineEdit*>("prefixName")->setText("Pirate");
            d->findChild<QPlainTextEdit*>("prefixText")->setPlainText("You are a pirate. Answer like one, always.");
            QMetaObject::invokeMethod(d, "accept", Qt::QueuedConnection);
        });
        QTest::mouseClick(w->findChild<QPushButton*>("prefixFromTextButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(panel->prefixes().size() == 1, 60000);
        const PrefixItem p = panel->prefixes().front();
        QCOMPARE(p.name, QString("Pirate"));
        QVERIFY(p.tokens > 0);
        QVERIFY(p.cacheBytes > 0);
        auto* table = panel->findChild<QTreeWidget*>("prefixTable");
        QCOMPARE(table->topLevelItem(0)->text(0), QString("Pirate"));
        QCOMPARE(table->topLevelItem(0)->text(4), QString("never"));

        const qint64 before = w->currentConversation();
        panel->select(p.id);
        QTest::mouseClick(w->findChild<QPushButton*>("newChatFromPrefixButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != before, 30000);
        QTRY_COMPARE(transcriptOf(*w)->messageViews().size(), 1);  // the prefix's system message
        QVERIFY(typeAndSend(*w, "ahoy"));
        const auto msgs = storedMessages(db, w->currentConversation());
        QCOMPARE(msgs.size(), size_t(3));
        QCOMPARE(msgs[2].stats.prefix_tokens, p.tokens);
        // The status bar shows the cached tokens of the chat's first answer.
        auto* last = w->findChild<QLabel*>("lastAnswerLabel");
        QVERIFY2(last->text().contains(QLocale().toString(msgs[2].stats.cached_tokens) + " cached"), qPrintable(last->text()));
        QVERIFY(msgs[2].stats.cached_tokens >= p.tokens);
        QTRY_VERIFY(panel->prefixes().front().useCount == 1);
    }

    // The storage view lists the saved caches with their sizes on disk (as the files have them)
    // once it is shown, follows a turn, removes one saved cache (the messages stay, the list
    // says it has none) and sets the budget, applied at once.
    void storageView() {
        const QString db = freshDb();
        writeSettings(db, 6);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "the cat sat on the mat"));
        const qint64 id = w->currentConversation();
        auto* dock = w->findChild<QDockWidget*>("storageDock");
        QVERIFY(dock);
        dock->show();
        dock->raise();
        auto* panel = w->findChild<StoragePanel*>("storagePanel");
        QTRY_VERIFY_WITH_TIMEOUT(!panel->report().items.isEmpty() && panel->report().items.front().saved, 30000);
        {
            Store store(db.toStdString());
            const std::string file = store.snapshot_path(store.find_conversation_by_id(id)->snapshot);
            const StorageItem& it = panel->report().items.front();
            QCOMPARE(it.id, id);
            QCOMPARE(it.bytes, qint64(QFileInfo(QString::fromStdString(file)).size()));
            QVERIFY(it.tokens > 0);
            QCOMPARE(panel->report().totalBytes, it.bytes);
            QVERIFY(panel->report().budgetIsDefault);
        }
        auto* table = panel->findChild<QTreeWidget*>("storageTable");
        // Binary units, as every size in the window.
        QCOMPARE(table->topLevelItem(0)->text(3),
                 QLocale().formattedDataSize(panel->report().items.front().bytes, 1, QLocale::DataSizeIecFormat));
        auto* drop = panel->findChild<QPushButton*>("dropCacheButton");
        QVERIFY(!drop->isEnabled());  // nothing selected
        // A second turn saves a larger cache; the view follows.
        const qint64 before = panel->report().items.front().bytes;
        QVERIFY(typeAndSend(*w, "and the dog"));
        QTRY_VERIFY(panel->report().items.front().bytes > before);
        panel->selectRow(0);
        QVERIFY(drop->isEnabled());
        QTest::mouseClick(drop, Qt::LeftButton);
        QTRY_VERIFY(!panel->report().items.front().saved);
        QCOMPARE(panel->report().totalBytes, qint64(0));
        QCOMPARE(table->topLevelItem(0)->text(3), tr("none"));
        QCOMPARE(storedMessages(db, id).size(), size_t(4));
        {
            Store store(db.toStdString());
            QVERIFY(store.find_conversation_by_id(id)->snapshot.empty());
            QVERIFY(QDir(QString::fromStdString(store.snapshot_dir())).entryList(QDir::Files).isEmpty());
        }
        // The budget, applied and kept in the database's settings; Default forgets it.
        auto* budget = panel->findChild<QDoubleSpinBox*>("storageBudget");
        budget->setValue(300);
        QTest::mouseClick(panel->findChild<QPushButton*>("applyStorageBudgetButton"), Qt::LeftButton);
        QTRY_VERIFY(!panel->report().budgetIsDefault);
        // In MiB, as every size in the window.
        QCOMPARE(panel->report().budgetBytes, qint64(300) * 1048576);
        QVERIFY(panel->findChild<QLabel*>("storageTotal")->text().contains(QStringLiteral("300.0 MiB")));
        QCOMPARE(Store(db.toStdString()).setting("snapshot_budget_bytes").value_or(""), std::to_string(300 * 1048576));
        QTest::mouseClick(panel->findChild<QPushButton*>("defaultStorageBudgetButton"), Qt::LeftButton);
        QTRY_VERIFY(panel->report().budgetIsDefault);
        QVERIFY(!Store(db.toStdString()).setting("snapshot_budget_bytes").has_value());
        // The next turn saves the cache again, and the view shows it.
        QVERIFY(typeAndSend(*w, "and the bird"));
        QTRY_VERIFY(panel->report().items.front().saved);
    }

    // A prefix from the open chat's first messages; rename and delete from the panel.
    void prefixFromChatRenameDelete() {
        const QString db = freshDb();
        writeSettings(db, 6);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "remember the word teapot"));
        auto* panel = w->findChild<PrefixLibraryPanel*>("prefixLibrary");
        whenModal([](QWidget* d) {
            d->findChild<QLineEdit*>("prefixName")->setText("Teapot opening");
            d->findChild<QSpinBox*>("prefixMessages")->setValue(2);
            QMetaObject::invokeMethod(d, "accept", Qt::QueuedConnection);
        });
        QTest::mouseClick(w->findChild<QPushButton*>("prefixFromChatButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(panel->prefixes().size() == 1, 60000);
        QCOMPARE(panel->prefixes().front().messageCount, 2);
        panel->select(panel->prefixes().front().id);
        auto* edit = w->findChild<QPushButton*>("editPrefixButton");
        QVERIFY(!edit->isEnabled());  // two messages: saved again from a chat, not edited as text

        whenModal([](QWidget* d) {
            auto* input = qobject_cast<QInputDialog*>(d);
            input->setTextValue("Teapot");
            input->accept();
        });
        QTest::mouseClick(w->findChild<QPushButton*>("renamePrefixButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(panel->prefixes().front().name == "Teapot", 10000);

        panel->select(panel->prefixes().front().id);
        whenModal([](QWidget* d) {
            auto* box = qobject_cast<QMessageBox*>(d);
            box->button(QMessageBox::Yes)->click();
        });
        QTest::mouseClick(w->findChild<QPushButton*>("deletePrefixButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(panel->prefixes().isEmpty(), 10000);
        Store store(db.toStdString());
        QVERIFY(store.list_prefixes().empty());
    }

    // The model file removed while it is open: the mapping keeps it usable; and a snapshot that
    // cannot be written (here its folder is a file, as on a full or broken disk) is told, while
    // the answer is kept.
    void modelRemovedAndSnapshotUnwritable() {
        const QString db = freshDb();
        writeSettings(db, 6);
        const QString copy = home_.path() + "/doomed-model.gguf";
        QVERIFY(QFile::copy(model_, copy));
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = copy;
        o.restoreState = false;
        MainWindow w(o);
        w.show();
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
        QVERIFY(QFile::remove(copy));
        const QString snapshots = QFileInfo(db).absolutePath() + "/snapshots";
        QVERIFY(QDir(snapshots).removeRecursively());
        {
            QFile blocker(snapshots);
            QVERIFY(blocker.open(QIODevice::WriteOnly));
        }
        QVERIFY(typeAndSend(w, "still answering?"));
        QVERIFY(QFile::remove(snapshots));  // (a Store opened here would refuse the file)
        const auto msgs = storedMessages(db, w.currentConversation());
        QCOMPARE(msgs.size(), size_t(2));
        auto* notice = w.findChild<QLabel*>("noticeBanner");
        QTRY_VERIFY(notice->isVisible());
        QVERIFY2(notice->text().contains("not saved"), qPrintable(notice->text()));
        QCOMPARE(transcriptOf(w)->messageViews()[1]->content(), QString::fromStdString(msgs[1].content));
    }

    void settingsPersistAcrossRestart() {
        const QString db = freshDb();
        writeSettings(db, 16);
        {
            auto w = openWindow(db);
            QVERIFY(w);
            QTest::keyClick(w.get(), Qt::Key_Comma, Qt::ControlModifier);
            SettingsDialog* d = nullptr;
            QTRY_VERIFY((d = w->findChild<SettingsDialog*>("settingsDialog")) != nullptr);
            QCOMPARE(d->findChild<QSpinBox*>("maxNewTokensSetting")->value(), 16);
            d->findChild<QSpinBox*>("maxNewTokensSetting")->setValue(77);
            d->findChild<QDoubleSpinBox*>("temperatureSetting")->setValue(0.35);
            d->findChild<QComboBox*>("contextPolicySetting")->setCurrentIndex(2);
            auto* device = d->findChild<QComboBox*>("deviceSetting");
            QCOMPARE(device->currentData().toString(), QString("cpu"));
            device->setCurrentIndex(device->findData(QString("cuda")));
            d->findChild<QPlainTextEdit*>("systemPromptSetting")->setPlainText("Be brief.");
            QSignalSpy saved(w->worker(), &EngineWorker::settingsLoaded);
            d->accept();
            QTRY_VERIFY_WITH_TIMEOUT(saved.count() > 0, 60000);  // (the worker emits from its thread: the signal may come before wait() starts)
        }
        auto w = openWindow(db);
        QVERIFY(w);
        // The model now loads on the GPU; without a usable one the window says why (and uses the CPU).
        if (!open_backend(Device{Device::Kind::Cuda, 0}, 1).notice.empty()) {
            auto* notice = w->findChild<QLabel*>("noticeBanner");
            QTRY_VERIFY_WITH_TIMEOUT(notice->isVisible() && notice->text().contains("CUDA device 0 is not usable"), 30000);
            QVERIFY2(notice->text().contains("using the CPU"), qPrintable(notice->text()));
        }
        QTest::keyClick(w.get(), Qt::Key_Comma, Qt::ControlModifier);
        SettingsDialog* d = nullptr;
        QTRY_VERIFY((d = w->findChild<SettingsDialog*>("settingsDialog")) != nullptr);
        QCOMPARE(d->findChild<QSpinBox*>("maxNewTokensSetting")->value(), 77);
        QCOMPARE(d->findChild<QDoubleSpinBox*>("temperatureSetting")->value(), 0.35);
        QCOMPARE(d->findChild<QComboBox*>("contextPolicySetting")->currentData().toString(), QString("sliding"));
        QCOMPARE(d->findChild<QComboBox*>("deviceSetting")->currentData().toString(), QString("cuda"));
        QCOMPARE(d->findChild<QPlainTextEdit*>("systemPromptSetting")->toPlainText(), QString("Be brief."));
        d->reject();
        Store store(db.toStdString());
        const ChatSettings s = ChatSettings::load(store);
        QCOMPARE(s.max_new_tokens, 77);
        QCOMPARE(s.device, std::string("cuda"));
        QCOMPARE(s.system_prompt, std::string("Be brief."));
    }

    // Geometry, docks and the open conversation come back after a restart.
    void stateRestoredAfterRestart() {
        const QString db = freshDb();
        writeSettings(db, 4);
        qint64 older = 0;
        QByteArray geometry;
        {
            auto w = openWindow(db);
            QVERIFY(w);
            older = w->currentConversation();
            QVERIFY(typeAndSend(*w, "the older chat"));
            QTest::keyClick(w.get(), Qt::Key_N, Qt::ControlModifier);
            QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != older, 30000);
            QVERIFY(typeAndSend(*w, "the newer chat"));
            auto* list = w->findChild<QListView*>("conversationList");
            QTRY_COMPARE(list->model()->rowCount(), 2);
            list->setCurrentIndex(list->model()->index(1, 0));
            QTRY_COMPARE(w->currentConversation(), older);
            w->findChild<QDockWidget*>("prefixLibraryDock")->hide();
            w->resize(1010, 707);
            w->close();
        }
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        MainWindow again(o);
        again.show();
        QTRY_VERIFY_WITH_TIMEOUT(again.currentConversation() == older, 30000);
        QVERIFY(!again.findChild<QDockWidget*>("prefixLibraryDock")->isVisible());
        QCOMPARE(again.size(), QSize(1010, 707));
        QTRY_COMPARE(transcriptOf(again)->messageViews().size(), 2);
        QCOMPARE(transcriptOf(again)->messageViews()[0]->content(), QString("the older chat"));
    }

    // Every control says what it is to a screen reader and can be reached with the keyboard.
    void accessibleNamesAndKeyboard() {
        const QString db = freshDb();
        writeSettings(db, 4);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "hi"));
        QStringList missing, missingInLab;
        auto inLab = [](QWidget* c) {
            for (QWidget* p = c; p; p = p->parentWidget())
                if (p->inherits("kvchat::StrategyPanel") || p->inherits("kvchat::CacheInspector") ||
                    p->inherits("kvchat::ComparisonView"))
                    return true;
            return false;
        };
        for (QWidget* c : w->findChildren<QWidget*>()) {
            const bool control = qobject_cast<QAbstractButton*>(c) || qobject_cast<QLineEdit*>(c) ||
                                 qobject_cast<QPlainTextEdit*>(c) || qobject_cast<QComboBox*>(c) ||
                                 qobject_cast<QAbstractItemView*>(c) || qobject_cast<QAbstractSpinBox*>(c);
            // Qt's own dock title buttons (the View menu shows and hides the docks from the
            // keyboard) and table headers (the table itself is reached) are not ours to name.
            if (c->objectName().startsWith("qt_") || qobject_cast<QHeaderView*>(c)) continue;
            if (!control || !c->isVisibleTo(w.get()) || qobject_cast<QLineEdit*>(c->parentWidget()) ||
                qobject_cast<QComboBox*>(c->parentWidget()) || qobject_cast<QAbstractSpinBox*>(c->parentWidget()))
                continue;
            QAccessibleInterface* a = QAccessible::queryAccessibleInterface(c);
            if (!a || a->text(QAccessible::Name).trimmed().isEmpty() || c->focusPolicy() == Qt::NoFocus)
                (inLab(c) ? missingInLab : missing) << QString("%1 (%2)").arg(c->objectName(), c->metaObject()->className());
        }
        QVERIFY2(missing.isEmpty(), qPrintable(missing.join(", ")));
        // The cache lab's docks (issue 11) are checked the same way; what they still lack is
        // reported as a known failure until they name it.
        if (!missingInLab.isEmpty())
            QEXPECT_FAIL("", "cache lab controls without accessible names (issue 11, reported)", Continue);
        QVERIFY2(missingInLab.isEmpty(), qPrintable(missingInLab.join(", ")));
    }

    void firstStartOnEmptyDataFolder() {
        const QString db = home_.path() + "/empty-start/nested/kvchat.db";
        QVERIFY(!QFile::exists(db));
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(QFile::exists(db));
        Store store(db.toStdString());
        QCOMPARE(store.list_conversations().size(), size_t(1));
        QCOMPARE(store.list_conversations().front().id, w->currentConversation());
        QTRY_VERIFY(input(*w)->hasFocus());
    }

    void megabytePasteAndInvalidUtf8() {
        const QString db = freshDb();
        writeSettings(db, 8);
        auto w = openWindow(db);
        QVERIFY(w);
        // Invalid UTF-8 on the clipboard becomes U+FFFD; NUL characters are dropped.
        input(*w)->clear();
        QClipboard* cb = QApplication::clipboard();
        auto* m = new QMimeData;
        m->setData("text/plain", QByteArray("caf\xc3(\x00x", 7));
        cb->setMimeData(m);
        input(*w)->setFocus();
        QTest::keyClick(input(*w), Qt::Key_V, Qt::ControlModifier);
        const QString pasted = input(*w)->toPlainText();
        QVERIFY2(pasted.contains(QChar(0xFFFD)), qPrintable(pasted));
        QVERIFY(!pasted.contains(QChar(0)));

        // A megabyte: accepted, and the context policy (refuse) answers it without losing it.
        input(*w)->clear();
        const QString big = QString("lorem ipsum dolor sit amet ").repeated(1024 * 1024 / 27);
        cb->setText(big);
        QTest::keyClick(input(*w), Qt::Key_V, Qt::ControlModifier);
        QCOMPARE(input(*w)->toPlainText().size(), big.size());
        QSignalSpy failed(w->worker(), &EngineWorker::turnFailed);
        QTest::keyClick(input(*w), Qt::Key_Return);
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() > 0, kTurnTimeoutMs);  // (the worker emits from its thread: the signal may come before wait() starts)
        QCOMPARE(failed.at(0).at(2).toBool(), false);  // refused before anything was stored
        QTRY_COMPARE(input(*w)->toPlainText().size(), big.size());  // the draft is back
        auto* notice = w->findChild<QLabel*>("noticeBanner");
        QTRY_VERIFY(notice->isVisible());
        QVERIFY(storedMessages(db, w->currentConversation()).empty());
    }

    void databaseThatIsNotOne() {
        const QString db = home_.path() + "/notadb/kvchat.db";
        QDir().mkpath(QFileInfo(db).absolutePath());
        {
            QFile f(db);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(QByteArray("this is a shopping list, not a database\n").repeated(100));
        }
        const QByteArray original = [&] {
            QFile f(db);
            f.open(QIODevice::ReadOnly);
            return f.readAll();
        }();
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow w(o);
        w.show();
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("databaseErrorDialog")) != nullptr, 20000);
        QVERIFY(box->text().contains(db));
        QFile f(db);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), original);  // nothing lost
        box->hide();
    }

    void secondWindowOnTheSameDatabase() {
        const QString db = freshDb();
        writeSettings(db, 8);
        auto first = openWindow(db);
        QVERIFY(first);
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        o.restoreState = false;
        MainWindow second(o);
        second.show();
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = second.findChild<QMessageBox*>("databaseErrorDialog")) != nullptr, 20000);
        QVERIFY2(box->text().contains("Another kvchat"), qPrintable(box->text()));
        box->hide();
        // The first window goes on working.
        QVERIFY(typeAndSend(*first, "still here"));
    }
};

QTEST_MAIN(TestUiChat)
#include "test_ui_chat.moc"
