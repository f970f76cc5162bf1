#pragma once
// A model's KV cache: one CacheLayer per model layer, plus the token ids it holds in order
// (the history a rebuild re-prefills from), the strategy spec it was made with, and (for
// offloaded strategies) the slow tier its layers share.
//
// Who owns the backend: never the cache. A cache is made on a backend (make_cache, load_snapshot)
// that allocates its layers' memory and runs every operation on it, and the cache only refers to
// it. That backend is the one the model computes with (the chat session's), and it must outlive
// every cache made on it, conversions and copies included (they are made on the same backend).
#include "engine/cache/cache_layer.h"
#include "engine/cache/cache_spec.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

class Backend;
class OffloadTier;
class ThreadPool;

// Where a checkpoint's bytes live: its own memory, or a section of a snapshot file that is only
// read (and checksummed) when the checkpoint is used, so reopening a conversation does not read
// the checkpoints it may never need.
class CheckpointBytes {
public:
    virtual ~CheckpointBytes() = default;
    // False when the bytes are damaged; the checkpoint is then unusable.
    virtual bool intact() const = 0;
    // Layer i's state, given what the checkpoint's `layer_states[i]` holds: itself, or for a
    // checkpoint stored as pieces of a snapshot's shared bytes (snapshot format 2), the state
    // those pieces decode to (valid once intact() said true).
    virtual std::string_view state(size_t, std::string_view stored) const { return stored; }
};

// What a cache looked like at one length, small enough to keep one per turn: the content of the
// layers that forget tokens (windows, sinks) or quantize them; the others only need a crop.
// Copies share the bytes, which never change.
struct CacheCheckpoint {
    std::string spec;
    int64_t length = 0;
    // Into `storage`; empty for layers that keep every token. Read them through state(i).
    std::vector<std::string_view> layer_states;
    std::shared_ptr<const CheckpointBytes> storage;
    bool intact() const { return !storage || storage->intact(); }
    // Layer i's state, to load (call intact() first); empty for layers that keep every token.
    std::string_view state(size_t i) const { return storage ? storage->state(i, layer_states[i]) : layer_states[i]; }
    int64_t bytes() const {
        int64_t b = 0;
        for (const auto& s : layer_states) b += static_cast<int64_t>(s.size());
        return b;
    }
};

// The whole cache, for the inspector.
struct CacheTelemetry {
    std::string spec;
    int64_t tokens = 0;        // sequence length
    int64_t total_bytes = 0;   // held, fast + slow tier
    int64_t bytes_fast = 0, bytes_slow = 0;
    int64_t bytes_reserved = 0;
    double bytes_per_token = 0.0;
    int64_t moved_in_step = 0, moved_out_step = 0;
    double prefetch_stall_ms = 0.0;
    std::vector<LayerTelemetry> layers;
};

class Cache {
public:
    Cache(CacheSpec spec, std::vector<std::unique_ptr<CacheLayer>> layers, std::shared_ptr<OffloadTier> tier = nullptr);
    ~Cache();

    // The strategy the cache was made with: ask it, rather than its text, what the cache is.
    const CacheSpec& spec() const { return spec_; }
    // Its canonical text, to_string(spec()) (what the store and snapshots keep, and messages show).
    const std::string& spec_text() const { return spec_text_; }
    size_t n_layers() const { return layers_.size(); }
    CacheLayer& layer(size_t i) { return *layers_[i]; }
    const CacheLayer& layer(size_t i) const { return *layers_[i]; }
    // The spill file of an offloaded cache ("" otherwise).
    std::string spill_path() const;

    // Tokens seen so far; the next token goes at this position.
    int64_t seq_length() const { return static_cast<int64_t>(tokens_.size()); }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    void append_tokens(const int32_t* ids, int64_t n) { tokens_.insert(tokens_.end(), ids, ids + n); }
    // Throws kvchat::Error (naming the parameter) when n more tokens do not fit, before anything
    // is changed.
    void check_room(int64_t n) const;
    // Puts the layers back in line with tokens() after a forward pass failed half-way.
    void roll_back();

    // Whether crop(n) keeps everything positions >= n need (see CacheLayer::can_crop_to).
    bool can_crop_to(int64_t n) const;
    // Keeps the first n tokens; throws kvchat::Error when !can_crop_to(n).
    void crop(int64_t n);
    void reset();

    CacheCheckpoint checkpoint() const;
    // The same, writing into the memory of `old` (a checkpoint being dropped) when nothing else
    // shares it: a checkpoint holds every sliding window (megabytes), and memory already touched
    // is much cheaper to fill than fresh pages inside a turn's time to first token.
    CacheCheckpoint checkpoint(CacheCheckpoint&& old) const;
    // Crops to the checkpoint's length and puts the saved windows back. False (nothing changed)
    // when the checkpoint is of another strategy or longer than the cache.
    bool restore(const CacheCheckpoint& cp);

    int64_t bytes() const;
    CacheTelemetry telemetry() const;

    // Takes over other's layers, spec and tokens (conversion); other is left empty.
    void replace_with(Cache& other);

    // What the cache was built for and with (set by make_cache), so it can be rebuilt under
    // another spec on the same backend (which the cache does not own: see above).
    void set_origin(std::vector<LayerSpec> specs, Backend& backend);
    const std::vector<LayerSpec>& layer_specs() const { return layer_specs_; }
    // The backend holding the layers' memory and computing with it (null: not made by make_cache).
    Backend* backend() const { return backend_; }
    ThreadPool* pool() const;

private:
    std::vector<LayerSpec> layer_specs_;
    Backend* backend_ = nullptr;  // not owned: outlives the cache
    CacheSpec spec_;
    std::string spec_text_;  // to_string(spec_), made once
    std::shared_ptr<OffloadTier> tier_;  // declared before layers_: outlives them
    std::vector<std::unique_ptr<CacheLayer>> layers_;
    std::vector<int32_t> tokens_;
};

}  // namespace kvchat
