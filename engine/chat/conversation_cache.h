#pragma once
// How a conversation makes, converts and saves its cache: the chat code's calls into
// engine/cache in one place, so the turn logic reads in the user's terms.
#include "engine/cache/cache.h"
#include "engine/cache/convert.h"
#include "engine/common/progress.h"
#include "engine/model/model.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvchat {

// The strategy a new conversation gets when the user names none.
std::string default_cache_spec();
// The canonical text of a spec (what Cache::spec_text() reports; empty: the default); throws
// kvchat::Error for a bad one.
std::string canonical_cache_spec(const std::string& spec);
// The spec a text names (empty: the default); throws kvchat::Error for a bad one.
CacheSpec conversation_cache_spec(const std::string& spec);

// A fresh, empty cache of the strategy `spec`. Throws kvchat::Error for a bad spec, or one naming
// the spec and the bytes when a static cache cannot be allocated.
std::unique_ptr<Cache> make_conversation_cache(const Model& model, Backend& backend, const std::string& spec);

// The most tokens the cache can hold (0: only the model's context limits it).
int64_t cache_capacity(const Cache& cache);

// The cache under another strategy, in place: tokens carried over where the target can keep
// them, otherwise rebuilt through the model from the token history. Throws kvchat::Error (the
// cache is then unchanged).
// With `progress`, a rebuild reports "Converting cache" per chunk and a set cancel flag throws
// kvchat::Cancelled (the cache is then unchanged too).
ConvertResult convert_conversation_cache(Cache& cache, const Model& model, Backend& backend, const CacheSpec& spec,
                                         const Progress& progress = {});

// The one way a cache changes strategy: converted in place (convert_conversation_cache) and its
// checkpoints dropped, as they were of the old strategy and can no longer be restored. Throws
// (kvchat::Error, kvchat::Cancelled) with the cache and the checkpoints as they were.
// Conversation::switch_strategy does this for a conversation and sets its spec.
ConvertResult switch_strategy(Cache& cache, std::vector<CacheCheckpoint>& checkpoints, const Model& model,
                              Backend& backend, const CacheSpec& spec, const Progress& progress = {});

// Runs `n` tokens through the model into `cache` in chunks, reporting `task` after each chunk as
// (done_before + tokens done, total; total < 0: n) and checking the cancel flag before each.
// Cancelled, it throws kvchat::Cancelled with the chunks done so far in the cache.
void prefill_in_chunks(const Model& model, Backend& backend, Cache& cache, const int32_t* tokens, int64_t n,
                       const Progress& progress, std::string_view task, int64_t done_before = 0, int64_t total = -1);

// A cache and the checkpoints of its sliding layers, as a snapshot holds them.
struct SavedCache {
    std::unique_ptr<Cache> cache;
    std::vector<CacheCheckpoint> checkpoints;
};

// Writes the cache (tokens and checkpoints included) to `path` atomically, marked with the
// model's fingerprint.
void save_cache_snapshot(const Cache& cache, std::span<const CacheCheckpoint> checkpoints, const Model& model,
                         const std::string& path);
// Reads a snapshot. Throws kvchat::Error naming the path when the file is missing, damaged, from
// another model or of another layout.
SavedCache load_cache_snapshot(const std::string& path, const Model& model, Backend& backend);

}  // namespace kvchat
