// The main window builds offscreen with every part of the chat layout present.
#include "ui/main_window.h"

#include <QComboBox>
#include <QDockWidget>
#include <QListView>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextBrowser>
#include <QtTest>

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void layoutExists() {
        kvchat::MainWindow w("/models/some-model.gguf");
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(w.windowTitle().contains("some-model.gguf"));
        auto* list = w.findChild<QListView*>("conversationList");
        auto* transcript = w.findChild<QTextBrowser*>("transcriptView");
        auto* input = w.findChild<QPlainTextEdit*>("messageInput");
        auto* send = w.findChild<QPushButton*>("sendButton");
        auto* strategy = w.findChild<QComboBox*>("cacheStrategy");
        auto* dock = w.findChild<QDockWidget*>("cacheInspectorDock");
        QVERIFY(list && transcript && input && send && strategy && dock);
        for (QWidget* wid : {static_cast<QWidget*>(list), static_cast<QWidget*>(transcript),
                             static_cast<QWidget*>(input), static_cast<QWidget*>(send), static_cast<QWidget*>(dock)})
            QVERIFY2(wid->isVisible(), qPrintable(wid->objectName()));
        QVERIFY(dock->widget() && dock->widget()->objectName() == "cacheInspector");
        // The message box takes keyboard input.
        input->setFocus();
        QTest::keyClicks(input, "hello <start_of_turn>");
        QCOMPARE(input->toPlainText(), QString("hello <start_of_turn>"));
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_ui_main_window.moc"
