#include "ui/inspector/memory_bars.h"

#include "ui/inspector/byte_size_text.h"

#include <QPainter>

#include <algorithm>

namespace kvchat {

namespace {
constexpr int kLabelWidth = 64, kValueWidth = 118;

int64_t held(const LayerTelemetry& l) { return l.bytes_fast + l.bytes_slow; }
}  // namespace

MemoryBars::MemoryBars(QWidget* parent) : LayerChart("memoryBars", {.height = 14, .gap = 3, .top = 4, .footer = 50, .min_width = 260}, parent) {}

QString MemoryBars::partName(Part part) {
    switch (part) {
        case Part::FastFull: return tr("fast, full precision");
        case Part::FastQuantized: return tr("fast, quantized");
        case Part::SlowFull: return tr("slow tier, full precision");
        case Part::SlowQuantized: return tr("slow tier, quantized");
        case Part::Reserved: return tr("reserved, not yet used");
    }
    return {};
}

QColor MemoryBars::partColor(Part part) {
    switch (part) {
        case Part::FastFull: return QColor(0x2e, 0x7d, 0x32);
        case Part::FastQuantized: return QColor(0x8b, 0xc3, 0x4a);
        case Part::SlowFull: return QColor(0x15, 0x65, 0xc0);
        case Part::SlowQuantized: return QColor(0x64, 0xb5, 0xf6);
        case Part::Reserved: return QColor(0x9e, 0x9e, 0x9e);
    }
    return Qt::black;
}

QRectF MemoryBars::rowRect(int layer) const {
    return QRectF(0, rowTop(layer), width(), rows_.height);
}

QRectF MemoryBars::barArea(int layer) const {
    const QRectF r = rowRect(layer);
    return QRectF(kLabelWidth, r.top(), std::max(20.0, width() - kLabelWidth - kValueWidth - 6.0), r.height());
}

// One scale for every bar: the largest layer's held bytes fill at least half the bar area, so what
// is used is always readable; reservations show up to twice that and are cut at the edge beyond
// (hover tells their size).
double MemoryBars::bytesPerPixel() const {
    int64_t most_held = 1, most_reserved = 0;
    for (const LayerTelemetry& l : telemetry_.layers) {
        most_held = std::max(most_held, held(l));
        most_reserved = std::max(most_reserved, l.bytes_reserved);
    }
    const int64_t most = std::max(most_held, std::min(most_reserved, 2 * most_held));
    const double w = std::max(20.0, width() - kLabelWidth - kValueWidth - 6.0);
    return static_cast<double>(most) / w;
}

std::vector<MemoryBars::Segment> MemoryBars::segments() const {
    std::vector<Segment> out;
    const double bpp = bytesPerPixel();
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        const LayerTelemetry& l = telemetry_.layers[i];
        const QRectF area = barArea(static_cast<int>(i));
        // Each tier's bytes split by precision; a layer lives in one tier today, but the split holds
        // for any mix: the fast tier takes full-precision bytes first.
        const int64_t fast_full = std::min(l.bytes_full_precision, l.bytes_fast);
        const int64_t fast_quant = l.bytes_fast - fast_full;
        const int64_t slow_full = std::max<int64_t>(0, std::min(l.bytes_slow, l.bytes_full_precision - fast_full));
        const int64_t slow_quant = l.bytes_slow - slow_full;
        double x = area.left();
        const std::pair<Part, int64_t> parts[] = {{Part::FastFull, fast_full}, {Part::FastQuantized, fast_quant},
                                                  {Part::SlowFull, slow_full}, {Part::SlowQuantized, slow_quant}};
        for (const auto& [part, bytes] : parts) {
            if (bytes <= 0) continue;
            const double w = std::max(1.0, static_cast<double>(bytes) / bpp);
            out.push_back({static_cast<int>(i), part, bytes, QRectF(x, area.top(), w, area.height())});
            x += w;
        }
        const int64_t spare = l.bytes_reserved - held(l);
        if (spare > 0) {
            const double w = std::min(area.right() - x, static_cast<double>(spare) / bpp);
            if (w > 0.5) out.push_back({static_cast<int>(i), Part::Reserved, spare, QRectF(x, area.top(), w, area.height())});
        }
    }
    return out;
}

// The kept background (layer_chart.h): row tints, kind tags, layer numbers, bar backgrounds, the legend.
void MemoryBars::paintBackground(QPainter& p) const {
    const QColor sliding(0xff, 0x98, 0x00), global(0x6a, 0x1b, 0x9a);
    p.fillRect(rect(), palette().base());
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        const bool is_sliding = telemetry_.layers[i].kind == "sliding";
        const QRectF row = rowRect(static_cast<int>(i));
        if (is_sliding) p.fillRect(row.adjusted(0, -1, 0, 1), QColor(0xff, 0x98, 0x00, 0x30));  // (on light and dark)
        // The kind tag: orange S for sliding, purple G for global.
        const QRectF tag(2, row.top() + 1, 12, row.height() - 2);
        p.fillRect(tag, is_sliding ? sliding : global);
        p.setPen(Qt::white);
        p.drawText(tag, Qt::AlignCenter, is_sliding ? "S" : "G");
        p.setPen(palette().text().color());
        p.drawText(QRectF(17, row.top(), kLabelWidth - 19, row.height()), Qt::AlignVCenter | Qt::AlignLeft, QString::number(i));
        p.fillRect(barArea(static_cast<int>(i)), palette().alternateBase());
    }
    // The legend under the rows (it changes only with the width); the totals follow it.
    const QStringList names = legendNames();
    const std::vector<QPointF> places = legendPlaces(names, width(), rowsEnd() + 6, p.fontMetrics());
    const Part parts[] = {Part::FastFull, Part::FastQuantized, Part::SlowFull, Part::SlowQuantized, Part::Reserved};
    for (size_t k = 0; k < places.size(); ++k) {
        const Part part = parts[k];
        const double x = places[k].x(), ly = places[k].y(), w = p.fontMetrics().horizontalAdvance(names[static_cast<int>(k)]);
        const QRectF box(x, ly, 10, 10);
        if (part == Part::Reserved) {
            p.setPen(QPen(partColor(part), 1, Qt::DashLine));
            p.drawRect(box);
        } else {
            p.fillRect(box, partColor(part));
        }
        p.setPen(palette().text().color());
        p.drawText(QRectF(x + 13, ly - 2, w + 2, 14), Qt::AlignLeft | Qt::AlignVCenter, partName(part));
    }
}

