#pragma once
// The inspector's CSV export of a cache's telemetry: one line per layer, a header naming the
// columns. (Its JSON export is the engine's telemetry_json_text, the bytes kvchat-cli prints.)
#include "engine/cache/cache.h"

#include <QString>
#include <QStringList>

namespace kvchat {

QString telemetryCsv(const CacheTelemetry& telemetry);
// The CSV columns, in order.
QStringList telemetryCsvColumns();

}  // namespace kvchat
