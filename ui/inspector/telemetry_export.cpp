#include "ui/inspector/telemetry_export.h"


namespace kvchat {

namespace {

QString csvField(const QString& s) {
    if (!s.contains(',') && !s.contains('"') && !s.contains('\n')) return s;
    QString q = s;
    q.replace('"', "\"\"");
    return '"' + q + '"';
}

}  // namespace

QStringList telemetryCsvColumns() {
    return {"layer", "kind", "storage", "tokens_held", "capacity", "bytes_fast", "bytes_slow", "bytes_full_precision",
            "bytes_quantized", "bytes_reserved", "quantized_tokens", "residual_tokens", "sink_begin", "sink_end",
            "window_begin", "window_end", "evicted", "moved_in_step", "moved_out_step", "moved_in_total",
            "moved_out_total", "prefetch_stall_ms"};
}

QString telemetryCsv(const CacheTelemetry& t) {
    QString out = telemetryCsvColumns().join(',') + '\n';
    for (size_t i = 0; i < t.layers.size(); ++i) {
        const LayerTelemetry& l = t.layers[i];
        QStringList f;
        f << QString::number(i) << csvField(QString::fromStdString(l.kind)) << csvField(QString::fromStdString(l.storage));
        for (int64_t v : {l.tokens_held, l.capacity, l.bytes_fast, l.bytes_slow, l.bytes_full_precision, l.bytes_quantized,
                          l.bytes_reserved, l.quantized_tokens, l.residual_tokens, l.sink_begin, l.sink_end, l.window_begin,
                          l.window_end, l.evicted, l.moved_in_step, l.moved_out_step, l.moved_in_total, l.moved_out_total})
            f << QString::number(v);
        f << QString::number(l.prefetch_stall_ms, 'g', 10);
        out += f.join(',') + '\n';
    }
    return out;
}

}  // namespace kvchat
