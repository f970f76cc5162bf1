// The main window builds offscreen with every part of the chat layout present, and a model that
// cannot be loaded is reported in a dialog naming the file and the problem.
#define QT_NO_KEYWORDS  // the engine's headers use the words "emit" and "slots"
#include "ui/main_window.h"
#include "support/ui_testing.h"

#include <QComboBox>
#include <QDockWidget>
#include <QLabel>
#include <QListView>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScopeGuard>
#include <QScrollArea>
#include <QSettings>
#include <QTemporaryDir>
#include <QMimeData>
#include <QtTest>

class TestMainWindow : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
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

    // The model: --model, else $KVCHAT_MODEL, else the last one used (the README's order). Both
    // files here exist and are not models, so the dialog names the one the window chose.
    void environmentModelBeforeLastUsed() {
        const QString last = home_.path() + "/last-used.gguf", env = home_.path() + "/from-environment.gguf";
        for (const QString& path : {last, env}) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("not a model either");
        }
        QSettings().setValue(QStringLiteral("models/last"), last);
        const QByteArray saved = qgetenv("KVCHAT_MODEL");
        qputenv("KVCHAT_MODEL", QFile::encodeName(env));
        const auto restore = qScopeGuard([&] {
            QSettings().remove(QStringLiteral("models/last"));
            if (saved.isNull()) qunsetenv("KVCHAT_MODEL");
            else qputenv("KVCHAT_MODEL", saved);
        });
        kvchat::WindowOptions o;
        o.restoreState = false;
        kvchat::MainWindow w(o);
        w.show();
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("modelErrorDialog")) != nullptr, 20000);
        QVERIFY2(box->text().contains("from-environment.gguf") && !box->text().contains("last-used.gguf"),
                 qPrintable(box->text()));
        box->accept();
    }

    // A model file dropped on the window is loaded; this one is not a model, and the dialog says so.
    void dropModelFile() {
        kvchat::WindowOptions o;
        o.modelPath = home_.path() + "/first-missing.gguf";
        o.restoreState = false;
        kvchat::MainWindow w(o);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QMessageBox* first = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((first = w.findChild<QMessageBox*>("modelErrorDialog")) != nullptr, 20000);
        first->accept();
        QTRY_VERIFY(!w.findChild<QMessageBox*>("modelErrorDialog"));
        const QString dropped = home_.path() + "/dropped.gguf";
        QFile f(dropped);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a model at all");
        f.close();
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(dropped)});
        QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&w, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&w, &drop);
        QMessageBox* box = nullptr;
        QTRY_VERIFY_WITH_TIMEOUT((box = w.findChild<QMessageBox*>("modelErrorDialog")) != nullptr, 20000);
        QVERIFY2(box->text().contains("dropped.gguf"), qPrintable(box->text()));
        box->accept();
        // Text is not a model: not accepted.
        QMimeData text;
        text.setText("hello");
        QDragEnterEvent other(QPoint(50, 50), Qt::CopyAction, &text, Qt::LeftButton, Qt::NoModifier);
        other.setAccepted(false);
        QApplication::sendEvent(&w, &other);
        QVERIFY(!other.isAccepted());
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_ui_main_window.moc"
