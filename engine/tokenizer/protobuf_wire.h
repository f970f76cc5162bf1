#pragma once
// The protobuf wire format, just enough to write and rewrite SentencePiece's ModelProto: the
// library ships no public proto headers, so the model is serialized by hand.
// Wire format: each field is a varint key (field_number << 3 | wire_type) and a payload.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kvchat {

enum class WireType : uint32_t { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

class ProtoWriter {
public:
    void varint_field(uint32_t field, uint64_t value) {
        key(field, WireType::Varint);
        varint(value);
    }
    // int32 fields are sign-extended to 64 bits on the wire, so -1 takes ten bytes.
    void int32_field(uint32_t field, int32_t value) { varint_field(field, static_cast<uint64_t>(int64_t{value})); }
    void bool_field(uint32_t field, bool value) { varint_field(field, value ? 1 : 0); }
    void float_field(uint32_t field, float value) {
        key(field, WireType::Fixed32);
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
    }
    // Strings, bytes and embedded messages.
    void bytes_field(uint32_t field, std::string_view bytes) {
        key(field, WireType::LengthDelimited);
        varint(bytes.size());
        out_.append(bytes);
    }
    void raw(std::string_view bytes) { out_.append(bytes); }
    void reserve(size_t n) { out_.reserve(n); }
    void clear() { out_.clear(); }

    const std::string& bytes() const { return out_; }
    std::string take() { return std::move(out_); }

private:
    void key(uint32_t field, WireType type) { varint((uint64_t{field} << 3) | static_cast<uint32_t>(type)); }
    void varint(uint64_t v) {
        while (v >= 0x80) {
            out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
            v >>= 7;
        }
        out_.push_back(static_cast<char>(v));
    }
    std::string out_;
};

// One field as read: its number, wire type, the integer (varint and fixed) or the bytes
// (length-delimited), and the whole encoded field so it can be copied through unchanged.
struct ProtoField {
    uint32_t number = 0;
    WireType type = WireType::Varint;
    uint64_t integer = 0;
    std::string_view bytes;
    std::string_view encoded;
};

// Reads fields one after another; next() returns false at the end and sets error() on
// malformed input instead of reading past it.
class ProtoReader {
public:
    explicit ProtoReader(std::string_view data) : data_(data) {}

    bool next(ProtoField& f) {
        if (pos_ >= data_.size() || error_) return false;
        const size_t start = pos_;
        uint64_t k = 0;
        if (!varint(k)) return fail();
        f.number = static_cast<uint32_t>(k >> 3);
        f.type = static_cast<WireType>(k & 7);
        f.bytes = {};
        f.integer = 0;
        switch (f.type) {
            case WireType::Varint:
                if (!varint(f.integer)) return fail();
                break;
            case WireType::Fixed64:
            case WireType::Fixed32: {
                const size_t n = f.type == WireType::Fixed64 ? 8 : 4;
                if (data_.size() - pos_ < n) return fail();
                for (size_t i = 0; i < n; ++i)
                    f.integer |= uint64_t{static_cast<unsigned char>(data_[pos_ + i])} << (8 * i);
                pos_ += n;
                break;
            }
            case WireType::LengthDelimited: {
                uint64_t len = 0;
                if (!varint(len) || len > data_.size() - pos_) return fail();
                f.bytes = data_.substr(pos_, len);
                pos_ += len;
                break;
            }
            default:
                return fail();  // groups (3, 4) are not used by SentencePiece
        }
        if (f.number == 0) return fail();
        f.encoded = data_.substr(start, pos_ - start);
        return true;
    }
    bool error() const { return error_; }

private:
    bool varint(uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= data_.size()) return false;
            const auto b = static_cast<unsigned char>(data_[pos_++]);
            v |= uint64_t{b & 0x7Fu} << shift;
            if (!(b & 0x80)) return true;
        }
        return false;
    }
    bool fail() {
        error_ = true;
        return false;
    }
    std::string_view data_;
    size_t pos_ = 0;
    bool error_ = false;
};

}  // namespace kvchat
