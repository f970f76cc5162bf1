#include "engine/cache/telemetry_json.h"

namespace kvchat {

nlohmann::json telemetry_json(const CacheTelemetry& t) {
    nlohmann::json j;
    j["spec"] = t.spec;
    j["tokens"] = t.tokens;
    j["total_bytes"] = t.total_bytes;
    j["bytes_fast"] = t.bytes_fast;
    j["bytes_slow"] = t.bytes_slow;
    j["bytes_reserved"] = t.bytes_reserved;
    j["bytes_per_token"] = t.bytes_per_token;
    j["moved_in_step"] = t.moved_in_step;
    j["moved_out_step"] = t.moved_out_step;
    j["prefetch_stall_ms"] = t.prefetch_stall_ms;
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerTelemetry& l : t.layers) {
        layers.push_back({{"kind", l.kind}, {"storage", l.storage}, {"tokens_held", l.tokens_held},
                          {"capacity", l.capacity}, {"bytes_fast", l.bytes_fast}, {"bytes_slow", l.bytes_slow},
                          {"bytes_full_precision", l.bytes_full_precision}, {"bytes_quantized", l.bytes_quantized},
                          {"bytes_reserved", l.bytes_reserved}, {"quantized_tokens", l.quantized_tokens},
                          {"residual_tokens", l.residual_tokens}, {"sink_range", {l.sink_begin, l.sink_end}},
                          {"window_range", {l.window_begin, l.window_end}}, {"evicted", l.evicted},
                          {"moved_in_step", l.moved_in_step}, {"moved_out_step", l.moved_out_step},
                          {"moved_in_total", l.moved_in_total}, {"moved_out_total", l.moved_out_total},
                          {"prefetch_stall_ms", l.prefetch_stall_ms}});
    }
    j["layers"] = layers;
    return j;
}

std::string telemetry_json_text(const CacheTelemetry& t) {
    return telemetry_json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvchat
