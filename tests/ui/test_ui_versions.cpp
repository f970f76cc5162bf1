// Versions of an answer and edit in place, driven as a user drives the window (offscreen, a tiny
// model): Regenerate adds ‹ 2/2 › under the answer and ‹ goes back to the first answer, which
// becomes the stored transcript; Edit turns the question into an editor in the transcript that
// says what it replaces, Esc leaves everything as it was, Ctrl+Enter answers again and keeps the
// old tail as a version; a strategy switch is marked between messages; all of it is still there
// when the window is opened again on the database.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "support/chat_window.h"
#include "support/ui_testing.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_editor.h"
#include "ui/message_view.h"
#include "ui/transcript_view.h"
#include "ui/version_switcher.h"

#include <QLabel>
#include <QPlainTextEdit>
#include <QComboBox>
#include <QLineEdit>
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

class TestUiVersions : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb() { return test::freshChatDb(home_.path(), dbCount_, 8, test::Answers::Drawn); }

    std::unique_ptr<MainWindow> openWindow(const QString& db) { return test::openChatWindow(db, model_); }

    // The switcher's words under message `row`, empty while it is hidden.
    static QString versionsShown(MainWindow& w, int row) {
        MessageView* v = messageViewAt(w, row);
        if (!v || !v->versionSwitcher()->isVisibleTo(v)) return {};
        return v->versionSwitcher()->findChild<QLabel*>("versionLabel")->text();
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    void regenerateAddsAVersion() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        const qint64 id = w->currentConversation();
        QCOMPARE(versionsShown(*w, 1), QString());  // one answer: no arrows

        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        QTest::keyClick(w.get(), Qt::Key_R, Qt::ControlModifier);
        QVERIFY(done.wait(kTurnTimeoutMs));
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("2/2"), 10000);
        std::string first;
        {
            Store store(db.toStdString());
            first = store.version_messages(id, 1, 1).at(0).content;
        }
        // ‹ : the first answer is the conversation's answer again, in the window and the database.
        auto* previous = messageViewAt(*w, 1)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton");
        QVERIFY(previous->isEnabled());
        QTest::mouseClick(previous, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("1/2"), 10000);
        QCOMPARE(messageViewAt(*w, 1)->content().toStdString(), first);
        QCOMPARE(storedMessages(db, id).at(1).content, first);
        QVERIFY(!messageViewAt(*w, 1)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton")->isEnabled());

        // The next turn answers that transcript; reopened, the versions are still there.
        QVERIFY(typeAndSend(*w, "second question"));
        QCOMPARE(storedMessages(db, id).size(), size_t(4));
        QCOMPARE(storedMessages(db, id).at(1).content, first);
        w.reset();
        w = openWindow(db);
        QVERIFY(w);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("1/2"), 10000);
        QTest::mouseClick(messageViewAt(*w, 1)->versionSwitcher()->findChild<QToolButton*>("nextVersionButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("2/2"), 10000);
        QCOMPARE(transcriptOf(*w)->messageViews().size(), 2);  // the second question belongs to version 1
    }

    void editInPlaceSaysWhatItReplaces() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        QVERIFY(typeAndSend(*w, "second question"));
        const qint64 id = w->currentConversation();
        const auto before = storedMessages(db, id);
        QCOMPARE(before.size(), size_t(4));

        // Edit: an editor in the transcript (no dialog), saying what saving replaces.
        MessageView* question = messageViewAt(*w, 0);
        QTest::mouseClick(question->findChild<QToolButton*>("editMessageButton"), Qt::LeftButton);
        QVERIFY(question->editing());
        QVERIFY(!QApplication::activeModalWidget());
        QCOMPARE(question->editor()->findChild<QLabel*>("replaceWarning")->text(),
                 QString("Replaces the answer and the 2 messages after it; they stay as an earlier version (‹ ›)."));
        QCOMPARE(question->editor()->textEdit()->toPlainText(), QString("first question"));
        // Esc cancels, and does not stop anything else: nothing changed.
        QTest::keyClick(question->editor()->textEdit(), Qt::Key_Escape);
        QVERIFY(!question->editing());
        QCOMPARE(storedMessages(db, id).size(), size_t(4));

        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        test::editInPlace(messageViewAt(*w, 0), "an edited question");
        QVERIFY(done.wait(kTurnTimeoutMs));
        auto edited = storedMessages(db, id);
        QCOMPARE(edited.size(), size_t(2));
        QCOMPARE(QString::fromStdString(edited[0].content), QString("an edited question"));
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 0), QString("2/2"), 10000);
        // Nothing was lost: ‹ brings back the question and the three messages after it.
        QTest::mouseClick(messageViewAt(*w, 0)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(transcriptOf(*w)->messageViews().size(), 4, 10000);
        QCOMPARE(versionsShown(*w, 0), QString("1/2"));
        edited = storedMessages(db, id);
        for (size_t i = 0; i < 4; ++i) QCOMPARE(edited[i].content, before[i].content);
    }

    void strategySwitchMarked() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        const qint64 id = w->currentConversation();
        Q_EMIT w->requestSwitchStrategy(id, "quantized:nbits=4,residual=16,group=16");
        auto after = [&] { return messageViewAt(*w, 1)->findChild<QLabel*>("strategyDividerAfter"); };
        QTRY_VERIFY_WITH_TIMEOUT(after()->isVisibleTo(messageViewAt(*w, 1)), 30000);
        QVERIFY2(after()->text().startsWith("Strategy: dynamic → quantized"), qPrintable(after()->text()));
        // The next question is where the change shows, between the messages.
        QVERIFY(typeAndSend(*w, "second question"));
        auto before = [&] { return messageViewAt(*w, 2)->findChild<QLabel*>("strategyDivider"); };
        QTRY_VERIFY_WITH_TIMEOUT(messageViewAt(*w, 2) && before()->isVisibleTo(messageViewAt(*w, 2)), 10000);
        QVERIFY(before()->text().startsWith("Strategy: dynamic → quantized"));
        QVERIFY(!after()->isVisibleTo(messageViewAt(*w, 1)));
        QVERIFY(!messageViewAt(*w, 0)->findChild<QLabel*>("strategyDivider")->isVisibleTo(messageViewAt(*w, 0)));
    }

    // The strategy box takes any spec typed into it, not only the list's entries: a spec of one's
    // own, entered, switches the cache (it did nothing), and so does "dynamic" typed back while the
    // list still points at its "dynamic" entry (it did nothing either); one request each, also
    // when the box activates the entry typed.
    void typedStrategyApplies() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        auto* box = w->findChild<QComboBox*>("cacheStrategy");
        QVERIFY(box && box->lineEdit());
        QCOMPARE(box->currentText(), QString("dynamic"));
        QSignalSpy asked(w.get(), &MainWindow::requestSwitchStrategy);
        auto enter = [&](const QString& spec) {
            box->lineEdit()->selectAll();
            QTest::keyClicks(box->lineEdit(), spec);
            QTest::keyClick(box->lineEdit(), Qt::Key_Return);
        };
        auto after = [&] { return messageViewAt(*w, 1)->findChild<QLabel*>("strategyDividerAfter"); };
        enter("sliding_window:window=64");
        QCOMPARE(asked.count(), 1);
        QCOMPARE(asked.at(0).at(1).toString(), QString("sliding_window:window=64"));
        QTRY_VERIFY_WITH_TIMEOUT(after()->isVisibleTo(messageViewAt(*w, 1)), 30000);
        QVERIFY2(after()->text().startsWith("Strategy: dynamic → sliding_window"), qPrintable(after()->text()));
        QTRY_VERIFY_WITH_TIMEOUT(box->currentText().startsWith("sliding_window"), 10000);
        enter("dynamic");
        QCOMPARE(asked.count(), 2);
        QCOMPARE(asked.at(1).at(1).toString(), QString("dynamic"));
        QTRY_VERIFY_WITH_TIMEOUT(box->currentText() == "dynamic", 30000);
        // A list entry other than the current one, typed: the box also activates it on that
        // Return; still one request.
        enter("quantized:nbits=4");
        QCOMPARE(asked.count(), 3);
        QTRY_VERIFY_WITH_TIMEOUT(box->currentText().startsWith("quantized:nbits=4"), 30000);
        QCOMPARE(asked.count(), 3);
    }
};

QTEST_MAIN(TestUiVersions)
#include "test_ui_versions.moc"
