// EngineWorker's storage view slots: what the saved caches take on disk, and their budget.
#include "ui/engine_worker.h"

#include "engine/chat/snapshot_storage.h"
#include "engine/error.h"
#include "engine/store/store.h"

namespace kvchat {

namespace {

QString text(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

}  // namespace

void EngineWorker::reportStorage() {
    StorageReport r;
    if (!store_) {
        Q_EMIT storageReported(r);
        return;
    }
    try {
        auto caches = stored_caches(*store_);
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
        r.budgetBytes = snapshot_budget(*store_);
        r.budgetIsDefault = !store_->setting(kSnapshotBudgetSetting).has_value();
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Storage"), text(e.what()));
    }
    Q_EMIT storageReported(r);
}

void EngineWorker::dropCache(bool prefix, qint64 id) {
    if (!store_) return;
    try {
        drop_snapshot(*store_, {prefix ? StoredCache::Owner::Prefix : StoredCache::Owner::Conversation, id});
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Remove saved cache"), text(e.what()));
    }
    reportStorage();
    Q_EMIT conversationsChanged(conversationItems());
    Q_EMIT prefixesChanged(prefixItems());
}

void EngineWorker::setStorageBudget(qint64 bytes) {
    if (!store_) return;
    try {
        if (bytes < 0)
            store_->remove_setting(kSnapshotBudgetSetting);
        else
            set_snapshot_budget(*store_, bytes);
        const int64_t budget = snapshot_budget(*store_);
        const auto dropped = prune_snapshots(*store_, budget);
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
