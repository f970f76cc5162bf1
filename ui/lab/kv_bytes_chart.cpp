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

int64_t KvBytesChart::maxTokens() const {
    int64_t m = 1;
    for (const Line& l : lines_)
        for (const auto& p : l.points) m = std::max(m, p.first);
    return m;
}

int64_t KvBytesChart::maxBytes() const {
    int64_t m = 1;
    for (const Line& l : lines_)
        for (const auto& p : l.points) m = std::max(m, p.second);
    return m;
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
    const QRectF a = plotArea();
    p.fillRect(a, QColor(0xfa, 0xfa, 0xfa));
    p.setPen(QColor(0xdd, 0xdd, 0xdd));
    for (int i = 1; i <= 4; ++i) {
        const double y = a.bottom() - a.height() * i / 4.0;
        p.drawLine(QPointF(a.left(), y), QPointF(a.right(), y));
    }
    p.setPen(palette().text().color());
    p.drawRect(a);
    for (int i = 0; i <= 4; ++i) {
        const double y = a.bottom() - a.height() * i / 4.0;
        p.drawText(QRectF(0, y - 7, 66, 14), Qt::AlignRight | Qt::AlignVCenter, byteSizeText(maxBytes() * i / 4));
        const double x = a.left() + a.width() * i / 4.0;
        p.drawText(QRectF(x - 40, a.bottom() + 2, 80, 14), Qt::AlignHCenter | Qt::AlignTop, QString("%L1").arg(maxTokens() * i / 4));
    }
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
