#include "ui/main_window.h"

#include "ui/lab/cache_lab.h"
#include "ui/lab/comparison_view.h"
#include "ui/lab/strategy_panel.h"

#include "ui/chat_panel.h"
#include "ui/context_meter.h"
#include "ui/inspector/byte_size_text.h"

#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "ui/conversation_delegate.h"
#include "ui/conversation_list_model.h"
#include "ui/conversation_search.h"
#include "ui/conversation_search_model.h"
#include "ui/elided_label.h"
#include "ui/engine_worker.h"
#include "ui/message_box.h"
#include "ui/models/model_name_clicks.h"
#include "ui/models/models_dialog.h"
#include "ui/prefix_library_panel.h"
#include "ui/storage_panel.h"
#include "ui/settings_dialog.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"
#include "ui/view_controls.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDateTime>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <utility>

namespace kvchat {

namespace {

constexpr int kRecentModels = 8;

// One unit family in the whole window: binary (KiB, MiB, GiB), as the inspector writes them.
QString bytesText(qint64 bytes) { return byteSizeText(bytes); }

// The strategies offered beside the Send button; any other spec can be typed in.
const char* const kStrategies[] = {"dynamic",   "static:max_len=4096", "offloaded", "quantized:nbits=4",
                                   "quantized:nbits=2", "sliding_window:window=1024", "sink:window=1024,sinks=4",
                                   "hybrid"};

bool isModelPath(const QString& path) {
    const QFileInfo f(path);
    return (f.isFile() && path.endsWith(QStringLiteral(".gguf"), Qt::CaseInsensitive)) ||
           (f.isDir() && QFileInfo::exists(path + QStringLiteral("/config.json")));
}

}  // namespace

MainWindow::MainWindow(const WindowOptions& options, QWidget* parent)
    : QMainWindow(parent), options_(options), settings_(std::make_unique<ChatSettings>()) {
    registerEngineValues();
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(QStringLiteral("kvchat"));
    setAcceptDrops(true);
    // A first start fills most of the screen: the chat, the list and the docks all need room.
    if (const QScreen* screen = QGuiApplication::primaryScreen()) {
        const QSize avail = screen->availableSize();
        resize(avail.width() * 9 / 10, avail.height() * 9 / 10);  // (a laptop's 1000 px too)
    } else {
        resize(1280, 820);
    }

    conversations_ = new ConversationListModel(this);
    conversations_->setObjectName(QStringLiteral("conversationModel"));
    shownConversations_ = new ConversationSearchModel(this);
    shownConversations_->setSourceModel(conversations_);
    transcript_ = new TranscriptModel(this);
    createActions();
    createMenus();
    auto* splitter = new QSplitter;
    splitter->setObjectName(QStringLiteral("mainSplitter"));
    splitter->addWidget(createConversationPane());
    splitter->addWidget(createChatPane());
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 4);
    splitter->setSizes({260, 900});
    setCentralWidget(splitter);
    createDocks();
    createStatusBar();
    // The chat keeps most of the width; the docks start narrow (the user widens them).
    // (Wide enough for the chat panel's strategy fields, about 430 px, without clipping them.)
    resizeDocks({inspectorDock_}, {std::max(440, width() / 4)}, Qt::Horizontal);

    worker_ = new EngineWorker;
    worker_->moveToThread(&thread_);
    thread_.setObjectName(QStringLiteral("engine"));
    connectWorker();
    // The cache inspector, strategy panel and comparison view, before the docks' state is restored.
    lab_ = new CacheLab(worker_, this, inspectorDock_, viewMenu_);
    connect(this, &MainWindow::currentConversationChanged, lab_, &CacheLab::setConversation);
    // The inspector's shortcut and button, colours, the docks' room on a small screen.
    // (The comparison view's dock is the one the lab put it in.)
    view_ = new ViewControls(this, viewMenu_, inspectorDock_, qobject_cast<QDockWidget*>(lab_->comparisonView()->parentWidget()));
    // Search results show the words around their match, and opening one jumps to its message.
    auto* found = new ConversationSearch(search_, list_, shownConversations_, transcriptView_, this);
    connect(worker_, &EngineWorker::searchMatched, found, &ConversationSearch::showMatches);
    connect(this, &MainWindow::currentConversationChanged, found, &ConversationSearch::jumpToMatch);
    chatPanel_->setStrategyWidget(lab_->strategyPanel());
    thread_.start();

    if (options_.restoreState) restoreWindowState();
    storePath_ = options_.databasePath.isEmpty() ? QString::fromStdString(Store::default_path()) : options_.databasePath;
    // The model asked for (even one that is missing: the user is told), else $KVCHAT_MODEL (the
    // worker resolves it, as kvchat-cli does), else the last one used while it still exists, else
    // the default model.
    QString model = options_.modelPath;
    if (model.isEmpty() && qEnvironmentVariableIsEmpty("KVCHAT_MODEL")) {
        model = QSettings().value(QStringLiteral("models/last")).toString();
        // Empty: the worker looks for the default model (and says how to install it when missing).
        if (!model.isEmpty() && !QFileInfo::exists(model)) model.clear();
    }
    Q_EMIT requestOpenStore(storePath_);
    loadModel(model);
    if (apiServerSetting().serve) applyApiServer();  // after the store and the model, in the worker's queue
    updateRecentModels();
    updateSendState();
    input_->setFocus();
}

MainWindow::~MainWindow() {
    worker_->stop();
    worker_->cancelLoad();
    // The worker saves changed caches on its own thread, then the thread ends.
    QMetaObject::invokeMethod(worker_, &EngineWorker::shutdown, Qt::QueuedConnection);
    thread_.quit();
    thread_.wait();
    delete worker_;
}

// ---- construction ----

