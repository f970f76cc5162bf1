#include "ui/engine_worker.h"

#include "engine/compute/device.h"

#include "engine/chat/chat_settings.h"
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/load_model.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "engine/api/api_server.h"
#include "ui/store_reader.h"
#include "ui/worker_session_host.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSet>

#include <algorithm>
#include <memory>
#include <optional>
#include <cstdio>
#include <exception>

namespace kvchat {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
std::string ss(const QString& s) { return s.toStdString(); }

ConversationItem itemOf(const ConversationSummary& c) {
    ConversationItem item;
    item.id = c.id;
    item.title = qs(c.title);
    item.updatedMs = c.updated_ms;
    item.messageCount = c.message_count;
    item.tokens = c.tokens;
    item.cacheSpec = qs(c.cache_spec);
    item.cacheResident = c.cache_resident;
    item.cacheSaved = c.cache_saved;
    item.lastUnanswered = c.last_unanswered;
    item.parentId = c.parent_id.value_or(0);
    item.branchAt = c.branch_at;
    item.fromApi = c.origin == "api";
    return item;
}

}  // namespace

TurnOptions EngineWorker::turnOptions(qint64 id) const {
    const auto c = session_->summary(id);
    return settings_->turn_options(c ? c->cache_spec : settings_->default_strategy, session_->conversation_settings(id));
}

void EngineWorker::makeSession() {
    session_.reset();
    if (store_)
        session_ = std::make_unique<ChatSession>(*store_, model_.get(), backend_.get(),
                                                 static_cast<size_t>(std::max(1, settings_->resident_caches)));
}

Progress EngineWorker::throttled(std::function<void(const QString&, qint64, qint64)> report,
                                 const std::atomic<bool>* cancel) {
    Progress progress;
    progress.cancel = cancel;
    auto since = std::make_shared<QElapsedTimer>();
    since->start();
    // Every report that ends a task goes through; the others at most every kTelemetryMs.
    progress.report = [since, report = std::move(report)](std::string_view task, int64_t done, int64_t total) {
        if (done != total && since->elapsed() < kTelemetryMs) return;
        since->restart();
        report(qs(task), done, total);
    };
    return progress;
}

Progress EngineWorker::turnProgressOf(qint64 conversationId) {
    return throttled([this, conversationId](const QString& task, qint64 done,
                                            qint64 total) { Q_EMIT turnProgress(conversationId, task, done, total); },
                     &stop_);
}

EngineWorker::EngineWorker(QObject* parent) : QObject(parent), settings_(std::make_unique<ChatSettings>()) {
    reader_ = new StoreReader;
    reader_->moveToThread(&readerThread_);
    readerThread_.setObjectName(QStringLiteral("store reader"));
    // Direct: the results leave from the reader's thread, never queued behind a turn on this one.
    connect(reader_, &StoreReader::transcriptRead, this, &EngineWorker::transcriptLoaded, Qt::DirectConnection);
    connect(reader_, &StoreReader::searchResults, this, &EngineWorker::searchResults, Qt::DirectConnection);
    connect(reader_, &StoreReader::searchMatched, this, &EngineWorker::searchMatched, Qt::DirectConnection);
    connect(reader_, &StoreReader::failed, this, &EngineWorker::failed, Qt::DirectConnection);
    readerThread_.start();
}

EngineWorker::~EngineWorker() {
    stopApiServer();
    readerThread_.quit();
    readerThread_.wait();
    delete reader_;
    shutdown();
}

void EngineWorker::shutdown() {
    if (!session_) return;
    std::vector<std::string> notices;
    try {
        session_->save_all(notices);
    } catch (const std::exception&) {
        // A snapshot is only an acceleration; the transcript is already in the database.
    }
    session_.reset();
}

void EngineWorker::emitNotices(const std::vector<std::string>& notices) {
    for (const std::string& n : notices) Q_EMIT notice(qs(n));
}

