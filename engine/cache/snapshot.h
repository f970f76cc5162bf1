#pragma once
// Cache snapshots: one file holding a cache (and optionally its per-turn checkpoints). Layout:
//   "KVCSNAP\0" magic, u32 format version, then sections, each
//   u32 tag, u64 length, payload, u32 CRC-32C of the payload:
//   HEAD (model fingerprint, strategy spec, token count and ids, per-layer layout),
//   LAYR (one per layer: its state), CKPT (one per checkpoint), END.
// Loading checks everything and refuses a mismatched or damaged file with a message naming the
// file and the problem; round trips are bit-exact. Files are written atomically.
#include "engine/cache/cache.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvchat {

class Backend;

constexpr uint32_t kSnapshotVersion = 1;

void save_snapshot(const std::string& path, const Cache& cache, const std::string& model_fingerprint,
                   std::span<const CacheCheckpoint> checkpoints = {});

struct LoadedSnapshot {
    std::unique_ptr<Cache> cache;
    std::vector<CacheCheckpoint> checkpoints;
};

// `layers` and `model_fingerprint` are the loading model's; a snapshot of another model, of
// another layer layout, or a damaged one is refused (kvchat::Error). The cache is made on
// `backend`, the one the model computes with: its layers land in that backend's memory, and the
// backend must outlive the cache (cache.h). The checks and layers run on its threads.
LoadedSnapshot load_snapshot(const std::string& path, const std::vector<LayerSpec>& layers,
                             const std::string& model_fingerprint, Backend& backend);

// CRC-32C (Castagnoli), as the sections use.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace kvchat
