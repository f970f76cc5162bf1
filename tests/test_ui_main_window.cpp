// The main window builds offscreen with every part of the chat layout present, and a model that
// cannot be loaded is reported in a dialog naming the file and the problem.
#include "ui/main_window.h"

#include <QComboBox>
#include <QDockWidget>
#include <QLabel>
#include <QListView>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QTemporaryDir>
#include <QtTest>

class TestMainWindow : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
private slots:
    void initTestCase() {
        QVERIFY(home_.isValid());
        qputenv("XDG_DATA_HOME", (home_.path() + "/data").toUtf8());
        qputenv("XDG_CONFIG_HOME", (home_.path() + "/config").toUtf8());
    }

    void layoutAndLoadError() {
        kvchat::WindowOptions o;
        o.modelPath = home_.path() + "/no-such-model.gguf";
        kvchat::MainWindow w(o);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* list = w.findChild<QListView*>("conversationList");
        auto* transcript = w.findChild<QScrollArea*>("transcriptView");
        auto* input = w.findChild<QPlainTextEdit*>("messageInput");
        auto* send = w.findChild<QPushButton*>("sendButton");
        auto* strategy = w.findChild<QComboBox*>("cacheStrategy");
        auto* dock = w.findChild<QDockWidget*>("cacheInspectorDock");
        auto* prefixDock = w.findChild<QDockWidget*>("prefixLibraryDock");
        QVERIFY(list && transcript && input && send && strategy && dock && prefixDock);
        for (QWidget* wid : {static_cast<QWidget*>(list), static_cast<QWidget*>(transcript),
                             static_cast<QWidget*>(input), static_cast<QWidget*>(send)})
            QVERIFY2(wid->isVisible(), qPrintable(wid->objectName()));
        // The load fails on the worker; the window says so in a dialog naming the file.
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("modelErrorDialog")) != nullptr, 20000);
        QVERIFY(box->text().contains("no-such-model.gguf"));
        QVERIFY(!w.modelReady());
        // Without a model nothing can be sent, but the message box still takes text.
        input->setFocus();
        QTest::keyClicks(input, "hello <start_of_turn>");
        QCOMPARE(input->toPlainText(), QString("hello <start_of_turn>"));
        QVERIFY(!send->isEnabled());
        box->accept();
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_ui_main_window.moc"
