#include "engine/model/load_model.h"

#include <algorithm>
#include <cstddef>

namespace kvchat {

namespace {

constexpr std::string_view kTask = "Loading model";
// Pieces small enough that a cancel is seen quickly even on a slow disk.
constexpr size_t kPieceBytes = size_t{8} << 20;
constexpr size_t kPageBytes = 4096;

// Reads one byte of every page, so the kernel brings the range into memory.
unsigned char read_in(std::span<const std::byte> bytes) {
    unsigned char sum = 0;
    for (size_t at = 0; at < bytes.size(); at += kPageBytes)
        sum = static_cast<unsigned char>(sum ^ static_cast<unsigned char>(*static_cast<const volatile std::byte*>(&bytes[at])));
    return sum;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const Progress& progress) {
    progress.check(kTask);
    std::unique_ptr<Model> model = Model::load(path);
    const std::vector<std::span<const std::byte>> tensors = model->mapped_tensors();
    int64_t total = 0;
    for (const auto& t : tensors) total += static_cast<int64_t>(t.size());
    int64_t done = 0;
    progress.tell(kTask, done, total);
    volatile unsigned char sink = 0;
    for (const auto& t : tensors)
        for (size_t at = 0; at < t.size(); at += kPieceBytes) {
            progress.check(kTask);
            const size_t n = std::min(kPieceBytes, t.size() - at);
            sink = sink ^ read_in(t.subspan(at, n));
            done += static_cast<int64_t>(n);
            progress.tell(kTask, done, total);
        }
    return model;
}

}  // namespace kvchat
