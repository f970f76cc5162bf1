#pragma once
// Cache snapshots: one file holding a cache (and optionally its per-turn checkpoints). Layout:
//   "KVCSNAP\0" magic, u32 format version, then sections, each
//   u32 tag, u64 length, payload, u32 CRC-32C of the payload:
//   HEAD (model fingerprint, strategy spec, token count and ids, per-layer layout),
//   LAYR (one per layer: its state), then with checkpoints POOL (per layer, the bytes of its
//   checkpoints the live layer does not hold) and CKP2 (one per checkpoint: per layer, pieces of
//   the live layer's section and the pool; version 1 wrote CKPT, each a whole copy), END.
// Loading checks everything and refuses a mismatched or damaged file with a message naming the
// file and the problem; round trips are bit-exact. Files are written atomically.
#include "engine/cache/cache.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvchat {

class Backend;

// Version 2 stores checkpoints as pieces of the live layers and a shared pool (checkpoint_pool.h);
// version 1 files (each checkpoint a whole copy) still load.
constexpr uint32_t kSnapshotVersion = 2;

// format_version 1 writes the earlier format (each checkpoint a whole copy), for the tests that
// such files still load.
void save_snapshot(const std::string& path, const Cache& cache, const std::string& model_fingerprint,
                   std::span<const CacheCheckpoint> checkpoints = {}, uint32_t format_version = kSnapshotVersion);

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

// What a snapshot's header says, read without its layers (for a list of what is stored).
struct SnapshotSummary {
    uint32_t version = 0;
    std::string spec;
    int64_t tokens = 0;
    uint32_t checkpoints = 0;
};
// Throws kvchat::Error naming the file when it is not a snapshot or its header is damaged.
SnapshotSummary read_snapshot_summary(const std::string& path);

// CRC-32C (Castagnoli), as the sections use.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace kvchat
