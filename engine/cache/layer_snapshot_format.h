#pragma once
// One layer's state in the snapshot format, written and read back. Three versions, each still read:
//   LAYR  the first: layout (without dtype), counters, slot positions, f32 records of the filled
//         slots, then the quantized tokens' residual and blocks;
//   LAY2  as LAYR, with a padding before the records that page-aligns them in a snapshot file;
//   LAY3  as LAY2, records in the dtype its layout names (the layout line then ends with it).
// Records of the older formats are converted to the layer's dtype as they load (exact for GGUF
// models, whose values lie on the f16 grid). When every slot is filled and the records lie
// page-aligned in a snapshot file, a resident layer maps them (copy-on-write) instead of reading.
#include "engine/cache/layer_contents.h"
#include "engine/compute/backend.h"
#include "engine/compute/kv_dtype.h"

#include <string>

namespace kvchat {

class ByteReader;

class LayerSnapshotFormat {
public:
    // layout: the layer's layout line (CacheLayer::layout()); layout_without_dtype: the same
    // without its dtype, as LAYR and LAY2 wrote it. index: the layer's, for error messages.
    LayerSnapshotFormat(LayerContents& contents, Backend& backend, KvDtype dtype, int index, std::string layout,
                        std::string layout_without_dtype);

    // Appends the state (LAY3); file_offset: where out[0] will lie in a snapshot file (-1: not in one).
    void write(std::string& out, int64_t file_offset) const;
    // Replaces the contents with a state write() (or an older version) wrote; throws kvchat::Error
    // on a damaged state or another layout, leaving the contents empty.
    void read(ByteReader& in);

private:
    void read_into(ByteReader& in);

    LayerContents& c_;
    Backend& backend_;
    KvDtype dtype_;
    int index_;
    std::string layout_, layout_without_dtype_;
};

}  // namespace kvchat
