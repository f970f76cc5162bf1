// The chat panel and the window's status, driven as a user drives them (offscreen, tiny model):
// a chat's own answer limit and system prompt set in the panel, used by its turns and kept in the
// database; how each answer ended shown under it; and every figure of the window belonging to the
// conversation on screen (the list's count while an answer streams, the status bar once decoding
// starts, the last answer's figures after switching chats, the inspector's header, the context
// meter under a sliding window, one unit family for sizes).
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"
#include "ui/chat_panel.h"
#include "ui/context_meter.h"
#include "ui/conversation_list_model.h"
#include "ui/conversation_search_model.h"
#include "ui/engine_worker.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/lab/cache_lab.h"
#include "ui/lab/strategy_panel.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"

#include <QComboBox>
#include <QDockWidget>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

using namespace kvchat;

namespace {
constexpr int kTurnTimeoutMs = kvchat::test::kAnswerTimeoutMs;
using kvchat::test::typeAndSend;
}

class TestUiChatPanel : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb(int maxNew) { return test::freshChatDb(home_.path(), dbCount_, maxNew); }

    std::unique_ptr<MainWindow> openWindow(const QString& db) {
        auto w = test::openChatWindow(db, model_, QSize(1400, 900));
        // The panel describes the open conversation.
        if (!w || !QTest::qWaitFor([&] { return w->chatPanel()->values().conversationId == w->currentConversation(); }, 10000))
            return nullptr;
        return w;
    }

    static MessageBox* input(MainWindow& w) { return w.findChild<MessageBox*>("messageInput"); }

    static QString lastEnding(MainWindow& w) {
        const auto views = w.findChild<TranscriptView*>("transcriptView")->messageViews();
        if (views.isEmpty()) return {};
        auto* l = views.back()->findChild<QLabel*>("answerEnding");
        return l && !l->isHidden() ? l->text() : QString();
    }

    static void retypeNumber(QAbstractSpinBox* box, const QString& text) {
        box->setFocus();
        QTest::keyClick(box, Qt::Key_A, Qt::ControlModifier);
        QTest::keyClicks(box, text);
        QTest::keyClick(box, Qt::Key_Tab);
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    // The answer limit typed into the panel is the chat's own: kept in the database, used by its
    // next turn (whose answer says it hit the limit), not by a new chat; "Use defaults" drops it.
    void panelSetsTheChatsOwnLimit() {
        const QString db = freshDb(40);
        auto w = openWindow(db);
        QVERIFY(w);
        ChatPanel* panel = w->chatPanel();
        QVERIFY(w->findChild<QDockWidget*>("chatPanelDock")->isAncestorOf(w->cacheLab()->strategyPanel()));
        QCOMPARE(panel->maxNewTokensBox()->value(), 40);  // the global setting
        QVERIFY(!panel->applyButton()->isEnabled());
        retypeNumber(panel->maxNewTokensBox(), "2");
        QCOMPARE(panel->maxNewTokensBox()->value(), 2);
        QVERIFY(panel->applyButton()->isEnabled());
        QTest::mouseClick(panel->applyButton(), Qt::LeftButton);
        const qint64 id = w->currentConversation();
        QTRY_VERIFY(panel->values().own.max_new_tokens == std::optional<int64_t>(2));
        QCOMPARE(Store(db.toStdString()).conversation_settings(id).max_new_tokens, std::optional<int64_t>(2));
        QVERIFY(!Store(db.toStdString()).conversation_settings(id).temperature.has_value());  // unchanged: global

        QVERIFY(typeAndSend(*w, "the cat"));
        const auto msgs = Store(db.toStdString()).list_messages(id);
        QVERIFY(msgs.back().stats.generated_tokens <= 2);
        QVERIFY(msgs.back().stats.stop_reason.has_value());
        QCOMPARE(lastEnding(*w), TranscriptModel::endingText(msgs.back().stats.stop_reason));
        if (msgs.back().stats.generated_tokens == 2) QCOMPARE(lastEnding(*w), QString("Hit the answer's token limit"));

        // A new chat has none of its own.
        QTest::keyClick(w.get(), Qt::Key_N, Qt::ControlModifier);
        QTRY_VERIFY(w->currentConversation() != id && w->currentConversation() != 0);
        QTRY_COMPARE(panel->values().conversationId, w->currentConversation());
        QCOMPARE(panel->maxNewTokensBox()->value(), 40);
        QVERIFY(panel->values().own.empty());

        // Back on the first: its own value, then dropped.
        auto* list = w->findChild<QListView*>("conversationList");
        const int row = w->conversationSearch()->rowOf(id);
        QVERIFY(row >= 0);
        list->setCurrentIndex(w->conversationSearch()->index(row, 0));
        QTRY_COMPARE(panel->values().conversationId, id);
        QCOMPARE(panel->maxNewTokensBox()->value(), 2);
        QVERIFY(panel->defaultsButton()->isEnabled());
        QTest::mouseClick(panel->defaultsButton(), Qt::LeftButton);
        QTRY_VERIFY(panel->values().own.empty());
        QVERIFY(Store(db.toStdString()).conversation_settings(id).empty());
        QCOMPARE(panel->maxNewTokensBox()->value(), 40);
    }

    // The system prompt typed into the panel becomes the chat's first message, shown in the
    // transcript and stored; the panel says what it costs the cache.
    void systemPromptFromThePanel() {
        const QString db = freshDb(3);
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "the cat"));
        ChatPanel* panel = w->chatPanel();
        QVERIFY(panel->findChild<QLabel*>("chatSystemPromptNote")->text().contains("cache reuses what still matches"));
        QVERIFY(!panel->systemPromptButton()->isEnabled());
        panel->systemPromptEdit()->setFocus();
        QTest::keyClicks(panel->systemPromptEdit(), "You answer about cats.");
        QVERIFY(panel->systemPromptButton()->isEnabled());
        QTest::mouseClick(panel->systemPromptButton(), Qt::LeftButton);
        const qint64 id = w->currentConversation();
        QTRY_COMPARE(w->transcriptModel()->rowCount(), 3);
        QCOMPARE(w->transcriptModel()->message(0).role, MessageRole::System);
        QCOMPARE(w->transcriptModel()->message(0).content, QString("You answer about cats."));
        QCOMPARE(Store(db.toStdString()).list_messages(id).front().content, std::string("You answer about cats."));
        QTRY_COMPARE(panel->values().systemPrompt, QString("You answer about cats."));
        QVERIFY(!panel->systemPromptButton()->isEnabled());
        // The next turn renders the conversation with it.
        QVERIFY(typeAndSend(*w, "and the dog"));
        QCOMPARE(w->transcriptModel()->rowCount(), 5);
    }

    // Stopped while it streams: the answer kept says it was stopped by the user.
    void stoppedAnswerSaysSo() {
        const QString db = freshDb(2000);
        auto w = openWindow(db);
        QVERIFY(w);
        QSignalSpy started(w.get(), &MainWindow::answerStarted);
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        input(*w)->setFocus();
        QTest::keyClicks(input(*w), "tell me a long story");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QVERIFY(started.wait(kTurnTimeoutMs) || started.count() > 0);
        QTest::keyClick(w.get(), Qt::Key_Escape);
        QVERIFY(done.wait(kTurnTimeoutMs) || done.count() > 0);
        QCOMPARE(lastEnding(*w), QString("Stopped by you"));
        const auto msgs = Store(db.toStdString()).list_messages(w->currentConversation());
        QCOMPARE(msgs.back().stats.stop_reason, std::optional<StopReason>(StopReason::Stopped));
    }

    // Every figure belongs to the conversation on screen and is current.
    void statusBelongsToTheOpenChat() {
        const QString db = freshDb(24);
        auto w = openWindow(db);
        QVERIFY(w);
        const qint64 first = w->currentConversation();
        auto* inspectorHeader = w->cacheLab()->inspector()->findChild<QLabel*>("inspectorHeader");
        QVERIFY(inspectorHeader);
        QVERIFY(inspectorHeader->text() != "No cache yet: open a conversation.");  // one is open

        // While the answer streams: the list counts its rows, the status bar has left the prefill.
        qint64 listedWhileStreaming = -1, rowsWhileStreaming = -2;
        QString statusWhileStreaming;
        connect(w.get(), &MainWindow::answerStarted, this, [&](qint64 id) {
            listedWhileStreaming = w->conversationModel()->find(id)->messageCount;
            rowsWhileStreaming = w->transcriptModel()->rowCount();
            statusWhileStreaming = w->statusBar()->currentMessage();
        });
        QVERIFY(typeAndSend(*w, "the cat sat on the mat"));
        QCOMPARE(listedWhileStreaming, rowsWhileStreaming);
        QVERIFY2(!statusWhileStreaming.startsWith("Prefilling"), qPrintable(statusWhileStreaming));
        auto* lastAnswer = w->findChild<QLabel*>("lastAnswerLabel");
        auto* kv = w->findChild<QLabel*>("kvBytesLabel");
        QVERIFY(!lastAnswer->text().isEmpty());
        // Binary units, as the inspector writes them.
        QVERIFY2(kv->text().contains("iB") || kv->text().endsWith(" B"), qPrintable(kv->text()));
        QVERIFY(!kv->text().contains(" MB") && !kv->text().contains(" kB") && !kv->text().contains(" KB"));

        // Another (new) chat: no figures of the first, from the moment it is on screen.
        QStringList shownOnSwitch;
        qint64 meterOnSwitch = -1;
        connect(w.get(), &MainWindow::currentConversationChanged, this, [&] {
            shownOnSwitch << lastAnswer->text() << kv->text();
            meterOnSwitch = w->findChild<ContextMeter*>("contextBar")->value();
        });
        QTest::keyClick(w.get(), Qt::Key_N, Qt::ControlModifier);
        QTRY_VERIFY(w->currentConversation() != first && w->currentConversation() != 0);
        QTRY_VERIFY(w->transcriptModel()->loaded());
        QVERIFY2(lastAnswer->text().isEmpty(), qPrintable(lastAnswer->text()));
        QCOMPARE(shownOnSwitch, QStringList({QString(), QString()}));
        QCOMPARE(meterOnSwitch, qint64(0));
        QVERIFY(inspectorHeader->text() != "No cache yet: open a conversation.");
        auto* meter = w->findChild<ContextMeter*>("contextBar");
        QCOMPARE(meter->value(), 0);

        // A sliding window of 16 tokens: the meter reads the conversation's tokens against the window.
        StrategyPanel* strategy = w->cacheLab()->strategyPanel();
        test::retype(strategy->specEdit(), "sliding_window:window=16");
        QTRY_VERIFY(strategy->applyButton()->isEnabled());
        QSignalSpy switched(w->worker(), &EngineWorker::strategySwitched);
        QTest::mouseClick(strategy->applyButton(), Qt::LeftButton);
        QVERIFY(switched.wait(30000) || switched.count() > 0);
        // Told once, in the panel that asked: not also in the status bar.
        QVERIFY(!w->statusBar()->currentMessage().contains("strategy"));
        QSignalSpy telemetry(w->worker(), &EngineWorker::cacheTelemetry);
        QVERIFY(typeAndSend(*w, "the cat sat on the mat and the dog sat on the log while the bird sang"));
        QTRY_VERIFY(meter->window() > 0);
        // The window is what the layers hold (at most 16; the tiny model's own sliding layers keep 8).
        QTRY_VERIFY(telemetry.count() > 0);
        const CacheTelemetry t = telemetry.last().at(1).value<CacheTelemetry>();
        qint64 held = 0;
        for (const LayerTelemetry& l : t.layers) held = std::max<qint64>(held, l.tokens_held);
        QVERIFY(held > 0 && held <= 16 && held < t.tokens);
        QCOMPARE(meter->window(), held);
        QVERIFY2(meter->format().contains(QStringLiteral("window %1").arg(held)), qPrintable(meter->format()));
        QVERIFY2(meter->format().contains(QLocale().toString(t.tokens) + " tokens"), qPrintable(meter->format()));
        QVERIFY(!meter->format().contains("/"));
    }
};

QTEST_MAIN(TestUiChatPanel)
#include "test_ui_chat_panel.moc"