void MainWindow::createActions() {
    auto make = [this](const QString& text, const QString& name, const QKeySequence& key = {}) {
        auto* a = new QAction(text, this);
        a->setObjectName(name);
        if (!key.isEmpty()) a->setShortcut(key);
        addAction(a);
        return a;
    };
    newChatAction_ = make(tr("&New chat"), QStringLiteral("newChatAction"), QKeySequence::New);
    connect(newChatAction_, &QAction::triggered, this, [this] { newChat(); });
    openModelAction_ = make(tr("&Open model file…"), QStringLiteral("openModelAction"), QKeySequence::Open);
    connect(openModelAction_, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open a model"), QFileInfo(model_.path).absolutePath(),
                                                          tr("GGUF models (*.gguf);;All files (*)"));
        if (!path.isEmpty()) loadModel(path);
    });
    modelsAction_ = make(tr("&Models…"), QStringLiteral("modelsAction"), QKeySequence(Qt::CTRL | Qt::Key_L));
    connect(modelsAction_, &QAction::triggered, this, &MainWindow::showModels);
    openFolderAction_ = make(tr("Open model &folder…"), QStringLiteral("openModelFolderAction"));
    connect(openFolderAction_, &QAction::triggered, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a Hugging Face model folder"));
        if (!dir.isEmpty()) loadModel(dir);
    });
    findAction_ = make(tr("&Search conversations"), QStringLiteral("findAction"), QKeySequence(Qt::CTRL | Qt::Key_K));
    connect(findAction_, &QAction::triggered, this, [this] {
        search_->setFocus();
        search_->selectAll();
    });
    renameAction_ = make(tr("&Rename conversation"), QStringLiteral("renameAction"), QKeySequence(Qt::Key_F2));
    connect(renameAction_, &QAction::triggered, this, &MainWindow::renameCurrent);
    deleteAction_ = make(tr("&Delete conversation…"), QStringLiteral("deleteAction"), QKeySequence(Qt::CTRL | Qt::Key_Delete));
    connect(deleteAction_, &QAction::triggered, this, &MainWindow::deleteCurrent);
    regenerateAction_ = make(tr("Re&generate answer"), QStringLiteral("regenerateAction"), QKeySequence(Qt::CTRL | Qt::Key_R));
    connect(regenerateAction_, &QAction::triggered, this, &MainWindow::regenerate);
    stopAction_ = make(tr("&Stop answer"), QStringLiteral("stopAction"), QKeySequence(Qt::Key_Escape));
    connect(stopAction_, &QAction::triggered, this, [this] {
        if (answering_) {
            worker_->stop();
        } else if (!queuedMessage_.isEmpty()) {
            // Not sent yet: it goes back into the box.
            if (input_->isBlank()) input_->setPlainText(queuedMessage_);
            queuedMessage_.clear();
            updateSendState();
        }
    });
    settingsAction_ = make(tr("&Settings…"), QStringLiteral("settingsAction"), QKeySequence(Qt::CTRL | Qt::Key_Comma));
    connect(settingsAction_, &QAction::triggered, this, &MainWindow::openSettings);
    quitAction_ = make(tr("&Quit"), QStringLiteral("quitAction"), QKeySequence::Quit);
    connect(quitAction_, &QAction::triggered, this, &QWidget::close);
}

void MainWindow::createMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(newChatAction_);
    file->addSeparator();
    file->addAction(modelsAction_);
    file->addAction(openModelAction_);
    file->addAction(openFolderAction_);
    recentMenu_ = file->addMenu(tr("&Recent models"));
    recentMenu_->setObjectName(QStringLiteral("recentModelsMenu"));
    // The models packaging/kvchat.sh model installs: the chat model and the reference model are
    // one choice apart.
    installedMenu_ = file->addMenu(tr("&Installed models"));
    installedMenu_->setObjectName(QStringLiteral("installedModelsMenu"));
    for (const InstalledModel& m : installed_models()) {
        const QString path = QString::fromStdString(m.path);
        QAction* a = installedMenu_->addAction(QString::fromStdString(m.name));
        a->setToolTip(path);
        connect(a, &QAction::triggered, this, [this, path] { loadModel(path); });
    }
    installedMenu_->setEnabled(!installedMenu_->isEmpty());
    file->addSeparator();
    file->addAction(settingsAction_);
    file->addSeparator();
    file->addAction(quitAction_);
    QMenu* chat = menuBar()->addMenu(tr("&Conversation"));
    chat->addAction(findAction_);
    chat->addAction(renameAction_);
    chat->addAction(deleteAction_);
    chat->addSeparator();
    chat->addAction(regenerateAction_);
    chat->addAction(stopAction_);
    viewMenu_ = menuBar()->addMenu(tr("&View"));
    viewMenu_->setObjectName(QStringLiteral("viewMenu"));
}

QWidget* MainWindow::createConversationPane() {
    auto* pane = new QWidget;
    pane->setObjectName(QStringLiteral("conversationPane"));
    pane->setMinimumWidth(200);
    auto* v = new QVBoxLayout(pane);
    v->setContentsMargins(6, 6, 0, 6);
    auto* newChat = new QPushButton(tr("New chat"));
    newChat->setObjectName(QStringLiteral("newChatButton"));
    newChat->setAccessibleName(tr("New chat"));
    newChat->setToolTip(tr("New chat (%1)").arg(newChatAction_->shortcut().toString(QKeySequence::NativeText)));
    connect(newChat, &QPushButton::clicked, newChatAction_, &QAction::trigger);
    search_ = new QLineEdit;
    search_->setObjectName(QStringLiteral("conversationSearch"));
    search_->setAccessibleName(tr("Search conversations"));
    search_->setPlaceholderText(tr("Search (Ctrl+K)"));
    search_->setClearButtonEnabled(true);
    searchDelay_.setSingleShot(true);
    searchDelay_.setInterval(150);
    connect(search_, &QLineEdit::textChanged, this, [this] { searchDelay_.start(); });
    connect(&searchDelay_, &QTimer::timeout, this, &MainWindow::search);
    connect(search_, &QLineEdit::returnPressed, this, [this] {
        if (shownConversations_->rowCount() > 0) {
            list_->setFocus();
            list_->setCurrentIndex(shownConversations_->index(0, 0));
        }
    });
    list_ = new QListView;
    list_->setObjectName(QStringLiteral("conversationList"));
    list_->setAccessibleName(tr("Conversations"));
    list_->setModel(shownConversations_);
    list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    list_->setTextElideMode(Qt::ElideRight);
    list_->setUniformItemSizes(true);
    list_->setItemDelegate(new ConversationDelegate(list_));
    list_->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::SelectedClicked);
    list_->setContextMenuPolicy(Qt::ActionsContextMenu);
    list_->addAction(renameAction_);
    list_->addAction(deleteAction_);
    connect(list_->selectionModel(), &QItemSelectionModel::currentChanged, this, [this](const QModelIndex& index) {
        const qint64 id = shownConversations_->idAt(index.row());
        if (id != 0 && id != currentId_) selectConversation(id);
    });
    connect(conversations_, &ConversationListModel::renameRequested, this, &MainWindow::requestRename);
    v->addWidget(newChat);
    v->addWidget(search_);
    v->addWidget(list_, 1);
    return pane;
}

