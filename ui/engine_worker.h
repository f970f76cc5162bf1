#pragma once
// The one object that touches the engine. It lives on its own QThread and owns the store, the
// model, the backend and the chat session (engine/chat/chat_session.h, where the chat's rules
// live: this class only converts values between it and Qt). The window talks to it only through
// queued signals and slots that carry values (ui/engine_values.h). Long steps (a model load, a turn)
// run inside one slot; stop() and cancelLoad() are the only calls meant for another thread, and
// they only set flags the running step checks.
//
// Streaming: answer text is batched (a signal at most every ~30 ms) and per-step cache telemetry
// is coalesced (at most ~30 signals a second), so the GUI thread never floods.
#include "ui/chat_panel.h"
#include "ui/chat_settings_value.h"
#include "ui/engine_values.h"
#include "ui/lab/lab_values.h"
#include "ui/search_match.h"

#include <QElapsedTimer>
#include <QLockFile>
#include <QObject>
#include <QThread>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace kvchat {

namespace api {
class ApiServer;
struct HostedSession;
}  // namespace api
class WorkerSessionHost;
class Store;
class StoreReader;
class Model;
class Backend;
class ChatSession;
struct TurnOptions;
struct TurnRequest;
struct Progress;

class EngineWorker : public QObject {
    Q_OBJECT
public:
    explicit EngineWorker(QObject* parent = nullptr);
    ~EngineWorker() override;

    // Thread-safe: stop the answer being generated (the partial answer is kept) / the model load.
    void stop() { stop_.store(true); }
    void cancelLoad() { cancelLoad_.store(true); }

    // Thread-safe, and meant to be called directly from the GUI thread: the read runs on the
    // store reader's thread (ui/store_reader.h), so it never waits behind a turn, and answers with
    // transcriptLoaded / searchResults. The cache telemetry of an opened conversation follows
    // from this worker's thread once it is free.
    void openConversation(qint64 id);
    void search(const QString& query);

    // The local API server's jobs (ui/worker_session_host.h), on this worker's thread: `job` gets
    // the window's session, after the model at `model_path` (empty: the one loaded) replaced the
    // loaded one when they differ. Throws kvchat::Error when there is no model.
    void runApiJob(const std::string& model_path, const std::function<void(api::HostedSession&)>& job);

    // How often streamed text and telemetry may be signalled.
    static constexpr int kTextBatchMs = 30;
    static constexpr int kTelemetryMs = 33;

public Q_SLOTS:
    // Opens (creating when missing) the database, refusing one another kvchat holds open.
    void openStore(const QString& path);
    void loadModel(const QString& path);
    // Starts (on) or stops the local API server on 127.0.0.1:port over this worker's session
    // (engine_worker_api.cpp); answers with apiServerChanged.
    void setApiServer(bool on, int port);

    void createConversation(const QString& system, qint64 prefixId);
    void renameConversation(qint64 id, const QString& title);
    void removeConversation(qint64 id);

    void send(qint64 id, const QString& text);
    void regenerate(qint64 id);
    void edit(qint64 id, int ordinal, const QString& text);
    void switchStrategy(qint64 id, const QString& spec);
    // Shows version `number` of the place at `ordinal` (engine/chat: select_version); the
    // transcript is read again (transcriptLoaded).
    void selectVersion(qint64 id, int ordinal, int number);
    // A new conversation of the first `at` messages whose first turn reuses this one's cache
    // (ChatSession::branch), opened (conversationCreated).
    void branchConversation(qint64 id, int at);
    // Validated, written to the database's settings and used from the next turn on.
    void saveSettings(const kvchat::ChatSettings& settings);

    void savePrefixFromText(const QString& name, const QString& text);
    void savePrefixFromConversation(const QString& name, qint64 conversationId, int messages);
    void editPrefix(qint64 id, const QString& text);
    void renamePrefix(qint64 id, const QString& name);
    void removePrefix(qint64 id);

    // Writes the caches changed since their last save (before the application quits).
    void shutdown();

    // The cache lab (engine_worker_lab.cpp): a switch's plan before Apply (nothing changes), the
    // strategy comparison (cancelled by stop()), and the snapshot's size on disk.
    void planSwitch(qint64 id, const QString& spec);
    void compare(const QStringList& strategies, qint64 conversationId, const QString& prompt, int genTokens);
    void reportSnapshot(qint64 id);

    // The storage view (engine_worker_storage.cpp): every saved cache against the budget; drop
    // one; set the budget (bytes < 0: the default) and apply it at once.
    void reportStorage();
    void dropCache(bool prefix, qint64 id);
    void setStorageBudget(qint64 bytes);

