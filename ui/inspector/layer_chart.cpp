#include "ui/inspector/layer_chart.h"

#include <QEvent>
#include <QFontMetrics>
#include <QPainter>

#include <algorithm>

namespace kvchat {

LayerChart::LayerChart(const QString& objectName, Rows rows, QWidget* parent)
    : InspectorChart(objectName, parent), rows_(rows) {
    QSizePolicy sp = sizePolicy();
    sp.setHeightForWidth(true);
    setSizePolicy(sp);
}

void LayerChart::setTelemetry(const CacheTelemetry& telemetry) {
    const bool resize = telemetry.layers.size() != telemetry_.layers.size();
    telemetry_ = telemetry;
    if (resize) updateGeometry();
    update();
}

QSize LayerChart::sizeHint() const {
    const int n = std::max<int>(1, static_cast<int>(telemetry_.layers.size()));
    return {420, rows_.top + n * (rows_.height + rows_.gap) + std::max(rows_.footer, footerHeight(420))};
}

int LayerChart::heightForWidth(int width) const {
    const int n = std::max<int>(1, static_cast<int>(telemetry_.layers.size()));
    return rows_.top + n * (rows_.height + rows_.gap) + std::max(rows_.footer, footerHeight(width));
}

QFont LayerChart::smallFont() const {
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    return f;
}

std::vector<QPointF> LayerChart::legendPlaces(const QStringList& names, double width, double top, const QFontMetrics& fm) {
    std::vector<QPointF> out;
    double x = 4, y = top;
    for (const QString& name : names) {
        const double w = fm.horizontalAdvance(name);
        if (x > 4 && x + 13 + w > width) x = 4, y += 15;
        out.emplace_back(x, y);
        x += 13 + w + 10;
    }
    return out;
}

int LayerChart::legendLines(const QStringList& names, double width, const QFontMetrics& fm) {
    const auto places = legendPlaces(names, width, 0, fm);
    return places.empty() ? 0 : static_cast<int>(places.back().y() / 15) + 1;
}

void LayerChart::changeEvent(QEvent* e) {
    // Another colour scheme: the kept background is painted again in its colours.
    if (e->type() == QEvent::PaletteChange || e->type() == QEvent::FontChange) {
        background_ = QPixmap();
        updateGeometry();
    }
    InspectorChart::changeEvent(e);
}

QSize LayerChart::minimumSizeHint() const { return {rows_.min_width, sizeHint().height()}; }

bool LayerChart::drawBackground(QPainter& p, const QFont& font) {
    std::vector<bool> kinds;
    kinds.reserve(telemetry_.layers.size());
    for (const LayerTelemetry& l : telemetry_.layers) kinds.push_back(l.kind == "sliding");
    const qreal dpr = devicePixelRatioF();
    const bool stale = background_.size() != size() * dpr || backgroundKinds_ != kinds;
    if (stale) {
        background_ = QPixmap(size() * dpr);
        background_.setDevicePixelRatio(dpr);
        QPainter bp(&background_);
        bp.setFont(font);
        paintBackground(bp);
        backgroundKinds_ = std::move(kinds);
    }
    p.drawPixmap(0, 0, background_);
    return stale;
}

}  // namespace kvchat
