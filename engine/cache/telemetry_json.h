#pragma once
// A cache's telemetry as JSON, written in one place: the "cache" object `kvchat-cli generate
// --json` prints and the file the cache inspector exports are the same bytes for the same cache.
#include "engine/cache/cache.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvchat {

nlohmann::json telemetry_json(const CacheTelemetry& telemetry);
// The same, as text: compact, invalid UTF-8 replaced, as kvchat-cli prints its JSON.
std::string telemetry_json_text(const CacheTelemetry& telemetry);

}  // namespace kvchat
