// The window's item models: the transcript model's rows through a turn (sent, streamed, answered,
// refused, failed, left and come back to), the conversation list changed by rows and never reset,
// the search proxy's order and matches; then the same in the window on a tiny model (the rows
// after send, answer, refusal, regenerate and edit against what the database holds), and opening
// another conversation and searching while an answer streams, which must not wait for it.
#define QT_NO_KEYWORDS  // the engine's headers use the words "emit" and "slots"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"
#include "ui/conversation_list_model.h"
#include "ui/conversation_search_model.h"
#include "ui/engine_worker.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"

#include <QDirIterator>
#include <QFile>
#include <QInputDialog>
#include <QRegularExpression>
#include <QLineEdit>
#include <QListView>
#include <QPushButton>
#include <QScopeGuard>
#include <QSemaphore>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

#include <atomic>
#include <functional>
#include <memory>

using namespace kvchat;

namespace {

constexpr int kTurnTimeoutMs = kvchat::test::kAnswerTimeoutMs;

MessageItem message(qint64 id, int ordinal, MessageRole role, const QString& content) {
    MessageItem m;
    m.id = id;
    m.ordinal = ordinal;
    m.role = role;
    m.content = content;
    return m;
}

ConversationItem conversation(qint64 id, const QString& title, qint64 updatedMs) {
    ConversationItem c;
    c.id = id;
    c.title = title;
    c.updatedMs = updatedMs;
    return c;
}

// A stored question and its answer (ids 1 and 2) in conversation 1.
QList<MessageItem> oneExchange() {
    return {message(1, 0, MessageRole::User, "first question"), message(2, 1, MessageRole::Assistant, "first answer")};
}

// The rows as (id, state, text) lines, so a failed comparison shows them all.
QStringList rowsOf(const TranscriptModel& m) {
    QStringList out;
    for (int r = 0; r < m.rowCount(); ++r)
        out << QString("%1 %2 %3").arg(m.message(r).id).arg(static_cast<int>(m.state(r))).arg(m.message(r).content);
    return out;
}

}  // namespace

