// The keyboard and search parts of the window (issue 24, point 10): every Tab stop shows where the
// keyboard is; a search shows under each conversation the words around its match, and opening a
// result scrolls the transcript to the matching message and highlights it; the View menu's
// colour scheme is kept across restarts. Driven as a user does: keys typed, rows clicked.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/color_scheme.h"
#include "ui/conversation_search.h"
#include "ui/conversation_search_model.h"
#include "ui/focus_ring.h"
#include "ui/main_window.h"
#include "ui/message_view.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"
#include "ui/view_controls.h"

#include <QAction>
#include <QApplication>
#include <QLineEdit>
#include <QListView>
#include <QScrollBar>
#include <QSettings>
#include <QTemporaryDir>
#include <QtTest>

using namespace kvchat;

class TestSearchAndFocus : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;
    QString db_;
    qint64 baking_ = 0, target_ = 0;

    std::unique_ptr<MainWindow> openWindow() {
        WindowOptions o;
        o.databasePath = db_;
        o.modelPath = model_;
        o.restoreState = false;
        auto w = std::make_unique<MainWindow>(o);
        w->resize(1280, 800);
        w->show();
        if (!QTest::qWaitForWindowExposed(w.get())) return nullptr;
        return w;
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        test::useFreshProfile(home_.path());
        model_ = home_.path() + "/tiny.gguf";
        test::write_tiny_gguf(test::chat_sized_spec(4), model_.toStdString());
        db_ = home_.path() + "/kvchat.db";
        Store store(db_.toStdString());
        // A long conversation whose one mention of sourdough is near its start, then a more
        // recent one that opens first.
        const auto a = store.create_conversation("Weekend baking", "", "dynamic");
        baking_ = a.id;
        for (int i = 0; i < 14; ++i) {
            const auto q = store.append_message(
                a.id, Role::User,
                i == 1 ? "My starter smells sour after two days. Can I bake a Sourdough loaf with it tomorrow morning?"
                       : QString("Question %1 about oven temperatures and rising times.").arg(i).toStdString());
            if (i == 1) target_ = q.id;
            store.append_message(a.id, Role::Assistant,
                                 QString("Answer %1: bake at 230 degrees, with steam for the first twenty minutes, then "
                                         "lower the heat and let the crust darken slowly.\n\nA second paragraph so "
                                         "the transcript is long enough to scroll.")
                                     .arg(i)
                                     .toStdString());
        }
        const auto b = store.create_conversation("Garden", "", "dynamic");
        store.append_message(b.id, Role::User, "When do I plant tomatoes?");
    }

    // Typing in the search field narrows the list to the match and shows the words around it;
    // Enter, then Enter on the row, opens it and the matching message is scrolled into view and
    // highlighted.
    void searchShowsSnippetAndJumps() {
        auto w = openWindow();
        QVERIFY(w);
        QTRY_VERIFY_WITH_TIMEOUT(w->currentConversation() != 0, 30000);
        QVERIFY(w->currentConversation() != baking_);  // the garden, the most recent
        auto* field = w->findChild<QLineEdit*>("conversationSearch");
        auto* list = w->findChild<QListView*>("conversationList");
        QVERIFY(field && list);
        QTest::keyClick(w.get(), Qt::Key_K, Qt::ControlModifier);
        QTRY_VERIFY(field->hasFocus());
        QTest::keyClicks(field, "sourdough");
        ConversationSearchModel* shown = w->conversationSearch();
        QTRY_COMPARE(shown->rowCount(), 1);
        QTRY_VERIFY(shown->index(0, 0).data(ConversationSearchModel::SnippetRole).isValid());
        const QString snippet = shown->index(0, 0).data(ConversationSearchModel::SnippetRole).toString();
        QVERIFY2(snippet.contains(QString(SearchMatch::kMatchBegin) + "Sourdough" + SearchMatch::kMatchEnd), qPrintable(snippet));
        // The row is a line taller while it shows its snippet.
        const int searchingHeight = list->visualRect(shown->index(0, 0)).height();
        QVERIFY(searchingHeight > list->fontMetrics().height() * 2);

        QTest::keyClick(field, Qt::Key_Return);
        QTRY_VERIFY(list->hasFocus());
        QTest::keyClick(list, Qt::Key_Return);
        QTRY_COMPARE(w->currentConversation(), baking_);
        auto* transcript = w->findChild<TranscriptView*>("transcriptView");
        auto* search = w->findChild<ConversationSearch*>("conversationSearch");
        QVERIFY(search);
        QTRY_VERIFY_WITH_TIMEOUT(search->highlight() != nullptr, 10000);
        auto* view = qobject_cast<MessageView*>(search->highlight()->parentWidget());
        QVERIFY(view);
        QCOMPARE(view->message().id, target_);
        // Scrolled to it: the message's top lies in the viewport, and the view is not at the end
        // it was following.
        const int top = view->y() - transcript->verticalScrollBar()->value();
        QVERIFY2(top >= 0 && top < transcript->viewport()->height(), qPrintable(QString("message top at %1").arg(top)));
        QVERIFY(transcript->verticalScrollBar()->value() < transcript->verticalScrollBar()->maximum());
        // The highlight fades.
        QTRY_VERIFY_WITH_TIMEOUT(search->highlight() == nullptr, ConversationSearch::kHighlightMs + 3000);

        // Clearing the search: every conversation, no snippets, rows as tall as before a search.
        field->clear();
        QTRY_COMPARE(shown->rowCount(), 2);
        QVERIFY(!shown->index(0, 0).data(ConversationSearchModel::SnippetRole).isValid());
        QTRY_VERIFY(list->visualRect(shown->index(0, 0)).height() < searchingHeight);
    }

    // Tab from the message box round the window: each stop shows a ring in the highlight colour
    // around the widget that has the keyboard; a click shows none.
    void everyTabStopShowsFocus() {
        auto w = openWindow();
        QVERIFY(w);
        QTRY_VERIFY_WITH_TIMEOUT(w->modelReady() && w->currentConversation() != 0, 30000);
        QWidget* input = w->findChild<QWidget*>("messageInput");
        input->setFocus(Qt::MouseFocusReason);
        QTRY_VERIFY(input->hasFocus());
        auto* ring = w->viewControls()->findChild<FocusRing*>();
        QVERIFY(ring);
        QVERIFY(ring->ring() == nullptr);  // a click: no ring
        QSet<QWidget*> seen;
        const QColor highlight = QApplication::palette().color(QPalette::Active, QPalette::Highlight);
        for (int i = 0; i < 40; ++i) {
            QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
            QWidget* now = QApplication::focusWidget();
            QVERIFY(now);
            if (seen.contains(now)) break;  // round the window
            seen.insert(now);
            QTRY_VERIFY2(ring->ring() != nullptr, qPrintable(now->objectName()));
            QWidget* shown = ring->ring();
            QVERIFY(shown->isVisible());
            // Around the focused widget (or the one its focus went to), drawn in the highlight colour.
            QCOMPARE(shown->parentWidget(), ring->target());
            QVERIFY(ring->target() == now || ring->target()->isAncestorOf(now) || now->isAncestorOf(ring->target()));
            QCOMPARE(shown->geometry(), ring->target()->rect());
            const QImage img = ring->target()->grab().toImage();
            const QColor edge = img.pixelColor(img.width() / 2, 1);
            QVERIFY2(qAbs(edge.red() - highlight.red()) + qAbs(edge.green() - highlight.green()) + qAbs(edge.blue() - highlight.blue()) < 90,
                     qPrintable(QString("%1: %2 at its top edge").arg(now->objectName(), edge.name())));
        }
        QStringList names;
        for (QWidget* s : seen) names << s->objectName();
        qInfo("Tab stops: %s", qPrintable(names.join(", ")));
        QVERIFY2(seen.size() >= 5, qPrintable(QString::number(seen.size())));
    }

    // View > Colours: Dark turns the palette dark now and after a restart; System and Light are
    // there too.
    void colourSchemeIsKept() {
        {
            auto w = openWindow();
            QVERIFY(w);
            auto* dark = w->findChild<QAction*>("colorSchemeDarkAction");
            QVERIFY(dark && w->findChild<QAction*>("colorSchemeLightAction") && w->findChild<QAction*>("colorSchemeSystemAction"));
            dark->trigger();
            QVERIFY(w->viewControls()->colorScheme()->dark());
            QTRY_VERIFY(w->palette().color(QPalette::Window).lightness() < 100);
            QCOMPARE(QSettings().value("view/colorScheme").toString(), QString("dark"));
        }
        QApplication::setPalette(QPalette());  // as a fresh start has it
        {
            auto w = openWindow();
            QVERIFY(w);
            QVERIFY(w->viewControls()->colorScheme()->dark());
            QVERIFY(w->findChild<QAction*>("colorSchemeDarkAction")->isChecked());
            w->findChild<QAction*>("colorSchemeLightAction")->trigger();
            QVERIFY(!w->viewControls()->colorScheme()->dark());
            QTRY_VERIFY(w->palette().color(QPalette::Window).lightness() > 150);
        }
    }
};

QTEST_MAIN(TestSearchAndFocus)
#include "test_ui_search_and_focus.moc"