QWidget* MainWindow::createChatPane() {
    auto* pane = new QWidget;
    pane->setObjectName(QStringLiteral("chatPane"));
    auto* v = new QVBoxLayout(pane);
    v->setContentsMargins(0, 6, 6, 6);
    transcriptView_ = new TranscriptView;
    transcriptView_->setModel(transcript_);
    connect(transcriptView_, &TranscriptView::editRequested, this, &MainWindow::editMessage);
    connect(transcriptView_, &TranscriptView::regenerateRequested, this, &MainWindow::regenerate);
    connect(transcriptView_, &TranscriptView::versionRequested, this, [this](int ordinal, int number) {
        if (answering_ || currentId_ == 0) return;
        QMetaObject::invokeMethod(worker_, [w = worker_, id = currentId_, ordinal, number] { w->selectVersion(id, ordinal, number); },
                                  Qt::QueuedConnection);
    });
    connect(transcriptView_, &TranscriptView::branchRequested, this, [this](int ordinal) {
        if (answering_ || currentId_ == 0) return;
        // The messages up to and with this one; the branch opens when it is made (conversationCreated).
        QMetaObject::invokeMethod(worker_, [w = worker_, id = currentId_, ordinal] { w->branchConversation(id, ordinal + 1); },
                                  Qt::QueuedConnection);
    });
    notice_ = new QLabel;
    notice_->setObjectName(QStringLiteral("noticeBanner"));
    notice_->setAccessibleName(tr("Notice"));
    notice_->setWordWrap(true);
    notice_->setFrameShape(QFrame::StyledPanel);
    notice_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    notice_->setVisible(false);
    input_ = new MessageBox;
    connect(input_, &MessageBox::submitted, this, &MainWindow::send);
    connect(input_, &QPlainTextEdit::textChanged, this, &MainWindow::updateSendState);

    auto* row = new QHBoxLayout;
    auto* strategyLabel = new QLabel(tr("&Cache:"));
    strategy_ = new QComboBox;
    strategy_->setObjectName(QStringLiteral("cacheStrategy"));
    strategy_->setAccessibleName(tr("Cache strategy"));
    strategy_->setToolTip(tr("The KV cache strategy of this conversation (changing it converts the cache)"));
    strategy_->setEditable(true);
    strategy_->setInsertPolicy(QComboBox::NoInsert);
    for (const char* s : kStrategies) strategy_->addItem(QString::fromLatin1(s));
    strategy_->setMinimumContentsLength(18);
    strategyLabel->setBuddy(strategy_);
    // A strategy chosen from the list, or any spec typed into the box and entered. (QComboBox acts
    // on entered text only when it names a list entry other than its current one: a spec of one's
    // own did nothing, nor did "dynamic" typed while the list still pointed at it.) Return also
    // makes the box activate a matching entry in the same key press: one request for both.
    auto applyStrategy = [this] {
        const QString spec = strategy_->currentText().trimmed();
        if (currentId_ == 0 || answering_ || spec.isEmpty() || spec == requestedSpec_) return;
        requestedSpec_ = spec;
        QTimer::singleShot(0, this, [this] { requestedSpec_.clear(); });
        Q_EMIT requestSwitchStrategy(currentId_, spec);
    };
    connect(strategy_, &QComboBox::activated, this, applyStrategy);
    connect(strategy_->lineEdit(), &QLineEdit::returnPressed, this, applyStrategy);
    stop_ = new QPushButton(tr("Stop"));
    stop_->setObjectName(QStringLiteral("stopButton"));
    stop_->setAccessibleName(tr("Stop the answer"));
    stop_->setToolTip(tr("Stop the answer (Esc); what was written is kept"));
    connect(stop_, &QPushButton::clicked, stopAction_, &QAction::trigger);
    send_ = new QPushButton(tr("Send"));
    send_->setObjectName(QStringLiteral("sendButton"));
    send_->setAccessibleName(tr("Send"));
    send_->setDefault(true);
    send_->setToolTip(tr("Send (Enter)"));
    connect(send_, &QPushButton::clicked, this, &MainWindow::send);
    row->addWidget(strategyLabel);
    row->addWidget(strategy_);
    row->addStretch(1);
    row->addWidget(stop_);
    row->addWidget(send_);

    v->addWidget(transcriptView_, 1);
    v->addWidget(notice_);
    v->addWidget(input_);
    v->addLayout(row);
    return pane;
}

