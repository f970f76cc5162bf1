// Rearranging weights into the interleaved layout and back (interleaved_rows.h). Byte moves
// only, done once per model placement; the kernels that read the layout are in
// interleaved_rows_avx512.cpp.
#include "engine/compute/interleaved_rows.h"

#include "engine/compute/quant_blocks.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <cstring>

namespace kvchat {

namespace {

constexpr int R = kInterleavedRows;

// The layout's parts for t, or an error naming a type without the layout.
interleaved::GroupParts parts(TensorType t) {
    const interleaved::GroupParts p = interleaved::group_parts(t);
    if (p.block == 0) throw Error("interleave: no interleaved layout for " + std::string(traits(t).name));
    return p;
}

// One group: plain rows (row_bytes apart) -> interleaved (to_plain false), or back. Only the rows
// [first, first + n) of the group are read or written when going back.
void convert_group(TensorType t, int64_t nb, uint8_t* plain, size_t stride, uint8_t* group, int first, int n,
                   bool to_plain) {
    const interleaved::GroupParts p = parts(t);
    for (int64_t b = 0; b < nb; ++b) {
        const size_t bi = size_t(b);
        const interleaved::BlockPlace at = interleaved::block_place(p, nb, bi);
        for (int r = first; r < first + n; ++r) {
            uint8_t* row = plain + size_t(r - first) * stride;
            auto d16 = [&](size_t part) { return group + part + 2 * size_t(r); };
            uint8_t* v = group + at.values + 4 * size_t(r);
            if (t == TensorType::Q8_0) {
                auto* blk = reinterpret_cast<BlockQ8_0*>(row + sizeof(BlockQ8_0) * bi);
                if (to_plain) std::memcpy(&blk->d, d16(at.d), 2);
                else std::memcpy(d16(at.d), &blk->d, 2);
                for (int l = 0; l < 8; ++l)
                    for (int j = 0; j < 4; ++j) {
                        uint8_t& q = reinterpret_cast<uint8_t&>(blk->qs[4 * l + j]);
                        if (to_plain) q = uint8_t(v[64 * l + j] ^ 0x80);
                        else v[64 * l + j] = uint8_t(q ^ 0x80);
                    }
                continue;
            }
            // Q4_1 and Q5_0: the packed nibbles in four vectors.
            uint8_t* qs;
            if (t == TensorType::Q4_1) {
                auto* blk = reinterpret_cast<BlockQ4_1*>(row + sizeof(BlockQ4_1) * bi);
                qs = blk->qs;
                if (to_plain) {
                    std::memcpy(&blk->d, d16(at.d), 2);
                    std::memcpy(&blk->m, d16(at.m), 2);
                } else {
                    std::memcpy(d16(at.d), &blk->d, 2);
                    std::memcpy(d16(at.m), &blk->m, 2);
                }
            } else {
                auto* blk = reinterpret_cast<BlockQ5_0*>(row + sizeof(BlockQ5_0) * bi);
                qs = blk->qs;
                uint8_t* masks = group + at.masks;
                // Mask byte 4r + j, bit l: the fifth bit of row r's column 4l + j (qh's bit 4l + j).
                if (to_plain) {
                    std::memcpy(&blk->d, d16(at.d), 2);
                    uint32_t qh = 0;
                    for (int j = 0; j < 4; ++j)
                        for (int l = 0; l < 8; ++l) qh |= uint32_t((masks[4 * r + j] >> l) & 1) << (4 * l + j);
                    std::memcpy(blk->qh, &qh, 4);
                } else {
                    std::memcpy(d16(at.d), &blk->d, 2);
                    uint32_t qh;
                    std::memcpy(&qh, blk->qh, 4);
                    for (int j = 0; j < 4; ++j) {
                        uint8_t m = 0;
                        for (int l = 0; l < 8; ++l) m |= uint8_t(((qh >> (4 * l + j)) & 1) << l);
                        masks[4 * r + j] = m;
                    }
                }
            }
            for (int k = 0; k < 4; ++k) {
                if (to_plain) std::memcpy(qs + 4 * k, v + 64 * k, 4);
                else std::memcpy(v + 64 * k, qs + 4 * k, 4);
            }
        }
    }
}

}  // namespace

bool can_interleave(const WeightMatrix& w) {
    const bool type = w.type == TensorType::Q4_1 || w.type == TensorType::Q5_0 || w.type == TensorType::Q8_0;
    return type && w.layout == RowLayout::Plain && w.rows > 0 && w.rows % R == 0 && w.cols > 0 && w.cols % 32 == 0;
}

void interleave_rows(const WeightMatrix& w, void* dst, ThreadPool& pool) {
    if (!can_interleave(w)) throw Error("interleave: a " + std::string(traits(w.type).name) + " matrix of " +
                                        std::to_string(w.rows) + " rows cannot be interleaved");
    const size_t stride = row_bytes(w.type, w.cols);
    const int64_t nb = w.cols / 32;
    const int64_t groups = w.rows / R;
    auto* src = static_cast<const uint8_t*>(w.data);
    auto* out = static_cast<uint8_t*>(dst);
    pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
            uint8_t* group = out + size_t(g) * R * stride;
            convert_group(w.type, nb, const_cast<uint8_t*>(src) + size_t(g) * R * stride, stride, group, 0, R, false);
        }
    });
}

void plain_rows(const WeightMatrix& w, int64_t r0, int n, uint8_t* dst) {
    const size_t stride = row_bytes(w.type, w.cols);
    if (n <= 0) return;
    if (r0 < 0 || r0 + n > w.rows) throw Error("plain_rows: rows " + std::to_string(r0) + ".." + std::to_string(r0 + n - 1) + " out of range");
    if (w.layout == RowLayout::Plain) {
        std::memcpy(dst, static_cast<const uint8_t*>(w.data) + size_t(r0) * stride, size_t(n) * stride);
        return;
    }
    const int64_t g = r0 / R;
    if ((r0 + n - 1) / R != g) throw Error("plain_rows: rows cross a group of 16");
    auto* group = const_cast<uint8_t*>(static_cast<const uint8_t*>(w.data)) + size_t(g) * R * stride;
    convert_group(w.type, w.cols / 32, dst, stride, group, int(r0 - g * R), n, true);
}

}  // namespace kvchat
