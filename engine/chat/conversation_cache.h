#pragma once
// How a conversation makes, crops, checkpoints, converts and saves its cache: every call the chat
// code makes into engine/cache goes through here, so the turn logic reads in the user's terms.
#include "engine/cache/cache.h"
#include "engine/model/model.h"

#include <memory>
#include <string>

namespace kvchat {

// The strategy a new conversation gets when the user names none.
std::string default_cache_spec();

// A fresh, empty cache of the strategy `spec` (its textual form). Throws kvchat::Error for an
// unknown or malformed spec, std::bad_alloc when a static cache cannot be allocated.
std::unique_ptr<Cache> make_conversation_cache(const Model& model, Backend& backend, const std::string& spec);

// The strategy of an existing cache, in textual form.
std::string cache_spec_of(const Cache& cache, const std::string& spec_it_was_made_with);

// Whether crop(n) keeps the cache exact: a layer that already evicted tokens before n (a
// sliding window, a sink) cannot give them back.
bool cache_can_crop_to(const Cache& cache, int64_t n);

// Remembers the state at the current length so a later crop to here is possible even after
// sliding layers moved on. restore_cache_checkpoint brings the cache back to the latest
// checkpoint at or before `at_most` and returns its length, or -1 when there is none.
void checkpoint_cache(Cache& cache);
int64_t restore_cache_checkpoint(Cache& cache, int64_t at_most);

// The most tokens the cache can hold (0: only the model's context limits it).
int64_t cache_capacity(const Cache& cache);

// Writes the cache (tokens included) to `path` atomically, marked with the model's fingerprint.
void save_cache_snapshot(const Cache& cache, const Model& model, const std::string& path);
// Reads a snapshot written by save_cache_snapshot. Throws kvchat::Error naming the path when the
// file is missing, damaged, from another model or of another format.
std::unique_ptr<Cache> load_cache_snapshot(const std::string& path, const Model& model, Backend& backend);

// The same cache under another strategy (prefixes saved under another one, the live switch to
// sink or sliding retention when the context fills, the fallback to offloaded when memory runs
// out). Throws kvchat::Error when the conversion is not possible.
std::unique_ptr<Cache> convert_cache(const Cache& cache, const Model& model, Backend& backend, const std::string& spec);

}  // namespace kvchat
