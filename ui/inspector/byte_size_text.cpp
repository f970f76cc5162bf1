#include "ui/inspector/byte_size_text.h"

namespace kvchat {

QString byteSizeText(int64_t bytes) {
    const double b = static_cast<double>(bytes);
    const double a = b < 0 ? -b : b;
    if (a < 1024) return QString::number(bytes) + " B";
    if (a < 1024.0 * 1024) return QString::number(b / 1024.0, 'f', 1) + " KiB";
    if (a < 1024.0 * 1024 * 1024) return QString::number(b / (1024.0 * 1024), 'f', 2) + " MiB";
    return QString::number(b / (1024.0 * 1024 * 1024), 'f', 2) + " GiB";
}

}  // namespace kvchat