void EngineWorker::openStore(const QString& path) {
    // Another kvchat on the same database would write the same snapshot files: refuse it.
    QDir().mkpath(QFileInfo(path).absolutePath());
    auto lock = std::make_unique<QLockFile>(path + QStringLiteral(".lock"));
    lock->setStaleLockTime(0);
    if (!lock->tryLock(200)) {
        qint64 pid = 0;
        QString host, app;
        lock->getLockInfo(&pid, &host, &app);
        Q_EMIT storeFailed(path, lock->error() == QLockFile::LockFailedError
                                   ? tr("Another kvchat (process %1) has this database open. Close it first, or "
                                        "open another database.")
                                         .arg(pid)
                                   : tr("The lock file beside the database cannot be created (%1): the folder is "
                                        "not writable.")
                                         .arg(lock->fileName()));
        return;
    }
    try {
        session_.reset();
        auto store = std::make_unique<Store>(ss(path));
        store_ = std::move(store);
        lock_ = std::move(lock);
    } catch (const std::exception& e) {
        Q_EMIT storeFailed(path, qs(e.what()));
        return;
    }
    makeSession();
    *settings_ = session_->settings();
    session_->set_max_resident(static_cast<size_t>(std::max(1, settings_->resident_caches)));
    emitNotices(settings_->notices);
    // Queued before storeOpened, so the reader has the database before the window asks it anything.
    QMetaObject::invokeMethod(reader_, [r = reader_, path] { r->open(path); }, Qt::QueuedConnection);
    Q_EMIT settingsLoaded(*settings_);
    Q_EMIT storeOpened(path, conversationItems(), prefixItems());
}

void EngineWorker::loadModel(const QString& path) {
    cancelLoad_.store(false);
    Q_EMIT modelLoading(path);
    Q_EMIT modelProgress(tr("Loading model"), 0, 0);
    std::unique_ptr<Model> model;
    try {
        const Progress progress = throttled(
            [this](const QString& task, qint64 done, qint64 total) { Q_EMIT modelProgress(task, done, total); },
            &cancelLoad_);
        // No path: the chat model, else the default model, or an error that says how to install it.
        model = load_model(path.isEmpty() ? find_chat_model("") : ss(path), progress);
    } catch (const Cancelled&) {
        Q_EMIT modelFailed(path, QString());  // the model in use (if any) stays
        return;
    } catch (const std::exception& e) {
        Q_EMIT modelFailed(path, qs(e.what()));
        return;
    }
    shutdown();
    if (!backend_ || backendThreads_ != settings_->threads || backendDevice_ != settings_->device) {
        // A GPU that cannot be used gives the CPU and says why (engine/compute/device.h).
        OpenedBackend opened = open_backend(parse_device(settings_->device).value_or(Device{}), settings_->threads);
        backend_ = std::move(opened.backend);
        backendThreads_ = settings_->threads;
        backendDevice_ = settings_->device;
        if (!opened.notice.empty()) Q_EMIT notice(qs(opened.notice));
    }
    model_ = std::move(model);
    // The weights go onto the backend now (on a GPU: uploaded once), not inside the first answer.
    try {
        model_->weights_on(*backend_);
    } catch (const std::exception& e) {
        model_.reset();
        Q_EMIT modelFailed(path, qs(e.what()));
        return;
    }
    if (apiHost_) apiHost_->set_loaded_model(model_->path());
    makeSession();
    if (session_) emitNotices(session_->take_notices());
    ModelInfo info;
    info.path = qs(model_->path());
    info.name = QFileInfo(info.path).fileName();
    info.architecture = qs(model_->config().arch_name);
    info.contextLimit = model_->config().n_ctx_train;
    info.fileBytes = static_cast<qint64>(model_->file_bytes());
    info.layers = model_->config().n_layer;
    Q_EMIT modelLoaded(info);
}

QList<ConversationItem> EngineWorker::conversationItems() const {
    QList<ConversationItem> out;
    if (session_)
        for (const ConversationSummary& c : session_->list()) out.push_back(itemOf(c));
    return out;
}

ConversationItem EngineWorker::conversationItem(qint64 id) const {
    if (session_)
        if (const auto c = session_->summary(id)) return itemOf(*c);
    return {};
}

QList<PrefixItem> EngineWorker::prefixItems() const {
    QList<PrefixItem> out;
    if (!session_) return out;
    for (const PrefixSummary& p : session_->prefix_list()) {
        PrefixItem item;
        item.id = p.id;
        item.name = qs(p.name);
        item.text = qs(p.text);
        item.messageCount = static_cast<int>(p.message_count);
        item.tokens = p.tokens;
        item.cacheBytes = p.snapshot_bytes;
        item.lastUsedMs = p.last_used_ms.value_or(-1);
        item.useCount = p.use_count;
        item.cacheSpec = qs(p.cache_spec);
        out.push_back(item);
    }
    return out;
}

