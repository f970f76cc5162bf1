#pragma once
// What the suites that drive the whole chat window share: a tiny chat model, a database holding
// the suite's answer settings, the window opened on it and waited for, a question typed and its
// answer waited for, and the transcript's message views. The engine's chat headers use the word
// "emit": a suite defines QT_NO_KEYWORDS before including this.
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/message_view.h"
#include "ui/transcript_view.h"

#include <QDir>
#include <QFileInfo>
#include <QSignalSpy>
#include <QSize>
#include <QString>
#include <QtTest>

#include <memory>
#include <vector>

namespace kvchat::test {

// How long a window suite waits for one answer of the tiny model on a busy machine.
inline constexpr int kAnswerTimeoutMs = 120000;

// Writes the tiny chat model (four layers) into `home` and returns its path.
inline QString writeTinyChatModel(const QString& home) {
    const QString path = home + QStringLiteral("/tiny.gguf");
    write_tiny_gguf(chat_sized_spec(4), path.toStdString());
    return path;
}

// Greedy answers repeat; drawn ones take a fresh seed each time, so a regenerated one may differ.
enum class Answers { Greedy, Drawn };

// Saves the settings a window suite answers with into the database at `db` (its folder made):
// at most `maxNewTokens` per answer, two threads (the machine is shared).
inline void writeChatSettings(const QString& db, int maxNewTokens, Answers answers = Answers::Greedy) {
    QDir().mkpath(QFileInfo(db).absolutePath());
    Store store(db.toStdString());
    ChatSettings s;
    s.sampling.greedy = answers == Answers::Greedy;
    s.random_seed = answers == Answers::Drawn;
    s.max_new_tokens = maxNewTokens;
    s.threads = 2;
    s.save(store);
}

// A new database for each test, db1, db2... under `home` (so tests do not see each other's
// chats), holding the suite's answer settings; `count` is the suite's counter.
inline QString freshChatDb(const QString& home, int& count, int maxNewTokens, Answers answers = Answers::Greedy) {
    const QString db = home + QStringLiteral("/db%1/kvchat.db").arg(++count);
    writeChatSettings(db, maxNewTokens, answers);
    return db;
}

// Opens the window on `db` with `model`, without a saved layout, resized to `size` when given.
// Null unless it is shown and, within a minute, its model is loaded and a conversation open.
inline std::unique_ptr<MainWindow> openChatWindow(const QString& db, const QString& model, QSize size = {}) {
    WindowOptions o;
    o.databasePath = db;
    o.modelPath = model;
    o.restoreState = false;
    auto w = std::make_unique<MainWindow>(o);
    if (size.isValid()) w->resize(size);
    w->show();
    if (!QTest::qWaitForWindowExposed(w.get())) return nullptr;
    if (!QTest::qWaitFor([&] { return w->modelReady() && w->currentConversation() != 0; }, 60000)) return nullptr;
    return w;
}

inline TranscriptView* transcriptOf(MainWindow& w) { return w.findChild<TranscriptView*>("transcriptView"); }

// The transcript's view of message `row`; null past the end.
inline MessageView* messageViewAt(MainWindow& w, int row) {
    const auto views = transcriptOf(w)->messageViews();
    return row < views.size() ? views[row] : nullptr;
}

// Types `text` into the message box and presses Enter, as a user sends; true once the answer
// has finished.
inline bool typeAndSend(MainWindow& w, const QString& text) {
    QSignalSpy done(&w, &MainWindow::answerFinished);
    auto* box = w.findChild<MessageBox*>("messageInput");
    box->setFocus();
    QTest::keyClicks(box, text);
    QTest::keyClick(box, Qt::Key_Return);
    return done.wait(kAnswerTimeoutMs) || done.count() > 0;
}

// The conversation's messages as the database holds them (read through a store of its own).
inline std::vector<MessageRecord> storedMessages(const QString& db, qint64 conversation) {
    Store store(db.toStdString());
    return store.list_messages(conversation);
}

}  // namespace kvchat::test