QStringList MemoryBars::legendNames() {
    QStringList out;
    for (Part part : {Part::FastFull, Part::FastQuantized, Part::SlowFull, Part::SlowQuantized, Part::Reserved}) out << partName(part);
    return out;
}

QStringList MemoryBars::totalsLines(int width) const {
    const QStringList figures = {tr("%1 held (fast %2, slow %3)")
                                     .arg(byteSizeText(telemetry_.total_bytes), byteSizeText(telemetry_.bytes_fast),
                                          byteSizeText(telemetry_.bytes_slow)),
                                 tr("%1 reserved").arg(byteSizeText(telemetry_.bytes_reserved)),
                                 tr("%1/token").arg(byteSizeText(static_cast<int64_t>(telemetry_.bytes_per_token))),
                                 tr("%L1 tokens").arg(telemetry_.tokens)};
    const QFontMetrics fm(smallFont());
    const QString sep = QStringLiteral(" · ");
    QStringList lines;
    for (const QString& f : figures) {
        if (!lines.isEmpty() && fm.horizontalAdvance(lines.back() + sep + f) <= width - 8) lines.back() += sep + f;
        else lines << f;
    }
    return lines;
}

int MemoryBars::footerHeight(int width) const {
    const QFontMetrics fm(smallFont());
    return 6 + 15 * legendLines(legendNames(), width, fm) + 2 + 14 * static_cast<int>(totalsLines(width).size()) + 4;
}

void MemoryBars::paintEvent(QPaintEvent*) {
    QPainter p(this);
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    if (drawBackground(p, small)) values_.assign(telemetry_.layers.size(), {});
    p.setFont(small);
    for (const Segment& s : segments()) {
        if (s.part == Part::Reserved) {
            p.setPen(QPen(partColor(s.part), 1, Qt::DashLine));
            p.setBrush(Qt::NoBrush);
            p.drawRect(s.rect.adjusted(0.5, 0.5, -0.5, -0.5));
        } else {
            p.fillRect(s.rect, partColor(s.part));
        }
    }
    // Per-layer figures: laid out again only when they change (a full sliding ring no longer does).
    p.setPen(palette().text().color());
    values_.resize(telemetry_.layers.size());
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        const LayerTelemetry& l = telemetry_.layers[i];
        const QString text = byteSizeText(held(l)) + QString(" · %1 tok").arg(l.tokens_held);
        if (values_[i].text() != text) {
            values_[i].setText(text);
            values_[i].setTextFormat(Qt::PlainText);
            values_[i].prepare(QTransform(), small);
        }
        const QRectF row = rowRect(static_cast<int>(i));
        const QSizeF sz = values_[i].size();
        p.drawStaticText(QPointF(width() - 4 - sz.width(), row.top() + (row.height() - sz.height()) / 2), values_[i]);
    }
    const QStringList totals = totalsLines(width());
    double y = rowsEnd() + 6 + 15 * legendLines(legendNames(), width(), p.fontMetrics()) + 2;
    for (const QString& line : totals) {
        p.drawText(QRectF(4, y, width() - 8, 14), Qt::AlignLeft | Qt::AlignVCenter, line);
        y += 14;
    }
    // Longer figures took another line: the chart asks for the height (once, not every step).
    if (static_cast<int>(totals.size()) != totalsShown_) {
        totalsShown_ = static_cast<int>(totals.size());
        updateGeometry();
    }
}

QString MemoryBars::toolTipAt(const QPointF& pos) const {
    for (const Segment& s : segments())
        if (s.rect.contains(pos))
            return tr("layer %1: %2 %3").arg(s.layer).arg(byteSizeText(s.bytes), partName(s.part)) +
                   QString(" (%L1 bytes)").arg(s.bytes);
    for (size_t i = 0; i < telemetry_.layers.size(); ++i) {
        if (!rowRect(static_cast<int>(i)).contains(pos)) continue;
        const LayerTelemetry& l = telemetry_.layers[i];
        return tr("layer %1 (%2, %3): %L4 tokens held, capacity %L5; %L6 bytes held, %L7 reserved; "
                  "%L8 full precision, %L9 quantized")
            .arg(i)
            .arg(QString::fromStdString(l.kind), QString::fromStdString(l.storage))
            .arg(l.tokens_held)
            .arg(l.capacity)
            .arg(held(l))
            .arg(l.bytes_reserved)
            .arg(l.bytes_full_precision)
            .arg(l.bytes_quantized);
    }
    return {};
}


}  // namespace kvchat
