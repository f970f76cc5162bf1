#include "ui/engine_worker.h"

#include "engine/chat/conversation_registry.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/store/store.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>

#include <algorithm>
#include <cstdio>
#include <exception>

namespace kvchat {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
std::string ss(const QString& s) { return s.toStdString(); }

MessageRole roleOf(Role r) {
    switch (r) {
        case Role::System: return MessageRole::System;
        case Role::User: return MessageRole::User;
        case Role::Assistant: return MessageRole::Assistant;
    }
    return MessageRole::User;
}

AnswerFigures figuresOf(const GenerationStats& s) {
    AnswerFigures f;
    f.promptTokens = s.prompt_tokens;
    f.generatedTokens = s.generated_tokens;
    f.ttftMs = s.ttft_ms.value_or(-1);
    f.tokensPerSecond = s.tokens_per_second.value_or(-1);
    return f;
}

MessageItem messageItem(const MessageRecord& m) {
    MessageItem item;
    item.id = m.id;
    item.ordinal = static_cast<int>(m.ordinal);
    item.role = roleOf(m.role);
    item.content = qs(m.content);
    item.repaired = m.content_repaired;
    item.figures = figuresOf(m.stats);
    item.createdMs = m.created_ms;
    return item;
}

}  // namespace

TurnOptions EngineWorker::turnOptions() const {
    TurnOptions t;
    t.generation.max_new_tokens = maxNewTokens_;
    return t;
}

EngineWorker::EngineWorker(QObject* parent) : QObject(parent) {}

EngineWorker::~EngineWorker() { shutdown(); }

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
    if (model_) registry_ = std::make_unique<ConversationRegistry>(*store_, *model_, *backend_);
    Q_EMIT storeOpened(path, conversationItems(), prefixItems());
}

void EngineWorker::loadModel(const QString& path) {
    cancelLoad_.store(false);
    Q_EMIT modelLoading(path);
    Q_EMIT modelProgress(tr("Loading model"), 0, 0);
    std::unique_ptr<Model> model;
    try {
        model = Model::load(ss(path));
    } catch (const std::exception& e) {
        Q_EMIT modelFailed(path, qs(e.what()));
        return;
    }
    if (cancelLoad_.load()) {
        Q_EMIT modelFailed(path, QString());
        return;
    }
    shutdown();
    if (!backend_) backend_ = make_cpu_backend(0);
    model_ = std::move(model);
    if (store_) registry_ = std::make_unique<ConversationRegistry>(*store_, *model_, *backend_);
    if (registry_) emitNotices(registry_->take_notices());
    ModelInfo info;
    info.path = path;
    info.name = QFileInfo(path).fileName();
    info.architecture = qs(model_->config().arch_name);
    info.contextLimit = model_->config().n_ctx_train;
    info.fileBytes = static_cast<qint64>(model_->file_bytes());
    info.layers = model_->config().n_layer;
    Q_EMIT modelLoaded(info);
}

std::string EngineWorker::titleOf(qint64 id) const {
    if (!store_) throw Error("no database is open");
    const auto rec = store_->find_conversation_by_id(id);
    if (!rec) throw Error("the conversation was deleted");
    return rec->title;
}

ConversationItem EngineWorker::conversationItem(qint64 id) const {
    ConversationItem item;
    const auto rec = store_->find_conversation_by_id(id);
    if (!rec) return item;
    const auto messages = store_->list_messages(id);
    item.id = rec->id;
    item.title = qs(rec->title);
    item.updatedMs = rec->updated_ms;
    item.messageCount = static_cast<qint64>(messages.size());
    item.cacheSpec = qs(rec->cache_spec);
    item.lastUnanswered = !messages.empty() && messages.back().role == Role::User;
    return item;
}

QList<ConversationItem> EngineWorker::conversationItems() const {
    QList<ConversationItem> out;
    if (!store_) return out;
    for (const ConversationRecord& c : store_->list_conversations()) out.push_back(conversationItem(c.id));
    return out;
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
        options.system = ss(system);
        if (prefixId > 0) {
            const auto p = store_->find_prefix_by_id(prefixId);
            if (!p) throw Error("the prefix was deleted");
            options.prefix = p->name;
        }
        // A unique title: "Chat", "Chat 2", ... (the user renames it).
        std::string title = "New chat";
        for (int n = 2; store_->find_conversation(title); ++n) title = "New chat " + std::to_string(n);
        registry_->open(title, options);
        emitNotices(registry_->take_notices());
        const ConversationItem item = conversationItem(registry_->id_of(title));
        Q_EMIT conversationsChanged(conversationItems());
        Q_EMIT conversationCreated(item);
        if (prefixId > 0) Q_EMIT prefixesChanged(prefixItems());
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("New chat"), qs(e.what()));
    }
}

void EngineWorker::openConversation(qint64 id) {
    if (!store_) return;
    try {
        QList<MessageItem> messages;
        for (const MessageRecord& m : store_->list_messages(id)) messages.push_back(messageItem(m));
        Q_EMIT transcriptLoaded(conversationItem(id), messages);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Open conversation"), qs(e.what()));
    }
}

