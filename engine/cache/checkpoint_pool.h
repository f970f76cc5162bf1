#pragma once
// Checkpoints stored without repeating themselves. A sliding layer's checkpoints at nearby
// message boundaries hold nearly the same window as each other and as the live layer, so a
// snapshot (format version 2) stores each checkpoint's layer state as a list of pieces of that
// layer's *source*: the live layer's section followed by the layer's part of a shared pool that
// holds the bytes no earlier piece had. Pieces are found by content-defined chunking (a gear
// hash cuts the states where their content says, so the same tokens cut the same way wherever
// they sit in a ring) and compared byte for byte, so a decoded state is the saved one exactly
// whatever the layer's format: records, quantized blocks and residuals alike.
//
// A layer's encoding: u32 piece count, then per piece u64 offset into the source, u32 length.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvchat {

class CheckpointPoolWriter {
public:
    explicit CheckpointPoolWriter(size_t n_layers);
    // The live layer's section payload (kept by reference until the pool is written).
    void set_live(size_t layer, std::string_view live);
    // Appends the encoding of `state` (a checkpoint's state of `layer`) to out; an empty state
    // encodes as nothing.
    void encode(size_t layer, std::string_view state, std::string& out);
    // The pool section: u32 layer count, per layer u64 length and its bytes.
    std::string pool_payload() const;

private:
    struct Piece {
        uint64_t offset;
        uint32_t len;
    };
    struct Layer {
        std::string_view live;
        std::string pool;
        std::unordered_map<uint64_t, Piece> index;  // chunk hash -> where its bytes already lie
        bool indexed = false;
        size_t size() const { return live.size() + pool.size(); }
        std::string_view at(const Piece& p) const;
    };
    void add_chunks(Layer& l, uint64_t base, std::string_view bytes);
    std::vector<Layer> layers_;
};

// The most bytes a layer state decoded from a source of `source_bytes` may hold: a bound that
// keeps a hostile file from expanding a few pieces into gigabytes (the writer stores a state
// that would exceed it whole in the pool).
uint64_t checkpoint_state_limit(uint64_t source_bytes);

// Decodes one layer's encoding over its source (live layer section, pool part). Throws
// kvchat::Error naming `what` and the problem for pieces outside the source or a bad encoding.
std::string decode_checkpoint_state(std::string_view encoding, std::string_view live, std::string_view pool,
                                    const std::string& what);

}  // namespace kvchat