void MainWindow::createDocks() {
    prefixDock_ = new QDockWidget(tr("Prefix library"), this);
    prefixDock_->setObjectName(QStringLiteral("prefixLibraryDock"));
    prefixes_ = new PrefixLibraryPanel;
    prefixDock_->setWidget(prefixes_);
    addDockWidget(Qt::RightDockWidgetArea, prefixDock_);
    viewMenu_->addAction(prefixDock_->toggleViewAction());
    connect(prefixes_, &PrefixLibraryPanel::newChatRequested, this, [this](qint64 id) { newChat(id); });

    // The cache of the open conversation; the cache inspector takes this dock's place.
    inspectorDock_ = new QDockWidget(tr("Cache inspector"), this);
    inspectorDock_->setObjectName(QStringLiteral("cacheInspectorDock"));
    // Its content, the cache inspector, is the cache lab's (ui/lab/cache_lab.cpp).
    addDockWidget(Qt::RightDockWidgetArea, inspectorDock_);
    tabifyDockWidget(inspectorDock_, prefixDock_);
    viewMenu_->addAction(inspectorDock_->toggleViewAction());

    // The open chat's own settings, with its cache strategy (the strategy panel goes in it).
    chatDock_ = new QDockWidget(tr("Chat"), this);
    chatDock_->setObjectName(QStringLiteral("chatPanelDock"));
    chatPanel_ = new ChatPanel;
    chatDock_->setWidget(chatPanel_);
    addDockWidget(Qt::RightDockWidgetArea, chatDock_);
    viewMenu_->addAction(chatDock_->toggleViewAction());

    // What the saved caches take on disk, against their budget.
    storageDock_ = new QDockWidget(tr("Storage"), this);
    storageDock_->setObjectName(QStringLiteral("storageDock"));
    storage_ = new StoragePanel;
    storageDock_->setWidget(storage_);
    addDockWidget(Qt::RightDockWidgetArea, storageDock_);
    tabifyDockWidget(prefixDock_, storageDock_);
    viewMenu_->addAction(storageDock_->toggleViewAction());
    inspectorDock_->raise();
}

void MainWindow::createStatusBar() {
    auto label = [this](const QString& name, const QString& accessible) {
        auto* l = new ElidedLabel;  // gives way rather than widen the window
        l->setObjectName(name);
        l->setAccessibleName(accessible);
        statusBar()->addPermanentWidget(l);
        return l;
    };
    loadBar_ = new QProgressBar;
    loadBar_->setObjectName(QStringLiteral("modelLoadProgress"));
    loadBar_->setAccessibleName(tr("Model loading"));
    loadBar_->setMaximumWidth(160);
    loadBar_->setVisible(false);
    statusBar()->addWidget(loadBar_);
    cancelLoad_ = new QToolButton;
    cancelLoad_->setObjectName(QStringLiteral("cancelModelLoad"));
    cancelLoad_->setText(tr("Cancel"));
    cancelLoad_->setAccessibleName(tr("Cancel loading the model"));
    cancelLoad_->setVisible(false);
    connect(cancelLoad_, &QToolButton::clicked, this, [this] { worker_->cancelLoad(); });
    statusBar()->addWidget(cancelLoad_);
    modelLabel_ = label(QStringLiteral("modelLabel"), tr("Model"));
    connect(new ModelNameClicks(modelLabel_), &ModelNameClicks::activated, modelsAction_, &QAction::trigger);
    strategyLabel_ = label(QStringLiteral("strategyLabel"), tr("Cache strategy"));
    contextBar_ = new ContextMeter;
    contextBar_->setMaximumWidth(240);
    // Its figures whole (the labels beside it give way instead).
    contextBar_->setMinimumWidth(
        std::min(240, contextBar_->fontMetrics().horizontalAdvance(QStringLiteral("000,000 / 000,000 tokens")) + 12));
    statusBar()->addPermanentWidget(contextBar_);
    kvLabel_ = label(QStringLiteral("kvBytesLabel"), tr("KV cache size"));
    lastAnswerLabel_ = label(QStringLiteral("lastAnswerLabel"), tr("Last answer"));
    apiLabel_ = label(QStringLiteral("apiServerLabel"), tr("Local API server"));
    apiLabel_->setVisible(false);
}

