#include "ui/inspector/telemetry_export.h"

#include <QJsonArray>

namespace kvchat {

namespace {

QString csvField(const QString& s) {
    if (!s.contains(',') && !s.contains('"') && !s.contains('\n')) return s;
    QString q = s;
    q.replace('"', "\"\"");
    return '"' + q + '"';
}

}  // namespace

QJsonObject telemetryJson(const CacheTelemetry& t) {
    QJsonObject j;
    j["spec"] = QString::fromStdString(t.spec);
    j["tokens"] = static_cast<qint64>(t.tokens);
    j["total_bytes"] = static_cast<qint64>(t.total_bytes);
    j["bytes_fast"] = static_cast<qint64>(t.bytes_fast);
    j["bytes_slow"] = static_cast<qint64>(t.bytes_slow);
    j["bytes_reserved"] = static_cast<qint64>(t.bytes_reserved);
    j["bytes_per_token"] = t.bytes_per_token;
    j["moved_in_step"] = static_cast<qint64>(t.moved_in_step);
    j["moved_out_step"] = static_cast<qint64>(t.moved_out_step);
    j["prefetch_stall_ms"] = t.prefetch_stall_ms;
    QJsonArray layers;
    for (const LayerTelemetry& l : t.layers) {
        QJsonObject o;
        o["kind"] = QString::fromStdString(l.kind);
        o["storage"] = QString::fromStdString(l.storage);
        o["tokens_held"] = static_cast<qint64>(l.tokens_held);
        o["capacity"] = static_cast<qint64>(l.capacity);
        o["bytes_fast"] = static_cast<qint64>(l.bytes_fast);
        o["bytes_slow"] = static_cast<qint64>(l.bytes_slow);
        o["bytes_full_precision"] = static_cast<qint64>(l.bytes_full_precision);
        o["bytes_quantized"] = static_cast<qint64>(l.bytes_quantized);
        o["bytes_reserved"] = static_cast<qint64>(l.bytes_reserved);
        o["quantized_tokens"] = static_cast<qint64>(l.quantized_tokens);
        o["residual_tokens"] = static_cast<qint64>(l.residual_tokens);
        o["sink_range"] = QJsonArray{static_cast<qint64>(l.sink_begin), static_cast<qint64>(l.sink_end)};
        o["window_range"] = QJsonArray{static_cast<qint64>(l.window_begin), static_cast<qint64>(l.window_end)};
        o["evicted"] = static_cast<qint64>(l.evicted);
        o["moved_in_step"] = static_cast<qint64>(l.moved_in_step);
        o["moved_out_step"] = static_cast<qint64>(l.moved_out_step);
        o["moved_in_total"] = static_cast<qint64>(l.moved_in_total);
        o["moved_out_total"] = static_cast<qint64>(l.moved_out_total);
        o["prefetch_stall_ms"] = l.prefetch_stall_ms;
        layers.append(o);
    }
    j["layers"] = layers;
    return j;
}

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
