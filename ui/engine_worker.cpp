#include "ui/engine_worker.h"

#include "engine/compute/device.h"

#include "engine/chat/chat_settings.h"
#include "engine/chat/conversation_registry.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/load_model.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "ui/store_reader.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>

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
    return item;
}

// A new chat is titled after its first message (its first line, cut at a word), as chat apps do.
std::string titleFrom(const QString& text) {
    QString line = text.trimmed().section(u'\n', 0, 0).simplified();
    if (line.size() > 48) {
        line.truncate(48);
        const qsizetype space = line.lastIndexOf(u' ');
        if (space > 24) line.truncate(space);
        line += QStringLiteral("…");
    }
    return ss(line);
}

}  // namespace

TurnOptions EngineWorker::turnOptions(qint64 id) const {
    const auto rec = store_->find_conversation_by_id(id);
    return settings_->turn_options(rec ? rec->cache_spec : settings_->default_strategy);
}

void EngineWorker::makeRegistry() {
    registry_.reset();
    if (store_ && model_)
        registry_ = std::make_unique<ConversationRegistry>(*store_, *model_, *backend_,
                                                           static_cast<size_t>(std::max(1, settings_->resident_caches)));
}

EngineWorker::EngineWorker(QObject* parent) : QObject(parent), settings_(std::make_unique<ChatSettings>()) {
    reader_ = new StoreReader;
    reader_->moveToThread(&readerThread_);
    readerThread_.setObjectName(QStringLiteral("store reader"));
    // Direct: the results leave from the reader's thread, never queued behind a turn on this one.
    connect(reader_, &StoreReader::transcriptRead, this, &EngineWorker::transcriptLoaded, Qt::DirectConnection);
    connect(reader_, &StoreReader::searchResults, this, &EngineWorker::searchResults, Qt::DirectConnection);
    connect(reader_, &StoreReader::failed, this, &EngineWorker::failed, Qt::DirectConnection);
    readerThread_.start();
}

EngineWorker::~EngineWorker() {
    readerThread_.quit();
    readerThread_.wait();
    delete reader_;
    shutdown();
}

void EngineWorker::shutdown() {
    if (!registry_) return;
    std::vector<std::string> notices;
    try {
        registry_->save_all(notices);
    } catch (const std::exception&) {
        // A snapshot is only an acceleration; the transcript is already in the database.
    }
    registry_.reset();
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
        registry_.reset();
        auto store = std::make_unique<Store>(ss(path));
        store_ = std::move(store);
        lock_ = std::move(lock);
    } catch (const std::exception& e) {
        Q_EMIT storeFailed(path, qs(e.what()));
        return;
    }
    *settings_ = ChatSettings::load(*store_);
    emitNotices(settings_->notices);
    makeRegistry();
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
        Progress progress;
        progress.cancel = &cancelLoad_;
        QElapsedTimer since;
        since.start();
        progress.report = [&](std::string_view task, int64_t done, int64_t total) {
            if (done != total && since.elapsed() < kTelemetryMs) return;
            since.restart();
            Q_EMIT modelProgress(qs(task), done, total);
        };
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
    makeRegistry();
    if (registry_) emitNotices(registry_->take_notices());
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
    if (registry_) {
        for (const ConversationSummary& c : registry_->list()) out.push_back(itemOf(c));
    } else if (store_) {
        for (const ConversationOverview& o : store_->list_conversation_overviews()) out.push_back(conversationItemOf(o));
    }
    return out;
}

ConversationItem EngineWorker::conversationItem(qint64 id) const {
    for (const ConversationItem& c : conversationItems())
        if (c.id == id) return c;
    return {};
}

QList<PrefixItem> EngineWorker::prefixItems() const {
    QList<PrefixItem> out;
    if (!store_) return out;
    for (const PrefixRecord& p : store_->list_prefixes()) {
        PrefixItem item;
        item.id = p.id;
        item.name = qs(p.name);
        item.text = qs(p.text);
        item.messageCount = static_cast<int>(p.messages.size());
        item.tokens = static_cast<qint64>(p.tokens.size());
        if (!p.snapshot.empty()) item.cacheBytes = QFileInfo(qs(store_->snapshot_path(p.snapshot))).size();
        item.lastUsedMs = p.last_used_ms.value_or(-1);
        item.useCount = p.use_count;
        item.cacheSpec = qs(p.cache_spec);
        out.push_back(item);
    }
    return out;
}

bool EngineWorker::needModel(const QString& what) {
    if (registry_) return true;
    Q_EMIT failed(what, model_ ? tr("No database is open.") : tr("No model is loaded yet; open one from the Model menu."));
    return false;
}

