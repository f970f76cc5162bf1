#pragma once
// The quantized side of the precision axis: a layer's tokens kept as KIVI blocks of `group`
// tokens behind a residual of the most recent ones in full precision. A token enters the
// residual; once the residual holds more than `residual` tokens, its oldest `group` become one
// block. The bytes live in the layer's arena (KvArena: the residual and block regions); this
// class keeps the bookkeeping (which positions each block and the residual hold) and asks the
// backend for every operation on the bytes.
#include "engine/cache/kv_arena.h"
#include "engine/compute/backend.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"

#include <deque>
#include <functional>
#include <vector>

namespace kvchat {

struct AttentionInput;
class ByteReader;
class ByteWriter;

class QuantizedTokens {
public:
    struct Block {
        int32_t first = 0;
        int32_t count = 0;
        int32_t record = 0;
    };

    // dtype: the residual's full-precision format.
    QuantizedTokens(const KiviFormat& format, int residual, KvDtype dtype);

    const KiviFormat& format() const { return kivi_; }
    int group() const { return kivi_.group; }
    int residual_limit() const { return residual_; }
    const std::deque<Block>& blocks() const { return blocks_; }
    int32_t residual_first() const { return res_first_; }
    int64_t residual_count() const { return res_count_; }
    int64_t quantized_count() const;
    int64_t tokens() const { return quantized_count() + res_count_; }
    // The oldest position held (SlotPositions::kEmpty if none).
    int32_t oldest() const;

    // Adds position p (its key and value rows in KV memory, in the residual's dtype) to the
    // residual; `keep_from`: a ring's oldest position still needed (INT32_MIN: keep all). Returns
    // the tokens evicted.
    int64_t append(int32_t p, const void* k, const void* v, int32_t keep_from, KvArena& arena, Backend& backend);
    // Drops every position >= n; forgets everything.
    void crop(int32_t n);
    void clear(KvArena& arena);
    // The blocks in use after n more tokens.
    int64_t blocks_after(int64_t n, int64_t blocks_used) const;
    // The residual and blocks as attention reads them.
    void add_views(AttentionInput& in, const KvArena& arena);

    // Serialisation of the residual and the blocks (the layer writes the rest); load() reads what
    // save() wrote, records in `src` (converted to the residual's dtype), for a layer that has
    // seen positions below `next`; throws through `in` on damaged data.
    void save(ByteWriter& w, const KvArena& arena, Backend& backend) const;
    void load(ByteReader& in, KvDtype src, int32_t next, int layer_index, KvArena& arena, Backend& backend);
    // Conversion: the tokens [0, length), as adding them one by one would leave them.
    // records(first, n, host) writes the records of tokens [first, first + n) in the residual's
    // dtype (a key row then a value row each) at host.
    using RecordSource = std::function<void(int64_t first, int64_t n, uint8_t* host)>;
    void import_contiguous(int64_t length, const RecordSource& records, KvArena& arena, Backend& backend);
    // Position p's residual record (null if p is not in the residual).
    const uint8_t* residual_record(int32_t p, const KvArena& arena) const;

private:
    int64_t evict_before(int32_t keep_from, KvArena& arena, Backend& backend);
    void quantize_oldest(KvArena& arena, Backend& backend);
    int32_t new_record(KvArena& arena);

    KiviFormat kivi_;
    int residual_;
    KvDtype dtype_;
    std::deque<Block> blocks_;
    std::vector<int32_t> free_records_;
    int32_t res_first_ = 0;
    int64_t res_count_ = 0;
    std::vector<int32_t> res_pos_;
};

}  // namespace kvchat
