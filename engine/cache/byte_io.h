#pragma once
// Little helpers to write plain values into a byte string and read them back with bounds checks:
// snapshots are untrusted input, so every read names what it was reading when the data ran out.
#include "engine/error.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvchat {

class ByteWriter {
public:
    explicit ByteWriter(std::string& out) : out_(out) {}
    template <class T>
    void put(T v) {
        static_assert(std::is_trivially_copyable_v<T>);
        out_.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    void bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
    // n more bytes for the caller to fill (bytes that come from elsewhere than host memory).
    char* extend(size_t n) {
        out_.resize(out_.size() + n);
        return out_.data() + out_.size() - n;
    }
    void str(std::string_view s) {
        put<uint32_t>(static_cast<uint32_t>(s.size()));
        out_.append(s);
    }

private:
    std::string& out_;
};

class ByteReader {
public:
    ByteReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}
    template <class T>
    T get(const char* field) {
        static_assert(std::is_trivially_copyable_v<T>);
        T v;
        std::memcpy(&v, take(sizeof v, field), sizeof v);
        return v;
    }
    const char* take(size_t n, const char* field) {
        if (n > data_.size() - at_) throw Error(what_ + ": truncated while reading " + field);
        const char* p = data_.data() + at_;
        at_ += n;
        return p;
    }
    std::string str(const char* field, size_t max_len) {
        const uint32_t n = get<uint32_t>(field);
        if (n > max_len) throw Error(what_ + ": " + field + " is implausibly long (" + std::to_string(n) + " bytes)");
        return std::string(take(n, field), n);
    }
    size_t remaining() const { return data_.size() - at_; }
    const std::string& what() const { return what_; }
    [[noreturn]] void fail(const std::string& msg) const { throw Error(what_ + ": " + msg); }

    // When the bytes are a read-only mapping of an open file: its descriptor and where the
    // mapping begins, so a reader can map page-aligned stretches of it in place of copying.
    void set_file(int fd, const char* mapping_begin) {
        fd_ = fd;
        file_begin_ = mapping_begin;
    }
    int file_fd() const { return fd_; }
    // The file offset of p (a pointer take() returned); -1 when the bytes are not a file's.
    int64_t file_offset(const char* p) const { return file_begin_ ? static_cast<int64_t>(p - file_begin_) : -1; }

private:
    std::string_view data_;
    size_t at_ = 0;
    std::string what_;
    int fd_ = -1;
    const char* file_begin_ = nullptr;
};

}  // namespace kvchat
