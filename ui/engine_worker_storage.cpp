// EngineWorker's storage view slots: what the saved caches take on disk, and their budget.
#include "ui/engine_worker.h"

#include "engine/chat/chat_session.h"
#include "engine/error.h"

namespace kvchat {

namespace {

QString text(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

}  // namespace

void EngineWorker::reportStorage() {
    StorageReport r;
    if (!session_) {
        Q_EMIT storageReported(r);
        return;
    }
    try {
        auto caches = session_->stored_caches();
        for (auto it = caches.rbegin(); it != caches.rend(); ++it) {
            StorageItem item;
            item.prefix = it->owner == StoredCache::Owner::Prefix;
            item.id = it->id;
            item.name = text(it->name);
            item.tokens = it->tokens;
            item.cacheSpec = text(it->cache_spec);
            item.saved = !it->snapshot.empty();
            item.bytes = it->bytes;
            item.checkpoints = it->checkpoints;
            item.lastUsedMs = it->last_used_ms;
            r.items.push_back(item);
        }
        r.totalBytes = total_snapshot_bytes(caches);
        const auto budget = session_->snapshot_budget();
        r.budgetBytes = budget.bytes;
        r.budgetIsDefault = budget.is_default;
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Storage"), text(e.what()));
    }
    Q_EMIT storageReported(r);
}

void EngineWorker::dropCache(bool prefix, qint64 id) {
    if (!session_) return;
    try {
        session_->drop_cache(prefix ? StoredCache::Owner::Prefix : StoredCache::Owner::Conversation, id);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Remove saved cache"), text(e.what()));
    }
    reportStorage();
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::setStorageBudget(qint64 bytes) {
    if (!session_) return;
    try {
        // A negative budget is the window's "default".
        const auto dropped = session_->set_snapshot_budget(bytes < 0 ? std::nullopt : std::optional<int64_t>(bytes));
        if (!dropped.empty())
            Q_EMIT notice(tr("%n saved cache(s) removed to fit the budget (their messages are kept).", nullptr,
                             static_cast<int>(dropped.size())));
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Storage budget"), text(e.what()));
    }
    reportStorage();
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT prefixesChanged(prefixItems());
}

}  // namespace kvchat
