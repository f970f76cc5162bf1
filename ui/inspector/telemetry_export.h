#pragma once
// The inspector's exports of a cache's telemetry: JSON (the same keys as kvchat-cli's
// `generate --json` cache object) and CSV (one line per layer, a header naming the columns).
#include "engine/cache/cache.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

namespace kvchat {

QJsonObject telemetryJson(const CacheTelemetry& telemetry);
QString telemetryCsv(const CacheTelemetry& telemetry);
// The CSV columns, in order.
QStringList telemetryCsvColumns();

}  // namespace kvchat
