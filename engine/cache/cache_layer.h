#pragma once
// One model layer's KV cache. Every slot remembers the position of the token it holds, so the
// attention mask follows from positions alone: a query at position p sees a slot at position q
// when q <= p and, on a sliding layer of window W, p - q < W.
#include "engine/compute/attention.h"
#include "engine/compute/backend.h"
#include "engine/compute/rope.h"
#include "engine/compute/kv_dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvchat {

// What a layer is in the model: its attention shape, its RoPE and the model's own window.
struct LayerSpec {
    int index = 0;
    AttentionShape shape;
    RopeSpec rope;
    int model_window = 0;  // the model's sliding window for this layer; 0 = global attention
    // The full-precision format a spec without dtype= keeps: the model's own (f16 for GGUF
    // models, whose keys and values llama.cpp keeps in f16; f32 for float checkpoints).
    KvDtype kv_dtype = KvDtype::F16;
};

// What the cache inspector draws for one layer.
struct LayerTelemetry {
    std::string kind;            // "global" or "sliding" (the model's attention kind)
    std::string storage;         // how the cache keeps it, e.g. "growable f16"
    std::string dtype;           // the full-precision format: "f16", "bf16" or "f32"
    int64_t tokens_held = 0;
    int64_t capacity = 0;        // slots allocated (growable layers: current allocation)
    int64_t bytes_fast = 0;      // resident bytes
    int64_t bytes_slow = 0;      // bytes in the slow tier (offloaded)
    int64_t bytes_full_precision = 0;
    int64_t bytes_quantized = 0;
    int64_t quantized_tokens = 0;
    int64_t residual_tokens = 0;
    int64_t sink_begin = 0, sink_end = 0;      // positions [begin, end) kept as sinks
    int64_t window_begin = 0, window_end = 0;  // positions [begin, end) in the recent window
    int64_t evicted = 0;
    int64_t bytes_reserved = 0;  // memory or disk set aside for the layer (>= bytes held)
    int64_t moved_in_step = 0, moved_out_step = 0;
    int64_t moved_in_total = 0, moved_out_total = 0;
    double prefetch_stall_ms = 0.0;
};

// The tokens a layer holds, in position order, in f32 (keys rotated at their positions), for
// conversion between strategies. exact[i] is 0 where the value was reconstructed from a
// quantized store.
struct TokenRows {
    // How exact rows are given: in f32 (k and v), or as the records the layer keeps them in, so a
    // target of the same dtype takes them as they are, without a round trip through f32.
    enum class Form : uint8_t { F32, Kept };

    int64_t kv_dim = 0;
    std::vector<int32_t> pos;
    // pos.size() x kv_dim each; in Form::Kept, only the rows with exact == 0 are set (and k, v
    // are empty when there are none).
    std::vector<float> k, v;
    std::vector<uint8_t> exact;
    int nbits = 0, group = 0;  // the quantized format the rows with exact == 0 came from
    KvDtype dtype = KvDtype::F32;  // the format the rows with exact == 1 were kept in
    Form form = Form::F32;
    // Form::Kept: row i's record at i * record_bytes() (its key row, then its value row, in
    // dtype), set where exact[i].
    std::vector<uint8_t> records;
    size_t record_bytes() const { return 2 * static_cast<size_t>(kv_dim) * kv_dtype_bytes(dtype); }
};

class ByteReader;

class CacheLayer {
public:
    virtual ~CacheLayer() = default;
    // Attention of n new tokens at positions pos[0..n) over what the layer holds plus the new
    // tokens themselves; the new tokens are then kept as the layer's retention allows.
    // q: n x (n_head*head_dim), k and v: n x (n_head_kv*head_dim), q and k not yet rotated (the
    // layer rotates them; q is rotated in place, and with f16_rounding also scaled and rounded).
    // out: n x (n_head*head_dim). A `cancel` set while it runs (from any thread) stops the
    // attention between its work items: kvchat::Cancelled is thrown and the layer keeps none of
    // the new tokens.
    virtual void attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n,
                        Buffer& out, const std::atomic<bool>* cancel = nullptr) = 0;
    // Drops every token at position >= n_tokens.
    virtual void crop(int64_t n_tokens) = 0;
    virtual void reset() = 0;
    virtual int64_t tokens_held() const = 0;
    // One past the last position the layer has seen (0 when empty).
    virtual int64_t end_position() const = 0;
    virtual LayerTelemetry telemetry() const = 0;

    // Throws kvchat::Error when positions [first, first + n) do not fit (a fixed capacity, or the
    // disk of an offloaded layer, which it reserves).
    virtual void check_room(int64_t first, int64_t n) const = 0;
    // Whether after crop(n) the layer still holds every token that positions >= n attend to
    // (a ring buffer that overwrote part of [n - window, n) does not).
    virtual bool can_crop_to(int64_t n) const = 0;
    // Whether crop() alone cannot take the layer back exactly (it forgets tokens, or quantizes
    // them in blocks): checkpoints then keep its content.
    virtual bool crop_needs_checkpoint() const = 0;
    // The whole state, for snapshots and checkpoints; load_state refuses a state of a different
    // layout or a damaged one (kvchat::Error) and then leaves the layer empty. file_offset: where
    // out[0] will lie in a snapshot file (-1: not in a file), so the layer can page-align its
    // bulk data and a later load can map it instead of copying it.
    virtual void save_state(std::string& out, int64_t file_offset = -1) const = 0;
    virtual void load_state(ByteReader& in) = 0;
    // A one-line description of the layer's layout, equal for layers that can share state.
    virtual std::string layout() const = 0;
    // Conversion: every token held, and whether the layer can be rebuilt from `rows` alone for a
    // cache of `length` tokens: every needed token present, and exact wherever this layer keeps it
    // in full precision or quantizes it more finely than `rows` did (a dequantized token may only
    // go into a block of no more bits and no smaller group).
    void export_tokens(TokenRows& rows) const { export_tokens(rows, TokenRows::Form::F32); }
    virtual void export_tokens(TokenRows& rows, TokenRows::Form form) const = 0;
    virtual bool can_import(const TokenRows& rows, int64_t length) const = 0;
    virtual void import_tokens(const TokenRows& rows, int64_t length) = 0;
};

}  // namespace kvchat
