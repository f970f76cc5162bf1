#pragma once
// Byte counts as people read them: "512 B", "12.5 KiB", "3.20 MiB", "1.07 GiB".
#include <QString>

#include <cstdint>

namespace kvchat {

QString byteSizeText(int64_t bytes);

}  // namespace kvchat
