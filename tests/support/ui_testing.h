#pragma once
// What the window suites share: a fresh user profile, where screenshots go, typing over a
// field's text as a user does, and reading exported CSV back independently of the writer.
#include <QApplication>
#include <QDir>
#include <QAbstractButton>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QTimer>
#include <QString>
#include <QStringList>
#include <QtTest>

#include <functional>

namespace kvchat::test {

// Points the app's data (database, models, snapshots) and settings at folders under `home`, as a
// user with a fresh profile has them.
inline void useFreshProfile(const QString& home) {
    qputenv("XDG_DATA_HOME", (home + "/data").toUtf8());
    qputenv("XDG_CONFIG_HOME", (home + "/config").toUtf8());
}

// KVCHAT_SCREENSHOT_DIR, else build/screenshots; created if missing.
inline QString screenshotDir() {
    QString dir = qEnvironmentVariable("KVCHAT_SCREENSHOT_DIR");
    if (dir.isEmpty()) dir = QStringLiteral(QT_TESTCASE_BUILDDIR) + "/../screenshots";
    QDir().mkpath(dir);
    return QDir(dir).absolutePath();
}

// Answers the next modal dialog (an exec()'d input or prefix form) from inside its event loop.
inline void whenModal(std::function<void(QWidget*)> act) {
    auto* timer = new QTimer;
    timer->setInterval(20);
    QObject::connect(timer, &QTimer::timeout, [timer, act] {
        if (QWidget* w = QApplication::activeModalWidget()) {
            timer->stop();
            timer->deleteLater();
            act(w);
        }
    });
    timer->start();
}

// Selects all of the field's text and types `text` over it, key by key.
inline void retype(QLineEdit* e, const QString& text) {
    e->setFocus();
    e->selectAll();
    QTest::keyClick(e, Qt::Key_Backspace);
    QTest::keyClicks(e, text);
}

// Edits a message of the transcript in place as a user does: its Edit button, the new text typed
// over the old, Ctrl+Enter.
inline void editInPlace(QWidget* messageView, const QString& text) {
    auto* edit = messageView->findChild<QAbstractButton*>(QStringLiteral("editMessageButton"));
    QVERIFY(edit && edit->isEnabled());
    QTest::mouseClick(edit, Qt::LeftButton);
    auto* editor = messageView->findChild<QPlainTextEdit*>(QStringLiteral("messageEditorText"));
    QVERIFY(editor);
    editor->selectAll();
    QTest::keyClick(editor, Qt::Key_Backspace);
    QTest::keyClicks(editor, text);
    QTest::keyClick(editor, Qt::Key_Return, Qt::ControlModifier);
}

// Splits one CSV line with quoted fields ("a, b" and doubled quotes).
inline QStringList splitCsv(const QString& line) {
    QStringList out;
    QString cur;
    bool quoted = false;
    for (int i = 0; i < line.size(); ++i) {
        const QChar c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += '"', ++i;
            else if (c == '"') quoted = false;
            else cur += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            out << cur;
            cur.clear();
        } else {
            cur += c;
        }
    }
    out << cur;
    return out;
}

}  // namespace kvchat::test