void MainWindow::connectWorker() {
    EngineWorker* w = worker_;
    connect(this, &MainWindow::requestOpenStore, w, &EngineWorker::openStore);
    connect(this, &MainWindow::requestLoadModel, w, &EngineWorker::loadModel);
    connect(this, &MainWindow::requestCreate, w, &EngineWorker::createConversation);
    connect(this, &MainWindow::requestRename, w, &EngineWorker::renameConversation);
    connect(this, &MainWindow::requestRemove, w, &EngineWorker::removeConversation);
    connect(this, &MainWindow::requestSend, w, &EngineWorker::send);
    connect(this, &MainWindow::requestRegenerate, w, &EngineWorker::regenerate);
    connect(this, &MainWindow::requestEdit, w, &EngineWorker::edit);
    connect(this, &MainWindow::requestSwitchStrategy, w, &EngineWorker::switchStrategy);
    connect(this, &MainWindow::requestSaveSettings, w, &EngineWorker::saveSettings);
    connect(w, &EngineWorker::apiServerChanged, this, [this](const QString& state, bool serving) {
        apiLabel_->setText(state);
        apiLabel_->setVisible(serving || apiServerSetting().serve);  // off by choice: nothing shown
    });
    connect(w, &EngineWorker::settingsLoaded, this, [this](const ChatSettings& s) { *settings_ = s; });
    connect(w, &EngineWorker::turnProgress, this, [this](qint64, const QString& task, qint64 done, qint64 total) {
        statusBar()->showMessage(total > 0 ? tr("%1: %2 of %3").arg(task).arg(done).arg(total) : task, 2000);
    });
    connect(prefixes_, &PrefixLibraryPanel::saveFromTextRequested, w, &EngineWorker::savePrefixFromText);
    connect(prefixes_, &PrefixLibraryPanel::saveFromConversationRequested, this, [this](const QString& name, int n) {
        if (currentId_ == 0) return showNotice(tr("Open a conversation first."), true);
        QMetaObject::invokeMethod(worker_, [w = worker_, name, id = currentId_, n] { w->savePrefixFromConversation(name, id, n); },
                                  Qt::QueuedConnection);
    });
    connect(prefixes_, &PrefixLibraryPanel::editRequested, w, &EngineWorker::editPrefix);
    connect(prefixes_, &PrefixLibraryPanel::renameRequested, w, &EngineWorker::renamePrefix);
    connect(prefixes_, &PrefixLibraryPanel::removeRequested, w, &EngineWorker::removePrefix);
    connect(storage_, &StoragePanel::refreshRequested, w, &EngineWorker::reportStorage);
    connect(storage_, &StoragePanel::dropRequested, w, &EngineWorker::dropCache);
    connect(storage_, &StoragePanel::budgetRequested, w, &EngineWorker::setStorageBudget);
    connect(w, &EngineWorker::storageReported, storage_, &StoragePanel::setReport);
    // The view follows what changes the saved caches while it is shown (a turn saves one, a
    // delete removes one); opening it asks for a fresh report.
    auto refreshStorage = [this] {
        if (storageDock_->isVisible()) QMetaObject::invokeMethod(worker_, &EngineWorker::reportStorage, Qt::QueuedConnection);
    };
    connect(storageDock_, &QDockWidget::visibilityChanged, this, [refreshStorage](bool shown) {
        if (shown) refreshStorage();
    });
    connect(w, &EngineWorker::storeOpened, this, refreshStorage);
    connect(w, &EngineWorker::turnFinished, this, refreshStorage);
    connect(w, &EngineWorker::prefixesChanged, this, refreshStorage);
    connect(w, &EngineWorker::conversationsChanged, this, refreshStorage);

    // The chat panel describes the open conversation, asked again when the global settings change.
    connect(chatPanel_, &ChatPanel::settingsApplied, w, &EngineWorker::saveChatSettings);
    connect(chatPanel_, &ChatPanel::systemPromptApplied, w, &EngineWorker::setSystemPrompt);
    connect(w, &EngineWorker::chatPanelLoaded, this, [this](const ChatPanelValues& v) {
        if (v.conversationId == currentId_) chatPanel_->setValues(v);
    });
    auto reportChat = [this] {
        chatPanel_->clear();
        if (currentId_ != 0)
            QMetaObject::invokeMethod(worker_, [w = worker_, id = currentId_] { w->reportChatPanel(id); }, Qt::QueuedConnection);
    };
    connect(this, &MainWindow::currentConversationChanged, this, reportChat);
    connect(w, &EngineWorker::settingsLoaded, this, reportChat);
    connect(w, &EngineWorker::modelLoaded, this, reportChat);

    connect(w, &EngineWorker::storeOpened, this, &MainWindow::onStoreOpened);
    connect(w, &EngineWorker::storeFailed, this, &MainWindow::onStoreFailed);
    connect(w, &EngineWorker::modelLoading, this, [this](const QString& path) {
        modelReady_ = false;
        Q_EMIT modelReadyChanged(false);
        modelLabel_->setText(tr("Loading %1…").arg(QFileInfo(path).fileName()));
        loadBar_->setVisible(true);
        cancelLoad_->setVisible(true);
        updateSendState();
    });
    connect(w, &EngineWorker::modelProgress, this, [this](const QString& task, qint64 done, qint64 total) {
        loadBar_->setRange(0, total > 0 ? 1000 : 0);  // no total: a busy indicator
        if (total > 0) loadBar_->setValue(static_cast<int>(done * 1000 / total));
        loadBar_->setFormat(task);
    });
    connect(w, &EngineWorker::modelLoaded, this, &MainWindow::onModelLoaded);
    connect(w, &EngineWorker::modelFailed, this, &MainWindow::onModelFailed);
    connect(w, &EngineWorker::conversationsChanged, this, &MainWindow::onConversations);
    connect(w, &EngineWorker::conversationCreated, this, [this](const ConversationItem& c) {
        onConversations(conversations_->all());
        // A message typed before there was a conversation is sent once its messages are shown.
        selectConversation(c.id);
        input_->setFocus();
    });
    connect(w, &EngineWorker::transcriptLoaded, this, &MainWindow::onTranscript);
    connect(w, &EngineWorker::searchResults, this, [this](const QString& query, const QList<qint64>& ids) {
        if (query != search_->text() || query.trimmed().isEmpty()) return;  // an older search
        // Narrowing the list moves the view's current row off a hidden conversation; that is not
        // the user opening another one.
        {
            QSignalBlocker block(list_->selectionModel());
            shownConversations_->setMatches(QSet<qint64>(ids.begin(), ids.end()));
        }
        markCurrentInList();
    });
    connect(w, &EngineWorker::answerText, this, [this](qint64 id, const QString& piece) {
        transcript_->appendAnswerText(id, piece);
        if (id == currentId_ && !answerHasText_) {
            answerHasText_ = true;
            // The prefill is over: its last "Prefilling: n of n" is not what happens now.
            statusBar()->showMessage(tr("Generating the answer…"));
            Q_EMIT answerStarted(id);
        }
    });
    connect(w, &EngineWorker::turnFinished, this, &MainWindow::onTurnFinished);
    connect(w, &EngineWorker::turnFailed, this, &MainWindow::onTurnFailed);
    connect(w, &EngineWorker::cacheTelemetry, this, [this](qint64 id, const CacheTelemetry& t) {
        if (id != currentId_) return;
        kvLabel_->setText(tr("KV %1").arg(bytesText(t.total_bytes)));
        contextBar_->setTelemetry(t);
    });
    connect(w, &EngineWorker::strategySwitched, this, [this](qint64 id, const QString& spec, const QString& summary) {
        // Another conversation's switch is not news about this one; one applied from the strategy
        // panel is told there (the panel is still busy with it now), so it is not repeated here.
        if (id != currentId_) return;
        strategyLabel_->setText(spec);
        strategy_->setCurrentText(spec);
        readTranscript(id);  // the switch is marked in the transcript
        if (lab_ && lab_->strategyPanel()->busy()) return;
        showNotice(summary.isEmpty() ? tr("The cache strategy is now %1.").arg(spec) : summary, false, false);
    });
    connect(w, &EngineWorker::prefixesChanged, prefixes_, &PrefixLibraryPanel::setPrefixes);
    connect(w, &EngineWorker::notice, this, [this](const QString& text) { showNotice(text); });
    connect(w, &EngineWorker::failed, this, [this](const QString& what, const QString& problem) {
        showNotice(tr("%1 failed: %2").arg(what, problem), true);
        if (!queuedMessage_.isEmpty() && !transcript_->loaded()) {
            // Its conversation could not be made or read: the message goes back into the box.
            if (input_->isBlank()) input_->setPlainText(queuedMessage_);
            queuedMessage_.clear();
            updateSendState();
        }
    });
}