    // The chat panel (engine_worker_chat.cpp): a conversation's own settings and system prompt,
    // answered by chatPanelLoaded.
    void reportChatPanel(qint64 id);
    void saveChatSettings(qint64 id, const kvchat::ConversationSettings& own);
    void setSystemPrompt(qint64 id, const QString& text);

Q_SIGNALS:
    void storeOpened(const QString& path, const QList<kvchat::ConversationItem>& conversations,
                     const QList<kvchat::PrefixItem>& prefixes);
    void storeFailed(const QString& path, const QString& problem);

    void modelLoading(const QString& path);
    void modelProgress(const QString& task, qint64 done, qint64 total);
    void modelLoaded(const kvchat::ModelInfo& model);
    void modelFailed(const QString& path, const QString& problem);  // problem empty: cancelled

    void conversationsChanged(const QList<kvchat::ConversationItem>& conversations);
    void conversationCreated(const kvchat::ConversationItem& conversation);
    void transcriptLoaded(const kvchat::ConversationItem& conversation, const QList<kvchat::MessageItem>& messages);
    void searchResults(const QString& query, const QList<qint64>& ids);
    void searchMatched(const QString& query, const QList<kvchat::SearchMatch>& matches);  // just before searchResults

    void turnStarted(qint64 conversationId);
    void answerText(qint64 conversationId, const QString& piece);
    void turnFinished(const kvchat::TurnOutcome& outcome);
    // The turn did not happen (the request was refused before anything was stored: draft kept).
    void turnFailed(qint64 conversationId, const QString& problem, bool messageStored);
    void cacheTelemetry(qint64 conversationId, const kvchat::CacheTelemetry& telemetry);
    // A long step of a turn or a switch (loading a cache, prefilling, converting).
    void turnProgress(qint64 conversationId, const QString& task, qint64 done, qint64 total);
    void settingsLoaded(const kvchat::ChatSettings& settings);
    void strategySwitched(qint64 conversationId, const QString& spec, const QString& summary);

    void prefixesChanged(const QList<kvchat::PrefixItem>& prefixes);
    // Something the user should know that is not a failure of what they asked (a rebuilt
    // snapshot, a snapshot that could not be written).
    void notice(const QString& text);
    // A request failed; nothing was changed. `what` names the request ("Rename", "Save prefix").
    void failed(const QString& what, const QString& problem);
    void busyChanged(bool busy);
    // The API server's state for the status bar: its address while it serves, else why it does not.
    void apiServerChanged(const QString& state, bool serving);

    // The cache lab's answers.
    void switchPlanned(qint64 conversationId, const kvchat::ConversionPlan& plan);
    void switchPlanFailed(qint64 conversationId, const QString& spec, const QString& problem);
    void comparisonProgress(const QString& task, qint64 done, qint64 total);
    void comparisonFinished(const std::vector<kvchat::ComparisonRow>& rows);
    void comparisonFailed(const QString& problem);  // empty: cancelled
    void snapshotReported(qint64 conversationId, qint64 bytes);  // -1: none on disk
    void storageReported(const kvchat::StorageReport& report);
    void chatPanelLoaded(const kvchat::ChatPanelValues& values);

private:
    QList<ConversationItem> conversationItems() const;
    QList<PrefixItem> prefixItems() const;
    ConversationItem conversationItem(qint64 id) const;
    // Runs one turn (send, regenerate or edit) with streaming and telemetry.
    void runTurn(qint64 id, const TurnRequest& request);
    TurnOptions turnOptions(qint64 id) const;
    void makeSession();
    // Progress reports passed on by `report` at most every kTelemetryMs (a task's last one always),
    // and cancelled by `cancel`.
    static Progress throttled(std::function<void(const QString&, qint64, qint64)> report,
                              const std::atomic<bool>* cancel);
    // A turn's, a switch's or a prefix save's progress as turnProgress; Esc (stop()) cancels it.
    Progress turnProgressOf(qint64 conversationId);
    bool needModel(const QString& what);
    void emitNotices(const std::vector<std::string>& notices);

    std::unique_ptr<Store> store_;
    // Reads on a thread of its own; not a child (it must not move to this worker's thread).
    QThread readerThread_;
    StoreReader* reader_ = nullptr;
    std::unique_ptr<QLockFile> lock_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<ChatSession> session_;  // from openStore on; turns need the model too
    std::atomic<bool> stop_{false};
    std::atomic<bool> cancelLoad_{false};
    std::unique_ptr<ChatSettings> settings_;
    int backendThreads_ = -1;
    // The local API server (setApiServer): its way into this worker, itself, and the thread it
    // listens on. Stopped before anything else goes.
    void stopApiServer();
    std::unique_ptr<WorkerSessionHost> apiHost_;
    std::unique_ptr<api::ApiServer> apiServer_;
    std::thread apiThread_;
    std::string backendDevice_;  // the device setting the backend was opened for
};

}  // namespace kvchat
