#include "engine/cache/cache.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/offload_tier.h"
#include "engine/error.h"

namespace kvchat {

Cache::Cache(CacheSpec spec, std::vector<std::unique_ptr<CacheLayer>> layers, std::shared_ptr<OffloadTier> tier)
    : spec_(std::move(spec)), spec_text_(to_string(spec_)), tier_(std::move(tier)), layers_(std::move(layers)) {}

Cache::~Cache() {
    layers_.clear();  // before the tier they may write to
}

std::string Cache::spill_path() const { return tier_ ? tier_->path() : std::string(); }

void Cache::check_room(int64_t n) const {
    for (const auto& l : layers_) l->check_room(seq_length(), n);
}

void Cache::roll_back() {
    for (auto& l : layers_) l->crop(seq_length());
}

bool Cache::can_crop_to(int64_t n) const {
    if (n < 0) return false;
    for (const auto& l : layers_)
        if (!l->can_crop_to(n)) return false;
    return true;
}

void Cache::crop(int64_t n) {
    if (n < 0) throw Error("cannot crop the cache to a negative length");
    if (n >= seq_length()) return;
    if (!can_crop_to(n))
        throw Error("cannot crop the " + spec_text_ + " cache back to " + std::to_string(n) + " tokens: its windows no longer hold the tokens before that point (restore a checkpoint or rebuild)");
    for (auto& l : layers_) l->crop(n);
    tokens_.resize(static_cast<size_t>(n));
}

void Cache::reset() {
    for (auto& l : layers_) l->reset();
    tokens_.clear();
}

namespace {

struct OwnedStates final : CheckpointBytes {
    std::vector<std::string> states;
    bool intact() const override { return true; }
};

}  // namespace

CacheCheckpoint Cache::checkpoint() const { return checkpoint(CacheCheckpoint{}); }

CacheCheckpoint Cache::checkpoint(CacheCheckpoint&& old) const {
    std::shared_ptr<OwnedStates> owned;
    // Sole owner of states made (non-const) below: their strings can be reused.
    if (old.storage.use_count() == 1 && dynamic_cast<const OwnedStates*>(old.storage.get()))
        owned = std::const_pointer_cast<OwnedStates>(std::static_pointer_cast<const OwnedStates>(std::move(old.storage)));
    if (!owned) owned = std::make_shared<OwnedStates>();
    owned->states.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
        owned->states[i].clear();  // (keeps its capacity)
        if (layers_[i]->crop_needs_checkpoint()) layers_[i]->save_state(owned->states[i]);
    }
    CacheCheckpoint cp;
    cp.spec = spec_text_;
    cp.length = seq_length();
    cp.layer_states.assign(owned->states.begin(), owned->states.end());
    cp.storage = std::move(owned);
    return cp;
}

bool Cache::restore(const CacheCheckpoint& cp) {
    if (cp.spec != spec_text_ || cp.length > seq_length() || cp.length < 0 || cp.layer_states.size() != layers_.size()) return false;
    for (size_t i = 0; i < layers_.size(); ++i)
        if (layers_[i]->crop_needs_checkpoint() && cp.layer_states[i].empty()) return false;
    if (!cp.intact()) return false;
    // The states were saved by these same layers (and checksummed when they come from a file),
    // so loading only fails on memory corruption.
    for (size_t i = 0; i < layers_.size(); ++i) {
        if (!cp.layer_states[i].empty()) {
            ByteReader r(cp.state(i), "checkpoint");
            layers_[i]->load_state(r);
        } else {
            layers_[i]->crop(cp.length);
        }
    }
    tokens_.resize(static_cast<size_t>(cp.length));
    return true;
}

int64_t Cache::bytes() const {
    int64_t b = 0;
    for (const auto& l : layers_) {
        const LayerTelemetry t = l->telemetry();
        b += t.bytes_fast + t.bytes_slow;
    }
    return b;
}

CacheTelemetry Cache::telemetry() const {
    CacheTelemetry c;
    c.spec = spec_text_;
    c.tokens = seq_length();
    for (const auto& l : layers_) {
        c.layers.push_back(l->telemetry());
        const LayerTelemetry& t = c.layers.back();
        c.bytes_fast += t.bytes_fast;
        c.bytes_slow += t.bytes_slow;
        c.bytes_reserved += t.bytes_reserved;
        c.moved_in_step += t.moved_in_step;
        c.moved_out_step += t.moved_out_step;
        c.prefetch_stall_ms += t.prefetch_stall_ms;
    }
    c.total_bytes = c.bytes_fast + c.bytes_slow;
    c.bytes_per_token = c.tokens > 0 ? static_cast<double>(c.total_bytes) / static_cast<double>(c.tokens) : 0.0;
    return c;
}

void Cache::replace_with(Cache& other) {
    layers_.clear();
    tier_.reset();
    spec_ = std::move(other.spec_);
    spec_text_ = std::move(other.spec_text_);
    tier_ = std::move(other.tier_);
    layers_ = std::move(other.layers_);
    tokens_ = std::move(other.tokens_);
    layer_specs_ = other.layer_specs_;
    backend_ = other.backend_;
    other.layers_.clear();
    other.tokens_.clear();
}

void Cache::set_origin(std::vector<LayerSpec> specs, Backend& backend) {
    layer_specs_ = std::move(specs);
    backend_ = &backend;
}

ThreadPool* Cache::pool() const { return backend_ ? &backend_->pool() : nullptr; }

}  // namespace kvchat