void MainWindow::restoreWindowState() {
    QSettings s;
    if (s.contains(QStringLiteral("window/geometry"))) restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
    if (s.contains(QStringLiteral("window/state"))) restoreState(s.value(QStringLiteral("window/state")).toByteArray());
    restoreId_ = s.value(QStringLiteral("window/conversation")).toLongLong();
}

void MainWindow::showEvent(QShowEvent* e) {
    QMainWindow::showEvent(e);
    // The window takes the keyboard when it opens, so its shortcuts (Esc, Ctrl+N...) work at
    // once, also where no window manager activates it.
    activateWindow();
}

void MainWindow::closeEvent(QCloseEvent* e) {
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/state"), saveState());
    if (currentId_ != 0) s.setValue(QStringLiteral("window/conversation"), currentId_);
    worker_->stop();
    QMainWindow::closeEvent(e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls())
        for (const QUrl& u : e->mimeData()->urls())
            if (u.isLocalFile() && isModelPath(u.toLocalFile())) return e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
    for (const QUrl& u : e->mimeData()->urls())
        if (u.isLocalFile() && isModelPath(u.toLocalFile())) {
            loadModel(u.toLocalFile());
            e->acceptProposedAction();
            return;
        }
}

// ---- reactions ----

void MainWindow::onStoreOpened(const QString& path, const QList<ConversationItem>& conversations,
                               const QList<PrefixItem>& prefixes) {
    storeReady_ = true;
    storePath_ = path;
    setWindowFilePath(path);
    {
        QSignalBlocker block(list_->selectionModel());
        conversations_->setConversations(conversations);
    }
    prefixes_->setPrefixes(prefixes);
    qint64 open = 0;
    if (restoreId_ != 0 && conversations_->rowOf(restoreId_) >= 0) open = restoreId_;
    else if (!conversations.isEmpty()) open = shownConversations_->idAt(0);
    if (open != 0) selectConversation(open);
    else newChatWhenReady_ = true;  // first start: a new chat as soon as the model is there
    if (modelReady_ && newChatWhenReady_) newChat();
    updateSendState();
}

void MainWindow::onStoreFailed(const QString& path, const QString& problem) {
    storeReady_ = false;
    Q_EMIT storeOpenFailed(path, problem);
    auto* box = new QMessageBox(QMessageBox::Critical, tr("The database cannot be opened"),
                                tr("kvchat cannot use the database\n%1\n\n%2\n\nThe file was not changed. You can start "
                                   "a fresh database elsewhere and keep this one as it is.")
                                    .arg(path, problem),
                                QMessageBox::NoButton, this);
    box->setObjectName(QStringLiteral("databaseErrorDialog"));
    QPushButton* fresh = box->addButton(tr("Use a fresh database…"), QMessageBox::AcceptRole);
    box->addButton(tr("Quit"), QMessageBox::RejectRole);
    box->setAttribute(Qt::WA_DeleteOnClose);
    connect(box, &QMessageBox::finished, this, [this, box, fresh, path] {
        if (box->clickedButton() != fresh) {
            close();
            return;
        }
        const QString suggested = QFileInfo(path).absolutePath() + QStringLiteral("/kvchat-") +
                                  QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")) +
                                  QStringLiteral(".db");
        const QString chosen = QFileDialog::getSaveFileName(this, tr("A fresh database"), suggested,
                                                            tr("kvchat databases (*.db)"), nullptr,
                                                            QFileDialog::DontConfirmOverwrite);
        if (chosen.isEmpty()) {
            close();
            return;
        }
        Q_EMIT requestOpenStore(chosen);
    });
    errorDialog_ = box;
    box->open();
}

void MainWindow::onModelLoaded(const ModelInfo& model) {
    model_ = model;
    modelReady_ = true;
    loadBar_->setVisible(false);
    cancelLoad_->setVisible(false);
    modelLabel_->setText(model.name);
    modelLabel_->setToolTip(tr("%1\n%2, %3 layers, context %4 tokens, %5")
                                .arg(model.path, model.architecture)
                                .arg(model.layers)
                                .arg(QLocale().toString(model.contextLimit))
                                .arg(bytesText(model.fileBytes)));
    contextBar_->setContextLimit(model.contextLimit);
    setWindowTitle(tr("kvchat — %1").arg(model.name));
    rememberModel(model.path);
    if (models_) models_->setLoadedModel(model.path);
    Q_EMIT modelReadyChanged(true);
    if (storeReady_ && newChatWhenReady_) newChat();
    else if (currentId_ != 0) readTranscript(currentId_);
    updateSendState();
}