void EngineWorker::createConversation(const QString& system, qint64 prefixId) {
    if (!needModel(tr("New chat"))) return;
    try {
        OpenOptions options;
        options.system = system.isEmpty() ? settings_->system_prompt : ss(system);
        options.cache_spec = settings_->default_strategy;
        if (prefixId > 0) {
            const auto p = store_->find_prefix_by_id(prefixId);
            if (!p) throw Error("the prefix was deleted");
            options.prefix = p->name;
        }
        const int64_t id = registry_->create(prefixId > 0 ? ss(QString::fromStdString(options.prefix)) : "Chat", options);
        emitNotices(registry_->take_notices());
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
            if (registry_)
                if (auto t = registry_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
        },
        Qt::QueuedConnection);
}

void EngineWorker::renameConversation(qint64 id, const QString& title) {
    if (!store_) return;
    try {
        const std::string t = ss(title.trimmed());
        if (t.empty()) throw Error("a conversation needs a name");
        if (auto other = store_->find_conversation(t); other && other->id != id)
            throw Error("a conversation named \u201c" + t + "\u201d already exists");
        if (registry_) registry_->rename(id, t);
        else store_->rename_conversation(id, t);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Rename"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::removeConversation(qint64 id) {
    if (!store_) return;
    try {
        if (registry_) {
            registry_->remove(id);
        } else {
            const std::string snapshot = store_->delete_conversation(id);
            if (!snapshot.empty()) store_->remove_snapshot_file(snapshot);
        }
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::search(const QString& query) {
    QMetaObject::invokeMethod(reader_, [r = reader_, query] { r->search(query); }, Qt::QueuedConnection);
}

template <class Turn>
void EngineWorker::runTurn(qint64 id, Turn&& turn) {
    if (!needModel(tr("Send"))) {
        Q_EMIT turnFailed(id, tr("No model is loaded yet."), false);
        return;
    }
    stop_.store(false);
    size_t before = 0;
    try {
        before = store_->list_messages(id).size();
    } catch (const std::exception& e) {
        Q_EMIT turnFailed(id, qs(e.what()), false);
        return;
    }
    Q_EMIT busyChanged(true);
    Q_EMIT turnStarted(id);
    QString pending;
    QElapsedTimer sinceText, sinceStep, sinceProgress;
    sinceText.start();
    sinceStep.start();
    sinceProgress.start();
    TurnCallbacks callbacks;
    callbacks.on_text = [&](std::string_view piece) {
        pending += qs(piece);
        if (sinceText.elapsed() >= kTextBatchMs) {
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
    callbacks.progress.cancel = &stop_;
    callbacks.progress.report = [&](std::string_view task, int64_t done, int64_t total) {
        if (done != total && sinceProgress.elapsed() < kTelemetryMs) return;
        sinceProgress.restart();
        Q_EMIT turnProgress(id, qs(task), done, total);
    };
    try {
        const TurnResult r = turn(turnOptions(id), callbacks);
        if (!pending.isEmpty()) Q_EMIT answerText(id, pending);
        const auto messages = store_->list_messages(id);
        TurnOutcome out;
        out.conversationId = id;
        if (!messages.empty() && messages.back().role == Role::Assistant) out.answer = messageItemOf(messages.back());
        for (auto it = messages.rbegin(); it != messages.rend(); ++it)
            if (it->role == Role::User) {
                out.question = messageItemOf(*it);
                break;
            }
        out.stopReason = qs(r.stop_reason);
        for (const std::string& n : r.notices) out.notices.push_back(qs(n));
        out.kvBytes = r.kv_bytes;
        out.contextTokens = r.prompt_tokens + static_cast<qint64>(r.tokens.size());
        if (auto rec = store_->find_conversation_by_id(id)) out.cacheSpec = qs(rec->cache_spec);
        if (auto t = registry_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
        Q_EMIT turnFinished(out);
    } catch (const std::exception& e) {
        if (!pending.isEmpty()) Q_EMIT answerText(id, pending);
        bool stored = false;
        try {
            stored = store_->list_messages(id).size() != before;
        } catch (const std::exception&) {
            stored = true;  // unknown: the window reloads the transcript rather than assume
        }
        Q_EMIT turnFailed(id, qs(e.what()), stored);
    }
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT busyChanged(false);
}

void EngineWorker::send(qint64 id, const QString& text) {
    // The first message names a chat that still has its default title.
    std::optional<std::string> title;
    try {
        const auto rec = store_ ? store_->find_conversation_by_id(id) : std::nullopt;
        const auto msgs = rec ? store_->list_messages(id) : std::vector<MessageRecord>{};
        const bool unnamed = rec && (rec->title == "Chat" || rec->title.rfind("Chat ", 0) == 0);
        if (unnamed && std::none_of(msgs.begin(), msgs.end(), [](const MessageRecord& m) { return m.role == Role::User; }))
            title = titleFrom(text);
    } catch (const std::exception&) {
    }
    runTurn(id, [&](const TurnOptions& options, const TurnCallbacks& callbacks) {
        return registry_->send(id, ss(text), options, callbacks);
    });
    if (title && !title->empty()) {
        try {
            std::string t = *title;
            for (int n = 2; store_->find_conversation(t); ++n) t = *title + " " + std::to_string(n);
            registry_->rename(id, t);
            Q_EMIT conversationsChanged(conversationItems());
        } catch (const std::exception&) {
            // The default title stays; the user can rename it.
        }
    }
}

void EngineWorker::regenerate(qint64 id) {
    runTurn(id, [&](const TurnOptions& options, const TurnCallbacks& callbacks) {
        return registry_->regenerate(id, options, callbacks);
    });
}

void EngineWorker::edit(qint64 id, int ordinal, const QString& text) {
    runTurn(id, [&](const TurnOptions& options, const TurnCallbacks& callbacks) {
        return registry_->edit(id, static_cast<size_t>(ordinal), ss(text), options, callbacks);
    });
}

void EngineWorker::switchStrategy(qint64 id, const QString& spec) {
    if (!needModel(tr("Switch strategy"))) return;
    stop_.store(false);
    Q_EMIT busyChanged(true);
    try {
        Progress progress;
        progress.cancel = &stop_;
        QElapsedTimer since;
        since.start();
        progress.report = [&](std::string_view task, int64_t done, int64_t total) {
            if (done != total && since.elapsed() < kTelemetryMs) return;
            since.restart();
            Q_EMIT turnProgress(id, qs(task), done, total);
        };
        const ConversionPlan plan = registry_->switch_strategy(id, ss(spec), progress);
        emitNotices(registry_->take_notices());
        Q_EMIT strategySwitched(id, qs(plan.to_spec), qs(plan.summary));
        if (auto t = registry_->telemetry(id)) Q_EMIT cacheTelemetry(id, *t);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Switch strategy"), qs(e.what()));
        if (auto rec = store_->find_conversation_by_id(id)) Q_EMIT strategySwitched(id, qs(rec->cache_spec), QString());
    }
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT busyChanged(false);
}

void EngineWorker::saveSettings(const ChatSettings& settings) {
    if (!store_) return;
    try {
        settings.validate();
        settings.save(*store_);
        const bool rebuild = settings.resident_caches != settings_->resident_caches;
        *settings_ = settings;
        settings_->notices.clear();
        if (rebuild && registry_) {
            shutdown();
            makeRegistry();
        }
        if (model_ && backendThreads_ != settings.threads)
            Q_EMIT notice(tr("The new thread count applies when a model is next loaded."));
        if (model_ && backendDevice_ != settings.device)
            Q_EMIT notice(tr("The new device applies when a model is next loaded."));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Settings"), qs(e.what()));
    }
    Q_EMIT settingsLoaded(*settings_);
}

Progress EngineWorker::longStep(qint64 conversationId) {
    stop_.store(false);
    Progress progress;
    progress.cancel = &stop_;
    auto since = std::make_shared<QElapsedTimer>();
    since->start();
    progress.report = [this, since, conversationId](std::string_view task, int64_t done, int64_t total) {
        if (done != total && since->elapsed() < kTelemetryMs) return;
        since->restart();
        Q_EMIT turnProgress(conversationId, qs(task), done, total);
    };
    return progress;
}

void EngineWorker::savePrefixFromText(const QString& name, const QString& text) {
    if (!needModel(tr("Save prefix"))) return;
    try {
        std::vector<std::string> notices;
        registry_->prefixes().save(ss(name), ss(text), "", notices, longStep(0));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Save prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::savePrefixFromConversation(const QString& name, qint64 conversationId, int messages) {
    if (!needModel(tr("Save prefix"))) return;
    try {
        const auto all = store_->list_messages(conversationId);
        if (messages < 1 || static_cast<size_t>(messages) > all.size())
            throw Error("the conversation has " + std::to_string(all.size()) + " messages; " + std::to_string(messages) +
                        " were asked for");
        std::vector<ChatMessage> opening;
        for (int i = 0; i < messages; ++i) opening.push_back({all[static_cast<size_t>(i)].role, all[static_cast<size_t>(i)].content});
        std::vector<std::string> notices;
        registry_->prefixes().save_messages(ss(name), opening, "", notices, longStep(conversationId));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Save prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::editPrefix(qint64 id, const QString& text) {
    if (!needModel(tr("Edit prefix"))) return;
    try {
        const auto p = store_->find_prefix_by_id(id);
        if (!p) throw Error("the prefix was deleted");
        std::vector<std::string> notices;
        registry_->prefixes().edit(p->name, ss(text), notices, longStep(0));
        emitNotices(notices);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Edit prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::renamePrefix(qint64 id, const QString& name) {
    if (!store_) return;
    try {
        const std::string n = ss(name.trimmed());
        if (n.empty()) throw Error("a prefix needs a name");
        if (auto other = store_->find_prefix(n); other && other->id != id)
            throw Error("a prefix named \u201c" + n + "\u201d already exists");
        store_->rename_prefix(id, n);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Rename prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::removePrefix(qint64 id) {
    if (!store_) return;
    try {
        const std::string snapshot = store_->delete_prefix(id);
        if (!snapshot.empty()) store_->remove_snapshot_file(snapshot);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

}  // namespace kvchat
