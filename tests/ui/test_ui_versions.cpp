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
#include "support/ui_testing.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_editor.h"
#include "ui/message_view.h"
#include "ui/transcript_view.h"
#include "ui/version_switcher.h"

#include <QLabel>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

#include <memory>

using namespace kvchat;

namespace {
constexpr int kTurnTimeoutMs = 120000;
}  // namespace

class TestUiVersions : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    int dbCount_ = 0;

    QString freshDb() {
        const QString db = home_.path() + QStringLiteral("/db%1/kvchat.db").arg(++dbCount_);
        QDir().mkpath(QFileInfo(db).absolutePath());
        Store store(db.toStdString());
        ChatSettings s;
        s.sampling.greedy = false;  // answers drawn, so a regenerated one may differ
        s.random_seed = true;
        s.max_new_tokens = 8;
        s.threads = 2;
        s.save(store);
        return db;
    }

    std::unique_ptr<MainWindow> openWindow(const QString& db) {
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = model_;
        o.restoreState = false;
        auto w = std::make_unique<MainWindow>(o);
        w->show();
        if (!QTest::qWaitForWindowExposed(w.get())) return nullptr;
        if (!QTest::qWaitFor([&] { return w->modelReady() && w->currentConversation() != 0; }, 60000)) return nullptr;
        return w;
    }

    static TranscriptView* transcript(MainWindow& w) { return w.findChild<TranscriptView*>("transcriptView"); }
    static MessageView* view(MainWindow& w, int row) {
        const auto views = transcript(w)->messageViews();
        return row < views.size() ? views[row] : nullptr;
    }

    static bool typeAndSend(MainWindow& w, const QString& text) {
        QSignalSpy done(&w, &MainWindow::answerFinished);
        auto* box = w.findChild<MessageBox*>("messageInput");
        box->setFocus();
        QTest::keyClicks(box, text);
        QTest::keyClick(box, Qt::Key_Return);
        return done.wait(kTurnTimeoutMs) || done.count() > 0;
    }

    static std::vector<MessageRecord> stored(const QString& db, qint64 id) {
        Store store(db.toStdString());
        return store.list_messages(id);
    }

    // The switcher's words under message `row`, empty while it is hidden.
    static QString versionsShown(MainWindow& w, int row) {
        MessageView* v = view(w, row);
        if (!v || !v->versionSwitcher()->isVisibleTo(v)) return {};
        return v->versionSwitcher()->findChild<QLabel*>("versionLabel")->text();
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = home_.path() + "/tiny.gguf";
        test::write_tiny_gguf(test::chat_sized_spec(4), model_.toStdString());
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
        auto* previous = view(*w, 1)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton");
        QVERIFY(previous->isEnabled());
        QTest::mouseClick(previous, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("1/2"), 10000);
        QCOMPARE(view(*w, 1)->content().toStdString(), first);
        QCOMPARE(stored(db, id).at(1).content, first);
        QVERIFY(!view(*w, 1)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton")->isEnabled());

        // The next turn answers that transcript; reopened, the versions are still there.
        QVERIFY(typeAndSend(*w, "second question"));
        QCOMPARE(stored(db, id).size(), size_t(4));
        QCOMPARE(stored(db, id).at(1).content, first);
        w.reset();
        w = openWindow(db);
        QVERIFY(w);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("1/2"), 10000);
        QTest::mouseClick(view(*w, 1)->versionSwitcher()->findChild<QToolButton*>("nextVersionButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 1), QString("2/2"), 10000);
        QCOMPARE(transcript(*w)->messageViews().size(), 2);  // the second question belongs to version 1
    }

    void editInPlaceSaysWhatItReplaces() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        QVERIFY(typeAndSend(*w, "second question"));
        const qint64 id = w->currentConversation();
        const auto before = stored(db, id);
        QCOMPARE(before.size(), size_t(4));

        // Edit: an editor in the transcript (no dialog), saying what saving replaces.
        MessageView* question = view(*w, 0);
        QTest::mouseClick(question->findChild<QToolButton*>("editMessageButton"), Qt::LeftButton);
        QVERIFY(question->editing());
        QVERIFY(!QApplication::activeModalWidget());
        QCOMPARE(question->editor()->findChild<QLabel*>("replaceWarning")->text(),
                 QString("Replaces the answer and the 2 messages after it; they stay as an earlier version (‹ ›)."));
        QCOMPARE(question->editor()->textEdit()->toPlainText(), QString("first question"));
        // Esc cancels, and does not stop anything else: nothing changed.
        QTest::keyClick(question->editor()->textEdit(), Qt::Key_Escape);
        QVERIFY(!question->editing());
        QCOMPARE(stored(db, id).size(), size_t(4));

        QSignalSpy done(w.get(), &MainWindow::answerFinished);
        test::editInPlace(view(*w, 0), "an edited question");
        QVERIFY(done.wait(kTurnTimeoutMs));
        auto edited = stored(db, id);
        QCOMPARE(edited.size(), size_t(2));
        QCOMPARE(QString::fromStdString(edited[0].content), QString("an edited question"));
        QTRY_COMPARE_WITH_TIMEOUT(versionsShown(*w, 0), QString("2/2"), 10000);
        // Nothing was lost: ‹ brings back the question and the three messages after it.
        QTest::mouseClick(view(*w, 0)->versionSwitcher()->findChild<QToolButton*>("previousVersionButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(transcript(*w)->messageViews().size(), 4, 10000);
        QCOMPARE(versionsShown(*w, 0), QString("1/2"));
        edited = stored(db, id);
        for (size_t i = 0; i < 4; ++i) QCOMPARE(edited[i].content, before[i].content);
    }

    void strategySwitchMarked() {
        const QString db = freshDb();
        auto w = openWindow(db);
        QVERIFY(w);
        QVERIFY(typeAndSend(*w, "first question"));
        const qint64 id = w->currentConversation();
        Q_EMIT w->requestSwitchStrategy(id, "quantized:nbits=4,residual=16,group=16");
        auto after = [&] { return view(*w, 1)->findChild<QLabel*>("strategyDividerAfter"); };
        QTRY_VERIFY_WITH_TIMEOUT(after()->isVisibleTo(view(*w, 1)), 30000);
        QVERIFY2(after()->text().startsWith("Strategy: dynamic → quantized"), qPrintable(after()->text()));
        // The next question is where the change shows, between the messages.
        QVERIFY(typeAndSend(*w, "second question"));
        auto before = [&] { return view(*w, 2)->findChild<QLabel*>("strategyDivider"); };
        QTRY_VERIFY_WITH_TIMEOUT(view(*w, 2) && before()->isVisibleTo(view(*w, 2)), 10000);
        QVERIFY(before()->text().startsWith("Strategy: dynamic → quantized"));
        QVERIFY(!after()->isVisibleTo(view(*w, 1)));
        QVERIFY(!view(*w, 0)->findChild<QLabel*>("strategyDivider")->isVisibleTo(view(*w, 0)));
    }
};

QTEST_MAIN(TestUiVersions)
#include "test_ui_versions.moc"
