// The transcript's pieces: Markdown cut into code blocks and prose so that a streaming answer
// re-parses only its last piece; the cost of a token at message 200 against message 2; the
// event-loop stall meter; and what Enter, Shift+Enter and Copy do.
#define QT_NO_KEYWORDS  // the engine's headers use the words "emit" and "slots"
#include "ui/conversation_delegate.h"
#include "ui/event_loop_stall.h"
#include "ui/markdown_segments.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"

#include <QApplication>
#include <QClipboard>
#include <QDateTime>
#include <QFontDatabase>
#include <QLabel>
#include <QTextBlock>
#include <QTextBrowser>
#include <QSignalSpy>
#include <QThread>
#include <QToolButton>
#include <QtTest>

using namespace kvchat;

class TestUiTranscript : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void codeBlocksAndProse() {
        const QString md = "Here is code:\n\n```python\ndef f(s):\n    return s[::-1]\n```\nAnd after.\n";
        const auto segs = split_markdown(md);
        QCOMPARE(segs.size(), 3);
        QVERIFY(!segs[0].code);
        QCOMPARE(segs[0].text.trimmed(), QString("Here is code:"));
        QVERIFY(segs[1].code);
        QVERIFY(segs[1].closed);
        QCOMPARE(segs[1].language, QString("python"));
        QCOMPARE(segs[1].text, QString("def f(s):\n    return s[::-1]"));
        QCOMPARE(segs[2].text.trimmed(), QString("And after."));
    }

    void openFenceWhileStreaming() {
        const auto segs = split_markdown("Look:\n~~~\nint x = 1;\n``` not a close\n");
        QCOMPARE(segs.size(), 2);
        QVERIFY(segs[1].code);
        QVERIFY(!segs[1].closed);
        // The backquote line does not close a tilde fence; it is code.
        QCOMPARE(segs[1].text, QString("int x = 1;\n``` not a close"));
    }

    // Growing an answer never changes a finished piece: every piece of a prefix but the last is
    // a piece of the whole text, which is what lets streaming re-parse only the last one.
    void piecesOfAPrefixAreStable() {
        QString text;
        for (int i = 0; i < 60; ++i) {
            text += QString("Paragraph %1 talks about caches and tokens at some length, again and again.\n").arg(i);
            if (i % 3 == 2) text += "\n";
            if (i % 17 == 5) text += "```cpp\nint main() { return " + QString::number(i) + "; }\n```\n";
        }
        const auto whole = split_markdown(text);
        QVERIFY(whole.size() > 6);
        for (qsizetype cut = 1; cut < text.size(); cut += 37) {
            const auto part = split_markdown(text.left(cut));
            for (qsizetype i = 0; i + 1 < part.size(); ++i)
                QVERIFY2(part[i] == whole[i], qPrintable(QString("cut %1, piece %2").arg(cut).arg(i)));
        }
    }

    void longProseIsCut() {
        QString text;
        for (int i = 0; i < 400; ++i) text += "line of a long list without blank lines\n";
        const auto segs = split_markdown(text);
        QVERIFY(segs.size() >= text.size() / (4 * kProseChunk));
        for (const auto& s : segs) QVERIFY(s.text.size() <= 4 * kProseChunk + 64);
    }

    // While an answer streams, its view parses only its last piece, and a token costs the same
    // number of parses at message 200 as at message 2: the other messages are not touched.
    void streamingTouchesOnlyTheGrowingMessage() {
        TranscriptModel model;
        TranscriptView view;
        view.setModel(&model);
        view.resize(800, 600);
        view.show();
        QList<MessageItem> history;
        for (int i = 0; i < 200; ++i) {
            MessageItem m;
            m.id = i + 1;
            m.ordinal = i;
            m.role = i % 2 ? MessageRole::Assistant : MessageRole::User;
            m.content = QString("Message %1 with *emphasis* and `code`.").arg(i);
            history.push_back(m);
        }
        model.open(1);
        model.setMessages(1, history);
        QTRY_COMPARE(view.messageViews().size(), 200);
        QList<int> before;
        for (MessageView* v : view.messageViews()) before.push_back(v->parses());
        QVERIFY(model.beginSend("and one more question"));
        QTRY_VERIFY(view.streamingView() != nullptr);
        MessageView* growing = view.streamingView();
        QString prose;
        for (int i = 0; i < 40; ++i) prose += QString("Sentence %1 of a long answer about caches.\n\n").arg(i);
        for (qsizetype at = 0; at < prose.size(); at += 16) {
            model.appendAnswerText(1, prose.mid(at, 16));
        }
        const int piecesBefore = growing->parses();
        QTest::qWait(3 * MessageView::kReparseMs);
        const int afterOneRender = growing->parses();
        // One render after many tokens: the pieces that changed since the last render, at most
        // all of them the first time; then a token costs one parse.
        QVERIFY(afterOneRender > piecesBefore);
        model.appendAnswerText(1, "one more token");
        QTest::qWait(3 * MessageView::kReparseMs);
        QCOMPARE(growing->parses(), afterOneRender + 1);
        for (int i = 0; i < 200; ++i) QCOMPARE(view.messageViews()[i]->parses(), before[i]);
        TurnOutcome outcome;
        outcome.conversationId = 1;
        outcome.question.id = 201;
        outcome.question.ordinal = 200;
        outcome.question.content = "and one more question";
        outcome.answer.id = 202;
        outcome.answer.ordinal = 201;
        outcome.answer.role = MessageRole::Assistant;
        outcome.answer.content = growing->content();
        model.finishTurn(outcome);
        QVERIFY(!view.streamingView());
        QCOMPARE(view.messageViews().last(), growing);  // the same view, now of the stored answer
        QCOMPARE(view.messageViews().last()->message().id, qint64(202));
        for (int i = 0; i < 200; ++i) QCOMPARE(view.messageViews()[i]->parses(), before[i]);
    }

    // The meter sees a blocked event loop (here 120 ms of work on the GUI thread); it measures,
    // it does not judge.
    void stallIsMeasured() {
        EventLoopStall meter;
        meter.start();
        QTest::qWait(30);
        QVERIFY(meter.ticks() > 0);
        QTimer::singleShot(0, [] { QThread::msleep(120); });
        QTest::qWait(60);
        meter.stop();
        QVERIFY2(meter.maxStallMs() >= 100, qPrintable(QString::number(meter.maxStallMs())));
    }

    void enterSendsShiftEnterBreaksTheLine() {
        MessageBox box;
        box.show();
        QSignalSpy submitted(&box, &MessageBox::submitted);
        QTest::keyClicks(&box, "one");
        QTest::keyClick(&box, Qt::Key_Return, Qt::ShiftModifier);
        QTest::keyClicks(&box, "two");
        QCOMPARE(submitted.count(), 0);
        QCOMPARE(box.toPlainText(), QString("one\ntwo"));
        QTest::keyClick(&box, Qt::Key_Return);
        QCOMPARE(submitted.count(), 1);
        QCOMPARE(box.toPlainText(), QString("one\ntwo"));  // the window takes and clears it
        box.clear();
        QTest::keyClicks(&box, "   ");
        QVERIFY(box.isBlank());
    }

    void copyButtonsCopyTheSource() {
        MessageItem m;
        m.role = MessageRole::Assistant;
        m.content = "Use this:\n\n```sh\necho hi\n```\n";
        MessageView v(m);
        v.resize(600, 300);
        v.show();
        auto* copyCode = v.findChild<QToolButton*>("copyCodeButton");
        QVERIFY(copyCode);
        QTest::mouseClick(copyCode, Qt::LeftButton);
        QCOMPARE(QApplication::clipboard()->text(), QString("echo hi"));
        QTest::mouseClick(v.findChild<QToolButton*>("copyMessageButton"), Qt::LeftButton);
        QCOMPARE(QApplication::clipboard()->text(), m.content);
    }

    void inlineCodeIsMonospace() {
        MessageItem m;
        m.role = MessageRole::Assistant;
        m.content = "Call `reverse()` here.";
        MessageView v(m);
        auto* text = v.findChild<QTextBrowser*>("messageText");
        QVERIFY(text);
        const QString fixed = QFontDatabase::systemFont(QFontDatabase::FixedFont).family();
        bool found = false;
        for (QTextBlock b = text->document()->begin(); b.isValid(); b = b.next())
            for (auto it = b.begin(); !it.atEnd(); ++it)
                if (it.fragment().text().contains("reverse()")) {
                    found = true;
                    QVERIFY(it.fragment().charFormat().fontFamilies().toStringList().contains(fixed));
                } else if (it.fragment().text().contains("here")) {
                    QVERIFY(!it.fragment().charFormat().fontFamilies().toStringList().contains(fixed));
                }
        QVERIFY(found);
    }

    void lastActivityInWords() {
        const qint64 now = 1'700'000'000'000;
        QCOMPARE(ConversationDelegate::activity(now - 20'000, now), QString("just now"));
        QCOMPARE(ConversationDelegate::activity(now - 5 * 60'000, now), QString("5 min ago"));
        QCOMPARE(ConversationDelegate::activity(now - 3 * 3'600'000, now), QString("3 h ago"));
        QCOMPARE(ConversationDelegate::activity(now - 30 * 3'600'000, now), QString("yesterday"));
        QVERIFY(ConversationDelegate::activity(now - 10LL * 86'400'000, now).contains(QString::number(
            QDateTime::fromMSecsSinceEpoch(now - 10LL * 86'400'000).date().day())));
    }

    // A thinking answer shows its answer, and its reasoning folded under a "Thinking" button the
    // user can open and close; Copy still copies the whole message. Plain answers have no button.
    void thinkingIsFolded() {
        MessageItem m;
        m.role = MessageRole::Assistant;
        m.content = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello there!";
        MessageView v(m);
        v.resize(600, 300);
        v.show();
        QVERIFY(QTest::qWaitForWindowExposed(&v));
        auto* toggle = v.findChild<QToolButton*>("thinkingToggle");
        auto* reasoning = v.findChild<QTextBrowser*>("thinkingText");
        auto* answer = v.findChild<QTextBrowser*>("messageText");
        QVERIFY(toggle && reasoning && answer);
        QVERIFY(toggle->isVisible());
        QVERIFY(!reasoning->isVisible());
        QCOMPARE(answer->toPlainText(), QString("Hello there!"));
        QVERIFY(!answer->toPlainText().contains("think"));
        QTest::mouseClick(toggle, Qt::LeftButton);
        QVERIFY(reasoning->isVisible());
        QCOMPARE(reasoning->toPlainText(), QString("The user greets me.\nI greet back."));
        QTest::mouseClick(toggle, Qt::LeftButton);
        QVERIFY(!reasoning->isVisible());
        QTest::mouseClick(v.findChild<QToolButton*>("copyMessageButton"), Qt::LeftButton);
        QCOMPARE(QApplication::clipboard()->text(), m.content);

        // While streaming, the reasoning grows folded until the answer begins.
        MessageItem empty;
        empty.role = MessageRole::Assistant;
        MessageView s(empty);
        s.show();
        s.startStreaming();
        s.appendText("<think>\nHmm");
        QTest::qWait(3 * MessageView::kReparseMs);
        auto* t2 = s.findChild<QToolButton*>("thinkingToggle");
        QVERIFY(t2->isVisible());
        QCOMPARE(t2->text(), QString("Thinking…"));
        QVERIFY(!s.findChild<QTextBrowser*>("thinkingText")->isVisible());
        s.appendText("\n</think>\n\nHi!");
        QTest::qWait(3 * MessageView::kReparseMs);
        QCOMPARE(t2->text(), QString("Thinking"));
        QCOMPARE(s.findChild<QTextBrowser*>("messageText")->toPlainText(), QString("Hi!"));

        MessageItem plain;
        plain.role = MessageRole::Assistant;
        plain.content = "No reasoning here.";
        MessageView p(plain);
        p.show();
        QVERIFY(!p.findChild<QToolButton*>("thinkingToggle")->isVisible());
    }

    void megabyteMessageIsShownCut() {
        MessageItem m;
        m.role = MessageRole::User;
        m.content = QString("x").repeated(1024 * 1024);
        MessageView v(m);
        v.resize(600, 300);
        v.show();
        QVERIFY(QTest::qWaitForWindowExposed(&v));
        QCOMPARE(v.content().size(), m.content.size());
        auto* note = v.findChild<QLabel*>("cutNote");
        QVERIFY(note && note->isVisible());
    }
};

QTEST_MAIN(TestUiTranscript)
#include "test_ui_transcript.moc"
