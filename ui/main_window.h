#pragma once
// The chat window: conversations on the left, the transcript and the message box in the middle,
// docks on the right (the prefix library, the cache), the status bar below. Everything the
// engine does happens on the EngineWorker's thread; this class only sends it requests and shows
// the values it sends back.
#include "ui/engine_values.h"

#include <QMainWindow>
#include <QPointer>
#include <QThread>
#include <QTimer>

#include <memory>

class QAction;
class QComboBox;
class QDockWidget;
class QLabel;
class QLineEdit;
class QListView;
class QMenu;
class QProgressBar;
class QPushButton;
class QToolButton;

namespace kvchat {

class CacheLab;
class ChatPanel;
class ContextMeter;
class ConversationListModel;
class ConversationSearchModel;
class EngineWorker;
class MessageBox;
class ModelsDialog;
class PrefixLibraryPanel;
class StoragePanel;
class TranscriptModel;
class TranscriptView;
class ViewControls;
struct ApiServerSetting;
struct ChatSettings;

struct WindowOptions {
    QString databasePath;  // empty: the default database in the data folder
    QString modelPath;     // empty: the last model used, else the default model
    bool restoreState = true;  // geometry, docks and the open conversation from the last run
};

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(const WindowOptions& options = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    // For the docks and actions other parts add (the cache inspector connects to
    // worker()->cacheTelemetry; the strategy control sits beside the Send button).
    EngineWorker* worker() const { return worker_; }
    QComboBox* strategyControl() const { return strategy_; }
    QMenu* viewMenu() const { return viewMenu_; }
    CacheLab* cacheLab() const { return lab_; }
    ViewControls* viewControls() const { return view_; }
    ChatPanel* chatPanel() const { return chatPanel_; }
    // The item models the views show (for tests and tools): the open conversation's messages, the
    // conversations, and the list as shown (sorted, searched).
    TranscriptModel* transcriptModel() const { return transcript_; }
    ConversationListModel* conversationModel() const { return conversations_; }
    ConversationSearchModel* conversationSearch() const { return shownConversations_; }
    qint64 currentConversation() const { return currentId_; }
    bool modelReady() const { return modelReady_; }
    bool answering() const { return answering_; }
    const ModelInfo& model() const { return model_; }

    // Types `text` into the message box and sends it (what the user does; used by --startup-report).
    void sendMessage(const QString& text);
    void loadModel(const QString& path);

Q_SIGNALS:
    void currentConversationChanged(qint64 id);
    void modelReadyChanged(bool ready);
    void answerStarted(qint64 conversationId);   // the first text of an answer arrived
    void answerFinished(const kvchat::TurnOutcome& outcome);

    // Requests to the worker (queued: the worker lives on its own thread).
    void requestOpenStore(const QString& path);
    void requestLoadModel(const QString& path);
    void requestCreate(const QString& system, qint64 prefixId);
    void requestRename(qint64 id, const QString& title);
    void requestRemove(qint64 id);
    void requestSend(qint64 id, const QString& text);
    void requestRegenerate(qint64 id);
    void requestEdit(qint64 id, int ordinal, const QString& text);
    void requestSwitchStrategy(qint64 id, const QString& spec);
    void requestSaveSettings(const kvchat::ChatSettings& settings);
    // The model could not be loaded (problem empty: the load was cancelled).
    void modelLoadFailed(const QString& path, const QString& problem);
    // The database cannot be used (another kvchat holds it, it is damaged, ...), just before the
    // dialog that says so opens: a start without a screen (--startup-report) reports it instead.
    void storeOpenFailed(const QString& path, const QString& problem);

protected:
    void showEvent(QShowEvent* e) override;
    void closeEvent(QCloseEvent* e) override;
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;

private:
    // Construction, one part each.
    void createActions();
    void createMenus();
    QWidget* createConversationPane();
    QWidget* createChatPane();
    void createDocks();
    void createStatusBar();
    void connectWorker();
    void restoreWindowState();

    // Reactions.
    void onStoreOpened(const QString& path, const QList<ConversationItem>& conversations, const QList<PrefixItem>& prefixes);
    void onStoreFailed(const QString& path, const QString& problem);
    void onModelLoaded(const ModelInfo& model);
    void onModelFailed(const QString& path, const QString& problem);
    void onConversations(const QList<ConversationItem>& conversations);
    void onTranscript(const ConversationItem& conversation, const QList<MessageItem>& messages);
    void onTurnFinished(const TurnOutcome& outcome);
    void onTurnFailed(qint64 id, const QString& problem, bool messageStored);
    void selectConversation(qint64 id);
    // The open conversation becomes the list's current row (when the list shows it).
    void markCurrentInList();
    // Reads the conversation's messages again (they arrive as transcriptLoaded).
    void readTranscript(qint64 id);
    void search();
    void newChat(qint64 prefixId = 0);
    void send();
    void startSend(const QString& text);
    void regenerate();
    void editMessage(int ordinal, const QString& text);
    void renameCurrent();
    void deleteCurrent();
    void showNotice(const QString& text, bool problem = false, bool inStatusBar = true);
    // The conversation list counts the rows of a turn under way.
    void showStreamingCount();
    void updateSendState();
    void updateStatus(const ConversationItem* conversation);
    void rememberModel(const QString& path);
    // The local API server setting (QSettings api/serve, api/port), and handing it to the worker.
    ApiServerSetting apiServerSetting() const;
    void applyApiServer();
    void updateRecentModels();
    void setAnswering(bool answering);
    void openSettings();
    void showModels();

    WindowOptions options_;
    QThread thread_;
    EngineWorker* worker_ = nullptr;
    ConversationListModel* conversations_ = nullptr;
    ConversationSearchModel* shownConversations_ = nullptr;
    TranscriptModel* transcript_ = nullptr;

    QListView* list_ = nullptr;
    QLineEdit* search_ = nullptr;
    TranscriptView* transcriptView_ = nullptr;
    MessageBox* input_ = nullptr;
    QPushButton* send_ = nullptr;
    QPushButton* stop_ = nullptr;
    QComboBox* strategy_ = nullptr;
    QString requestedSpec_;  // the strategy the key press being handled asked for (see createChatPane)
    QLabel* notice_ = nullptr;
    QTimer searchDelay_;

    QDockWidget* inspectorDock_ = nullptr;
    CacheLab* lab_ = nullptr;
    ViewControls* view_ = nullptr;
    QDockWidget* prefixDock_ = nullptr;
    PrefixLibraryPanel* prefixes_ = nullptr;
    QDockWidget* storageDock_ = nullptr;
    QDockWidget* chatDock_ = nullptr;
    ChatPanel* chatPanel_ = nullptr;
    StoragePanel* storage_ = nullptr;

    QLabel* modelLabel_ = nullptr;
    QLabel* strategyLabel_ = nullptr;
    ContextMeter* contextBar_ = nullptr;
    QLabel* kvLabel_ = nullptr;
    QLabel* lastAnswerLabel_ = nullptr;
    QLabel* apiLabel_ = nullptr;  // the local API server's address, or why it does not serve
    QProgressBar* loadBar_ = nullptr;
    QToolButton* cancelLoad_ = nullptr;

    QMenu* viewMenu_ = nullptr;
    QMenu* recentMenu_ = nullptr;
    QMenu* installedMenu_ = nullptr;
    QAction* newChatAction_ = nullptr;
    QAction* openModelAction_ = nullptr;
    QAction* modelsAction_ = nullptr;
    ModelsDialog* models_ = nullptr;  // made when first shown
    QAction* openFolderAction_ = nullptr;
    QAction* findAction_ = nullptr;
    QAction* renameAction_ = nullptr;
    QAction* deleteAction_ = nullptr;
    QAction* regenerateAction_ = nullptr;
    QAction* stopAction_ = nullptr;
    QAction* quitAction_ = nullptr;
    QAction* settingsAction_ = nullptr;

    ModelInfo model_;
    std::unique_ptr<ChatSettings> settings_;
    QString storePath_;
    qint64 currentId_ = 0;
    qint64 restoreId_ = 0;
    bool storeReady_ = false;
    bool modelReady_ = false;
    bool answering_ = false;
    bool newChatWhenReady_ = false;
    bool answerHasText_ = false;
    // A message sent before its conversation was there (a first message makes one) or before its
    // messages were shown: it is sent when they are.
    QString queuedMessage_;
    QPointer<QWidget> errorDialog_;
};

}  // namespace kvchat