bool EngineWorker::needModel(const QString& what) {
    if (session_ && session_->has_model()) return true;
    Q_EMIT failed(what, !session_ ? tr("No database is open.") : tr("No model is loaded yet; open one from the Model menu."));
    return false;
}

void EngineWorker::createConversation(const QString& system, qint64 prefixId) {
    if (!needModel(tr("New chat"))) return;
    try {
        OpenOptions options;
        options.system = system.isEmpty() ? settings_->system_prompt : ss(system);
        options.cache_spec = settings_->default_strategy;
        if (prefixId > 0) options.prefix = session_->prefix(prefixId).name;
        const int64_t id = session_->create(prefixId > 0 ? options.prefix : "", options);
        emitNotices(session_->take_notices());
        const QList<ConversationItem> all = conversationItems();
        Q_EMIT conversationsChanged(all);
        for (const ConversationItem& c : all)
            if (c.id == id) Q_EMIT conversationCreated(c);
        if (prefixId > 0) Q_EMIT prefixesChanged(prefixItems());
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("New chat"), qs(e.what()));
    }
}

void EngineWorker::openConversation(qint64 id) {
    QMetaObject::invokeMethod(reader_, [r = reader_, id] { r->readTranscript(id); }, Qt::QueuedConnection);
    QMetaObject::invokeMethod(
        this,
        [this, id] {
            if (session_)
                if (auto t = session_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
        },
        Qt::QueuedConnection);
}

void EngineWorker::renameConversation(qint64 id, const QString& title) {
    if (!session_) return;
    try {
        session_->rename(id, ss(title));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Rename"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::branchConversation(qint64 id, int at) {
    if (!needModel(tr("Branch"))) return;
    try {
        // "Title (branch)", or the first free "Title (branch 2)", ...
        const auto parent = session_->summary(id);
        if (!parent) throw Error("the conversation was deleted");
        QSet<QString> taken;
        for (const ConversationSummary& c : session_->list()) taken.insert(qs(c.title));
        QString title = tr("%1 (branch)").arg(qs(parent->title));
        for (int n = 2; taken.contains(title); ++n) title = tr("%1 (branch %2)").arg(qs(parent->title)).arg(n);
        const int64_t branch = session_->branch(id, static_cast<size_t>(std::max(1, at)), ss(title));
        Q_EMIT conversationsChanged(conversationItems());
        Q_EMIT conversationCreated(conversationItem(branch));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Branch"), qs(e.what()));
    }
}

void EngineWorker::selectVersion(qint64 id, int ordinal, int number) {
    if (!session_) return;
    try {
        session_->select_version(id, static_cast<size_t>(std::max(0, ordinal)), number);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Choose version"), qs(e.what()));
    }
    openConversation(id);
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::removeConversation(qint64 id) {
    if (!session_) return;
    try {
        session_->remove(id);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::search(const QString& query) {
    QMetaObject::invokeMethod(reader_, [r = reader_, query] { r->search(query); }, Qt::QueuedConnection);
}

void EngineWorker::runTurn(qint64 id, const TurnRequest& request) {
    if (!needModel(tr("Send"))) {
        Q_EMIT turnFailed(id, tr("No model is loaded yet."), false);
        return;
    }
    stop_.store(false);
    Q_EMIT busyChanged(true);
    Q_EMIT turnStarted(id);
    QString pending;
    QElapsedTimer sinceText, sinceStep;
    sinceText.start();
    sinceStep.start();
    TurnCallbacks callbacks;
    bool firstText = true;
    callbacks.on_text = [&](std::string_view piece) {
        pending += qs(piece);
        // The first piece goes at once (it is the time to first token the user sees); later ones
        // in batches.
        if (firstText || sinceText.elapsed() >= kTextBatchMs) {
            firstText = false;
            Q_EMIT answerText(id, pending);
            pending.clear();
            sinceText.restart();
        }
    };
    callbacks.on_step = [&](const CacheTelemetry& t) {
        if (sinceStep.elapsed() < kTelemetryMs) return;
        sinceStep.restart();
        Q_EMIT cacheTelemetry(id, t);
    };
    callbacks.progress = turnProgressOf(id);
    TurnResult r;
    try {
        r = session_->take_turn(id, request, turnOptions(id), callbacks);
    } catch (const std::exception& e) {  // (take_turn itself never throws; reading the strategy may)
        r.ending = TurnResult::Ending::Failed;
        r.problem = e.what();
    }
    if (!pending.isEmpty()) Q_EMIT answerText(id, pending);
    if (r.ending == TurnResult::Ending::Cancelled || r.ending == TurnResult::Ending::Failed) {
        Q_EMIT turnFailed(id, qs(r.problem), r.changed);
    } else {
        TurnOutcome out;
        out.conversationId = id;
        if (r.answer) out.answer = messageItemOf(*r.answer);
        if (r.question) out.question = messageItemOf(*r.question);
        out.stopReason = qs(stop_reason_name(r.figures.stop_reason.value_or(StopReason::MaxNewTokens)));
        for (const std::string& n : r.notices) out.notices.push_back(qs(n));
        out.kvBytes = r.kv_bytes;
        out.contextTokens = r.figures.prompt_tokens + r.figures.generated_tokens;
        out.cacheSpec = qs(r.cache_spec);
        if (auto t = session_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
        Q_EMIT turnFinished(out);
    }
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT busyChanged(false);
}

void EngineWorker::send(qint64 id, const QString& text) {
    TurnRequest request = TurnRequest::send(ss(text));
    request.names_new_chat = true;  // a new chat takes its title from its first message
    runTurn(id, request);
}

void EngineWorker::regenerate(qint64 id) { runTurn(id, TurnRequest::regenerate()); }

void EngineWorker::edit(qint64 id, int ordinal, const QString& text) {
    runTurn(id, TurnRequest::edit(static_cast<size_t>(ordinal), ss(text)));
}

void EngineWorker::switchStrategy(qint64 id, const QString& spec) {
    if (!needModel(tr("Switch strategy"))) return;
    stop_.store(false);
    Q_EMIT busyChanged(true);
    try {
        const ConversionPlan plan = session_->switch_strategy(id, ss(spec), turnProgressOf(id));
        emitNotices(session_->take_notices());
        Q_EMIT strategySwitched(id, qs(plan.to_spec), qs(plan.summary));
        if (auto t = session_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Switch strategy"), qs(e.what()));
        if (const auto c = session_->summary(id)) Q_EMIT strategySwitched(id, qs(c->cache_spec), QString());
    }
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT busyChanged(false);
}

void EngineWorker::saveSettings(const ChatSettings& settings) {
    if (!session_) return;
    try {
        session_->save_settings(settings);
        *settings_ = settings;
        settings_->notices.clear();
        session_->set_max_resident(static_cast<size_t>(std::max(1, settings_->resident_caches)));
        if (model_ && backendThreads_ != settings.threads)
            Q_EMIT notice(tr("The new thread count applies when a model is next loaded."));
        if (model_ && backendDevice_ != settings.device)
            Q_EMIT notice(tr("The new device applies when a model is next loaded."));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Settings"), qs(e.what()));
    }
    Q_EMIT settingsLoaded(*settings_);
}

void EngineWorker::savePrefixFromText(const QString& name, const QString& text) {
    if (!needModel(tr("Save prefix"))) return;
    try {
        std::vector<std::string> notices;
        session_->prefixes().save(ss(name), ss(text), "", notices, turnProgressOf(0));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Save prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::savePrefixFromConversation(const QString& name, qint64 conversationId, int messages) {
    if (!needModel(tr("Save prefix"))) return;
    try {
        std::vector<std::string> notices;
        session_->save_prefix_from(ss(name), conversationId, messages, notices, turnProgressOf(conversationId));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Save prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::editPrefix(qint64 id, const QString& text) {
    if (!needModel(tr("Edit prefix"))) return;
    try {
        std::vector<std::string> notices;
        session_->edit_prefix(id, ss(text), notices, turnProgressOf(0));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Edit prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::renamePrefix(qint64 id, const QString& name) {
    if (!session_) return;
    try {
        session_->rename_prefix(id, ss(name));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Rename prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::removePrefix(qint64 id) {
    if (!session_) return;
    try {
        session_->remove_prefix(id);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

}  // namespace kvchat
