#include "engine/chat/snapshot_storage.h"

#include "engine/cache/snapshot.h"
#include "engine/error.h"
#include "engine/store/conversation_lock.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

namespace kvchat {

namespace {

int64_t file_bytes(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : 0;
}

void read_file_figures(const Store& store, StoredCache& c) {
    if (c.snapshot.empty()) return;
    const std::string path = store.snapshot_path(c.snapshot);
    c.bytes = file_bytes(path);
    try {
        const SnapshotSummary s = read_snapshot_summary(path);
        c.tokens = s.tokens;
        c.checkpoints = s.checkpoints;
    } catch (const Error&) {
        // (missing or damaged: it costs what it takes, and the next save replaces it)
    }
}

}  // namespace

std::vector<StoredCache> stored_caches(const Store& store, bool read_headers) {
    std::vector<StoredCache> out;
    for (const ConversationOverview& o : store.list_conversation_overviews()) {
        StoredCache c;
        c.owner = StoredCache::Owner::Conversation;
        c.id = o.conversation.id;
        c.name = o.conversation.title;
        c.cache_spec = o.conversation.cache_spec;
        c.tokens = o.tokens;
        c.snapshot = o.conversation.snapshot;
        c.last_used_ms = o.conversation.updated_ms;
        if (read_headers)
            read_file_figures(store, c);
        else if (!c.snapshot.empty())
            c.bytes = file_bytes(store.snapshot_path(c.snapshot));
        out.push_back(std::move(c));
    }
    for (const PrefixRecord& p : store.list_prefixes()) {
        StoredCache c;
        c.owner = StoredCache::Owner::Prefix;
        c.id = p.id;
        c.name = p.name;
        c.cache_spec = p.cache_spec;
        c.tokens = static_cast<int64_t>(p.tokens.size());
        c.snapshot = p.snapshot;
        c.last_used_ms = p.last_used_ms.value_or(p.created_ms);
        if (read_headers)
            read_file_figures(store, c);
        else if (!c.snapshot.empty())
            c.bytes = file_bytes(store.snapshot_path(c.snapshot));
        out.push_back(std::move(c));
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const StoredCache& a, const StoredCache& b) { return a.last_used_ms < b.last_used_ms; });
    return out;
}

int64_t total_snapshot_bytes(const std::vector<StoredCache>& caches) {
    int64_t t = 0;
    for (const StoredCache& c : caches) t += c.bytes;
    return t;
}

int64_t default_snapshot_budget(const Store& store) {
    struct statvfs fs {};
    if (::statvfs(store.snapshot_dir().c_str(), &fs) != 0) return kDefaultSnapshotBudget;
    const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    const int64_t used = total_snapshot_bytes(stored_caches(store, false));
    return std::min(kDefaultSnapshotBudget, (free_bytes + used) / 4);
}

int64_t snapshot_budget(const Store& store) {
    if (const auto v = store.setting(kSnapshotBudgetSetting)) {
        try {
            size_t end = 0;
            const long long b = std::stoll(*v, &end);
            if (end == v->size() && b >= 0) return b;
        } catch (const std::exception&) {
        }
    }
    return default_snapshot_budget(store);
}

void set_snapshot_budget(Store& store, int64_t bytes) {
    if (bytes < 0) throw Error("the snapshot budget must be 0 or more bytes, got " + std::to_string(bytes));
    store.set_setting(kSnapshotBudgetSetting, std::to_string(bytes));
}

bool drop_snapshot(Store& store, const CacheRef& which) {
    std::string name;
    if (which.owner == StoredCache::Owner::Conversation) {
        const auto c = store.find_conversation_by_id(which.id);
        if (!c || c->snapshot.empty()) return false;
        // Not while another process (or this one) changes it: it would save one again anyway.
        ConversationLock lock(store.conversation_lock_path(c->id), c->title, std::chrono::milliseconds(0));
        name = store.set_conversation_snapshot(c->id, "");
    } else {
        const auto p = store.find_prefix_by_id(which.id);
        if (!p || p->snapshot.empty()) return false;
        name = store.set_prefix_snapshot(p->id, "", p->model_fingerprint, p->cache_spec);
    }
    store.remove_snapshot_file(name);
    return true;
}

std::vector<StoredCache> prune_snapshots(Store& store, int64_t budget, int64_t room, std::optional<CacheRef> keep) {
    std::vector<StoredCache> all = stored_caches(store, false), dropped;
    int64_t total = total_snapshot_bytes(all);
    for (const StoredCache& c : all) {  // least recently used first
        if (total + room <= budget) break;
        if (c.snapshot.empty()) continue;
        if (keep && keep->owner == c.owner && keep->id == c.id) continue;
        try {
            if (!drop_snapshot(store, {c.owner, c.id})) continue;
        } catch (const Error&) {
            continue;  // in use right now: the next one goes instead
        }
        total -= c.bytes;
        dropped.push_back(c);
    }
    return dropped;
}

namespace {

std::string megabytes(int64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
    return buf;
}

void tell_dropped(const std::vector<StoredCache>& dropped, int64_t budget, std::vector<std::string>& notices) {
    if (dropped.empty()) return;
    int64_t freed = 0;
    for (const StoredCache& c : dropped) freed += c.bytes;
    notices.push_back("saved caches are kept within " + megabytes(budget) + ": the caches of the " +
                      std::to_string(dropped.size()) + " least recently used conversation" +
                      (dropped.size() == 1 ? "" : "s") + " or prefix" + (dropped.size() == 1 ? "" : "es") +
                      " were removed (" + megabytes(freed) + "; their messages are kept, and the cache is computed again when used)");
}

}  // namespace

void make_room_for_snapshot(Store& store, const CacheRef& which, int64_t expected, std::vector<std::string>& notices) {
    try {
        const int64_t budget = snapshot_budget(store);
        tell_dropped(prune_snapshots(store, budget, expected, which), budget, notices);
    } catch (const std::exception&) {
    }
}

void keep_snapshots_in_budget(Store& store, const CacheRef& which, std::vector<std::string>& notices) {
    try {
        const int64_t budget = snapshot_budget(store);
        tell_dropped(prune_snapshots(store, budget, 0, which), budget, notices);
        for (const StoredCache& c : stored_caches(store, false)) {
            if (c.owner != which.owner || c.id != which.id || c.bytes <= budget) continue;
            const std::string name = c.owner == StoredCache::Owner::Conversation
                                         ? store.set_conversation_snapshot(c.id, "")
                                         : [&] {
                                               const auto p = store.find_prefix_by_id(c.id);
                                               return store.set_prefix_snapshot(c.id, "", p->model_fingerprint, p->cache_spec);
                                           }();
            store.remove_snapshot_file(name);
            notices.push_back("the cache of " + std::string(c.owner == StoredCache::Owner::Conversation ? "conversation" : "prefix") +
                              " '" + c.name + "' (" + megabytes(c.bytes) + ") is larger than the budget for saved caches (" +
                              megabytes(budget) + ") and was not kept; the next session computes it again");
        }
    } catch (const std::exception&) {
    }
}

}  // namespace kvchat