class TestUiModels : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb(int maxNew) { return test::freshChatDb(home_.path(), dbCount_, maxNew); }

    // Also waits for the transcript model to hold the open conversation's messages.
    std::unique_ptr<MainWindow> openWindow(const QString& db) {
        auto w = test::openChatWindow(db, model_);
        if (!w || !QTest::qWaitFor([&] { return w->transcriptModel()->loaded(); }, 60000)) return nullptr;
        return w;
    }

    static MessageBox* input(MainWindow& w) { return w.findChild<MessageBox*>("messageInput"); }

    // The rows are the stored messages, every one Stored (the last one Unanswered when a question).
    static void expectRowsStored(const TranscriptModel& m, const std::vector<MessageRecord>& msgs) {
        QCOMPARE(m.rowCount(), static_cast<int>(msgs.size()));
        for (int r = 0; r < m.rowCount(); ++r) {
            QCOMPARE(m.message(r).id, msgs[r].id);
            QCOMPARE(m.message(r).content, QString::fromStdString(msgs[r].content));
            QCOMPARE(m.message(r).ordinal, static_cast<int>(msgs[r].ordinal));
            QCOMPARE(m.state(r), MessageState::Stored);
        }
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    // ---- the transcript model alone ----

    // A send shows the question and an empty streaming answer at once, as two inserted rows; the
    // text grows the answer's row only; the worker's outcome makes both rows the stored messages.
    void sendStreamAnswer() {
        TranscriptModel m;
        QVERIFY(!m.beginSend("too early"));  // nothing open
        m.open(1);
        QVERIFY(!m.beginSend("too early"));  // its messages have not arrived
        m.setMessages(1, oneExchange());
        QCOMPARE(m.rowCount(), 2);
        QSignalSpy resets(&m, &QAbstractItemModel::modelReset);
        QSignalSpy inserted(&m, &QAbstractItemModel::rowsInserted);
        QSignalSpy changed(&m, &QAbstractItemModel::dataChanged);
        QVERIFY(m.beginSend("second question"));
        QVERIFY(!m.beginSend("a second turn at once"));
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(inserted.at(0).at(1).toInt(), 2);
        QCOMPARE(inserted.at(0).at(2).toInt(), 3);
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.state(2), MessageState::Sending);
        QCOMPARE(m.message(2).content, QString("second question"));
        QCOMPARE(m.message(2).id, qint64(0));
        QCOMPARE(m.state(3), MessageState::Streaming);
        QCOMPARE(m.message(3).role, MessageRole::Assistant);
        QVERIFY(m.message(3).content.isEmpty());
        QCOMPARE(m.index(2).data(TranscriptModel::StateRole).toInt(), static_cast<int>(MessageState::Sending));

        m.appendAnswerText(1, "<think>hm</think>Hel");
        m.appendAnswerText(7, "another conversation's text");
        m.appendAnswerText(1, "lo");
        QCOMPARE(m.message(3).content, QString("<think>hm</think>Hello"));
        QCOMPARE(changed.count(), 2);
        for (const auto& args : changed) QCOMPARE(args.at(0).toModelIndex().row(), 3);
        QCOMPARE(m.index(3).data(TranscriptModel::AnswerTextRole).toString(), QString("Hello"));
        QCOMPARE(m.index(3).data(TranscriptModel::ThinkingRole).toString(), QString("hm"));

        TurnOutcome out;
        out.conversationId = 1;
        out.question = message(3, 2, MessageRole::User, "second question");
        out.answer = message(4, 3, MessageRole::Assistant, "<think>hm</think>Hello");
        out.answer.figures.prompt_tokens = 20;
        out.answer.figures.generated_tokens = 5;
        m.finishTurn(out);
        QVERIFY(!m.answering());
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.message(2).id, qint64(3));
        QCOMPARE(m.message(3).id, qint64(4));
        QCOMPARE(m.state(2), MessageState::Stored);
        QCOMPARE(m.state(3), MessageState::Stored);
        QVERIFY(m.index(3).data(TranscriptModel::FiguresTextRole).toString().contains("prompt 20 tokens"));
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(resets.count(), 0);
    }

    // A turn refused before anything was stored leaves the rows exactly as they were: a send's
    // rows go (and its text comes back), a regeneration's old answer and an edit's old question
    // and the answers after it come back.
    void refusedTurnsLeaveTheRowsAsTheyWere() {
        TranscriptModel m;
        m.open(1);
        QList<MessageItem> history = oneExchange();
        history << message(3, 2, MessageRole::User, "second question") << message(4, 3, MessageRole::Assistant, "second answer");
        m.setMessages(1, history);
        const QStringList before = rowsOf(m);
        QSignalSpy resets(&m, &QAbstractItemModel::modelReset);

        QVERIFY(m.beginSend("refused question"));
        QCOMPARE(m.rowCount(), 6);
        m.appendAnswerText(1, "partial");
        QCOMPARE(m.failTurn(1, false), QString("refused question"));
        QCOMPARE(rowsOf(m), before);

        QVERIFY(m.beginRegenerate());
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.state(3), MessageState::Streaming);
        QVERIFY(m.message(3).content.isEmpty());
        QCOMPARE(m.failTurn(1, false), QString());
        QCOMPARE(rowsOf(m), before);

        QVERIFY(!m.beginEdit(1, "an answer is not edited"));
        QVERIFY(m.beginEdit(0, "an edited first question"));
        QCOMPARE(m.rowCount(), 2);
        QCOMPARE(m.message(0).content, QString("an edited first question"));
        QCOMPARE(m.message(0).id, qint64(1));
        QCOMPARE(m.state(0), MessageState::Sending);
        QCOMPARE(m.state(1), MessageState::Streaming);
        QCOMPARE(m.failTurn(1, false), QString());
        QCOMPARE(rowsOf(m), before);
        QCOMPARE(resets.count(), 0);
    }

    // A turn that failed after something was stored: what streamed stays, marked Failed, until the
    // stored messages are read again; with nothing streamed, the question is left unanswered.
    void failedAfterStoring() {
        TranscriptModel m;
        m.open(1);
        m.setMessages(1, oneExchange());
        QVERIFY(m.beginSend("second question"));
        m.appendAnswerText(1, "half an ans");
        QCOMPARE(m.failTurn(1, true), QString());
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.state(3), MessageState::Failed);
        QCOMPARE(m.message(3).content, QString("half an ans"));
        // The read that follows shows what was stored: the question, unanswered.
        QList<MessageItem> stored = oneExchange();
        stored << message(3, 2, MessageRole::User, "second question");
        m.setMessages(1, stored);
        QCOMPARE(m.rowCount(), 3);
        QCOMPARE(m.message(2).id, qint64(3));
        QCOMPARE(m.state(2), MessageState::Unanswered);

        // Regenerate answers an unanswered question: it is no longer marked while the turn runs,
        // and is again when the turn is refused.
        QVERIFY(m.beginRegenerate());
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.state(2), MessageState::Stored);
        QCOMPARE(m.failTurn(1, false), QString());
        QCOMPARE(m.rowCount(), 3);
        QCOMPARE(m.state(2), MessageState::Unanswered);

        // Stopped before its first word, nothing was stored as an answer.
        QVERIFY(m.beginRegenerate());
        TurnOutcome out;
        out.conversationId = 1;
        m.finishTurn(out);
        QCOMPARE(m.rowCount(), 3);
        QCOMPARE(m.state(2), MessageState::Unanswered);

        TranscriptModel lone;
        lone.open(2);
        lone.setMessages(2, {message(9, 0, MessageRole::System, "Be brief.")});
        QVERIFY(!lone.beginRegenerate());  // no question to answer again
        QCOMPARE(lone.rowCount(), 1);
    }

    // The turn's rows outlive a visit to another conversation: its text keeps growing unseen, and
    // coming back shows the stored messages before the turn and its rows after them, even when
    // the read found the question already stored.
    void turnOutlivesAVisit() {
        TranscriptModel m;
        m.open(1);
        m.setMessages(1, oneExchange());
        QVERIFY(m.beginSend("second question"));
        m.appendAnswerText(1, "abc");
        m.open(2);
        m.setMessages(1, oneExchange());  // a late read of the other conversation: ignored
        QCOMPARE(m.rowCount(), 0);
        m.setMessages(2, {message(10, 0, MessageRole::User, "elsewhere")});
        QCOMPARE(m.rowCount(), 1);
        QCOMPARE(m.state(0), MessageState::Unanswered);
        QVERIFY(!m.beginSend("a second turn"));  // one turn at a time
        QSignalSpy changed(&m, &QAbstractItemModel::dataChanged);
        m.appendAnswerText(1, "def");
        QCOMPARE(changed.count(), 0);
        QCOMPARE(m.answeringConversation(), qint64(1));

        m.open(1);
        QList<MessageItem> stored = oneExchange();
        stored << message(3, 2, MessageRole::User, "second question");  // committed before generation
        m.setMessages(1, stored);
        QCOMPARE(m.rowCount(), 4);
        QCOMPARE(m.state(2), MessageState::Sending);
        QCOMPARE(m.state(3), MessageState::Streaming);
        QCOMPARE(m.message(3).content, QString("abcdef"));
        m.appendAnswerText(1, "g");
        QCOMPARE(m.message(3).content, QString("abcdefg"));
        TurnOutcome out;
        out.conversationId = 1;
        out.question = stored.last();
        out.answer = message(4, 3, MessageRole::Assistant, "abcdefg");
        m.finishTurn(out);
        QCOMPARE(rowsOf(m), QStringList({"1 0 first question", "2 0 first answer", "3 0 second question", "4 0 abcdefg"}));

        // Finished while another conversation is shown: the shown rows do not change.
        QVERIFY(m.beginSend("third question"));
        m.open(2);
        m.setMessages(2, {message(10, 0, MessageRole::User, "elsewhere")});
        QSignalSpy any(&m, &QAbstractItemModel::dataChanged);
        out.question = message(5, 4, MessageRole::User, "third question");
        out.answer = message(6, 5, MessageRole::Assistant, "x");
        m.finishTurn(out);
        QVERIFY(!m.answering());
        QCOMPARE(any.count(), 0);
        QCOMPARE(m.rowCount(), 1);
    }

    // The view follows the rows: views are added and removed with them and the streaming answer's
    // view is the one that becomes the stored answer.
    void viewFollowsTheRows() {
        TranscriptModel m;
        TranscriptView view;
        view.setModel(&m);
        view.resize(600, 400);
        view.show();
        m.open(1);
        m.setMessages(1, oneExchange());
        QTRY_COMPARE(view.messageViews().size(), 2);
        MessageView* question = view.messageViews()[0];
        QVERIFY(m.beginSend("second question"));
        QCOMPARE(view.messageViews().size(), 4);
        QCOMPARE(view.messageViews()[0], question);
        QVERIFY(view.streamingView() == view.messageViews()[3]);
        QVERIFY(!view.messageViews()[2]->findChild<QToolButton*>("editMessageButton")->isEnabled());
        QCOMPARE(m.failTurn(1, false), QString("second question"));
        QCOMPARE(view.messageViews().size(), 2);
        QCOMPARE(view.messageViews()[0], question);
        QVERIFY(m.beginRegenerate());
        QCOMPARE(view.messageViews().size(), 2);
        QVERIFY(view.streamingView() == view.messageViews()[1]);
        m.appendAnswerText(1, "new answer");
        TurnOutcome out;
        out.conversationId = 1;
        out.question = oneExchange().first();
        out.answer = message(5, 1, MessageRole::Assistant, "new answer");
        m.finishTurn(out);
        QVERIFY(!view.streamingView());
        QCOMPARE(view.messageViews()[1]->message().id, qint64(5));
        QCOMPARE(view.messageViews()[1]->content(), QString("new answer"));
        QVERIFY(view.messageViews()[0]->findChild<QToolButton*>("editMessageButton")->isEnabled());
    }

    // ---- the conversation list and its search ----

    // A new list from the worker changes the rows that changed: a new conversation is an inserted
    // row, a renamed one a changed row, a deleted one a removed row; never a reset.
    void conversationListChangesByRows() {
        ConversationListModel list;
        QSignalSpy resets(&list, &QAbstractItemModel::modelReset);
        QSignalSpy inserted(&list, &QAbstractItemModel::rowsInserted);
        QSignalSpy removed(&list, &QAbstractItemModel::rowsRemoved);
        QSignalSpy changed(&list, &QAbstractItemModel::dataChanged);
        list.setConversations({conversation(1, "apples", 100), conversation(2, "bananas", 200)});
        QCOMPARE(list.rowCount(), 2);
        QCOMPARE(inserted.count(), 1);

        list.setConversations({conversation(1, "apples and pears", 100), conversation(2, "bananas", 200)});
        QCOMPARE(changed.count(), 1);
        QCOMPARE(changed.at(0).at(0).toModelIndex().row(), list.rowOf(1));
        QCOMPARE(list.index(list.rowOf(1)).data().toString(), QString("apples and pears"));

        list.setConversations({conversation(3, "cherries", 300), conversation(1, "apples and pears", 100),
                               conversation(2, "bananas", 200)});
        QCOMPARE(inserted.count(), 2);
        QCOMPARE(changed.count(), 1);  // the others did not change
        QCOMPARE(list.rowCount(), 3);

        list.setConversations({conversation(3, "cherries", 300), conversation(2, "bananas", 200)});
        QCOMPARE(removed.count(), 1);
        QCOMPARE(list.rowCount(), 2);
        QCOMPARE(list.rowOf(1), -1);
        QCOMPARE(resets.count(), 0);
    }

    // The proxy shows the most recent first, moves a conversation up when it becomes the most
    // recent, and narrows to a search's matches until the search is cleared.
    void searchProxyOrdersAndNarrows() {
        ConversationListModel list;
        ConversationSearchModel shown;
        shown.setSourceModel(&list);
        QSignalSpy resets(&shown, &QAbstractItemModel::modelReset);
        list.setConversations({conversation(1, "apples", 100), conversation(2, "bananas", 300), conversation(3, "cherries", 200)});
        auto ids = [&] {
            QList<qint64> out;
            for (int r = 0; r < shown.rowCount(); ++r) out << shown.idAt(r);
            return out;
        };
        QCOMPARE(ids(), QList<qint64>({2, 3, 1}));
        list.setConversations({conversation(1, "apples", 400), conversation(2, "bananas", 300), conversation(3, "cherries", 200)});
        QCOMPARE(ids(), QList<qint64>({1, 2, 3}));

        shown.setMatches(QSet<qint64>{3, 1});
        QVERIFY(shown.searching());
        QCOMPARE(ids(), QList<qint64>({1, 3}));
        QCOMPARE(shown.rowOf(2), -1);
        QCOMPARE(shown.rowOf(3), 1);
        // A conversation that is not a match does not show up while the search is on.
        list.setConversations({conversation(1, "apples", 400), conversation(2, "bananas", 300), conversation(3, "cherries", 200),
                               conversation(4, "dates", 500)});
        QCOMPARE(ids(), QList<qint64>({1, 3}));
        shown.setMatches(std::nullopt);
        QCOMPARE(ids(), QList<qint64>({4, 1, 2, 3}));
        QCOMPARE(shown.idAt(7), qint64(0));
        QCOMPARE(resets.count(), 0);
    }

    // The window's parts are handed what they need: no file of ui/ finds a widget by object name,
    // and no two parts include each other (directly or round a longer loop). A part is a header
    // and its source file (ui/lab/cache_lab.h and .cpp).
    void noIncludeCyclesNorNameLookUps() {
        const QString root = QStringLiteral(KVCHAT_SOURCE_DIR);
        const QRegularExpression include(QStringLiteral("^\\s*#\\s*include\\s+\"(ui/[^\"]+)\\.h\""),
                                         QRegularExpression::MultilineOption);
        QMap<QString, QSet<QString>> uses;
        QDirIterator it(root + "/ui", {"*.h", "*.cpp"}, QDir::Files, QDirIterator::Subdirectories);
        int files = 0;
        while (it.hasNext()) {
            const QString path = it.next();
            QFile f(path);
            QVERIFY(f.open(QIODevice::ReadOnly));
            const QString text = QString::fromUtf8(f.readAll());
            const QString part = QDir(root).relativeFilePath(path).section('.', 0, 0);
            QVERIFY2(!text.contains("findChild"), qPrintable(path + " looks a widget up by name"));
            for (auto m = include.globalMatch(text); m.hasNext();) {
                const QString used = m.next().captured(1);
                if (used != part) uses[part].insert(used);
            }
            ++files;
        }
        QVERIFY(files > 20);
        QVERIFY(uses.value("ui/main_window").contains("ui/lab/cache_lab"));  // the scan sees includes
        // Depth-first search; a part met again while still on the path closes a loop.
        QStringList path;
        QSet<QString> done;
        std::function<QString(const QString&)> loopFrom = [&](const QString& part) -> QString {
            if (path.contains(part)) return (path.mid(path.indexOf(part)) << part).join(" -> ");
            if (done.contains(part)) return {};
            path << part;
            for (const QString& next : uses.value(part))
                if (QString loop = loopFrom(next); !loop.isEmpty()) return loop;
            path.removeLast();
            done.insert(part);
            return {};
        };
        for (const QString& part : uses.keys()) {
            const QString loop = loopFrom(part);
            QVERIFY2(loop.isEmpty(), qPrintable("include loop: " + loop));
        }
    }

    // ---- in the window, on a tiny model ----

    // The transcript model's rows through the turns a user takes, checked at once (the pending
    // rows) and after the worker's word (the stored messages).
    void rowsFollowTheTurnsInTheWindow() {
        const QString db = freshDb(12);
        auto w = openWindow(db);
        QVERIFY(w);
        TranscriptModel* m = w->transcriptModel();
        const qint64 id = w->currentConversation();
        const int base = m->rowCount();
        QSignalSpy resets(m, &QAbstractItemModel::modelReset);
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        QSignalSpy failed(w->worker(), &EngineWorker::turnFailed);

        // Send: the question and the streaming answer at once; then the stored pair.
        input(*w)->setFocus();
        QTest::keyClicks(input(*w), "what is a cache");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QCOMPARE(m->rowCount(), base + 2);
        QCOMPARE(m->state(base), MessageState::Sending);
        QCOMPARE(m->message(base).content, QString("what is a cache"));
        QCOMPARE(m->state(base + 1), MessageState::Streaming);
        QVERIFY(done.wait(kTurnTimeoutMs));
        auto msgs = test::storedMessages(db, id);
        QCOMPARE(msgs.size(), size_t(base + 2));
        expectRowsStored(*m, msgs);

        // Refused (too long for the context): the rows are as they were, the text back in the box.
        const QStringList before = rowsOf(*m);
        const QString tooLong = QString("lorem ipsum dolor sit amet ").repeated(800);
        input(*w)->setPlainText(tooLong);
        QTest::keyClick(input(*w), Qt::Key_Return);
        QCOMPARE(m->rowCount(), base + 4);
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() > 0, kTurnTimeoutMs);  // (the worker emits from its thread: the signal may come before wait() starts)
        QCOMPARE(failed.at(0).at(2).toBool(), false);
        // The window takes the rows back when the failure reaches it (queued, after the spy saw it).
        QTRY_COMPARE(rowsOf(*m), before);
        QTRY_COMPARE(input(*w)->toPlainText(), tooLong);
        QCOMPARE(test::storedMessages(db, id).size(), msgs.size());
        input(*w)->clear();

        // Regenerate: the answer's row streams again, then holds the new stored answer.
        QTest::keyClick(w.get(), Qt::Key_R, Qt::ControlModifier);
        QCOMPARE(m->rowCount(), base + 2);
        QCOMPARE(m->state(base + 1), MessageState::Streaming);
        QCOMPARE(m->message(base + 1).id, qint64(0));
        QVERIFY(done.wait(kTurnTimeoutMs));
        const auto regenerated = test::storedMessages(db, id);
        QVERIFY(regenerated.back().id != msgs.back().id);
        expectRowsStored(*m, regenerated);

        // Edit refused (too long): the question and its answer come back as they were.
        auto editButton = [&] {
            return w->findChild<TranscriptView*>("transcriptView")->messageViews()[base]->findChild<QToolButton*>(
                "editMessageButton");
        };
        const QStringList beforeEdit = rowsOf(*m);
        auto editedView = [&] { return w->findChild<TranscriptView*>("transcriptView")->messageViews()[base]; };
        QVERIFY(editButton());
        // (Typed key by key, a long text takes long: it is pasted.)
        QTest::mouseClick(editButton(), Qt::LeftButton);
        editedView()->findChild<QPlainTextEdit*>("messageEditorText")->setPlainText(tooLong);
        QTest::mouseClick(editedView()->findChild<QPushButton*>("saveEditButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(failed.count() > 1, kTurnTimeoutMs);
        QTRY_COMPARE(rowsOf(*m), beforeEdit);
        QCOMPARE(test::storedMessages(db, id).size(), regenerated.size());

        // Edit: the question changes in place, the answer after it streams again.
        QSignalSpy rowsChanged(m, &QAbstractItemModel::dataChanged);
        test::editInPlace(editedView(), "what is a sliding window");
        QTRY_COMPARE(m->state(base), MessageState::Sending);
        QCOMPARE(m->message(base).content, QString("what is a sliding window"));
        QCOMPARE(m->message(base).id, regenerated[base].id);
        QCOMPARE(m->state(base + 1), MessageState::Streaming);
        QVERIFY(done.wait(kTurnTimeoutMs));
        const auto edited = test::storedMessages(db, id);
        QCOMPARE(QString::fromStdString(edited[base].content), QString("what is a sliding window"));
        expectRowsStored(*m, edited);
        QCOMPARE(resets.count(), 0);  // the open conversation's rows were never reset by a turn
    }

    // New chats and titles change the conversation list by rows (the first message names a chat,
    // Ctrl+N adds one, F2 renames one); the search narrows it through the proxy.
    void listRowsInTheWindow() {
        const QString db = freshDb(4);
        auto w = openWindow(db);
        QVERIFY(w);
        ConversationListModel* list = w->conversationModel();
        QSignalSpy resets(list, &QAbstractItemModel::modelReset);
        QSignalSpy inserted(list, &QAbstractItemModel::rowsInserted);
        QSignalSpy changed(list, &QAbstractItemModel::dataChanged);
        QSignalSpy shownResets(w->conversationSearch(), &QAbstractItemModel::modelReset);
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        const qint64 first = w->currentConversation();
        input(*w)->setFocus();
        QTest::keyClicks(input(*w), "apples are red");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QVERIFY(done.wait(kTurnTimeoutMs));
        QTRY_COMPARE(list->find(first)->title, QString("apples are red"));
        QVERIFY(changed.count() > 0);
        QCOMPARE(inserted.count(), 0);

        QTest::keyClick(w.get(), Qt::Key_N, Qt::ControlModifier);
        QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != first && w->transcriptModel()->loaded(), 30000);
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(list->rowCount(), 2);
        QTest::keyClicks(input(*w), "bananas are yellow");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QVERIFY(done.wait(kTurnTimeoutMs));
        auto* view = w->findChild<QListView*>("conversationList");
        QTRY_COMPARE(view->model()->index(0, 0).data().toString(), QString("bananas are yellow"));

        // A search that hides the open conversation does not open another one.
        const qint64 second = w->currentConversation();
        QTest::keyClick(w.get(), Qt::Key_K, Qt::ControlModifier);
        auto* search = w->findChild<QLineEdit*>("conversationSearch");
        QTest::keyClicks(search, "apples");
        QTRY_COMPARE(view->model()->rowCount(), 1);
        QCOMPARE(w->conversationSearch()->idAt(0), first);
        QCOMPARE(w->currentConversation(), second);
        QVERIFY(!view->currentIndex().isValid());  // no shown row stands for the open one
        search->clear();
        QTRY_COMPARE(view->model()->rowCount(), 2);
        QCOMPARE(w->currentConversation(), second);
        QCOMPARE(view->currentIndex().data(ConversationListModel::IdRole).toLongLong(), second);
        // Enter in the search box opens the first match.
        QTest::keyClicks(search, "apples");
        QTRY_COMPARE(view->model()->rowCount(), 1);
        QTest::keyClick(search, Qt::Key_Return);
        QCOMPARE(w->currentConversation(), first);
        QTRY_VERIFY_WITH_TIMEOUT(w->transcriptModel()->loaded(), 20000);
        QCOMPARE(w->transcriptModel()->message(0).content, QString("apples are red"));
        search->clear();
        QTRY_COMPARE(view->model()->rowCount(), 2);
        QCOMPARE(view->currentIndex().data(ConversationListModel::IdRole).toLongLong(), first);
        QCOMPARE(resets.count(), 0);
        QCOMPARE(shownResets.count(), 0);
    }

    // Opening another conversation and searching while an answer streams do not wait for it. The
    // worker is held inside the answer's first piece of text (so the answer cannot end on its own
    // meanwhile); the other conversation's messages and the search's matches must arrive before
    // the answer is let go, and coming back shows the answer still streaming.
    void openingAnotherChatWhileAnswering() {
        const QString db = freshDb(64);
        qint64 older = 0, busy = 0;
        {
            Store store(db.toStdString());
            const auto c = store.create_conversation("Older chat", "", "dynamic");
            store.append_message(c.id, Role::User, "the older question about teapots");
            store.append_message(c.id, Role::Assistant, "the older answer");
            older = c.id;
            busy = store.create_conversation("Busy chat", "", "dynamic").id;  // the most recent: it opens
        }
        auto w = openWindow(db);
        QVERIFY(w);
        QCOMPARE(w->currentConversation(), busy);
        TranscriptModel* m = w->transcriptModel();

        struct Gate {
            QSemaphore release;
            std::atomic<bool> held{false};
        };
        auto gate = std::make_shared<Gate>();
        QStringList events;
        QObject context;
        // Direct: runs on the worker's thread, inside the turn, and holds it there.
        connect(w->worker(), &EngineWorker::answerText, &context, [gate](qint64, const QString&) {
            if (!gate->held.exchange(true)) gate->release.acquire();
        }, Qt::DirectConnection);
        const auto letGo = qScopeGuard([gate] { gate->release.release(1); });
        connect(w.get(), &MainWindow::answerFinished, &context, [&] { events << "answer finished"; });
        connect(w->worker(), &EngineWorker::transcriptLoaded, &context,
                [&](const ConversationItem& c, const QList<MessageItem>&) { events << QString("transcript %1").arg(c.id); });
        connect(w->worker(), &EngineWorker::searchResults, &context, [&](const QString& q) { events << "search " + q; });

        input(*w)->setFocus();
        QTest::keyClicks(input(*w), "tell me a long story");
        QTest::keyClick(input(*w), Qt::Key_Return);
        QTRY_VERIFY_WITH_TIMEOUT(gate->held.load(), kTurnTimeoutMs);

        // The user opens the older conversation from the list.
        auto* view = w->findChild<QListView*>("conversationList");
        view->setCurrentIndex(view->model()->index(w->conversationSearch()->rowOf(older), 0));
        QCOMPARE(w->currentConversation(), older);
        QTRY_VERIFY_WITH_TIMEOUT(m->loaded() && m->conversationId() == older, 20000);
        QCOMPARE(rowsOf(*m), QStringList({QString("%1 0 the older question about teapots").arg(test::storedMessages(db, older)[0].id),
                                          QString("%1 0 the older answer").arg(test::storedMessages(db, older)[1].id)}));
        // And searches.
        auto* search = w->findChild<QLineEdit*>("conversationSearch");
        QTest::keyClicks(search, "teapots");
        QTRY_VERIFY_WITH_TIMEOUT(events.contains("search teapots"), 20000);
        QTRY_COMPARE(view->model()->rowCount(), 1);
        QCOMPARE(w->conversationSearch()->idAt(0), older);
        search->clear();
        QTRY_COMPARE(view->model()->rowCount(), 2);

        // Back to the busy one: its question, and its answer still streaming.
        view->setCurrentIndex(view->model()->index(w->conversationSearch()->rowOf(busy), 0));
        QTRY_VERIFY_WITH_TIMEOUT(m->loaded() && m->conversationId() == busy, 20000);
        QCOMPARE(m->rowCount(), 2);
        QCOMPARE(m->message(0).content, QString("tell me a long story"));
        QCOMPARE(m->state(0), MessageState::Sending);
        QCOMPARE(m->state(1), MessageState::Streaming);
        QVERIFY2(!events.contains("answer finished"), qPrintable(events.join(", ")));
        const qsizetype openedOlder = events.indexOf(QString("transcript %1").arg(older));
        QVERIFY2(openedOlder >= 0, qPrintable(events.join(", ")));

        // Let the answer go: it ends, after all of that, and lands in the busy conversation.
        gate->release.release(1);
        QTRY_VERIFY_WITH_TIMEOUT(events.contains("answer finished"), kTurnTimeoutMs);
        QVERIFY(events.indexOf("answer finished") > events.indexOf("search teapots"));
        QVERIFY(events.indexOf("answer finished") > openedOlder);
        expectRowsStored(*m, test::storedMessages(db, busy));
        QCOMPARE(m->rowCount(), 2);
    }
};

QTEST_MAIN(TestUiModels)
#include "test_ui_models.moc"
