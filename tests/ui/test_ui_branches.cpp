// "Branch from here" driven as a user drives the window (offscreen, a tiny model): the Branch
// button of a message makes a new conversation of the messages up to it, opens it, and the list
// shows it right under its parent, indented; its first answer reports the parent's tokens as
// cached (the branch's cache is the parent's cut back), and the parent is left as it was.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"
#include "ui/conversation_list_model.h"
#include "ui/engine_values.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/transcript_view.h"

#include <QListView>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

#include <memory>

using namespace kvchat;

namespace {
constexpr int kTurnTimeoutMs = test::kAnswerTimeoutMs;
using test::messageViewAt;
using test::storedMessages;
using test::transcriptOf;
using test::typeAndSend;
}  // namespace

class TestUiBranches : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb() { return test::freshChatDb(home_.path(), dbCount_, 8); }

    std::unique_ptr<MainWindow> openWindow(const QString& db) { return test::openChatWindow(db, model_); }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    void branchFromHere() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        QVERIFY(typeAndSend(*w, "second question"));
        const qint64 parent = w->currentConversation();
        const auto before = storedMessages(db, parent);
        QCOMPARE(before.size(), size_t(4));

        // Branch from the first answer: a new conversation of its first two messages, opened.
        auto* branchButton = messageViewAt(*w, 1)->findChild<QToolButton*>("branchButton");
        QVERIFY(branchButton && branchButton->isEnabled());
        QTest::mouseClick(branchButton, Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != parent && w->currentConversation() != 0, 30000);
        const qint64 branch = w->currentConversation();
        QTRY_COMPARE_WITH_TIMEOUT(transcriptOf(*w)->messageViews().size(), 2, 10000);
        const auto copied = storedMessages(db, branch);
        QCOMPARE(copied.size(), size_t(2));
        QCOMPARE(copied[0].content, before[0].content);
        QCOMPARE(copied[1].content, before[1].content);
        {
            Store store(db.toStdString());
            const auto row = store.find_conversation_by_id(branch);
            QCOMPARE(row->parent_id.value_or(0), parent);
            QCOMPARE(row->title, store.find_conversation_by_id(parent)->title + " (branch)");
        }

        // The list: the branch right under its parent, indented one step.
        auto* list = w->findChild<QListView*>("conversationList");
        QAbstractItemModel* shown = list->model();
        auto rowOf = [&](qint64 id) {
            for (int r = 0; r < shown->rowCount(); ++r)
                if (shown->index(r, 0).data(ConversationListModel::IdRole).toLongLong() == id) return r;
            return -1;
        };
        QTRY_VERIFY_WITH_TIMEOUT(rowOf(branch) >= 0, 10000);
        QCOMPARE(rowOf(branch), rowOf(parent) + 1);
        QCOMPARE(shown->index(rowOf(branch), 0).data(ConversationListModel::DepthRole).toInt(), 1);
        QCOMPARE(shown->index(rowOf(parent), 0).data(ConversationListModel::DepthRole).toInt(), 0);

        // The branch's first answer reuses the parent's cache for the messages it copied.
        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        auto* box = w->findChild<MessageBox*>("messageInput");
        box->setFocus();
        QTest::keyClicks(box, "another second question");
        QTest::keyClick(box, Qt::Key_Return);
        QVERIFY(done.wait(kTurnTimeoutMs) || done.count() > 0);
        const TurnOutcome outcome = done.last().at(0).value<TurnOutcome>();
        QCOMPARE(outcome.conversationId, branch);
        QVERIFY2(outcome.answer.figures.cached_tokens > 0, qPrintable(QString::number(outcome.answer.figures.cached_tokens)));
        // A newer branch keeps its parent's group on top, and the parent is as it was.
        QCOMPARE(rowOf(parent), 0);
        QCOMPARE(rowOf(branch), 1);
        QCOMPARE(storedMessages(db, parent).size(), size_t(4));
    }
};

QTEST_MAIN(TestUiBranches)
#include "test_ui_branches.moc"