void MainWindow::onModelFailed(const QString& path, const QString& problem) {
    Q_EMIT modelLoadFailed(path, problem);
    loadBar_->setVisible(false);
    cancelLoad_->setVisible(false);
    modelLabel_->setText(model_.name.isEmpty() ? tr("No model") : model_.name);
    modelReady_ = !model_.path.isEmpty();
    Q_EMIT modelReadyChanged(modelReady_);
    updateSendState();
    if (problem.isEmpty()) {
        showNotice(tr("Loading %1 was cancelled.").arg(QFileInfo(path).fileName()));
        return;
    }
    auto* box = new QMessageBox(QMessageBox::Critical, tr("The model cannot be loaded"),
                                tr("kvchat cannot load the model\n%1\n\n%2").arg(path, problem), QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("modelErrorDialog"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    errorDialog_ = box;
    box->open();
}

void MainWindow::onConversations(const QList<ConversationItem>& conversations) {
    {
        // Rows that come and go move the view's current row; only the user opens another conversation.
        QSignalBlocker block(list_->selectionModel());
        conversations_->setConversations(conversations);
    }
    if (shownConversations_->searching()) search();  // a new or renamed conversation may match
    if (currentId_ == 0 || conversations_->find(currentId_)) {
        markCurrentInList();
    } else {
        // The open conversation was deleted: open the most recent one left, or none.
        currentId_ = 0;
        transcript_->open(0);
        if (shownConversations_->rowCount() > 0) selectConversation(shownConversations_->idAt(0));
        else if (conversations_->rowCount() > 0) selectConversation(conversations_->all().first().id);
        else Q_EMIT currentConversationChanged(0);
    }
    if (auto c = conversations_->find(currentId_)) updateStatus(&*c);
    updateSendState();
}

void MainWindow::selectConversation(qint64 id) {
    if (id != currentId_) {
        currentId_ = id;
        answerHasText_ = false;
        transcript_->open(id);
        // Every figure belongs to the conversation on screen: the last one's go, and so does a
        // notice about it.
        lastAnswerLabel_->clear();
        kvLabel_->clear();
        contextBar_->clear();
        notice_->setVisible(false);
        QSettings().setValue(QStringLiteral("window/conversation"), id);
        Q_EMIT currentConversationChanged(id);
    }
    markCurrentInList();
    readTranscript(id);
    updateSendState();
}

void MainWindow::markCurrentInList() {
    // Not a choice of the user's: the list's current row follows the open conversation silently,
    // and is none while a search hides it (so choosing any shown row opens that one).
    const int row = shownConversations_->rowOf(currentId_);
    QSignalBlocker block(list_->selectionModel());
    if (row >= 0) list_->setCurrentIndex(shownConversations_->index(row, 0));
    else list_->selectionModel()->clear();
    list_->viewport()->update();  // (the view repaints on the signals just blocked)
}

void MainWindow::readTranscript(qint64 id) {
    // A direct call: the worker reads on its reader's thread, so this never waits behind a turn.
    if (id != 0) worker_->openConversation(id);
}

void MainWindow::search() {
    const QString query = search_->text();
    if (query.trimmed().isEmpty()) {
        {
            QSignalBlocker block(list_->selectionModel());
            shownConversations_->setMatches(std::nullopt);
        }
        markCurrentInList();
        return;
    }
    worker_->search(query);  // the matches arrive as searchResults
}

void MainWindow::onTranscript(const ConversationItem& conversation, const QList<MessageItem>& messages) {
    if (conversation.id != currentId_) return;
    transcript_->setMessages(conversation.id, messages);
    updateStatus(&conversation);
    strategy_->setCurrentText(conversation.cacheSpec);
    // The last answer's figures, as stored with it (none yet: no figures, not another chat's).
    lastAnswerLabel_->clear();
    for (auto it = messages.crbegin(); it != messages.crend(); ++it)
        if (it->role == MessageRole::Assistant) {
            lastAnswerLabel_->setText(TranscriptModel::figuresText(it->figures).section(QStringLiteral(" · "), 0, 3));
            break;
        }
    if (!queuedMessage_.isEmpty() && !answering_ && modelReady_) startSend(std::exchange(queuedMessage_, QString()));
    updateSendState();
}

void MainWindow::newChat(qint64 prefixId) {
    newChatWhenReady_ = false;
    if (!modelReady_ || !storeReady_) {
        newChatWhenReady_ = prefixId == 0;
        if (prefixId != 0) showNotice(tr("The model is still loading; try again when it is ready."), true);
        return;
    }
    Q_EMIT requestCreate(QString(), prefixId);
}

void MainWindow::sendMessage(const QString& text) {
    input_->setPlainText(text);
    send();
}

void MainWindow::send() {
    if (input_->isBlank() || answering_ || !queuedMessage_.isEmpty() || !modelReady_) return;
    const QString text = input_->toPlainText();
    input_->clear();
    if (currentId_ == 0 || !transcript_->loaded()) {
        // No conversation yet (a first message makes one), or its messages are not shown yet: the
        // message waits for them (onTranscript sends it).
        queuedMessage_ = text;
        if (currentId_ == 0) newChat();
        updateSendState();
        return;
    }
    startSend(text);
}

void MainWindow::startSend(const QString& text) {
    if (!transcript_->beginSend(text)) {
        if (input_->isBlank()) input_->setPlainText(text);
        return;
    }
    notice_->setVisible(false);
    setAnswering(true);
    showStreamingCount();
    Q_EMIT requestSend(currentId_, text);
}

void MainWindow::showStreamingCount() {
    // The worker lists the conversation again when the turn ends; until then the list counts the
    // rows on screen (the question sent and the answer streaming), not the count before the turn.
    auto c = conversations_->find(currentId_);
    if (!c || c->messageCount == transcript_->rowCount()) return;
    c->messageCount = transcript_->rowCount();
    QList<ConversationItem> all = conversations_->all();
    for (ConversationItem& item : all)
        if (item.id == c->id) item = *c;
    {
        QSignalBlocker block(list_->selectionModel());
        conversations_->setConversations(all);
    }
    markCurrentInList();
}

void MainWindow::regenerate() {
    if (answering_ || !modelReady_ || currentId_ == 0 || transcript_->rowCount() == 0) return;
    if (!transcript_->beginRegenerate()) return showNotice(tr("There is no question to answer again."), true);
    setAnswering(true);
    Q_EMIT requestRegenerate(currentId_);
}

void MainWindow::editMessage(int ordinal, const QString& text) {
    // Edited in place (MessageView's editor): what it replaces is kept as a version.
    if (answering_ || !modelReady_ || text.trimmed().isEmpty()) return;
    if (!transcript_->beginEdit(ordinal, text)) return;
    setAnswering(true);
    Q_EMIT requestEdit(currentId_, ordinal, text);
}

void MainWindow::onTurnFinished(const TurnOutcome& outcome) {
    setAnswering(false);
    statusBar()->clearMessage();
    transcript_->finishTurn(outcome);
    // The versions (a regenerate or an edit adds one) and strategy changes come with the stored transcript.
    if (outcome.conversationId == currentId_) readTranscript(currentId_);
    if (outcome.conversationId == currentId_) {
        if (contextBar_->window() == 0) contextBar_->setTokens(outcome.contextTokens);
        kvLabel_->setText(tr("KV %1").arg(bytesText(outcome.kvBytes)));
        strategyLabel_->setText(outcome.cacheSpec);
        lastAnswerLabel_->setText(tr("last answer: %1").arg(
            TranscriptModel::figuresText(outcome.answer.figures).section(QStringLiteral(" · "), 0, 3)));
        if (!outcome.notices.isEmpty()) showNotice(outcome.notices.join(QLatin1Char('\n')));
    }
    Q_EMIT answerFinished(outcome);
    answerHasText_ = false;
}

void MainWindow::onTurnFailed(qint64 id, const QString& problem, bool messageStored) {
    setAnswering(false);
    statusBar()->clearMessage();
    answerHasText_ = false;
    // Nothing stored: the rows are as before the turn, and a sent message comes back into the box
    // so it is not lost. Something stored: what is stored is read again.
    const QString draft = transcript_->failTurn(id, messageStored);
    if (id == currentId_ && !draft.isEmpty() && input_->isBlank()) input_->setPlainText(draft);
    if (messageStored && id == currentId_) readTranscript(id);
    showNotice(problem, true);
}

void MainWindow::renameCurrent() {
    const int row = shownConversations_->rowOf(currentId_);
    if (row < 0) return;
    list_->setFocus();
    list_->setCurrentIndex(shownConversations_->index(row, 0));
    list_->edit(shownConversations_->index(row, 0));
}

void MainWindow::deleteCurrent() {
    const auto c = conversations_->find(currentId_);
    if (!c) return;
    auto* box = new QMessageBox(QMessageBox::Question, tr("Delete conversation"),
                                tr("Delete \u201c%1\u201d and its %2 messages? This cannot be undone.")
                                    .arg(c->title)
                                    .arg(c->messageCount),
                                QMessageBox::Yes | QMessageBox::Cancel, this);
    box->setObjectName(QStringLiteral("deleteConfirmDialog"));
    box->setDefaultButton(QMessageBox::Cancel);
    box->setAttribute(Qt::WA_DeleteOnClose);
    const qint64 id = c->id;
    connect(box, &QMessageBox::finished, this, [this, id](int result) {
        if (result == QMessageBox::Yes) Q_EMIT requestRemove(id);
    });
    box->open();
}

void MainWindow::showNotice(const QString& text, bool problem, bool inStatusBar) {
    notice_->setText((problem ? QStringLiteral("⚠ ") : QString()) + text);
    notice_->setForegroundRole(problem ? QPalette::Text : QPalette::WindowText);
    notice_->setVisible(!text.isEmpty());
    if (inStatusBar) statusBar()->showMessage(text.section(QLatin1Char('\n'), 0, 0), 8000);
}

void MainWindow::setAnswering(bool answering) {
    answering_ = answering;
    if (answering) answerHasText_ = false;
    updateSendState();
}

void MainWindow::updateSendState() {
    const bool sending = answering_ || !queuedMessage_.isEmpty();
    send_->setEnabled(!sending && modelReady_ && storeReady_ && !input_->isBlank());
    stop_->setEnabled(sending);
    stop_->setVisible(sending);
    regenerateAction_->setEnabled(!answering_ && modelReady_ && currentId_ != 0);
    strategy_->setEnabled(!answering_ && currentId_ != 0);
    renameAction_->setEnabled(currentId_ != 0);
    deleteAction_->setEnabled(currentId_ != 0 && !answering_);
    send_->setToolTip(!modelReady_ ? tr("The model is loading…") : answering_ ? tr("Answering…") : tr("Send (Enter)"));
}

void MainWindow::updateStatus(const ConversationItem* c) {
    if (!c) return;
    strategyLabel_->setText(c->cacheSpec);
    if (c->tokens > 0 && contextBar_->window() == 0) contextBar_->setTokens(c->tokens);
}

void MainWindow::openSettings() {
    auto* d = new SettingsDialog(*settings_, this, apiServerSetting());
    d->setAttribute(Qt::WA_DeleteOnClose);
    connect(d, &QDialog::accepted, this, [this, d] {
        Q_EMIT requestSaveSettings(d->settings());
        const ApiServerSetting before = apiServerSetting(), after = d->apiServer();
        QSettings s;
        s.setValue(QStringLiteral("api/serve"), after.serve);
        s.setValue(QStringLiteral("api/port"), after.port);
        if (after.serve != before.serve || (after.serve && after.port != before.port)) applyApiServer();
    });
    d->open();
}

void MainWindow::showModels() {
    if (!models_) {
        models_ = new ModelsDialog(this);
        connect(models_, &ModelsDialog::openRequested, this, &MainWindow::loadModel);
        connect(models_, &ModelsDialog::openFileRequested, openModelAction_, &QAction::trigger);
    }
    models_->setLoadedModel(model_.path);
    models_->refresh(QString::fromStdString(models_dir()), QSettings().value(QStringLiteral("models/recent")).toStringList());
    models_->show();
    models_->raise();
    models_->activateWindow();
}

ApiServerSetting MainWindow::apiServerSetting() const {
    QSettings s;
    return {s.value(QStringLiteral("api/serve"), false).toBool(), s.value(QStringLiteral("api/port"), 8080).toInt()};
}

void MainWindow::applyApiServer() {
    const ApiServerSetting a = apiServerSetting();
    QMetaObject::invokeMethod(worker_, [w = worker_, a] { w->setApiServer(a.serve, a.port); }, Qt::QueuedConnection);
}

void MainWindow::loadModel(const QString& path) {
    Q_EMIT requestLoadModel(path);
}

void MainWindow::rememberModel(const QString& path) {
    QSettings s;
    QStringList recent = s.value(QStringLiteral("models/recent")).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kRecentModels) recent.removeLast();
    s.setValue(QStringLiteral("models/recent"), recent);
    s.setValue(QStringLiteral("models/last"), path);
    updateRecentModels();
}

void MainWindow::updateRecentModels() {
    recentMenu_->clear();
    const QStringList recent = QSettings().value(QStringLiteral("models/recent")).toStringList();
    for (const QString& path : recent) {
        QAction* a = recentMenu_->addAction(QFileInfo(path).fileName());
        a->setToolTip(path);
        connect(a, &QAction::triggered, this, [this, path] { loadModel(path); });
    }
    recentMenu_->setEnabled(!recent.isEmpty());
}

}  // namespace kvchat
