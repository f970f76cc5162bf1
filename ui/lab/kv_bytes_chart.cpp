#include "ui/lab/kv_bytes_chart.h"

#include "ui/inspector/byte_size_text.h"

#include <QPainter>
#include <QPainterPath>

#include <algorithm>
#include <cmath>

namespace kvchat {

KvBytesChart::KvBytesChart(QWidget* parent) : InspectorChart("kvBytesChart", parent) {}

void KvBytesChart::setLines(std::vector<Line> lines) {
    lines_ = std::move(lines);
    update();
}

bool KvBytesChart::empty() const {
    for (const Line& l : lines_)
        for (const auto& p : l.points)
            if (p.first > 0 || p.second > 0) return false;
    return true;
}

std::vector<int64_t> KvBytesChart::roundTicks(int64_t largest, int64_t unit, int most) {
    std::vector<int64_t> out;
    if (largest <= 0 || unit <= 0 || most < 1) return out;
    // The smallest round step (in units) that reaches `largest` within `most` steps.
    const double span = static_cast<double>(largest) / static_cast<double>(unit);
    double step = std::pow(10.0, std::floor(std::log10(span / most)));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
        if (step * m * most >= span) {
            step *= m;
            break;
        }
    }
    // A byte is not divided: steps of a tenth of a KiB would be labelled 102 B, 205 B...
    const int64_t stepBytes = std::max<int64_t>(1, static_cast<int64_t>(std::llround(step * static_cast<double>(unit))));
    for (int64_t v = 0;; v += stepBytes) {
        out.push_back(v);
        if (v >= largest) break;
    }
    return out;
}

std::vector<int64_t> KvBytesChart::tokenTicks() const {
    if (empty()) return {};
    int64_t m = 1;
    for (const Line& l : lines_)
        for (const auto& p : l.points) m = std::max(m, p.first);
    return roundTicks(m, 1, 5);
}

std::vector<int64_t> KvBytesChart::byteTicks() const {
    if (empty()) return {};
    int64_t m = 1;
    for (const Line& l : lines_)
        for (const auto& p : l.points) m = std::max(m, p.second);
    // The unit the labels will use (byteSizeText's): B, KiB, MiB or GiB.
    int64_t unit = 1;
    while (unit < (int64_t{1} << 30) && m >= unit * 1024) unit *= 1024;
    return roundTicks(m, unit, 4);
}

int64_t KvBytesChart::maxTokens() const {
    const auto t = tokenTicks();
    return t.empty() ? 1 : std::max<int64_t>(1, t.back());
}

int64_t KvBytesChart::maxBytes() const {
    const auto t = byteTicks();
    return t.empty() ? 1 : std::max<int64_t>(1, t.back());
}

QString KvBytesChart::placeholderText() const {
    return tr("KV bytes against tokens in the cache, one line per strategy, appear here after a comparison.");
}

QRectF KvBytesChart::plotArea() const {
    return QRectF(70, 10, std::max(40, width() - 80), std::max(40, height() - 40 - 16 * static_cast<int>((lines_.size() + 1) / 2)));
}

QPointF KvBytesChart::mapPoint(int64_t tokens, int64_t bytes) const {
    const QRectF a = plotArea();
    return {a.left() + a.width() * static_cast<double>(tokens) / static_cast<double>(maxTokens()),
            a.bottom() - a.height() * static_cast<double>(bytes) / static_cast<double>(maxBytes())};
}

void KvBytesChart::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().base());
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    p.setFont(f);
    if (empty()) {
        // No axis without data (an empty axis read "0 B, 0 B, 0 B, 1 B").
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect().adjusted(12, 12, -12, -12), Qt::AlignCenter | Qt::TextWordWrap, placeholderText());
        return;
    }
    const QRectF a = plotArea();
    p.fillRect(a, palette().alternateBase());
    const QColor grid = palette().color(QPalette::Mid);
    const QColor text = palette().text().color();
    const std::vector<int64_t> bytes = byteTicks(), tokens = tokenTicks();
    for (int64_t b : bytes) {
        const double y = mapPoint(0, b).y();
        p.setPen(grid);
        if (b > 0) p.drawLine(QPointF(a.left(), y), QPointF(a.right(), y));
        p.setPen(text);
        p.drawText(QRectF(0, y - 7, 66, 14), Qt::AlignRight | Qt::AlignVCenter, byteSizeText(b));
    }
    for (int64_t t : tokens) {
        const double x = mapPoint(t, 0).x();
        p.drawText(QRectF(x - 40, a.bottom() + 2, 80, 14), Qt::AlignHCenter | Qt::AlignTop, QString("%L1").arg(t));
    }
    p.setPen(text);
    p.drawRect(a);
    p.drawText(QRectF(a.left(), a.bottom() + 14, a.width(), 14), Qt::AlignHCenter | Qt::AlignTop, tr("tokens in the cache"));
    for (const Line& l : lines_) {
        if (l.points.empty()) continue;
        QPainterPath path(mapPoint(l.points.front().first, l.points.front().second));
        for (size_t i = 1; i < l.points.size(); ++i) path.lineTo(mapPoint(l.points[i].first, l.points[i].second));
        p.setPen(QPen(l.color, 2));
        p.setBrush(Qt::NoBrush);
        p.drawPath(path);
    }
    // Legend, two to a row.
    double y = a.bottom() + 32;
    for (size_t i = 0; i < lines_.size(); ++i) {
        const double x = 8 + (i % 2) * (width() / 2.0);
        if (i > 0 && i % 2 == 0) y += 16;
        p.fillRect(QRectF(x, y + 4, 14, 4), lines_[i].color);
        const int64_t last = lines_[i].points.empty() ? 0 : lines_[i].points.back().second;
        p.setPen(palette().text().color());
        p.drawText(QRectF(x + 18, y - 2, width() / 2.0 - 30, 14), Qt::AlignLeft | Qt::AlignVCenter,
                   p.fontMetrics().elidedText(lines_[i].name + " · " + byteSizeText(last), Qt::ElideMiddle,
                                              static_cast<int>(width() / 2.0 - 30)));
    }
}

QString KvBytesChart::toolTipAt(const QPointF& pos) const {
    double best = 12.0;
    QString text;
    for (const Line& l : lines_)
        for (const auto& [t, b] : l.points) {
            const QPointF q = mapPoint(t, b);
            const double d = std::hypot(q.x() - pos.x(), q.y() - pos.y());
            if (d < best) {
                best = d;
                text = tr("%1: %L2 bytes (%3) at %L4 tokens").arg(l.name).arg(b).arg(byteSizeText(b)).arg(t);
            }
        }
    return text;
}

}  // namespace kvchat
