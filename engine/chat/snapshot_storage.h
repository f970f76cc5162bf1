#pragma once
// What the saved caches cost on disk, and a budget for all of them together. A snapshot is only
// an acceleration: over the budget, the least recently used conversations and prefixes lose
// theirs (their messages stay; the cache is prefilled again when they are next used), so a
// user who keeps hundreds of conversations never finds gigabytes gone without being asked.
#include "engine/store/store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvchat {

// The store setting holding the budget in bytes; absent: default_snapshot_budget().
inline constexpr const char* kSnapshotBudgetSetting = "snapshot_budget_bytes";
inline constexpr int64_t kDefaultSnapshotBudget = 2'000'000'000;

// One conversation or prefix and its saved cache.
struct StoredCache {
    enum class Owner { Conversation, Prefix };
    Owner owner = Owner::Conversation;
    int64_t id = 0;
    std::string name;       // the conversation's title or the prefix's name
    std::string cache_spec;
    int64_t tokens = 0;     // the snapshot's tokens, else what the record says
    std::string snapshot;   // file name; empty when no cache is saved
    int64_t bytes = 0;      // the file's size (0 when none or missing)
    int64_t checkpoints = 0;
    int64_t last_used_ms = 0;
};

// Every conversation and prefix, least recently used first. read_headers: also the tokens and
// checkpoints each snapshot's header holds (opens every file).
std::vector<StoredCache> stored_caches(const Store& store, bool read_headers = true);
int64_t total_snapshot_bytes(const std::vector<StoredCache>& caches);

// The budget: the setting, else 2 GB, or a quarter of what the snapshots and the free space of
// their disk add up to when that is less.
int64_t snapshot_budget(const Store& store);
int64_t default_snapshot_budget(const Store& store);
// Throws kvchat::Error for a negative budget.
void set_snapshot_budget(Store& store, int64_t bytes);

// Removes saved caches, least recently used first, until they take at most `budget - room`
// bytes: their rows forget them and their files go. `keep` (one conversation or prefix) is left
// alone, and so is a conversation another process (or this one) is changing right now. Returns
// what was removed.
struct CacheRef {
    StoredCache::Owner owner;
    int64_t id;
};
std::vector<StoredCache> prune_snapshots(Store& store, int64_t budget, int64_t room = 0,
                                         std::optional<CacheRef> keep = std::nullopt);

// Forgets one saved cache now (the storage view's "drop"); false when it had none.
bool drop_snapshot(Store& store, const CacheRef& which);

// What a save does around writing one snapshot (conversations and prefixes alike): before it,
// makes room for about `expected` bytes; after it, brings the total back within the budget, and
// drops the new snapshot itself when it alone is larger than the budget. Appends what it did to
// `notices`; never throws (a budget that cannot be applied costs disk, never the turn).
void make_room_for_snapshot(Store& store, const CacheRef& which, int64_t expected, std::vector<std::string>& notices);
void keep_snapshots_in_budget(Store& store, const CacheRef& which, std::vector<std::string>& notices);

}  // namespace kvchat
