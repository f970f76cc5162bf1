#include "ui/inspector/layer_chart.h"

#include <QPainter>

#include <algorithm>

namespace kvchat {

LayerChart::LayerChart(const QString& objectName, Rows rows, QWidget* parent)
    : InspectorChart(objectName, parent), rows_(rows) {}

void LayerChart::setTelemetry(const CacheTelemetry& telemetry) {
    const bool resize = telemetry.layers.size() != telemetry_.layers.size();
    telemetry_ = telemetry;
    if (resize) updateGeometry();
    update();
}

QSize LayerChart::sizeHint() const {
    const int n = std::max<int>(1, static_cast<int>(telemetry_.layers.size()));
    return {420, rows_.top + n * (rows_.height + rows_.gap) + rows_.footer};
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
