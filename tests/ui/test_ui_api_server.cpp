// The window's local API server: switched on in Settings ("Serve the API on localhost:PORT"), its
// address in the status bar, a chat completion answered through the window's own session on the
// worker's thread (the conversation shows in the list), and switched off again. A tiny model.
#define QT_NO_KEYWORDS  // the engine's chat headers use the word "emit"
#include "engine/chat/chat_settings.h"
#include "engine/store/store.h"
#include "support/chat_window.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/conversation_list_model.h"
#include "ui/engine_worker.h"
#include "ui/main_window.h"
#include "ui/settings_dialog.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <QAction>
#include <QCheckBox>
#include <QLabel>
#include <QListView>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

using namespace kvchat;

namespace {

// A port nothing listens on now (bound to 0 and let go).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    ::close(fd);
    return port;
}

}  // namespace

class TestUiApiServer : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString model_;

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        kvchat::test::useFreshProfile(home_.path());
        model_ = test::writeTinyChatModel(home_.path());
    }

    void serveFromSettings() {
        const QString db = home_.path() + "/api/kvchat.db";
        QDir().mkpath(QFileInfo(db).absolutePath());
        {
            Store store(db.toStdString());
            ChatSettings s;
            s.threads = 2;
            s.save(store);
        }
        auto w = test::openChatWindow(db, model_);
        QVERIFY(w);
        auto* label = w->findChild<QLabel*>("apiServerLabel");
        QVERIFY(label);
        QVERIFY(!label->isVisible());  // off by default

        const int port = free_port();
        QVERIFY(port > 0);
        QTest::keyClick(w.get(), Qt::Key_Comma, Qt::ControlModifier);
        SettingsDialog* d = nullptr;
        QTRY_VERIFY((d = w->findChild<SettingsDialog*>("settingsDialog")) != nullptr);
        auto* serve = d->findChild<QCheckBox*>("serveApiSetting");
        QVERIFY(!serve->isChecked());
        d->findChild<QSpinBox*>("apiPortSetting")->setValue(port);
        QCOMPARE(serve->text(), QString("Serve the API on localhost:%1").arg(port));
        serve->setChecked(true);
        d->accept();
        const QString address = QString("http://127.0.0.1:%1/v1").arg(port);
        QTRY_VERIFY_WITH_TIMEOUT(label->isVisible() && label->text().contains(address), 30000);

        // A request computes on the worker's thread while this (GUI) thread keeps running.
        const int before = w->findChild<QListView*>("conversationList")->model()->rowCount();
        int status = 0;
        std::string body;
        std::thread client([&] {
            httplib::Client c("127.0.0.1", port);
            c.set_read_timeout(120, 0);
            const nlohmann::json req = {{"messages", {{{"role", "user"}, {"content", "hello from a script"}}}},
                                        {"temperature", 0},
                                        {"max_tokens", 8}};
            auto r = c.Post("/v1/chat/completions", req.dump(), "application/json");
            status = r ? r->status : -1;
            if (r) body = r->body;
        });
        QTRY_VERIFY_WITH_TIMEOUT(status != 0, 120000);
        client.join();
        QCOMPARE(status, 200);
        const nlohmann::json j = nlohmann::json::parse(body);
        QVERIFY(j["kvchat"]["conversation_id"].get<int64_t>() > 0);
        QCOMPARE(j["object"].get<std::string>(), std::string("chat.completion"));
        // The conversation it made is in the window's list.
        QTRY_COMPARE_WITH_TIMEOUT(w->findChild<QListView*>("conversationList")->model()->rowCount(), before + 1, 30000);
        // ... marked as the API's (the window's own chats are not).
        QAbstractItemModel* shown = w->findChild<QListView*>("conversationList")->model();
        int fromApi = 0;
        for (int r = 0; r < shown->rowCount(); ++r) {
            const QModelIndex i = shown->index(r, 0);
            if (!i.data(ConversationListModel::FromApiRole).toBool()) continue;
            ++fromApi;
            QCOMPARE(i.data(ConversationListModel::IdRole).toLongLong(), j["kvchat"]["conversation_id"].get<qint64>());
            QVERIFY(i.data(Qt::ToolTipRole).toString().contains("local API server"));
        }
        QCOMPARE(fromApi, 1);

        // Off again: the label goes and nothing listens.
        QTRY_VERIFY(w->findChild<SettingsDialog*>("settingsDialog") == nullptr);  // the first one is gone
        w->findChild<QAction*>("settingsAction")->trigger();
        d = nullptr;
        QTRY_VERIFY((d = w->findChild<SettingsDialog*>("settingsDialog")) != nullptr);
        QVERIFY(d->findChild<QCheckBox*>("serveApiSetting")->isChecked());
        d->findChild<QCheckBox*>("serveApiSetting")->setChecked(false);
        d->accept();
        QTRY_VERIFY_WITH_TIMEOUT(!label->isVisible(), 30000);
        httplib::Client c("127.0.0.1", port);
        QVERIFY(!c.Get("/health"));
    }
};

QTEST_MAIN(TestUiApiServer)
#include "test_ui_api_server.moc"
