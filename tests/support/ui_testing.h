#pragma once
// What the window suites share: a fresh user profile, where screenshots go, typing over a
// field's text as a user does, and reading exported CSV back independently of the writer.
#include <QApplication>
#include <QDir>
#include <QAbstractButton>
#include <QFile>
#include <QScreen>
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

namespace kvchat::test {

// Before the QApplication exists: on the offscreen platform (the suites' default), two screens
// side by side, a desktop's 1600×1000 and a laptop's 1000×700, so the layout suites can put a
// window on either. Elsewhere (a real display) nothing changes. The platform reads its screens
// from a file named in QT_QPA_PLATFORM; the file outlives the suite's run in the temp folder.
inline void useDesktopAndLaptopScreens() {
    if (qgetenv("QT_QPA_PLATFORM") != "offscreen") return;
    const QString path = QDir::temp().filePath(QStringLiteral("kvchat-test-screens.json"));
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return;
    f.write(R"({"screens": [
  {"name": "desktop", "x": 0, "y": 0, "width": 1600, "height": 1000, "logicalDpi": 96, "dpr": 1},
  {"name": "laptop", "x": 1600, "y": 0, "width": 1000, "height": 700, "logicalDpi": 96, "dpr": 1}
]})");
    f.close();
    qputenv("QT_QPA_PLATFORM", ("offscreen:configfile=" + path).toUtf8());
}

// The screen of that size (see useDesktopAndLaptopScreens); null when there is none.
inline QScreen* screenOfSize(const QSize& size) {
    for (QScreen* s : QGuiApplication::screens())
        if (s->geometry().size() == size) return s;
    return nullptr;
}

}  // namespace kvchat::test

// QTEST_MAIN with the two screens above.
#define KVCHAT_TEST_MAIN_WITH_SCREENS(TestObject)                 \
    int main(int argc, char* argv[]) {                            \
        kvchat::test::useDesktopAndLaptopScreens();               \
        QApplication app(argc, argv);                             \
        app.setAttribute(Qt::AA_Use96Dpi, true);                  \
        TestObject tc;                                            \
        QTEST_SET_MAIN_SOURCE_PATH                                \
        return QTest::qExec(&tc, argc, argv);                     \
    }
