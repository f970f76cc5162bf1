#include "ui/inspector/window_strips.h"

#include <QPainter>

#include <algorithm>

namespace kvchat {

namespace {
constexpr int kLabelWidth = 34, kRight = 8;
}

WindowStrips::WindowStrips(QWidget* parent)
    : LayerChart("windowStrips", {.height = 12, .gap = 4, .top = 4, .footer = 52, .min_width = 240}, parent) {}

QString WindowStrips::partName(Part part) {
    switch (part) {
        case Part::Sinks: return tr("sink tokens");
        case Part::Evicted: return tr("evicted");
        case Part::FullPrecision: return tr("held, full precision");
        case Part::Quantized: return tr("quantized");
        case Part::Residual: return tr("full-precision residual");
    }
    return {};
}

QColor WindowStrips::partColor(Part part) {
    switch (part) {
        case Part::Sinks: return QColor(0xc6, 0x28, 0x28);
        case Part::Evicted: return QColor(0xd0, 0xd0, 0xd0);
        case Part::FullPrecision: return QColor(0x2e, 0x7d, 0x32);
        case Part::Quantized: return QColor(0x8b, 0xc3, 0x4a);
        case Part::Residual: return QColor(0x00, 0x89, 0x7b);
    }
    return Qt::black;
}

QRectF WindowStrips::stripRect(int layer) const {
    return QRectF(kLabelWidth, rowTop(layer), std::max(20, width() - kLabelWidth - kRight), rows_.height);
}

double WindowStrips::xOf(int64_t position) const {
    const QRectF r = stripRect(0);
    const int64_t n = std::max<int64_t>(1, telemetry_.tokens);
    return r.left() + r.width() * static_cast<double>(position) / static_cast<double>(n);
}

std::vector<WindowStrips::Region> WindowStrips::regions() const {
    std::vector<Region> out;
    auto add = [&](int layer, Part part, int64_t b, int64_t e) {
        if (e <= b) return;
        const QRectF strip = stripRect(layer);
        const double x0 = xOf(b), x1 = std::max(xOf(e), x0 + 2.0);  // a few sinks among thousands stay visible
        out.push_back({layer, part, b, e, QRectF(x0, strip.top(), x1 - x0, strip.height())});
    };
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        const LayerTelemetry& l = telemetry_.layers[i];
        const int layer = static_cast<int>(i);
        add(layer, Part::Sinks, l.sink_begin, l.sink_end);
        const bool holds_recent = l.window_end > l.window_begin;
        // Everything not a sink before the oldest recent token held has been evicted; a layer that
        // holds no recent token at all has evicted every non-sink position.
        add(layer, Part::Evicted, std::max(l.sink_end, int64_t{0}), holds_recent ? l.window_begin : telemetry_.tokens);
        if (!holds_recent) continue;
        if (l.quantized_tokens > 0 || l.residual_tokens > 0) {
            add(layer, Part::Quantized, l.window_begin, l.window_begin + l.quantized_tokens);
            add(layer, Part::Residual, l.window_end - l.residual_tokens, l.window_end);
        } else {
            add(layer, Part::FullPrecision, l.window_begin, l.window_end);
        }
    }
    return out;
}

// The kept background (layer_chart.h): layer labels, strip backgrounds and the legend.
void WindowStrips::paintBackground(QPainter& p) const {
    p.fillRect(rect(), palette().base());
    const QColor sliding(0xff, 0x98, 0x00), global(0x6a, 0x1b, 0x9a);
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        const QRectF strip = stripRect(static_cast<int>(i));
        const bool is_sliding = telemetry_.layers[i].kind == "sliding";
        p.fillRect(QRectF(2, strip.top(), 4, strip.height()), is_sliding ? sliding : global);
        p.setPen(palette().text().color());
        p.drawText(QRectF(8, strip.top() - 1, kLabelWidth - 10, strip.height() + 2), Qt::AlignVCenter | Qt::AlignLeft,
                   QString::number(i));
        p.fillRect(strip, palette().alternateBase());
    }
    const double y = rowsEnd();
    p.setPen(palette().text().color());  // (also with no layer to set it above)
    p.drawText(QRectF(kLabelWidth, y, 80, 13), Qt::AlignLeft | Qt::AlignVCenter, "0");
    const Part parts[] = {Part::Sinks, Part::Evicted, Part::FullPrecision, Part::Quantized, Part::Residual};
    QStringList names;
    for (Part part : parts) names << partName(part);
    const std::vector<QPointF> places = legendPlaces(names, width(), y + 19, p.fontMetrics());
    for (size_t k = 0; k < places.size(); ++k) {
        const Part part = parts[k];
        const QString& name = names[static_cast<int>(k)];
        const double x = places[k].x(), ly = places[k].y(), w = p.fontMetrics().horizontalAdvance(name);
        const QRectF box(x, ly, 10, 10);
        p.fillRect(box, partColor(part));
        if (part == Part::Evicted) p.fillRect(box, QBrush(QColor(0xa0, 0xa0, 0xa0), Qt::BDiagPattern));
        p.drawText(QRectF(x + 13, ly - 2, w + 2, 14), Qt::AlignLeft | Qt::AlignVCenter, name);
    }
}

int WindowStrips::footerHeight(int width) const {
    QStringList names;
    for (Part part : {Part::Sinks, Part::Evicted, Part::FullPrecision, Part::Quantized, Part::Residual}) names << partName(part);
    return 19 + 15 * legendLines(names, width, QFontMetrics(smallFont())) + 4;
}

void WindowStrips::paintEvent(QPaintEvent*) {
    QPainter p(this);
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    drawBackground(p, f);
    for (const Region& r : regions()) {
        p.fillRect(r.rect, partColor(r.part));
        if (r.part == Part::Evicted) p.fillRect(r.rect, QBrush(QColor(0xa0, 0xa0, 0xa0), Qt::BDiagPattern));
    }
    p.setFont(f);
    p.setPen(palette().text().color());
    p.drawText(QRectF(width() - kRight - 160, rowsEnd(), 160, 13), Qt::AlignRight | Qt::AlignVCenter,
               tr("%L1 tokens").arg(telemetry_.tokens));
}

QString WindowStrips::toolTipAt(const QPointF& pos) const {
    const std::vector<Region> rs = regions();
    // Later regions are drawn on top; the one under the pointer is the last that contains it.
    for (auto it = rs.rbegin(); it != rs.rend(); ++it)
        if (it->rect.contains(pos)) {
            const LayerTelemetry& l = telemetry_.layers[static_cast<size_t>(it->layer)];
            QString s = tr("layer %1 (%2): %3, positions %L4–%L5 (%L6 tokens)")
                            .arg(it->layer)
                            .arg(QString::fromStdString(l.storage), partName(it->part))
                            .arg(it->begin)
                            .arg(it->end - 1)
                            .arg(it->end - it->begin);
            if (it->part == Part::Evicted) s += tr("; %L1 evicted in all").arg(l.evicted);
            return s;
        }
    return {};
}


}  // namespace kvchat