void EngineWorker::renameConversation(qint64 id, const QString& title) {
    if (!store_) return;
    try {
        const std::string t = ss(title.trimmed());
        if (t.empty()) throw Error("a conversation needs a name");
        if (auto other = store_->find_conversation(t); other && other->id != id)
            throw Error("a conversation named \u201c" + t + "\u201d already exists");
        store_->rename_conversation(id, t);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Rename"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::removeConversation(qint64 id) {
    if (!store_) return;
    try {
        const std::string snapshot = store_->delete_conversation(id);
        if (!snapshot.empty()) std::remove(store_->snapshot_path(snapshot).c_str());
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete"), qs(e.what()));
    }
    Q_EMIT conversationsChanged(conversationItems());
}

void EngineWorker::search(const QString& query) {
    if (!store_) return;
    QList<qint64> ids;
    const QString q = query.trimmed();
    for (const ConversationRecord& c : store_->list_conversations()) {
        bool hit = q.isEmpty() || qs(c.title).contains(q, Qt::CaseInsensitive);
        if (!hit)
            for (const MessageRecord& m : store_->list_messages(c.id))
                if (qs(m.content).contains(q, Qt::CaseInsensitive)) {
                    hit = true;
                    break;
                }
        if (hit) ids.push_back(c.id);
    }
    Q_EMIT searchResults(query, ids);
}

template <class Turn>
void EngineWorker::runTurn(qint64 id, Turn&& turn) {
    if (!needModel(tr("Send"))) {
        Q_EMIT turnFailed(id, tr("No model is loaded yet."), false);
        return;
    }
    stop_.store(false);
    size_t before = 0;
    std::string title;
    try {
        title = titleOf(id);
        before = store_->list_messages(id).size();
    } catch (const std::exception& e) {
        Q_EMIT turnFailed(id, qs(e.what()), false);
        return;
    }
    Q_EMIT busyChanged(true);
    Q_EMIT turnStarted(id);
    QString pending;
    QElapsedTimer sinceFlush;
    sinceFlush.start();
    auto onText = [&](std::string_view piece) {
        pending += qs(piece);
        if (sinceFlush.elapsed() >= kTextBatchMs) {
            Q_EMIT answerText(id, pending);
            pending.clear();
            sinceFlush.restart();
        }
    };
    try {
        const TurnResult r = turn(title, onText);
        if (!pending.isEmpty()) Q_EMIT answerText(id, pending);
        const auto messages = store_->list_messages(id);
        TurnOutcome out;
        out.conversationId = id;
        if (!messages.empty() && messages.back().role == Role::Assistant) out.answer = messageItem(messages.back());
        out.answer.figures.cachedTokens = r.cached_tokens;
        out.answer.figures.computedTokens = r.prefill_tokens;
        out.stopReason = qs(r.stop_reason);
        for (const std::string& n : r.notices) out.notices.push_back(qs(n));
        out.kvBytes = r.kv_bytes;
        out.contextTokens = r.prompt_tokens + static_cast<qint64>(r.tokens.size());
        Conversation& c = registry_->open(title);
        out.cacheSpec = qs(c.cache_spec());
        if (c.has_cache()) Q_EMIT cacheTelemetry(id, c.cache().telemetry());
        Q_EMIT turnFinished(out);
    } catch (const std::exception& e) {
        if (!pending.isEmpty()) Q_EMIT answerText(id, pending);
        bool stored = false;
        try {
            stored = store_->list_messages(id).size() != before;
        } catch (const std::exception&) {
        }
        Q_EMIT turnFailed(id, qs(e.what()), stored);
    }
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT busyChanged(false);
}

void EngineWorker::send(qint64 id, const QString& text) {
    runTurn(id, [&](const std::string& title, auto& onText) {
        registry_->open(title);
        return registry_->send(title, ss(text), turnOptions(), onText,
                               &stop_);
    });
}

void EngineWorker::regenerate(qint64 id) {
    runTurn(id, [&](const std::string& title, auto& onText) {
        registry_->open(title);
        return registry_->regenerate(title, turnOptions(), onText,
                                     &stop_);
    });
}

void EngineWorker::edit(qint64 id, int ordinal, const QString& text) {
    runTurn(id, [&](const std::string& title, auto& onText) {
        registry_->open(title);
        return registry_->edit(title, static_cast<size_t>(ordinal), ss(text),
                               turnOptions(), onText, &stop_);
    });
}

void EngineWorker::switchStrategy(qint64 id, const QString& spec) {
    if (!needModel(tr("Switch strategy"))) return;
    try {
        const std::string title = titleOf(id);
        OpenOptions o;
        o.cache_spec = ss(spec);
        Conversation& c = registry_->open(title, o);
        emitNotices(registry_->take_notices());
        Q_EMIT strategySwitched(id, qs(c.cache_spec()), QString());
        if (c.has_cache()) Q_EMIT cacheTelemetry(id, c.cache().telemetry());
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Switch strategy"), qs(e.what()));
    }
}

void EngineWorker::savePrefixFromText(const QString& name, const QString& text) {
    if (!needModel(tr("Save prefix"))) return;
    try {
        std::vector<std::string> notices;
        registry_->prefixes().save(ss(name), ss(text), "", notices);
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
        registry_->prefixes().save_messages(ss(name), opening, "", notices);
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
        registry_->prefixes().edit(p->name, ss(text), notices);
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
        if (!snapshot.empty()) std::remove(store_->snapshot_path(snapshot).c_str());
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Delete prefix"), qs(e.what()));
    }
    Q_EMIT prefixesChanged(prefixItems());
}

}  // namespace kvchat
